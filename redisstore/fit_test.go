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
	at := seedTimes(t, s, s.keys.released("h", "b"), fmt.Sprint("released", end), n, span, end)
	long := at - time.Minute.Microseconds()
	require.NoError(t, s.rdb.HSet(context.Background(), s.keys.schedule("h", "b"), "born", long, "since", long).Err())
}

// seedTimes adds n send times, evenly over the span that ends end before
// Redis's now, to the sorted set key, each member tagged with tag, and
// returns the span's end in Redis's microseconds.
func seedTimes(t *testing.T, s *Store, key, tag string, n int, span, end time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	now, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	at := now.UnixMicro() - end.Microseconds()
	zs := make([]redis.Z, n)
	for i := range zs {
		sent := at - span.Microseconds() + int64(i)*span.Microseconds()/int64(n)
		zs[i] = redis.Z{Score: float64(sent), Member: fmt.Sprint(tag, sent, i)}
	}
	require.NoError(t, s.rdb.ZAdd(ctx, key, zs...).Err())
	return at
}

// seedRefused records n throttles of budget h/b's releases evenly over the
// span that ends end before Redis's now, as the processes would have.
func seedRefused(t *testing.T, s *Store, n int, span, end time.Duration) {
	t.Helper()
	if n == 0 {
		return
	}
	seedTimes(t, s, s.keys.refused("h", "b"), "refused", n, span, end)
}

// fitSchedule sets the schedule of budget of host as the fleet's throttles
// would have fitted it at rate, an hour before it probes above: a schedule
// that spaces releases at exactly that rate.
func fitSchedule(t *testing.T, s *Store, host, budget string, rate float64) {
	t.Helper()
	ctx := context.Background()
	now, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, s.rdb.HSet(ctx, s.keys.schedule(host, budget), "rate", rate, "since", now.UnixMicro(),
		"hold", time.Hour.Microseconds(), "born", now.UnixMicro()).Err())
}

// newSchedule returns a store whose budget h/b has the schedule fields
// (name, value, ...) that fields gives from Redis's now, in µs.
func newSchedule(t *testing.T, fields func(now int64) []any) *Store {
	t.Helper()
	ctx := context.Background()
	s := newStore(t, shared)
	now, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, s.rdb.HSet(ctx, s.keys.schedule("h", "b"), fields(now.UnixMicro())...).Err())
	return s
}

// searching reports whether budget h/b's schedule still searches for the
// budget's rate: no throttle has fitted it.
func searching(t *testing.T, s *Store) bool {
	t.Helper()
	step, err := s.rdb.HExists(context.Background(), s.keys.schedule("h", "b"), "step").Result()
	require.NoError(t, err)
	return step
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
// what got through between them, when the fleet sent at least the
// schedule's rate meanwhile.
func TestThrottledFitsTheFleetsRate(t *testing.T) {
	tests := []struct {
		name     string
		before   int           // releases over the 250 ms before the first throttle
		released int           // releases between the two throttles
		refused  int           // throttles among them
		shares   float64       // the processes' paces, where the search began
		held     float64       // the rate held after the first throttle
		want     float64       // the rate after the second
		fitted   bool          // the second throttle fitted a rate
		span     time.Duration // between the two throttles
	}{
		{"fits what got through", 150, 600, 200, 100, 600, 400 * fitShare, true, time.Second},
		{"at most halves", 200, 800, 760, 100, 800, 400, true, time.Second},
		{"a span the fleet did not fill", 150, 300, 0, 100, 600, 600, false, time.Second},
		{"too few releases", 150, 10, 0, 100, 600, 600, false, time.Second},
		{"too short a span", 150, 30, 0, 100, 600, 600, false, 20 * time.Millisecond},
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
			seedRefused(t, s, tt.refused, tt.span, 0)

			// The first throttle, sent span ago, marks the bucket empty
			// and holds the rate the fleet sent at just before it.
			require.NoError(t, s.Throttled(ctx, "h", "b", tt.span, 3*time.Second))
			assert.InDelta(t, tt.held, fittedRate(t, s), tt.held/20)
			slot, err := s.Reserve(ctx, "h", "b", Pace{Rate: 1, Burst: 1}, time.Minute)
			require.NoError(t, err)
			assert.True(t, slot.Fitted, "the schedule alone spaces the fleet")

			// The second, sent now.
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			// The span is measured on Redis's clock: within 5 %.
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/20)
			hold, err := s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "hold").Int64()
			require.NoError(t, err)
			if tt.fitted {
				assert.Equal(t, (6 * time.Second).Microseconds(), hold, "twice the Retry-After")
			} else {
				assert.Equal(t, (2 * searchDoubling).Microseconds(), hold, "the search's mark's, until a throttle fits")
			}
		})
	}
}

// A throttle of a request sent before the last change of the rate, or so
// soon after that it met the same congestion, changes nothing. The first
// throttle of a search pauses it, and only a fit ends it.
func TestThrottledIgnoresTheSameCongestion(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	_, err := s.Reserve(ctx, "h", "b", Pace{Rate: 100, Burst: 1}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
	assert.True(t, searching(t, s), "a mark pauses the search")
	assert.InDelta(t, 100, fittedRate(t, s), 10, "too young a schedule to read the fleet's recent rate")

	seedReleases(t, s, 150, recentSpan, time.Second)
	seedReleases(t, s, 600, time.Second, 0)
	seedRefused(t, s, 200, time.Second, 0)
	require.NoError(t, s.Throttled(ctx, "h", "b", time.Second, 3*time.Second))
	require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
	fit := fittedRate(t, s)
	// The span is measured on Redis's clock, after the seeding: within 5 %.
	require.InDelta(t, 400*fitShare, fit, 400*fitShare/20)
	assert.False(t, searching(t, s), "the fit ended the search")
	// Sent 1 ms before this report, within two round trips of the fit.
	require.NoError(t, s.Throttled(ctx, "h", "b", time.Millisecond, 3*time.Second))
	assert.Equal(t, fit, fittedRate(t, s))
	// Sent 2 s ago, before the fit.
	require.NoError(t, s.Throttled(ctx, "h", "b", 2*time.Second, 3*time.Second))
	assert.Equal(t, fit, fittedRate(t, s))
}

// The schedule's first release begins the fleet's search for the budget's
// rate: from the pace of the process that made it, doubling every
// searchDoubling, as one process's pacer searches, and never past twice
// what the fleet released over its last step: a search the fleet does not
// use does not grow.
func TestReserveSearches(t *testing.T) {
	tests := []struct {
		name        string
		used        int // releases over the last step
		least, most time.Duration
	}{
		// 8 releases over the last 100 ms, 80/s: it may run at 8 times
		// the first pace, a burst of a tenth of a second (8 slots), then
		// a slot every 12.5 ms: the 40th waits 400 ms, less as the
		// search goes on while the 40 are made.
		{"used", 8, 200 * time.Millisecond, 400*time.Millisecond + slack},
		// None: twice what its own burst released, 20/s.
		{"unused", 0, 1500 * time.Millisecond, 2*time.Second + slack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, shared)
			res, err := s.Reserve(ctx, "h", "b", Pace{Rate: 10, Burst: 1}, time.Minute)
			require.NoError(t, err)
			assert.True(t, res.Fitted, "the schedule alone spaces the fleet from its first release")
			assert.InDelta(t, 10, fittedRate(t, s), 0.01)
			step, err := s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "step").Int64()
			require.NoError(t, err)
			assert.Equal(t, searchDoubling.Microseconds(), step)
			// Pretend the search began three doublings ago: at 8 times
			// the first pace now, if the fleet used it.
			now, err := s.rdb.Time(ctx).Result()
			require.NoError(t, err)
			require.NoError(t, s.rdb.HSet(ctx, s.keys.schedule("h", "b"), "since", now.UnixMicro()-3*searchDoubling.Microseconds(),
				"tat", now.UnixMicro()).Err())
			require.NoError(t, s.rdb.Del(ctx, s.keys.released("h", "b")).Err())
			if tt.used > 0 {
				seedTimes(t, s, s.keys.released("h", "b"), "released", tt.used, searchDoubling, 0)
			}
			var last time.Duration
			for range 40 {
				res, err := s.Reserve(ctx, "h", "b", Pace{Rate: 10, Burst: 1}, time.Minute)
				require.NoError(t, err)
				last = res.Wait
			}
			end, err := s.rdb.Time(ctx).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, last, tt.most)
			if took := end.Sub(now); took < 30*time.Millisecond {
				assert.GreaterOrEqual(t, last, tt.least, "made within %v", took)
			}
		})
	}
}

func TestThrottledRejectsNegativeDurations(t *testing.T) {
	s := newStore(t, shared)
	assert.Error(t, s.Throttled(context.Background(), "h", "b", -time.Second, 0))
	assert.Error(t, s.Throttled(context.Background(), "h", "b", 0, -time.Second))
}

// A schedule's probe counts only the time in which the fleet had requests
// waiting for its slots: a rate left unused, while every request waited
// out a Retry-After, is no evidence that the server takes it.
func TestReserveDoesNotProbeThroughIdleTime(t *testing.T) {
	tests := []struct {
		name string
		// lastSlot is how long after the rate was set its last slot was
		// due: busy until then, idle since.
		lastSlot time.Duration
		// The 40th of 40 reservations made at once waits between these.
		least, most time.Duration
	}{
		// Probing for 2 s beyond its 0.5 s hold: 200/s, a burst of 20,
		// then a slot every 5 ms: about 100 ms.
		{"busy all along", 2500 * time.Millisecond, 0, 150 * time.Millisecond},
		// Idle since its hold ended: 100/s, a burst of 10, then a slot
		// every 10 ms: 300 ms.
		{"idle since its hold", 500 * time.Millisecond, 250 * time.Millisecond, 300*time.Millisecond + slack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				since := now - (2500 * time.Millisecond).Microseconds()
				return []any{"rate", 100, "since", since, "hold", probeAfter.Microseconds(), "born", since,
					"tat", since + tt.lastSlot.Microseconds()}
			})
			var last time.Duration
			for range 40 {
				res, err := s.Reserve(ctx, "h", "b", Pace{Rate: 1, Burst: 1}, time.Minute)
				require.NoError(t, err)
				require.True(t, res.OK)
				last = res.Wait
			}
			assert.GreaterOrEqual(t, last, tt.least)
			assert.LessOrEqual(t, last, tt.most)
		})
	}
}

// A throttle that marks the server's bucket dry holds the rate at what the
// fleet sent just before it, read only over the time the fleet had
// requests waiting: releases that resumed a moment ago after an idle
// spell read no rate the fleet offered.
func TestMarkReadsOnlyBusyTime(t *testing.T) {
	tests := []struct {
		name string
		idle bool    // the schedule was idle until the 40 releases
		want float64 // the rate the mark holds
	}{
		{"busy all along", false, 40 / recentSpan.Seconds()},
		{"resumed after an idle spell", true, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				long, tat := now-time.Minute.Microseconds(), now
				if tt.idle {
					tat -= (2 * time.Second).Microseconds()
				}
				return []any{"rate", 400, "since", long, "hold", time.Hour.Microseconds(), "born", long, "tat", tat}
			})
			if tt.idle {
				for range 40 {
					_, err := s.Reserve(ctx, "h", "b", Pace{Rate: 1, Burst: 1}, time.Minute)
					require.NoError(t, err)
				}
			} else {
				seedTimes(t, s, s.keys.released("h", "b"), "released", 40, recentSpan, 0)
			}
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/20)
		})
	}
}

// The fleet's search starts from the sum of the paces its processes give,
// each from its part of the first wave, once they all reserved: as one
// process sending all of the fleet's requests would search.
func TestSearchStartsFromTheFleetsWave(t *testing.T) {
	ctx := context.Background()
	first := newStore(t, shared)
	second := newStore(t, shared)
	_, err := first.Reserve(ctx, "h", "b", Pace{Rate: 10, Burst: 1}, time.Minute)
	require.NoError(t, err)
	_, err = second.Reserve(ctx, "h", "b", Pace{Rate: 300, Burst: 1}, time.Minute)
	require.NoError(t, err)
	pace, err := first.rdb.HGet(ctx, first.keys.pace("h"), "b").Result()
	require.NoError(t, err)
	var each float64
	_, err = fmt.Sscan(pace, &each)
	require.NoError(t, err)
	// Each process's part of 310/s, barely doubled yet.
	assert.GreaterOrEqual(t, each, 155.0)
	assert.Less(t, each, 310.0)
}

// A mark pauses the fleet's search and only a fit ends it. While the mark
// holds, a throttle fits the rate from the span since the mark; once the
// hold is over the search goes on doubling, the server's bucket had room
// while it held, and the next throttle marks anew at what the fleet sent
// just before it.
func TestMarkPausesTheSearch(t *testing.T) {
	tests := []struct {
		name  string
		since time.Duration // before now: the mark's report
		// sentTo is how long before Redis's now, read as the releases are
		// seeded, the last was sent; negative: after it.
		sentTo time.Duration
		want   float64
		fitted bool
	}{
		{"fits within the mark's hold", 300 * time.Millisecond, 0, 400 * fitShare, true},
		// The releases run on past the seeding's now, so that the span the
		// mark reads back from the throttle's now is full however long a
		// loaded machine takes to get there (13 ms once cost 5 % of it).
		{"marks anew once the search went on", time.Second, -100 * time.Millisecond, 150 / recentSpan.Seconds(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				return []any{"rate", 100, "step", searchDoubling.Microseconds(), "hold", probeAfter.Microseconds(),
					"since", now - tt.since.Microseconds(), "mark", now - time.Second.Microseconds(),
					"born", now - time.Minute.Microseconds()}
			})
			seedTimes(t, s, s.keys.released("h", "b"), "released", 600, time.Second, tt.sentTo)
			seedRefused(t, s, 200, time.Second, 0)
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/20)
			assert.Equal(t, !tt.fitted, searching(t, s))
		})
	}
}

// A mark pauses a search for two of its steps, long enough to hear of
// the releases made at the rate it holds; a probe's mark holds for
// probeAfter.
func TestMarkHolds(t *testing.T) {
	tests := []struct {
		name   string
		fields []any
		want   time.Duration
	}{
		{"a search", []any{"rate", 100, "step", searchDoubling.Microseconds()}, 2 * searchDoubling},
		{"a probe", []any{"rate", 100}, probeAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				long := now - time.Minute.Microseconds()
				return append([]any{"since", long, "hold", 0, "born", long}, tt.fields...)
			})
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			hold, err := s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "hold").Int64()
			require.NoError(t, err)
			assert.Equal(t, tt.want.Microseconds(), hold)
		})
	}
}

// A server that named a wait may refuse whatever is sent until it ends (a
// fixed window, or a sliding window that counts its refusals, as HAProxy's
// stick table does): within the wait of the throttle whose fit last
// lowered the rate, a span in which almost nothing was accepted leaves the
// rate where it is. A span that accepted more fits as ever, and outside
// such a wait a lowering fit begins one.
func TestClosedSpans(t *testing.T) {
	tests := []struct {
		name    string
		closed  time.Duration // until when the last lowering's wait runs, from now; 0: none
		refused int           // of 600 releases over the last second
		want    float64
		// closes reports whether this fit begins a wait of its own.
		closes bool
	}{
		{"closed, in the wait", 2 * time.Second, 590, 500, false},
		{"a third, in the wait", 2 * time.Second, 400, 250, false},
		{"half, in the wait", 2 * time.Second, 300, 300 * fitShare, false},
		{"closed, past the wait", -time.Second, 590, 250, true},
		{"closed, no wait", 0, 590, 250, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				fields := []any{"rate", 500, "hold", time.Hour.Microseconds(), "mark", now - time.Second.Microseconds()}
				if tt.closed != 0 {
					fields = append(fields, "closed", now+tt.closed.Microseconds())
				}
				return fields
			})
			seedReleases(t, s, 600, time.Second, 0)
			seedRefused(t, s, tt.refused, time.Second, 0)
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			// The span is measured on Redis's clock: within 5 %.
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/20)

			now, err := s.rdb.Time(ctx).Result()
			require.NoError(t, err)
			closed, err := s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "closed").Int64()
			if !tt.closes {
				require.NoError(t, err)
				assert.Less(t, closed, now.UnixMicro()+tt.closed.Microseconds(), "the wait unchanged")
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, now.Add(3*time.Second).UnixMicro(), closed, float64(100*time.Millisecond.Microseconds()), "the wait this throttle named")
		})
	}
}

// A search's first throttle ends it at once, as a process's pacer ends its
// own: the server's bucket, empty at the host's first throttle, refilled
// until the schedule's birth and ran dry at the throttled release; the
// rate at which a bucket holding a tenth of a second of it does exactly
// that, replaying the releases since the birth, is the server's. Without
// the host's first throttle, or with too few releases, the throttle marks.
func TestSearchFitsAtItsFirstThrottle(t *testing.T) {
	const (
		// 48 releases at 600/s since the birth, 40 ms after the host's
		// first throttle: a bucket of 40 refilling at 400/s holds 16 at
		// the birth and runs dry at the 48th (16 + 48*400/600 = 48).
		releases = 48
		span     = 80 * time.Millisecond
		refill   = 40 * time.Millisecond
	)
	tests := []struct {
		name     string
		first    bool // the store knows the host's first throttle
		releases int
		fitted   bool
		want     float64
		// emptied is how long before the birth a process published its
		// pace at its first throttle: the bucket was empty then too; 0:
		// none did.
		emptied time.Duration
	}{
		{"fits", true, releases, true, 400 * fitShare, 0},
		{"no first throttle known", false, releases, false, releases / span.Seconds(), 0},
		{"too few releases", true, minReleases - 1, false, (minReleases - 1) / span.Seconds(), 0},
		// The bucket, empty again 20 ms before the birth, held 8 at the
		// birth at 400/s: the 48 releases need 500/s to run it dry only
		// at the last (8 + 48*500/600 = 48); read from the host's first
		// throttle alone, 400/s.
		{"a later process emptied it", true, releases, true, 500 * fitShare, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				born := now - span.Microseconds()
				fields := []any{"rate", 600, "step", searchDoubling.Microseconds(), "hold", 0,
					"since", born, "born", born}
				if tt.emptied > 0 {
					fields = append(fields, "empty", born-tt.emptied.Microseconds())
				}
				return fields
			})
			end := seedTimes(t, s, s.keys.released("h", "b"), "released", tt.releases, span, 0)
			if tt.first {
				first := (end - span.Microseconds() - refill.Microseconds()) / 1000
				require.NoError(t, s.rdb.Set(ctx, s.keys.since("h"), first, time.Minute).Err())
			}
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, 3*time.Second))
			assert.Equal(t, !tt.fitted, searching(t, s), "the search ends only with a fit")
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/10)
		})
	}
}

// The server let the fleet's first wave through at once after a quiet
// spell: its bucket holds at least that wave, the sum of the bursts the
// processes published with their shares, and the fit never ends below
// the wave per Retry-After. A sliding window of 400 a second lets 400
// through in a few milliseconds; read as a bucket of a tenth of a second,
// those 410 releases in 100 ms would say 2000/s. A fit at that floor is
// the least the server sustained, not a rate read: it holds only until
// the throttle's wait ends, then probes above.
func TestSearchFitReadsTheFirstWave(t *testing.T) {
	const (
		span       = 100 * time.Millisecond
		retryAfter = 3 * time.Second
	)
	tests := []struct {
		name     string
		wave     int // the bursts the processes published, summed
		releases int
		want     float64
		hold     time.Duration
	}{
		// 400 + 0.1 s * r runs dry at the 410th release only below 100/s,
		// under the wave per Retry-After.
		{"a window's quota", 400, 410, 400 / retryAfter.Seconds(), retryAfter},
		// A bucket of 40 at 400/s, full at the birth, runs dry at the 80th
		// release at 800/s (40 + 0.1 s * 400 = 80); a wave of 40 says no
		// more than a tenth of a second of the rate does.
		{"a bucket's burst", 40, 80, 400 * fitShare, 2 * retryAfter},
		{"no wave published", 0, 80, 400 * fitShare, 2 * retryAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSchedule(t, func(now int64) []any {
				born := now - span.Microseconds()
				return []any{"rate", 8000, "step", searchDoubling.Microseconds(), "hold", 0, "since", born, "born", born}
			})
			if tt.wave > 0 {
				require.NoError(t, s.SetPace(ctx, "h", "b", Pace{Rate: 1, Burst: tt.wave}))
			}
			end := seedTimes(t, s, s.keys.released("h", "b"), "released", tt.releases, span, 0)
			// The first wave's throttle came a Retry-After before the birth:
			// the bucket was full again.
			first := (end - span.Microseconds() - retryAfter.Microseconds()) / 1000
			require.NoError(t, s.rdb.Set(ctx, s.keys.since("h"), first, time.Minute).Err())
			require.NoError(t, s.Throttled(ctx, "h", "b", 0, retryAfter))
			assert.False(t, searching(t, s), "the first throttle fits")
			assert.InDelta(t, tt.want, fittedRate(t, s), tt.want/10)
			hold, err := s.rdb.HGet(ctx, s.keys.schedule("h", "b"), "hold").Int64()
			require.NoError(t, err)
			assert.Equal(t, tt.hold.Microseconds(), hold)
		})
	}
}
