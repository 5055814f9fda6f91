package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// refusingSeeker is a request body that reports its position but refuses
// to go back to it, as a stream that only pretends to seek does.
type refusingSeeker struct{ *strings.Reader }

func (s refusingSeeker) Seek(offset int64, whence int) (int64, error) {
	if offset == 0 && whence == io.SeekCurrent {
		return s.Reader.Seek(0, io.SeekCurrent)
	}
	return 0, errors.New("seek refused")
}

func (refusingSeeker) Close() error { return nil }

func TestRetryHandler_ReturnsLastResponseWhenRetryCannotBeMade(t *testing.T) {
	large := strings.Repeat("z", 20000) // longer than what is read into memory
	tests := []struct {
		name  string
		first reply
		// prepare adjusts the request; background is its context's parent.
		prepare func(req *http.Request) *http.Request
		opts    options.RetryHandlerOptions
	}{
		{name: "seek refused at the retry", first: reply{status: 503, body: "busy"},
			opts: options.RetryHandlerOptions{Policy: noWait},
			prepare: func(req *http.Request) *http.Request {
				req.Body, req.GetBody = refusingSeeker{strings.NewReader("{}")}, nil
				return req
			}},
		{name: "GetBody fails at the retry", first: reply{status: 503, body: "busy"},
			opts: options.RetryHandlerOptions{Policy: noWait},
			prepare: func(req *http.Request) *http.Request {
				req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
				return req
			}},
		{name: "context deadline before the server's time", first: throttled("7200"),
			prepare: func(req *http.Request) *http.Request {
				ctx, cancel := context.WithTimeout(req.Context(), time.Hour)
				t.Cleanup(cancel)
				return req.WithContext(ctx)
			}},
		{name: "a long body is returned whole when the deadline stops the retry",
			first: reply{status: 503, header: map[string]string{"Retry-After": "7200"}, body: large},
			prepare: func(req *http.Request) *http.Request {
				ctx, cancel := context.WithTimeout(req.Context(), time.Hour)
				t.Cleanup(cancel)
				return req.WithContext(ctx)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.first)
			h, clk := newHandler(t, tt.opts)
			req, err := http.NewRequest(http.MethodPut, srv.URL+"/v1.0/me", strings.NewReader("{}"))
			require.NoError(t, err)
			res, waits := do(clk, newClient(t, h), tt.prepare(req))
			require.NoError(t, res.err)
			assert.Equal(t, tt.first.status, res.resp.StatusCode)
			assert.Equal(t, tt.first.body, res.body, "the last response, whole")
			assert.Empty(t, waits)
			assert.Len(t, srv.attempts(), 1)
		})
	}
}

func TestRetryHandler_HeldPastMaxElapsedReturnsLongResponseWhole(t *testing.T) {
	own := strings.Repeat("o", 20000)
	srv := newScripted(t, throttled("60"), reply{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "1"}, body: own})
	h, clk := newHandler(t, options.RetryHandlerOptions{MaxElapsed: 10 * time.Second})
	client := newClient(t, h)

	// The first request throttles the path for 60 s and is not retried.
	ctx := context.WithValue(context.Background(), options.Key(), &options.RetryHandlerOptions{MaxRetries: -1})
	first, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, _ := do(clk, client, first)
	require.NoError(t, res.err)

	// The second's retry would be held past MaxElapsed.
	second, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/me", nil)
	res, _ = do(clk, client, second)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)
	assert.Equal(t, own, res.body)
}

// classifying is a policy that classifies attempts with a function.
type classifying struct {
	options.Policy
	retryable func(options.Attempt) (bool, bool)
}

func (c classifying) Retryable(a options.Attempt) (bool, bool) { return c.retryable(a) }

func TestRetryHandler_PanickingCallbackLeavesNothingOpen(t *testing.T) {
	type boom struct{ at int }
	panicAt := func(n int) func(a options.Attempt) {
		return func(a options.Attempt) {
			if a.Retry == n {
				panic(boom{n})
			}
		}
	}
	tests := []struct {
		name string
		opts func(p func(options.Attempt)) options.RetryHandlerOptions
	}{
		{"ShouldRetry", func(p func(options.Attempt)) options.RetryHandlerOptions {
			return options.RetryHandlerOptions{Policy: noWait, ShouldRetry: func(a options.Attempt) bool { p(a); return true }}
		}},
		{"Policy.Next", func(p func(options.Attempt)) options.RetryHandlerOptions {
			return options.RetryHandlerOptions{Policy: options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) { p(a); return 0, true })}
		}},
		{"Classifier", func(p func(options.Attempt)) options.RetryHandlerOptions {
			return options.RetryHandlerOptions{Policy: classifying{noWait, func(a options.Attempt) (bool, bool) { p(a); return true, true }}}
		}},
	}
	for _, tt := range tests {
		for _, at := range []int{1, 2} { // with no response kept, and with one
			t.Run(tt.name, func(t *testing.T) {
				rt := &bodiesTransport{statuses: []int{503, 503}, size: 100}
				h := newFaultHandler(t, tt.opts(panicAt(at)))
				req, _ := http.NewRequest(http.MethodGet, "http://graph.test/v1.0/me", nil)
				require.PanicsWithValue(t, boom{at}, func() { _, _ = h.Intercept(directPipeline{rt}, 0, req) })
				require.Len(t, rt.bodies, at)
				for i, b := range rt.bodies {
					assert.True(t, b.closed.Load(), "body %d closed", i+1)
				}
			})
		}
	}
}

func TestRetryHandler_CallbacksReadingTheBodyLeaveItWhole(t *testing.T) {
	const body = `{"error":{"code":"activityLimitReached"}}`
	readAll := func(a options.Attempt) string {
		b, err := io.ReadAll(a.Response.Body)
		require.NoError(t, err)
		require.NoError(t, a.Response.Body.Close())
		return string(b)
	}
	tests := []struct {
		name     string
		opts     options.RetryHandlerOptions
		attempts int
	}{
		{"ShouldRetry vetoes", options.RetryHandlerOptions{Policy: noWait, ShouldRetry: func(a options.Attempt) bool {
			return !strings.Contains(readAll(a), "activityLimitReached")
		}}, 1},
		{"Policy.Next stops after reading a little", options.RetryHandlerOptions{Policy: options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			_, _ = a.Response.Body.Read(make([]byte, 5))
			return 0, false
		})}, 1},
		{"Classifier says final", options.RetryHandlerOptions{Policy: classifying{noWait, func(a options.Attempt) (bool, bool) {
			return !strings.Contains(readAll(a), "activityLimitReached"), true
		}}}, 1},
		{"every callback reads, and the last attempt is returned", options.RetryHandlerOptions{MaxRetries: 1,
			Policy: classifying{options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
				readAll(a)
				return 0, true
			}), func(a options.Attempt) (bool, bool) { readAll(a); return a.Response.StatusCode == 503, true }},
			ShouldRetry: func(a options.Attempt) bool { readAll(a); return true }}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, reply{status: 503, body: body}, reply{status: 503, body: body})
			h, clk := newHandler(t, tt.opts)
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			res, _ := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Equal(t, 503, res.resp.StatusCode)
			assert.Equal(t, body, res.body)
			assert.Len(t, srv.attempts(), tt.attempts)
		})
	}
}

func TestRetryHandler_SeveralRetryAfterFields(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Add("Retry-After", "0")
			w.Header().Add("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	h, clk := newHandler(t, options.RetryHandlerOptions{Policy: noWait})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	res, waits := do(clk, newClient(t, h), req)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, clocktest.Seconds(2), waits, "the later of the two times")
}

func TestRetryHandler_UnknownOutcomeResentOnlyWhenSafe(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		header   string // an idempotency header to send, if any
		status   int
		codes    []int
		assume   bool
		attempts int
	}{
		{name: "POST answered 504 is not resent", method: http.MethodPost, status: 504, attempts: 1},
		{name: "PATCH answered 500 is not resent", method: http.MethodPatch, status: 500, codes: []int{500}, attempts: 1},
		{name: "POST answered 502 is not resent", method: http.MethodPost, status: 502, codes: []int{502}, attempts: 1},
		{name: "POST with Idempotency-Key answered 504", method: http.MethodPost, header: "Idempotency-Key", status: 504, attempts: 2},
		{name: "POST with X-Idempotency-Key answered 504", method: http.MethodPost, header: "X-Idempotency-Key", status: 504, attempts: 2},
		{name: "POST answered 504, AssumeIdempotent", method: http.MethodPost, status: 504, assume: true, attempts: 2},
		{name: "PUT answered 504", method: http.MethodPut, status: 504, attempts: 2},
		{name: "GET answered 500 listed", method: http.MethodGet, status: 500, codes: []int{500}, attempts: 2},
		{name: "POST refused with 503", method: http.MethodPost, status: 503, attempts: 2},
		{name: "POST refused with 429", method: http.MethodPost, status: 429, attempts: 2},
		{name: "POST refused with 409 listed", method: http.MethodPost, status: 409, codes: []int{409}, attempts: 2},
		{name: "POST answered 200 listed is not resent", method: http.MethodPost, status: 200, codes: []int{200}, attempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, reply{status: tt.status, body: "first"})
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 1, StatusCodes: tt.codes, AssumeIdempotent: tt.assume})
			req, _ := http.NewRequest(tt.method, srv.URL, strings.NewReader("{}"))
			if tt.header != "" {
				req.Header.Set(tt.header, "k1")
			}
			res, _ := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
			if tt.attempts == 1 {
				assert.Equal(t, tt.status, res.resp.StatusCode)
				assert.Equal(t, "first", res.body)
			}
		})
	}
}

func TestRetryHandler_PostResentWhenNothingWasWritten(t *testing.T) {
	srv := newScripted(t)
	var dials atomic.Int32
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return nil, errors.New("dial refused")
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 1})
	r := await(t, goDo(newRawClientWith(t, base, h), newRequest(t, context.Background(), http.MethodPost, srv.URL, "{}", "")))
	require.NoError(t, r.err)
	assert.Equal(t, okBody, r.body)
	assert.Len(t, srv.attempts(), 1, "the first attempt never reached the server")
}

func TestRetryHandler_UnmendableErrorsNotRetried(t *testing.T) {
	srv := newScripted(t)
	tests := []struct {
		name    string
		request func() *http.Request
		want    string
		// attempts the handler may make: net/http now and then reports
		// its own read of the connection it closed on a ContentLength
		// mismatch, a transport error like any other, before the mismatch.
		attempts int64
	}{
		{"ContentLength longer than the body", func() *http.Request {
			req, _ := http.NewRequest(http.MethodPut, srv.URL, bytes.NewReader([]byte("abc")))
			req.ContentLength = 10
			return req
		}, "ContentLength=10 with Body length 3", 2},
		{"unsupported scheme", func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, "ftp://graph.test/v1.0/me", nil)
			return req
		}, "unsupported protocol scheme", 1},
		{"invalid header value", func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("X-Broken", "a\nb")
			return req
		}, "invalid header", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFaultHandler(t, options.RetryHandlerOptions{Policy: noWait, MaxRetries: 10})
			r := await(t, goDo(newRawClient(t, h), tt.request()))
			require.ErrorContains(t, r.err, tt.want)
			assert.ErrorContains(t, r.err, "permanent error after")
			assert.LessOrEqual(t, h.Stats().Attempts, tt.attempts)
		})
	}
	assert.Empty(t, srv.attempts())
}

func TestRetryHandler_OptionsUnderKey(t *testing.T) {
	tests := []struct {
		name     string
		value    any
		wantErr  string
		attempts int
	}{
		{"by pointer", &options.RetryHandlerOptions{MaxRetries: -1}, "", 1},
		{"by value", options.RetryHandlerOptions{MaxRetries: -1}, "", 1},
		{"nil pointer: the handler's options", (*options.RetryHandlerOptions)(nil), "", 2},
		{"invalid by value", options.RetryHandlerOptions{MaxDelay: -1}, "MaxDelay = -1ns", 0},
		{"another type", "retry", "a string is stored under options.Key()", 0},
		{"kiota's own options", &nethttplibrary.RetryHandlerOptions{}, "a *nethttplibrary.RetryHandlerOptions is stored", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, reply{status: 503, body: "busy"})
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: noWait})
			ctx := context.WithValue(context.Background(), options.Key(), tt.value)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			res, _ := do(clk, newClient(t, h), req)
			assert.Len(t, srv.attempts(), tt.attempts)
			if tt.wantErr != "" {
				require.ErrorIs(t, res.err, options.ErrInvalidOption)
				assert.ErrorContains(t, res.err, tt.wantErr)
				return
			}
			require.NoError(t, res.err)
		})
	}
}
