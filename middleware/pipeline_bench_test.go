package middleware_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// passThrough is a middleware that only hands the request on. A pipeline
// of it alone is kiota-http-go's pipeline with nothing in it: an empty
// list would get kiota-http-go's default handlers instead.
type passThrough struct{}

func (passThrough) Intercept(p nethttplibrary.Pipeline, i int, req *http.Request) (*http.Response, error) {
	return p.Next(req, i)
}

// cloning hands on a copy of the request, as any handler must that keeps
// the caller's request intact while the handlers after it edit theirs:
// the floor of what a correct retry handler costs.
type cloning struct{}

func (cloning) Intercept(p nethttplibrary.Pipeline, i int, req *http.Request) (*http.Response, error) {
	return p.Next(req.Clone(req.Context()), i)
}

// benchPayload is a small JSON request body, as a Graph POST sends.
var benchPayload = []byte(`{"displayName":"Contoso","mailNickname":"contoso","mailEnabled":false}`)

// benchHandler is one of the pipelines compared.
type benchHandler struct {
	name string
	new  func(*testing.B) nethttplibrary.Middleware
}

// benchRequest builds a request once; reset gives it a fresh body before
// every send, as a request adapter builds one per call: the transport may
// still read the previous body after the response came (net/http's
// RoundTripper contract), so a body must not be rewound and reused.
type benchRequest struct {
	name string
	new  func(b *testing.B, url string) (req *http.Request, reset func())
}

// benchSetup starts the loopback server and returns its URL, the
// keep-alive transport every pipeline ends in, the handlers and the
// requests.
func benchSetup(b *testing.B) (string, http.RoundTripper, []benchHandler, []benchRequest) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"1"}`)
	}))
	b.Cleanup(srv.Close)
	base := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(base.CloseIdleConnections)

	ours := func(b *testing.B, queue bool) nethttplibrary.Middleware {
		h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: !queue}})
		require.NoError(b, err)
		b.Cleanup(func() {
			if s := h.Stats(); s.Retries != 0 || s.Requests != s.Attempts {
				b.Errorf("the happy path retried: %+v", s)
			}
		})
		return h
	}
	handlers := []benchHandler{
		{"bare", func(*testing.B) nethttplibrary.Middleware { return passThrough{} }},
		{"clone", func(*testing.B) nethttplibrary.Middleware { return cloning{} }},
		{"kiota", func(*testing.B) nethttplibrary.Middleware { return nethttplibrary.NewRetryHandler() }},
		{"queue-off", func(b *testing.B) nethttplibrary.Middleware { return ours(b, false) }},
		{"queue-on", func(b *testing.B) nethttplibrary.Middleware { return ours(b, true) }},
	}
	requests := []benchRequest{
		{"GET", func(b *testing.B, url string) (*http.Request, func()) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
			require.NoError(b, err)
			return req, func() {}
		}},
		{"GET-observed", func(b *testing.B, url string) (*http.Request, func()) {
			obs := &nethttplibrary.ObservabilityOptions{}
			ctx := context.WithValue(context.Background(), obs.GetKey(), obs)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			require.NoError(b, err)
			return req, func() {}
		}},
		{"POST-GetBody", func(b *testing.B, url string) (*http.Request, func()) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(benchPayload))
			require.NoError(b, err)
			require.NotNil(b, req.GetBody)
			req.Header.Set("Content-Type", "application/json")
			return req, func() { req.Body = io.NopCloser(bytes.NewReader(benchPayload)) }
		}},
		{"POST-Seeker", func(b *testing.B, url string) (*http.Request, func()) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, nil)
			require.NoError(b, err)
			req.ContentLength = int64(len(benchPayload))
			req.Header.Set("Content-Type", "application/json")
			return req, func() { req.Body = nethttplibrary.NopCloser(bytes.NewReader(benchPayload)) }
		}},
	}
	return srv.URL + "/v1.0/groups", base, handlers, requests
}

// send sends req (after reset) through client and reads the response.
func benchSend(b *testing.B, client *http.Client, req *http.Request, reset func()) {
	reset()
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("got %d, %v", resp.StatusCode, err)
	}
}

// BenchmarkPipeline measures one request that succeeds at its first
// attempt through kiota-http-go's pipeline over a keep-alive loopback
// connection, the path nearly every request takes. Sub-benchmarks are
// named req=…/handler=… so that benchstat can compare the handlers side by
// side (benchstat -col /handler):
//
//   - bare: a pipeline holding only a middleware that calls Next;
//   - clone: the same, handing on a copy of the request (Request.Clone),
//     the floor for a handler that must not let the handlers after it
//     edit the caller's request;
//   - kiota: kiota-http-go's own RetryHandler with its defaults;
//   - queue-off: our RetryHandler with the throttle queue turned off;
//   - queue-on: our RetryHandler with its defaults, queue on.
//
// The requests are a GET without a body; the same GET carrying
// kiota-http-go's ObservabilityOptions, as its request adapter always
// sends them (no tracer provider installed: the OpenTelemetry API's no-op
// spans, which the pipeline and both retry handlers start); a POST whose
// bytes.Reader body came through http.NewRequest (so it has GetBody); and
// a POST with a seekable body and no GetBody, as the adapter builds it.
//
// Allocations are exact; they include the server's, which are the same
// for every handler. On a busy machine ns/op drifts between
// sub-benchmarks: BenchmarkPipelinePaired compares times more closely.
func BenchmarkPipeline(b *testing.B) {
	url, base, handlers, requests := benchSetup(b)
	for _, r := range requests {
		for _, h := range handlers {
			b.Run("req="+r.name+"/handler="+h.name, func(b *testing.B) {
				client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h.new(b))}
				req, reset := r.new(b, url)
				b.ReportAllocs()
				for b.Loop() {
					benchSend(b, client, req, reset)
				}
			})
		}
	}
}

// BenchmarkPipelinePaired sends, in every iteration, one request through
// each pipeline of BenchmarkPipeline in turn, starting with a different
// one each time, and reports each pipeline's median time per request
// (<handler>-ns/req) and its ratio to the bare pipeline's
// (<handler>/bare). Whatever else the machine does slows every pipeline
// alike, so the ratios hold where separate runs would drift apart; the
// median ignores the stalls of a shared machine, which a mean would not.
func BenchmarkPipelinePaired(b *testing.B) {
	url, base, handlers, requests := benchSetup(b)
	for _, r := range requests {
		b.Run("req="+r.name, func(b *testing.B) {
			clients := make([]*http.Client, len(handlers))
			reqs := make([]*http.Request, len(handlers))
			resets := make([]func(), len(handlers))
			for i, h := range handlers {
				clients[i] = &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h.new(b))}
				reqs[i], resets[i] = r.new(b, url)
			}
			took := make([][]time.Duration, len(handlers))
			n := 0
			for b.Loop() {
				for k := range handlers {
					i := (n + k) % len(handlers)
					start := time.Now()
					benchSend(b, clients[i], reqs[i], resets[i])
					took[i] = append(took[i], time.Since(start))
				}
				n++
			}
			median := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2])
			}
			bare := median(took[0])
			for i, h := range handlers {
				m := median(took[i])
				b.ReportMetric(m, h.name+"-ns/req")
				if i > 0 {
					b.ReportMetric(m/bare, h.name+"/bare")
				}
			}
		})
	}
}
