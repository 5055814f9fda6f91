package observability_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// A handler reports its retries to the MeterProvider it is given (here an
// SDK provider read by hand; in production, one with an exporter).
func Example_meterProvider() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{
		MeterProvider: mp,
		// Retry at once, to keep the example fast.
		Policy: options.PolicyFunc(func(options.Attempt) (time.Duration, bool) { return 0, true }),
	})
	if err != nil {
		panic(err)
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != observability.MetricRetries {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				status, _ := p.Attributes.Value(observability.HTTPResponseStatusCodeKey)
				reason, _ := p.Attributes.Value(observability.RetryReasonKey)
				fmt.Printf("%s{status=%d reason=%s} = %d %s\n", m.Name, status.AsInt64(), reason.AsString(), p.Value, m.Unit)
			}
		}
	}
	// Output:
	// status: 200
	// com.microsoft.kiota.handler.retry.retries{status=503 reason=response} = 1 {retry}
}
