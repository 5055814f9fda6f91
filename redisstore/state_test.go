package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// skew is how far apart the clocks of the tests' "processes" are set.
const skew = 7 * time.Second

// tolerance absorbs the Redis time that passes between a write and a read.
const tolerance = 250 * time.Millisecond

func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

func TestSetHoldState(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	now := time.Now()
	require.NoError(t, s.SetHold(ctx, "graph.microsoft.com", "users", now.Add(3*time.Second)))
	require.NoError(t, s.SetHold(ctx, "graph.microsoft.com", "users", now.Add(time.Second)), "an earlier until")
	require.NoError(t, s.SetHold(ctx, "graph.microsoft.com", "users/1/messages", now.Add(5*time.Second)))
	require.NoError(t, s.SetHold(ctx, "graph.microsoft.com", "past", now.Add(-time.Second)))

	st, err := s.State(ctx, "graph.microsoft.com")
	require.NoError(t, err)
	require.Len(t, st.Holds, 2)
	assert.WithinDuration(t, now.Add(3*time.Second), st.Holds["users"], tolerance, "the later until wins")
	assert.WithinDuration(t, now.Add(5*time.Second), st.Holds["users/1/messages"], tolerance)
	assert.True(t, s.Active("graph.microsoft.com"))
	assert.False(t, s.Active("contoso.sharepoint.com"))

	st, err = s.State(ctx, "contoso.sharepoint.com")
	require.NoError(t, err)
	assert.Empty(t, st.Holds)
}

func TestHoldExpiresInRedis(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	require.NoError(t, s.SetHold(ctx, "h", "k", time.Now().Add(50*time.Millisecond)))
	k := s.keys.holds("h")
	ttl, err := s.rdb.PTTL(ctx, k).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))
	assert.LessOrEqual(t, ttl, 51*time.Millisecond, "the key lives as long as its last hold")
	require.Eventually(t, func() bool { return s.rdb.Exists(ctx, k).Val() == 0 }, 2*time.Second, 5*time.Millisecond)
}

// Processes whose clocks disagree by seconds agree on a hold: each hands
// Redis a duration from its own now and reads one back onto its own clock.
func TestHoldAcrossSkewedClocks(t *testing.T) {
	ctx := context.Background()
	ahead := newStore(t, shared, WithClock(skewed(skew)))
	behind := newStore(t, shared, WithClock(skewed(-skew)))
	require.NoError(t, ahead.SetHold(ctx, "h", "users", ahead.cfg.now().Add(2*time.Second)))
	st, err := behind.State(ctx, "h")
	require.NoError(t, err)
	assert.WithinDuration(t, behind.cfg.now().Add(2*time.Second), st.Holds["users"], tolerance)
}

func TestPace(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, shared)
	late := newStore(t, shared)
	require.NoError(t, a.SetPace(ctx, "h", "users", Pace{Rate: 400, Burst: 40}))
	require.NoError(t, a.SetPace(ctx, "h", "users/{id}", Pace{Rate: 2.5, Burst: 1}))
	require.NoError(t, a.SetPace(ctx, "h", "users", Pace{Rate: 380.5, Burst: 38}), "the last writer wins")

	st, err := late.State(ctx, "h")
	require.NoError(t, err)
	assert.Equal(t, map[string]Pace{"users": {Rate: 380.5, Burst: 38}, "users/{id}": {Rate: 2.5, Burst: 1}}, st.Paces)

	ttl, err := a.rdb.PTTL(ctx, a.keys.pace("h")).Result()
	require.NoError(t, err)
	assert.InDelta(t, DefaultPaceFor.Seconds(), ttl.Seconds(), 1)
}

func TestPaceRejectsBadValues(t *testing.T) {
	s := newStore(t, shared)
	for _, p := range []Pace{{Rate: 0, Burst: 1}, {Rate: -1, Burst: 1}, {Rate: 1, Burst: 0}} {
		err := s.SetPace(context.Background(), "h", "b", p)
		require.Error(t, err, "%+v", p)
		assert.NotErrorIs(t, err, ErrUnavailable)
	}
}

func TestAnnounce(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, shared)
	other := newStore(t, shared, WithClock(skewed(skew)))
	reset := time.Now().Add(30 * time.Second)
	tests := []struct {
		name      string
		store     *Store
		remaining int
		reset     time.Time
		want      int
	}{
		{"first report", s, 50, reset, 50},
		{"lower in the same window wins", other, 20, reset.Add(skew + 200*time.Millisecond), 20},
		{"higher in the same window is older news", s, 35, reset, 20},
		{"a new window replaces it", s, 90, reset.Add(60 * time.Second), 90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.store.Announce(ctx, "h", "users", tt.remaining, tt.reset))
			st, err := s.State(ctx, "h")
			require.NoError(t, err)
			assert.Equal(t, tt.want, st.Announced["users"].Remaining)
		})
	}
	require.NoError(t, s.Announce(ctx, "h", "sites", 3, time.Now().Add(40*time.Millisecond)))
	require.Eventually(t, func() bool {
		st, err := s.State(ctx, "h")
		_, ok := st.Announced["sites"]
		return err == nil && !ok
	}, 2*time.Second, 5*time.Millisecond, "an announcement ends at its reset")
}

// The state says when the fleet first saw the host throttled in the spell
// that keeps it active, on the reader's clock whatever the writer's, so
// that a process can tell whether it joins the fleet's first wave.
func TestStateSaysWhenTheHostWasFirstThrottled(t *testing.T) {
	tests := []struct {
		name  string
		mark  func(ctx context.Context, s *Store) error
		known bool
	}{
		{"hold", func(ctx context.Context, s *Store) error {
			return s.SetHold(ctx, "graph.microsoft.com", "users", time.Now().Add(skew).Add(3*time.Second))
		}, true},
		{"mark", func(ctx context.Context, s *Store) error {
			return s.MarkActive(ctx, "graph.microsoft.com")
		}, true},
		{"none", func(context.Context, *Store) error { return nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			writer := newStore(t, shared, WithClock(skewed(skew)))
			reader := newStore(t, shared)
			first := time.Now()
			require.NoError(t, tt.mark(ctx, writer))
			// A later throttle of the same spell leaves it.
			require.NoError(t, tt.mark(ctx, writer))
			st, err := reader.State(ctx, "graph.microsoft.com")
			require.NoError(t, err)
			if !tt.known {
				assert.True(t, st.Throttled.IsZero())
				return
			}
			assert.WithinDuration(t, first, st.Throttled, tolerance)
		})
	}
}
