package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noticeWithin bounds how long a notice may take between two processes on
// loopback; it arrives in about a round trip, the bound is for a busy machine.
const noticeWithin = 2 * time.Second

// A process learns of another's first throttle by notice, without asking.
func TestNoticeReachesOtherProcesses(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, shared)
	b := newStore(t, shared)
	waitSubscribed(t, b)
	assert.False(t, b.Active("graph.microsoft.com"))

	start := time.Now()
	require.NoError(t, a.SetHold(ctx, "graph.microsoft.com", "users", time.Now().Add(time.Second)))
	require.Eventually(t, func() bool { return b.Active("graph.microsoft.com") }, noticeWithin, time.Millisecond)
	t.Logf("notice reached the other process after %v", time.Since(start))

	require.NoError(t, a.MarkActive(ctx, "contoso.sharepoint.com"))
	require.Eventually(t, func() bool { return b.Active("contoso.sharepoint.com") }, noticeWithin, time.Millisecond)
}

// A process joining later learns the hosts already active when it subscribes.
func TestJoiningProcessLearnsActiveHosts(t *testing.T) {
	a := newStore(t, shared)
	require.NoError(t, a.MarkActive(context.Background(), "graph.microsoft.com"))
	late := newStore(t, shared)
	require.Eventually(t, func() bool { return late.Active("graph.microsoft.com") }, noticeWithin, time.Millisecond)
}

func TestActiveLapses(t *testing.T) {
	clock := newFakeClock(time.Unix(1000, 0))
	s := newStore(t, shared, WithActiveFor(time.Minute), WithClock(clock.Now))
	require.NoError(t, s.MarkActive(context.Background(), "h"))
	assert.True(t, s.Active("h"))
	clock.Advance(time.Minute - time.Millisecond)
	assert.True(t, s.Active("h"))
	clock.Advance(time.Millisecond)
	assert.False(t, s.Active("h"))
}

func TestActiveSetIsBounded(t *testing.T) {
	a := activeSet{max: 8}
	now := time.Unix(0, 0)
	for i := range 10 {
		a.extend(fmt.Sprint("host", i), now.Add(time.Hour+time.Duration(i)), now, 0)
	}
	assert.Len(t, *a.m.Load(), 8)
	for i, want := range []bool{false, false, true, true} {
		_, ok := a.until(fmt.Sprint("host", i), now)
		assert.Equal(t, want, ok, "host%d: the hosts ending first are forgotten first", i)
	}
}

func TestNoticeIgnoresForeignPayloads(t *testing.T) {
	s := newStore(t, shared)
	for _, p := range []string{"", "x", "12", "-5 h", "abc h", "10 "} {
		s.notice(p)
	}
	assert.Nil(t, s.active.m.Load())
}

// waitSubscribed waits until s's notice subscription is confirmed, so that
// a test's notice cannot race it.
func waitSubscribed(t *testing.T, s *Store) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := s.rdb.PubSubNumSub(context.Background(), s.keys.notice).Result()
		return err == nil && n[s.keys.notice] > 0
	}, noticeWithin, time.Millisecond)
}

// fakeClock is a process clock the test moves; the store's listener reads
// it from its own goroutine.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
