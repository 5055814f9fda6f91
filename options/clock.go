package options

import "time"

// Clock is the source of time used by the handler for delays, limits and
// per-attempt timeouts. Tests inject a fake one; nil means SystemClock().
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends on its channel after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer the handler uses.
type Timer interface {
	// C returns the channel the timer fires on; nil for an AfterFunc timer.
	C() <-chan time.Time
	// Stop prevents the timer from firing, reporting whether it stopped it.
	Stop() bool
}

// SystemClock returns the Clock backed by package time.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return systemTimer{time.AfterFunc(d, f)}
}

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
