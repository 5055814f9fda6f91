package middleware_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

const okBody = "ok"

// newRequest builds a request whose body, when given, is a bytes.Reader
// (GetBody set by net/http), with an optional Idempotency-Key.
func newRequest(t *testing.T, ctx context.Context, method, url, body, idempotencyKey string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	require.NoError(t, err)
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	return req
}

// isReset reports an error caused by the peer resetting or dropping the
// connection: which of these the transport reports depends on when the
// RST arrives.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func TestFaultResetBeforeHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, method, key string
		wantHits          int
		wantOK            bool
	}{
		{"GET is retried", http.MethodGet, "", 2, true},
		{"PUT is retried", http.MethodPut, "", 2, true},
		{"POST is not sent twice", http.MethodPost, "", 1, false},
		{"POST with Idempotency-Key is retried", http.MethodPost, "key-1", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, func(n int, _ *http.Request, c net.Conn) bool {
				if n == 1 {
					reset(c) // the request was read in full, no byte answered
					return false
				}
				return writeReply(c, http.StatusOK, nil, okBody)
			})
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})
			req := newRequest(t, context.Background(), tc.method, srv.URL()+"/items", `{"n":1}`, tc.key)

			r := await(t, goDo(newRawClient(t, h), req))

			seen := srv.seen()
			require.Len(t, seen, tc.wantHits, "requests the server read")
			for _, s := range seen {
				if tc.method != http.MethodGet {
					assert.Equal(t, `{"n":1}`, string(s.Body), "every attempt carries the same body")
				}
			}
			if tc.wantOK {
				require.NoError(t, r.err)
				assert.Equal(t, http.StatusOK, r.resp.StatusCode)
				assert.Equal(t, okBody, r.body)
				assert.Equal(t, "1", seen[1].Header.Get("Retry-Attempt"))
				return
			}
			require.Error(t, r.err)
			t.Logf("the caller's error: %v", r.err)
			assert.ErrorIs(t, r.err, syscall.ECONNRESET, "the cause is lost")
			assert.ErrorContains(t, r.err, "not idempotent after 1 attempt(s)")
		})
	}
}

func TestFaultResetMidBody(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		status       int
		wantHits     int
		wantStatus   int
	}{
		{"a 200 cut short reaches the caller, who sees the break", http.MethodGet, http.StatusOK, 1, http.StatusOK},
		{"a 503 cut short is retried", http.MethodGet, http.StatusServiceUnavailable, 2, http.StatusOK},
		{"a POST's 503 cut short is retried: the server answered it", http.MethodPost, http.StatusServiceUnavailable, 2, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, func(n int, _ *http.Request, c net.Conn) bool {
				if n == 1 {
					// One write, so the whole prefix is queued at the
					// client before the RST.
					_, _ = io.WriteString(c, "HTTP/1.1 "+strconv.Itoa(tc.status)+" "+http.StatusText(tc.status)+
						"\r\nContent-Length: 1000\r\nRetry-After: 0\r\n\r\n"+strings.Repeat("x", 100))
					reset(c)
					return false
				}
				return writeReply(c, http.StatusOK, nil, okBody)
			})
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})
			req := newRequest(t, context.Background(), tc.method, srv.URL()+"/items", `{"n":1}`, "")

			r := await(t, goDo(newRawClient(t, h), req))

			require.Len(t, srv.seen(), tc.wantHits)
			require.NotNil(t, r.resp)
			assert.Equal(t, tc.wantStatus, r.resp.StatusCode)
			if tc.wantHits == 1 {
				require.Error(t, r.err, "a truncated body must not read as complete")
				assert.True(t, isReset(r.err), "reading the body: %v", r.err)
				return
			}
			require.NoError(t, r.err)
			assert.Equal(t, okBody, r.body)
		})
	}
}

func TestFaultResetAfterFullResponse(t *testing.T) {
	t.Run("a complete 200 is delivered whole, and the next request goes on a new connection", func(t *testing.T) {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			t.Run(method, func(t *testing.T) {
				srv := newRawServer(t, func(n int, _ *http.Request, c net.Conn) bool {
					if n == 1 {
						writeReply(c, http.StatusOK, nil, "first") // one write, queued before the RST
						reset(c)
						return false
					}
					return writeReply(c, http.StatusOK, nil, okBody)
				})
				h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})
				base, conns := trackedTransport()
				client := newRawClientWith(t, base, h)

				r := await(t, goDo(client, newRequest(t, context.Background(), method, srv.URL()+"/items", `{"n":1}`, "")))
				require.NoError(t, r.err)
				assert.Equal(t, "first", r.body)

				conns.waitClosed(t, 1) // the transport noticed the reset
				r = await(t, goDo(client, newRequest(t, context.Background(), method, srv.URL()+"/items", `{"n":2}`, "")))
				require.NoError(t, r.err)
				assert.Equal(t, okBody, r.body)
				assert.Len(t, srv.seen(), 2, "each request sent once")
				assert.EqualValues(t, 2, srv.accepted.Load())
				assert.Zero(t, h.Stats().Retries)
			})
		}
	})

	t.Run("a complete 503 of a GET is retried on a new connection", func(t *testing.T) {
		srv := newRawServer(t, func(n int, _ *http.Request, c net.Conn) bool {
			if n == 1 {
				writeReply(c, http.StatusServiceUnavailable, http.Header{"Retry-After": {"0"}}, "busy")
				reset(c)
				return false
			}
			return writeReply(c, http.StatusOK, nil, okBody)
		})
		h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})

		r := await(t, goDo(newRawClient(t, h), newRequest(t, context.Background(), http.MethodGet, srv.URL()+"/items", "", "")))

		require.NoError(t, r.err)
		assert.Equal(t, okBody, r.body)
		assert.Len(t, srv.seen(), 2)
		assert.EqualValues(t, 2, srv.accepted.Load(), "the reset connection is not reused")
	})

	// The retry of a POST races with the transport's discovery of the
	// reset: if the retry is written to the dead connection before the RST
	// is seen, nobody can tell whether the server read it, and the POST
	// must not be sent a third time. Either outcome is correct; a POST
	// answered twice, or an error that hides the reset, is not.
	t.Run("a complete 503 of a POST is retried at most once more", func(t *testing.T) {
		var retried, refused int
		defer func() {
			t.Logf("retried on a new connection %d times, refused after the reset %d times", retried, refused)
		}()
		for i := 0; i < 20; i++ {
			var answered atomic.Int32
			srv := newRawServer(t, func(n int, _ *http.Request, c net.Conn) bool {
				if n == 1 {
					writeReply(c, http.StatusServiceUnavailable, http.Header{"Retry-After": {"0"}}, "busy")
					reset(c)
					return false
				}
				answered.Add(1)
				return writeReply(c, http.StatusOK, nil, okBody)
			})
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})

			r := await(t, goDo(newRawClient(t, h), newRequest(t, context.Background(), http.MethodPost, srv.URL()+"/items", `{"n":1}`, "")))

			if r.err != nil {
				assert.True(t, errors.Is(r.err, syscall.ECONNRESET) || errors.Is(r.err, syscall.EPIPE), "the cause is lost: %v", r.err)
				assert.ErrorContains(t, r.err, "not idempotent after 2 attempt(s)")
				assert.Zero(t, answered.Load())
				refused++
				continue
			}
			retried++
			assert.Equal(t, okBody, r.body)
			assert.EqualValues(t, 1, answered.Load(), "the POST was answered once")
			for _, s := range srv.seen() {
				assert.Equal(t, `{"n":1}`, string(s.Body))
			}
		}
	})
}

func TestFaultHungServer(t *testing.T) {
	hang := func(_ int, _ *http.Request, c net.Conn) bool {
		_, _ = io.Copy(io.Discard, c) // until the client gives up
		return false
	}

	t.Run("AttemptTimeout ends each attempt and the next one starts", func(t *testing.T) {
		srv := newRawServer(t, hang)
		// A real timer: the transport must really abandon the attempt.
		h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 2, AttemptTimeout: 30 * time.Millisecond})

		r := await(t, goDo(newRawClient(t, h), newRequest(t, context.Background(), http.MethodGet, srv.URL()+"/items", "", "")))

		require.ErrorIs(t, r.err, middleware.ErrAttemptTimeout)
		assert.ErrorContains(t, r.err, "max retries after 3 attempt(s)")
		assert.Len(t, srv.seen(), 3)
		assert.Equal(t, middleware.Stats{Requests: 1, Attempts: 3, Retries: 2}, h.Stats())
	})

	t.Run("a POST that timed out is not sent again", func(t *testing.T) {
		srv := newRawServer(t, hang)
		h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 2, AttemptTimeout: 30 * time.Millisecond})

		r := await(t, goDo(newRawClient(t, h), newRequest(t, context.Background(), http.MethodPost, srv.URL()+"/items", `{"n":1}`, "")))

		require.ErrorIs(t, r.err, middleware.ErrAttemptTimeout)
		assert.ErrorContains(t, r.err, "not idempotent after 1 attempt(s)")
		assert.Len(t, srv.seen(), 1)
	})

	t.Run("the context's deadline wins over AttemptTimeout", func(t *testing.T) {
		srv := newRawServer(t, hang)
		clk := newClock()
		h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 10, AttemptTimeout: time.Second, Clock: clk})
		ctx := newManualCtx()
		done := goDo(newRawClient(t, h), newRequest(t, ctx, http.MethodGet, srv.URL()+"/items", "", ""))

		srv.waitRequest(t, 1)
		clk.Advance(time.Second) // attempt 1 times out
		srv.waitRequest(t, 2)    // attempt 2 starts at once
		ctx.expire()             // and the deadline passes during it
		r := await(t, done)

		require.ErrorIs(t, r.err, context.DeadlineExceeded)
		assert.NotErrorIs(t, r.err, middleware.ErrAttemptTimeout)
		assert.ErrorContains(t, r.err, "canceled after 2 attempt(s)")
		assert.Len(t, srv.seen(), 2, "no attempt after the deadline")
		assert.Empty(t, clk.Pending(), "the attempt timer was stopped")
	})
}

// bodyCounter is a middleware that counts the bytes read from the bodies
// of 429 responses on their way up the pipeline.
type bodyCounter struct{ n atomic.Int64 }

func (b *bodyCounter) Intercept(p nethttplibrary.Pipeline, i int, req *http.Request) (*http.Response, error) {
	resp, err := p.Next(req, i)
	if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		resp.Body = &countingReadCloser{ReadCloser: resp.Body, n: &b.n}
	}
	return resp, err
}

type countingReadCloser struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingReadCloser) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingServer starts an httptest server that counts the connections
// it accepts.
func countingServer(t *testing.T, h http.HandlerFunc, useTLS bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	if useTLS {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return ts, &conns
}

func TestFaultThrottleWithLargeBody(t *testing.T) {
	const drainLimit = 64 << 10 // the handler's bound on draining
	for _, tc := range []struct {
		name      string
		size      int
		wantRead  int64
		wantConns int32
	}{
		{"a small body is drained and the connection reused", 1 << 10, 1 << 10, 1},
		{"an 8 MiB body is drained no further than the bound", 8 << 20, drainLimit, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			ts, conns := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
				if hits.Add(1) == 1 {
					w.Header().Set("Retry-After", "0")
					w.Header().Set("Content-Length", strconv.Itoa(tc.size))
					w.WriteHeader(http.StatusTooManyRequests)
					_, _ = w.Write(bytes.Repeat([]byte("t"), tc.size)) // fails once the client hangs up
					return
				}
				_, _ = io.WriteString(w, okBody)
			}, false)
			counter := &bodyCounter{}
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})

			r := await(t, goDo(newRawClient(t, h, counter), newRequest(t, context.Background(), http.MethodGet, ts.URL, "", "")))

			require.NoError(t, r.err)
			assert.Equal(t, okBody, r.body)
			assert.EqualValues(t, 2, hits.Load())
			assert.Equal(t, tc.wantRead, counter.n.Load(), "bytes of the 429 body read")
			assert.Equal(t, tc.wantConns, conns.Load(), "connections opened")
		})
	}
}

func TestFaultTLSHandshakeFailureIsNotRetried(t *testing.T) {
	var hits atomic.Int32
	ts, conns := countingServer(t, func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }, true)
	h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 5})
	// The client's transport does not trust the test server's certificate.
	r := await(t, goDo(newRawClient(t, h), newRequest(t, context.Background(), http.MethodGet, ts.URL, "", "")))

	require.Error(t, r.err)
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, r.err, &unknown)
	var verify *tls.CertificateVerificationError
	assert.ErrorAs(t, r.err, &verify)
	assert.ErrorContains(t, r.err, "permanent error after 1 attempt(s)")
	assert.Zero(t, hits.Load())
	assert.EqualValues(t, 1, conns.Load(), "one handshake, no retry")
	assert.Equal(t, int64(1), h.Stats().Attempts)
}

func TestFaultRedirectLoopWithRetry(t *testing.T) {
	for _, tc := range []struct {
		name         string
		retryOutside bool
		path         string
		wantStatus   int
		wantPaths    []string
		wantAttempts int64
	}{
		{"loop, retry outside redirect", true, "/a", http.StatusFound, []string{"/a", "/b", "/a", "/b", "/a", "/b"}, 1},
		{"loop, retry inside redirect", false, "/a", http.StatusFound, []string{"/a", "/b", "/a", "/b", "/a", "/b"}, 6},
		{"throttled target, retry outside redirect", true, "/c", http.StatusOK, []string{"/c", "/d", "/c", "/d"}, 2},
		{"throttled target, retry inside redirect", false, "/c", http.StatusOK, []string{"/c", "/d", "/d"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			ts, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
				switch n := rec.add(r); r.URL.Path {
				case "/a":
					w.Header().Set("Location", "/b")
					w.WriteHeader(http.StatusFound)
				case "/b":
					w.Header().Set("Location", "/a")
					w.WriteHeader(http.StatusFound)
				case "/c":
					w.Header().Set("Location", "/d")
					w.WriteHeader(http.StatusFound)
				case "/d":
					if n == 2 {
						w.Header().Set("Retry-After", "0")
						w.WriteHeader(http.StatusTooManyRequests)
						return
					}
					_, _ = io.WriteString(w, okBody)
				}
			}, false)
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 3})
			mws := []nethttplibrary.Middleware{nethttplibrary.NewRedirectHandler(), h}
			if tc.retryOutside {
				mws[0], mws[1] = mws[1], mws[0]
			}
			// The client must not follow redirects itself.
			client := newRawClient(t, mws...)
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

			r := await(t, goDo(client, newRequest(t, context.Background(), http.MethodGet, ts.URL+tc.path, "", "")))

			require.NoError(t, r.err)
			assert.Equal(t, tc.wantStatus, r.resp.StatusCode)
			var paths []string
			for _, s := range rec.seen() {
				paths = append(paths, s.Path)
			}
			assert.Equal(t, tc.wantPaths, paths)
			assert.Equal(t, tc.wantAttempts, h.Stats().Attempts)
		})
	}
}

func TestFaultRetryAfterZeroForever(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			var rec recorder
			ts, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
				rec.add(r)
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, "throttled")
			}, false)
			clk := newClock()
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: fixedDelays, MaxRetries: 3, Clock: clk,
				Queue: options.QueueOptions{Disabled: true}})
			done := goDo(newRawClient(t, h), newRequest(t, context.Background(), method, ts.URL, `{"n":1}`, ""))

			// Retry-After: 0 means now (the default backoff defers to the
			// server's delay), and MaxRetries ends it: no wait is started.
			r := await(t, done)

			require.NoError(t, r.err, "the last response is returned as is")
			assert.Equal(t, http.StatusTooManyRequests, r.resp.StatusCode)
			assert.Equal(t, "throttled", r.body)
			hits := rec.seen()
			require.Len(t, hits, 4)
			for i, s := range hits {
				want := ""
				if i > 0 {
					want = strconv.Itoa(i)
				}
				assert.Equal(t, want, s.Header.Get("Retry-Attempt"))
				if method == http.MethodPost {
					assert.Equal(t, `{"n":1}`, string(s.Body))
				}
			}
			assert.Empty(t, clk.Pending())
		})
	}
}

func TestFaultRetryAfterFarFuture(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter string
		opts       options.RetryHandlerOptions
	}{
		{"a day in delta-seconds passes MaxElapsed", "86400", options.RetryHandlerOptions{}},
		{"a date two days ahead passes MaxElapsed", fuzzNow.Add(48 * time.Hour).Format(http.TimeFormat), options.RetryHandlerOptions{}},
		{"an overflowing delay passes MaxElapsed", "99999999999999999999999", options.RetryHandlerOptions{}},
		{"a minute passes RetriesTimeLimit", "60", options.RetryHandlerOptions{RetriesTimeLimit: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			ts, _ := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
				hits.Add(1)
				w.Header().Set("Retry-After", tc.retryAfter)
				w.WriteHeader(http.StatusTooManyRequests)
			}, false)
			clk := newClock()
			opts := tc.opts
			opts.Clock = clk
			h := newFaultHandler(t, opts)

			// The clock is never advanced: the call can only return if it
			// does not wait.
			r := await(t, goDo(newRawClient(t, h), newRequest(t, context.Background(), http.MethodGet, ts.URL, "", "")))

			require.NoError(t, r.err)
			assert.Equal(t, http.StatusTooManyRequests, r.resp.StatusCode)
			assert.Equal(t, tc.retryAfter, r.resp.Header.Get("Retry-After"), "the caller sees the server's time")
			assert.EqualValues(t, 1, hits.Load())
			assert.Empty(t, clk.Pending(), "no timer was started")
		})
	}
}

// recorder keeps the requests an httptest handler saw.
type recorder struct {
	mu   sync.Mutex
	reqs []seenRequest
}

// add records r, reading its body, and returns its number from 1.
func (r *recorder) add(req *http.Request) int {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, seenRequest{req.Method, req.URL.Path, req.Header.Clone(), b})
	return len(r.reqs)
}

func (r *recorder) seen() []seenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seenRequest(nil), r.reqs...)
}
