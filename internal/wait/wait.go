// Package wait holds the one way the handler and its queue wait for a
// time on an injectable clock.
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
