package redisstore

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// Two throttle queues on two stores of one Redis are two processes of a
// fleet: a hold the server named to one holds the other's request, and
// with Redis gone each goes on alone.
func TestQueuesShareThroughRedis(t *testing.T) {
	tests := []struct {
		name string
		down bool // Redis dies before the throttle
	}{
		{"redis up", false},
		{"redis killed", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t)
			_, qa, qb := twoQueues(t, srv, WithTimeout(100*time.Millisecond))
			clock := options.SystemClock()
			req, err := http.NewRequest(http.MethodGet, "https://graph.microsoft.com/v1.0/users/1", nil)
			require.NoError(t, err)
			ctx := context.Background()
			if tt.down {
				srv.kill()
			}

			p, err := qa.Admit(ctx, req, time.Time{}, time.Time{}, nil)
			require.NoError(t, err)
			qa.Report(req, p, throttle.Throttled, 5*time.Second, nil, clock.Now)

			if tt.down {
				assert.False(t, qb.Active(req), "no notice reached b")
				p, err := qb.Admit(ctx, req, time.Time{}, time.Now().Add(time.Second), nil)
				require.NoError(t, err, "b sends it: nothing held it past its limits")
				assert.WithinDuration(t, time.Now(), p.Sent, 500*time.Millisecond)
				return
			}
			// The notice reaches b within a round trip or so.
			require.Eventually(t, func() bool { return qb.Active(req) }, 5*time.Second, time.Millisecond)
			_, err = qb.Admit(ctx, req, time.Time{}, time.Now().Add(time.Second), nil)
			var held *throttle.HoldError
			require.ErrorAs(t, err, &held, "b holds what the server told a to leave alone")
			assert.WithinDuration(t, time.Now().Add(5*time.Second), held.Until, time.Second)
		})
	}
}

// twoQueues returns two throttle queues on the system clock, each with a
// store of its own on srv under one prefix: two processes of a fleet. b is
// the second queue's store.
func twoQueues(t *testing.T, srv *server, opts ...Option) (b *Store, qa, qb *throttle.Queue) {
	t.Helper()
	a := newStore(t, srv, opts...)
	b = newStore(t, srv, append(opts, WithPrefix(a.cfg.prefix))...)
	clock := options.SystemClock()
	return b, throttle.New(clock, options.QueueOptions{Store: a}), throttle.New(clock, options.QueueOptions{Store: b})
}

// A budget one process's answer announced as spent reaches the fleet: the
// others learn the host is throttled, and its state says until when the
// budget is spent.
func TestQueuesShareASpentBudget(t *testing.T) {
	b, qa, qb := twoQueues(t, newServer(t))
	clock := options.SystemClock()
	req, err := http.NewRequest(http.MethodGet, "https://graph.microsoft.com/v1.0/users/1", nil)
	require.NoError(t, err)
	ctx := context.Background()

	p, err := qa.Admit(ctx, req, time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=40;w=1`)
	h.Set("RateLimit", `"default";r=0;t=5`)
	qa.Report(req, p, throttle.Succeeded, 0, h, clock.Now)

	require.Eventually(t, func() bool { return qb.Active(req) }, 5*time.Second, time.Millisecond)
	st, err := b.State(ctx, "graph.microsoft.com")
	require.NoError(t, err)
	require.Contains(t, st.Announced, "", "the host's budget")
	assert.Zero(t, st.Announced[""].Remaining)
	assert.WithinDuration(t, time.Now().Add(5*time.Second), st.Announced[""].Reset, time.Second)
}

// The user's code: a store in the handler's options.
func TestHandlerTakesTheStore(t *testing.T) {
	store := newStore(t, shared)
	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Queue: options.QueueOptions{Store: store}})
	require.NoError(t, err)
	require.NotNil(t, h)
	var typedNil *Store
	_, err = middleware.NewRetryHandler(options.RetryHandlerOptions{Queue: options.QueueOptions{Store: typedNil}})
	assert.True(t, errors.Is(err, options.ErrInvalidOption), "a nil *Store is refused: %v", err)
}

// Two queues capping a mailbox at one request through one Redis are two
// processes keeping Outlook's cap together: once the host throttled, the
// second process's request waits until the first's answer came back.
func TestQueuesShareACap(t *testing.T) {
	a := newStore(t, shared)
	b := newStore(t, shared, WithPrefix(a.cfg.prefix))
	clock := clocktest.New(time.Now())
	one := func(*http.Request) (string, int) { return "mailbox:m", 1 }
	qa := throttle.New(clock, options.QueueOptions{Store: a, Concurrency: one})
	qb := throttle.New(clock, options.QueueOptions{Store: b, Concurrency: one})
	req, err := http.NewRequest(http.MethodGet, "https://graph.microsoft.com/v1.0/users/m/messages", nil)
	require.NoError(t, err)
	ctx := context.Background()
	p, err := qa.Admit(ctx, req, time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	qa.Report(req, p, throttle.Throttled, 0, nil, clock.Now)
	require.Eventually(t, func() bool { return qb.Active(req) }, 5*time.Second, time.Millisecond)

	held, err := qa.Admit(ctx, req, time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		p, err := qb.Admit(ctx, req, time.Time{}, time.Time{}, nil)
		if err == nil {
			qb.Report(req, p, throttle.Succeeded, 0, nil, clock.Now)
		}
		got <- err
	}()
	// b asked Redis, found the slot taken, and waits to ask again.
	clock.WaitForTimers(1)
	assert.Empty(t, got, "b went while a held the fleet's one slot")
	qa.Report(req, held, throttle.Succeeded, 0, nil, clock.Now)
	clock.Advance(time.Second)
	require.NoError(t, <-got, "a's slot given back is b's")
	assert.Zero(t, a.rdb.ZCard(ctx, a.keys.slots("graph.microsoft.com", "mailbox:m")).Val(), "no slot left held")
}
