package middleware

import (
	"math"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
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
	assert.True(t, q.idle("graph.test"), "never throttled")
	q.succeeded("graph.test", t0, t0)
	assert.True(t, q.idle("graph.test"), "a success does not wake the queue")
	q.throttled(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(time.Second))
	assert.False(t, q.idle("graph.test"), "throttled")
	assert.True(t, q.idle("other.test"), "another host")
}

func TestAdaptivePacerCold(t *testing.T) {
	const ms = time.Millisecond
	p := newAdaptivePacer(t0)
	for _, at := range []time.Duration{0, ms, time.Hour} {
		now := t0.Add(at)
		assert.Equal(t, now, p.next(now), "no pacing before a throttle")
		p.sent(now)
	}
	// A wave sent at t0 is answered from 10 ms on: its successes are the
	// server's burst, whenever they arrive; later ones may be its refill.
	p.succeeded(t0, t0.Add(10*ms))
	p.succeeded(t0.Add(5*ms), t0.Add(20*ms))
	p.succeeded(t0.Add(10*ms), t0.Add(30*ms))
	p.succeeded(t0, t0.Add(time.Second))
	assert.Equal(t, pacerCold, p.state)
	assert.Empty(t, p.releases, "a cold pacer counts no releases")
	assert.Equal(t, 3, p.burst, "successes of requests sent before the first answer")
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
		{"burst per Retry-After", 40, 2 * time.Second, 2, 20},
		{"Retry-After below 1 s counts as 1 s", 40, 300 * ms, 1, 40},
		{"no success before: one request per period", 0, 4 * time.Second, 4, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newAdaptivePacer(t0)
			for range tt.successes {
				p.succeeded(t0, t0.Add(5*ms))
			}
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
			// too, and raise the starting rate; a success sent after the
			// first answer is not.
			p.succeeded(t0, end.Add(ms))
			p.succeeded(end.Add(ms), end.Add(2*ms))
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
			"searching doubles every 50 ms",
			&adaptivePacer{state: pacerSearching, start: t0, reacted: t0, period: 1, burst: 40},
			func(e float64) float64 { return 40 * math.Exp2(e/0.05) },
		},
		{
			"steady recovers along a cubic",
			&adaptivePacer{state: pacerSteady, start: t0, reacted: t0, last: t0, base: 400},
			func(e float64) float64 { return 400 * (1 + 0.003*math.Pow(e-math.Cbrt(0.1/0.003), 3)) },
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
