package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slack absorbs rounding; the schedule is exact to the microsecond.
const slack = 2 * time.Millisecond

// assertSlot checks a reservation's wait against its ideal: the slot's
// offset from the first reservation, less the time that has passed since
// it (measured here, which is at least what passed in Redis).
func assertSlot(t *testing.T, ideal, got time.Duration, first time.Time, msg ...any) {
	t.Helper()
	passed := time.Since(first)
	assert.LessOrEqual(t, got, ideal+slack, msg...)
	assert.GreaterOrEqual(t, got, ideal-passed-slack, msg...)
}

func TestReserveSchedule(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	fitSchedule(t, s, "h", "users", 10) // one slot per 100 ms, one at once
	p := Pace{Rate: 10, Burst: 2}
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
	first := time.Now()
	for i := range want {
		res, err := s.Reserve(ctx, "h", "users", p, time.Minute)
		w, ok := res.Wait, res.OK
		require.NoError(t, err)
		require.True(t, ok)
		assertSlot(t, want[i], w, first, "reservation %d", i)
	}
	ttl, err := s.rdb.PTTL(ctx, s.keys.schedule("h", "users")).Result()
	require.NoError(t, err)
	assertSlot(t, 500*time.Millisecond+ShareWindow, ttl, first, "the schedule expires a share window after its last slot")
}

// A schedule is born of a throttle, when the server's bucket is empty: its
// first slots come one interval apart, with no burst, the first a token's
// time away.
func TestReserveFreshScheduleHasNoBurst(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	// The search starts at 100/s, whose burst would be 10 slots at once.
	p := Pace{Rate: 100, Burst: 10}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}
	first := time.Now()
	for i := range want {
		res, err := s.Reserve(ctx, "h", "b", p, time.Minute)
		require.NoError(t, err)
		require.True(t, res.OK)
		assertSlot(t, want[i], res.Wait, first, "reservation %d", i)
	}
}

// A schedule's search starts from the higher of its processes' paces and
// the pace a throttled process published: the first to reserve may have
// joined with no wave of its own while every other request waits out a
// Retry-After.
func TestReserveSearchStartsFromAPublishedPace(t *testing.T) {
	tests := []struct {
		name      string
		published float64 // 0: none
		want      float64
	}{
		{"published", 200, 200},
		{"none", 0, 5},
		{"lower", 2, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, shared)
			if tt.published > 0 {
				require.NoError(t, s.SetPace(ctx, "h", "b", Pace{Rate: tt.published, Burst: 1}))
			}
			_, err := s.Reserve(ctx, "h", "b", Pace{Rate: 5, Burst: 1}, time.Minute)
			require.NoError(t, err)
			assert.InDelta(t, tt.want, fittedRate(t, s), 0.01)
			assert.True(t, searching(t, s))
		})
	}
}

// Every process that published the pace its search starts from counts in
// the schedule's first rate, as if it had reserved: the fleet's first wave
// was theirs too, though their requests all wait out its Retry-After and
// reserve nothing.
func TestReserveSearchStartsFromEveryPublishedShare(t *testing.T) {
	ctx := context.Background()
	a, b, c := newStore(t, shared), newStore(t, shared), newStore(t, shared)
	require.NoError(t, a.SetPace(ctx, "h", "b", Pace{Rate: 100, Burst: 10}))
	require.NoError(t, b.SetPace(ctx, "h", "b", Pace{Rate: 200, Burst: 20}))
	_, err := c.Reserve(ctx, "h", "b", Pace{Rate: 5, Burst: 1}, time.Minute)
	require.NoError(t, err)
	assert.InDelta(t, 305, fittedRate(t, c), 0.01, "a's and b's shares, and c's own")
	assert.True(t, searching(t, c))
	// b's publication, the latest, says when the bucket was last empty.
	shares, err := c.rdb.HGetAll(ctx, c.keys.shares("h", "b")).Result()
	require.NoError(t, err)
	var latest string
	for tok, v := range shares {
		if tok == b.token {
			latest = v[strings.LastIndexByte(v, ' ')+1:]
		}
	}
	empty, err := c.rdb.HGet(ctx, c.keys.schedule("h", "b"), "empty").Result()
	require.NoError(t, err)
	assert.Equal(t, latest, empty)
}

// A slot further than the caller can wait is not taken: the next caller
// gets the slot it would have had.
func TestReserveBeyondMaxTakesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	fitSchedule(t, s, "h", "b", 1)
	p := Pace{Rate: 1, Burst: 1}
	first := time.Now()
	res, err := s.Reserve(ctx, "h", "b", p, time.Second)
	ok := res.OK
	require.NoError(t, err)
	require.True(t, ok)
	res, err = s.Reserve(ctx, "h", "b", p, 10*time.Millisecond)
	w, ok := res.Wait, res.OK
	require.NoError(t, err)
	assert.False(t, ok)
	assertSlot(t, time.Second, w, first)
	res, err = s.Reserve(ctx, "h", "b", p, 2*time.Second)
	w, ok = res.Wait, res.OK
	require.NoError(t, err)
	assert.True(t, ok)
	assertSlot(t, time.Second, w, first, "the refused reservation left no hole")
}

// Processes whose clocks disagree by seconds share one schedule: each slot
// is one interval after the previous, whoever takes it.
func TestReserveAcrossSkewedClocks(t *testing.T) {
	ctx := context.Background()
	stores := []*Store{
		newStore(t, shared, WithClock(skewed(skew))),
		newStore(t, shared, WithClock(skewed(-skew))),
		newStore(t, shared),
	}
	fitSchedule(t, stores[2], "h", "b", 20) // a slot every 50 ms
	p := Pace{Rate: 20.0 / 3, Burst: 1}
	for _, s := range stores {
		res, err := s.Reserve(ctx, "h", "b", p, time.Minute)
		ok := res.OK
		require.NoError(t, err)
		require.True(t, ok)
	}
	var w0 time.Duration
	var first time.Time
	for i := range 9 {
		res, err := stores[i%len(stores)].Reserve(ctx, "h", "b", p, time.Minute)
		w, ok := res.Wait, res.OK
		require.NoError(t, err)
		require.True(t, ok)
		if i == 0 {
			w0, first = w, time.Now()
			continue
		}
		assertSlot(t, w0+time.Duration(i)*50*time.Millisecond, w, first, "slot %d", i)
	}
}

// The pace one process of the fleet releases at, the schedule's over the
// processes reserving on it, is published for State.
func TestReservePublishesOneProcesssPace(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, shared)
	b := newStore(t, shared, WithPrefix(a.cfg.prefix))
	fitSchedule(t, a, "h", "b", 40)
	stores := []*Store{a, b, a, b, a, b} // the burst of four, then two more
	paces := []Pace{{Rate: 10, Burst: 1}, {Rate: 30, Burst: 3}}
	var waits []time.Duration
	var first time.Time
	for i, s := range stores {
		if i == len(stores)-1 {
			first = time.Now()
		}
		res, err := s.Reserve(ctx, "h", "b", paces[i%2], time.Minute)
		require.NoError(t, err)
		require.True(t, res.OK)
		waits = append(waits, res.Wait)
	}
	// At 40/s: each slot past the burst 25 ms after the previous.
	assertSlot(t, waits[4]+25*time.Millisecond, waits[5], first)
	st, err := a.State(ctx, "h")
	require.NoError(t, err)
	assert.Equal(t, Pace{Rate: 20, Burst: 2}, st.Paces["b"], "one process's pace: the fleet's over two")
}

func TestReserveRejectsBadPace(t *testing.T) {
	s := newStore(t, shared)
	_, err := s.Reserve(context.Background(), "h", "b", Pace{Rate: 0, Burst: 1}, time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnavailable)
}
