package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// telemetry collects the handler's spans and metrics in process, through
// the OpenTelemetry SDK, so that the demo can show them.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	prev   trace.TracerProvider
}

func newTelemetry() *telemetry {
	t := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), prev: otel.GetTracerProvider()}
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(t.spans))
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(t.reader))
	otel.SetTracerProvider(t.tp)
	return t
}

// report prints the spans by name, their events by name, and every metric.
func (t *telemetry) report(out io.Writer) error {
	ctx := context.Background()
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	spans, events := map[string]int{}, map[string]int{}
	for _, s := range t.spans.Ended() {
		name := s.Name()
		if strings.HasPrefix(name, "RetryHandler_Intercept - attempt ") {
			name = "RetryHandler_Intercept - attempt N"
		}
		spans[name]++
		for _, e := range s.Events() {
			events[e.Name]++
		}
	}
	fmt.Fprintln(out, "\nspans (by name)")
	printCounts(out, spans)
	fmt.Fprintln(out, "span events (by name)")
	printCounts(out, events)

	var rm metricdata.ResourceMetrics
	if err := t.reader.Collect(ctx, &rm); err != nil {
		return fmt.Errorf("collect metrics: %w", err)
	}
	fmt.Fprintln(out, "metrics")
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Fprintf(out, "  %-55s %s\n", m.Name+" ("+m.Unit+")", summarize(m.Data))
		}
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return err
	}
	return t.mp.Shutdown(ctx)
}

func printCounts(out io.Writer, counts map[string]int) {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(out, "  %-55s %d\n", n, counts[n])
	}
}

// summarize renders a metric's data points in one line.
func summarize(data metricdata.Aggregation) string {
	var parts []string
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			parts = append(parts, fmt.Sprintf("%s=%d", attrs(p.Attributes.ToSlice()), p.Value))
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			mean := 0.0
			if p.Count > 0 {
				mean = p.Sum / float64(p.Count)
			}
			parts = append(parts, fmt.Sprintf("%s count=%d mean=%.3f", attrs(p.Attributes.ToSlice()), p.Count, mean))
		}
	default:
		parts = append(parts, fmt.Sprintf("%T", data))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

func attrs(kvs []attribute.KeyValue) string {
	parts := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		parts = append(parts, string(kv.Key[strings.LastIndex(string(kv.Key), ".")+1:])+"="+kv.Value.Emit())
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, ",")
}
