package middleware

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

const graph = "https://graph.test"

func targetOf(t *testing.T, rawURL string) *target {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return newTarget(&http.Request{URL: u})
}

// matchAt runs the matching rules for rawURL at now.
func matchAt(t *testing.T, q *queue, rawURL string, now time.Time) (until time.Time, paced bool) {
	t.Helper()
	tg := targetOf(t, rawURL)
	s := q.state(tg.host, false)
	if s == nil {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return q.match(s, tg, now)
}

// throttle is one throttled answer: the URL, and when its throttle ends
// after t0.
type throttle struct {
	url string
	end time.Duration
}

// throttledFor returns throttles of urls, each ending 10 s after t0.
func throttledFor(urls ...string) []throttle {
	out := make([]throttle, len(urls))
	for i, u := range urls {
		out[i] = throttle{graph + u, 10 * time.Second}
	}
	return out
}

func TestQueueMatch(t *testing.T) {
	const (
		s = time.Second
		// recovery is the queue's; every throttle below ends at 10 s unless
		// told, so it paces until 15 s.
		recovery = 5 * s
	)
	tests := []struct {
		name      string
		throttled []throttle
		probe     string        // URL asked about
		at        time.Duration // after t0
		until     time.Duration // after t0; 0: not held
		paced     bool
	}{
		{"exact URL held", throttledFor("/v1.0/users/a?$select=id"), graph + "/v1.0/users/a?$select=id", s, 10 * s, true},
		{"same path, other query held", throttledFor("/v1.0/me/messages?$top=5"), graph + "/v1.0/me/messages?$top=10", s, 10 * s, true},
		{"same path, no query held", throttledFor("/v1.0/me/messages?$top=5"), graph + "/v1.0/me/messages", s, 10 * s, true},
		{"n=2: 1 throttled sharing two segments is not enough", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/x", s, 0, false},
		{"n=2: 2 throttled sharing two segments are not enough", throttledFor("/v1.0/users/a", "/v1.0/users/b"), graph + "/v1.0/users/x", s, 0, false},
		{"n=2: 3 throttled sharing two segments hold", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/users/x", s, 10 * s, true},
		{"n=2: 3 throttles of one URL count as 3", throttledFor("/v1.0/users/a", "/v1.0/users/a", "/v1.0/users/a"), graph + "/v1.0/users/x", s, 10 * s, true},
		{"n=1: 3 throttled sharing one segment are not enough", throttledFor("/v1.0/a/1", "/v1.0/b/1", "/v1.0/c/1"), graph + "/v1.0/z", s, 0, false},
		{"n=1: 4 throttled sharing one segment hold", throttledFor("/v1.0/a/1", "/v1.0/b/1", "/v1.0/c/1", "/v1.0/d/1"), graph + "/v1.0/z", s, 10 * s, true},
		{"n=3: 1 throttled sharing three segments is not enough", throttledFor("/v1.0/users/a/messages/1"), graph + "/v1.0/users/a/events", s, 0, false},
		{"n=3: 2 throttled sharing three segments hold", throttledFor("/v1.0/users/a/messages/1", "/v1.0/users/a/events/2"), graph + "/v1.0/users/a/calendar", s, 10 * s, true},
		{"n=4: 1 throttled sharing four segments holds", throttledFor("/v1.0/users/a/messages/1"), graph + "/v1.0/users/a/messages/2", s, 10 * s, true},
		{"the rule takes the n-th newest end", []throttle{
			{graph + "/v1.0/users/a", 30 * s}, {graph + "/v1.0/users/b", 10 * s}, {graph + "/v1.0/users/c", 20 * s}, {graph + "/v1.0/users/d", 5 * s},
		}, graph + "/v1.0/users/x", s, 10 * s, true},
		{"the latest matching throttle wins", []throttle{
			{graph + "/v1.0/me/messages?$top=1", 10 * s}, {graph + "/v1.0/me/messages?$top=2", 20 * s},
		}, graph + "/v1.0/me/messages?$top=1", s, 20 * s, true},
		{"another host is never held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"), "https://other.test/v1.0/users/a", s, 0, false},
		{"no shared leading segment is never held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"), graph + "/beta/users/a", s, 0, false},
		{"too few shared segments not held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/groups/x", s, 0, false},
		{"ended: not held but paced", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/a", 10 * s, 0, true},
		{"ended: paced to the end of recovery", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/a", 15*s - time.Nanosecond, 0, true},
		{"after recovery: neither held nor paced", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/a", 15 * s, 0, false},
		{"n=2 rule ended: paced, not held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/users/x", 12 * s, 0, true},
		{"n=2 rule after recovery: not paced", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/users/x", 15 * s, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(clocktest.New(t0), options.QueueOptions{Recovery: recovery})
			for _, th := range tt.throttled {
				q.throttled(targetOf(t, th.url), t0, t0, t0.Add(th.end))
			}
			now := t0.Add(tt.at)
			until, paced := matchAt(t, q, tt.probe, now)
			if tt.until == 0 {
				assert.False(t, until.After(now), "held until %v", until.Sub(t0))
			} else {
				assert.Equal(t, tt.until, until.Sub(t0), "held until")
			}
			assert.Equal(t, tt.paced, paced, "paced")
		})
	}
}

func TestQueueIdle(t *testing.T) {
	q := newQueue(clocktest.New(t0), options.QueueOptions{})
	assert.True(t, idle(q.state("graph.test", false)), "never throttled")
	q.state("graph.test", true).succeeded(t0, "v1.0", &reading{t: t0, read: true})
	assert.True(t, idle(q.state("graph.test", false)), "a success does not wake the queue")
	q.throttled(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(time.Second))
	assert.False(t, idle(q.state("graph.test", false)), "throttled")
	assert.True(t, idle(q.state("other.test", false)), "another host")
}

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
		{"burst per Retry-After", 40, 2 * time.Second, 2, searchStart * 20},
		{"Retry-After below 1 s counts as 1 s", 40, 300 * ms, 1, searchStart * 40},
		{"no success before: one request per period", 0, 4 * time.Second, 4, searchStart * 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			p.settle(tt.successes, t0)
			now := t0.Add(10 * ms)
			end := now.Add(tt.wait)
			p.throttled(t0.Add(5*ms), now, end)

			require.Equal(t, pacerSearching, p.state)
			assert.InDelta(t, tt.period, p.period, 1e-9)
			assert.Equal(t, end, p.start, "the search begins when the throttle ends")
			assert.Equal(t, end, p.next(now), "the first release is at the throttle's end")
			for i, want := range []float64{tt.rate, 2 * tt.rate, 4 * tt.rate, 8 * tt.rate} {
				assert.InDelta(t, want, p.rateAt(end.Add(time.Duration(i)*doubling)), want*1e-9, "rate after %d doublings", i)
			}
			assert.InDelta(t, tt.rate, p.rateAt(now), tt.rate*1e-9, "held: the starting rate")

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
		p.throttled(t0, t0.Add(10*ms), t0.Add(time.Second+10*ms)) // reacted at t0+1.01 s
		return p
	}
	steady := func() *adaptivePacer {
		p := searching()
		for i := range 50 {
			p.sent(p.start.Add(time.Duration(i) * 5 * ms))
		}
		p.throttled(p.start.Add(200*ms), p.start.Add(210*ms), p.start.Add(time.Second))
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
			p.throttled(sent, now, now.Add(time.Second))
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

// fixedPacer releases one request every `every` once it has released one.
type fixedPacer struct {
	every time.Duration
	last  time.Time
}

func (p *fixedPacer) next(time.Time) time.Time {
	if p.last.IsZero() {
		return time.Time{}
	}
	return p.last.Add(p.every)
}
func (p *fixedPacer) sent(now time.Time)                        { p.last = now }
func (p *fixedPacer) succeeded(time.Time, time.Time)            {}
func (p *fixedPacer) settle(int, time.Time)                     {}
func (p *fixedPacer) throttled(time.Time, time.Time, time.Time) {}

// acquired is what one queue.acquire returned, and when.
type acquired struct {
	id  int
	err error
	at  time.Duration // after t0
}

// holders runs queue.acquire calls in a synctest bubble on a fake clock and
// records when each returns. Arrival order is the order of hold calls.
type holders struct {
	t       *testing.T
	q       *queue
	clk     *clocktest.Clock
	inst    *observability.Instruments
	n       int
	cancels []context.CancelFunc
	mu      sync.Mutex
	out     []acquired
}

func newHolders(t *testing.T, o options.QueueOptions) *holders {
	clk := clocktest.New(t0)
	return &holders{t: t, q: newQueue(clk, o), clk: clk, inst: observability.NewInstruments(nil)}
}

// hold starts request id's acquire and waits until it blocks or returns.
func (h *holders) hold(rawURL string, notBefore, deadline time.Time) (id int) {
	h.t.Helper()
	id = h.n
	h.n++
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	h.cancels = append(h.cancels, cancel)
	tg := targetOf(h.t, rawURL)
	go func() {
		obs := observer{inst: h.inst, clock: h.clk}
		err := h.q.acquire(ctx, tg, notBefore, deadline, &obs)
		h.mu.Lock()
		h.out = append(h.out, acquired{id, err, h.clk.Now().Sub(t0)})
		h.mu.Unlock()
	}()
	synctest.Wait()
	return id
}

// done returns the acquires that have returned so far, in order.
func (h *holders) done() []acquired {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.out)
}

// run advances the clock from timer to timer until every acquire returned.
func (h *holders) run() []acquired {
	h.t.Helper()
	for {
		synctest.Wait()
		if len(h.done()) == h.n {
			return h.done()
		}
		p := h.clk.Pending()
		require.NotEmpty(h.t, p, "requests blocked with no timer to wake them")
		h.clk.Advance(p[0])
	}
}

// waiters returns the number of requests held for host.
func (h *holders) waiters(host string) int {
	s := h.q.state(host, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

func TestQueueReleaseOrder(t *testing.T) {
	const s = time.Second
	type hold struct {
		url       string
		notBefore time.Duration // the request's own delay, after t0
	}
	tests := []struct {
		name      string
		throttled []throttle
		held      []hold
		want      []acquired // errors nil
	}{
		{
			"one URL: FIFO at the pacer's pace",
			[]throttle{{graph + "/v1.0/me", 2 * s}},
			[]hold{{graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}},
			[]acquired{{id: 0, at: 2 * s}, {id: 1, at: 2100 * time.Millisecond}, {id: 2, at: 2200 * time.Millisecond}, {id: 3, at: 2300 * time.Millisecond}},
		},
		{
			"every rule held by the same throttles: FIFO",
			[]throttle{{graph + "/v1.0/users/a", 2 * s}, {graph + "/v1.0/users/b", 2 * s}, {graph + "/v1.0/users/c", 2 * s}},
			[]hold{{graph + "/v1.0/users/x", 0}, {graph + "/v1.0/users/a?$select=id", 0}, {graph + "/v1.0/users/b", 0}, {graph + "/v1.0/users/y/manager", 0}},
			[]acquired{{id: 0, at: 2 * s}, {id: 1, at: 2100 * time.Millisecond}, {id: 2, at: 2200 * time.Millisecond}, {id: 3, at: 2300 * time.Millisecond}},
		},
		{
			"a request's own later delay does not hold the others",
			[]throttle{{graph + "/v1.0/me", 2 * s}},
			[]hold{{graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 5 * s}, {graph + "/v1.0/me", 0}},
			[]acquired{{id: 0, at: 2 * s}, {id: 2, at: 2100 * time.Millisecond}, {id: 1, at: 5 * s}},
		},
		{
			"the throttle that ends first releases first",
			[]throttle{{graph + "/v1.0/a", 3 * s}, {graph + "/v1.0/b", 2 * s}},
			[]hold{{graph + "/v1.0/a", 0}, {graph + "/v1.0/b", 0}, {graph + "/v1.0/a", 0}},
			[]acquired{{id: 1, at: 2 * s}, {id: 0, at: 3 * s}, {id: 2, at: 3100 * time.Millisecond}},
		},
		{
			"paced after the throttle ended, not held",
			[]throttle{{graph + "/v1.0/me", 0}},
			[]hold{{graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}},
			[]acquired{{id: 0, at: 0}, {id: 1, at: 100 * time.Millisecond}, {id: 2, at: 200 * time.Millisecond}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
				for _, th := range tt.throttled {
					h.q.throttled(targetOf(t, th.url), t0, t0, t0.Add(th.end))
				}
				for _, w := range tt.held {
					h.hold(w.url, t0.Add(w.notBefore), time.Time{})
				}
				assert.Equal(t, tt.want, h.run())
				assert.Zero(t, h.waiters("graph.test"))
				assert.Empty(t, h.clk.Pending(), "timers left")
			})
		})
	}
}

// TestQueueLongerThrottleWhileHeld checks that held requests see a
// throttle that lasts longer than the one they were held for.
func TestQueueLongerThrottleWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHolders(t, options.QueueOptions{})
		h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
		me := targetOf(t, graph+"/v1.0/me")
		h.q.throttled(me, t0, t0, t0.Add(2*time.Second))
		h.hold(graph+"/v1.0/me", t0, time.Time{})
		h.hold(graph+"/v1.0/me", t0, time.Time{})
		assert.Equal(t, []time.Duration{2 * time.Second}, h.clk.Pending())

		h.clk.Advance(time.Second)
		h.q.throttled(me, t0.Add(time.Second), t0.Add(time.Second), t0.Add(4*time.Second))
		assert.Equal(t, []acquired{{id: 0, at: 4 * time.Second}, {id: 1, at: 4100 * time.Millisecond}}, h.run())
	})
}

// TestQueueReleasePacing checks that after a decrease to a fitted rate the
// queue releases held requests 1/rate apart, along the recovery curve.
func TestQueueReleasePacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHolders(t, options.QueueOptions{})
		me := targetOf(t, graph+"/v1.0/me")
		for range 40 {
			h.q.state("graph.test", true).succeeded(t0, "v1.0", &reading{t: t0.Add(10 * time.Millisecond), read: true})
		}
		// The first throttle starts the search at its end, 1 s later...
		h.q.throttled(me, t0, t0, t0.Add(time.Second))
		p := h.q.state("graph.test", false).pacer.(*adaptivePacer)
		require.Equal(t, pacerSearching, p.state)
		// ...and a throttle of a request released 300 ms into it, at 1.3 s,
		// ends the search with a decrease to the fitted rate.
		for i := range 100 {
			p.sent(t0.Add(time.Second + time.Duration(i)*3*time.Millisecond))
		}
		at := t0.Add(1300 * time.Millisecond)
		h.clk.Advance(at.Sub(t0))
		h.q.throttled(me, at.Add(-time.Millisecond), at, at.Add(time.Second))
		require.Equal(t, pacerSteady, p.state)
		// A bucket of 40 that let 100 requests through in 300 ms refills
		// at (100-40)/0.3 s.
		base := p.base
		require.InEpsilon(t, fitShare*60/0.3, base, 0.03, "fitted rate")

		for range 20 {
			h.hold(graph+"/v1.0/me", at, time.Time{})
		}
		got := h.run()
		require.Len(t, got, 20)
		rate := func(at time.Duration) float64 {
			e := (at - 1300*time.Millisecond).Seconds()
			return base * (1 + cubic*math.Pow(e-math.Cbrt((1-dip)/cubic), 3))
		}
		assert.Equal(t, 2300*time.Millisecond, got[0].at, "the first leaves when the throttle ends")
		for i := 1; i < len(got); i++ {
			assert.Equal(t, i, got[i].id, "FIFO")
			if got[i-1].at == got[0].at {
				// After an idle pacer, up to catchUp of slots leave at once.
				assert.LessOrEqual(t, (got[i].at - got[0].at).Seconds(), catchUp.Seconds()+1/rate(got[i].at))
				continue
			}
			gap := (got[i].at - got[i-1].at).Seconds()
			assert.InDelta(t, 1/rate(got[i].at), gap, 60e-6, "gap before release %d", i)
		}
	})
}

func TestQueueCancelWhileHeld(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name   string
		cancel int
		want   []acquired // after the cancellation
	}{
		{"the head", 0, []acquired{{id: 1, at: 10 * s}, {id: 2, at: 10*s + 100*time.Millisecond}}},
		{"the middle", 1, []acquired{{id: 0, at: 10 * s}, {id: 2, at: 10*s + 100*time.Millisecond}}},
		{"the last", 2, []acquired{{id: 0, at: 10 * s}, {id: 1, at: 10*s + 100*time.Millisecond}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
				h.q.throttled(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(10*s))
				for range 3 {
					h.hold(graph+"/v1.0/me", t0, time.Time{})
				}
				require.Empty(t, h.done(), "all held")
				require.Equal(t, []time.Duration{10 * s}, h.clk.Pending(), "only the head waits on a timer")

				h.cancels[tt.cancel]()
				synctest.Wait()
				assert.Equal(t, []acquired{{id: tt.cancel, err: context.Canceled}}, h.done(), "canceled at once")
				assert.Equal(t, 2, h.waiters("graph.test"), "removed from the queue")
				assert.Equal(t, []time.Duration{10 * s}, h.clk.Pending(), "the new head waits for the throttle's end")

				assert.Equal(t, tt.want, h.run()[1:])
				assert.Zero(t, h.waiters("graph.test"))
				assert.Empty(t, h.clk.Pending(), "timers left")
			})
		})
	}
}

func TestQueueDeadline(t *testing.T) {
	const (
		s  = time.Second
		ms = time.Millisecond
	)
	type hold struct {
		url      string
		deadline time.Duration // after t0; 0: none
	}
	me := graph + "/v1.0/me"
	tests := []struct {
		name string
		end  time.Duration // of the throttle of /v1.0/me
		held []hold
		want []acquired
	}{
		{"released after the deadline: refused at once", 10 * s, []hold{{me, 5 * s}}, []acquired{{id: 0, err: errHoldTooLong}}},
		{"released at the deadline", 10 * s, []hold{{me, 10 * s}}, []acquired{{id: 0, at: 10 * s}}},
		{"released before the deadline", 10 * s, []hold{{me, 15 * s}}, []acquired{{id: 0, at: 10 * s}}},
		{"behind another held request: refused at once", 10 * s, []hold{{me, 0}, {me, 5 * s}}, []acquired{{id: 1, err: errHoldTooLong}, {id: 0, at: 10 * s}}},
		{"paced past the deadline: refused at once", 0, []hold{{me, 0}, {me, 50 * ms}}, []acquired{{id: 0}, {id: 1, err: errHoldTooLong}}},
		{"paced before the deadline", 0, []hold{{me, 0}, {me, 100 * ms}}, []acquired{{id: 0}, {id: 1, at: 100 * ms}}},
		{
			"its turn comes after the deadline: refused at the deadline", 1 * s,
			[]hold{{me, 0}, {me, 0}, {me, 0}, {me, 1150 * ms}},
			[]acquired{{id: 0, at: 1 * s}, {id: 1, at: 1100 * ms}, {id: 3, err: errHoldTooLong, at: 1150 * ms}, {id: 2, at: 1200 * ms}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
				h.q.throttled(targetOf(t, me), t0, t0, t0.Add(tt.end))
				for _, w := range tt.held {
					var deadline time.Time
					if w.deadline > 0 {
						deadline = t0.Add(w.deadline)
					}
					h.hold(w.url, t0, deadline)
				}
				assert.Equal(t, tt.want, h.run())
				assert.Empty(t, h.clk.Pending(), "timers left")
			})
		})
	}
}

// tracked returns what the queue remembers for host: URLs, paths and
// path prefixes, each with the end of its latest throttle.
func tracked(q *queue, host string) (urls, paths, prefixes map[string]time.Time) {
	s := q.state(host, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	urls, paths, prefixes = maps.Clone(s.urls), maps.Clone(s.paths), map[string]time.Time{}
	for k, ends := range s.prefixes {
		prefixes[k] = ends[0]
	}
	return urls, paths, prefixes
}

func TestQueuePrune(t *testing.T) {
	const s = time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name      string
		throttled []throttle // each at t0, or at the end of the one before when later
		now       time.Duration
		extra     throttle // throttled at now
		want      []string // the single segment of each path left, every map alike
	}{
		{
			"under the cap nothing is pruned, expired or not",
			[]throttle{{graph + "/a", s}, {graph + "/b", s}},
			3 * s, throttle{graph + "/c", 4 * s},
			[]string{"a", "b", "c"},
		},
		{
			"over the cap the expired go first",
			[]throttle{{graph + "/a", s}, {graph + "/b", 5 * s}, {graph + "/c", s}, {graph + "/d", 5 * s}},
			2 * s, throttle{graph + "/e", 3 * s},
			[]string{"b", "d", "e"},
		},
		{
			"over the cap with none expired the earliest ends go",
			[]throttle{{graph + "/a", 5 * s}, {graph + "/b", 3 * s}, {graph + "/c", 4 * s}, {graph + "/d", 7 * s}},
			0, throttle{graph + "/e", 6 * s},
			[]string{"a", "d", "e"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A throttle of /x adds one of each kind: the fifth goes over
			// the cap, and pruning keeps a quarter of it of each kind.
			q := newQueue(clocktest.New(t0), options.QueueOptions{MaxTracked: 12, Recovery: s})
			for _, th := range tt.throttled {
				q.throttled(targetOf(t, th.url), t0, t0, at(th.end))
			}
			q.throttled(targetOf(t, tt.extra.url), at(tt.now), at(tt.now), at(tt.extra.end))
			urls, paths, prefixes := tracked(q, "graph.test")
			var keys []string
			for _, k := range tt.want {
				keys = append(keys, "/"+k)
			}
			assert.ElementsMatch(t, keys, slices.Collect(maps.Keys(urls)), "URLs")
			assert.ElementsMatch(t, keys, slices.Collect(maps.Keys(paths)), "paths")
			assert.ElementsMatch(t, tt.want, slices.Collect(maps.Keys(prefixes)), "prefixes")
		})
	}
}

// TestQueueBounded throttles many distinct URLs under one path: the queue
// never remembers more than MaxTracked entries, and forgetting never
// loses the shared prefix that the 5-n rule holds its requests by.
func TestQueueBounded(t *testing.T) {
	const (
		n          = 10_000
		maxTracked = 1024
	)
	q := newQueue(clocktest.New(t0), options.QueueOptions{MaxTracked: maxTracked})
	s := q.state("graph.test", true)
	size := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.urls) + len(s.paths) + len(s.prefixes)
	}
	most := 0
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		url := fmt.Sprintf("%s/v1.0/users/%d", graph, i)
		q.throttled(targetOf(t, url), now, now, now.Add(time.Second))
		most = max(most, size())
		if i < 2 {
			continue
		}
		until, _ := matchAt(t, q, graph+"/v1.0/users/new", now)
		// Held until fewer than 3 of the throttles last: the third newest.
		third := now.Add(-2 * time.Millisecond).Add(time.Second)
		if !assert.Equal(t, third, until, "after %d throttles, /v1.0/users/new is held by the 5-n rule", i+1) {
			break
		}
		until, _ = matchAt(t, q, url, now)
		require.Equal(t, now.Add(time.Second), until, "the latest URL is held")
	}
	assert.LessOrEqual(t, most, maxTracked)
	assert.Greater(t, most, maxTracked*9/10, "the cap is used")
}

// hit is one attempt a fakeServer saw: its URL, and when, after t0.
type hit struct {
	url string
	at  time.Duration
}

// fakeServer is an in-memory RoundTripper on a fake clock: it throttles
// its first attempt for 5 s and lets the others through.
type fakeServer struct {
	clk  *clocktest.Clock
	mu   sync.Mutex
	hits []hit
}

func (s *fakeServer) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits = append(s.hits, hit{req.URL.String(), s.clk.Now().Sub(t0)})
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}
	if len(s.hits) == 1 {
		resp.StatusCode = http.StatusTooManyRequests
		resp.Header.Set("Retry-After", "5")
	}
	return resp, nil
}

func (s *fakeServer) seen() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hits)
}

// TestQueueThroughHandler sends a request that is throttled for 5 s and,
// 1 s later, a second one: held by the queue until the throttle ends when
// it matches and the queue is on for it, else sent at once. A request
// that opts out of the queue still tells it about its throttle.
func TestQueueThroughHandler(t *testing.T) {
	const (
		s    = time.Second
		me   = graph + "/v1.0/users/a"
		held = -1 // the second request is held until the throttle ends
	)
	tests := []struct {
		name      string
		queueOff  bool // handler-wide
		firstOut  bool // the first request opts out
		second    string
		secondOut bool          // the second request opts out
		secondAt  time.Duration // when the server sees it, or held
	}{
		{name: "same URL held", second: me, secondAt: held},
		{name: "same path held", second: me + "?$select=id", secondAt: held},
		{name: "other host not held", second: "https://other.test/v1.0/users/a", secondAt: s},
		{name: "unrelated path not held", second: graph + "/beta/groups", secondAt: s},
		{name: "opted out: not held", second: me, secondOut: true, secondAt: s},
		{name: "an opted-out request's throttle holds the others", firstOut: true, second: me, secondAt: held},
		{name: "queue off: not held", queueOff: true, second: me, secondAt: s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.New(t0)
				srv := &fakeServer{clk: clk}
				immediate := options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) { return 0, a.Retry <= 3 })
				h, err := NewRetryHandler(options.RetryHandlerOptions{Clock: clk, Policy: immediate, Queue: options.QueueOptions{Disabled: tt.queueOff}})
				require.NoError(t, err)
				client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(srv, h)}
				var wg sync.WaitGroup
				send := func(url string, optOut bool) {
					ctx := context.Background()
					if optOut {
						ctx = context.WithValue(ctx, options.Key(), &options.RetryHandlerOptions{Policy: immediate, Queue: options.QueueOptions{Disabled: true}})
					}
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					require.NoError(t, err)
					wg.Go(func() {
						resp, err := client.Do(req)
						if assert.NoError(t, err) {
							assert.Equal(t, http.StatusOK, resp.StatusCode)
							_ = resp.Body.Close()
						}
					})
					synctest.Wait()
				}

				send(me, tt.firstOut)
				require.Equal(t, []hit{{me, 0}}, srv.seen(), "throttled")
				clk.Advance(s)
				send(tt.second, tt.secondOut)
				finished := make(chan struct{})
				go func() { wg.Wait(); close(finished) }()
				for {
					synctest.Wait()
					select {
					case <-finished:
					default:
						p := clk.Pending()
						require.NotEmpty(t, p, "requests blocked with no timer to wake them")
						clk.Advance(p[0])
						continue
					}
					break
				}

				hits := srv.seen()
				require.Len(t, hits, 3)
				if tt.secondAt != held {
					assert.Equal(t, []hit{{me, 0}, {tt.second, s}, {me, 5 * s}}, hits, "sent at once; the throttled one retried after Retry-After")
					return
				}
				assert.Equal(t, []hit{{me, 0}, {me, 5 * s}}, hits[:2], "the throttled one retried after Retry-After")
				assert.Equal(t, tt.second, hits[2].url, "then the held one")
				assert.GreaterOrEqual(t, hits[2].at, 5*s, "held until the throttle ends")
				assert.Less(t, hits[2].at, 6*s, "and released soon after")
			})
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
// bucket that is full when the search begins: the release it throttles,
// told to the pacer latency later (releases going on meanwhile), must
// bring the pacer down to fitShare of the server's rate, however late the
// throttle is heard of. The first wave lasts wave, so that its successes
// are the server's burst and what it refilled meanwhile.
func TestAdaptivePacerFit(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		rate          float64
		burst         int
		latency, wave time.Duration
	}{
		{400, 40, 0, 0},
		{400, 40, 1 * ms, 0},
		{400, 40, 5 * ms, 0},
		{400, 40, 50 * ms, 0},
		{400, 40, 1 * ms, 20 * ms},
		{400, 40, 5 * ms, 50 * ms},
		{100, 10, 0, 0},
		{100, 10, 5 * ms, 20 * ms},
		{1000, 10, 0, 0},
		{1000, 10, 5 * ms, 10 * ms},
		{1000, 200, 5 * ms, 20 * ms},
		{5000, 40, 5 * ms, 0},
		{400, 1, 0, 0},
		{400, 1, 50 * ms, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("R=%v B=%v latency=%v wave=%v", tt.rate, tt.burst, tt.latency, tt.wave), func(t *testing.T) {
			p := newAdaptivePacer(t0)
			// The first wave, sent from t0 on and throttled at its end.
			p.settle(tt.burst+int(tt.rate*tt.wave.Seconds()), t0)
			waveEnd := t0.Add(tt.wave)
			p.throttled(waveEnd, waveEnd.Add(ms), waveEnd.Add(time.Second))
			server := &bucket{rate: tt.rate, burst: float64(tt.burst), tokens: float64(tt.burst), last: p.start}
			var throttled time.Time
			for now := p.next(t0); throttled.IsZero() || now.Before(throttled.Add(tt.latency)); now = p.next(now) {
				p.sent(now)
				if !server.take(now) && throttled.IsZero() {
					throttled = now
				}
			}
			now := throttled.Add(tt.latency)
			p.throttled(throttled, now, now.Add(time.Second))
			require.Equal(t, pacerSteady, p.state)
			// The throttle tells that the bucket held less than a token: the
			// fit resolves the rate to a token over the time it drained,
			// within a few % above the server's rate, never below it.
			assert.GreaterOrEqual(t, p.base, fitShare*tt.rate, "fitted rate")
			assert.LessOrEqual(t, p.base, fitShare*tt.rate*1.07, "fitted rate")
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
			p.throttled(t0, t0.Add(ms), t0.Add(time.Second))
			for i := range tt.releases {
				p.sent(p.start.Add(time.Duration(i) * 2 * ms))
			}
			sent := p.start.Add(tt.sent)
			// A plain decrease, but never below the first wave's successes per period (40/s).
			want := max(backoff*max(p.rate, p.rateAt(sent)), 40)
			p.throttled(sent, sent.Add(ms), sent.Add(time.Second))
			require.Equal(t, pacerSteady, p.state)
			assert.InDelta(t, want, p.base, 1e-9)
			assert.Greater(t, p.base, 35.0, "40 a second or more before the throttle")
		})
	}
}
