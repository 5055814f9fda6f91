package clocktest

import (
	"sync"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Jumping is a fake options.Clock whose timers fire as soon as they are
// made, moving the clock to their deadline: code that waits runs through
// its waits on its own goroutine, with no second one to advance time, as a
// fuzz target needs. The zero value is not usable; use NewJumping.
type Jumping struct {
	mu  sync.Mutex
	now time.Time
}

// NewJumping returns a Jumping clock set to start.
func NewJumping(start time.Time) *Jumping { return &Jumping{now: start} }

// Now implements options.Clock.
func (c *Jumping) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Jumping) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// NewTimer implements options.Clock: it advances the clock by d and
// returns a timer that has already fired.
func (c *Jumping) NewTimer(d time.Duration) options.Timer {
	c.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return firedTimer(ch)
}

// AfterFunc implements options.Clock by panicking: a callback cannot run
// at a jumped-to time without a goroutine of its own, so code under test
// that needs one (an attempt timeout) wants Clock instead.
func (c *Jumping) AfterFunc(time.Duration, func()) options.Timer {
	panic("clocktest: Jumping.AfterFunc is not supported; use Clock")
}

type firedTimer chan time.Time

func (t firedTimer) C() <-chan time.Time { return t }
func (t firedTimer) Stop() bool          { return false }
