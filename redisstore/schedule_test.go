package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slack absorbs the Redis time that passes between two reservations on a
// shared, busy machine; the schedule itself is exact to the microsecond.
const slack = 20 * time.Millisecond

func TestReserveSchedule(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	p := Pace{Rate: 10, Burst: 2} // one slot per 100 ms, two at once
	var waits []time.Duration
	for range 5 {
		w, ok, err := s.Reserve(ctx, "h", "users", p, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		waits = append(waits, w)
	}
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	for i := range want {
		assert.InDelta(t, want[i].Seconds(), waits[i].Seconds(), slack.Seconds(), "reservation %d: %v", i, waits)
	}
	ttl, err := s.rdb.PTTL(ctx, s.keys.schedule("h", "users")).Result()
	require.NoError(t, err)
	assert.InDelta(t, (500 * time.Millisecond).Seconds(), ttl.Seconds(), slack.Seconds(),
		"the schedule expires once its last slot is past")
}

// A slot further than the caller can wait is not taken: the next caller
// gets the slot it would have had.
func TestReserveBeyondMaxTakesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	p := Pace{Rate: 10, Burst: 1}
	_, ok, err := s.Reserve(ctx, "h", "b", p, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	w, ok, err := s.Reserve(ctx, "h", "b", p, 10*time.Millisecond)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.InDelta(t, 0.1, w.Seconds(), slack.Seconds())
	w, ok, err = s.Reserve(ctx, "h", "b", p, time.Second)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.InDelta(t, 0.1, w.Seconds(), slack.Seconds(), "the refused reservation left no hole")
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
	for i := range 9 {
		w, ok, err := stores[i%len(stores)].Reserve(ctx, "h", "b", p, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assert.InDelta(t, (time.Duration(i) * 50 * time.Millisecond).Seconds(), w.Seconds(), slack.Seconds(), "slot %d", i)
	}
}

func TestReserveRejectsBadPace(t *testing.T) {
	s := newStore(t, shared)
	_, _, err := s.Reserve(context.Background(), "h", "b", Pace{Rate: 0, Burst: 1}, time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnavailable)
}
