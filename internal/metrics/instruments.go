// Package metrics holds the retry handler's metric instruments, named
// as package observability documents them.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
)

// durationBuckets are the histogram bucket boundaries, in seconds, advised
// for observability.MetricDelay and observability.MetricQueueDuration. The SDK's default boundaries
// suit milliseconds; retry delays run from nothing to the 180 s default cap
// and beyond when a server's Retry-After asks for more.
var durationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 180, 300, 600, 1800}

// Instruments are the metric instruments of one retry handler, created once
// from a MeterProvider and safe for concurrent use. Requests that succeed at
// their first attempt and are never held record nothing.
type Instruments struct {
	retries       metric.Int64Counter
	delay         metric.Float64Histogram
	queueDuration metric.Float64Histogram
	held          metric.Int64UpDownCounter
	batchItems    metric.Int64Counter
	probes        metric.Int64Counter
	wokenEarly    metric.Int64Counter
	sentEarly     metric.Int64Counter
	handBacks     metric.Int64Counter
}

// New creates the handler's instruments from mp, under the meter
// named ScopeName; nil mp means otel.GetMeterProvider(), whose instruments
// forward to whatever provider the application installs later. An
// instrument the provider fails to create is reported to otel.Handle and
// replaced by a no-op one: telemetry must never stop requests.
func New(mp metric.MeterProvider) *Instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(observability.ScopeName)
	in := &Instruments{}
	var err error
	in.retries, err = m.Int64Counter(observability.MetricRetries, metric.WithUnit(observability.UnitRetries),
		metric.WithDescription("Retries sent by the retry handler."))
	if err != nil || in.retries == nil {
		report(observability.MetricRetries, err)
		in.retries = noop.Int64Counter{}
	}
	in.delay, err = m.Float64Histogram(observability.MetricDelay, metric.WithUnit(observability.UnitDelay),
		metric.WithDescription("Delay waited before each retry."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil || in.delay == nil {
		report(observability.MetricDelay, err)
		in.delay = noop.Float64Histogram{}
	}
	in.queueDuration, err = m.Float64Histogram(observability.MetricQueueDuration, metric.WithUnit(observability.UnitQueueDuration),
		metric.WithDescription("Time a request was held by the throttle queue."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil || in.queueDuration == nil {
		report(observability.MetricQueueDuration, err)
		in.queueDuration = noop.Float64Histogram{}
	}
	in.held, err = m.Int64UpDownCounter(observability.MetricQueueHeldRequests, metric.WithUnit(observability.UnitQueueHeldRequests),
		metric.WithDescription("Requests held by the throttle queue right now."))
	if err != nil || in.held == nil {
		report(observability.MetricQueueHeldRequests, err)
		in.held = noop.Int64UpDownCounter{}
	}
	in.batchItems, err = m.Int64Counter(observability.MetricBatchItemsResent, metric.WithUnit(observability.UnitBatchItemsResent),
		metric.WithDescription("Items of JSON batches resent because they were throttled or depended on one that was."))
	if err != nil || in.batchItems == nil {
		report(observability.MetricBatchItemsResent, err)
		in.batchItems = noop.Int64Counter{}
	}
	in.probes = counter(m, observability.MetricOutageProbes, observability.UnitOutageProbes, "Probes sent to hosts that were down.")
	in.wokenEarly = counter(m, observability.MetricOutageWokenEarly, observability.UnitOutageWokenEarly,
		"Retries sent before their backoff ran out because a probe found their host up again.")
	in.sentEarly = counter(m, observability.MetricQueueSentEarly, observability.UnitQueueSentEarly,
		"Retries of 429s that named no wait sent at their budget's pace before their backoff ran out.")
	in.handBacks = counter(m, observability.MetricHandBacks, observability.UnitHandBacks, "Requests handed back to their callers instead of waited out.")
	return in
}

// counter creates an Int64Counter, or a no-op one when the meter fails.
func counter(m metric.Meter, name, unit, description string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
	if err != nil || c == nil {
		report(name, err)
		return noop.Int64Counter{}
	}
	return c
}

func report(name string, err error) {
	if err == nil {
		err = errors.New("meter provider returned no instrument")
	}
	otel.Handle(fmt.Errorf("retry handler: creating instrument %s: %w", name, err))
}

// RetryAttributes returns the attributes of observability.MetricRetries and observability.MetricDelay
// for a retry caused by a response with the given status code (0 when a
// transport error caused it) for the given RetryReason value.
func RetryAttributes(status int, reason string) attribute.Set {
	if status == 0 {
		return attribute.NewSet(observability.RetryReasonKey.String(reason))
	}
	return attribute.NewSet(observability.HTTPResponseStatusCodeKey.Int(status), observability.RetryReasonKey.String(reason))
}

// RetryDelayed records the delay decided before a retry; attrs come from
// RetryAttributes.
func (in *Instruments) RetryDelayed(ctx context.Context, attrs attribute.Set, delay time.Duration) {
	in.delay.Record(ctx, delay.Seconds(), metric.WithAttributeSet(attrs))
}

// RetrySent counts a retry sent; attrs come from RetryAttributes.
func (in *Instruments) RetrySent(ctx context.Context, attrs attribute.Set) {
	in.retries.Add(ctx, 1, metric.WithAttributeSet(attrs))
}

// Held counts a request the throttle queue starts holding. Every Held must
// be followed by one Released.
func (in *Instruments) Held(ctx context.Context) {
	in.held.Add(ctx, 1)
}

// Released counts a request the throttle queue stops holding, after d.
func (in *Instruments) Released(ctx context.Context, d time.Duration) {
	in.held.Add(ctx, -1)
	in.queueDuration.Record(ctx, d.Seconds())
}

// BatchItemsResent counts n items of a JSON batch resent because they were
// answered status.
func (in *Instruments) BatchItemsResent(ctx context.Context, status, n int) {
	in.batchItems.Add(ctx, int64(n), metric.WithAttributes(observability.HTTPResponseStatusCodeKey.Int(status)))
}

// Probe counts a probe sent to host, which was down.
func (in *Instruments) Probe(ctx context.Context, host string) {
	in.probes.Add(ctx, 1, metric.WithAttributes(observability.ServerAddressKey.String(host)))
}

// WokenEarly counts a retry to host sent before its backoff ran out
// because a probe found the host up again.
func (in *Instruments) WokenEarly(ctx context.Context, host string) {
	in.wokenEarly.Add(ctx, 1, metric.WithAttributes(observability.ServerAddressKey.String(host)))
}

// SentEarly counts a retry to host that the throttle queue let go at its
// budget's pace before its backoff ran out: its 429 named no wait
// (throttle.Queue.AdmitEarly).
func (in *Instruments) SentEarly(ctx context.Context, host string) {
	in.sentEarly.Add(ctx, 1, metric.WithAttributes(observability.ServerAddressKey.String(host)))
}

// HandedBack counts a request handed back to its caller; kind is a
// HandBackKindKey value.
func (in *Instruments) HandedBack(ctx context.Context, kind string) {
	in.handBacks.Add(ctx, 1, metric.WithAttributes(observability.HandBackKindKey.String(kind)))
}
