package middleware

import (
	"math"
	"time"
)

// pacer spaces the release of a host's held requests. Its methods are
// called with the host's lock held.
type pacer interface {
	// next returns the earliest time the next request may be released.
	next(now time.Time) time.Time
	// sent records a release at now.
	sent(now time.Time)
	// succeeded records n responses that were not throttled, sent at
	// sent; a zero sent means before the host's first throttle.
	succeeded(sent time.Time, n int)
	// throttled records a throttled response that holds its target until end.
	throttled(sent, now, end time.Time)
}

// Tuning of adaptivePacer, measured with the throttle benchmark (bench/).
const (
	// doubling is how often the rate doubles while it searches for the
	// server's rate after the first throttle.
	doubling = 50 * time.Millisecond
	// slot is the resolution of the release counts the fit replays, and
	// maxSlots how far back they go.
	slot     = 5 * time.Millisecond
	maxSlots = int(30 * time.Second / slot)
	// fitShare is the share of the fitted server rate released at, so that
	// the release stays just under the server's limit.
	fitShare = 0.92
	// backoff is the share of the rate kept after a throttle that the fit
	// cannot explain, and the depth of the CUBIC curve's dip.
	backoff = 0.9
	// cubic scales the CUBIC-style recovery after a backoff: the rate
	// climbs back to the measured rate in cbrt((1-backoff)/cubic) ≈ 3.2 s,
	// stays near it, then probes beyond it ever faster, so that a server
	// whose limit rises, or a rate measured too low, is caught up with.
	cubic = 0.003
	// maxRate bounds the rate, releases per second.
	maxRate = 1e6
)

// adaptivePacer learns the server's sustainable rate from its answers.
//
// Before any throttle it does not pace; it counts successes, and the first
// throttle shows how many requests the server let through at once: its
// burst. Release then starts at that burst per Retry-After period and
// doubles every 50 ms, like TCP's slow start, until the server throttles
// again. The pacer then fits the server's rate: it replays its own releases
// since the search began against a token bucket of the learned burst and
// finds the refill rate at which that bucket would have run dry exactly
// when the throttled request was sent. Release goes on at once at 92 % of
// it (only the throttled target is held, by the queue's rules) and recovers
// along a CUBIC curve: back to the fitted rate in a few seconds, flat near
// it, then probing beyond, so that a server whose limit rises is followed.
// Each later throttle is fitted the same way from the previous one, when
// the server's bucket was empty. A throttle of a request sent before the
// last decrease is the same congestion seen late and is not counted twice.
type adaptivePacer struct {
	state   pacerState
	base    float64   // steady: the fitted rate
	start   time.Time // when the current rate began
	reacted time.Time // last decrease; older sends are ignored
	last    time.Time // the last release
	period  float64   // the first throttle's Retry-After, in seconds
	burst   int       // successes the server allowed before its first throttle
	rate    float64   // rate of the last release
	// releases counts releases per slot since start, to fit the server's
	// rate; stored is what the server's bucket held at start.
	releases []int
	stored   float64
}

type pacerState int

const (
	pacerCold pacerState = iota
	pacerSearching
	pacerSteady
)

func newAdaptivePacer(time.Time) *adaptivePacer { return &adaptivePacer{} }

func (p *adaptivePacer) rateAt(now time.Time) float64 {
	elapsed := max(now.Sub(p.start), 0).Seconds()
	var r float64
	switch p.state {
	case pacerCold:
		return 0
	case pacerSearching:
		// The first wave's successes keep arriving after its first throttle,
		// so the starting rate is read when it is needed.
		r = float64(max(p.burst, 1)) / p.period * math.Exp2(elapsed/doubling.Seconds())
	default:
		k := math.Cbrt((1 - backoff) / cubic)
		r = p.base * (1 + cubic*math.Pow(elapsed-k, 3))
	}
	return min(r, maxRate)
}

// next returns the earliest t >= start with t - last >= 1/rate(t). The
// rate never falls as time goes on, so the interval can be found by
// bisection; a slot fixed at the last release's rate would leave a fast
// rising rate unused.
func (p *adaptivePacer) next(now time.Time) time.Time {
	if p.state == pacerCold {
		return now
	}
	from := later(p.last, p.start)
	if p.last.Before(p.start) || p.state == pacerSearching && p.last.Equal(p.start) && p.rate == 0 {
		return from
	}
	spacing := func(t time.Time) time.Duration { return time.Duration(float64(time.Second) / p.rateAt(t)) }
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
	r := p.rateAt(now)
	if r == 0 {
		return
	}
	p.rate = r
	p.last = now
	if i := int(now.Sub(p.start) / slot); i >= 0 && i < maxSlots {
		for len(p.releases) <= i {
			p.releases = append(p.releases, 0)
		}
		p.releases[i]++
	}
}

func (p *adaptivePacer) succeeded(sent time.Time, n int) {
	if p.state == pacerCold || p.state == pacerSearching && sent.Before(p.reacted) {
		// The first wave's successes, whenever they arrive, are the burst.
		p.burst += n
	}
}

func (p *adaptivePacer) throttled(sent, now, end time.Time) {
	if !sent.After(p.reacted) {
		// Sent before the last decrease (or, for the first wave, before the
		// release began): the same congestion, seen late.
		return
	}
	switch p.state {
	case pacerCold:
		p.period = max(end.Sub(now), time.Second).Seconds()
		p.state = pacerSearching
		p.start = end
		p.reacted = end
		// The server's bucket refills while the first wave is held.
		p.stored = float64(max(p.burst, 1))
	default:
		p.base = max(p.fit(sent), 1)
		p.state = pacerSteady
		p.start = now
		p.reacted = now
		p.stored = 0 // a throttle means the server's bucket is empty
		p.last = now // so the first release waits for a token to refill
	}
	p.releases = p.releases[:0]
}

// fit returns the refill rate at which a token bucket holding p.stored
// tokens at p.start, of capacity p.burst, would first run dry in the slot
// in which the throttled request was sent, given the releases since.
func (p *adaptivePacer) fit(sent time.Time) float64 {
	last := min(int(sent.Sub(p.start)/slot), len(p.releases)-1)
	if last < 0 {
		return p.rate * backoff
	}
	dry := func(rate float64) bool {
		tokens, capacity := p.stored, float64(max(p.burst, 1))
		for i := 0; i <= last; i++ {
			tokens = min(capacity, tokens+rate*slot.Seconds()) - float64(p.releases[i])
			if tokens < 0 {
				return true
			}
		}
		return false
	}
	lo, hi := 0.0, max(p.rate, 1)
	if dry(hi) {
		// Even the last release rate ran it dry: the server's limit is below
		// anything the fit can tell apart; fall back on a plain decrease.
		return p.rate * backoff
	}
	for range 40 {
		mid := (lo + hi) / 2
		if dry(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi * fitShare
}
