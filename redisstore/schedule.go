package redisstore

import (
	"context"
	"fmt"
	"time"
)

// Reserve takes the next slot of a budget's fleet-wide release schedule at
// pace p, in one round trip, and reports how long the caller must wait
// before it sends. The schedule runs on Redis's clock, so processes whose
// clocks disagree share it exactly. A slot further away than max is not
// taken: Reserve then reports ok false and the wait it would have had, and
// the caller decides by its own limits (R23) without leaving a hole in the
// schedule.
func (s *Store) Reserve(ctx context.Context, host, budget string, p Pace, max time.Duration) (wait time.Duration, ok bool, err error) {
	if err := p.validate(); err != nil {
		return 0, false, fmt.Errorf("redisstore: reserve %s/%s: %w", host, budget, err)
	}
	interval := int64(float64(time.Second/time.Microsecond) / p.Rate)
	if interval < 1 {
		interval = 1
	}
	r, err := call(ctx, s, "reserve", func(ctx context.Context) ([]int64, error) {
		return reserveScript.Run(ctx, s.rdb, []string{s.keys.schedule(host, budget)},
			interval, p.Burst, max.Microseconds()).Int64Slice()
	})
	if err == nil && len(r) != 2 {
		err = fmt.Errorf("%w: unexpected reply %v", ErrUnavailable, r)
	}
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: reserve %s/%s: %w", host, budget, err)
	}
	return time.Duration(r[1]) * time.Microsecond, r[0] == 1, nil
}
