package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/kiota-resilience/kiota-resilience-go/internal/captest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// TestRetryHandler_ConcurrencyCap: once the host throttled, the requests
// Queue.Concurrency caps at one reach the server one at a time.
func TestRetryHandler_ConcurrencyCap(t *testing.T) {
	srv := captest.NewServer(t)
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
	<-srv.Entered
	assert.Eventually(t, func() bool { return captest.HeldRequests(t, reader) == requests-1 },
		5*time.Second, time.Millisecond, "the others wait for the slot")
	assert.Equal(t, 1, srv.InFlight(), "one at the server")
	srv.Release()
	for range requests - 1 {
		<-srv.Entered
		srv.Release()
	}
	wg.Wait()
	assert.Equal(t, 1, srv.Most(), "one at a time")
}
