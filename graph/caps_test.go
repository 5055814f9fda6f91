package graph_test

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

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/internal/captest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
)

// TestNewClient_CapsMailboxes checks that NewClient's retry handler keeps
// Outlook's cap of 4 requests at once per mailbox once the host has
// throttled, unless the retry options name a cap of their own.
func TestNewClient_CapsMailboxes(t *testing.T) {
	const requests = 6
	quiet := func(mp *sdkmetric.MeterProvider) options.RetryHandlerOptions {
		return options.RetryHandlerOptions{MaxRetries: -1, MeterProvider: mp}
	}
	tests := []struct {
		name string
		opts func(mp *sdkmetric.MeterProvider) []pipeline.Option
		want int // requests at the server at once
	}{
		{"no retry options", func(mp *sdkmetric.MeterProvider) []pipeline.Option {
			return []pipeline.Option{pipeline.WithRetryDefaults(func(o *options.RetryHandlerOptions) { o.MaxRetries, o.MeterProvider = -1, mp })}
		}, graph.OutlookConcurrentRequests},
		{"retry options without a cap", func(mp *sdkmetric.MeterProvider) []pipeline.Option {
			return []pipeline.Option{pipeline.WithRetryOptions(quiet(mp))}
		}, graph.OutlookConcurrentRequests},
		{"a cap of their own", func(mp *sdkmetric.MeterProvider) []pipeline.Option {
			o := quiet(mp)
			o.Queue.Concurrency = func(*http.Request) (string, int) { return "tenant", 2 }
			return []pipeline.Option{pipeline.WithRetryOptions(o)}
		}, 2},
		{"NoConcurrency", func(mp *sdkmetric.MeterProvider) []pipeline.Option {
			o := quiet(mp)
			o.Queue.Concurrency = options.NoConcurrency
			return []pipeline.Option{pipeline.WithRetryOptions(o)}
		}, requests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := captest.NewServer(t)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
			c, err := graph.NewClient(append(tt.opts(mp), pipeline.WithTransport(srv.Client().Transport))...)
			require.NoError(t, err)
			first := send(t, c, http.MethodGet, srv.URL+"/v1.0/users/u1/messages", "")
			require.Equal(t, http.StatusTooManyRequests, first.StatusCode, "the host's first throttle")

			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1.0/users/u1/messages/%d", srv.URL, i), nil)
					if !assert.NoError(t, err) {
						return
					}
					resp, err := c.Do(req)
					if assert.NoError(t, err) {
						resp.Body.Close()
					}
				})
			}
			for range tt.want {
				<-srv.Entered
			}
			assert.Eventually(t, func() bool { return captest.HeldRequests(t, reader) == int64(requests-tt.want) },
				5*time.Second, time.Millisecond, "the others wait for a slot")
			assert.Equal(t, tt.want, srv.InFlight())
			for range requests - tt.want {
				srv.Release()
				<-srv.Entered
			}
			for range tt.want {
				srv.Release()
			}
			wg.Wait()
			assert.Equal(t, tt.want, srv.Most(), "at most this many at once")
		})
	}
}
