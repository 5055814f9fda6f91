package middleware

import (
	"context"
	"net/http"
	"testing"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// okTransport answers every request with an empty 200, in memory.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// transportPipeline is the end of a pipeline: it hands the request to rt.
type transportPipeline struct{ rt http.RoundTripper }

func (p transportPipeline) Next(req *http.Request, _ int) (*http.Response, error) {
	return p.rt.RoundTrip(req)
}

// benchPipeline is a package variable so that the compiler cannot see
// through the interface and keep the response on the stack in Bare alone.
var benchPipeline nethttplibrary.Pipeline = transportPipeline{okTransport{}}

// BenchmarkHappyPath measures one GET that succeeds at its first attempt,
// the path nearly every request takes:
//
//   - Bare: the in-memory transport alone, without the handler.
//   - NoObservabilityOptions: through the handler from a plain http.Client,
//     global providers untouched.
//   - NoProvider: with kiota-http-go's ObservabilityOptions in the context,
//     as NetHttpRequestAdapter sends it, and no provider installed: the
//     OpenTelemetry API's no-op path.
//   - SDK: the same with SDK tracer and meter providers installed, spans
//     going to a batch processor whose exporter drops them.
//
// The sub-benchmarks run in this order, each -count times before the next,
// so that NoProvider sees the global tracer provider as the process got it:
// once a provider is installed, the global one forwards to it for good.
func BenchmarkHappyPath(b *testing.B) {
	ctx := context.Background()
	obsCtx := func() context.Context {
		obs := &nethttplibrary.ObservabilityOptions{}
		return context.WithValue(ctx, obs.GetKey(), obs)
	}
	run := func(b *testing.B, h *RetryHandler, reqCtx context.Context) {
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, "https://graph.example/v1.0/me", nil)
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			resp, err := h.Intercept(benchPipeline, 0, req)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("got %v, %v", resp, err)
			}
		}
	}
	newHandler := func(b *testing.B, opts options.RetryHandlerOptions) *RetryHandler {
		h, err := NewRetryHandler(opts)
		require.NoError(b, err)
		return h
	}

	b.Run("Bare", func(b *testing.B) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://graph.example/v1.0/me", nil)
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := benchPipeline.Next(req, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("NoObservabilityOptions", func(b *testing.B) {
		run(b, newHandler(b, options.RetryHandlerOptions{}), ctx)
	})
	b.Run("NoProvider", func(b *testing.B) {
		_, span := otel.Tracer("probe").Start(ctx, "probe")
		span.End()
		if span.IsRecording() {
			b.Fatal("a tracer provider was installed earlier in this process")
		}
		run(b, newHandler(b, options.RetryHandlerOptions{}), obsCtx())
	})
	b.Run("SDK", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		prev := otel.GetTracerProvider()
		otel.SetTracerProvider(tp)
		defer func() {
			otel.SetTracerProvider(prev)
			require.NoError(b, tp.Shutdown(ctx))
			require.NoError(b, mp.Shutdown(ctx))
		}()
		run(b, newHandler(b, options.RetryHandlerOptions{MeterProvider: mp}), obsCtx())
	})
}
