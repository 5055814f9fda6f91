package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Outlook allows 4 concurrent requests per mailbox, whichever process sends them.
const mailboxLimit = 4

func TestSlotsCapTheFleet(t *testing.T) {
	ctx := context.Background()
	procs := []*Store{newStore(t, shared), newStore(t, shared)}
	var held []options.Slot
	for i := range mailboxLimit {
		sl, _, err := procs[i%2].Acquire(ctx, "graph.microsoft.com", "users/a@contoso.com", mailboxLimit)
		require.NoError(t, err)
		require.NotNil(t, sl, "slot %d", i)
		held = append(held, sl)
	}
	sl, wait, err := procs[0].Acquire(ctx, "graph.microsoft.com", "users/a@contoso.com", mailboxLimit)
	require.NoError(t, err)
	assert.Nil(t, sl, "a fifth request to one mailbox waits, whichever process sends it")
	assert.InDelta(t, DefaultSlotLease.Seconds(), wait.Seconds(), 1)

	other, _, err := procs[1].Acquire(ctx, "graph.microsoft.com", "users/b@contoso.com", mailboxLimit)
	require.NoError(t, err)
	assert.NotNil(t, other, "another mailbox has slots of its own")

	require.NoError(t, held[0].Release(ctx))
	require.NoError(t, held[0].Release(ctx), "twice is harmless")
	sl, _, err = procs[1].Acquire(ctx, "graph.microsoft.com", "users/a@contoso.com", mailboxLimit)
	require.NoError(t, err)
	assert.NotNil(t, sl, "a released slot is free at once")
}

// A process that dies stops renewing: its slots come free when their lease ends.
func TestSlotsOfADeadProcessExpire(t *testing.T) {
	ctx := context.Background()
	const lease = 100 * time.Millisecond
	dead := newStore(t, shared, WithSlotLease(lease))
	alive := newStore(t, shared, WithSlotLease(lease))
	sl, _, err := dead.Acquire(ctx, "h", "mailbox", 1)
	require.NoError(t, err)
	require.NotNil(t, sl)
	dead.slots.stop() // as if the process died: no renewal, no release

	got, wait, err := alive.Acquire(ctx, "h", "mailbox", 1)
	require.NoError(t, err)
	require.Nil(t, got)
	assert.LessOrEqual(t, wait, lease)
	require.Eventually(t, func() bool {
		got, _, err = alive.Acquire(ctx, "h", "mailbox", 1)
		return err == nil && got != nil
	}, 2*time.Second, 5*time.Millisecond)
}

// A slot held past its lease stays held: the store renews it.
func TestSlotsAreRenewedWhileHeld(t *testing.T) {
	ctx := context.Background()
	const lease = 90 * time.Millisecond
	s := newStore(t, shared, WithSlotLease(lease))
	got, _, err := s.Acquire(ctx, "h", "mailbox", 1)
	require.NoError(t, err)
	sl := got.(*Slot)
	first, err := s.rdb.ZScore(ctx, sl.key, sl.token).Result()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		score, err := s.rdb.ZScore(ctx, sl.key, sl.token).Result()
		return err == nil && score >= first+float64(2*lease/time.Millisecond)
	}, 5*time.Second, 5*time.Millisecond, "renewed twice, past its first lease")
	require.NoError(t, sl.Release(ctx))
	require.Eventually(t, func() bool {
		s.slots.mu.Lock()
		defer s.slots.mu.Unlock()
		return !s.slots.running
	}, 5*time.Second, 5*time.Millisecond, "the renewer ends when nothing is held")
}

func TestCloseReleasesSlots(t *testing.T) {
	ctx := context.Background()
	s, err := New(newClient(t, shared), WithPrefix(testPrefix(t)))
	require.NoError(t, err)
	got, _, err := s.Acquire(ctx, "h", "mailbox", 1)
	require.NoError(t, err)
	sl := got.(*Slot)
	require.NoError(t, s.Close())
	assert.Zero(t, s.rdb.ZCard(ctx, sl.key).Val())
}

func TestAcquireRejectsBadLimit(t *testing.T) {
	s := newStore(t, shared)
	_, _, err := s.Acquire(context.Background(), "h", "k", 0)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnavailable)
}
