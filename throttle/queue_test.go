package throttle

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

const graph = "https://graph.test"

// throttle is one throttled answer: the URL, and when its throttle ends
// after t0.
type throttle struct {
	url string
	end time.Duration
}

func targetOf(t *testing.T, rawURL string) *target {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return New(nil, options.QueueOptions{}).newTarget(&http.Request{URL: u})
}

// throttleTarget records a throttle of tg as the server's answer would.
func (q *Queue) throttleTarget(tg *target, sent, now, end time.Time) {
	s := q.state(tg.host, true, time.Time{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.activate()
	q.throttled(s, tg, Pass{Sent: sent}, now, end)
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
func (p *fixedPacer) sent(now time.Time)                              { p.last = now }
func (p *fixedPacer) succeeded(time.Time, time.Time)                  {}
func (p *fixedPacer) settle(int, time.Time)                           {}
func (p *fixedPacer) throttled(time.Time, time.Time, time.Time, bool) {}

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
	q       *Queue
	clk     *clocktest.Clock
	n       int
	cancels []context.CancelFunc
	mu      sync.Mutex
	out     []acquired
	paced   []bool // by id: the pass said a budget's pace let it go
}

func newHolders(t *testing.T, o options.QueueOptions) *holders {
	clk := clocktest.New(t0)
	return &holders{t: t, q: New(clk, o), clk: clk}
}

// hold starts request id's acquire and waits until it blocks or returns.
func (h *holders) hold(rawURL string, notBefore, deadline time.Time) (id int) {
	h.t.Helper()
	return h.holdRefused(rawURL, time.Time{}, notBefore, deadline)
}

// holdRefused is hold for the retry of an attempt refused at refused by a
// bare 429 (Queue.AdmitEarly).
func (h *holders) holdRefused(rawURL string, refused, notBefore, deadline time.Time) (id int) {
	h.t.Helper()
	id = h.n
	h.n++
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	h.cancels = append(h.cancels, cancel)
	tg := targetOf(h.t, rawURL)
	go func() {
		p, err := h.q.acquire(ctx, h.q.state(tg.host, true, time.Time{}), tg, refused, notBefore, deadline, nil)
		h.mu.Lock()
		h.out = append(h.out, acquired{id, err, h.clk.Now().Sub(t0)})
		h.paced = append(h.paced, p.Paced())
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
	s := h.q.state(host, false, time.Time{})
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, nd := range s.nodes {
		n += len(nd.waiters)
	}
	return n
}

// TestQueueReleaseOrder checks who waits for what: the server's word
// holds the URL or path it throttled until the time it names, and lets
// its requests go together when that ends (R21); a budget the evidence
// found (requests to one item throttled together, four throttled users)
// paces its requests FIFO and holds none (R22); nothing else waits.
func TestQueueReleaseOrder(t *testing.T) {
	const s = time.Second
	type waiting struct {
		url       string
		notBefore time.Duration // the request's own delay, after t0
	}
	tests := []struct {
		name      string
		throttled []throttle
		together  bool // each URL throttled twice, sent before the first came back
		held      []waiting
		want      []acquired // errors nil; in order where the pace orders them
		ordered   bool
	}{
		{
			"one URL throttled alone: held until the end it names, then let go",
			[]throttle{{graph + "/v1.0/me", 2 * s}}, false,
			[]waiting{{graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}},
			[]acquired{{id: 0, at: 2 * s}, {id: 1, at: 2 * s}, {id: 2, at: 2 * s}}, false,
		},
		{
			"one URL throttled together: a budget, FIFO at its pace",
			[]throttle{{graph + "/v1.0/me", 2 * s}}, true,
			[]waiting{{graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 0}},
			[]acquired{{id: 0, at: 0}, {id: 1, at: 100 * time.Millisecond}, {id: 2, at: 200 * time.Millisecond}, {id: 3, at: 300 * time.Millisecond}}, true,
		},
		{
			"three throttled users: each holds its own path, nothing else waits",
			[]throttle{{graph + "/v1.0/users/a", 2 * s}, {graph + "/v1.0/users/b", 2 * s}, {graph + "/v1.0/users/c", 2 * s}}, false,
			[]waiting{{graph + "/v1.0/users/x", 0}, {graph + "/v1.0/users/a?$select=id", 0}, {graph + "/v1.0/users/b", 0}, {graph + "/v1.0/users/y/manager", 0}},
			[]acquired{{id: 0, at: 0}, {id: 3, at: 0}, {id: 1, at: 2 * s}, {id: 2, at: 2 * s}}, false,
		},
		{
			"four throttled users: users is the budget, its requests paced, not held",
			[]throttle{{graph + "/v1.0/users/a", 2 * s}, {graph + "/v1.0/users/b", 2 * s}, {graph + "/v1.0/users/c", 2 * s}, {graph + "/v1.0/users/d", 2 * s}}, false,
			[]waiting{{graph + "/v1.0/users/x", 0}, {graph + "/v1.0/users/y", 0}, {graph + "/v1.0/users/w", 0}},
			[]acquired{{id: 0, at: 0}, {id: 1, at: 100 * time.Millisecond}, {id: 2, at: 200 * time.Millisecond}}, true,
		},
		{
			"a request's own later delay does not hold the others",
			[]throttle{{graph + "/v1.0/me", 2 * s}}, true,
			[]waiting{{graph + "/v1.0/me", 0}, {graph + "/v1.0/me", 5 * s}, {graph + "/v1.0/me", 0}},
			[]acquired{{id: 0, at: 0}, {id: 2, at: 100 * time.Millisecond}, {id: 1, at: 5 * s}}, true,
		},
		{
			"the throttle that ends first releases first",
			[]throttle{{graph + "/v1.0/a", 3 * s}, {graph + "/v1.0/b", 2 * s}}, false,
			[]waiting{{graph + "/v1.0/a", 0}, {graph + "/v1.0/b", 0}, {graph + "/v1.0/a", 0}},
			[]acquired{{id: 1, at: 2 * s}, {id: 0, at: 3 * s}, {id: 2, at: 3 * s}}, false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
				for _, th := range tt.throttled {
					h.q.throttleTarget(targetOf(t, th.url), t0.Add(-time.Millisecond), t0, t0.Add(th.end))
					if tt.together {
						h.q.throttleTarget(targetOf(t, th.url), t0.Add(-time.Millisecond), t0, t0.Add(th.end))
					}
				}
				for _, w := range tt.held {
					h.hold(w.url, t0.Add(w.notBefore), time.Time{})
				}
				got := h.run()
				if tt.ordered {
					assert.Equal(t, tt.want, got)
				} else {
					assert.ElementsMatch(t, tt.want, got)
				}
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
		me := targetOf(t, graph+"/v1.0/me")
		h.q.throttleTarget(me, t0, t0, t0.Add(2*time.Second))
		h.hold(graph+"/v1.0/me", t0, time.Time{})
		h.hold(graph+"/v1.0/me", t0, time.Time{})
		assert.Equal(t, []time.Duration{2 * time.Second}, h.clk.Pending())

		h.clk.Advance(time.Second)
		h.q.throttleTarget(me, t0.Add(time.Second), t0.Add(time.Second), t0.Add(4*time.Second))
		assert.ElementsMatch(t, []acquired{{id: 0, at: 4 * time.Second}, {id: 1, at: 4 * time.Second}}, h.run())
	})
}

// TestQueueReleasePacing checks that after a decrease to a fitted rate the
// queue releases held requests 1/rate apart, along the recovery curve.
func TestQueueReleasePacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHolders(t, options.QueueOptions{})
		me := targetOf(t, graph+"/v1.0/me")
		for range 40 {
			h.q.succeededAt(h.q.state("graph.test", true, time.Time{}), "/v1.0/me", t0, t0.Add(10*time.Millisecond))
		}
		// Two requests to it throttled together make it a budget, whose
		// pacer starts its search...
		h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(time.Second))
		h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(time.Second))
		p := h.q.state("graph.test", false, time.Time{}).nodes["me"].pacer.(*adaptivePacer)
		require.Equal(t, pacerSearching, p.state)
		// ...and a throttle of a request released 300 ms into it, at 1.3 s,
		// ends the search with a decrease to the fitted rate.
		for i := range 100 {
			p.sent(t0.Add(time.Second + time.Duration(i)*3*time.Millisecond))
		}
		at := t0.Add(1300 * time.Millisecond)
		h.clk.Advance(at.Sub(t0))
		h.q.throttleTarget(me, at.Add(-time.Millisecond), at, at.Add(time.Second))
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
		// Nothing holds them: the first leaves at the pace, the bucket
		// being empty at the throttle.
		assert.InDelta(t, (1300*time.Millisecond).Seconds()+1/rate(1300*time.Millisecond), got[0].at.Seconds(), 1e-3, "the first leaves at the pace")
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

// TestPassPaced checks that a pass says whether a budget's pace let its
// attempt go, for the retry loop, which does not step a request's backoff
// for a throttle of such an attempt that names no wait: the pace's
// overshoot, for which the pace slows the whole budget down.
func TestPassPaced(t *testing.T) {
	tests := []struct {
		name   string
		budget bool // two requests to the URL were throttled together
	}{
		{"a host never throttled", false},
		{"a budget's pace lets it go", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				me := targetOf(t, graph+"/v1.0/me")
				if tt.budget {
					h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(time.Second))
					h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(time.Second))
				}
				h.hold(graph+"/v1.0/me", t0, time.Time{})
				got := h.run()
				require.Len(t, got, 1)
				require.NoError(t, got[0].err)
				assert.Equal(t, []bool{tt.budget}, h.paced)
			})
		})
	}
}

// TestAdmitEarly checks that the retry of a bare 429 leaves before the
// policy's delay once the host served a request sent after the 429 came
// back, at its budget's pace and never before the server's own word.
func TestAdmitEarly(t *testing.T) {
	const delay = 3 * time.Second
	tests := []struct {
		name    string
		refused bool          // the retry is AdmitEarly's, refused at t0
		named   time.Duration // the server's word holds the URL until then
		out     bool          // a request of its budget, sent after t0, is out
		lone    bool          // its budget is an item its own refusal made one
		served  time.Duration // a request sent then, after t0, succeeded at 10 ms
		want    time.Duration // when it leaves; 0: at its budget's pace, before the delay
	}{
		{"a request sent after the refusal served", true, 0, false, false, 5 * time.Millisecond, 0},
		{"nothing out, nothing to send before it", true, 0, false, false, -time.Millisecond, 0},
		{"a request sent after it still out", true, 0, true, false, -time.Millisecond, delay},
		{"a lone item, nothing out: R6's delay", true, 0, false, true, -time.Millisecond, delay},
		{"no refusal: the delay is the caller's", false, 0, false, false, 5 * time.Millisecond, delay},
		{"the server's word holds the URL past the delay", true, 4 * time.Second, false, false, 5 * time.Millisecond, 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				me := targetOf(t, graph+"/v1.0/me")
				s := h.q.state("graph.test", true, time.Time{})
				// Two requests to it throttled together make it a budget.
				h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(delay))
				h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(delay))
				s.mu.Lock()
				if tt.named > 0 {
					s.urls[me.url] = &entry{end: t0.Add(tt.named)}
				}
				n := h.q.budgetOf(s, me.keys(), t0)
				if tt.out {
					n.inflight++
				}
				n.lone = tt.lone
				s.mu.Unlock()
				var refused time.Time
				if tt.refused {
					refused = t0
				}
				h.holdRefused(graph+"/v1.0/me", refused, t0.Add(delay), time.Time{})
				h.clk.Advance(10 * time.Millisecond)
				h.q.succeededAt(s, "/v1.0/me", t0.Add(tt.served), h.clk.Now())
				got := h.run()
				require.Len(t, got, 1)
				require.NoError(t, got[0].err)
				if tt.want == 0 {
					assert.Less(t, got[0].at, time.Second, "left at its budget's pace, long before the delay")
					return
				}
				assert.Equal(t, tt.want, got[0].at)
			})
		})
	}
}

// TestAdmitEarlyQueuesAsArrivingNow checks that a retry AdmitEarly lets
// go before its delay queues in its budget as a request arriving then:
// behind the requests already waiting, ahead of those that come later,
// not behind every request that comes before the delay it no longer
// waits for.
func TestAdmitEarlyQueuesAsArrivingNow(t *testing.T) {
	const delay = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		h := newHolders(t, options.QueueOptions{})
		const url = graph + "/v1.0/me"
		me := targetOf(t, url)
		s := h.q.state("graph.test", true, time.Time{})
		h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(delay))
		h.q.throttleTarget(me, t0.Add(-time.Millisecond), t0, t0.Add(delay))
		s.mu.Lock()
		h.q.budgetOf(s, me.keys(), t0).pacer.(*adaptivePacer).follow(10, t0)
		s.mu.Unlock()
		for range 5 {
			h.hold(url, t0, time.Time{}) // a half second's queue at 10/s
		}
		early := h.holdRefused(url, t0, t0.Add(delay), time.Time{})
		h.clk.Advance(10 * time.Millisecond)
		h.q.succeededAt(s, "/v1.0/me", t0.Add(5*time.Millisecond), h.clk.Now())
		// Advance from timer to timer to each arrival, a request every
		// 200 ms until the delay.
		var later []int
		for at := 200 * time.Millisecond; at < delay; at += 200 * time.Millisecond {
			for {
				synctest.Wait()
				p := h.clk.Pending()
				if len(p) == 0 || h.clk.Now().Add(p[0]).After(t0.Add(at)) {
					h.clk.Advance(t0.Add(at).Sub(h.clk.Now()))
					break
				}
				h.clk.Advance(p[0])
			}
			later = append(later, h.hold(url, h.clk.Now(), time.Time{}))
		}
		got := h.run()
		require.Len(t, got, h.n)
		when := map[int]time.Duration{}
		for _, a := range got {
			require.NoError(t, a.err)
			when[a.id] = a.at
		}
		assert.Less(t, when[early], 700*time.Millisecond, "behind the queue it found, at the pace")
		for _, id := range later[2:] {
			assert.Less(t, when[early], when[id], "ahead of the requests that came after it was let go")
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
		{"the head", 0, []acquired{{id: 1, at: 10 * s}, {id: 2, at: 10 * s}}},
		{"the middle", 1, []acquired{{id: 0, at: 10 * s}, {id: 2, at: 10 * s}}},
		{"the last", 2, []acquired{{id: 0, at: 10 * s}, {id: 1, at: 10 * s}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
				h.q.throttleTarget(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(10*s))
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

				assert.ElementsMatch(t, tt.want, h.run()[1:])
				assert.Zero(t, h.waiters("graph.test"))
				assert.Empty(t, h.clk.Pending(), "timers left")
			})
		})
	}
}

// heldUntil is the error of a hold refused at once that would have lasted
// until d after t0.
func heldUntil(d time.Duration) error { return &HoldError{Until: t0.Add(d)} }

func TestQueueDeadline(t *testing.T) {
	const (
		s  = time.Second
		ms = time.Millisecond
	)
	type waiting struct {
		url      string
		deadline time.Duration // after t0; 0: none
	}
	me := graph + "/v1.0/me"
	tests := []struct {
		name     string
		end      time.Duration // of the throttle of /v1.0/me
		together bool          // /v1.0/me is a budget, paced and not held
		held     []waiting
		want     []acquired
	}{
		{"released after the deadline: refused at once", 10 * s, false, []waiting{{me, 5 * s}}, []acquired{{id: 0, err: heldUntil(10 * s)}}},
		{"released at the deadline", 10 * s, false, []waiting{{me, 10 * s}}, []acquired{{id: 0, at: 10 * s}}},
		{"released before the deadline", 10 * s, false, []waiting{{me, 15 * s}}, []acquired{{id: 0, at: 10 * s}}},
		{"behind another held request: refused at once", 10 * s, false, []waiting{{me, 0}, {me, 5 * s}}, []acquired{{id: 1, err: heldUntil(10 * s)}, {id: 0, at: 10 * s}}},
		{"paced past the deadline: refused at once", 0, true, []waiting{{me, 0}, {me, 50 * ms}}, []acquired{{id: 0}, {id: 1, err: heldUntil(100 * ms)}}},
		{"paced before the deadline", 0, true, []waiting{{me, 0}, {me, 100 * ms}}, []acquired{{id: 0}, {id: 1, at: 100 * ms}}},
		{
			"its turn comes after the deadline: refused once it is known", 1 * s, true,
			[]waiting{{me, 0}, {me, 0}, {me, 0}, {me, 250 * ms}},
			[]acquired{{id: 0, at: 0}, {id: 1, at: 100 * ms}, {id: 2, at: 200 * ms}, {id: 3, err: heldUntil(300 * ms), at: 200 * ms}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHolders(t, options.QueueOptions{})
				h.q.newPacer = func(time.Time) pacer { return &fixedPacer{every: 100 * time.Millisecond} }
				h.q.throttleTarget(targetOf(t, me), t0.Add(-ms), t0, t0.Add(tt.end))
				if tt.together {
					h.q.throttleTarget(targetOf(t, me), t0.Add(-ms), t0, t0.Add(tt.end))
				}
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

// succeededAt reports a success of a request to path on s's host, sent at
// sent and answered at back.
func (q *Queue) succeededAt(s *hostState, path string, sent, back time.Time) {
	req := &http.Request{URL: &url.URL{Scheme: "https", Host: "graph.test", Path: path}}
	q.Report(req, Pass{Sent: sent, host: s}, Succeeded, 0, nil, func() time.Time { return back })
}

// releases advances clk from timer to timer until every admit is done,
// and returns when each went, after t0.
func releases(t *testing.T, clk *clocktest.Clock, admits []<-chan admitted) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(admits))
	for i, c := range admits {
		for {
			synctest.Wait()
			if a, ok := ready(t, c); ok {
				require.NoError(t, a.err)
				out[i] = a.at
				break
			}
			p := clk.Pending()
			require.NotEmpty(t, p, "admit %d blocked with no timer to wake it", i)
			clk.Advance(p[0])
		}
	}
	return out
}

// TestQueueRefused checks how a 503 without Retry-After is read: a
// capacity limit (a throttle) when the host serves others meanwhile, the
// server never throttled by name the budget that paced the request, and
// refusals are most of its recent answers, or came in a row, or a budget
// paced it; otherwise a failure that teaches no pace.
func TestQueueRefused(t *testing.T) {
	req := &http.Request{URL: &url.URL{Scheme: "https", Host: "graph.test", Path: "/v1.0/users/1"}}
	tests := []struct {
		name             string
		served, refusals int
		between          int  // successes answered after each refusal
		active           bool // the host throttled before, no budget pacing the request
		budget, named    bool
		// throttledAt, when not zero, is the refusal after which the
		// host throttles (its first wave's earlier refusals, read as a
		// capacity limit), and servedAt the one after which a success of
		// the wave's refill comes back.
		throttledAt, servedAt int
		want                  Outcome
	}{
		{"never answered", 0, 1, 0, false, false, false, 0, 0, Failed},
		{"a few among many served, as failures at random", 70, 30, 2, false, false, false, 0, 0, Failed},
		{"too few to tell", 1, 10, 0, false, false, false, 0, 0, Failed},
		{"most refused: an overrun budget", 40, 160, 0, false, false, false, 0, 0, Throttled},
		{"fewer refused than served, but in a row: a first wave's overflow", 193, 20, 0, false, false, false, 0, 0, Throttled},
		{"as many, each with a success between: failures at random", 193, 40, 1, false, false, false, 0, 0, Failed},
		{"in a row on a host that throttled before: its budgets tell", 193, 20, 0, true, false, false, 0, 0, Failed},
		{"a budget paced it", 70, 1, 0, false, true, false, 0, 0, Throttled},
		{"a budget throttled by 429s paced it: failures at random", 70, 30, 2, false, true, true, 0, 0, Failed},
		{"a budget throttled by 429s, most refused: a server going down", 40, 160, 0, false, true, true, 0, 0, Failed},
		{"a first wave's overflow, a refill served among it, the host throttled meanwhile", 42, 40, 0, false, false, false, 16, 20, Throttled},
		{"failures at random after the host's first throttle", 42, 40, 1, false, false, false, 16, 0, Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{})
			for range tt.served {
				q.Report(req, Pass{Sent: t0}, Succeeded, 0, nil, clk.Now)
			}
			var p Pass
			if s := q.state("graph.test", false, time.Time{}); s != nil {
				p.host = s
				if tt.active {
					s.mu.Lock()
					s.activate()
					s.mu.Unlock()
				}
				if tt.budget {
					s.mu.Lock()
					s.activate()
					p.budget = s.node("", 0)
					p.budget.share(t0, q.newPacer)
					p.budget.named = tt.named
					s.mu.Unlock()
				}
			}
			var got Outcome
			for i := 1; i <= tt.refusals; i++ {
				got = q.Refused(req, &p, t0)
				for range tt.between {
					q.Report(req, Pass{Sent: t0}, Succeeded, 0, nil, clk.Now)
				}
				if i == tt.servedAt {
					q.Report(req, Pass{Sent: t0}, Succeeded, 0, nil, clk.Now)
				}
				if i == tt.throttledAt {
					p.host.mu.Lock()
					p.host.activate()
					p.host.mu.Unlock()
				}
			}
			assert.Equal(t, tt.want, got)
			assert.True(t, p.refused, "the pass is marked, so that Report knows the server named no throttle")
		})
	}
}

// TestRefusalEpisode checks how a host's refusals are grouped for Refused:
// an episode runs while refusals come less than capacityWindow apart, it
// counts the successes sent within capacityWindow of its latest refusal,
// and it is a first wave's only within capacityWindow of its first
// refusal on a host that never throttled.
func TestRefusalEpisode(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var e refusalEpisode
	e.serve(ms(0)) // no refusal yet: nothing to count
	r, served, first := e.refuse(ms(0), true)
	assert.Equal(t, []any{int64(1), int64(0), true}, []any{r, served, first}, "a first wave's first refusal")
	e.serve(ms(10))
	e.serve(ms(20))
	r, served, first = e.refuse(ms(500), false)
	assert.Equal(t, []any{int64(2), int64(2), true}, []any{r, served, first}, "the same episode: fresh as it began")
	r, served, first = e.refuse(ms(1200), false)
	assert.Equal(t, []any{int64(3), int64(2), false}, []any{r, served, first}, "the same episode, a second after its first refusal: no first wave's any more")
	e.serve(ms(2300)) // over a second after the latest refusal
	r, served, first = e.refuse(ms(2300), true)
	assert.Equal(t, []any{int64(1), int64(0), true}, []any{r, served, first}, "a second without a refusal: a new episode")
	e.serve(ms(4000))
	assert.Equal(t, int64(0), e.served.Load(), "a success long after the latest refusal counts for no episode")
}

// An attempt that did not wait in the queue is learned from all the same:
// its throttle is how a host becomes one the queue holds.
func TestBypassedAttemptIsLearned(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	u, err := url.Parse(graph + "/v1.0/users/1")
	require.NoError(t, err)
	req := &http.Request{Method: http.MethodGet, URL: u}
	require.False(t, q.Active(req))
	p := q.Bypass(t0)
	assert.Equal(t, t0, p.Sent)
	q.Report(req, p, Throttled, time.Second, nil, clk.Now)
	assert.True(t, q.Active(req))
	_, err = q.Admit(context.Background(), req, t0, t0.Add(time.Millisecond), nil)
	var hold *HoldError
	require.ErrorAs(t, err, &hold)
	assert.Equal(t, t0.Add(time.Second), hold.Until, "its URL is held for the second the server named")
}

// A batch item's 503 that named no wait, which Refused read as a
// throttle, is the queue's reading and not the server's word: reported,
// it does not mark its budget as one whose throttles the server names,
// and a later bare 503 of the budget is still read as a throttle, as it
// is after a request's own.
func TestReportItemKeepsTheQueuesReading(t *testing.T) {
	tests := []struct {
		name    string
		refused bool // Refused read the item's answer as a throttle
		want    Outcome
	}{
		{"the queue's reading of a bare 503", true, Throttled},
		{"the server's word: a 429", false, Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewJumping(t0)
			q := New(clk, options.QueueOptions{})
			q.Report(get(t, graph+"/v1.0/users/0", ""), Pass{Sent: t0}, Succeeded, 0, nil, clk.Now)
			// Items of one batch, throttled together: the evidence of a
			// budget they share.
			for i := 1; i <= 10; i++ {
				item := q.Bypass(t0)
				item.refused = tt.refused
				q.ReportItem(get(t, graph+"/v1.0/users/"+strconv.Itoa(i), ""), item, Throttled, time.Second, nil, clk.Now)
			}
			req := get(t, graph+"/v1.0/users/11", "")
			p, err := q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
			require.NoError(t, err)
			require.NotNil(t, p.budget, "a budget paced it")
			assert.Equal(t, tt.want, q.Refused(req, &p, clk.Now()))
		})
	}
}

// TestFirstWaveByAPI checks that each API's first budget takes the
// successes of the host's first wave sent to that API: nginx's zones on
// one host each let their own through. Taken whole by the first budget
// to form, the wave left the others a search from none, whose fit,
// assuming a bucket of one, read more than twice their rate. A success
// answered after another API's first throttle, before its own API had a
// node, counts for its API too: taken by neither, it left nginx's 100/s
// zone a wave of 5 of its 11, and its search read 151/s.
func TestFirstWaveByAPI(t *testing.T) {
	tests := []struct {
		name  string
		first string // the API whose budget forms first
		// late: the other API's successes are answered after the first
		// API's first throttle.
		late bool
	}{
		{"users first", "users", false},
		{"sites first", "sites", false},
		{"sites answered after users' first throttle", "users", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			host := func() *hostState { return q.state("graph.test", true, t0) }
			wave := map[string]int{"users": 8, "sites": 3, "me": 2}
			answer := func(api string) {
				for i := range wave[api] {
					q.succeededAt(host(), "/v1.0/"+api+"/"+strconv.Itoa(100+i), t0, t0.Add(3*time.Millisecond))
				}
			}
			for api := range wave {
				if !tt.late || api == tt.first {
					answer(api)
				}
			}
			apis := []string{tt.first}
			for _, api := range []string{"users", "sites"} {
				if api != tt.first {
					apis = append(apis, api)
				}
			}
			for i, api := range apis {
				if tt.late && i > 0 {
					answer(api)
				}
				for i := range 4 {
					q.throttleTarget(targetOf(t, graph+"/v1.0/"+api+"/"+strconv.Itoa(i)), t0, t0.Add(4*time.Millisecond), t0.Add(time.Second))
				}
			}
			for _, api := range apis {
				n := host().nodes[api]
				require.NotNil(t, n)
				require.True(t, n.shared, "four throttled children make %s a budget", api)
				assert.Equal(t, wave[api], n.pacer.(*adaptivePacer).burst, api)
			}
		})
	}
}

// TestFirstWaveCountedOnce checks that each success of the host's first
// wave counts once in the burst its first budget's search starts from,
// whether it came before the host's first throttle (the wave, counted
// without the lock) or after it, below nodes the throttle made: counted
// in both, the search started and the fit read as if the server's bucket
// were half again its size (HAProxy's first wave read 571 where it let
// 400 through).
func TestFirstWaveCountedOnce(t *testing.T) {
	tests := []struct {
		name          string
		before, after int // successes before the first throttle and after it
		// racing is a success the lock-free path counted in the wave as
		// the first throttle came, then reported under the lock.
		racing bool
	}{
		{"all before the first throttle", 8, 0, false},
		{"on both sides of it", 8, 8, false},
		{"all after it", 0, 8, false},
		{"one racing the first throttle", 8, 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			host := func() *hostState { return q.state("graph.test", true, t0) }
			for i := range tt.before {
				q.succeededAt(host(), "/v1.0/users/"+strconv.Itoa(100+i), t0, t0.Add(time.Millisecond))
			}
			q.throttleTarget(targetOf(t, graph+"/v1.0/users/0"), t0, t0.Add(2*time.Millisecond), t0.Add(time.Second))
			for i := range tt.after {
				q.succeededAt(host(), "/v1.0/users/"+strconv.Itoa(200+i), t0.Add(time.Millisecond), t0.Add(3*time.Millisecond))
			}
			want := tt.before + tt.after
			if tt.racing {
				s := host()
				s.addWave("users", t0, 0)
				s.mu.Lock()
				q.succeeded(s, targetOf(t, graph+"/v1.0/users/300"), Pass{Sent: t0, host: s}, t0.Add(3*time.Millisecond), true)
				s.mu.Unlock()
				want++
			}
			for i := 1; i <= 3; i++ {
				q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+strconv.Itoa(i)), t0, t0.Add(4*time.Millisecond), t0.Add(time.Second))
			}
			users := host().nodes["users"]
			require.NotNil(t, users)
			require.True(t, users.shared, "four throttled users make the users API a budget")
			assert.Equal(t, want, users.pacer.(*adaptivePacer).burst)
		})
	}
}

// TestPaceKnowsRefusalsRetriedAtIt checks that the pace of a budget
// throttled by 429s that name no wait knows their requests are retried
// at it (Queue.AdmitEarly), and so probes without waiting out the retry
// policy's delay; that of one throttled with a named wait, or by 503s
// read as a capacity limit, whose requests wait, does not.
func TestPaceKnowsRefusalsRetriedAtIt(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name string
		p    Pass
		want bool
	}{
		{"429s naming no wait", Pass{noWait: true}, true},
		{"429s naming their wait", Pass{}, false},
		{"503s read as a capacity limit", Pass{noWait: true, refused: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			tg := targetOf(t, graph+"/v1.0/users")
			s := q.state(tg.host, true, time.Time{})
			s.mu.Lock()
			defer s.mu.Unlock()
			s.activate()
			var n *node
			for range 2 { // together: a budget
				p := tt.p
				p.Sent = t0
				n = q.throttled(s, tg, p, t0.Add(ms), t0.Add(3*time.Second))
			}
			require.NotNil(t, n, "a budget")
			ap, ok := n.pacer.(*adaptivePacer)
			require.True(t, ok)
			assert.Equal(t, tt.want, ap.atPace)
		})
	}
}
