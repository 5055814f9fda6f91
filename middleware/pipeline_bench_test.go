package middleware_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

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

// benchPayload is a small JSON request body, as a Graph POST sends.
var benchPayload = []byte(`{"displayName":"Contoso","mailNickname":"contoso","mailEnabled":false}`)

// BenchmarkPipeline measures one request that succeeds at its first
// attempt through kiota-http-go's pipeline over a keep-alive loopback
// connection, the path nearly every request takes. Sub-benchmarks are
// named req=…/handler=… so that benchstat can compare the handlers side by
// side (benchstat -col /handler):
//
//   - bare: a pipeline holding only a middleware that calls Next;
//   - kiota: kiota-http-go's own RetryHandler with its defaults;
//   - queue-off: our RetryHandler with the throttle queue turned off;
//   - queue-on: our RetryHandler with its defaults, queue on.
//
// The requests are a GET without a body, a POST whose bytes.Reader body
// came through http.NewRequest (so it has GetBody), and a POST with a
// seekable body and no GetBody, as kiota-http-go's request adapter builds it.
//
// The server's allocations count too: they are the same for every handler.
func BenchmarkPipeline(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"1"}`)
	}))
	defer srv.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	url := srv.URL + "/v1.0/groups"

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
	handlers := []struct {
		name string
		mw   func(*testing.B) nethttplibrary.Middleware
	}{
		{"bare", func(*testing.B) nethttplibrary.Middleware { return passThrough{} }},
		{"kiota", func(*testing.B) nethttplibrary.Middleware { return nethttplibrary.NewRetryHandler() }},
		{"queue-off", func(b *testing.B) nethttplibrary.Middleware { return ours(b, false) }},
		{"queue-on", func(b *testing.B) nethttplibrary.Middleware { return ours(b, true) }},
	}

	// Each request is built once; rewind readies its body for the next
	// iteration, as a fresh request would have it.
	type request struct {
		name string
		new  func(*testing.B) (req *http.Request, rewind func())
	}
	requests := []request{
		{"GET", func(b *testing.B) (*http.Request, func()) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
			require.NoError(b, err)
			return req, func() {}
		}},
		{"POST-GetBody", func(b *testing.B) (*http.Request, func()) {
			body := bytes.NewReader(benchPayload)
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, body)
			require.NoError(b, err)
			require.NotNil(b, req.GetBody)
			req.Header.Set("Content-Type", "application/json")
			return req, func() { body.Reset(benchPayload) }
		}},
		{"POST-Seeker", func(b *testing.B) (*http.Request, func()) {
			body := bytes.NewReader(benchPayload)
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, nil)
			require.NoError(b, err)
			req.Body = nethttplibrary.NopCloser(body)
			req.ContentLength = int64(len(benchPayload))
			req.Header.Set("Content-Type", "application/json")
			return req, func() { body.Reset(benchPayload) }
		}},
	}

	for _, r := range requests {
		for _, h := range handlers {
			b.Run("req="+r.name+"/handler="+h.name, func(b *testing.B) {
				client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h.mw(b))}
				req, rewind := r.new(b)
				b.ReportAllocs()
				for b.Loop() {
					rewind()
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
			})
		}
	}
}
