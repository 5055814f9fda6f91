package middleware

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// The names below are spelled out rather than taken from package
// observability, so that a typo in a constant fails these tests.
const (
	spanIntercept   = "RetryHandler_Intercept"
	keyEnable       = "com.microsoft.kiota.handler.retry.enable"
	keyResendCount  = "http.request.resend_count"
	keyStatusCode   = "http.response.status_code"
	keyResendDelay  = "http.request.resend_delay"
	keyURLFull      = "url.full"
	keyReason       = "com.microsoft.kiota.handler.retry.reason"
	keyStopReason   = "com.microsoft.kiota.handler.retry.stop_reason"
	keyExpected     = "com.microsoft.kiota.handler.retry.queue.expected_duration"
	keyHeldDuration = "com.microsoft.kiota.handler.retry.queue.held_duration"
	eventGivenUp    = "com.microsoft.kiota.handler.retry.given_up"
	eventHeld       = "com.microsoft.kiota.handler.retry.queue.held"
	eventReleased   = "com.microsoft.kiota.handler.retry.queue.released"
	metricRetries   = "com.microsoft.kiota.handler.retry.retries"
	metricDelay     = "com.microsoft.kiota.handler.retry.delay"
	metricQueueDur  = "com.microsoft.kiota.handler.retry.queue.duration"
	metricQueueHeld = "com.microsoft.kiota.handler.retry.queue.held_requests"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// step is one scripted outcome of an attempt.
type step struct {
	status     int
	retryAfter string
	err        error
}

// script is a Pipeline that answers attempts with its steps in turn, the
// last one repeating, and remembers each attempt's span context.
type script struct {
	mu    sync.Mutex
	steps []step
	spans []trace.SpanContext
}

func (s *script) Next(req *http.Request, _ int) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[min(len(s.spans), len(s.steps)-1)]
	s.spans = append(s.spans, trace.SpanContextFromContext(req.Context()))
	if st.err != nil {
		return nil, st.err
	}
	h := http.Header{}
	if st.retryAfter != "" {
		h.Set("Retry-After", st.retryAfter)
	}
	return &http.Response{StatusCode: st.status, Header: h, Body: io.NopCloser(strings.NewReader("x")), Request: req}, nil
}

func (s *script) attemptSpans() []trace.SpanContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]trace.SpanContext(nil), s.spans...)
}

// telemetry is an in-memory span recorder installed as the global tracer
// provider (restored on cleanup, which is why no test here runs in
// parallel) and a manual metric reader.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	clock  *clocktest.Clock
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), clock: clocktest.New(t0)}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		assert.NoError(t, tp.Shutdown(context.Background()))
		assert.NoError(t, tel.mp.Shutdown(context.Background()))
	})
	return tel
}

func (tel *telemetry) handler(t *testing.T, opts options.RetryHandlerOptions) *RetryHandler {
	t.Helper()
	opts.Clock = tel.clock
	opts.MeterProvider = tel.mp
	if opts.Policy == nil {
		// Retry n waits n seconds unless the server asks for more.
		opts.Policy = options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			return time.Duration(a.Retry) * time.Second, true
		})
	}
	h, err := NewRetryHandler(opts)
	require.NoError(t, err)
	return h
}

// request returns a request carrying kiota-http-go's ObservabilityOptions,
// as NetHttpRequestAdapter sends it; traced false leaves them out.
func request(t *testing.T, ctx context.Context, method, url string, body io.Reader, traced, euii bool) *http.Request {
	t.Helper()
	if traced {
		obs := &nethttplibrary.ObservabilityOptions{IncludeEUIIAttributes: euii}
		ctx = context.WithValue(ctx, obs.GetKey(), obs)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	require.NoError(t, err)
	return req
}

type result struct {
	resp *http.Response
	err  error
}

// intercept runs req through h, advancing the fake clock through each of
// the waits the handler is expected to make, and checks their lengths.
func (tel *telemetry) intercept(t *testing.T, h *RetryHandler, p nethttplibrary.Pipeline, req *http.Request, waits ...time.Duration) result {
	t.Helper()
	done := make(chan result, 1)
	go func() {
		resp, err := h.Intercept(p, 0, req)
		done <- result{resp, err}
	}()
	for _, d := range waits {
		tel.awaitTimer(t, done)
		require.Equal(t, []time.Duration{d}, tel.clock.Pending(), "delay before the next retry")
		tel.clock.Advance(d)
	}
	res := <-done
	if res.resp != nil {
		discard(res.resp)
	}
	return res
}

// awaitTimer blocks until the handler waits on a timer, failing if it
// returns first.
func (tel *telemetry) awaitTimer(t *testing.T, done chan result) {
	t.Helper()
	ready := make(chan struct{})
	go func() { tel.clock.WaitForTimers(1); close(ready) }()
	select {
	case <-ready:
	case res := <-done:
		t.Fatalf("handler returned (%v) instead of waiting", res.err)
	}
}

func (tel *telemetry) ended(t *testing.T) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range tel.spans.Ended() {
		require.NotContains(t, out, s.Name(), "span name used twice")
		out[s.Name()] = s
	}
	require.Empty(t, openSpans(tel.spans), "spans left open")
	return out
}

func openSpans(rec *tracetest.SpanRecorder) []string {
	var open []string
	for _, s := range rec.Started() {
		if s.EndTime().IsZero() {
			open = append(open, s.Name())
		}
	}
	return open
}

func kv(attrs []attribute.KeyValue) map[string]any {
	out := make(map[string]any, len(attrs))
	for _, a := range attrs {
		out[string(a.Key)] = a.Value.AsInterface()
	}
	return out
}

type event struct {
	name  string
	attrs map[string]any
}

// events lists a span's events, without the exception events RecordError
// adds (checked separately).
func events(s sdktrace.ReadOnlySpan) []event {
	var out []event
	for _, e := range s.Events() {
		if e.Name == "exception" {
			continue
		}
		out = append(out, event{e.Name, kv(e.Attributes)})
	}
	return out
}

func hasException(s sdktrace.ReadOnlySpan) bool {
	for _, e := range s.Events() {
		if e.Name == "exception" {
			return true
		}
	}
	return false
}

// collect returns the metrics read, by name.
func (tel *telemetry) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, "github.com/kiota-resilience/kiota-resilience-go", sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func enc(attrs ...attribute.KeyValue) string {
	s := attribute.NewSet(attrs...)
	return s.Encoded(attribute.DefaultEncoder())
}

func retryAttrs(status int, reason string) string {
	if status == 0 {
		return enc(attribute.String(keyReason, reason))
	}
	return enc(attribute.Int(keyStatusCode, status), attribute.String(keyReason, reason))
}

// counts returns an int64 sum's values by encoded attribute set, checking
// its unit and monotonicity.
func counts(t *testing.T, m metricdata.Metrics, unit string, monotonic bool) map[string]int64 {
	t.Helper()
	require.Equal(t, unit, m.Unit, m.Name)
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	require.Equal(t, monotonic, sum.IsMonotonic, m.Name)
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		out[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
	}
	return out
}

type hist struct {
	count uint64
	sum   float64
}

func histograms(t *testing.T, m metricdata.Metrics) map[string]hist {
	t.Helper()
	require.Equal(t, "s", m.Unit, m.Name)
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := map[string]hist{}
	for _, p := range h.DataPoints {
		require.Equal(t, []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 180, 300, 600, 1800}, p.Bounds, m.Name)
		out[p.Attributes.Encoded(attribute.DefaultEncoder())] = hist{p.Count, p.Sum}
	}
	return out
}

func TestTraceFirstAttemptSucceeds(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	p := &script{steps: []step{{status: 200}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, true, false))
	require.NoError(t, res.err)
	require.Equal(t, 200, res.resp.StatusCode)

	spans := tel.ended(t)
	require.Len(t, spans, 1, "no retry spans")
	s := spans[spanIntercept]
	require.NotNil(t, s)
	assert.Equal(t, map[string]any{keyEnable: true}, kv(s.Attributes()))
	assert.Empty(t, s.Events())
	assert.Equal(t, codes.Unset, s.Status().Code)
	assert.Equal(t, []trace.SpanContext{s.SpanContext()}, p.attemptSpans(), "the attempt runs under the handler's span")

	assert.Empty(t, tel.collect(t), "a first-attempt success records no metric")
}

func TestTraceTwoRetriesThenSuccess(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	p := &script{steps: []step{{status: 503}, {status: 429, retryAfter: "5"}, {status: 200}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, true, false),
		1*time.Second, 5*time.Second)
	require.NoError(t, res.err)
	require.Equal(t, 200, res.resp.StatusCode)

	spans := tel.ended(t)
	require.Len(t, spans, 3)
	root, a1, a2 := spans[spanIntercept], spans["RetryHandler_Intercept - attempt 1"], spans["RetryHandler_Intercept - attempt 2"]
	require.NotNil(t, root)
	require.NotNil(t, a1)
	require.NotNil(t, a2)
	assert.Equal(t, map[string]any{keyEnable: true}, kv(root.Attributes()))
	assert.Empty(t, events(root), "nothing was given up")
	assert.Equal(t, map[string]any{keyResendCount: int64(1), keyStatusCode: int64(503), keyResendDelay: 1.0, keyReason: "response"}, kv(a1.Attributes()))
	assert.Equal(t, map[string]any{keyResendCount: int64(2), keyStatusCode: int64(429), keyResendDelay: 5.0, keyReason: "response"}, kv(a2.Attributes()))
	for _, a := range []sdktrace.ReadOnlySpan{a1, a2} {
		assert.Equal(t, root.SpanContext().SpanID(), a.Parent().SpanID(), "%s is a child of the handler's span", a.Name())
		assert.Equal(t, codes.Unset, a.Status().Code)
	}
	assert.Equal(t, []trace.SpanContext{root.SpanContext(), a1.SpanContext(), a2.SpanContext()}, p.attemptSpans(),
		"each retry is sent under its own span")

	m := tel.collect(t)
	assert.Equal(t, map[string]int64{retryAttrs(503, "response"): 1, retryAttrs(429, "response"): 1},
		counts(t, m[metricRetries], "{retry}", true))
	assert.Equal(t, map[string]hist{retryAttrs(503, "response"): {1, 1}, retryAttrs(429, "response"): {1, 5}},
		histograms(t, m[metricDelay]))
	assert.NotContains(t, m, metricQueueDur)
}

func TestTraceExhaustion(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{MaxRetries: 2})
	p := &script{steps: []step{{status: 503}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, true, false),
		1*time.Second, 2*time.Second)
	require.NoError(t, res.err, "the last response is returned as is")
	require.Equal(t, 503, res.resp.StatusCode)

	spans := tel.ended(t)
	require.Len(t, spans, 3)
	root := spans[spanIntercept]
	require.NotNil(t, root)
	assert.Equal(t, []event{{eventGivenUp, map[string]any{keyStopReason: "max_retries", keyResendCount: int64(2), keyStatusCode: int64(503)}}},
		events(root))
	assert.Equal(t, codes.Unset, root.Status().Code, "a returned response is not an error")
	assert.Equal(t, int64(2), kv(spans["RetryHandler_Intercept - attempt 2"].Attributes())[keyResendCount])

	m := tel.collect(t)
	assert.Equal(t, map[string]int64{retryAttrs(503, "response"): 2}, counts(t, m[metricRetries], "{retry}", true))
	assert.Equal(t, map[string]hist{retryAttrs(503, "response"): {2, 3}}, histograms(t, m[metricDelay]))
}

func TestTraceCanceledDuringWait(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	p := &script{steps: []step{{status: 429, retryAfter: "30"}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := request(t, ctx, http.MethodGet, "https://graph.example/v1.0/me", nil, true, false)

	done := make(chan result, 1)
	go func() {
		resp, err := h.Intercept(p, 0, req)
		done <- result{resp, err}
	}()
	tel.awaitTimer(t, done)
	require.Equal(t, []time.Duration{30 * time.Second}, tel.clock.Pending())
	cancel()
	res := <-done
	require.ErrorIs(t, res.err, context.Canceled)
	require.Nil(t, res.resp)

	spans := tel.ended(t)
	require.Len(t, spans, 2)
	root, a1 := spans[spanIntercept], spans["RetryHandler_Intercept - attempt 1"]
	require.NotNil(t, root)
	require.NotNil(t, a1)
	for _, s := range []sdktrace.ReadOnlySpan{root, a1} {
		assert.Equal(t, codes.Error, s.Status().Code, s.Name())
		assert.Equal(t, res.err.Error(), s.Status().Description, s.Name())
		assert.True(t, hasException(s), "%s records the error", s.Name())
	}
	assert.Empty(t, events(root), "a cancellation is not a give-up")
	assert.Equal(t, map[string]any{keyResendCount: int64(1), keyStatusCode: int64(429), keyResendDelay: 30.0, keyReason: "response"}, kv(a1.Attributes()))

	m := tel.collect(t)
	assert.NotContains(t, m, metricRetries, "the retry was never sent")
	assert.Equal(t, map[string]hist{retryAttrs(429, "response"): {1, 30}}, histograms(t, m[metricDelay]))
}

func TestTraceTransportErrorRetry(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	broken := errors.New("connection reset")
	p := &script{steps: []step{{err: broken}, {err: broken}, {status: 200}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, true, false),
		1*time.Second, 2*time.Second)
	require.NoError(t, res.err)

	spans := tel.ended(t)
	a1, a2 := spans["RetryHandler_Intercept - attempt 1"], spans["RetryHandler_Intercept - attempt 2"]
	require.NotNil(t, a1)
	require.NotNil(t, a2)
	assert.Equal(t, map[string]any{keyResendCount: int64(1), keyResendDelay: 1.0, keyReason: "transport_error"}, kv(a1.Attributes()),
		"no status code without a response")
	assert.Equal(t, codes.Error, a1.Status().Code, "retry 1 itself failed")
	assert.Equal(t, codes.Unset, a2.Status().Code)
	assert.Equal(t, codes.Unset, spans[spanIntercept].Status().Code)

	m := tel.collect(t)
	assert.Equal(t, map[string]int64{retryAttrs(0, "transport_error"): 2}, counts(t, m[metricRetries], "{retry}", true))
}

// TestTraceGivenUp checks the stop reason of every way the handler gives
// up a failed attempt, and that success and non-retryable responses are
// not give-ups.
func TestTraceGivenUp(t *testing.T) {
	forwardOnly := func() io.Reader { return io.MultiReader(strings.NewReader("{}")) }
	tests := []struct {
		name    string
		opts    options.RetryHandlerOptions
		method  string
		body    func() io.Reader
		steps   []step
		waits   []time.Duration
		want    map[string]any // nil: no given-up event
		wantErr bool
		timeout time.Duration // > 0: the request context's deadline, in real time
	}{
		{name: "max retries", opts: options.RetryHandlerOptions{MaxRetries: 1}, steps: []step{{status: 503}}, waits: []time.Duration{time.Second},
			want: map[string]any{keyStopReason: "max_retries", keyResendCount: int64(1), keyStatusCode: int64(503)}},
		{name: "policy", opts: options.RetryHandlerOptions{Policy: options.PolicyFunc(func(options.Attempt) (time.Duration, bool) { return 0, false })},
			steps: []step{{status: 503}}, want: map[string]any{keyStopReason: "policy", keyResendCount: int64(0), keyStatusCode: int64(503)}},
		{name: "should retry", opts: options.RetryHandlerOptions{ShouldRetry: func(options.Attempt) bool { return false }},
			steps: []step{{status: 504}}, want: map[string]any{keyStopReason: "should_retry", keyResendCount: int64(0), keyStatusCode: int64(504)}},
		{name: "retries time limit", opts: options.RetryHandlerOptions{RetriesTimeLimit: 4 * time.Second},
			steps: []step{{status: 429, retryAfter: "5"}}, want: map[string]any{keyStopReason: "retries_time_limit", keyResendCount: int64(0), keyStatusCode: int64(429)}},
		{name: "max elapsed", opts: options.RetryHandlerOptions{MaxElapsed: 4 * time.Second},
			steps: []step{{status: 429, retryAfter: "5"}}, want: map[string]any{keyStopReason: "max_elapsed", keyResendCount: int64(0), keyStatusCode: int64(429)}},
		{name: "deadline", timeout: 5 * time.Minute,
			steps: []step{{status: 429, retryAfter: "600"}}, want: map[string]any{keyStopReason: "deadline", keyResendCount: int64(0), keyStatusCode: int64(429)}},
		{name: "forward-only body", method: http.MethodPost, body: forwardOnly,
			steps: []step{{status: 503}}, want: map[string]any{keyStopReason: "forward_only_body", keyResendCount: int64(0), keyStatusCode: int64(503)}},
		{name: "not idempotent", method: http.MethodPost, steps: []step{{err: errors.New("connection reset")}}, wantErr: true,
			want: map[string]any{keyStopReason: "not_idempotent", keyResendCount: int64(0)}},
		{name: "permanent error", steps: []step{{err: x509.UnknownAuthorityError{}}}, wantErr: true,
			want: map[string]any{keyStopReason: "permanent_error", keyResendCount: int64(0)}},
		{name: "success", steps: []step{{status: 200}}},
		{name: "not retryable", steps: []step{{status: 404}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t)
			h := tel.handler(t, tt.opts)
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			res := tel.intercept(t, h, &script{steps: tt.steps}, request(t, ctx, method, "https://graph.example/v1.0/me", body, true, false), tt.waits...)
			root := tel.ended(t)[spanIntercept]
			require.NotNil(t, root)
			if tt.want == nil {
				assert.Empty(t, events(root))
			} else {
				assert.Equal(t, []event{{eventGivenUp, tt.want}}, events(root))
			}
			if tt.wantErr {
				require.Error(t, res.err)
				assert.Equal(t, codes.Error, root.Status().Code)
				assert.True(t, hasException(root))
			} else {
				require.NoError(t, res.err)
				assert.Equal(t, codes.Unset, root.Status().Code)
			}
		})
	}
}

func TestTraceEUII(t *testing.T) {
	const target = "https://user:secret@graph.example/v1.0/users/adele@contoso.example?$select=mail"
	tests := []struct {
		name string
		euii bool
		want map[string]any // url.full on every span, or nothing
	}{
		{"off", false, map[string]any{}},
		{"on", true, map[string]any{keyURLFull: "https://REDACTED:REDACTED@graph.example/v1.0/users/adele@contoso.example?$select=mail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t)
			h := tel.handler(t, options.RetryHandlerOptions{})
			p := &script{steps: []step{{status: 503}, {status: 200}}}
			res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, target, nil, true, tt.euii), time.Second)
			require.NoError(t, res.err)
			spans := tel.ended(t)
			require.Len(t, spans, 2)
			for name, s := range spans {
				got := map[string]any{}
				for k, v := range kv(s.Attributes()) {
					if strings.HasPrefix(k, "url.") || strings.HasPrefix(k, "server.") {
						got[k] = v
					}
				}
				assert.Equal(t, tt.want, got, name)
				for _, a := range s.Attributes() {
					assert.NotContains(t, a.Value.Emit(), "secret", "%s: %s", name, a.Key)
				}
			}
		})
	}
}

// TestNoObservabilityOptions checks that a request without
// ObservabilityOptions (a plain http.Client) gets no span but still counts
// in the metrics.
func TestNoObservabilityOptions(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	p := &script{steps: []step{{status: 503}, {status: 200}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, false, false), time.Second)
	require.NoError(t, res.err)
	assert.Empty(t, tel.spans.Started())
	assert.Equal(t, []trace.SpanContext{{}, {}}, p.attemptSpans())
	m := tel.collect(t)
	assert.Equal(t, map[string]int64{retryAttrs(503, "response"): 1}, counts(t, m[metricRetries], "{retry}", true))
}

// TestMetricsGlobalMeterProvider checks that a handler without a
// MeterProvider reports to the global one.
func TestMetricsGlobalMeterProvider(t *testing.T) {
	tel := newTelemetry(t)
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tel.mp)
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	h, err := NewRetryHandler(options.RetryHandlerOptions{Clock: tel.clock,
		Policy: options.PolicyFunc(func(options.Attempt) (time.Duration, bool) { return time.Second, true })})
	require.NoError(t, err)
	p := &script{steps: []step{{status: 429}, {status: 200}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, false, false), time.Second)
	require.NoError(t, res.err)
	assert.Equal(t, map[string]int64{retryAttrs(429, "response"): 1}, counts(t, tel.collect(t)[metricRetries], "{retry}", true))
}

// TestQueueHooks drives the hooks the throttle queue calls, the way it
// calls them: held when it parks a request, released when it lets it go.
func TestQueueHooks(t *testing.T) {
	tests := []struct {
		name     string
		traced   bool
		release  bool // released before the handler ends; else end releases
		wantSpan bool
	}{
		{name: "traced", traced: true, release: true, wantSpan: true},
		{name: "untraced", traced: false, release: true},
		{name: "released by end", traced: true, release: false, wantSpan: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t)
			h := tel.handler(t, options.RetryHandlerOptions{})
			req := request(t, context.Background(), http.MethodGet, "https://graph.example/v1.0/me", nil, tt.traced, false)
			obs := observer{inst: h.inst, clock: h.clock}
			ctx := obs.begin(req)

			obs.held(ctx, 3*time.Second)
			obs.held(ctx, 9*time.Second) // already held: ignored
			m := tel.collect(t)
			assert.Equal(t, map[string]int64{enc(): 1}, counts(t, m[metricQueueHeld], "{request}", false), "one request held")
			assert.NotContains(t, m, metricQueueDur, "nothing released yet")

			tel.clock.Advance(2500 * time.Millisecond)
			if tt.release {
				obs.released(ctx)
				obs.released(ctx) // not held: ignored
			}
			obs.end(ctx, nil)

			m = tel.collect(t)
			assert.Equal(t, map[string]int64{enc(): 0}, counts(t, m[metricQueueHeld], "{request}", false), "released")
			assert.Equal(t, map[string]hist{enc(): {1, 2.5}}, histograms(t, m[metricQueueDur]))

			spans := tel.ended(t)
			if !tt.wantSpan {
				assert.Empty(t, spans)
				return
			}
			root := spans[spanIntercept]
			require.NotNil(t, root)
			assert.Equal(t, []event{
				{eventHeld, map[string]any{keyExpected: 3.0}},
				{eventReleased, map[string]any{keyHeldDuration: 2.5}},
			}, events(root))
		})
	}
}

func TestRetryReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, "response"},
		{fmt.Errorf("retry handler: GET https://x: %w after 1s", ErrAttemptTimeout), "attempt_timeout"},
		{io.ErrUnexpectedEOF, "transport_error"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, retryReason(tt.err), "%v", tt.err)
	}
}

func TestFullURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://graph.example/v1.0/me?$top=1", "https://graph.example/v1.0/me?$top=1"},
		{"https://user@graph.example/", "https://REDACTED:REDACTED@graph.example/"},
		{"https://user:pw@graph.example/", "https://REDACTED:REDACTED@graph.example/"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodGet, tt.in, nil)
		require.NoError(t, err)
		assert.Equal(t, tt.want, fullURL(req.URL))
		assert.Equal(t, tt.in, req.URL.String(), "the request's URL is left alone")
	}
}

// TestObservabilityKey checks that the handler finds ObservabilityOptions
// exactly where kiota-http-go's own lookup does.
func TestObservabilityKey(t *testing.T) {
	for _, traced := range []bool{false, true} {
		req := request(t, context.Background(), http.MethodGet, "https://graph.example/", nil, traced, false)
		want := nethttplibrary.GetObservabilityOptionsFromRequest(req)
		got, _ := req.Context().Value(observabilityKey).(nethttplibrary.ObservabilityOptionsInt)
		assert.Equal(t, want, got)
		assert.Equal(t, traced, got != nil)
	}
}

// TestTraceGivenUpHeldPastLimit checks a retry the queue would hold past
// MaxElapsed: it is given up at once, with that reason, and never reported
// as held.
func TestTraceGivenUpHeldPastLimit(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{MaxElapsed: 10 * time.Second})
	const url = "https://graph.example/v1.0/me"
	// Another request, which opts out of retries, throttles the URL for 60 s.
	optOut := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1})
	tel.intercept(t, h, &script{steps: []step{{status: 429, retryAfter: "60"}}}, request(t, optOut, http.MethodGet, url, nil, false, false))

	// This one is sent at once (a first attempt is never refused), is
	// throttled for 1 s, and its retry would wait for the URL's 60 s.
	res := tel.intercept(t, h, &script{steps: []step{{status: 429, retryAfter: "1"}}}, request(t, context.Background(), http.MethodGet, url, nil, true, false))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)
	root := tel.ended(t)[spanIntercept]
	require.NotNil(t, root)
	assert.Equal(t, []event{{eventGivenUp, map[string]any{keyStopReason: "max_elapsed", keyResendCount: int64(0), keyStatusCode: int64(429)}}}, events(root))
}
