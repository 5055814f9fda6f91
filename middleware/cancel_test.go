package middleware_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

var errShutdown = errors.New("shutting down")

// TestCancelAtEveryStage ends the request's context before the first
// attempt, during an attempt and during a backoff wait. The call must
// return with the context's error (and its cause, when it has one),
// without sending anything more and without leaving a timer behind. The
// backoff and attempt timers run on a fake clock that is never advanced
// past them, so a return proves the handler did not wait for them.
func TestCancelAtEveryStage(t *testing.T) {
	type stage int
	const (
		beforeFirst stage = iota
		duringAttempt
		duringBackoff
	)
	for _, tc := range []struct {
		name         string
		stage        stage
		ctx          func() (context.Context, func())
		wantErrs     []error
		wantHits     int
		wantAttempts int64
	}{
		{"before the first attempt", beforeFirst, cancelCtx, []error{context.Canceled}, 0, 0},
		{"before the first attempt, past deadline with a cause", beforeFirst, pastDeadlineCtx, []error{context.DeadlineExceeded, errShutdown}, 0, 0},
		{"during an attempt", duringAttempt, cancelCtx, []error{context.Canceled}, 1, 1},
		{"during an attempt, with a cause", duringAttempt, causeCtx, []error{context.Canceled, errShutdown}, 1, 1},
		{"during an attempt, at the deadline", duringAttempt, deadlineCtx, []error{context.DeadlineExceeded}, 1, 1},
		{"during a backoff wait", duringBackoff, cancelCtx, []error{context.Canceled}, 1, 1},
		{"during a backoff wait, with a cause", duringBackoff, causeCtx, []error{context.Canceled, errShutdown}, 1, 1},
		{"during a backoff wait, at the deadline", duringBackoff, deadlineCtx, []error{context.DeadlineExceeded}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, func(_ int, _ *http.Request, c net.Conn) bool {
				if tc.stage == duringAttempt {
					_, _ = io.Copy(io.Discard, c) // never answer
					return false
				}
				return writeReply(c, http.StatusServiceUnavailable, nil, "")
			})
			clk := newClock()
			opts := options.RetryHandlerOptions{Policy: fixedDelays, Clock: clk}
			if tc.stage == duringAttempt {
				// An attempt timer that must be stopped, not mistaken
				// for the cause.
				opts.AttemptTimeout = time.Minute
			}
			h := newFaultHandler(t, opts)
			ctx, end := tc.ctx()
			ended := time.Now()
			if tc.stage == beforeFirst {
				end()
			}

			done := goDo(newRawClient(t, h), newRequest(t, ctx, http.MethodGet, srv.URL()+"/items", "", ""))
			switch tc.stage {
			case duringAttempt:
				srv.waitRequest(t, 1)
			case duringBackoff:
				clk.WaitForTimers(1)
				require.Equal(t, []time.Duration{3 * time.Second}, clk.Pending())
			}
			if tc.stage != beforeFirst {
				ended = time.Now()
				end()
			}
			r := await(t, done)
			t.Logf("returned %v after the context ended: %v", time.Since(ended), r.err)

			require.Error(t, r.err)
			for _, want := range tc.wantErrs {
				assert.ErrorIs(t, r.err, want)
			}
			assert.NotErrorIs(t, r.err, middleware.ErrAttemptTimeout)
			assert.Len(t, srv.seen(), tc.wantHits, "requests the server read")
			assert.Equal(t, tc.wantAttempts, h.Stats().Attempts, "no attempt after the context ended")
			assert.Empty(t, clk.Pending(), "timers left behind")
		})
	}
}

func cancelCtx() (context.Context, func()) {
	return context.WithCancel(context.Background())
}

func causeCtx() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	return ctx, func() { cancel(errShutdown) }
}

func deadlineCtx() (context.Context, func()) {
	ctx := newManualCtx()
	return ctx, ctx.expire
}

// pastDeadlineCtx is already done when the request is sent; its cancel
// function only releases it.
func pastDeadlineCtx() (context.Context, func()) {
	return context.WithDeadlineCause(context.Background(), time.Unix(0, 0), errShutdown)
}
