package metrics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
)

func TestInstruments(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	in := New(mp)
	ctx := context.Background()

	a429 := RetryAttributes(429, observability.RetryReasonResponse)
	aErr := RetryAttributes(0, observability.RetryReasonTransportError)
	in.RetryDelayed(ctx, a429, 1500*time.Millisecond)
	in.RetryDelayed(ctx, a429, 3*time.Second)
	in.RetrySent(ctx, a429)
	in.RetrySent(ctx, a429)
	in.RetryDelayed(ctx, aErr, 0)
	in.RetrySent(ctx, aErr)
	in.Held(ctx)
	in.Held(ctx)
	in.Released(ctx, 250*time.Millisecond)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.Equal(t, "github.com/kiota-resilience/kiota-resilience-go", rm.ScopeMetrics[0].Scope.Name)
	got := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m
		assert.NotEmpty(t, m.Description, m.Name)
	}
	require.Len(t, got, 4)

	enc := func(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }
	want429 := enc(attribute.NewSet(attribute.Int("http.response.status_code", 429), attribute.String("com.microsoft.kiota.handler.retry.reason", "response")))
	wantErr := enc(attribute.NewSet(attribute.String("com.microsoft.kiota.handler.retry.reason", "transport_error")))

	retries := got["com.microsoft.kiota.handler.retry.retries"]
	assert.Equal(t, "{retry}", retries.Unit)
	sum := retries.Data.(metricdata.Sum[int64])
	assert.True(t, sum.IsMonotonic)
	values := map[string]int64{}
	for _, p := range sum.DataPoints {
		values[enc(p.Attributes)] = p.Value
	}
	assert.Equal(t, map[string]int64{want429: 2, wantErr: 1}, values)

	delay := got["com.microsoft.kiota.handler.retry.delay"]
	assert.Equal(t, "s", delay.Unit)
	type hist struct {
		count uint64
		sum   float64
	}
	hists := map[string]hist{}
	for _, p := range delay.Data.(metricdata.Histogram[float64]).DataPoints {
		assert.Equal(t, durationBuckets, p.Bounds)
		hists[enc(p.Attributes)] = hist{p.Count, p.Sum}
	}
	assert.Equal(t, map[string]hist{want429: {2, 4.5}, wantErr: {1, 0}}, hists)

	queue := got["com.microsoft.kiota.handler.retry.queue.duration"]
	assert.Equal(t, "s", queue.Unit)
	qp := queue.Data.(metricdata.Histogram[float64]).DataPoints
	require.Len(t, qp, 1)
	assert.Equal(t, uint64(1), qp[0].Count)
	assert.Equal(t, 0.25, qp[0].Sum)

	held := got["com.microsoft.kiota.handler.retry.queue.held_requests"]
	assert.Equal(t, "{request}", held.Unit)
	hs := held.Data.(metricdata.Sum[int64])
	assert.False(t, hs.IsMonotonic)
	require.Len(t, hs.DataPoints, 1)
	assert.Equal(t, int64(1), hs.DataPoints[0].Value, "two held, one released")
}

// failingMeter fails to create every instrument, as a broken provider may.
type failingMeter struct{ noop.Meter }

var errBroken = errors.New("broken meter")

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errBroken
}

func (failingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errBroken
}

func (failingMeter) Int64UpDownCounter(string, ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	return noop.Int64UpDownCounter{}, errBroken
}

type failingProvider struct{ noop.MeterProvider }

func (failingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errorRecorder) Handle(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func TestNewBrokenProvider(t *testing.T) {
	rec := &errorRecorder{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)

	in := New(failingProvider{})
	ctx := context.Background()
	// Recording must not panic: the failed instruments are no-ops.
	in.RetryDelayed(ctx, RetryAttributes(503, observability.RetryReasonResponse), time.Second)
	in.RetrySent(ctx, RetryAttributes(503, observability.RetryReasonResponse))
	in.Held(ctx)
	in.Released(ctx, time.Second)
	in.BatchItemsResent(ctx, 429, 3)
	in.Probe(ctx, "graph.example")
	in.WokenEarly(ctx, "graph.example")
	in.SentEarly(ctx, "graph.example")
	in.HandedBack(ctx, observability.HandBackHold)

	names := []string{observability.MetricRetries, observability.MetricDelay, observability.MetricQueueDuration, observability.MetricQueueHeldRequests,
		observability.MetricBatchItemsResent, observability.MetricOutageProbes, observability.MetricOutageWokenEarly,
		observability.MetricQueueSentEarly, observability.MetricHandBacks}
	require.Len(t, rec.errs, len(names))
	for i, name := range names {
		assert.ErrorIs(t, rec.errs[i], errBroken)
		assert.Contains(t, rec.errs[i].Error(), name)
	}
}

func TestNewGlobal(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(mp)
	defer otel.SetMeterProvider(prev)

	New(nil).Held(context.Background())
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	require.Len(t, rm.ScopeMetrics[0].Metrics, 1)
	assert.Equal(t, observability.MetricQueueHeldRequests, rm.ScopeMetrics[0].Metrics[0].Name)
}
