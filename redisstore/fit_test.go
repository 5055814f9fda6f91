package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seedReleases records n releases of budget h/b evenly over the span that
// ends end before Redis's now, as the schedule would have, and marks the
// schedule born long before: a fleet that has been sending.
func seedReleases(t *testing.T, s *Store, n int, span, end time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	at := now.UnixMicro() - end.Microseconds()
	zs := make([]redis.Z, n)
	for i := range zs {
		sent := at - span.Microseconds() + int64(i)*span.Microseconds()/int64(n)
		zs[i] = redis.Z{Score: float64(sent), Member: fmt.Sprint(sent, i, end)}
	}
	require.NoError(t, s.rdb.ZAdd(ctx, s.keys.released("h", "b"), zs...).Err())
	require.NoError(t, s.rdb.HSet(ctx, s.keys.schedule("h", "b"), "born", at-time.Minute.Microseconds()).Err())
}

func fittedRate(t *testing.T, s *Store) float64 {
	t.Helper()
	v, err := s.rdb.HGet(context.Background(), s.keys.schedule("h", "b"), "rate").Result()
	require.NoError(t, err)
	r, err := strconv.ParseFloat(v, 64)
	require.NoError(t, err)
	return r
}

// From one throttle to the next the server's bucket refilled at its rate
// and every token went to a request the fleet sent: the schedule runs at
// what got through between them.
func TestThrottledFitsTheFleetsRate(t *testing.T) {
	tests := []struct {
		name     string
		before   int           // releases over the 250 ms before the first throttle
		released int           // releases between the two throttles
		shares   float64       // the processes' paces before the fit
		held     float64       // the rate held after the first throttle
		want     float64       // the fitted rate
		fitted   bool          // the second throttle fitted a rate
		span     time.Duration // between the two throttles
	}{
		{"fits what got through", 150, 401, 1000, 600, 400 * fitShare, true, time.Second},
		{"held at the shares when lower", 150, 401, 500, 500, 400 * fitShare, true, time.Second},
		{"at most halves", 200, 41, 1000, 800, 400, true, time.Second},
		{"too few releases", 150, 10, 1000, 600, 600, false, time.Second},
		{"too short a span", 150, 30, 1000, 600, 600, false, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, shared)
			_, err := s.Reserve(ctx, "h", "b", Pace{Rate: tt.shares, Burst: 1}, time.Minute)
			require.NoError(t, err)
			require.NoError(t, s.rdb.Del(ctx, s.keys.released("h", "b")).Err())
			seedReleases(t, s, tt.before, recentSpan, tt.span)
			seedReleases(t, s, tt.released, tt.span, 0)

			// The first throttle, sent span ago, marks the bucket empty
			// and holds the rate the fleet sent at just before it.
			require.NoError(t, s.Throttled(ctx, "h", "b", tt.span, 3*time.Second))
			assert.InDelta(t, tt.held, fittedRate(t, s), tt.held/20)
			slot, err := s.Reserve(ctx, "h", "b", Pace{Rate: 1, Burst: 1}, time.Minute)
			require.NoError(t, err)
			assert.True(t, slot.Fitted, "the schedule alone spaces the fleet from the first throttle on")

			// The second, sent now.
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			// The span is measured on Redis's clock: within 5 %.
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/20)
			hold, err := s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "hold").Int64()
			require.NoError(t, err)
			if tt.fitted {
				assert.Equal(t, (6 * time.Second).Microseconds(), hold, "twice the Retry-After")
			} else {
				assert.Equal(t, maxSpan.Microseconds(), hold, "waiting for the throttle that fits")
			}
		})
	}
}

// A throttle of a request sent before the last change of the rate, or so
// soon after that it met the same congestion, changes nothing; nor does
// one in the fleet's first second, when some of its sends went unscheduled.
func TestThrottledIgnoresTheSameCongestion(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	_, err := s.Reserve(ctx, "h", "b", Pace{Rate: 1000, Burst: 1}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
	_, err = s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "rate").Result()
	require.ErrorIs(t, err, redis.Nil, "a schedule born now is still settling")

	seedReleases(t, s, 150, recentSpan, time.Second)
	seedReleases(t, s, 401, time.Second, 0)
	require.NoError(t, s.Throttled(ctx, "h", "b", time.Second, 3*time.Second))
	require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
	fit := fittedRate(t, s)
	require.InDelta(t, 400*fitShare, fit, 8)
	// Sent 1 ms before this report, within two round trips of the fit.
	require.NoError(t, s.Throttled(ctx, "h", "b", time.Millisecond, 3*time.Second))
	assert.Equal(t, fit, fittedRate(t, s))
	// Sent 2 s ago, before the fit.
	require.NoError(t, s.Throttled(ctx, "h", "b", 2*time.Second, 3*time.Second))
	assert.Equal(t, fit, fittedRate(t, s))
}

func TestThrottledRejectsNegativeDurations(t *testing.T) {
	s := newStore(t, shared)
	assert.Error(t, s.Throttled(context.Background(), "h", "b", -time.Second, 0))
	assert.Error(t, s.Throttled(context.Background(), "h", "b", 0, -time.Second))
}
