package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// TestRetryHandler_ConcurrencyCap: once the host throttled, the requests
// Queue.Concurrency caps at one reach the server one at a time.
func TestRetryHandler_ConcurrencyCap(t *testing.T) {
	var (
		throttledOnce    atomic.Bool
		inflight, most   atomic.Int32
		entered, release = make(chan struct{}), make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !throttledOnce.Swap(true) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		n := inflight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		<-release
		inflight.Add(-1)
	}))
	t.Cleanup(srv.Close)
	one := func(*http.Request) (string, int) { return "mailbox:m", 1 }
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
	h, clk := newHandler(t, options.RetryHandlerOptions{MaxRetries: -1, MeterProvider: mp,
		Queue: options.QueueOptions{Concurrency: one}})
	client := newClient(t, h)

	first, err := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/m/messages", nil)
	require.NoError(t, err)
	res, _ := do(clk, client, first)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode, "the host's first throttle")

	const requests = 3
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			// Messages of its own: one URL's retries of a throttle would
			// go one at a time without a cap.
			req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1.0/users/m/messages/%d", srv.URL, i), nil)
			if !assert.NoError(t, err) {
				return
			}
			resp, err := client.Do(req)
			if assert.NoError(t, err) {
				resp.Body.Close()
			}
		})
	}
	<-entered
	assert.Eventually(t, func() bool { return heldRequests(t, reader) == requests-1 },
		5*time.Second, time.Millisecond, "the others wait for the slot")
	assert.Equal(t, int32(1), inflight.Load(), "one at the server")
	release <- struct{}{}
	for range requests - 1 {
		<-entered
		release <- struct{}{}
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load(), "one at a time")
}

// heldRequests reads the handler's count of requests the queue holds.
func heldRequests(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == observability.MetricQueueHeldRequests {
				var n int64
				for _, dp := range sum.DataPoints {
					n += dp.Value
				}
				return n
			}
		}
	}
	return 0
}
