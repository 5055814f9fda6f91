package throttle

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdaptivePacerCold(t *testing.T) {
	const ms = time.Millisecond
	p := newAdaptivePacer(t0)
	for _, at := range []time.Duration{0, ms, time.Hour} {
		now := t0.Add(at)
		assert.Equal(t, now, p.next(now), "no pacing before a throttle")
		p.sent(now)
	}
	// The first wave's successes are counted, with the earliest send among
	// them, however they are told; a success alone counts nothing.
	p.settle(30, t0.Add(5*ms))
	p.settle(10, t0)
	p.settle(1, t0.Add(20*ms))
	p.succeeded(t0, t0.Add(30*ms))
	assert.Equal(t, pacerCold, p.state)
	assert.Empty(t, p.releases, "a cold pacer counts no releases")
	assert.Equal(t, 41, p.burst)
	assert.Equal(t, t0, p.waveStart)
}

func TestAdaptivePacerFirstThrottle(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name      string
		successes int
		wait      time.Duration // the throttle's Retry-After
		period    float64       // seconds
		rate      float64       // at the throttle's end
	}{
		{"burst per second, however long the Retry-After", 40, 2 * time.Second, 2, searchStart * 40},
		{"Retry-After below 1 s counts as 1 s", 40, 300 * ms, 1, searchStart * 40},
		{"no success before: one request per second", 0, 4 * time.Second, 4, searchStart * 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(tt.successes, t0)
			now := t0.Add(10 * ms)
			end := now.Add(tt.wait)
			p.throttled(t0.Add(5*ms), now, end, true)

			require.Equal(t, pacerSearching, p.state)
			assert.InDelta(t, tt.period, p.period, 1e-9)
			// Requests sent within two round trips (5 ms each) met the
			// same congestion: the search begins after them, at once and
			// not at the throttle's end, and a token's time later.
			start := now.Add(10 * ms)
			assert.Equal(t, start, p.start, "the search begins two round trips after the throttle")
			first := p.next(now)
			assert.True(t, first.After(start), "the first release waits a token's time")
			assert.False(t, first.After(start.Add(time.Duration(float64(time.Second)/tt.rate))), "at the first rate or sooner")
			assert.InDelta(t, tt.rate, p.rateAt(start), tt.rate*1e-9, "the first rate")
			// It doubles from what it releases (TestAdaptivePacerSearchDoublesOnlyWhenUsed).
			assert.InDelta(t, tt.rate, p.rateAt(start.Add(3*doubling)), tt.rate*1e-9, "nothing released: no doubling")

			// A hold of the throttled path kept the scope back for half its
			// Retry-After: the search starts again from its first rate.
			resumed := start.Add(time.Duration(tt.period * float64(time.Second) / 2))
			p.sent(resumed)
			assert.Equal(t, resumed, p.start, "the search starts again after a hold")
			assert.InDelta(t, tt.rate, p.rate, tt.rate*1e-9, "at its first rate")

			// The first wave's successes that arrive late are the burst
			// too, and raise the starting rate.
			p.settle(1, t0)
			assert.Equal(t, tt.successes+1, p.burst)
		})
	}
}

// TestAdaptivePacerSpacing checks that each release waits until 1/rate has
// passed since the last, at the rate at the release's own time.
func TestAdaptivePacerSpacing(t *testing.T) {
	tests := []struct {
		name string
		p    *adaptivePacer
		rate func(elapsed float64) float64
	}{
		{
			"searching doubles every doubling",
			&adaptivePacer{state: pacerSearching, start: t0, reacted: t0, period: 1, burst: 40},
			func(e float64) float64 { return searchStart * 40 * math.Exp2(e/doubling.Seconds()) },
		},
		{
			"steady recovers along a cubic",
			&adaptivePacer{state: pacerSteady, start: t0, reacted: t0, last: t0, base: 400},
			func(e float64) float64 { return 400 * (1 + cubic*math.Pow(e-math.Cbrt((1-dip)/cubic), 3)) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			now := t0
			prev := time.Time{}
			for i := range 200 {
				at := p.next(now)
				require.False(t, at.Before(now) && i > 0, "release %d in the past", i)
				if !prev.IsZero() {
					gap := at.Sub(prev).Seconds()
					// at is the first time, to 50 µs, at which the gap
					// reaches 1/rate(at).
					want := 1 / tt.rate(at.Sub(t0).Seconds())
					assert.InDelta(t, want, gap, 60e-6, "gap before release %d", i)
				}
				p.sent(at)
				prev, now = at, at
			}
		})
	}
}

func TestAdaptivePacerIgnoresLateThrottles(t *testing.T) {
	const ms = time.Millisecond
	// Answers come 10 ms after their requests: a throttle of a request
	// sent within two round trips of a reaction is ignored too.
	searching := func() *adaptivePacer {
		p := newAdaptivePacer(t0)
		for range 10 {
			p.succeeded(t0, t0.Add(10*ms))
		}
		p.settle(10, t0)
		p.throttled(t0, t0.Add(10*ms), t0.Add(time.Second+10*ms), true) // reacted at t0+1.01 s
		return p
	}
	steady := func() *adaptivePacer {
		p := searching()
		for i := range 50 {
			p.sent(p.start.Add(time.Duration(i) * 5 * ms))
		}
		p.throttled(p.start.Add(200*ms), p.start.Add(210*ms), p.start.Add(time.Second), true)
		require.Equal(t, pacerSteady, p.state)
		return p
	}
	// The estimate the throttle below sees: its own 10 ms, or the
	// previous one decayed.
	window := func(p *adaptivePacer) time.Duration { return 2 * max(10*ms, p.rtt*63/64) }
	tests := []struct {
		name    string
		p       func() *adaptivePacer
		sent    func(p *adaptivePacer) time.Time
		ignored bool
	}{
		{"searching: sent before the release began", searching, func(p *adaptivePacer) time.Time { return p.reacted.Add(-ms) }, true},
		{"searching: sent at the reaction", searching, func(p *adaptivePacer) time.Time { return p.reacted }, true},
		{"searching: sent within two round trips", searching, func(p *adaptivePacer) time.Time { return p.reacted.Add(window(p)) }, true},
		{"searching: sent after", searching, func(p *adaptivePacer) time.Time { return p.reacted.Add(window(p) + ms) }, false},
		{"steady: sent before the decrease", steady, func(p *adaptivePacer) time.Time { return p.reacted.Add(-ms) }, true},
		{"steady: sent at the decrease", steady, func(p *adaptivePacer) time.Time { return p.reacted }, true},
		{"steady: sent within two round trips", steady, func(p *adaptivePacer) time.Time { return p.reacted.Add(window(p)) }, true},
		{"steady: sent after", steady, func(p *adaptivePacer) time.Time { return p.reacted.Add(window(p) + ms) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p()
			sent := tt.sent(p)
			before := *p
			before.releases = slices.Clone(p.releases)
			now := sent.Add(10 * ms)
			p.throttled(sent, now, now.Add(time.Second), true)
			if tt.ignored {
				before.rtt = p.rtt
				assert.Equal(t, before, *p, "the same congestion, seen late: nothing but the round trip changes")
				return
			}
			assert.Equal(t, pacerSteady, p.state, "a decrease")
			assert.Equal(t, now, p.reacted)
			assert.Equal(t, now, p.start)
		})
	}
}

// bucket is a server's token bucket: rate tokens a second, at most burst.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

// take reports whether the bucket lets a request through at now.
func (b *bucket) take(now time.Time) bool {
	b.tokens = min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// TestAdaptivePacerFit runs the pacer's search against a server's token
// bucket that the first wave emptied: the release it throttles, told to
// the pacer latency later (releases going on meanwhile), must bring the
// pacer down to fitShare of the server's rate, however late the throttle
// is heard of. The first wave lasts wave, so that its successes are the
// server's burst and what it refilled meanwhile. The search either goes on
// at once or, when the throttle held the whole scope (one path), starts
// when that hold ends, against a bucket refilled meanwhile.
func TestAdaptivePacerFit(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		rate          float64
		burst         int
		latency, wave time.Duration
		// lo and hi bound the fit, as shares of fitShare of the rate;
		// zero: 0.95 and 1.07.
		lo, hi float64
	}{
		{400, 40, 0, 0, 0, 0},
		{400, 40, 1 * ms, 0, 0, 0},
		{400, 40, 5 * ms, 0, 0, 0},
		{400, 40, 50 * ms, 0, 0, 0},
		{400, 40, 1 * ms, 20 * ms, 0, 0},
		{400, 40, 5 * ms, 50 * ms, 0, 0},
		{100, 10, 0, 0, 0, 0},
		{100, 10, 5 * ms, 20 * ms, 0, 0},
		{1000, 10, 0, 0, 0, 0},
		// A bucket under a tenth of a second of its rate, counted through
		// a wave, is taken for that tenth: the fit reads up to a fifth low.
		{1000, 10, 5 * ms, 10 * ms, 0.8, 0},
		// A search that goes on at once after a long wave may read high;
		// up to a quarter; the next throttle refits it from an empty bucket.
		{1000, 200, 5 * ms, 20 * ms, 0, 1.25},
		{5000, 40, 5 * ms, 0, 0, 0},
		{400, 1, 0, 0, 0, 0},
		{400, 1, 50 * ms, 0, 0, 0},
		// nginx's small zones (a burst of b lets b+1 through at once): a
		// dozen releases a token apart bracket the rate widely, and the
		// top of the bracket read 5 %-19 % high.
		{40, 5, 5 * ms, 0, 0, 1.03},
		{20, 3, 1 * ms, 20 * ms, 0, 1.08},
	}
	for _, tt := range tests {
		for _, held := range []bool{false, true} {
			t.Run(fmt.Sprintf("R=%v B=%v latency=%v wave=%v held=%v", tt.rate, tt.burst, tt.latency, tt.wave, held), func(t *testing.T) {
				p := newAdaptivePacer(t0)
				// The first wave, sent from t0 on and throttled at its end.
				p.settle(tt.burst+int(tt.rate*tt.wave.Seconds()), t0)
				waveEnd := t0.Add(tt.wave)
				p.throttled(waveEnd, waveEnd.Add(ms), waveEnd.Add(time.Second), true)
				server := &bucket{rate: tt.rate, burst: float64(tt.burst), last: waveEnd}
				now := p.next(t0)
				if held {
					now = waveEnd.Add(time.Second)
				}
				var throttled time.Time
				for ; throttled.IsZero() || now.Before(throttled.Add(tt.latency)); now = p.next(now) {
					p.sent(now)
					if !server.take(now) && throttled.IsZero() {
						throttled = now
					}
				}
				now = throttled.Add(tt.latency)
				p.throttled(throttled, now, now.Add(time.Second), true)
				require.Equal(t, pacerSteady, p.state)
				// The throttle tells that the bucket held less than a token:
				// the fit resolves the rate to a token over the time it
				// drained, within a few % of the server's rate.
				lo, hi := cmp.Or(tt.lo, 0.95), cmp.Or(tt.hi, 1.07)
				assert.GreaterOrEqual(t, p.base, fitShare*tt.rate*lo, "fitted rate")
				assert.LessOrEqual(t, p.base, fitShare*tt.rate*hi, "fitted rate")
			})
		}
	}
}

// TestAdaptivePacerSearchFitWithoutANamedWait runs the search against
// the token bucket nginx's limit_req is (a burst of b lets b+1 through),
// after a first wave whose last success the bucket refilled while the
// wave went on, so that the refusal left part of a token: a search whose
// throttle names no wait, and so costs its request the retry policy's 3
// s, must fit under the server's rate, where one naming a wait of a
// second fits the middle of the narrower bracket, over the small zones'
// rates.
func TestAdaptivePacerSearchFitWithoutANamedWait(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		rate, capacity float64
		// The wave: at t0 all but one of capacity, the last gap later.
		gap time.Duration
	}{
		{40, 5, 5 * ms},
		{100, 11, 5 * ms},
		{400, 41, 2 * ms},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("R=%v C=%v", tt.rate, tt.capacity), func(t *testing.T) {
			fits := map[bool]float64{}
			for _, named := range []bool{true, false} {
				wait := time.Second
				if !named {
					wait = 3 * time.Second // the retry policy's delay
				}
				server := &bucket{rate: tt.rate, burst: tt.capacity, tokens: tt.capacity, last: t0}
				p := newAdaptivePacer(t0)
				wave := int(tt.capacity)
				for range wave - 1 {
					require.True(t, server.take(t0))
				}
				last := t0.Add(tt.gap)
				require.True(t, server.take(last), "the wave's last, refilled")
				require.False(t, server.take(last.Add(ms/10)), "the first throttle")
				p.settle(wave, t0)
				p.throttled(last.Add(ms/10), last.Add(ms), last.Add(ms+wait), named)
				var throttled time.Time
				for now := p.next(last.Add(ms)); throttled.IsZero(); now = p.next(now) {
					p.sent(now)
					if !server.take(now) {
						throttled = now
					}
				}
				p.throttled(throttled, throttled.Add(ms), throttled.Add(ms+wait), named)
				require.Equal(t, pacerSteady, p.state)
				fits[named] = p.base
			}
			t.Logf("fit %.1f/s named, %.1f/s not, of %v/s", fits[true], fits[false], tt.rate)
			assert.LessOrEqual(t, fits[false], tt.rate, "the fit without a named wait")
			assert.GreaterOrEqual(t, fits[false], 0.85*fitShare*tt.rate, "the fit without a named wait")
			assert.Less(t, fits[false], fits[true], "leans lower than with one")
		})
	}
}

// TestAdaptivePacerUnexplainedThrottle checks that a throttle the pacer's
// own releases cannot explain (another client, or requests the queue did
// not pace, emptied the server's bucket) is a plain decrease from the rate
// the pacer was releasing at, not a fall to the least rate.
func TestAdaptivePacerUnexplainedThrottle(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name     string
		releases int // 2 ms apart from the search's start
		sent     time.Duration
	}{
		{"two releases into a burst of 40", 2, 10 * ms},
		{"none yet", 0, 5 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(40, t0)
			p.throttled(t0, t0.Add(ms), t0.Add(time.Second), true)
			for i := range tt.releases {
				p.sent(p.start.Add(time.Duration(i) * 2 * ms))
			}
			sent := p.start.Add(tt.sent)
			// A plain decrease, but never below the first wave's successes per period (40/s).
			want := max(backoff*max(p.rate, p.rateAt(sent)), 40)
			p.throttled(sent, sent.Add(ms), sent.Add(time.Second), true)
			require.Equal(t, pacerSteady, p.state)
			assert.InDelta(t, want, p.base, 1e-9)
			assert.Greater(t, p.base, 35.0, "40 a second or more before the throttle")
		})
	}
}

// TestAdaptivePacerFitBoundedByReleases checks that a search whose scope
// had nothing to release, and whose allowed rate grew meanwhile, fits no
// more than twice the rate its releases reached: a few releases that ran
// a small bucket dry say nothing of rates far above theirs.
func TestAdaptivePacerFitBoundedByReleases(t *testing.T) {
	p := newAdaptivePacer(t0)
	p.settle(2, t0)
	p.throttled(t0, t0, t0.Add(time.Second), true) // the search starts at 1 s
	require.Equal(t, pacerSearching, p.state)
	// Nothing to release for 1.2 s: the search stayed at its first rate,
	// which the releases after it may outrun, as a burst of them does.
	at := t0.Add(2200 * time.Millisecond)
	require.InDelta(t, p.searchFrom(), p.rateAt(at), 1e-9)
	for i := range 3 {
		p.sent(at.Add(time.Duration(i) * time.Millisecond))
	}
	p.throttled(at.Add(2*time.Millisecond), at.Add(3*time.Millisecond), at.Add(time.Second), true)
	require.Equal(t, pacerSteady, p.state)
	assert.LessOrEqual(t, p.base, 2*3/peakWindow.Seconds(), "fitted rate")
}

// TestPacerClosedBudget checks that the throttles met while the server
// keeps a budget closed until a time (a fixed window) lower the rate once,
// to half the rate before the decrease that met the closure, whatever
// their number: the pace must be there when the window opens. Throttles
// each after the previous one's wait lower it each time.
func TestPacerClosedBudget(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name   string
		wait   time.Duration // how long each throttle holds its request
		named  bool          // the server named that wait
		closed bool
	}{
		{"window closed for 10 s", 10 * time.Second, true, true},
		{"each throttle's wait over before the next", time.Millisecond, true, false},
		// A bare 429, held for the retry policy's 3 s: the server named
		// no closure, and nginx's limit_req, which names none, is a leaky
		// bucket whose every refusal says the pace is still too high.
		{"the policy's 3 s, no wait named", 3 * time.Second, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(1000, t0)
			p.throttled(ms(0), ms(1), ms(1).Add(tt.wait), tt.named)
			require.Equal(t, pacerSearching, p.state)
			at := 10
			for i := range 20 {
				p.sent(ms(at + i))
			}
			p.throttled(ms(at+10), ms(at+11), ms(at+11).Add(tt.wait), tt.named)
			require.Equal(t, pacerSteady, p.state)
			var rates []float64 // the pace each throttle leaves
			for i := range 10 {
				at += 10
				p.sent(ms(at + i))
				p.throttled(ms(at+i), ms(at+i+1), ms(at+i+1).Add(tt.wait), tt.named)
				rates = append(rates, p.rateAt(ms(at+i+1)))
				if !tt.named {
					assert.False(t, p.shut(ms(at+i+2)), "no closure to shut through")
				}
			}
			assert.Equal(t, tt.closed, p.shut(ms(at+10)), "shut through the closure")
			if tt.closed {
				assert.InDelta(t, rates[1], rates[9], 1e-9, "held at the closure's floor")
				// The search's fit read nothing (its releases went into a
				// closed window): the floor is fitShare of the first
				// wave's 1000 successes a second, not half the search's
				// overshoot.
				assert.InDelta(t, fitShare*1000, rates[9], 1e-6, "the first wave's successes a second")
			} else {
				assert.Less(t, rates[9], rates[0]/8, "each throttle lowers it")
			}
		})
	}
}

// TestPacerClosureFloorAfterAnUnreadSearch checks the floor of the
// closure that a search whose fit read nothing began: the first wave's
// successes a second when the budget counted its wave, half the search's
// rate when it counted none (a mailbox carved out after the wave), where
// one a second let a fit read from a few releases take the pace to half
// a mailbox's rate.
func TestPacerClosureFloorAfterAnUnreadSearch(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, wave := range []int{0, 30} {
		t.Run(fmt.Sprintf("wave %d", wave), func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(wave, t0)
			p.throttled(ms(0), ms(1), ms(1001), true)
			require.Equal(t, pacerSearching, p.state)
			// Two releases, the first served, the second refused:
			// nothing the fit can read.
			p.sent(p.start)
			p.succeeded(p.start, p.start.Add(time.Millisecond/2))
			p.sent(p.start.Add(time.Millisecond))
			sent := p.start.Add(time.Millisecond)
			rate := p.rateAt(sent)
			p.throttled(sent, sent.Add(time.Millisecond), sent.Add(time.Second), true)
			require.Equal(t, pacerSteady, p.state)
			require.False(t, p.closedRead)
			if wave == 0 {
				// Half the pace as the refusal came back, not one a second.
				assert.Greater(t, p.closedFloor, rate/4, "about half the search's rate")
				assert.Less(t, p.closedFloor, rate, "about half the search's rate")
				return
			}
			assert.InDelta(t, float64(wave), p.closedFloor, 1e-9, "the first wave's successes a second")
		})
	}
}

// decreasedPacer returns a pacer that searched from a first wave of 100,
// released 20 requests from 10 ms on and was throttled at 26 ms: steady,
// its decrease's wait running until 1026 ms.
func decreasedPacer(t *testing.T) *adaptivePacer {
	t.Helper()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	p := newAdaptivePacer(t0)
	p.settle(100, t0)
	p.throttled(ms(0), ms(1), ms(1001), true)
	for i := range 20 {
		p.sent(ms(10 + i))
	}
	p.throttled(ms(25), ms(26), ms(1026), true)
	require.Equal(t, pacerSteady, p.state)
	return p
}

// TestPacerClimbsBackFromTheClosure checks that a refusal within a
// closure that the fit cannot read drops the pace to the closure's floor
// and that the curve climbs back from there to the rate the decrease
// fitted, where a throttle after the closure fits anew: a sliding window
// still counting an overshoot refuses a release or two after a fit that
// was right, and held at half for the curve's span the pace left a
// quarter of HAProxy's rate unused.
func TestPacerClimbsBackFromTheClosure(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	k := time.Duration(math.Cbrt((1-dip)/cubic) * float64(time.Second))
	tests := []struct {
		name    string
		refused time.Time // when the release after the decrease was refused
		climbs  bool
	}{
		{"refused within the decrease's wait", ms(41), true},
		{"refused after it", ms(1041), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decreasedPacer(t)
			fitted := p.base
			sent := tt.refused.Add(-time.Millisecond)
			p.sent(sent)
			p.throttled(sent, tt.refused, tt.refused.Add(time.Second), true)
			if !tt.climbs {
				assert.Less(t, p.rateAt(tt.refused.Add(k)), fitted/2, "a new decrease: the pace stays down")
				return
			}
			assert.InDelta(t, p.closedFloor, p.rateAt(tt.refused), 1e-9, "at the closure's floor")
			assert.Less(t, p.closedFloor, fitted*0.75)
			assert.InDelta(t, fitted, p.rateAt(tt.refused.Add(k)), fitted*1e-6, "back at the fit within the curve's span")
			assert.Greater(t, p.rateAt(tt.refused.Add(k/2)), p.closedFloor+(fitted-p.closedFloor)*0.8, "fast at first")
		})
	}
}

// busyPacer returns a pacer that followed rate from t0 and released at
// every slot of its pace for d, and the time of its last release.
func busyPacer(rate float64, d time.Duration) (*adaptivePacer, time.Time) {
	p := newAdaptivePacer(t0)
	p.follow(rate, t0)
	now := t0
	for now.Before(t0.Add(d)) {
		now = p.next(now)
		p.sent(now)
	}
	return p, now
}

// readDecreasedPacer returns a pacer that followed 400/s, released at its
// pace for 2.5 s (past the curve's span, probing) and was throttled then:
// a decrease whose fit read the rate.
func readDecreasedPacer(t *testing.T) *adaptivePacer {
	t.Helper()
	p, now := busyPacer(400, 2500*time.Millisecond)
	p.throttled(now, now.Add(time.Millisecond), now.Add(time.Second), true)
	require.True(t, p.closedRead, "the decrease's fit read the rate")
	return p
}

// TestPacerBacksOffWithinAReadClosure checks that a refusal within the
// closure of a decrease whose fit read the server's rate lowers the pace
// by a tenth, not to the closure's floor: it is the overshoot the server
// still counts (HAProxy's window for a second, a leaky bucket until it
// drains), and at the floor the pace left a quarter of the window's rate
// unused for the curve's span. A decrease the fit could not read still
// falls to the floor.
func TestPacerBacksOffWithinAReadClosure(t *testing.T) {
	k := time.Duration(math.Cbrt((1-dip)/cubic) * float64(time.Second))
	tests := []struct {
		name     string
		pacer    func(*testing.T) *adaptivePacer
		byATenth bool
	}{
		{"the decrease read the rate", readDecreasedPacer, true},
		{"the decrease could not read it", decreasedPacer, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.pacer(t)
			fitted := p.base
			sent := p.next(p.reacted.Add(40 * time.Millisecond))
			p.sent(sent)
			before := p.rateAt(sent)
			p.throttled(sent, sent.Add(time.Millisecond), sent.Add(time.Second), true)
			refused := sent.Add(time.Millisecond)
			if tt.byATenth {
				assert.InDelta(t, before*backoff, p.rateAt(refused), before*1e-6, "a tenth down")
				assert.Greater(t, p.rateAt(refused), p.closedFloor)
			} else {
				assert.InDelta(t, p.closedFloor, p.rateAt(refused), 1e-9, "at the closure's floor")
			}
			assert.InDelta(t, fitted, p.rateAt(refused.Add(k)), fitted*1e-6, "back at the fit within the curve's span")
		})
	}
}

// TestPacerClosureYieldsToTheServedRate runs a pacer whose decrease
// fitted 2.5 times the server's rate, a leaky bucket at 100/s that names
// no wait (a bare 429 holds its request for the policy's 3 s), against
// that bucket for a second of the decrease's closure. The closure's floor,
// half the pace before the decrease, is above what the server serves:
// held there, the pace met a refusal every 40 ms, each costing its
// request 3 s. What the server served meanwhile is its rate, and the pace
// falls to it. A server that serves faster than the floor keeps it. A
// budget whose callers are busy elsewhere half the time is served what
// it sends: counted over the whole closure, what the server served read
// 96/s, under its 110/s, and the pace fell there; idle half the time,
// the count tells nothing.
func TestPacerClosureYieldsToTheServedRate(t *testing.T) {
	tests := []struct {
		name          string
		serverRate    float64
		idleHalf      bool // nothing to release in every other 100 ms
		maxRefusals   int
		paceAtLeast   float64 // share of the server's rate, after the second
		paceAtMost    float64
		keepsTheFloor bool
	}{
		{"the floor is above the server's rate", 100, false, 7, 0.8, 1.0, false}, // one more while the served span reaches minServedSpan
		{"the server serves above the floor", 200, false, 6, 0, 0, true},
		{"the callers busy elsewhere half the time", 110, true, 6, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, now := busyPacer(250, 500*time.Millisecond)
			p.throttled(now, now.Add(time.Millisecond), now.Add(3*time.Second), true)
			require.Equal(t, now.Add(time.Millisecond), p.closedAt)
			floor := p.closedFloor
			require.Greater(t, floor, 100.0)
			server := bucket{rate: tt.serverRate, burst: 10, last: now}
			refusals, end := 0, now.Add(time.Second)
			for at := p.next(now); at.Before(end); at = p.next(at) {
				if since := at.Sub(now) % (200 * time.Millisecond); tt.idleHalf && since >= 100*time.Millisecond {
					// The request comes when its caller is back.
					at = at.Add(200*time.Millisecond - since)
				}
				p.sent(at)
				if server.take(at) {
					p.succeeded(at, at.Add(time.Millisecond))
					continue
				}
				refusals++
				p.throttled(at, at.Add(time.Millisecond), at.Add(3*time.Second), true)
			}
			assert.LessOrEqual(t, refusals, tt.maxRefusals)
			if tt.idleHalf {
				assert.GreaterOrEqual(t, p.closedFloor, fitShare*tt.serverRate, "no lower than what the server serves")
				return
			}
			if tt.keepsTheFloor {
				assert.Equal(t, floor, p.closedFloor, "served faster than the floor: it stands")
				return
			}
			assert.Less(t, p.closedFloor, floor)
			assert.GreaterOrEqual(t, p.rateAt(end), tt.paceAtLeast*tt.serverRate)
			assert.LessOrEqual(t, p.rateAt(end), tt.paceAtMost*tt.serverRate)
		})
	}
}

// TestPacerBacksOffQuietProbes runs a steady pacer against a token
// bucket until its first probe is throttled, and checks when it probes
// next. A probe that found the server's rate where the fit had put it
// doubles the wait before the next one: each costs its request a
// Retry-After, and for nothing while the rate stands. One that found more
// leaves the wait as it was, so that a rising rate is followed.
func TestPacerBacksOffQuietProbes(t *testing.T) {
	const fitted = 400.0
	k := math.Cbrt((1 - dip) / cubic)
	wait := time.Duration(max(k, probeAfter.Seconds(), 2) * float64(time.Second))
	tests := []struct {
		name       string
		serverRate float64
		quiet      int
		nextProbe  time.Duration // after the probe's throttle
	}{
		{"the rate stood", fitted / fitShare, 1, 2 * wait},
		{"the rate rose by half", 1.5 * fitted / fitShare, 0, wait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.follow(fitted, t0)
			server := bucket{rate: tt.serverRate, burst: 40, tokens: 40, last: t0}
			var refused time.Time
			for at := p.next(t0); at.Before(t0.Add(time.Minute)); at = p.next(at) {
				p.sent(at)
				if server.take(at) {
					p.succeeded(at, at.Add(time.Millisecond))
					continue
				}
				require.True(t, p.probing(at), "refused only above the fit")
				refused = at.Add(time.Millisecond)
				p.throttled(at, refused, refused.Add(time.Second), true)
				break
			}
			require.False(t, refused.IsZero(), "the probe met a throttle")
			assert.Equal(t, tt.quiet, p.quietProbes)
			step := 10 * time.Millisecond
			assert.False(t, p.probing(refused.Add(tt.nextProbe-step)), "no probe before the wait")
			assert.True(t, p.probing(refused.Add(tt.nextProbe+step)), "a probe after it")
		})
	}
}

// TestPacerShutWhileClosed checks that a pace whose releases since a
// decrease the server refused, shutAfter of them in a row, within the wait
// that decrease named, stops until that wait ends but for a probe now and
// then: a closed window serves nothing, and one that counts its refusals
// (HAProxy's stick table) stays closed while they come. A success among
// them, or the wait's end, lets the pace go on; a probe's refusal does not
// lower it.
func TestPacerShutWhileClosed(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name   string
		served bool // one release after the decrease was served
		at     int  // when the next release is asked for, ms
		shut   bool
	}{
		{"every release refused", false, 60, true},
		{"one release served", true, 60, false},
		{"the wait is over", false, 1100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decreasedPacer(t)
			p.sent(ms(40))
			p.throttled(ms(40), ms(41), ms(1041), true)
			if tt.served {
				p.sent(ms(45))
				p.succeeded(ms(45), ms(46))
			}
			p.sent(ms(50))
			p.throttled(ms(50), ms(51), ms(1051), true)
			next := p.next(ms(tt.at))
			if !tt.shut {
				// Within a slot of the closure's floor, the first wave's
				// 100 successes a second.
				assert.False(t, next.After(later(ms(tt.at), ms(61))), "paced, not shut: next %v", next.Sub(t0))
				return
			}
			assert.True(t, next.After(ms(150)) && next.Before(ms(200)), "a probe an eighth of the wait on: next %v", next.Sub(t0))
			base := p.base
			p.sent(next)
			p.throttled(next, next.Add(time.Millisecond), next.Add(time.Second), true)
			assert.Equal(t, base, p.base, "a probe refused says nothing of the rate")
			probe := p.next(next.Add(2 * time.Millisecond))
			assert.True(t, probe.After(next.Add(100*time.Millisecond)), "still shut: next %v", probe.Sub(t0))
			assert.False(t, p.next(ms(1000)).After(ms(1026)), "no later than the wait's end")
		})
	}
}

// shutPacer returns a steady pacer whose decrease named wait, after a
// first wave of burst successes, and that two refusals since shut: its
// closure ends at closed.
func shutPacer(t *testing.T, burst int, wait time.Duration) (p *adaptivePacer, closed time.Time) {
	t.Helper()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	p = newAdaptivePacer(t0)
	p.settle(burst, t0)
	p.throttled(ms(0), ms(1), ms(1).Add(wait), true)
	for i := range 20 {
		p.sent(ms(10 + i))
	}
	p.throttled(ms(25), ms(26), ms(26).Add(wait), true)
	require.Equal(t, pacerSteady, p.state)
	closed = ms(26).Add(wait)
	p.sent(ms(40))
	p.throttled(ms(40), ms(41), closed, true)
	p.sent(ms(50))
	p.throttled(ms(50), ms(51), closed, true)
	require.True(t, p.shut(ms(60)), "shut")
	return p, closed
}

// A shut pace probes a shutProbes-th of its wait apart. Probes a second or
// more apart fall at whole seconds before the closure's end: a server that
// names its opening in whole seconds, rounded up, then holds a refused
// probe's request to the closure's end, not past it.
func TestPacerProbesEndWithTheClosure(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name    string
		wait    time.Duration // the wait the closure's decrease named
		spacing time.Duration
		phased  bool // at whole spacings before the closure's end
	}{
		{"a wait of a second: eighths of it", time.Second, 125 * time.Millisecond, false},
		{"a wait of 10 s: whole seconds", 10 * time.Second, time.Second, true},
		{"a wait of 20 s: whole seconds", 20 * time.Second, 2 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, closed := shutPacer(t, 100, tt.wait)
			now := ms(60)
			for range 3 {
				probe := p.next(now)
				require.True(t, probe.Before(closed), "a probe within the closure: next %v", probe.Sub(t0))
				late := probe.Add(time.Microsecond)
				assert.Equal(t, late, p.next(late), "a wake-up a little late still sends it")
				// The server names a wait rounded up to whole seconds to an
				// opening just before the closure's end.
				named := (closed.Sub(probe) - time.Millisecond + time.Second - 1).Truncate(time.Second)
				if tt.phased {
					assert.Zero(t, closed.Sub(probe)%tt.spacing, "a whole %v before the closure's end: %v", tt.spacing, closed.Sub(probe))
					assert.False(t, probe.Add(named).After(closed), "its request held to the closure's end, no later")
				}
				p.sent(probe)
				p.throttled(probe, probe.Add(time.Millisecond), probe.Add(named), true)
				assert.Greater(t, p.next(probe.Add(2*time.Millisecond)).Sub(probe), tt.spacing/2, "one probe a spacing")
				now = probe.Add(2 * time.Millisecond)
			}
		})
	}
}

// A pace shut through a closure whose end the server named as its opening
// (a refused probe's wait counted down to it: a fixed window) reopens when
// a release is served, even one sent before the wait is over (the window
// named its opening in whole seconds, rounded up), by doubling from where its curve stood, every
// reopenDoubling, so that it takes the window's quota at once. A refusal
// of any of the reopening's releases ends it, back on the curve with no
// decrease: the quota is spent. It ends, too, once it released the first
// wave's successes, what the server ever let through at once. A server
// that names the same wait at every refusal (a bucket, a sliding window,
// a proxy), or a pace served within its wait, reopens on the curve.
func TestPacerReopensAfterAShutClosure(t *testing.T) {
	const (
		none     = iota
		named    // a probe refused with a wait to the closure's end
		constant // a probe refused with the closure's whole wait again
		served   // a probe served
	)
	tests := []struct {
		name     string
		burst    int // the first wave's successes
		probe    int
		early    time.Duration // the first release's, before the closure's end
		releases int           // the reopening's releases, all served
		refused  int           // of them, the one refused, from 1; 0: none
		reopen   bool          // doubling after them
	}{
		{name: "a window that named its opening", burst: 100, probe: named, releases: 3, reopen: true},
		{name: "served before the wait ends", burst: 100, probe: named, early: 100 * time.Millisecond, releases: 3, reopen: true},
		{name: "as many as the first wave", burst: 100, probe: named, releases: 100},
		{name: "a release refused", burst: 100, probe: named, releases: 3, refused: 3},
		{name: "refused once its count ran out", burst: 10, probe: named, releases: 12, refused: 9},
		{name: "the same wait at every refusal", burst: 100, probe: constant, releases: 3},
		{name: "no probe refused", burst: 100, probe: none, releases: 3},
		{name: "served within the wait", burst: 100, probe: served, releases: 3},
	}
	const wait = 10 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, closed := shutPacer(t, tt.burst, wait)
			if tt.probe != none {
				probe := p.next(closed.Add(-wait / 2))
				p.sent(probe)
				answered := probe.Add(time.Millisecond)
				switch tt.probe {
				case named:
					p.throttled(probe, answered, closed, true)
				case constant:
					p.throttled(probe, answered, answered.Add(wait), true)
				case served:
					p.succeeded(probe, answered)
				}
			}
			base := p.base
			now := later(p.next(closed), closed)
			if tt.early > 0 {
				now = closed.Add(-tt.early)
			}
			p.sent(now)
			p.succeeded(now, now.Add(time.Millisecond))
			curve, reopened := p.rateAt(now.Add(time.Millisecond)), p.reopened
			var sent []time.Time
			for range tt.releases {
				now = p.next(now)
				p.sent(now)
				sent = append(sent, now)
			}
			for i, at := range sent {
				if i+1 == tt.refused {
					p.throttled(at, now.Add(time.Millisecond), now.Add(time.Second), true)
					assert.Equal(t, base, p.base, "a reopening refused says nothing new of the rate")
					continue
				}
				p.succeeded(at, now.Add(time.Millisecond))
			}
			after := now.Add(4 * reopenDoubling)
			if tt.reopen {
				require.False(t, reopened.IsZero(), "the first success after the wait reopens")
				// Every two round trips, at most every reopenDoubling: the
				// reopening's answers, all given after its last release,
				// read the round trip long.
				step := p.reopenStep()
				doublings := after.Sub(reopened).Seconds() / step.Seconds()
				assert.InDelta(t, math.Exp2(doublings), p.rateAt(after)/curve, 0.01, "doubling every %v", step)
				return
			}
			assert.Less(t, p.rateAt(after)/curve, 1.5, "on the curve")
			assert.Equal(t, base, p.base, "no decrease")
		})
	}
}

// A steady pace that had nothing to release for half the wait its last
// decrease named at least, and for as long as a bucket of the first
// wave's successes takes to refill at its fit, until that wait ended,
// reopens once the release after the gap is served: it doubles from where its curve stood, every
// reopenDoubling, as a pace shut through a window that named its
// opening does (the requests the throttles held waited out their own
// Retry-After, and the window they waited for opens whole). Refused, that
// release is a decrease as any. A shorter gap, or one that outlasts the
// wait (an outage held the budget), goes on along the curve.
func TestPacerReopensAfterAnIdleWait(t *testing.T) {
	tests := []struct {
		name    string
		wait    time.Duration // named by the decrease
		gap     time.Duration // from the decrease to the next release
		refused bool          // that release
		reopen  bool
	}{
		{name: "idle through the wait", wait: 10 * time.Second, gap: 10 * time.Second, reopen: true},
		{name: "idle over half of it", wait: 10 * time.Second, gap: 6 * time.Second, reopen: true},
		{name: "idle under half of it", wait: 10 * time.Second, gap: 4 * time.Second},
		{name: "a bucket not yet refilled", wait: 300 * time.Millisecond, gap: 200 * time.Millisecond},
		{name: "a bucket refilled", wait: 300 * time.Millisecond, gap: 250 * time.Millisecond, reopen: true},
		{name: "idle past the wait", wait: time.Second, gap: 5 * time.Second},
		{name: "refused after the gap", wait: 10 * time.Second, gap: 10 * time.Second, refused: true},
	}
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(100, t0)
			p.throttled(ms(0), ms(1), ms(1001), true)
			for i := range 20 {
				p.sent(ms(10 + i))
			}
			p.throttled(ms(25), ms(26), ms(26).Add(tt.wait), true)
			require.Equal(t, pacerSteady, p.state)
			require.Less(t, float64(p.burst)/p.base, 0.3, "the bucket refills within 0.3 s at the fit")
			now := ms(26).Add(tt.gap)
			curve, base := p.rateAt(now), p.base
			p.sent(now)
			answered := now.Add(time.Millisecond)
			if tt.refused {
				p.throttled(now, answered, answered.Add(tt.wait), true)
				assert.Less(t, p.base, base, "a decrease")
				next := p.next(answered)
				p.sent(next)
				p.succeeded(next, next.Add(time.Millisecond))
				assert.True(t, p.reopened.IsZero(), "no reopening, even once a later release is served")
				return
			}
			p.succeeded(now, answered)
			after := answered.Add(4 * reopenDoubling)
			if tt.reopen {
				require.Equal(t, answered, p.reopened, "the release's success reopens")
				assert.InDelta(t, 16, p.rateAt(after)/p.reopenFrom, 0.01, "doubling every %v", reopenDoubling)
				assert.Equal(t, p.burst, p.reopenLeft, "at most the first wave's successes")
				return
			}
			assert.True(t, p.reopened.IsZero(), "no reopening")
			assert.Less(t, p.rateAt(after)/curve, 1.5, "on the curve")
		})
	}
}

// A steady pace's curve counts only the time it had something to release:
// after a gap with nothing to release (an outage held the scope, or the
// caller had no work), it resumes where it was, not at a probe that
// doubled through the gap.
func TestAdaptivePacerIdleTimeIsNotProbed(t *testing.T) {
	tests := []struct {
		name string
		gap  time.Duration // with nothing to release
	}{
		{"released at every slot", 0},
		{"idle 5 s, as through an outage", 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Busy for 3 s: every slot taken, the curve past its fit.
			p, now := busyPacer(100, 3*time.Second)
			before := p.rateAt(now) / p.base
			require.Greater(t, before, 1.0, "probing above the fit after 3 s busy")
			now = now.Add(tt.gap)
			p.sent(now)
			after := p.rateAt(now) / p.base
			assert.InDelta(t, before, after, 0.1, "the gap did not advance the probe (2^10 times the fit otherwise)")
		})
	}
}

// A search counts only the time it had something to release, as the
// curve does: requests that wait out their Retry-After leave its slots
// unused, and a search that doubled on meanwhile fitted its next throttle
// from a rate it never used (a mailbox's search reached 3700/s in half a
// second, at 20 releases a second). Nor does it pass twice the rate of
// its last four releases: a request that comes a little after its slot
// takes it all the same (within catchUp), and one of nginx's
// zones, offered about its 40/s, searched to 711/s, where the next burst
// of requests went out at once.
func TestAdaptivePacerSearchDoublesOnlyWhenUsed(t *testing.T) {
	tests := []struct {
		name   string
		every  time.Duration // between releases, at most half the period
		arrive time.Duration // a request this often instead, released at its slot or as it comes
		from1  bool          // a first wave of one success: a search from 4/s
		most   float64       // the search's rate after 400 ms (2 s for arrivals), at most
	}{
		{name: "released at every slot"},
		{name: "released at every slot, from 4/s", from1: true},
		{name: "a release every 50 ms", every: 50 * time.Millisecond, most: 100},
		{name: "a request every 25 ms", arrive: 25 * time.Millisecond, most: 110},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			if tt.from1 {
				p.settle(1, t0)
			} else {
				p.settle(5, t0)
			}
			p.throttled(t0, t0, t0.Add(time.Second), true)
			require.Equal(t, pacerSearching, p.state)
			start := p.searchFrom()
			now := p.start
			if tt.arrive > 0 {
				for at := p.start; at.Before(p.start.Add(2 * time.Second)); at = at.Add(tt.arrive) {
					now = later(p.next(at), at)
					p.sent(now)
				}
				assert.Less(t, p.rateAt(now), tt.most, "from %.0f/s, %v apart", start, tt.arrive)
				return
			}
			for now.Before(p.start.Add(400 * time.Millisecond)) {
				next := p.next(now)
				if tt.every > 0 {
					next = now.Add(tt.every)
				}
				now = next
				p.sent(now)
			}
			if tt.from1 {
				assert.Greater(t, p.rateAt(now), 4*start, "doubling from %.0f/s, every slot taken", start)
				return
			}
			if tt.every == 0 {
				assert.Greater(t, p.rateAt(now), 10*start, "four doublings and more, every slot taken")
				return
			}
			assert.Less(t, p.rateAt(now), tt.most, "from %.0f/s", start)
		})
	}
}

// A pacer whose releases a fleet's schedule spaces stands still: its search
// or probe does not run on while it spaces nothing, so a throttle's plain
// decrease, and the share it gives the fleet, stay near what it knew.
func TestAdaptivePacerStandsStillWhileTheFleetPaces(t *testing.T) {
	tests := []struct {
		name  string
		start func(p *adaptivePacer)
	}{
		{"searching", func(p *adaptivePacer) {
			p.settle(40, t0)
			p.throttled(t0, t0.Add(time.Millisecond), t0.Add(time.Second), true)
		}},
		{"probing", func(p *adaptivePacer) { p.follow(100, t0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			tt.start(p)
			from := later(p.start, t0).Add(50 * time.Millisecond)
			p.stood(from)
			before := p.rateAt(from)
			end := from.Add(3 * time.Second)
			for at := from; !at.After(end); at = at.Add(10 * time.Millisecond) {
				p.stood(at)
			}
			assert.InDelta(t, before, p.rateAt(end), before/100, "3 s of releases it did not space (2^30 times otherwise)")
			p.throttled(end, end.Add(time.Millisecond), end.Add(time.Second), true)
			assert.LessOrEqual(t, p.base, before, "a plain decrease from what it knew")
		})
	}
}

// TestAdaptivePacerSearchOn checks that a budget split apart searches for
// its pace from the pace it had, not from nothing, and fits the rate the
// split left it from its next throttle.
func TestAdaptivePacerSearchOn(t *testing.T) {
	const ms = time.Millisecond
	t.Run("a cold pacer leaves the new one cold", func(t *testing.T) {
		p := newAdaptivePacer(t0)
		p.searchOn(newAdaptivePacer(t0), t0)
		assert.Equal(t, pacerCold, p.state)
		assert.Equal(t, t0, p.next(t0), "no pacing")
	})
	tests := []struct {
		name   string
		rest   float64 // the server's rate for the budget's rest
		before float64 // the rate the old pace was fitted to
		// tokens is what the server's bucket, of a tenth of a second of
		// rest, holds at the split: the old pace, 3 % under the rate,
		// kept it near empty, or the split left it filling.
		tokens float64
		// hi bounds the next fit, as a share of fitShare of rest: the
		// search takes the bucket for empty at the split, and a bucket
		// that filled reads up to a third high: too high, which the
		// next throttles tell soon, rather than too low, which only a
		// probe seconds later would.
		hi float64
	}{
		{"the split left the rate as it was", 400, 400, 6, 1.1},
		{"the split doubled the rate", 800, 400, 80, 1.35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := newAdaptivePacer(t0)
			old.settle(40, t0)
			old.throttled(t0, t0.Add(ms), t0.Add(time.Second), true)
			server := &bucket{rate: tt.before, burst: 40, last: t0}
			now := old.next(t0)
			for ; ; now = old.next(now) {
				old.sent(now)
				if !server.take(now) {
					break
				}
			}
			old.throttled(now, now.Add(ms), now.Add(time.Second), true)
			require.Equal(t, pacerSteady, old.state)
			split := now.Add(500 * ms)
			had := old.rateAt(split)

			p := newAdaptivePacer(t0)
			p.searchOn(old, split)
			require.Equal(t, pacerSearching, p.state)
			assert.InDelta(t, had/2, p.rateAt(split), searchStart/p.period, "the search starts at half the pace it had")
			used := newAdaptivePacer(t0)
			used.searchOn(old, split)
			for at := used.next(split); at.Before(split.Add(used.step())); at = used.next(at) {
				used.sent(at)
			}
			assert.InDelta(t, 2*used.rateAt(split), used.rateAt(split.Add(used.step())), 1e-6, "and doubles from there as it releases")
			p.throttled(split, split.Add(ms), split.Add(time.Second), true)
			assert.Equal(t, pacerSearching, p.state, "a request out at the split met the old pace's congestion")

			server = &bucket{rate: tt.rest, burst: 0.1 * tt.rest, tokens: tt.tokens, last: split}
			for now = p.next(split); ; now = p.next(now) {
				p.sent(now)
				if !server.take(now) {
					break
				}
			}
			p.throttled(now, now.Add(ms), now.Add(time.Second), true)
			require.Equal(t, pacerSteady, p.state)
			assert.GreaterOrEqual(t, p.base, fitShare*tt.rest*0.95, "fitted rate")
			assert.LessOrEqual(t, p.base, fitShare*tt.rest*tt.hi, "fitted rate")
		})
	}
}

// TestAdaptivePacerWaitsOutTheWave checks that the search's first release
// waits two round trips after the first throttle, or as long as the
// server took to serve a success of the wave when that is longer: the
// wave's last requests may be served that long.
func TestAdaptivePacerWaitsOutTheWave(t *testing.T) {
	const ms = time.Millisecond
	for _, tt := range []struct {
		name string
		took time.Duration // the wave's slowest success; 0: none told
		want time.Duration // from the throttle to the search's start
	}{
		{"no wave told", 0, 10 * ms},
		{"served as fast as refused", 3 * ms, 10 * ms},
		{"served in 50 ms", 50 * ms, 50 * ms},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(40, t0)
			p.waveServed(tt.took)
			now := t0.Add(10 * ms)
			p.throttled(t0.Add(5*ms), now, now.Add(time.Second), true) // a round trip of 5 ms
			require.Equal(t, pacerSearching, p.state)
			assert.Equal(t, now.Add(tt.want), p.start)
		})
	}
}

// TestAdaptivePacerSearchesOnWhileNothingServed checks that a throttle
// of the search met while no success had come back fits nothing: the
// server may still be serving the wave. The search starts again from its
// first rate, and fits at the first throttle after a success.
func TestAdaptivePacerSearchesOnWhileNothingServed(t *testing.T) {
	const ms = time.Millisecond
	p := newAdaptivePacer(t0)
	p.throttled(t0, t0.Add(ms), t0.Add(time.Second), true)
	require.Equal(t, pacerSearching, p.state)
	first := p.searchFrom()

	now := t0.Add(300 * ms)
	p.sent(now.Add(-10 * ms))
	p.throttled(now.Add(-10*ms), now, now.Add(time.Second), true)
	assert.Equal(t, pacerSearching, p.state, "nothing fitted")
	assert.Equal(t, now, p.start, "the search starts again")
	assert.InDelta(t, first, p.rateAt(now), 1e-9, "from its first rate")

	p.succeeded(now.Add(-50*ms), now.Add(ms))
	later := now.Add(300 * ms)
	p.sent(later.Add(-10 * ms))
	p.throttled(later.Add(-10*ms), later, later.Add(time.Second), true)
	assert.Equal(t, pacerSteady, p.state, "fitted once a success came back")
}

// TestPacerClosureOutlastsItsWait checks that a shut pace refused again
// once its wait is over, with nothing served since its decrease, stays
// shut: a sliding window that counts its refusals (HAProxy's stick table)
// stays closed past the Retry-After it named until they decay, and taken
// for a new decrease, its refusal halved the pace for the curve's span
// before the window had served a single request. The probes stay an
// eighth of the first wait apart. A pace served since its decrease fits
// the refusal as a new decrease.
func TestPacerClosureOutlastsItsWait(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name   string
		served bool // a release after the decrease was served
		stands bool
	}{
		{"nothing served since the decrease", false, true},
		{"a release served since", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decreasedPacer(t) // its wait runs until 1026 ms
			p.sent(ms(40))
			p.throttled(ms(40), ms(41), ms(1041), true)
			p.sent(ms(50))
			p.throttled(ms(50), ms(51), ms(1051), true)
			require.True(t, p.shut(ms(60)))
			if tt.served {
				p.sent(ms(500))
				p.succeeded(ms(500), ms(501))
			}
			base, from := p.base, p.from
			p.sent(ms(1030))
			p.throttled(ms(1030), ms(1031), ms(2031), true)
			if !tt.stands {
				assert.False(t, p.shut(ms(1040)), "a new decrease, not shut")
				return
			}
			assert.Equal(t, base, p.base, "the rate stands")
			assert.Equal(t, from, p.from)
			require.True(t, p.shut(ms(1040)), "still closed")
			next := p.next(ms(1040))
			assert.True(t, !next.Before(ms(1150)) && next.Before(ms(1170)), "a probe an eighth of the first wait on: next %v", next.Sub(t0))
		})
	}
}

// TestPacerClimbsBackToWhatWasServed checks that a fit under what the
// server served over the last second starts the curve, which climbs back
// to what was served (fitShare of it), as CUBIC's climbs back to the
// window before its loss: a sliding window still counting the last
// round's overshoot ran a round dry a third under its rate, and the pace
// stayed there for the curve's span. With nothing served over the last
// second, the fit stands.
func TestPacerClimbsBackToWhatWasServed(t *testing.T) {
	k := time.Duration(math.Cbrt((1-dip)/cubic) * float64(time.Second))
	tests := []struct {
		name   string
		served bool // the releases of the last second were served
	}{
		{"served 400 a second over the last second", true},
		{"nothing served over the last second", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.follow(400, t0)
			now := t0
			for now.Before(t0.Add(1500 * time.Millisecond)) {
				now = p.next(now)
				p.sent(now)
				if tt.served {
					p.succeeded(now, now.Add(time.Millisecond))
				}
			}
			// A decrease that names no wait, then a round at 250 a
			// second that runs dry after 100 ms.
			p.throttled(now, now.Add(time.Millisecond), now.Add(time.Millisecond), true)
			paced := p.rateAt(now.Add(time.Millisecond))
			var at time.Time
			for i := range 25 {
				at = now.Add(time.Millisecond + time.Duration(i+1)*4*time.Millisecond)
				p.sent(at)
				if tt.served {
					p.succeeded(at, at.Add(time.Millisecond))
				}
			}
			p.throttled(at, at.Add(time.Millisecond), at.Add(time.Millisecond), true)
			fitted := p.rateAt(at.Add(time.Millisecond))
			assert.Less(t, fitted, 260.0, "the curve starts from the fit")
			back := p.rateAt(at.Add(k))
			if !tt.served {
				assert.Less(t, back, 260.0, "the fit stands")
				return
			}
			assert.InDelta(t, min(p.delivered.rate(at)*fitShare, paced), back, 1, "back at what was served")
			assert.Greater(t, back, 1.25*fitted)
		})
	}
}

// TestPacerRefitsFromAFewReleases runs a steady pace that a search left
// above the server's rate (its first wave undercounted: 2 of a burst of 5)
// against that server's bucket, behind bare 429s, every slot used, each
// refusal heard of a millisecond later: each round's fit, from the few
// releases since the last refusal, must bring the pace down to the rate
// within a few refusals, and not far under it. Assumed empty at the
// decrease, the bucket made every round read about the pace's own rate,
// and the 40/s bucket refused eight times on the way down from 66/s, as
// nginx's zone did in virtual time.
func TestPacerRefitsFromAFewReleases(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		rate  float64
		burst int
	}{
		{40, 5},
		{100, 11},
		{20, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("R=%v B=%v", tt.rate, tt.burst), func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(2, t0)
			// A bare 429, held for the policy's 3 s: no closure (see
			// TestPacerClosedBudget) stands in the way of the fits.
			wait := 3 * time.Second
			p.throttled(t0, t0.Add(ms), t0.Add(ms+wait), false)
			server := &bucket{rate: tt.rate, burst: float64(tt.burst), last: t0}
			refusals, settled := 0, time.Time{}
			end := t0.Add(5 * time.Second)
			for now := p.next(t0.Add(2 * ms)); now.Before(end); now = p.next(now) {
				p.sent(now)
				if server.take(now) {
					p.succeeded(now, now.Add(ms))
					continue
				}
				if p.state == pacerSteady {
					refusals++
					settled = now
				}
				p.throttled(now, now.Add(ms), now.Add(ms+wait), false)
			}
			require.Equal(t, pacerSteady, p.state)
			t.Logf("%d refusals once steady, the last at %v; pace %.1f/s", refusals, settled.Sub(t0), p.rateAt(end))
			assert.LessOrEqual(t, refusals, 4, "refusals once steady")
			assert.GreaterOrEqual(t, p.rateAt(end), 0.85*tt.rate, "not far under the rate")
		})
	}
}

// TestServedWindowRate reads what a steady 400 a second served, at
// several points of a slot: the rate must be 400 wherever the slot
// stands. Divided by the whole span, a read 2 ms into a slot gave 359,
// which a decrease took for what the server sustained.
func TestServedWindowRate(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration // into the slot the read falls in
	}{
		{"at the start of a slot", 0},
		{"2 ms into a slot", 2 * time.Millisecond},
		{"half a slot in", servedSlot / 2},
		{"at the end of a slot", servedSlot - time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w servedWindow
			start := t0.Truncate(servedSlot)
			end := start.Add(2*time.Second + tt.after)
			for at := start; at.Before(end); at = at.Add(2500 * time.Microsecond) {
				w.add(at)
			}
			assert.InDelta(t, 400, w.rate(end), 4)
		})
	}
}

// TestPacerLateRefusalClimbsBack runs a steady pace whose decrease read
// the server's rate from a round of 25 releases, then refuses a release
// a few slots later, before the releases since can tell a rate: that
// refusal is the decrease's round seen late (nginx's leaky bucket,
// full when it refused, still drains), so the pace drops
// and climbs back to the fit within the curve's span. A second such
// refusal lowers the fit. Taken for a rate, one late refusal behind
// nginx's bare 503s halved the pace of a budget too young to have served
// a second's worth, which then stood there for two policy delays.
func TestPacerLateRefusalClimbsBack(t *testing.T) {
	k := time.Duration(math.Cbrt((1-dip)/cubic) * float64(time.Second))
	tests := []struct {
		name       string
		gap        time.Duration // from the first decrease to the round
		spacing    time.Duration // between the round's releases
		round      int           // releases the decrease's fit reads
		late       int           // refusals, each three slots after the one before
		climbsBack bool
	}{
		{"one late refusal", 0, 4 * time.Millisecond, 25, 1, true},
		{"two late refusals", 0, 4 * time.Millisecond, 25, 2, false},
		// A fit read from 5 releases is a rate give or take a fifth.
		{"one late refusal after a fit read from few releases", 30 * time.Millisecond, 3 * time.Millisecond, 5, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A young pace, too young to have served much over a
			// second: a decrease that names no wait, then a round at 250
			// a second that runs dry after tt.round releases, which the
			// fit reads.
			p := newAdaptivePacer(t0)
			p.follow(400, t0)
			now := t0.Add(10 * time.Millisecond)
			p.throttled(now, now.Add(time.Millisecond), now.Add(3*time.Second), false)
			at := now
			for i := range tt.round {
				at = now.Add(tt.gap + time.Millisecond + time.Duration(i+1)*tt.spacing)
				p.sent(at)
				p.succeeded(at, at.Add(time.Millisecond))
			}
			p.throttled(at, at.Add(time.Millisecond), at.Add(3*time.Second), false)
			fitted := p.base
			for range tt.late {
				for range 3 {
					at = at.Add(4 * time.Millisecond)
					p.sent(at)
				}
				p.throttled(at, at.Add(time.Millisecond), at.Add(3*time.Second), false)
			}
			assert.Less(t, p.rateAt(at.Add(time.Millisecond)), 0.9*fitted, "down at once")
			back := p.rateAt(at.Add(k))
			if tt.climbsBack {
				assert.InDelta(t, fitted, back, 0.01*fitted, "back at the fit")
				return
			}
			assert.Less(t, back, 0.9*fitted, "the fit lowered")
		})
	}
}

// TestPacerProbesSoonerWhenRefusalsCostNoWait checks that a pace fitted
// after 429s that name no wait, whose requests are retried at the pace
// (Queue.AdmitEarly), probes above its fit once the curve has climbed
// back, not after two of the retry policy's delays, which a probe's
// refusal no longer costs; throttles whose requests wait (a named wait,
// or the policy's delay) still space the probes two such waits apart.
func TestPacerProbesSoonerWhenRefusalsCostNoWait(t *testing.T) {
	const (
		fitted = 400.0
		delay  = 3.0 // seconds: the retry policy's, or the server's wait
	)
	k := math.Cbrt((1 - dip) / cubic)
	tests := []struct {
		name   string
		atPace bool
		probe  float64 // seconds after the fit
	}{
		{"bare 429s, retried at the pace", true, max(k, probeAfter.Seconds())},
		{"throttles whose requests wait", false, 2 * delay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.follow(fitted, t0)
			p.period, p.atPace = delay, tt.atPace
			at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
			const step = 0.01
			assert.False(t, p.probing(at(tt.probe-step)), "no probe before %.2f s", tt.probe)
			assert.True(t, p.probing(at(tt.probe+step)), "a probe after %.2f s", tt.probe)
		})
	}
}
