// Package captest serves the tests of concurrency caps: a server that
// throttles its first request, to make its host one the queue holds, then
// keeps each request until the test lets it go, counting how many it
// keeps at once; and the retry handler's count of the requests its queue
// holds.
package captest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
)

// Server answers its first request 429 with Retry-After: 0, then keeps
// each request until Release lets one go.
type Server struct {
	*httptest.Server
	// Entered receives once for each request the server starts keeping.
	Entered <-chan struct{}
	release chan struct{}

	throttled      atomic.Bool
	inflight, most atomic.Int32
}

// NewServer starts a Server, closed when the test ends.
func NewServer(t testing.TB) *Server {
	entered := make(chan struct{})
	s := &Server{Entered: entered, release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.throttled.Swap(true) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		n := s.inflight.Add(1)
		for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
		}
		entered <- struct{}{}
		<-s.release
		s.inflight.Add(-1)
	}))
	t.Cleanup(s.Close)
	return s
}

// Release lets one kept request be answered 200.
func (s *Server) Release() { s.release <- struct{}{} }

// InFlight is how many requests the server keeps now.
func (s *Server) InFlight() int { return int(s.inflight.Load()) }

// Most is the most requests the server kept at once.
func (s *Server) Most() int { return int(s.most.Load()) }

// HeldRequests reads the retry handler's count of the requests its queue
// holds (observability.MetricQueueHeldRequests) from reader.
func HeldRequests(t testing.TB, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == observability.MetricQueueHeldRequests {
				for _, dp := range sum.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}
