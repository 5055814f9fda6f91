package middleware

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Spelled out, as in observe_test.go.
const (
	eventHandedBack   = "com.microsoft.kiota.handler.retry.handed_back"
	eventProbe        = "com.microsoft.kiota.handler.retry.outage.probe"
	keyHandBackKind   = "com.microsoft.kiota.handler.retry.hand_back.kind"
	keyHandBackDelay  = "com.microsoft.kiota.handler.retry.hand_back.delay"
	keyHostState      = "com.microsoft.kiota.handler.retry.host.state"
	metricHandBacks   = "com.microsoft.kiota.handler.retry.hand_backs"
	metricProbes      = "com.microsoft.kiota.handler.retry.outage.probes"
	metricHostState   = "com.microsoft.kiota.handler.retry.host.state"
	keyServerAddress  = "server.address"
	metricWokenEarly  = "com.microsoft.kiota.handler.retry.outage.woken_early"
	outageHost        = "graph.example"
	outageURL         = "https://graph.example/v1.0/me"
	handBackStatus429 = 429
)

func TestTraceHandedBack(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{HandBack: options.HandBackThrottles})
	p := &script{steps: []step{{status: handBackStatus429, retryAfter: "5"}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, outageURL, nil, true, false))
	require.NoError(t, res.err)
	require.Equal(t, handBackStatus429, res.resp.StatusCode)

	root := tel.ended(t)[spanIntercept]
	require.NotNil(t, root)
	assert.Equal(t, []event{{eventHandedBack, map[string]any{keyHandBackKind: "response", keyHandBackDelay: 5.0}}}, events(root))
	m := tel.collect(t)
	assert.Equal(t, map[string]int64{enc(attribute.String(keyHandBackKind, "response")): 1}, counts(t, m[metricHandBacks], "{request}", true))
	assert.NotContains(t, m, metricRetries, "no retry sent")
}

// TestTraceProbe: a request that probes a host that is down says so on
// its span; the probes are counted, and the host's state is a gauge.
func TestTraceProbe(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	down := &script{steps: []step{{status: http.StatusServiceUnavailable}}}
	never := &options.RetryHandlerOptions{MaxRetries: -1}
	for range 16 {
		req := request(t, context.WithValue(context.Background(), retryOptionsKey, never), http.MethodGet, outageURL, nil, false, false)
		res := tel.intercept(t, h, down, req)
		require.NoError(t, res.err)
	}
	require.Equal(t, options.HostDown, h.outages.State(outageHost))

	// Its first attempt probes and fails; its retry, a second later, is
	// the next probe, and is answered.
	p := &script{steps: []step{{status: http.StatusServiceUnavailable}, {status: http.StatusOK}}}
	res := tel.intercept(t, h, p, request(t, context.Background(), http.MethodGet, outageURL, nil, true, false), time.Second)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, options.HostUp, h.outages.State(outageHost))

	var root []event
	for _, s := range tel.spans.Ended() {
		if s.Name() == spanIntercept {
			root = events(s)
		}
	}
	assert.Equal(t, []event{{eventProbe, map[string]any{}}, {eventProbe, map[string]any{}}}, root)
	m := tel.collect(t)
	assert.Equal(t, map[string]int64{enc(attribute.String(keyServerAddress, outageHost)): 2}, counts(t, m[metricProbes], "{probe}", true))
	assert.NotContains(t, m, metricWokenEarly, "its own backoff had run out")
	gauge, ok := m[metricHostState].Data.(metricdata.Gauge[int64])
	require.True(t, ok)
	states := map[string]int64{}
	for _, p := range gauge.DataPoints {
		v, _ := p.Attributes.Value(keyHostState)
		states[v.AsString()] = p.Value
	}
	assert.Equal(t, map[string]int64{"up": 1, "down": 0, "probing": 0}, states)
}
