package redisstore

import (
	"context"
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
	p := Pace{Rate: 10, Burst: 2} // one slot per 100 ms, two at once
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	first := time.Now()
	for i := range want {
		w, ok, err := s.Reserve(ctx, "h", "users", p, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assertSlot(t, want[i], w, first, "reservation %d", i)
	}
	ttl, err := s.rdb.PTTL(ctx, s.keys.schedule("h", "users")).Result()
	require.NoError(t, err)
	assertSlot(t, 500*time.Millisecond, ttl, first, "the schedule expires once its last slot is past")
}

// A slot further than the caller can wait is not taken: the next caller
// gets the slot it would have had.
func TestReserveBeyondMaxTakesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	p := Pace{Rate: 1, Burst: 1}
	first := time.Now()
	_, ok, err := s.Reserve(ctx, "h", "b", p, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	w, ok, err := s.Reserve(ctx, "h", "b", p, 10*time.Millisecond)
	require.NoError(t, err)
	assert.False(t, ok)
	assertSlot(t, time.Second, w, first)
	w, ok, err = s.Reserve(ctx, "h", "b", p, 2*time.Second)
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
	p := Pace{Rate: 20, Burst: 1}
	first := time.Now()
	for i := range 9 {
		w, ok, err := stores[i%len(stores)].Reserve(ctx, "h", "b", p, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assertSlot(t, time.Duration(i)*50*time.Millisecond, w, first, "slot %d", i)
	}
}

func TestReserveRejectsBadPace(t *testing.T) {
	s := newStore(t, shared)
	_, _, err := s.Reserve(context.Background(), "h", "b", Pace{Rate: 0, Burst: 1}, time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnavailable)
}
