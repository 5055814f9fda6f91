package throttle

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// perMailbox caps the requests to /v1.0/users/{id}/messages at limit per
// id, and nothing else.
func perMailbox(limit int) func(*http.Request) (string, int) {
	return func(req *http.Request) (string, int) {
		id, ok := strings.CutPrefix(req.URL.Path, "/v1.0/users/")
		if id, rest, _ := strings.Cut(id, "/"); ok && rest == "messages" {
			return id, limit
		}
		return "", 0
	}
}

// capped runs Admit calls in a synctest bubble and records, in order,
// which returned and with what, keeping each pass for Report.
type capped struct {
	t   *testing.T
	q   *Queue
	clk *clocktest.Clock

	mu     sync.Mutex
	out    []string        // "name" or "name: error"
	passes map[string]Pass // by name
	reqs   map[string]*http.Request
	cancel map[string]context.CancelFunc
}

func newCapped(t *testing.T, o options.QueueOptions, clk *clocktest.Clock) *capped {
	return &capped{t: t, q: New(clk, o), clk: clk, passes: map[string]Pass{},
		reqs: map[string]*http.Request{}, cancel: map[string]context.CancelFunc{}}
}

// throttle makes host graph.test one the queue holds: n requests to path
// out together, throttled with holds that are over.
func (c *capped) throttle(path string, n int) { c.throttleFor(path, n, 0) }

// throttleFor sends n requests to path together and throttles them, the
// server naming hold.
func (c *capped) throttleFor(path string, n int, hold time.Duration) {
	req := get(c.t, graph+path, "")
	var passes []Pass
	for range n {
		p, err := c.q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
		require.NoError(c.t, err)
		passes = append(passes, p)
	}
	c.clk.Advance(time.Millisecond) // the round trip
	for _, p := range passes {
		c.q.Report(req, p, Throttled, hold, nil, c.clk.Now)
	}
}

// admit starts name's Admit of path and waits until it blocks or returns.
func (c *capped) admit(name, path string, deadline time.Time) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c.t.Cleanup(cancel)
	req := get(c.t, graph+path, "")
	c.mu.Lock()
	c.reqs[name], c.cancel[name] = req, cancel
	c.mu.Unlock()
	go func() {
		p, err := c.q.Admit(ctx, req, time.Time{}, deadline, nil)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.out = append(c.out, name+": "+err.Error())
			return
		}
		c.out = append(c.out, name)
		c.passes[name] = p
	}()
	synctest.Wait()
}

// report hands name's pass back with a success, and waits for whom that
// lets go.
func (c *capped) report(name string) {
	c.mu.Lock()
	req, p := c.reqs[name], c.passes[name]
	c.mu.Unlock()
	c.q.Report(req, p, Succeeded, 0, nil, c.clk.Now)
	synctest.Wait()
}

// untilDone advances the clock from timer to timer until n Admits
// returned.
func (c *capped) untilDone(n int) {
	c.t.Helper()
	for len(c.done()) < n {
		p := c.clk.Pending()
		require.NotEmpty(c.t, p, "blocked with no timer to wake them")
		c.clk.Advance(p[0])
		synctest.Wait()
	}
}

func (c *capped) done() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.out)
}

func (c *capped) semaphores() int {
	c.q.caps.mu.Lock()
	defer c.q.caps.mu.Unlock()
	return len(c.q.caps.sems)
}

// TestCaps: a capped target lets limit requests out at once, the next in
// arrival order as each answer comes, other targets apart, and holds
// nothing before its host throttled (R22).
func TestCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCapped(t, options.QueueOptions{Concurrency: perMailbox(2)}, clocktest.New(t0))
		c.admit("cold1", "/v1.0/users/a/messages", time.Time{})
		c.admit("cold2", "/v1.0/users/a/messages", time.Time{})
		c.admit("cold3", "/v1.0/users/a/messages", time.Time{})
		assert.Equal(t, []string{"cold1", "cold2", "cold3"}, c.done(), "a host never throttled is never held")

		c.throttle("/v1.0/sites/root", 1)
		c.out = nil
		for _, name := range []string{"a1", "a2", "a3", "a4"} {
			c.admit(name, "/v1.0/users/a/messages", time.Time{})
		}
		c.admit("b1", "/v1.0/users/b/messages", time.Time{})
		c.admit("other", "/v1.0/users/a", time.Time{})
		assert.Equal(t, []string{"a1", "a2", "b1", "other"}, c.done(), "two of a's at once; b's and uncapped paths apart")
		c.report("a2")
		assert.Equal(t, []string{"a1", "a2", "b1", "other", "a3"}, c.done(), "the first to wait goes first")
		c.report("a1")
		c.report("a3")
		c.report("a4")
		c.report("b1")
		assert.Equal(t, []string{"a1", "a2", "b1", "other", "a3", "a4"}, c.done())
		assert.Zero(t, c.semaphores(), "a cap nothing holds is forgotten")
	})
}

// TestCapsWaitEnds: a wait for a slot ends with its context or at its
// deadline, and the slot goes to the next still waiting.
func TestCapsWaitEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		c := newCapped(t, options.QueueOptions{Concurrency: perMailbox(1)}, clk)
		c.throttle("/v1.0/sites/root", 1)
		c.admit("holder", "/v1.0/users/a/messages", time.Time{})
		c.admit("canceled", "/v1.0/users/a/messages", time.Time{})
		c.admit("late", "/v1.0/users/a/messages", t0.Add(time.Second))
		c.admit("next", "/v1.0/users/a/messages", time.Time{})
		require.Equal(t, 3, c.waiting("a"), "all three wait for the slot")
		c.cancel["canceled"]()
		synctest.Wait()
		clk.Advance(t0.Add(time.Second).Sub(clk.Now()))
		synctest.Wait()
		assert.Equal(t, []string{"holder", "canceled: context canceled",
			"late: throttle: held past the request's limits: until " + t0.Add(time.Second).Format(time.RFC3339Nano)}, c.done())
		c.report("holder")
		assert.Contains(t, c.done(), "next", "the slot goes to the next still waiting")
		c.report("next")
		assert.Zero(t, c.semaphores())
	})
}

// TestCapsGiveBackTheBudget: a request its budget's pace let go, whose
// wait for a slot then ends, is no longer counted in flight.
func TestCapsGiveBackTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		var capping atomic.Bool
		c := newCapped(t, options.QueueOptions{Concurrency: func(req *http.Request) (string, int) {
			if !capping.Load() {
				return "", 0
			}
			return perMailbox(1)(req)
		}}, clk)
		// Two throttles together, of a rate (the cap is off), make it a
		// budget, which counts what is in flight.
		c.throttle("/v1.0/users/a/messages", 2)
		capping.Store(true)
		c.admit("holder", "/v1.0/users/a/messages", time.Time{})
		c.untilDone(1) // the budget's pace
		c.admit("waiter", "/v1.0/users/a/messages", time.Time{})
		for c.waiting("a") == 0 {
			c.clk.Advance(c.clk.Pending()[0])
			synctest.Wait()
		}
		require.Equal(t, 2, c.inflight(), "the pace let both go")
		c.cancel["waiter"]()
		synctest.Wait()
		assert.Equal(t, 1, c.inflight(), "what the ended wait took of the budget is given back")
		c.report("holder")
		assert.Zero(t, c.inflight())
		assert.Zero(t, c.semaphores())
	})
}

// waiting returns how many requests wait for a slot of key.
func (c *capped) waiting(key string) int {
	c.q.caps.mu.Lock()
	defer c.q.caps.mu.Unlock()
	if s := c.q.caps.sems[capKey{"graph.test", key}]; s != nil {
		return len(s.waiting)
	}
	return 0
}

// inflight returns what the host's budgets count in flight.
func (c *capped) inflight() int {
	s := c.q.state("graph.test", false, time.Time{})
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, nd := range s.nodes {
		n += nd.inflight
	}
	return n
}

// slotStore is a memStore that keeps caps as redisstore does: a
// semaphore per host and key, shared by the queues of a test.
type slotStore struct {
	*memStore
	held    map[string]int
	acquire int // calls
	fail    bool
}

type memSlot struct {
	s   *slotStore
	key string
}

func (m *slotStore) Acquire(_ context.Context, host, key string, limit int) (options.Slot, time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquire++
	if m.fail {
		return nil, 0, errStoreDown
	}
	k := host + "/" + key
	if m.held[k] >= limit {
		return nil, time.Minute, nil
	}
	m.held[k]++
	return &memSlot{m, k}, 0, nil
}

func (sl *memSlot) Release(context.Context) error {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	sl.s.held[sl.key]--
	return nil
}

// TestCapsFleetWide: with a SlotStore, a cap counts the fleet's requests:
// a process whose own slots are free waits for one another process gives
// back, asking again every fleetSlotRetry; a store that fails leaves each
// process its own cap.
func TestCapsFleetWide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		store := &slotStore{memStore: newMemStore(clk.Now), held: map[string]int{}}
		o := options.QueueOptions{Concurrency: perMailbox(1), Store: store}
		a, b := newCapped(t, o, clk), newCapped(t, o, clk)
		a.throttle("/v1.0/sites/root", 1)
		b.throttle("/v1.0/sites/root", 1)
		a.admit("a1", "/v1.0/users/m/messages", time.Time{})
		b.admit("b1", "/v1.0/users/m/messages", time.Time{})
		assert.Equal(t, []string{"a1"}, a.done())
		assert.Empty(t, b.done(), "the fleet's one slot is a's")
		asked := store.acquire
		clk.Advance(fleetSlotRetry)
		synctest.Wait()
		assert.Equal(t, asked+1, store.acquire, "asks again after fleetSlotRetry")
		assert.Empty(t, b.done())
		a.report("a1")
		clk.Advance(fleetSlotRetry)
		synctest.Wait()
		assert.Equal(t, []string{"b1"}, b.done(), "a's slot given back is b's")
		b.report("b1")
		assert.Zero(t, store.held["graph.test/m"], "every fleet slot given back")

		store.fail = true
		a.admit("a2", "/v1.0/users/m/messages", time.Time{})
		b.admit("b2", "/v1.0/users/m/messages", time.Time{})
		a.admit("a3", "/v1.0/users/m/messages", time.Time{})
		assert.Equal(t, []string{"a1", "a2"}, a.done(), "the store down, each process keeps its own cap")
		assert.Equal(t, []string{"b1", "b2"}, b.done())
		a.report("a2")
		assert.Equal(t, []string{"a1", "a2", "a3"}, a.done())
	})
}

// TestCapsOverrun: a throttle of a capped request is the cap's while the
// cap's counts may have missed requests out with it (sent without a slot,
// or before a request that held one was served): it forms no budget and
// holds no URL. Once a request that held its slot was served, a throttle
// of one sent after is a rate's, and holds its URL as any other.
func TestCapsOverrun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		c := newCapped(t, options.QueueOptions{Concurrency: perMailbox(1)}, clk)
		const path = "/v1.0/users/a/messages"
		heldURL := func() bool {
			s := c.q.state("graph.test", false, time.Time{})
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.held(c.q.newTarget(get(t, graph+path, ""))).After(clk.Now())
		}
		throttle := func(name string) {
			c.mu.Lock()
			req, p := c.reqs[name], c.passes[name]
			c.mu.Unlock()
			c.q.Report(req, p, Throttled, time.Second, nil, clk.Now)
			synctest.Wait()
		}

		budgets := func() int {
			s := c.q.state("graph.test", false, time.Time{})
			s.mu.Lock()
			defer s.mu.Unlock()
			n := 0
			for _, nd := range s.nodes {
				if nd.shared {
					n++
				}
			}
			return n
		}
		// The first wave: sent before the host throttled, without slots,
		// two together, which would make a budget of a rate.
		c.throttleFor(path, 2, time.Second)
		assert.False(t, heldURL(), "sent without its slot: the cap's")
		assert.Zero(t, budgets(), "no budget formed")
		clk.Advance(time.Second)

		c.admit("capped", path, time.Time{})
		throttle("capped")
		assert.False(t, heldURL(), "no request of the cap served yet: the cap's")

		c.admit("served", path, time.Time{})
		clk.Advance(time.Millisecond)
		c.report("served")
		c.admit("rate", path, time.Time{})
		clk.Advance(time.Millisecond)
		throttle("rate")
		assert.True(t, heldURL(), "sent after one of the cap's was served: a rate's, which holds its URL")
	})
}
