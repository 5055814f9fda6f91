package middleware_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// TestRefusalWithoutWaitRetriedAtThePace checks, in virtual time, that the
// retries of 429s that name no wait go at their budget's pace once the
// server serves again, not after the policy's 3 s: 400 requests from 200
// workers into a bucket of 40 at 400/s, whose first wave is refused 160
// times, the ids spread over every request or over 50 users.
func TestRefusalWithoutWaitRetriedAtThePace(t *testing.T) {
	const n, c = 400, 200
	// R6's initial interval, which the default policy's jitter shortens
	// by up to a fifth.
	shortestDelay := 3 * time.Second * 8 / 10
	for _, users := range []int{n, 50} {
		t.Run(strconv.Itoa(users)+" users", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := shapeRule(throttletest.BucketLimiter(throttletest.Bucket{Rate: 400, Burst: 40}), nil)
				r.OmitRetryAfter = true
				srv, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{r}}, 2*time.Millisecond)
				require.NoError(t, err)
				h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
				require.NoError(t, err)
				client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(srv, h)}
				start := time.Now()
				var mu sync.Mutex
				var late int // requests answered after the policy's shortest delay
				failed := sendAll(client, n, c, http.MethodGet, func(i int) string {
					return "https://graph.test/v1.0/users/" + strconv.Itoa(i%users)
				}, func(int) {
					mu.Lock()
					defer mu.Unlock()
					if time.Since(start) >= shortestDelay {
						late++
					}
				})
				require.Zero(t, failed)
				refused := srv.Stats().Attempts - n
				require.Greater(t, refused, n/4, "the first wave was refused")
				// A retry that went early and was refused again waits the
				// policy's delay.
				assert.Less(t, late, refused/10, "retried at the pace")
			})
		})
	}
}

// TestRetrySentEarlyIsObserved checks that each retry the queue lets go
// before its policy's delay is counted by server.address and marked on its
// attempt span, whose wait was shorter than the resend_delay it names; and
// that when the server names its wait, no retry is.
func TestRetrySentEarlyIsObserved(t *testing.T) {
	const (
		n, c        = 400, 200
		host        = "graph.test"
		metricEarly = "com.microsoft.kiota.handler.retry.queue.sent_early"
		keyEarly    = "com.microsoft.kiota.handler.retry.queue.sent_early"
		keyDelay    = "http.request.resend_delay"
	)
	for _, tc := range []struct {
		name      string
		bare      bool // the 429s name no wait
		wantEarly bool
	}{
		{name: "bare 429", bare: true, wantEarly: true},
		{name: "Retry-After 1", bare: false, wantEarly: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			prev := otel.GetTracerProvider()
			otel.SetTracerProvider(tp)
			t.Cleanup(func() { otel.SetTracerProvider(prev) })
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			synctest.Test(t, func(t *testing.T) {
				r := shapeRule(throttletest.BucketLimiter(throttletest.Bucket{Rate: 400, Burst: 40}), nil)
				if tc.bare {
					r.OmitRetryAfter = true
				} else {
					r = retryAfterRule(r, 1)
				}
				srv, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{r}}, 2*time.Millisecond)
				require.NoError(t, err)
				h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{MeterProvider: mp})
				require.NoError(t, err)
				traced := &nethttplibrary.ObservabilityOptions{}
				inner := nethttplibrary.NewCustomTransportWithParentTransport(srv, h)
				client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
					// As NetHttpRequestAdapter sends it: tracing on.
					return inner.RoundTrip(req.WithContext(context.WithValue(req.Context(), traced.GetKey(), traced)))
				})}
				require.Zero(t, sendAll(client, n, c, http.MethodGet, func(i int) string {
					return "https://" + host + "/v1.0/users/" + strconv.Itoa(i)
				}, nil))
			})
			require.NoError(t, tp.Shutdown(context.Background()))

			marked := 0
			for _, s := range spans.Ended() {
				var early bool
				var delay float64
				for _, a := range s.Attributes() {
					switch string(a.Key) {
					case keyEarly:
						early = a.Value.AsBool()
					case keyDelay:
						delay = a.Value.AsFloat64()
					}
				}
				if early {
					marked++
					assert.Less(t, s.EndTime().Sub(s.StartTime()).Seconds(), delay, "%s went before its delay", s.Name())
				}
			}
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			counted := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != metricEarly {
						continue
					}
					sum, ok := m.Data.(metricdata.Sum[int64])
					require.True(t, ok, "%s is a %T", m.Name, m.Data)
					assert.True(t, sum.IsMonotonic)
					assert.Equal(t, "{request}", m.Unit)
					for _, p := range sum.DataPoints {
						v, _ := p.Attributes.Value("server.address")
						counted[v.AsString()] += p.Value
					}
				}
			}
			require.NoError(t, mp.Shutdown(context.Background()))
			if !tc.wantEarly {
				assert.Zero(t, marked, "a wait the server named is never cut short")
				assert.Empty(t, counted)
				return
			}
			assert.Positive(t, marked, "the bare 429s' retries went at the pace")
			assert.Equal(t, map[string]int64{host: int64(marked)}, counted, "each early retry counted once, by its host")
		})
	}
}
