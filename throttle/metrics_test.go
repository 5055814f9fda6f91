package throttle

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// gauges collects the queue's gauges: name → "host scope" → value.
func gauges(t *testing.T, r sdkmetric.Reader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := map[string]map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[float64])
			if !ok {
				continue
			}
			out[m.Name] = map[string]float64{}
			for _, dp := range g.DataPoints {
				host, _ := dp.Attributes.Value(observability.ServerAddressKey)
				scope, _ := dp.Attributes.Value(attribute.Key(observability.QueueScopeKey))
				out[m.Name][host.AsString()+" "+scope.AsString()] = dp.Value
			}
		}
	}
	return out
}

func TestQueue_Gauges(t *testing.T) {
	tests := []struct {
		name    string
		outcome Outcome
		header  http.Header
		want    map[string]map[string]float64
		paced   bool // the pace is reported, at a rate above zero
	}{
		{name: "nothing learned", outcome: Succeeded, want: map[string]map[string]float64{}},
		{name: "a budget with room is not followed", outcome: Succeeded,
			header: http.Header{"Ratelimit-Limit": {"100"}, "Ratelimit-Remaining": {"50"}},
			want:   map[string]map[string]float64{}},
		{name: "a nearly spent budget", outcome: Succeeded,
			header: http.Header{"Ratelimit-Limit": {"100"}, "Ratelimit-Remaining": {"7"}, "Ratelimit-Reset": {"3"}},
			want: map[string]map[string]float64{
				observability.MetricQueueBudgetRemaining: {"graph.test /": 7},
				observability.MetricQueueBudgetLimit:     {"graph.test /": 100},
			}},
		{name: "throttles together pace their budget", outcome: Throttled, paced: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(t.Context()) })
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{MeterProvider: mp})
			req := httptest.NewRequest(http.MethodGet, "https://graph.test/v1.0/users/1", nil)
			clk.Advance(time.Millisecond)
			q.Report(req, Pass{Sent: t0}, tt.outcome, time.Second, tt.header, clk.Now)
			if tt.paced {
				q.Report(req, Pass{Sent: t0}, tt.outcome, time.Second, tt.header, clk.Now)
			}
			got := gauges(t, reader)
			if tt.paced {
				assert.Greater(t, got[observability.MetricQueuePace]["graph.test users/1"], 0.0)
				return
			}
			for name, points := range tt.want {
				assert.Equal(t, points, got[name], name)
			}
			for name, points := range got {
				if _, ok := tt.want[name]; !ok {
					assert.Empty(t, points, name)
				}
			}
		})
	}
}
