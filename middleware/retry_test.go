package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

func TestRetryHandler_StatusCodes(t *testing.T) {
	tests := []struct {
		name     string
		codes    []int
		status   int
		attempts int
	}{
		{"429 retried", nil, 429, 2},
		{"503 retried", nil, 503, 2},
		{"504 retried", nil, 504, 2},
		{"400 final", nil, 400, 1},
		{"404 final", nil, 404, 1},
		{"500 final", nil, 500, 1},
		{"501 final", nil, 501, 1},
		{"505 final", nil, 505, 1},
		{"custom list retries 500", []int{500}, 500, 2},
		{"custom list drops 429", []int{500}, 429, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, reply{status: tt.status, body: "failed"})
			h, clk := newHandler(t, options.RetryHandlerOptions{StatusCodes: tt.codes, Policy: fixedPolicy(3, time.Second)})
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			res, _ := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
			if tt.attempts == 1 {
				assert.Equal(t, tt.status, res.resp.StatusCode, "a final response reaches the caller unchanged")
				assert.Equal(t, "failed", res.body)
			} else {
				assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			}
		})
	}
}

func TestRetryHandler_RetryAttemptHeader(t *testing.T) {
	srv := newScripted(t, throttled("1"), throttled("1"), throttled("1"))
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Retry-Attempt", "stale")
	req.Header.Set("X-Custom", "kept")
	res, waits := do(clk, newClient(t, h), req)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	require.Len(t, waits, 3)
	got := srv.attempts()
	require.Len(t, got, 4)
	assert.Equal(t, []string{"stale"}, got[0].header.Values("Retry-Attempt"), "the first attempt is the caller's request as it is")
	for i := 1; i < 4; i++ {
		assert.Equal(t, []string{string(rune('0' + i))}, got[i].header.Values("Retry-Attempt"), "retry %d", i)
		assert.Equal(t, "kept", got[i].header.Get("X-Custom"))
	}
	assert.Equal(t, http.Header{"Retry-Attempt": {"stale"}, "X-Custom": {"kept"}}, req.Header, "the caller's headers are never changed")
}

// seekOnly hides every method of its reader but Read and Seek, as
// kiota-http-go's NopCloser does.
type seekOnly struct{ io.ReadSeeker }

func (seekOnly) Close() error { return nil }

// forwardOnly is a body that can only be read once.
type forwardOnly struct{ r io.Reader }

func (f *forwardOnly) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *forwardOnly) Close() error               { return nil }

func TestRetryHandler_BodiesReplayed(t *testing.T) {
	const payload = `{"displayName":"Ada","mail":"ada@example.com"}`
	tests := []struct {
		name     string
		build    func(url string) *http.Request
		attempts int
	}{
		{"no body", func(u string) *http.Request { r, _ := http.NewRequest(http.MethodPost, u, nil); return r }, 3},
		{"http.NoBody", func(u string) *http.Request { r, _ := http.NewRequest(http.MethodPost, u, http.NoBody); return r }, 3},
		{"bytes.Reader", func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader([]byte(payload)))
			return r
		}, 3},
		{"bytes.Buffer", func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPatch, u, bytes.NewBufferString(payload))
			return r
		}, 3},
		{"strings.Reader", func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(payload))
			return r
		}, 3},
		{"seeker without GetBody, as the Kiota adapter sends", func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, nil)
			r.Body = seekOnly{strings.NewReader(payload)}
			r.ContentLength = int64(len(payload))
			return r
		}, 3},
		{"seeker positioned past its start", func(u string) *http.Request {
			sr := strings.NewReader("ignored-prefix" + payload)
			_, _ = sr.Seek(int64(len("ignored-prefix")), io.SeekStart)
			r, _ := http.NewRequest(http.MethodPost, u, nil)
			r.Body = seekOnly{sr}
			r.ContentLength = int64(len(payload))
			return r
		}, 3},
		{"forward-only body is sent once", func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, nil)
			r.Body = &forwardOnly{strings.NewReader(payload)}
			r.ContentLength = int64(len(payload))
			return r
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, throttled("1"), throttled("2"))
			h, clk := newHandler(t, options.RetryHandlerOptions{})
			req := tt.build(srv.URL)
			res, _ := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			got := srv.attempts()
			require.Len(t, got, tt.attempts)
			for i, a := range got {
				assert.Equal(t, got[0].body, a.body, "attempt %d body", i+1)
				assert.Equal(t, got[0].length, a.length, "attempt %d Content-Length", i+1)
			}
			if req.Body != nil && req.Body != http.NoBody {
				assert.Equal(t, payload, got[0].body)
			}
			if tt.attempts == 1 {
				assert.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode, "the first response is returned")
			}
		})
	}
}

// TestRetryHandler_SeekableBodyKeepsConnection sends seekable bodies
// without GetBody, as the Kiota adapter does, over one keep-alive
// connection. net/http reads such a body on past its length to check that
// it ends there, possibly after the response came; that read must not fail,
// or the transport reports a broken write and drops the connection.
func TestRetryHandler_SeekableBodyKeepsConnection(t *testing.T) {
	const payload = `{"displayName":"Ada"}`
	srv := newScripted(t)
	h, _ := newHandler(t, options.RetryHandlerOptions{})
	client := newClient(t, h)
	var (
		mu        sync.Mutex // WroteRequest runs on the transport's goroutine
		writeErrs []error
		reused    atomic.Int64
	)
	trace := &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if i.Reused {
				reused.Add(1)
			}
		},
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err != nil {
				mu.Lock()
				writeErrs = append(writeErrs, i.Err)
				mu.Unlock()
			}
		},
	}
	ctx := httptrace.WithClientTrace(context.Background(), trace)
	const requests = 200
	for range requests {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		req.Body = nethttplibrary.NopCloser(strings.NewReader(payload))
		req.ContentLength = int64(len(payload))
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	mu.Lock()
	require.Empty(t, writeErrs, "failed request writes")
	mu.Unlock()
	got := srv.attempts()
	require.Len(t, got, requests)
	for i, a := range got {
		require.Equal(t, payload, a.body, "request %d", i+1)
	}
	// A connection is dropped only when its write failed; allow for the
	// transport's own 50 ms wait for the write's result on a busy machine.
	assert.Greater(t, reused.Load(), int64(requests*9/10), "requests on a reused connection")
}

func TestRetryHandler_RetryAfter(t *testing.T) {
	now := epoch
	tests := []struct {
		name   string
		header map[string]string
		policy options.Policy
		want   []time.Duration
	}{
		{"delta-seconds", map[string]string{"Retry-After": "7"}, nil, clocktest.Seconds(7)},
		{"IMF-fixdate", map[string]string{"Retry-After": now.Add(9 * time.Second).Format(http.TimeFormat)}, nil, clocktest.Seconds(9)},
		{"RFC 850 date", map[string]string{"Retry-After": now.Add(11 * time.Second).Format(time.RFC850)}, nil, clocktest.Seconds(11)},
		{"asctime date", map[string]string{"Retry-After": now.Add(13 * time.Second).Format(time.ANSIC)}, nil, clocktest.Seconds(13)},
		{"past date retries at once", map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, nil, nil},
		{"retry-after-ms", map[string]string{"Retry-After-Ms": "1500"}, nil, clocktest.Seconds(1.5)},
		{"x-ms-retry-after-ms", map[string]string{"X-Ms-Retry-After-Ms": "250"}, nil, clocktest.Seconds(0.25)},
		{"longest named wait wins", map[string]string{"Retry-After": "2", "Retry-After-Ms": "4000"}, nil, clocktest.Seconds(4)},
		{"garbage falls back to the policy", map[string]string{"Retry-After": "soon"}, fixedPolicy(1, 5*time.Second), clocktest.Seconds(5)},
		{"negative falls back to the policy", map[string]string{"Retry-After": "-3"}, fixedPolicy(1, 5*time.Second), clocktest.Seconds(5)},
		{"policy longer than Retry-After", map[string]string{"Retry-After": "1"}, fixedPolicy(1, 5*time.Second), clocktest.Seconds(5)},
		{"Retry-After is never undercut", map[string]string{"Retry-After": "30"}, fixedPolicy(1, 5*time.Second), clocktest.Seconds(30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, reply{status: 503, header: tt.header})
			policy := tt.policy
			if policy == nil {
				policy = fixedPolicy(1, 0) // zero interval: only the server's time counts
			}
			// The queue off: these are the waits the answer names; the
			// pace the queue adds after a throttle is the throttle
			// package's to test.
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: policy, Queue: options.QueueOptions{Disabled: true}})
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			res, waits := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, tt.want, waits)
			assert.Len(t, srv.attempts(), 2)
		})
	}
}

func TestRetryHandler_DefaultBackoff(t *testing.T) {
	srv := newScripted(t, reply{status: 503}, reply{status: 503}, reply{status: 503}, reply{status: 503})
	h, clk := newHandler(t, options.RetryHandlerOptions{Policy: options.Exponential{Random: fixedHalf}})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	res, waits := do(clk, newClient(t, h), req)
	require.NoError(t, res.err)
	// min(180 s, 3 s·n²)·(1 − 0.2·0.5)
	assert.Equal(t, clocktest.Seconds(2.7, 10.8, 24.3, 43.2), waits)
}

func TestRetryHandler_DefaultOptionsUseJitteredSchedule(t *testing.T) {
	srv := newScripted(t, reply{status: 503}, reply{status: 503}, reply{status: 503})
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	_, waits := do(clk, newClient(t, h), req)
	require.Len(t, waits, 3)
	for i, w := range waits {
		full := time.Duration((i+1)*(i+1)) * 3 * time.Second
		assert.LessOrEqual(t, w, full, "retry %d", i+1)
		assert.GreaterOrEqual(t, w, full*8/10, "retry %d", i+1)
	}
}

func TestRetryHandler_Limits(t *testing.T) {
	fourFailures := []reply{throttled("10"), throttled("10"), throttled("10"), throttled("10")}
	tests := []struct {
		name     string
		opts     options.RetryHandlerOptions
		replies  []reply
		attempts int
		waits    []time.Duration
		status   int
	}{
		{"MaxRetries caps retries", options.RetryHandlerOptions{MaxRetries: 2, Policy: fixedPolicy(9, time.Second)}, fourFailures, 3, clocktest.Seconds(10, 10), 429},
		{"negative MaxRetries never retries", options.RetryHandlerOptions{MaxRetries: -1}, fourFailures, 1, nil, 429},
		{"MaxElapsed returns at once", options.RetryHandlerOptions{MaxElapsed: 25 * time.Second, Policy: fixedPolicy(9, time.Second)}, fourFailures, 3, clocktest.Seconds(10, 10), 429},
		{"Retry-After beyond MaxElapsed is not waited for", options.RetryHandlerOptions{MaxElapsed: time.Minute}, []reply{throttled("3600")}, 1, nil, 429},
		{"RetriesTimeLimit counts Retry-After", options.RetryHandlerOptions{RetriesTimeLimit: 15 * time.Second}, fourFailures, 2, clocktest.Seconds(10), 429},
		{"RetriesTimeLimit applies to 503", options.RetryHandlerOptions{RetriesTimeLimit: 5 * time.Second, Policy: fixedPolicy(9, 2*time.Second)},
			[]reply{{status: 503}, {status: 503}, {status: 503}, {status: 503}}, 3, clocktest.Seconds(2, 2), 503},
		{"RetriesTimeLimit applies to 504", options.RetryHandlerOptions{RetriesTimeLimit: 5 * time.Second, Policy: fixedPolicy(9, 2*time.Second)},
			[]reply{{status: 504}, {status: 504}, {status: 504}, {status: 504}}, 3, clocktest.Seconds(2, 2), 504},
		{"policy count governs when MaxRetries is unset", options.RetryHandlerOptions{Policy: fixedPolicy(1, time.Second)}, fourFailures, 2, clocktest.Seconds(10), 429},
		{"MaxRetries caps a policy", options.RetryHandlerOptions{MaxRetries: 1, Policy: fixedPolicy(5, time.Second)}, fourFailures, 2, clocktest.Seconds(10), 429},
		{"ShouldRetry vetoes", options.RetryHandlerOptions{ShouldRetry: func(a options.Attempt) bool { return a.Retry < 2 }}, fourFailures, 2, clocktest.Seconds(10), 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.replies...)
			h, clk := newHandler(t, tt.opts)
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			res, waits := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
			assert.Equal(t, tt.waits, waits)
			assert.Equal(t, tt.status, res.resp.StatusCode)
			if tt.status == 429 {
				assert.Equal(t, "slow down", res.body, "the last failed response reaches the caller intact")
			}
		})
	}
}

func TestRetryHandler_CancelDuringWait(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, context.Canceled},
		{"cause", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(errShutdown) }
		}, errShutdown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, throttled("60"))
			h, clk := newHandler(t, options.RetryHandlerOptions{})
			ctx, cancel := tt.ctx()
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			done := make(chan error, 1)
			go func() {
				resp, err := newClient(t, h).Do(req)
				if resp != nil {
					resp.Body.Close()
				}
				done <- err
			}()
			assert.Equal(t, 60*time.Second, <-clk.Created())
			cancel()
			err := <-done
			require.ErrorIs(t, err, tt.want)
			assert.Empty(t, clk.Pending(), "the wait's timer is stopped")
			assert.Len(t, srv.attempts(), 1)
		})
	}
}

// A retry that would start after the request's deadline is not waited for:
// the caller gets the response in hand rather than a deadline error.
func TestRetryHandler_Deadline(t *testing.T) {
	tests := []struct {
		name     string
		timeout  time.Duration // of the request's context
		client   time.Duration // http.Client.Timeout
		backoff  time.Duration // the policy's delay
		replies  []reply
		attempts int
		waits    []time.Duration
		status   int
	}{
		{"Retry-After past the context's deadline", 5 * time.Minute, 0, time.Second, []reply{throttled("600")}, 1, nil, 429},
		{"Retry-After past the client's Timeout", 0, 5 * time.Minute, time.Second, []reply{throttled("600")}, 1, nil, 429},
		{"backoff past the deadline", 5 * time.Minute, 0, 10 * time.Minute, []reply{{status: 503, body: "slow down"}}, 1, nil, 503},
		{"a retry within the deadline is made", 5 * time.Minute, 0, time.Second, []reply{throttled("60")}, 2, clocktest.Seconds(60), 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.replies...)
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(3, tt.backoff)})
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			client := newClient(t, h)
			client.Timeout = tt.client
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			res, waits := do(clk, client, req)
			require.NoError(t, res.err)
			assert.Equal(t, tt.status, res.resp.StatusCode)
			assert.Len(t, srv.attempts(), tt.attempts)
			assert.Equal(t, tt.waits, waits)
			if tt.status != 200 {
				assert.Equal(t, "slow down", res.body, "the last response reaches the caller whole")
			}
		})
	}
}

// A retry of a failure on a host the queue paces keeps its whole deadline
// after the outage gate has waited out its delay: the deadline is read
// against the clock when the queue takes the retry, not when the delay
// began (which once refused every retry whose delay was more than half
// the time left, with the answer in hand). Run in a bubble, where the
// context's deadline and the handler's clock keep the same time.
func TestRetryHandler_RetryAfterFailureKeepsItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		statuses := []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK}
		var sent []time.Duration
		start := time.Now()
		rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent = append(sent, time.Since(start))
			st := statuses[min(len(sent), len(statuses))-1]
			h := http.Header{}
			if st == http.StatusTooManyRequests {
				h.Set("Retry-After", "1")
			}
			return &http.Response{StatusCode: st, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
		})
		// 10 s for a failure, the server's wait for a throttle.
		policy := options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			if a.HasRetryAfter {
				return a.RetryAfter, true
			}
			return 10 * time.Second, a.Retry <= 3
		})
		h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: policy})
		require.NoError(t, err)
		// The 503's retry is due at 11 s, 7 s before the deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 18*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://graph.test/v1.0/me", nil)

		resp, err := h.Intercept(directPipeline{rt}, 0, req)

		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, []time.Duration{0, time.Second, 11 * time.Second}, sent)
	})
}

// A retry the gate charged to the host's retry budget and the queue then
// held past its limits is never sent, and its token comes back: retries
// the queue refuses do not spend the budget of the host's other failures.
func TestRetryHandler_UnsentRetryKeepsTheBudget(t *testing.T) {
	rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		st, h := http.StatusOK, http.Header{}
		switch {
		case req.URL.Path == "/held" && req.Header.Get("Retry-Attempt") == "" && req.URL.RawQuery == "first":
			st = http.StatusTooManyRequests
			h.Set("Retry-After", "600")
		case req.URL.Path == "/held":
			st = http.StatusInternalServerError // a failure, from a host that is up
		case req.URL.Path == "/failing" && req.Header.Get("Retry-Attempt") == "":
			st = http.StatusServiceUnavailable
		}
		return &http.Response{StatusCode: st, Header: h, Body: http.NoBody, Request: req}, nil
	})
	h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(3, time.Second), MaxElapsed: time.Minute,
		StatusCodes: []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable}})
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(rt, h)}
	send := func(path string, opts ...options.RetryHandlerOptions) int {
		ctx := context.Background()
		if len(opts) > 0 {
			ctx = context.WithValue(ctx, options.Key(), &opts[0])
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://graph.test"+path, nil)
		res, _ := do(clk, client, req)
		require.NoError(t, res.err)
		return res.resp.StatusCode
	}
	// The server holds /held for 10 minutes; /held?first's own retry is off.
	require.Equal(t, http.StatusTooManyRequests, send("/held?first", options.RetryHandlerOptions{MaxRetries: -1}))
	// Each request to /held is sent (a first attempt the queue would hold
	// past its limits goes), fails, and its retry is held past a minute:
	// more retries than the budget's reserve and their halves hold.
	for range 30 {
		require.Equal(t, http.StatusInternalServerError, send("/held"))
	}

	assert.Equal(t, http.StatusOK, send("/failing"), "the failure is retried")
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// A throttle that would hold a retry past the deadline gives the caller
// its own last response at once.
func TestRetryHandler_HeldPastDeadlineReturnsLastResponse(t *testing.T) {
	srv := newScripted(t, throttled("600"), reply{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "1"}, body: "own"})
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	client := newClient(t, h)
	optOut := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1})
	first, _ := http.NewRequestWithContext(optOut, http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, _ := do(clk, client, first)
	require.NoError(t, res.err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	second, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, waits := do(clk, client, second)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)
	assert.Equal(t, "own", res.body)
	assert.Empty(t, waits, "neither the first attempt nor the retry is held into the deadline")
	assert.Len(t, srv.attempts(), 2)
}

func TestRetryHandler_CanceledBeforeFirstAttempt(t *testing.T) {
	srv := newScripted(t)
	h, _ := newHandler(t, options.RetryHandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := h.Intercept(directPipeline{http.DefaultTransport}, 0, req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, srv.attempts())
}

// directPipeline is the end of a pipeline: it sends to a RoundTripper.
type directPipeline struct{ rt http.RoundTripper }

func (p directPipeline) Next(req *http.Request, _ int) (*http.Response, error) {
	return p.rt.RoundTrip(req)
}

func TestNewRetryHandler_RejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts options.RetryHandlerOptions
		want string
	}{
		{"negative InitialDelay", options.RetryHandlerOptions{InitialDelay: -time.Second}, "InitialDelay = -1s"},
		{"negative MaxDelay", options.RetryHandlerOptions{MaxDelay: -1}, "MaxDelay = -1ns"},
		{"negative MaxElapsed", options.RetryHandlerOptions{MaxElapsed: -time.Minute}, "MaxElapsed = -1m0s"},
		{"negative RetriesTimeLimit", options.RetryHandlerOptions{RetriesTimeLimit: -time.Second}, "RetriesTimeLimit = -1s"},
		{"negative AttemptTimeout", options.RetryHandlerOptions{AttemptTimeout: -time.Second}, "AttemptTimeout = -1s"},
		{"InitialDelay above MaxDelay", options.RetryHandlerOptions{InitialDelay: time.Minute, MaxDelay: time.Second}, "InitialDelay = 1m0s"},
		{"bad status code", options.RetryHandlerOptions{StatusCodes: []int{429, 42}}, "StatusCodes = 42"},
		{"invalid policy", options.RetryHandlerOptions{Policy: options.Exponential{Retries: -2}}, "Exponential.Retries = -2"},
		{"negative Outage.MaxProbeInterval", options.RetryHandlerOptions{Outage: options.OutageOptions{MaxProbeInterval: -time.Second}}, "Outage.MaxProbeInterval = -1s"},
		{"unknown HandBack", options.RetryHandlerOptions{HandBack: -1}, "HandBack = -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := middleware.NewRetryHandler(tt.opts)
			assert.Nil(t, h)
			require.ErrorIs(t, err, options.ErrInvalidOption)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), "NewRetryHandler")
		})
	}
}

func TestRetryHandler_PerRequestOptions(t *testing.T) {
	t.Run("replace the handler's options", func(t *testing.T) {
		srv := newScripted(t, throttled("1"), throttled("1"))
		h, clk := newHandler(t, options.RetryHandlerOptions{MaxRetries: 5})
		ctx := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		res, waits := do(clk, newClient(t, h), req)
		require.NoError(t, res.err)
		assert.Equal(t, 429, res.resp.StatusCode)
		assert.Empty(t, waits)
		assert.Len(t, srv.attempts(), 1)
	})
	t.Run("replace the handler's policy", func(t *testing.T) {
		srv := newScripted(t, reply{status: 503}, reply{status: 503}, reply{status: 503})
		h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(5, time.Second)})
		o := &options.RetryHandlerOptions{Policy: fixedPolicy(1, 7*time.Second)}
		req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), o.GetKey(), o), http.MethodGet, srv.URL, nil)
		res, waits := do(clk, newClient(t, h), req)
		require.NoError(t, res.err)
		assert.Equal(t, 503, res.resp.StatusCode)
		assert.Equal(t, clocktest.Seconds(7), waits)
		assert.Len(t, srv.attempts(), 2)
	})
	t.Run("an invalid one fails the request before sending", func(t *testing.T) {
		srv := newScripted(t)
		h, clk := newHandler(t, options.RetryHandlerOptions{})
		bad := &options.RetryHandlerOptions{MaxElapsed: -time.Second}
		ctx := context.WithValue(context.Background(), bad.GetKey(), bad)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		res, _ := do(clk, newClient(t, h), req)
		require.ErrorIs(t, res.err, options.ErrInvalidOption)
		assert.Contains(t, res.err.Error(), "MaxElapsed = -1s")
		assert.Empty(t, srv.attempts())
	})
}

func TestRetryHandler_TransportErrors(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		header   map[string]string
		attempts int
	}{
		{"GET is resent", http.MethodGet, nil, 3},
		{"PUT is resent", http.MethodPut, nil, 3},
		{"DELETE is resent", http.MethodDelete, nil, 3},
		{"POST is never sent twice", http.MethodPost, nil, 1},
		{"PATCH is never sent twice", http.MethodPatch, nil, 1},
		{"POST with Idempotency-Key is resent", http.MethodPost, map[string]string{"Idempotency-Key": "k1"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &failingTransport{failures: 10}
			h, clk := newHandler(t, options.RetryHandlerOptions{MaxRetries: 2, Policy: options.Exponential{Random: fixedHalf}})
			client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(rt, h)}
			req, _ := http.NewRequest(tt.method, "http://graph.test/v1.0/me", strings.NewReader("{}"))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			res, _ := do(clk, client, req)
			require.Error(t, res.err)
			assert.ErrorIs(t, res.err, errConnReset, "the transport error stays visible")
			assert.Equal(t, tt.attempts, rt.calls)
		})
	}
}

var errConnReset = errors.New("connection reset by peer")

// failingTransport fails its first failures calls, then answers 200.
type failingTransport struct {
	failures int
	calls    int
}

func (f *failingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.calls++
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	if f.calls <= f.failures {
		return nil, errConnReset
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

func TestRetryHandler_AttemptTimeout(t *testing.T) {
	hang := &hangingTransport{}
	h, clk := newHandler(t, options.RetryHandlerOptions{AttemptTimeout: 2 * time.Second, MaxRetries: 1, Policy: fixedPolicy(99, time.Second)})
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(hang, h)}
	req, _ := http.NewRequest(http.MethodGet, "http://graph.test/v1.0/me", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	clk.WaitForTimers(1) // the first attempt's timeout
	clk.Advance(2 * time.Second)
	assert.Equal(t, time.Second, <-clk.Created(), "the retry waits its backoff")
	clk.Advance(time.Second)
	clk.WaitForTimers(1) // the second attempt's timeout
	clk.Advance(2 * time.Second)
	err := <-done
	require.ErrorIs(t, err, middleware.ErrAttemptTimeout)
	assert.Contains(t, err.Error(), "after 2 attempt(s)")
	assert.Equal(t, int32(2), hang.calls.Load())
}

// hangingTransport never answers: it returns when the attempt's context ends.
type hangingTransport struct{ calls atomic.Int32 }

func (h *hangingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h.calls.Add(1)
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// closeCounter is a response body that records whether it was closed and
// how much of it was read.
type closeCounter struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeCounter) Close() error { c.closed.Store(true); return nil }

// bodiesTransport answers with the statuses given, recording every body.
type bodiesTransport struct {
	statuses []int
	size     int
	bodies   []*closeCounter
}

func (b *bodiesTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	status := http.StatusOK
	if len(b.statuses) > 0 {
		status, b.statuses = b.statuses[0], b.statuses[1:]
	}
	body := &closeCounter{Reader: strings.NewReader(strings.Repeat("x", b.size))}
	b.bodies = append(b.bodies, body)
	h := http.Header{}
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	return &http.Response{StatusCode: status, Header: h, Body: body, Request: req}, nil
}

func TestRetryHandler_DiscardedBodiesAreClosed(t *testing.T) {
	for _, size := range []int{0, 100, 1 << 20} { // empty, kept, too large to keep
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			rt := &bodiesTransport{statuses: []int{429, 429}, size: size}
			h, clk := newHandler(t, options.RetryHandlerOptions{})
			client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(rt, h)}
			req, _ := http.NewRequest(http.MethodGet, "http://graph.test/v1.0/me", nil)
			res, _ := do(clk, client, req)
			require.NoError(t, res.err)
			require.Len(t, rt.bodies, 3)
			for i, b := range rt.bodies {
				assert.True(t, b.closed.Load(), "body %d closed", i+1)
			}
			assert.Len(t, res.body, size, "the caller reads the last response whole")
		})
	}
}

func TestRetryHandler_CancelWhileHeldByQueue(t *testing.T) {
	srv := newScripted(t, throttled("60"))
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	client := newClient(t, h)

	// The first request is throttled for 60 s and, never retried, returns.
	off := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1})
	first, _ := http.NewRequestWithContext(off, http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, _ := do(clk, client, first)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)

	// A second request to the same URL is held by the queue until then.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	second, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1.0/me", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(second)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	assert.Equal(t, 60*time.Second, <-clk.Created(), "held until the throttle ends")
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.Len(t, srv.attempts(), 1, "the held request was never sent")
	assert.Empty(t, clk.Pending(), "its timer is stopped")
}

func TestRetryHandler_HeldPastMaxElapsed(t *testing.T) {
	srv := newScripted(t, throttled("60"), reply{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "1"}, body: "own"})
	h, clk := newHandler(t, options.RetryHandlerOptions{MaxElapsed: 10 * time.Second})
	client := newClient(t, h)

	// The first request throttles the path for 60 s; it opts out of retries.
	ctx := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1})
	first, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, _ := do(clk, client, first)
	require.NoError(t, res.err)

	// The second is sent at once (with no answer in hand, a hold past
	// MaxElapsed is not made) and is throttled for 1 s; its retry, which
	// the path's 60 s would hold past MaxElapsed, is not made: the answer
	// in hand is returned at once.
	second, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, waits := do(clk, client, second)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)
	assert.Equal(t, "own", res.body)
	assert.Empty(t, waits, "nothing waited for")
	assert.Len(t, srv.attempts(), 2)
}

// TestRetryHandler_ThrottleWithoutRetryAfterPacesItsURL checks that a 429
// without a usable Retry-After does not hold its URL for the delay the
// request's policy gives (a wait the server never asked for): the URL is
// a budget of its own, and the next request to it goes at its pace's
// first slot.
func TestRetryHandler_ThrottleWithoutRetryAfterPacesItsURL(t *testing.T) {
	for _, delay := range []time.Duration{2 * time.Second, 5 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			srv := newScripted(t, reply{status: http.StatusTooManyRequests}, reply{status: http.StatusOK, body: "ok"})
			h, clk := newHandler(t, options.RetryHandlerOptions{})
			client := newClient(t, h)

			// The first request is throttled without Retry-After and does
			// not retry; its policy would have waited delay.
			ctx := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1, Policy: fixedPolicy(10, delay)})
			first, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1.0/me", nil)
			res, _ := do(clk, client, first)
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)

			second, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/me", nil)
			res, waits := do(clk, client, second)
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			require.Len(t, waits, 1, "paced")
			assert.Less(t, waits[0], delay/4, "paced, not held for the policy's delay")
		})
	}
}
