package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// TestQueueObeysNamedHoldPastPace checks that a request with a 2 s
// deadline, after a slow 429 naming Retry-After: 1 for its URL, waits the
// second the server named, though the pacer would start its scope past
// the deadline (two slow round trips after the throttle); it is neither
// sent at once into the throttle nor refused.
func TestQueueObeysNamedHoldPastPace(t *testing.T) {
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			clk.Advance(1200 * time.Millisecond) // a slow answer
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	client := newClient(t, h)
	url := srv.URL + "/v1.0/users/u1/messages"

	first, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	first = first.WithContext(context.WithValue(first.Context(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1}))
	res, _ := do(clk, client, first)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	next, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	res, waits := do(clk, client, next)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, clocktest.Seconds(1), waits, "held for the server's Retry-After, no more, no less")
	assert.Equal(t, int32(2), n.Load())
}
