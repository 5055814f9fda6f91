package redisstore

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
)

// ScopeName names the store's meter.
const ScopeName = "github.com/kiota-resilience/kiota-resilience-go/redisstore"

// Metric and attribute names, documented in docs/observability.md. They
// live under the retry handler's own namespace.
const (
	// MetricRoundTrips counts calls that reached Redis, by operation and
	// outcome.
	MetricRoundTrips = observability.MetricStoreRoundTrips
	// MetricDuration is the latency of the calls that reached Redis, in
	// seconds, fallbacks by timeout included.
	MetricDuration = observability.MetricStoreDuration
	// MetricFallbacks counts calls answered ErrUnavailable: the caller went on
	// with its local state. The reason attribute says why.
	MetricFallbacks = observability.MetricStoreFallbacks
	// MetricPace is a budget's fleet-wide pace, in requests per second: the
	// sum of its processes' paces at this process's last reservation, or
	// one process's pace as State read it.
	MetricPace = observability.MetricStorePace

	// AttrOperation names the store operation: mark, hold, state, hosts,
	// pace, announce, reserve, acquire, renew, release.
	AttrOperation = observability.AttrStoreOperation
	// AttrOutcome is ok or error on MetricRoundTrips and MetricDuration.
	AttrOutcome = observability.AttrStoreOutcome
	// AttrReason is why a call fell back: timeout (past WithTimeout), error
	// (Redis or the network failed), skipped (a recent failure, the store
	// waits for the probe interval), canceled (the caller's context ended),
	// closed (the store was closed).
	AttrReason = observability.AttrStoreReason
	// AttrBudget names the budget of MetricPace; server.address names its host.
	AttrBudget = observability.AttrStoreBudget
)

// Fallback reasons, the values of AttrReason.
const (
	reasonTimeout  = "timeout"
	reasonError    = "error"
	reasonSkipped  = "skipped"
	reasonCanceled = "canceled"
	reasonClosed   = "closed"
)

// latencyBuckets suit a store call: tens of microseconds on loopback to the
// 50 ms default timeout, and a few beyond for larger timeouts.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25}

type instruments struct {
	roundTrips metric.Int64Counter
	duration   metric.Float64Histogram
	fallbacks  metric.Int64Counter
	pace       metric.Float64Gauge
}

// newInstruments creates the store's instruments; one the provider fails to
// create is reported to otel.Handle and replaced by a no-op, since telemetry
// must never stop the store.
func newInstruments(mp metric.MeterProvider) instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var in instruments
	var err error
	if in.roundTrips, err = m.Int64Counter(MetricRoundTrips, metric.WithUnit("{round_trip}"),
		metric.WithDescription("Calls of the throttle store that reached Redis.")); err != nil {
		otel.Handle(err)
		in.roundTrips = noop.Int64Counter{}
	}
	if in.duration, err = m.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Latency of the throttle store's calls to Redis."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...)); err != nil {
		otel.Handle(err)
		in.duration = noop.Float64Histogram{}
	}
	if in.fallbacks, err = m.Int64Counter(MetricFallbacks, metric.WithUnit("{call}"),
		metric.WithDescription("Calls of the throttle store that fell back to local state.")); err != nil {
		otel.Handle(err)
		in.fallbacks = noop.Int64Counter{}
	}
	if in.pace, err = m.Float64Gauge(MetricPace, metric.WithUnit("{request}/s"),
		metric.WithDescription("A budget's pace shared by the fleet.")); err != nil {
		otel.Handle(err)
		in.pace = noop.Float64Gauge{}
	}
	return in
}

func (in instruments) roundTrip(op string, d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	set := metric.WithAttributes(attribute.String(AttrOperation, op), attribute.String(AttrOutcome, outcome))
	in.roundTrips.Add(context.Background(), 1, set)
	in.duration.Record(context.Background(), d.Seconds(), set)
}

func (in instruments) fallback(op, reason string) {
	in.fallbacks.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrOperation, op), attribute.String(AttrReason, reason)))
}

func (in instruments) recordPace(host, budget string, rate float64) {
	in.pace.Record(context.Background(), rate, metric.WithAttributes(
		attribute.String("server.address", host), attribute.String(AttrBudget, budget)))
}
