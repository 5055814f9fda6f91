package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// The memory each key takes, as docs/fleet.md states it, with the default
// prefix and Graph's host: Redis's own count (MEMORY USAGE), key and
// overhead included.
func TestKeyMemory(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, shared)
	s := newStoreOn(t, rdb, WithPrefix(DefaultPrefix))
	t.Cleanup(func() {
		keys, _ := rdb.Keys(ctx, "{"+DefaultPrefix+"}:*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	const host = "graph.microsoft.com"
	until := time.Now().Add(time.Minute)
	for i := range 10 {
		require.NoError(t, s.SetHold(ctx, host, fmt.Sprintf("users/%08d-0000-0000-0000-000000000000/messages", i), until))
		require.NoError(t, s.SetPace(ctx, host, fmt.Sprintf("users/%08d-0000-0000-0000-000000000000", i), Pace{Rate: 2.5, Burst: 4}))
		require.NoError(t, s.Announce(ctx, host, fmt.Sprintf("budget-%d", i), 1200, until))
	}
	const crowded = "contoso.sharepoint.com"
	for i := range maxHoldsPerHost {
		require.NoError(t, s.SetHold(ctx, crowded, fmt.Sprintf("users/%08d-0000-0000-0000-000000000000/messages", i), until))
	}
	// A second of a budget paced at 400/s, and one throttle.
	for range 400 {
		_, err := s.Reserve(ctx, host, "users", Pace{Rate: 400, Burst: 40}, time.Minute)
		require.NoError(t, err)
	}
	require.NoError(t, s.Throttled(ctx, host, "users", time.Millisecond, 3*time.Second))
	// The shares of a fleet of 20 processes.
	for range 19 {
		require.NoError(t, newStoreOn(t, rdb, WithPrefix(DefaultPrefix)).SetPace(ctx, host, "users", Pace{Rate: 5, Burst: 1}))
	}
	var slots []options.Slot
	for range mailboxLimit {
		sl, _, err := s.Acquire(ctx, host, "users/00000000-0000-0000-0000-000000000000", mailboxLimit)
		require.NoError(t, err)
		slots = append(slots, sl)
	}
	for _, tc := range []struct {
		key   string
		what  string
		bound int64 // bytes, as documented
	}{
		{s.keys.hosts, "hosts, two hosts", 200},
		{s.keys.since(host), "since, one host", 100},
		{s.keys.holds(host), "holds, 10 targets", 1200},
		{s.keys.holds(crowded), "holds, 1024 (the cap)", 180_000},
		{s.keys.pace(host), "paces, 10 budgets", 1000},
		{s.keys.announced(host), "announced, 10 budgets", 700},
		{s.keys.schedule(host, "users"), "schedule, one budget", 250},
		{s.keys.shares(host, "users"), "shares, 20 processes", 1300},
		{s.keys.released(host, "users"), "send times, 400", 55_000},
		{s.keys.refused(host, "users"), "throttle times, 1", 200},
		{s.keys.slots(host, "users/00000000-0000-0000-0000-000000000000"), "slots, 4 held", 500},
	} {
		// SAMPLES 0: every element counted; the default samples five, and a
		// sorted set's skiplist levels are random, so the estimate wanders.
		n, err := rdb.MemoryUsage(ctx, tc.key, 0).Result()
		require.NoError(t, err, tc.key)
		t.Logf("%-24s %5d bytes  %s", tc.what, n, tc.key)
		assert.LessOrEqual(t, n, tc.bound, tc.what)
	}
	for _, sl := range slots {
		require.NoError(t, sl.Release(ctx))
	}
}
