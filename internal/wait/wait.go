// Package wait holds the ways the handler, its queue and its outage gate
// wait on an injectable clock, written once.
package wait

import (
	"context"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Until waits until at on clock, or until ctx ends, and returns ctx's
// error if it has ended. A time already passed returns at once.
func Until(ctx context.Context, clock options.Clock, at time.Time) error {
	d := at.Sub(clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Woken waits for d on clock (with no time limit when d < 0), for a signal
// on wake, or until ctx ends, and returns ctx's error if it ended first: the
// wait of a request held in a queue, which the queue wakes when its turn may
// have come.
func Woken(ctx context.Context, clock options.Clock, d time.Duration, wake <-chan struct{}) error {
	if d < 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
			return nil
		}
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-t.C():
	}
	return nil
}
