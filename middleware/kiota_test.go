package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// kiotaCall is what kiota-http-go's ShouldRetry was given.
type kiotaCall struct {
	delay time.Duration
	count int
}

// A kiota-http-go RetryHandlerOptions in the request's context, as existing
// Graph code passes it through a generated request configuration, decides
// retries with kiota-http-go's semantics.
func TestRetryHandler_KiotaRequestOptions(t *testing.T) {
	failures := func(n int, r reply) []reply {
		out := make([]reply, n)
		for i := range out {
			out[i] = r
		}
		return out
	}
	always := func(time.Duration, int, *http.Request, *http.Response) bool { return true }
	tests := []struct {
		name     string
		kiota    *nethttplibrary.RetryHandlerOptions
		replies  []reply
		attempts int
		waits    []time.Duration // with Retry-After, exact
		backoff  []time.Duration // without, each within [d, d+1s): kiota's jitter
		calls    []kiotaCall     // nil: not checked
	}{
		{"ShouldRetry false vetoes the first retry",
			&nethttplibrary.RetryHandlerOptions{MaxRetries: 1, ShouldRetry: func(time.Duration, int, *http.Request, *http.Response) bool { return false }},
			failures(4, throttled("10")), 1, nil, nil, nil},
		{"MaxRetries caps retries", &nethttplibrary.RetryHandlerOptions{MaxRetries: 1, ShouldRetry: always},
			failures(4, throttled("10")), 2, clocktest.Seconds(10), nil, nil},
		{"MaxRetries 0 means kiota's 3", &nethttplibrary.RetryHandlerOptions{ShouldRetry: always},
			failures(6, throttled("10")), 4, clocktest.Seconds(10, 10, 10), nil, nil},
		{"MaxRetries above 10 is capped at 10", &nethttplibrary.RetryHandlerOptions{MaxRetries: 50, ShouldRetry: always},
			failures(15, throttled("1")), 11, clocktest.Seconds(1, 1, 1, 1, 1, 1, 1, 1, 1, 1), nil, nil},
		{"no retry once the delays add up to 180 s", &nethttplibrary.RetryHandlerOptions{MaxRetries: 5, ShouldRetry: always},
			failures(6, throttled("100")), 3, clocktest.Seconds(100, 100), nil, nil},
		{"DelaySeconds doubles without Retry-After", &nethttplibrary.RetryHandlerOptions{MaxRetries: 3, DelaySeconds: 2, ShouldRetry: always},
			failures(4, reply{status: http.StatusServiceUnavailable}), 4, nil, clocktest.Seconds(2, 4, 8), nil},
		{"DelaySeconds 0 means kiota's 3", &nethttplibrary.RetryHandlerOptions{MaxRetries: 1, ShouldRetry: always},
			failures(4, reply{status: http.StatusServiceUnavailable}), 2, nil, clocktest.Seconds(3), nil},
		{"ShouldRetry is given the delay so far and the retries made", &nethttplibrary.RetryHandlerOptions{MaxRetries: 2},
			failures(4, throttled("10")), 3, clocktest.Seconds(10, 10), nil, []kiotaCall{{0, 0}, {10 * time.Second, 1}}},
		{"nil ShouldRetry allows the retry", &nethttplibrary.RetryHandlerOptions{MaxRetries: 1},
			failures(4, throttled("10")), 2, clocktest.Seconds(10), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []kiotaCall
			if tt.calls != nil {
				tt.kiota.ShouldRetry = func(d time.Duration, n int, req *http.Request, resp *http.Response) bool {
					require.NotNil(t, req)
					require.NotNil(t, resp)
					calls = append(calls, kiotaCall{d, n})
					return true
				}
			}
			srv := newScripted(t, tt.replies...)
			// The queue off, so that the waits are the schedule's alone;
			// kiota's options keep the handler's queue setting.
			h, clk := newHandler(t, options.RetryHandlerOptions{MaxRetries: -1, Queue: options.QueueOptions{Disabled: true}})
			ctx := context.WithValue(context.Background(), tt.kiota.GetKey(), tt.kiota)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			res, waits := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
			if tt.backoff == nil {
				assert.Equal(t, tt.waits, waits)
			} else {
				require.Len(t, waits, len(tt.backoff))
				for i, d := range tt.backoff {
					assert.GreaterOrEqual(t, waits[i], d, "retry %d", i+1)
					assert.Less(t, waits[i], d+time.Second, "retry %d", i+1)
				}
			}
			if tt.calls != nil {
				assert.Equal(t, tt.calls, calls)
			}
		})
	}
}

func TestRetryHandler_KiotaRequestOptionsPrecedence(t *testing.T) {
	kiota := &nethttplibrary.RetryHandlerOptions{MaxRetries: 3}
	tests := []struct {
		name     string
		ctx      func() context.Context
		attempts int
	}{
		{"our options win over kiota's", func() context.Context {
			ctx := context.WithValue(context.Background(), kiota.GetKey(), kiota)
			return context.WithValue(ctx, options.Key(), &options.RetryHandlerOptions{MaxRetries: 1})
		}, 2},
		{"a nil kiota option is ignored", func() context.Context {
			return context.WithValue(context.Background(), kiota.GetKey(), (*nethttplibrary.RetryHandlerOptions)(nil))
		}, 1},
		{"kiota's option replaces the handler's", func() context.Context {
			return context.WithValue(context.Background(), kiota.GetKey(), kiota)
		}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, throttled("1"), throttled("1"), throttled("1"), throttled("1"), throttled("1"))
			h, clk := newHandler(t, options.RetryHandlerOptions{MaxRetries: -1})
			req, _ := http.NewRequestWithContext(tt.ctx(), http.MethodGet, srv.URL, nil)
			res, _ := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
		})
	}
}

// kiota-http-go returns a transport error as it comes; so does the handler
// under its options.
func TestRetryHandler_KiotaRequestOptionsTransportError(t *testing.T) {
	h, _ := newHandler(t, options.RetryHandlerOptions{})
	kiota := &nethttplibrary.RetryHandlerOptions{MaxRetries: 3}
	ctx := context.WithValue(context.Background(), kiota.GetKey(), kiota)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.invalid/", nil)
	fails := &countingFailure{}
	_, err := h.Intercept(fails, 0, req)
	require.ErrorIs(t, err, errBroken)
	assert.Equal(t, 1, fails.n)
}

var errBroken = errors.New("connection reset")

type countingFailure struct{ n int }

func (c *countingFailure) Next(*http.Request, int) (*http.Response, error) {
	c.n++
	return nil, errBroken
}

// kiota-http-go's ShouldRetry is told the delay waited so far: the sum of
// the delays of the retries already made, each counted once, whether the
// throttle queue holds the retries or the loop waits for them. A 429
// naming no Retry-After has the queue hold its target for the policy's
// delay, the same delay the loop waits: kiota's schedule, which keeps
// count of the delays it gave, is asked once per retry.
func TestRetryHandler_KiotaCumulativeDelay(t *testing.T) {
	for _, queue := range queueModes {
		t.Run(queue.name, func(t *testing.T) {
			h, clk := newHandler(t, options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: queue.disabled}})
			var told []time.Duration // the delay so far, as kiota's ShouldRetry is told it
			var at []time.Time       // when it was asked: the failed attempt came back
			kiota := &nethttplibrary.RetryHandlerOptions{MaxRetries: 3, DelaySeconds: 1,
				ShouldRetry: func(d time.Duration, _ int, _ *http.Request, _ *http.Response) bool {
					told, at = append(told, d), append(at, clk.Now())
					return true
				}}
			bare := reply{status: http.StatusTooManyRequests} // no Retry-After
			srv := newScripted(t, bare, bare, bare)
			ctx := context.WithValue(context.Background(), kiota.GetKey(), kiota)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)

			res, _ := do(clk, newClient(t, h), req)

			require.NoError(t, res.err)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			require.Len(t, told, 3)
			for i := range told {
				// No time passes on the fake clock but the waits between
				// attempts.
				assert.Equal(t, at[i].Sub(at[0]), told[i], "before retry %d", i+1)
			}
		})
	}
}
