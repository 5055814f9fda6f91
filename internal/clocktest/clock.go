// Package clocktest provides fake options.Clocks for tests, whose time
// moves only when the test (Clock) or a wait (Jumping) advances it, so
// delays are checked exactly and fast; and the helpers that write the
// schedules those tests expect.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Clock is a fake options.Clock. The zero value is not usable; use New.
type Clock struct {
	mu      sync.Mutex
	cond    *sync.Cond
	now     time.Time
	timers  []*timer
	created chan time.Duration
}

// New returns a Clock set to start.
func New(start time.Time) *Clock {
	c := &Clock{now: start, created: make(chan time.Duration, 1024)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Now implements options.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements options.Clock.
func (c *Clock) NewTimer(d time.Duration) options.Timer {
	t := c.add(d, make(chan time.Time, 1), nil)
	select {
	case c.created <- d:
	default: // nobody is watching; never block the code under test
	}
	return t
}

// Created delivers the duration of every timer made with NewTimer (not
// AfterFunc), so a test can see each wait the code under test starts.
func (c *Clock) Created() <-chan time.Duration { return c.created }

// Drive runs do in its own goroutine and, each time it starts a NewTimer
// wait, advances the clock by exactly that wait. It returns do's results
// and the waits in the order they were started.
func Drive[T any](c *Clock, do func() T) (T, []time.Duration) {
	done := make(chan T, 1)
	go func() { done <- do() }()
	var waits []time.Duration
	for {
		select {
		case r := <-done:
			return r, waits
		case d := <-c.created:
			waits = append(waits, d)
			c.Advance(d)
		}
	}
}

// AfterFunc implements options.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) options.Timer {
	return c.add(d, nil, f)
}

func (c *Clock) add(d time.Duration, ch chan time.Time, f func()) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, at: c.now.Add(d), ch: ch, f: f}
	c.timers = append(c.timers, t)
	c.cond.Broadcast()
	if d <= 0 {
		c.fireLocked()
	}
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

func (c *Clock) fireLocked() {
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	var keep []*timer
	for _, t := range c.timers {
		if t.at.After(c.now) {
			keep = append(keep, t)
			continue
		}
		if t.ch != nil {
			t.ch <- c.now
		} else {
			go t.f()
		}
	}
	c.timers = keep
}

// Pending returns the durations until each pending timer fires, soonest first.
func (c *Clock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Duration, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.at.Sub(c.now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// WaitForTimers blocks until at least n timers are pending.
func (c *Clock) WaitForTimers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		c.cond.Wait()
	}
}

type timer struct {
	clock *Clock
	at    time.Time
	ch    chan time.Time
	f     func()
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.timers {
		if p == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.cond.Broadcast()
			return true
		}
	}
	return false
}
