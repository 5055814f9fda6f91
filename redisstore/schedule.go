package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ShareWindow is how recently a process must have reserved on a budget for
// its pace to count in the budget's fleet-wide rate. The sum is what the
// fleet learned of the server's budget, which does not shrink when a
// process's requests all wait out a Retry-After or its work runs out first:
// the processes still sending then use the whole of it. It is the throttle
// queue's recovery window, as long as a budget stays paced after its last
// throttle.
const ShareWindow = 10 * time.Second

// Reserve takes the next slot of a budget's fleet-wide release schedule, in
// one round trip, and reports how long the caller must wait before it
// sends. p is this process's pace: the schedule runs at the sum of the paces
// the processes that reserved on the budget within ShareWindow gave, so that
// the fleet releases at what its processes learned together and their
// releases interleave instead of bunching. The schedule runs on Redis's
// clock, so processes whose clocks disagree share it exactly. A slot further
// away than max is not taken: Reserve then reports ok false and the wait it
// would have had, and the caller decides by its own limits (R23) without
// leaving a hole in the schedule. The pace one process of the fleet
// releases at (the fleet's over the number of processes) is published for
// State, where a process that joins later starts from it.
func (s *Store) Reserve(ctx context.Context, host, budget string, p Pace, max time.Duration) (wait time.Duration, ok bool, err error) {
	if err := validatePace(p); err != nil {
		return 0, false, fmt.Errorf("redisstore: reserve %s/%s: %w", host, budget, err)
	}
	r, err := call(ctx, s, "reserve", func(ctx context.Context) ([]int64, error) {
		return reserveScript.Run(ctx, s.rdb,
			[]string{s.keys.schedule(host, budget), s.keys.shares(host, budget), s.keys.pace(host)},
			strconv.FormatFloat(p.Rate, 'g', 8, 64), p.Burst, max.Microseconds(),
			s.token, s.cfg.paceFor.Milliseconds(), ShareWindow.Microseconds(), budget).Int64Slice()
	})
	if err == nil && len(r) != 3 {
		err = fmt.Errorf("%w: unexpected reply %v", ErrUnavailable, r)
	}
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: reserve %s/%s: %w", host, budget, err)
	}
	s.in.recordPace(host, budget, float64(r[2])/1000)
	return time.Duration(r[1]) * time.Microsecond, r[0] == 1, nil
}
