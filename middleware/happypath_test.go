package middleware

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// countingClock is the system clock counting its readings.
type countingClock struct {
	options.Clock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.Clock.Now()
}

// TestRetryHandler_HappyPathCost pins down what a request that succeeds at
// its first attempt costs on top of the pipeline: one reading of the
// clock when it goes, one more when it comes back with the queue on (how
// long the server held it tells the queue, should the host throttle, how
// long its first wave may still be out), and no allocation beyond the copy of the request every attempt
// needs (and, for a seekable body without GetBody, the shared view of it).
// A request carrying kiota-http-go's ObservabilityOptions also pays for
// the OpenTelemetry API's span, as kiota-http-go's own handlers do.
func TestRetryHandler_HappyPathCost(t *testing.T) {
	payload := []byte(`{"displayName":"Ada"}`)
	tests := []struct {
		name     string
		method   string
		body     func() io.ReadCloser // nil: no body
		getBody  bool
		header   bool
		extra    float64 // allocations besides the request's copy
		queueOff bool
	}{
		{name: "GET", method: http.MethodGet},
		{name: "GET, queue off", method: http.MethodGet, queueOff: true},
		{name: "GET with a header", method: http.MethodGet, header: true},
		// A POST without an idempotency key carries a trace of how far it
		// got (one allocation, for its context), so that one that failed
		// before it had a connection can be resent.
		{name: "POST with GetBody", method: http.MethodPost, header: true, getBody: true, extra: 1,
			body: func() io.ReadCloser { return io.NopCloser(bytes.NewReader(payload)) }},
		{name: "POST with a seekable body", method: http.MethodPost, header: true, extra: 2,
			body: func() io.ReadCloser { return nethttplibrary.NopCloser(bytes.NewReader(payload)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &countingClock{Clock: options.SystemClock()}
			h, err := NewRetryHandler(options.RetryHandlerOptions{Clock: clock, Queue: options.QueueOptions{Disabled: tt.queueOff}})
			require.NoError(t, err)
			req, err := http.NewRequestWithContext(context.Background(), tt.method, "https://graph.example/v1.0/groups", nil)
			require.NoError(t, err)
			if tt.header {
				req.Header.Set("Content-Type", "application/json")
			}
			if tt.getBody {
				req.GetBody = func() (io.ReadCloser, error) { return tt.body(), nil }
			}
			reset := func() {
				if tt.body != nil {
					req.Body = tt.body()
					req.ContentLength = int64(len(payload))
				}
			}

			for i := range 2 { // the first success to a host sets up its state in the queue
				reset()
				before := clock.reads.Load()
				resp, err := h.Intercept(benchPipeline, 0, req)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				if i == 1 {
					want := int64(2)
					if tt.queueOff {
						want = 1
					}
					assert.Equal(t, want, clock.reads.Load()-before, "clock readings")
				}
			}

			if raceEnabled && tt.method == http.MethodPost {
				t.Skip("the write trace of a POST is pooled, and the race detector drops pooled items at random")
			}
			bare := testing.AllocsPerRun(50, func() {
				reset()
				_, _ = benchPipeline.Next(req.Clone(req.Context()), 0)
			})
			ours := testing.AllocsPerRun(50, func() {
				reset()
				_, _ = h.Intercept(benchPipeline, 0, req)
			})
			assert.Equal(t, bare+tt.extra, ours, "allocations; the request's copy alone takes %v", bare)
		})
	}
}
