package middleware_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

const mib = 1 << 20

// sinkTransport stands for the network at the bottom of an in-memory
// pipeline: it reads every attempt's body to the end, as a transport does,
// and answers 503 to the first failures attempts of a request (told apart
// by Retry-Attempt), then 200.
type sinkTransport struct {
	failures int
	size     int64
	short    atomic.Int64 // attempts whose body was not size bytes
}

func (s *sinkTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n, _ := io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	if n != s.size {
		s.short.Add(1)
	}
	status := http.StatusOK
	if retry, _ := strconv.Atoi(req.Header.Get("Retry-Attempt")); retry < s.failures {
		status = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// bytesPerRun is testing.AllocsPerRun for bytes: the heap bytes f
// allocates on average, measured on one P after a warm-up run.
func bytesPerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}

// TestRetriedBodyIsNotCopied sends a 1 MiB POST that fails three times
// before succeeding and compares the heap it costs with a POST that
// succeeds at once: each retry must cost a request clone, not a copy of
// the body, for both kinds of replayable body (net/http's GetBody and the
// io.Seeker body the Kiota adapter sends).
func TestRetriedBodyIsNotCopied(t *testing.T) {
	payload := bytes.Repeat([]byte("p"), mib)
	bodies := []struct {
		name string
		req  func() *http.Request
	}{
		{"GetBody", func() *http.Request {
			req, _ := http.NewRequest(http.MethodPost, "http://memory.test/items", bytes.NewReader(payload))
			return req
		}},
		{"io.Seeker", func() *http.Request {
			req, _ := http.NewRequest(http.MethodPost, "http://memory.test/items", nil)
			req.Body = nethttplibrary.NopCloser(bytes.NewReader(payload))
			req.ContentLength = int64(len(payload))
			return req
		}},
	}
	for _, body := range bodies {
		t.Run(body.name, func(t *testing.T) {
			cost := func(failures int) float64 {
				sink := &sinkTransport{failures: failures, size: mib}
				// Every request fails three times: the retry budget and the
				// outage hold, which bound exactly that, are off here.
				h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3, Outage: options.OutageOptions{Disabled: true}})
				rt := nethttplibrary.NewCustomTransportWithParentTransport(sink, h)
				perRun := bytesPerRun(20, func() {
					resp, err := rt.RoundTrip(body.req())
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Errorf("got %v, %v; want 200", resp, err)
					}
				})
				assert.Zero(t, sink.short.Load(), "an attempt sent a body that was not the whole 1 MiB")
				return perRun
			}
			once, retried := cost(0), cost(3)
			perRetry := (retried - once) / 3
			t.Logf("1 MiB POST: %.0f B sent once, %.0f B with 3 retries: %.0f B per retry", once, retried, perRetry)
			assert.Less(t, perRetry, float64(mib/32), "a retry allocates more than a request clone")
		})
	}
}

// countingReader is a forward-only body: an io.Reader and nothing else,
// counting the bytes taken from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// partialTransport reads only the first take bytes of a body, as a
// server that answers before reading the rest makes a transport do, and
// answers 429.
type partialTransport struct {
	take     int64
	attempts atomic.Int32
}

func (p *partialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p.attempts.Add(1)
	_, _ = io.CopyN(io.Discard, req.Body, p.take)
	_ = req.Body.Close()
	return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"0"}},
		Body: http.NoBody, Request: req}, nil
}

// TestForwardOnlyBodyIsNeverBuffered sends a body that can be read once:
// after a 429 the caller gets the 429, nothing is retried, and exactly the
// bytes the transport sent were taken from the body, none buffered ahead.
func TestForwardOnlyBodyIsNeverBuffered(t *testing.T) {
	const size = 256 << 10

	t.Run("in memory, the transport takes 10 KiB", func(t *testing.T) {
		body := &countingReader{r: bytes.NewReader(make([]byte, size))}
		req, err := http.NewRequest(http.MethodPost, "http://memory.test/items", body)
		require.NoError(t, err)
		require.Nil(t, req.GetBody, "the body must be forward-only for this test")
		tr := &partialTransport{take: 10 << 10}
		h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})

		resp, err := nethttplibrary.NewCustomTransportWithParentTransport(tr, h).RoundTrip(req)

		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.EqualValues(t, 10<<10, body.n.Load(), "bytes taken from the body")
		assert.EqualValues(t, 1, tr.attempts.Load())
		assert.Equal(t, middleware.Stats{Requests: 1, Attempts: 1}, h.Stats())
	})

	t.Run("on loopback, the server reads it all", func(t *testing.T) {
		var received, hits atomic.Int64
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			n, _ := io.Copy(io.Discard, r.Body)
			received.Add(n)
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		t.Cleanup(ts.Close)
		body := &countingReader{r: bytes.NewReader(make([]byte, size))}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, ts.URL, body)
		require.NoError(t, err)
		h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})

		r := await(t, goDo(newRawClient(t, h), req))

		require.NoError(t, r.err)
		assert.Equal(t, http.StatusTooManyRequests, r.resp.StatusCode)
		assert.EqualValues(t, 1, hits.Load(), "no retry")
		assert.EqualValues(t, size, received.Load())
		assert.Equal(t, received.Load(), body.n.Load(), "bytes taken from the body = bytes the server got")
	})
}

// BenchmarkRetried1MiBPost measures a 1 MiB POST through the handler to a
// loopback server that answers 503 to the first retries attempts: compare
// B/op across retries to see what a retry costs.
func BenchmarkRetried1MiBPost(b *testing.B) {
	payload := bytes.Repeat([]byte("p"), mib)
	for _, retries := range []int{0, 3} {
		b.Run("retries="+strconv.Itoa(retries), func(b *testing.B) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if n, _ := strconv.Atoi(r.Header.Get("Retry-Attempt")); n < retries {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			defer ts.Close()
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})
			require.NoError(b, err)
			client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}
			b.ReportAllocs()
			b.SetBytes(mib)
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, ts.URL, bytes.NewReader(payload))
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
