package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a Redis Cluster every key of a store shares the {prefix} hash tag, so
// the scripts that touch several keys run, and notices reach every process.
func TestCluster(t *testing.T) {
	srv, err := startServerMode(t.TempDir(), true)
	require.NoError(t, err)
	t.Cleanup(srv.kill)
	client := func() redis.UniversalClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.addr()}})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	ctx := context.Background()
	a := newStoreOn(t, client())
	b := newStoreOn(t, client())
	waitSubscribed(t, b)

	require.NoError(t, a.SetHold(ctx, "graph.microsoft.com", "users", time.Now().Add(time.Minute)))
	require.Eventually(t, func() bool { return b.Active("graph.microsoft.com") }, noticeWithin, time.Millisecond)
	require.NoError(t, a.SetPace(ctx, "graph.microsoft.com", "users", Pace{Rate: 400, Burst: 40}))
	require.NoError(t, a.Announce(ctx, "graph.microsoft.com", "users", 10, time.Now().Add(time.Minute)))
	st, err := b.State(ctx, "graph.microsoft.com")
	require.NoError(t, err)
	assert.Len(t, st.Holds, 1)
	assert.Equal(t, Pace{Rate: 400, Burst: 40}, st.Paces["users"])
	assert.Equal(t, 10, st.Announced["users"].Remaining)

	res, err := b.Reserve(ctx, "graph.microsoft.com", "users", Pace{Rate: 400, Burst: 40}, time.Second)
	ok := res.OK
	require.NoError(t, err)
	assert.True(t, ok)
	sl, _, err := b.Acquire(ctx, "graph.microsoft.com", "users/a@contoso.com", mailboxLimit)
	require.NoError(t, err)
	require.NotNil(t, sl)
	require.NoError(t, sl.Release(ctx))
}
