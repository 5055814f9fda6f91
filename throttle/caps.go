package throttle

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// fleetSlotRetry is how soon a process whose requests found a fleet-wide
// cap full asks again, unless a slot of its own frees first: a release by
// another process wakes no one here. About one mailbox request's time:
// asked more often, the fleet's questions about its few slots outnumber
// its requests, and on a loaded machine the store's answers pass its
// bound (measured: 20 ms gave 8 processes 1.2x-3.2x the physical limit,
// the store timing out and failing open; 50 ms, 1.5x-1.6x).
const fleetSlotRetry = 50 * time.Millisecond

// caps keeps the concurrency caps options.QueueOptions.Concurrency names:
// a semaphore per host and capped target in this process, in FIFO order,
// and, with a store that implements options.SlotStore, the fleet's slot
// taken once this process's is. A target's semaphore is forgotten when
// nothing holds or waits for it.
type caps struct {
	of    func(req *http.Request) (key string, limit int)
	clock options.Clock
	store options.SlotStore // nil: this process's caps only

	mu   sync.Mutex
	sems map[capKey]*semaphore
}

type capKey struct{ host, key string }

// semaphore is one capped target's slots in this process.
type semaphore struct {
	held    int
	waiting []*capWaiter // in arrival order
	// watching are the requests holding a slot here that wait for one in
	// the fleet: a release here may have freed one there.
	watching []*capWaiter
	// asking is set while one of them asks the fleet for a slot;
	// fullUntil is when they may ask again after the fleet said it is
	// full, unless a slot is freed here first.
	asking    bool
	fullUntil time.Time
}

// wakeWatching wakes the requests waiting for a slot of the fleet. The
// caller holds caps.mu.
func (s *semaphore) wakeWatching() {
	for _, w := range s.watching {
		w.signal()
	}
}

type capWaiter struct {
	wake    chan struct{}
	granted bool // set, under caps.mu, when a release hands it the slot
}

// capSlot is a slot a Pass holds: this process's, and the fleet's when
// the store kept the cap.
type capSlot struct {
	k     capKey
	fleet options.Slot
}

func newCaps(clock options.Clock, o options.QueueOptions) *caps {
	if o.Concurrency == nil {
		return nil
	}
	c := &caps{of: o.Concurrency, clock: clock, sems: map[capKey]*semaphore{}}
	c.store, _ = o.Store.(options.SlotStore)
	return c
}

// overran reports whether a throttle of req, sent as p to the host of s,
// is its concurrency cap's rather than a rate's: req falls under a cap,
// and the cap's counts missed requests out with it. They do until a
// request that held a slot has been served: the requests sent before the
// host's first throttle, when no cap holds anything, take no slot and may
// still be out, and a request sent before one of the cap's own was served
// may have been sent beside them. A wave sent past a server's concurrency
// limit says nothing of a rate, and taken for a budget's throttles it
// would pace the target below what the cap lets through. Such a request
// waits out its own Retry-After; no pacer learns from it, and its URL is
// not held for others, which the cap, in force from then on, holds
// instead (R14's intent; held for the time the server named, the URL of
// POSTs to one collection would idle its cap for that time). A throttle
// of a request the cap counted fully is a rate's, and teaches and holds
// as any other. False on a nil caps.
func (c *caps) overran(s *hostState, req *http.Request, p Pass) bool {
	if c == nil {
		return false
	}
	if key, limit := c.of(req); key == "" || limit < 1 {
		return false
	}
	served := s.capServed.Load()
	return p.slot == nil || served == 0 || p.Sent.UnixNano() < served
}

// take waits for a slot of the cap req falls under, if any, and returns
// it (nil when uncapped). A wait that would pass deadline (zero: none)
// ends at it with a *HoldError; one whose context ends returns its error.
// obs, when not nil, hears when the request waits for a slot.
func (c *caps) take(ctx context.Context, host string, req *http.Request, deadline time.Time, obs Observer) (*capSlot, error) {
	key, limit := c.of(req)
	if key == "" || limit < 1 {
		return nil, nil
	}
	if obs != nil {
		defer obs.Released(ctx)
	}
	sl := &capSlot{k: capKey{host, key}}
	if err := c.local(ctx, sl.k, limit, deadline, obs); err != nil {
		return nil, err
	}
	if c.store == nil {
		return sl, nil
	}
	for {
		// One request at a time asks the fleet for a slot of k, and none
		// while the fleet said it is full, until a slot is freed here or
		// fleetSlotRetry has passed: the others would ask the same
		// question at the same time, a round trip each.
		c.mu.Lock()
		sem := c.sems[sl.k]
		now := c.clock.Now()
		if sem.asking || now.Before(sem.fullUntil) {
			at := sem.fullUntil
			if sem.asking || !at.After(now) {
				at = now.Add(fleetSlotRetry)
			}
			c.mu.Unlock()
			if !deadline.IsZero() && at.After(deadline) {
				c.release(sl.k)
				return nil, &HoldError{Until: at}
			}
			if obs != nil {
				obs.Held(ctx, at.Sub(now))
			}
			if err := c.idle(ctx, sl.k, at); err != nil {
				c.release(sl.k)
				return nil, err
			}
			continue
		}
		sem.asking = true
		c.mu.Unlock()
		fs, full, err := c.store.Acquire(ctx, host, key, limit)
		c.mu.Lock()
		sem.asking = false
		if err == nil && fs == nil {
			sem.fullUntil = c.clock.Now().Add(min(full, fleetSlotRetry))
		}
		sem.wakeWatching()
		c.mu.Unlock()
		switch {
		case err != nil && ctx.Err() != nil:
			c.release(sl.k)
			return nil, ctx.Err()
		case err != nil:
			// The fleet's cap is the store's to keep; without it, this
			// process keeps its own. The store counts and logs its
			// fallbacks.
			return sl, nil
		case fs != nil:
			sl.fleet = fs
			return sl, nil
		}
	}
}

// local takes a slot of k in this process, waiting its turn behind the
// requests that came first.
func (c *caps) local(ctx context.Context, k capKey, limit int, deadline time.Time, obs Observer) error {
	c.mu.Lock()
	s := c.sems[k]
	if s == nil {
		s = &semaphore{}
		c.sems[k] = s
	}
	if s.held < limit && len(s.waiting) == 0 {
		s.held++
		c.mu.Unlock()
		return nil
	}
	w := &capWaiter{wake: make(chan struct{}, 1)}
	s.waiting = append(s.waiting, w)
	c.mu.Unlock()
	if obs != nil {
		// As long as a request's time, which nothing here knows.
		obs.Held(ctx, 0)
	}
	d := time.Duration(-1)
	if !deadline.IsZero() {
		d = max(deadline.Sub(c.clock.Now()), 0)
	}
	err := wait.Woken(ctx, c.clock, d, w.wake)
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.granted {
		if err != nil {
			c.releaseLocked(k)
		}
		return err
	}
	s.waiting = without(s.waiting, w)
	c.forgetLocked(k, s)
	if err == nil {
		err = &HoldError{Until: deadline}
	}
	return err
}

// idle waits until at, until a slot of k is released in this process
// (which frees one of the fleet's too), or until the request asking the
// fleet for one has its answer.
func (c *caps) idle(ctx context.Context, k capKey, at time.Time) error {
	w := &capWaiter{wake: make(chan struct{}, 1)}
	c.mu.Lock()
	s := c.sems[k]
	s.watching = append(s.watching, w)
	c.mu.Unlock()
	err := wait.Woken(ctx, c.clock, max(at.Sub(c.clock.Now()), 0), w.wake)
	c.mu.Lock()
	defer c.mu.Unlock()
	s.watching = without(s.watching, w)
	return err
}

// without returns ws less w, in order.
func without(ws []*capWaiter, w *capWaiter) []*capWaiter {
	return slices.DeleteFunc(ws, func(o *capWaiter) bool { return o == w })
}

// give hands sl back: the fleet's slot, then this process's.
func (c *caps) give(sl *capSlot) {
	if sl == nil {
		return
	}
	if sl.fleet != nil {
		// Bounded by the store's own timeout; a release that fails ends
		// with the slot's lease.
		_ = sl.fleet.Release(context.Background())
	}
	c.release(sl.k)
}

func (c *caps) release(k capKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(k)
}

// releaseLocked gives a slot of k to the first waiter, or frees it. The
// caller holds c.mu.
func (c *caps) releaseLocked(k capKey) {
	s := c.sems[k]
	if s == nil {
		return
	}
	// A slot freed here frees one of the fleet's: ask again at once.
	s.fullUntil = time.Time{}
	s.wakeWatching()
	if len(s.waiting) > 0 {
		w := s.waiting[0]
		s.waiting = s.waiting[1:]
		w.granted = true
		w.signal()
		return
	}
	s.held--
	c.forgetLocked(k, s)
}

// forgetLocked drops s, k's semaphore, when nothing holds or waits for
// it. The caller holds c.mu.
func (c *caps) forgetLocked(k capKey, s *semaphore) {
	if s.held == 0 && len(s.waiting) == 0 && len(s.watching) == 0 {
		delete(c.sems, k)
	}
}

func (w *capWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}
