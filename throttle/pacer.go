package throttle

import (
	"math"
	"slices"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
)

// pacer spaces the release of a host's held requests. Its methods are
// called with the host's lock held.
type pacer interface {
	// next returns the earliest time the next request may be released.
	next(now time.Time) time.Time
	// sent records a release at now.
	sent(now time.Time)
	// succeeded records a response that was not throttled.
	succeeded(sent, now time.Time)
	// settle records n successes of the wave the host's first throttle
	// ended: what the server let through at once.
	settle(n int, start time.Time)
	// throttled records a throttled response that holds its target until
	// end; named says the server named that wait, where a bare 429 leaves
	// it to the retry policy's delay.
	throttled(sent, now, end time.Time, named bool)
}

// spender is a pacer that learns from a budget the server announced as
// spent by an answer that was not throttled.
type spender interface {
	spent(sent, now time.Time)
}

// stander is a pacer that stands still while something else spaces its
// releases: a fleet's schedule.
type stander interface {
	stood(now time.Time)
}

// Tuning of adaptivePacer, measured with the throttle benchmark (bench/).
const (
	// doubling is how often the rate doubles while it searches for the
	// server's rate after the first throttle. The slower the search, the
	// longer it takes to drain the server's bucket and the less an error
	// in the bucket's size skews the fit, for about 0.1 s more of search
	// than at 50 ms (measured in sim_test.go and with bench/).
	doubling = 100 * time.Millisecond
	// searchStart is where the search starts, in the first wave's
	// successes per Retry-After period (at most a second): a server
	// refills at least that (or it would name a longer wait), a long wait
	// overshoots at once and is fitted, and the search ends at its one
	// throttle wherever it starts, so starting two doublings up only
	// saves their time.
	searchStart = 4
	// searchPeriod bounds the period the search's start counts the first
	// wave's successes over: a long Retry-After says when the server will
	// take the throttled requests, not that it refills that slowly.
	searchPeriod = 1.0
	// maxReleases bounds the release times kept for the fit: 30 s at
	// about 500 releases a second.
	maxReleases = 1 << 14
	// recentReleases is how many of its last releases a search counts
	// what it released over: enough to span the gaps of callers that
	// come in bursts, few enough to follow them within a doubling. Over
	// a tenth of a second instead, a search of 4/s saw no release most of
	// the time and never doubled.
	recentReleases = 4
	// minBurstSeconds is the least burst, in seconds of its rate, the fit
	// assumes a server's bucket holds once the pace is steady.
	minBurstSeconds = 0.1
	// catchUp is how far behind its slots the release may run and still
	// catch up, which absorbs timer and scheduling slack.
	catchUp = 10 * time.Millisecond
	// fitShare is the share of the fitted server rate released at, so that
	// the release stays just under the server's limit: the fit lands within
	// a few % above it.
	fitShare = 0.97
	// backoff is the share of the rate kept after a throttle that the fit
	// cannot explain.
	backoff = 0.9
	// trustedReleases is the fewest releases a fit must read the rate
	// from for a refusal after it to be taken for its round seen late
	// rather than for a lower rate (lastRead): the fit counts the tokens
	// the server refilled over the round, give or take one, and under
	// 1/(1-backoff) releases that one is more than a refusal's step.
	trustedReleases = 10
	// dip is where the CUBIC curve starts after a fit, as a share of the
	// fitted rate: the fit is close, so the curve need not fall far.
	dip = 0.97
	// cubic scales the CUBIC-style recovery after a backoff: the rate
	// climbs back to the measured rate in cbrt((1-dip)/cubic) ≈ 2.2 s,
	// stays near it, then probes beyond it ever faster, so that a server
	// whose limit rises, or a rate measured too low, is caught up with.
	cubic = 0.003
	// probeAfter is the least time the pace stays at the fitted rate
	// before it probes above it (at least the first throttle's
	// Retry-After), and probeDoubling how fast the probe's rate then
	// doubles: a server whose rate came back up is followed within about
	// probeAfter + probeDoubling.
	probeAfter    = 500 * time.Millisecond
	probeDoubling = 500 * time.Millisecond
	// maxQuietProbes bounds how many times the wait before a probe
	// doubles, once for each probe in a row that found the server's rate
	// where the last fit put it: each costs its request a Retry-After,
	// and the last one may be the run's last second, for nothing. After
	// four, a server whose rate rose is followed within about 16 times
	// the first wait (35 s for a Retry-After of 1 s).
	maxQuietProbes = 4
	// shutAfter is how many releases in a row, all sent after a decrease
	// and within the wait it named, the server must refuse for the pace
	// to stop until that wait ends: one is the congestion of the
	// decrease's own round, seen late.
	shutAfter = 2
	// shutProbes is how many probes a shut pace sends over the wait it
	// stopped for, at most.
	shutProbes = 8
	// reopenDoubling is how often, at the least, the rate doubles while
	// a pace that was shut through a closure reopens (see reopened): twice
	// the timer slack catchUp absorbs, finer than which a release's slot
	// means little. It doubles no more often than every two round trips,
	// so that a server that reopens gradually refuses about one round
	// trip's releases beyond its rate, a few, before the pace hears of it.
	reopenDoubling = 2 * catchUp
	// leanAfter is the wait past which a refusal costs its request more
	// than the second most servers name (a Retry-After over a second, or
	// the retry policy's delay, 3 s by default, for a throttle that names
	// none): a closure's floor then keeps fitShare under the first
	// wave's rate, and a search's fit, when the server named no wait,
	// leans to the low end of what its releases allow.
	leanAfter = time.Second
	// maxRate bounds the rate, releases per second.
	maxRate = 1e6
)

// servedSpan is the span over which the pacer counts what the server
// served, in servedSlots slots: a second, the period over which the
// windows of rate limiters count (HAProxy's http_req_rate(1s), nginx's
// rates per second, Graph's per-second budgets).
const (
	servedSlots = 10
	servedSpan  = time.Second
	servedSlot  = servedSpan / servedSlots
)

// servedWindow counts successes by the slot of servedSlot their release
// fell in, over the last servedSpan: 120 bytes, whatever the rate.
type servedWindow struct {
	slot  [servedSlots]int64 // the slot each count is of: its start / servedSlot
	count [servedSlots]int32
}

// add counts a success released at sent.
func (w *servedWindow) add(sent time.Time) {
	k := sent.UnixNano() / int64(servedSlot)
	i := k % servedSlots
	if w.slot[i] != k {
		w.slot[i], w.count[i] = k, 0
	}
	w.count[i]++
}

// rate returns the successes per second released within servedSpan up
// to t: over the slots before t's and the part of t's own slot up to t.
// Divided by the whole span, a rate read early in a slot missed most of
// a slot's time: 359/s for a pace of 400/s read 2 ms into one, which a
// decrease then took for what the server sustained.
func (w *servedWindow) rate(t time.Time) float64 {
	k := t.UnixNano() / int64(servedSlot)
	n := 0
	for i := range w.slot {
		if w.slot[i] > k-servedSlots && w.slot[i] <= k {
			n += int(w.count[i])
		}
	}
	span := servedSpan - servedSlot + time.Duration(t.UnixNano()-k*int64(servedSlot))
	return float64(n) / span.Seconds()
}

// adaptivePacer learns the server's sustainable rate from its answers.
//
// Before any throttle it does not pace. The successes of the wave that the
// first throttle ends (the requests to its API sent shortly before it came
// back) are what the server let through: its burst, and what its bucket
// refilled while the wave lasted. Release starts at four times that count
// per Retry-After period (at most a second) and doubles once per round trip (at least 100 ms),
// like TCP's slow start, until the server throttles again, but never past
// twice the rate of its last four releases. The pacer then
// fits the server's rate: it replays its own releases since the search
// began against a token bucket, full at the start, and finds the refill
// rate at which that bucket would have run dry exactly when the throttled
// request was sent; the bucket's size is the wave's count less that rate
// over the wave's span, and the two are solved together. Release goes on at
// once at 97 % of it (only the throttled target is held, by the queue's
// rules) along a CUBIC curve: 3 % under, back to it in about 2 s, flat near
// it, then probing beyond, so that a server whose limit rises is followed.
// Each later throttle is fitted the same way from the previous one, when
// the server's bucket was empty. A throttle of a request sent before the
// last decrease, or within two round trips after it, is the same congestion
// seen late and is not counted twice. Releases are due at their slots, so a
// late timer does not lower the rate.
type adaptivePacer struct {
	state   pacerState
	base    float64   // steady: the fitted rate
	from    float64   // steady: where the curve starts; zero: base·dip
	start   time.Time // when the current rate began
	reacted time.Time // last decrease; older sends are ignored
	last    time.Time // the last release
	period  float64   // the first throttle's Retry-After, in seconds
	// atPace is set while the budget's throttles are 429s that name no
	// wait: their requests are retried at the pace once the server serves
	// again (Queue.AdmitEarly), so a refusal costs its request no
	// Retry-After, and a probe need not wait out one.
	atPace bool
	// burst counts the successes of the first wave, the requests sent
	// shortly before the first throttle came back, from waveStart on: the
	// server's burst and what its bucket refilled while the wave lasted.
	burst     int
	waveStart time.Time
	waveEnd   time.Time // the first throttle
	// waveLast is the last answer to a success of the wave: the server
	// may have served the wave's last requests after its first throttle,
	// from what it refilled meanwhile.
	waveLast time.Time
	// served is set once a success came back, of the wave or of the
	// pace: until then, the server may still be serving the wave.
	served bool
	// waveTook is the longest a success of the wave took to be answered:
	// the wave's last requests, sent as its first throttle came back, may
	// be out that long.
	waveTook time.Duration
	rate     float64 // rate of the last release
	// closed is the end of the wait named by the throttle that last
	// lowered the rate outside such a wait, and closedFloor half the
	// rate before it (after a search whose fit read nothing, the first
	// wave's successes a second): a budget the server closed until a
	// time (a fixed window) throttles whatever is sent until then, and
	// its throttles must not drive the pace to nothing for when it opens.
	closed      time.Time
	closedFloor float64
	// closedWait is the wait the decrease that began the closure named:
	// a shut pace probes a shutProbes-th of it apart, however long the
	// closure outlasts it.
	closedWait time.Duration
	// closedRead is whether the fit of the decrease that began the
	// closure read the server's rate: a refusal within it is then the
	// overshoot the server still counts (a sliding window forgets it over
	// its period, a leaky bucket drains it), not a rate the fit missed.
	closedRead bool
	// closedServed counts the successes of releases sent since the
	// decrease that began the closure (closedAt), from the first of
	// them (sent at servedFrom): what the server delivered while it
	// refused. A server that serves through a closure is not closed but
	// slower than the pace, and what it delivers is its rate; one that
	// counts its refusals (HAProxy's stick table) serves nothing until
	// their count decays, which says nothing of its rate.
	closedAt     time.Time
	servedFrom   time.Time
	closedServed int
	// closedIdle is the time since closedAt that the pace had nothing to
	// release at its slots.
	closedIdle time.Duration
	// refusedRun counts the throttles in a row, since the last success,
	// met within that wait by releases sent after its decrease: a server
	// that refuses every one is closed, not slow.
	refusedRun int
	// shutSince is when the pace last shut (see shut), zero once it
	// reopened: the curve stands still while it is shut, so that it is
	// where the closure left it when the window opens.
	shutSince time.Time
	// closedNamed is whether a refused probe named the closure's end
	// as its own, a wait shorter than the closure's by the time since:
	// the server counts down to when its window opens, where a bucket,
	// a sliding window or a proxy name the same wait at every refusal.
	closedNamed bool
	// reopened is when a pace shut until a closure the server named
	// (closedNamed) was first served (zero: not reopening),
	// reopenFrom the curve's rate then, reopenLeft how many releases the
	// reopening may still make, and reopenLast its last release. A window
	// that names its opening opens whole (a fixed one releases its quota
	// at once), which the curve's rate, right for a bucket, spent 0.5-0.9
	// s releasing where every peer sent it at once. The pace doubles from
	// the curve's rate until the server refuses a release of the
	// reopening, or it made as many as the first wave's successes (what
	// the server ever let through at once); its refusals are the
	// window's quota spent, not a rate, and the curve goes on where it
	// stood.
	reopened   time.Time
	reopenFrom float64
	reopenLeft int
	reopenLast time.Time
	// refilledAt is the release that came after the pace stood idle long
	// enough to find the server's budget refilled (see refilled); zero
	// once a throttle came, or none did. Its success, or a later one's,
	// reopens the pace.
	refilledAt time.Time
	// releases holds the time since start of each release since start, in
	// order, to fit the server's rate.
	releases []time.Duration
	// rtt is a decaying maximum of the time from release to answer:
	// requests released within two of it after a decrease may still meet
	// the congestion of the ones in flight before it.
	rtt time.Duration
	// quietProbes counts the probes in a row whose throttle fitted no
	// more than the rate the probe set out from: the server's rate has
	// not moved, and the next probe waits twice as long.
	quietProbes int
	// lastRead says the last decrease set the pace from a fit that read
	// the server's rate from at least trustedReleases, and no decrease
	// came since.
	lastRead bool
	// idle is the time since start that a steady pace had nothing to
	// release at its slots, which its curve does not count: a rate left
	// unused is no evidence that the server takes it (RFC 7661's rule for
	// a congestion window), and a probe that doubled through an outage
	// would meet the server's return with everything at once.
	idle time.Duration
	// delivered counts the successes of the last servedSpan by release.
	delivered servedWindow
}

type pacerState int

const (
	pacerCold pacerState = iota
	pacerSearching
	pacerSteady
)

func newAdaptivePacer(time.Time) *adaptivePacer { return &adaptivePacer{} }

func (p *adaptivePacer) rateAt(now time.Time) float64 {
	elapsed := max(now.Sub(p.start)-p.idle-p.shutFor(now), 0).Seconds()
	var r float64
	switch p.state {
	case pacerCold:
		return 0
	case pacerSearching:
		// The first wave's successes keep arriving after its first throttle,
		// so the starting rate is read when it is needed.
		// Doubling once per round trip, as TCP's slow start does, keeps the
		// overshoot before the server's answer comes back to a few times.
		step := p.step().Seconds()
		r = p.searchFrom() * math.Exp2(elapsed/step)
		// Doubled from what it released, not from the clock alone: a
		// budget whose callers send under its rate, busy elsewhere, gains
		// nothing from a higher one, and meets its server with a burst
		// at it (RFC 7661's rule for a window the application leaves
		// unused). One of nginx's zones, 40/s with a burst of 4, offered
		// about its rate, searched to 711/s in 2.4 s without a refusal,
		// and then let a burst through whose refusal cost its request the
		// policy's 3 s past the run's end (1.65x-2.0x of the limit, one
		// run in six on loopback).
		r = min(r, max(p.searchFrom(), 2*p.released(now)))
	default:
		// CUBIC's curve, from where the last decrease left the pace back
		// to the fitted rate within k: fast at first, flat near it.
		k := math.Cbrt((1 - dip) / cubic)
		from := p.from
		if from == 0 {
			from = p.base * dip
		}
		r = p.base - (p.base-from)*math.Pow(max(k-elapsed, 0)/k, 3)
		if p.reopenLeft > 0 {
			r = max(r, p.reopenFrom*math.Exp2(now.Sub(p.reopened).Seconds()/p.reopenStep().Seconds()))
		} else if beyond := elapsed - p.probeWait(k); beyond > 0 {
			// Past the fit, probe by doubling: a throttle then holds only
			// the probe that met it, so a server whose rate rose is
			// caught up with within a second or two at the cost of one
			// 429. That 429 costs its request a Retry-After, so probes
			// come no more often than one a Retry-After period
			// (probeWait).
			r = p.base * math.Exp2(beyond/probeDoubling.Seconds())
		}
	}
	return min(r, maxRate)
}

// released returns the rate of the search's last releases by now, up to
// recentReleases of them, over the time from the first of them to now:
// at every slot, close to the rate; left unused, falling.
func (p *adaptivePacer) released(now time.Time) float64 {
	if len(p.releases) >= maxReleases {
		return maxRate // no longer counted
	}
	upto := now.Sub(p.start)
	n := p.releasedBy(upto)
	k := min(n, recentReleases)
	if k == 0 {
		return 0
	}
	span := upto - p.releases[n-k]
	if span <= 0 {
		return maxRate
	}
	return float64(k) / span.Seconds()
}

// releasedBy returns how many of the releases since start came no later
// than upto after it.
func (p *adaptivePacer) releasedBy(upto time.Duration) int {
	n, _ := slices.BinarySearchFunc(p.releases, upto, func(at, upto time.Duration) int {
		if at <= upto {
			return -1
		}
		return 1
	})
	return n
}

// probeWait returns how long, in seconds, the pace stays at or under
// its fit before it probes above it: the curve's span k, at least
// probeAfter and two of the waits a probe's refusal costs its request,
// doubled for each quiet probe (maxQuietProbes at most).
//
// That wait is the Retry-After period, or none where the budget's
// throttles are 429s that name no wait (atPace). Two periods of the
// retry policy's 3 s kept a pace fitted a few % under nginx's rate
// there for 6 s, past the end of most runs: the first wave's fit read
// 366/s-386/s for 400/s, and each run ended at 1.04x-1.09x of the limit;
// in one run in ten, refusals 65 ms apart just after the fit, meeting
// releases that bunched behind a busy CPU, lowered it three times, to
// 272/s, and the run took 1.2x-1.4x.
func (p *adaptivePacer) probeWait(k float64) float64 {
	wait := p.period
	if p.atPace {
		wait = 0
	}
	return max(k, probeAfter.Seconds(), 2*wait) * math.Exp2(float64(min(p.quietProbes, maxQuietProbes)))
}

// probing reports whether the pace at t is a probe above the fit.
func (p *adaptivePacer) probing(t time.Time) bool {
	return p.state == pacerSteady && p.rateAt(t) > p.base
}

// next returns the earliest t >= start with t - last >= 1/rate(t). The
// rate never falls as time goes on, so the interval can be found by
// bisection; a slot fixed at the last release's rate would leave a fast
// rising rate unused.
func (p *adaptivePacer) next(now time.Time) time.Time {
	if p.state == pacerCold {
		return now
	}
	if p.shut(now) {
		// One release a shutProbes-th of the wait asks whether the window
		// opened early, as a sliding one does while its count decays.
		spacing := max(p.closedWait/shutProbes, 2*p.rtt)
		if spacing < time.Second {
			if at := p.last.Add(spacing); at.Before(p.closed) {
				return later(at, now)
			}
			return p.closed
		}
		// Probes a second or more apart fall at whole seconds before the
		// closure's end: a server that names when its window opens, in
		// whole seconds rounded up (a fixed window), then holds a
		// refused probe's request to the closure's end. Sent anywhere
		// else, it is held past it by half a second on average and up
		// to one, for the last request of a run that the opening lets
		// finish (bench scenario (g): 1.05x-1.10x of the limit, against
		// the peers' 1.02x, who wait as told). Phased from the last
		// release, not from now: a wake-up a microsecond late would
		// otherwise find its probe's time passed and wait for the next,
		// one after another, until the wait ends.
		spacing = spacing.Truncate(time.Second)
		if k := p.closed.Sub(p.last.Add(2*p.rtt)) / spacing; k >= 1 {
			return later(p.closed.Add(-k*spacing), now)
		}
		return p.closed
	}
	from := later(p.last, p.start)
	if p.last.Before(p.start) {
		return from
	}
	spacing := func(t time.Time) time.Duration { return durations.FromSeconds(1 / p.rateAt(t)) }
	hi := from.Add(spacing(from))
	lo := from
	for hi.Sub(lo) > 50*time.Microsecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if mid.Sub(from) >= spacing(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func (p *adaptivePacer) sent(now time.Time) {
	if p.state == pacerSearching && now.Sub(later(p.last, p.start)).Seconds() >= p.period/2 {
		// Nothing was released for half a Retry-After: the throttle's own
		// hold kept the scope back (a sparse scope's gaps are shorter),
		// and a search that went on doubling meanwhile would let
		// everything out at once. It starts again from its first rate,
		// against a bucket that had that long to refill.
		p.start, p.last = now, time.Time{}
		p.releases = p.releases[:0]
	}
	if p.state != pacerCold && !p.last.Before(p.start) {
		// Released later than its slot by more than timers lag: nothing
		// was waiting for the slot. A search that doubled on meanwhile
		// would fit its next throttle from a rate it never used: a
		// mailbox whose requests waited out their Retry-After searched to
		// 3700/s in half a second, and its pace then halved a throttle at
		// a time, a second apart, to the 20/s its fits read.
		if unused := now.Sub(p.next(now)) - catchUp; unused > 0 {
			p.idle += unused
			p.closedIdle += unused
			if p.refilled(now, unused) {
				p.refilledAt = now
			}
		}
	}
	r := p.rateAt(now)
	if r == 0 {
		return
	}
	p.rate = r
	if p.reopenLeft > 0 {
		p.reopenLeft--
		p.reopenLast = now
	}
	// The release is due at its slot (computed from the previous one): a
	// wake-up that came late must not push every later slot back, or timer
	// slack alone holds the rate well under the pace. At most catchUp of
	// lag is made up, so an idle queue lets out no more than that at once.
	p.last = later(p.next(now), now.Add(-catchUp))
	if d := now.Sub(p.start); d >= 0 && len(p.releases) < maxReleases {
		p.releases = append(p.releases, d)
	}
}

// refilled reports whether a steady pace, not shut, that had nothing to
// release for unused until now waited out the wait its last decrease
// named, and so may find the server's budget refilled: the gap is half
// that wait at least, and as long as a bucket of the first wave's
// successes takes to refill at the pace's fit, and it ends with the wait
// (the throttled requests, held by their own Retry-After, kept the budget
// idle until then). Served, the release after it reopens the pace (see
// reopened) rather than go on along the curve; refused, it is a decrease
// as any. Behind a fixed window whose first wave left every worker held,
// the curve released the opened window's quota at the fit's 3600/s for
// 0.3 s, where the peers sent it at once (bench scenario (g), 1.04x-1.06x
// of the limit against their 1.01x-1.03x). A gap that outlasts the wait
// has another cause (an outage, callers with nothing to send), and ends
// on the curve: a token bucket's first wave counts what it refilled as
// the wave went, more than it holds, and reopened after a 5 s outage the
// pace met 40 refusals at once (bench scenario (m)).
func (p *adaptivePacer) refilled(now time.Time, unused time.Duration) bool {
	return p.state == pacerSteady && p.reopenLeft == 0 && p.shutSince.IsZero() && p.closedWait > 0 &&
		unused >= p.closedWait/2 && unused.Seconds() >= float64(max(p.burst, 1))/max(p.base, 1) &&
		!now.After(p.closed.Add(2*p.rtt+catchUp))
}

// stood records a release that a fleet's schedule spaced in the pacer's
// place: the time since the pacer's own last release counts as idle, so
// that its curve stands still while it spaces nothing. Running on, a
// search or a probe reaches its ceiling while the fleet paces, and the
// plain decrease of a throttle's fit from there leaves the pacer nothing
// to fall back on when the store fails, and the fleet a process's share
// far above the server's rate.
func (p *adaptivePacer) stood(now time.Time) {
	if p.state == pacerCold {
		return
	}
	if from := later(p.last, p.start); now.After(from) {
		p.idle += now.Sub(from)
	}
	p.last = later(p.last, now)
}

// shut reports whether the server refused every release since the
// decrease whose wait still runs at now, shutAfter of them or more: a
// closed window (a fixed one, or a sliding one that counts its refusals)
// serves nothing until the wait ends, and a release into it only costs
// its request a Retry-After, and the window's count one more.
func (p *adaptivePacer) shut(now time.Time) bool {
	return p.state == pacerSteady && p.refusedRun >= shutAfter && now.Before(p.closed)
}

// shutFor returns how long the pace has been shut by now: until the
// closure's wait ends, or a success reopened it.
func (p *adaptivePacer) shutFor(now time.Time) time.Duration {
	if p.shutSince.IsZero() {
		return 0
	}
	end := now
	if p.closed.Before(end) {
		end = p.closed
	}
	return max(end.Sub(p.shutSince), 0)
}

// searchOn starts p's search at now from half the rate old released at,
// as a first throttle starts it from its wave's successes. The server's
// bucket, which old's pace kept near empty, is taken as empty at now; a
// bucket that filled since reads the fit high, which the next throttle
// tells within the Retry-After. From the whole rate, the search ran a
// near-empty bucket dry within a doubling and its fit read 40 % high;
// from half, it takes one doubling more and reads within a few %. A cold
// old leaves p cold.
func (p *adaptivePacer) searchOn(old *adaptivePacer, now time.Time) {
	r := old.rateAt(now)
	if r == 0 {
		return
	}
	p.state = pacerSearching
	p.period, p.rtt, p.served, p.delivered = old.period, old.rtt, true, old.delivered
	p.burst = max(int(r/2*min(p.period, searchPeriod)/searchStart), 1)
	// Answers to requests out now meet the congestion of the old pace:
	// they are not the search's news.
	p.start, p.waveEnd, p.reacted, p.last = now, now, now, now
}

// searchFrom is the rate the search starts at: searchStart times the
// first wave's successes per Retry-After period.
func (p *adaptivePacer) searchFrom() float64 {
	return searchStart * float64(max(p.burst, 1)) / min(p.period, searchPeriod)
}

// reopenStep is how often a reopening pace doubles its rate: every two
// round trips, at most every reopenDoubling.
func (p *adaptivePacer) reopenStep() time.Duration { return max(reopenDoubling, 2*p.rtt) }

// step is how often the search doubles its rate: once per round trip,
// and no more often than every doubling.
func (p *adaptivePacer) step() time.Duration { return max(doubling, p.rtt) }

// observe updates the round-trip estimate with one answer.
func (p *adaptivePacer) observe(sent, now time.Time) {
	p.rtt = max(now.Sub(sent), p.rtt*63/64)
}

func (p *adaptivePacer) settle(n int, start time.Time) {
	p.burst += n
	p.served = p.served || n > 0
	if !start.IsZero() && (p.waveStart.IsZero() || start.Before(p.waveStart)) {
		p.waveStart = start
	}
}

// waveServed tells p that the server took took to answer a success of
// the wave.
func (p *adaptivePacer) waveServed(took time.Duration) {
	p.waveTook = max(p.waveTook, took)
}

func (p *adaptivePacer) succeeded(sent, now time.Time) {
	p.observe(sent, now)
	p.served = true
	p.delivered.add(sent)
	if p.state == pacerSteady && !sent.Before(p.closedAt) {
		if p.closedServed == 0 || sent.Before(p.servedFrom) {
			p.servedFrom = sent
		}
		p.closedServed++
	}
	if p.state == pacerSteady && sent.After(p.reacted) {
		refilled := !p.refilledAt.IsZero() && !sent.Before(p.refilledAt)
		opens := refilled || p.closedNamed && p.refusedRun >= shutAfter
		if refilled {
			p.refilledAt = time.Time{}
		}
		p.refusedRun = 0
		p.idle += p.shutFor(now)
		p.shutSince = time.Time{}
		if opens {
			p.reopenFrom, p.reopenLeft = p.rateAt(now), max(p.burst, 1)
			p.reopened, p.reopenLast = now, now
		}
	}
	if p.state != pacerCold && sent.Before(p.waveEnd) {
		p.waveLast = later(p.waveLast, now)
	}
}

func (p *adaptivePacer) throttled(sent, now, end time.Time, named bool) {
	p.observe(sent, now)
	if !sent.After(p.reacted.Add(2*p.rtt)) || p.state == pacerSearching && sent.Before(p.start) {
		// Sent before the last decrease (or, for the first wave, before the
		// release began), or so soon after it that it met the requests
		// still in flight: the same congestion, seen late.
		return
	}
	p.refilledAt = time.Time{}
	if !p.reopened.IsZero() && !sent.Before(p.reopened) && !sent.After(p.reopenLast) {
		// The server refused a release of a reopening: the window's
		// quota is spent, or it opened gradually after all, and the
		// curve, which stood where the closure left it, goes on from
		// there. The reopening's releases still out meet the same
		// refusal.
		p.reopened, p.reopenLeft = time.Time{}, 0
		p.reacted = now
		p.last = later(p.last, now)
		return
	}
	if p.state == pacerSearching && !p.served {
		// Refused while no success had come back: the server may still be
		// serving the wave (a concurrency limit refuses while it serves,
		// and Outlook's 4 per mailbox serve in 50 ms what they refuse in
		// one), and what the search released meanwhile says nothing of a
		// rate. Fitted, the search read a fifth of what the caps serve,
		// and the pace stayed there for the curve's span. It starts again
		// from its first rate instead, which it cannot pass while the
		// server serves nothing.
		p.start, p.last, p.reacted = now, now, now
		p.releases = p.releases[:0]
		return
	}
	switch p.state {
	case pacerCold:
		p.period = max(end.Sub(now), time.Second).Seconds()
		p.state = pacerSearching
		p.waveEnd = now
		// The search begins at once, not when the throttle ends: the
		// server's word holds only what it throttled, and the rest of the
		// scope may use what the bucket refills meanwhile.
		// Requests sent within two round trips of it meet the same
		// congestion (the wave may still be reaching the server), and
		// within the time the server took to serve the wave, its last
		// requests still being served (a concurrency limit refuses while
		// it serves, and Outlook's 4 per mailbox serve in 50 ms what they
		// refuse in one): the first release waits that long, so that
		// what it says is news. Sent sooner, one search in three met
		// mailboxes still full, fitted a fifth of what they serve, and
		// held it for the curve's span (2x-7x the physical limit).
		p.start = now.Add(max(2*p.rtt, p.waveTook))
		p.last = p.start
		p.reacted = now
	default:
		// However the fit reads a noisy round, one throttle never more than
		// halves a steady rate, and the search never ends below the first
		// wave's successes per period, which the server already sustained:
		// the pace cannot collapse.
		floor := float64(max(p.burst, 1)) / p.period
		closing := p.state == pacerSteady && named && sent.Before(p.closed)
		if p.state == pacerSteady && !closing && p.refusedRun >= shutAfter {
			// Refused again once the closure's wait is over, with
			// nothing served since its decrease: the server is still
			// closed (a sliding window that counts its refusals opens
			// only once they decay, HAProxy's a third of a second after
			// the Retry-After it named for the first wave). Taken for a
			// new decrease, the refusal halved the pace for the curve's
			// span before the window had served a request. The closure
			// runs on to the new wait, the pace still shut.
			p.closed = later(p.closed, end)
			p.refusedRun++
			p.last = later(p.last, now)
			return
		}
		if closing && p.shut(sent) {
			// A probe of a shut pace, refused: the window is still
			// closed, which says nothing new of its rate, but the wait
			// may tell that it opens whole when it ends.
			if !end.After(p.closed.Add(2*p.rtt+catchUp)) && end.Sub(now) < p.closedWait-catchUp {
				p.closedNamed = true
			}
			p.refusedRun++
			p.last = later(p.last, now)
			return
		}
		switch {
		case closing && p.closedRead:
			// The overshoot drains at what the pace leaves unused: a
			// tenth less drains it within the closure, where the floor
			// left a quarter of the rate unused for the curve's span.
			floor = max(p.closedFloor, p.rateAt(sent)*backoff)
		case closing:
			floor = p.closedFloor
		case p.state == pacerSteady:
			floor = p.rateAt(sent) / 2
		}
		// A refusal that costs its request more than a second leans the
		// pace low; the search's bracket only where the server named no
		// wait (see fit).
		lean := end.Sub(now) > leanAfter
		counted := p.releasedBy(sent.Sub(p.start))
		fit, read := p.fit(sent, lean && !named)
		fit = max(fit, 1)
		if !closing && p.probing(sent) {
			// A probe's throttle: it found more than the last fit only
			// when it fits above that fit's own reading.
			if read && fit <= p.base/fitShare {
				p.quietProbes++
			} else {
				p.quietProbes = 0
			}
		}
		if served, ok := p.servedRate(sent); closing && ok && served < max(fit, floor) {
			// The server served through the closure at a rate below the
			// pace its floor keeps: it is open and slower than that
			// floor, which would hold the pace above it, a refusal after
			// another, until the wait ends. What it served is its rate:
			// empty at the decrease, its bucket gave no more than it
			// refilled, and the refusals since show the pace took all
			// of that.
			fit, floor, read = served, served, true
			p.closedFloor = min(p.closedFloor, served)
		}
		p.from = 0
		// The first refusal after a decrease whose fit read the rate
		// (from trustedReleases at least: one from 4 releases put
		// nginx's 40/s zone at 68/s, and the curve climbed back there),
		// come before the releases since could tell one, is that
		// decrease's round seen late: nginx's leaky bucket, full when it
		// refused, still drains at what the server serves over the pace.
		// It drops the pace to what its fit and floor say, and the curve
		// climbs back to the fit, as within a closure; a second one
		// lowers the fit. Taken
		// for a rate, one such refusal 3 releases after a fit of 357/s
		// halved the pace behind nginx's bare 503s, which then stood at
		// 173/s for the two policy delays before its probe (2.0x of the
		// limit, one run in eight on loopback).
		late := !closing && p.state == pacerSteady && p.lastRead
		p.lastRead = false
		if (closing || late) && !read && max(fit, floor) < p.base {
			// A refusal within the closure that the fit cannot read (too
			// few releases since the decrease to tell a rate) drops the
			// pace to what the fit says, at least the closure's floor,
			// for a window that stays shut, and the curve climbs back
			// from there to the decrease's fit, as CUBIC's climbs back
			// to the window before its loss: one late refusal (a sliding
			// window still counting the overshoot) does not halve the
			// pace for the curve's whole span, and a fixed window opens
			// onto the floor.
			p.from = max(fit, floor)
		} else {
			paced := p.rateAt(sent)
			p.base = max(fit, floor)
			if sustained := min(p.delivered.rate(sent)*fitShare, paced); !closing && p.state == pacerSteady && sustained > p.base {
				// The fit reads under what the server served over its
				// last second: the curve starts from the fit, as
				// CUBIC's starts from its decrease, and climbs back to
				// what was served (never above the pace throttled), as
				// CUBIC's climbs back to the window before the loss. A
				// sliding window still counting the last round's
				// overshoot makes a round that ran dry at a third under
				// its rate, and the pace stayed there for the curve's
				// span; a server whose rate fell throttles the climb,
				// and what it serves falls with it.
				p.from, p.base = p.base, sustained
			}
			p.lastRead = read && counted >= trustedReleases
		}
		searched := p.state == pacerSearching
		p.state = pacerSteady
		p.shutSince, p.reopened, p.reopenLeft = time.Time{}, time.Time{}, 0
		if closing {
			p.refusedRun++
			if p.refusedRun >= shutAfter {
				p.shutSince = now
			}
		} else {
			p.closed, p.closedWait = now, 0
			if named {
				// Only the server's word closes a budget: a throttle that
				// names no wait leaves its end to the retry policy's
				// delay, a client's guess, and the limiter that names
				// none is most often a leaky bucket (nginx's limit_req),
				// whose refusals after a decrease say the pace is still
				// above its rate. Taken for a closure, they held one of
				// nginx's zones at the closure's floor, half the rate a
				// search had overshot to (137/s for 100/s), through a
				// refusal every 40 ms for the policy's 3 s, each costing
				// its request those 3 s (in virtual time).
				p.closed, p.closedWait = end, end.Sub(now)
			}
			p.closedFloor, p.closedRead = max(floor, p.rateAt(sent)/2), read
			if searched && !read && p.burst > 0 {
				// A search doubles until refused: half its rate then is
				// no rate the server showed, and the fit could not read
				// one. The first wave's successes a second (a period, when
				// the server named a shorter one) is: the server let them
				// through at once. Held at half a search's 1450/s, 720/s,
				// HAProxy's window of 400 a second, which counts its
				// refusals, refused the pace through the closure and past
				// it, and a third of the runs took 1.2x-1.35x of the limit;
				// from the first wave's 400 a second, 1.03x-1.06x (in
				// virtual time, the stick table's model). A budget that
				// counted none of its wave (a mailbox carved out after
				// it) has no such rate: floored at one a second, a
				// mailbox of 20/s took a fit of 10.8/s read from six
				// releases within its closure, and 1.86x of its limit.
				// When a refusal costs more than a second (lean), the
				// pace keeps fitShare under it, as under a fit: at the
				// wave's whole 400 a second, the window's own limit, it
				// left no room for a refusal, which the window counts,
				// and behind a Retry-After of 3 s half the runs met one
				// in their last seconds and waited it out (1.5x-1.6x of
				// the limit; under it, 1.11x; in virtual time). On
				// loopback, one process behind HAProxy naming 3 s read
				// 1.08x-1.09x in five runs, 1.07x-1.52x in three at it.
				// Behind a Retry-After of
				// 1 s, under it cost 3 % for the whole run, and the
				// refusals it spares cost a second each: at it, 1.03x.
				p.closedFloor = float64(p.burst) / min(p.period, searchPeriod)
				if lean {
					p.closedFloor *= fitShare
				}
			}
			p.closedAt, p.closedServed, p.closedIdle = now, 0, 0
			p.closedNamed = false
			p.refusedRun = 0
		}
		p.start, p.idle = now, 0
		p.reacted = now
		p.last = now // the server's bucket is empty: wait for a token
	}
	p.releases = p.releases[:0]
}

// minServed is the least count of successes servedRate reads a rate
// from: counted to one success, four read it to within a third, and
// the count, a lower bound, errs below the server's rate.
const minServed = 8

// minServedSpan is the least span servedRate reads a rate over, a slot
// of those the pacer counts what was served by: just after a refusal, a
// sliding window admits the pace's releases in bursts as its count
// decays, and a fast server's eight successes over less tell a burst,
// not a rate. Behind HAProxy's window of 400/s, eight
// successes over 20-30 ms just after a refusal read 270/s-300/s, and the
// pace stayed there, a quarter under the window's rate, until a probe
// near the run's end (1.2x-1.3x of the limit, one run in ten on
// loopback).
const minServedSpan = servedSlot

// servedRate returns the rate at which the server served the releases
// sent since the closure's first success, up to sent, and whether
// enough were served to tell it. The first success's token refilled
// before it, so it counts for no time. Time the pace had nothing to
// release at its slots counts, as it refilled the server's bucket, but
// a bucket smaller than that refill lost the rest: what it served may
// be under its rate by the share of the span the pace stood idle, and it
// tells the rate only while that share is under what a backoff gives up.
// A mailbox of 20/s, its callers busy with other budgets for two thirds
// of its closure, was served 13-15/s over the whole of it, and the pace
// stayed there for the curve's span (bench scenario (e), 1.6x-3.7x of
// the limit in a third of the runs on loopback).
func (p *adaptivePacer) servedRate(sent time.Time) (float64, bool) {
	span := sent.Sub(p.servedFrom).Seconds()
	if p.closedServed < minServed || span < minServedSpan.Seconds() || p.closedIdle.Seconds() > (1-backoff)*span {
		return 0, false
	}
	return float64(p.closedServed-1) / span, true
}

// fit returns the refill rate at which the server's token bucket would
// first run dry at the throttled request's release, given the releases
// since p.start, times fitShare. The bucket is empty at p.start when a
// throttle began the round, full when the search did.
// It replays each release at its own time: counts per interval would
// credit a whole interval's refill before its releases and, once the
// throttle is heard of, count the releases made after the throttled one,
// overestimating the server's rate by a fifth or more. lean says a
// search's fit errs low: its throttle named no wait and costs its
// request more than leanAfter.
func (p *adaptivePacer) fit(sent time.Time, lean bool) (rate float64, read bool) {
	n := p.releasedBy(sent.Sub(p.start))
	// A throttle the fit cannot explain is a plain decrease from the rate
	// the pacer was releasing at.
	plain := max(p.rate, p.rateAt(sent)) * backoff
	if n == 0 {
		return plain, false
	}
	counted := float64(max(p.burst, 1))
	if p.state == pacerSteady {
		// The server's bucket, empty at the last throttle, refills toward
		// its real size, and the burst the first wave showed can be far
		// below it: too small a bucket runs dry at any rate under the
		// small bursts of releases that catch up with their slots. Assume
		// it holds at least a tenth of a second of the rate.
		capacity := max(counted, minBurstSeconds*p.base)
		// It refused a request at p.start: it held under a token then.
		rate, ok := p.between(n, capacity, 0, 1)
		if !ok {
			return plain, false
		}
		return peakCapped(rate, p.peak(n))
	}
	// The search began with the server's bucket full. The first wave's
	// successes are that bucket and what it refilled while the wave
	// lasted, at the very rate being fitted: the two are solved together.
	// The search drains the bucket in a few doublings, so each 1 % of
	// error in the burst is several in the rate.
	span := 0.0
	if !p.waveStart.IsZero() {
		span = max(later(p.waveEnd, p.waveLast).Sub(p.waveStart), 0).Seconds()
	}
	// The bucket, empty at the first throttle, refilled until the search
	// began, at the rate being fitted.
	refill := max(p.start.Sub(p.waveEnd), 0).Seconds()
	burst, rate := counted, 0.0
	// Where the server named its wait, the bottom of the bracket holds
	// no token more (see between): the bucket's size is solved from the
	// wave's count, and a token more read small buckets' searches (20/s
	// with a burst of 3) a fifth low; behind a Retry-After of 3 on a
	// token bucket (bench scenario (f)), two runs in twenty took 1.27x
	// and 1.60x with it, none in twelve without (on loopback). Where it
	// named none and the refusal costs its request the retry policy's
	// delay (lean), a fit over the server's rate meets another within
	// seconds, each as costly: the bracket then spans the token the
	// refusal may have left, as a steady round's does, and errs low.
	// Without it nginx's zones (40/s with a burst of 4, 100/s with 10),
	// which refuse with bare 429s, read 2 %-5 % over their rate, and most
	// runs met a refusal late enough that its 3 s took the zone to
	// 1.6x-2.0x of its limit; with it, 1.1x-1.25x (in virtual time).
	held := 0.0
	if lean {
		held = 1
	}
	for range 5 {
		var ok bool
		if rate, ok = p.between(n, burst, refill, held); !ok {
			return plain, false
		}
		burst = max(counted-rate*span, min(counted, minBurstSeconds*rate), 1)
	}
	if float64(n) < burst {
		// Fewer releases than the bucket that let the wave through: they
		// did not run it dry. One item throttled on its own (locked, or
		// with a budget of its own) says nothing of the scope's rate.
		return plain, false
	}
	return peakCapped(rate, p.peak(n))
}

// peakCapped returns rate, at most peak, times fitShare, and whether the
// releases read it: a rate above their peak is one they cannot tell.
func peakCapped(rate, peak float64) (float64, bool) {
	return min(rate, peak) * fitShare, rate <= peak
}

// peakWindow is the window over which peak measures the release rate.
const peakWindow = 100 * time.Millisecond

// peak returns twice the highest rate the first n releases reached over
// any peakWindow: the most the fit may read from them. The pace a pacer
// allows grows while its scope has nothing to release, and releases at a
// fraction of that pace that still ran a bucket dry say nothing of rates
// far above what they reached.
func (p *adaptivePacer) peak(n int) float64 {
	most, from := 0, 0
	for i, at := range p.releases[:n] {
		for at-p.releases[from] >= peakWindow {
			from++
		}
		most = max(most, i-from+1)
	}
	return 2 * max(float64(most), 1) / peakWindow.Seconds()
}

// between returns the middle of the refill rates that a token bucket of
// capacity, empty refill seconds before p.start, needs to hold the first
// n-1 releases and the first n: the n-th, throttled, ran it dry and the
// ones before did not, so the server's rate lies between the two. The top
// alone, a bound and not a reading, read nginx's small zones 8-11 % over
// their rate (40/s with a burst of 4: a fit from a dozen releases, a
// token apart), which left their bucket at its edge for the whole run; a
// refusal there cost its request the retry policy's 3 s behind a bare
// 429. With the n-th release alone, it returns the top.
//
// held is how much the bucket may have held at p.start, the bottom of
// the bracket assuming it held that much and the top none. A steady
// pace's round starts at a refusal: the bucket held less than a token
// then, anywhere from none to one. Assumed empty, a round of n releases
// a slot apart, each served as the server refilled a token, bracketed
// the rate at the pace's own, whatever the server's rate under it: each
// refusal lowered the pace by fitShare alone, and a 40/s bucket that a
// search had left at 66/s refused eight times on the way down (nginx's
// zone did so in virtual time, each refusal costing its request the
// retry policy's 3 s). From none to one token, the middle reads such a
// round about 1/(2(n-1)) under the pace: three refusals.
func (p *adaptivePacer) between(n int, capacity, refill, held float64) (float64, bool) {
	hi, ok := p.solve(n, capacity, refill, 0)
	if !ok || n < 2 {
		return hi, ok
	}
	if lo, ok := p.solve(n-1, capacity, refill, held); ok && lo < hi {
		return (lo + hi) / 2, true
	}
	return hi, true
}

// solve returns the refill rate at which a token bucket of capacity,
// holding held tokens refill seconds before p.start, first runs dry at
// the n-th release, or false when no rate up to the last release rate
// explains it.
func (p *adaptivePacer) solve(n int, capacity, refill, held float64) (float64, bool) {
	dry := func(rate float64) bool {
		tokens, prev := min(capacity, held+rate*refill), time.Duration(0)
		for _, at := range p.releases[:n] {
			tokens = min(capacity, tokens+rate*(at-prev).Seconds()) - 1
			prev = at
			if tokens < 0 {
				return true
			}
		}
		return false
	}
	lo, hi := 0.0, max(p.rate, 1)
	if dry(hi) {
		// Even the last release rate ran it dry: the server's limit is below
		// anything the fit can tell apart.
		return 0, false
	}
	if !dry(0) {
		// The releases alone never emptied the bucket: other traffic did
		// (another client, requests the queue did not pace). Fitting would
		// find a rate near zero.
		return 0, false
	}
	for range 40 {
		mid := (lo + hi) / 2
		if dry(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}

// spent takes a budget the server announced as spent by the request sent
// at sent, answered at now without a throttle, for a throttle when the
// pace is above what the server sustained: while it searches, or probes
// beyond its fitted rate. At the fitted rate a spent budget is the pace
// doing its job: the server's bucket runs near empty.
func (p *adaptivePacer) spent(sent, now time.Time) {
	if p.state == pacerSteady && p.rateAt(sent) <= p.base {
		return
	}
	p.throttled(sent, now, now, true)
}
