package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	abstractions "github.com/microsoft/kiota-abstractions-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// handBackOn turns hand-back on handler-wide or for the request alone.
type handBackOn struct {
	name    string
	handler options.RetryHandlerOptions
	request func(*http.Request) *http.Request
}

var handBackWays = []handBackOn{
	{"handler-wide", options.RetryHandlerOptions{HandBack: options.HandBackThrottles}, func(r *http.Request) *http.Request { return r }},
	{"per request", options.RetryHandlerOptions{}, func(r *http.Request) *http.Request {
		o := &options.RetryHandlerOptions{HandBack: options.HandBackThrottles}
		return r.WithContext(context.WithValue(r.Context(), options.Key(), o))
	}},
}

// TestHandBackThrottledAnswer: a throttled answer is returned at once, no
// time waited on the handler's clock, with when to try again.
func TestHandBackThrottledAnswer(t *testing.T) {
	answers := []struct {
		name  string
		reply reply
		after time.Duration
	}{
		{"429 with Retry-After", throttled("5"), 5 * time.Second},
		{"503 with Retry-After", reply{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "7"}}, 7 * time.Second},
	}
	for _, on := range handBackWays {
		for _, a := range answers {
			t.Run(on.name+"/"+a.name, func(t *testing.T) {
				srv := newScripted(t, a.reply)
				h, clk := newHandler(t, on.handler)
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/1", nil)
				res, waits := do(clk, newClient(t, h), on.request(req))
				require.NoError(t, res.err)
				assert.Equal(t, a.reply.status, res.resp.StatusCode, "the server's answer, whole")
				assert.Empty(t, waits, "nothing waited")
				assert.Equal(t, epoch, clk.Now(), "no virtual time passed")
				assert.Len(t, srv.attempts(), 1)
				at, ok := middleware.RetryAt(res.resp, nil)
				require.True(t, ok)
				assert.Equal(t, epoch.Add(a.after), at)
			})
		}
	}
}

// TestHandBackHold: a request the throttle queue would hold is not sent: it
// returns at once with an error that says until when.
func TestHandBackHold(t *testing.T) {
	for _, on := range handBackWays {
		t.Run(on.name, func(t *testing.T) {
			srv := newScripted(t, throttled("5"))
			h, clk := newHandler(t, on.handler)
			client := newClient(t, h)
			first, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/1", nil)
			res, _ := do(clk, client, on.request(first))
			require.NoError(t, res.err)
			require.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)

			clk.Advance(time.Second)
			again, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/1", nil)
			res, waits := do(clk, client, on.request(again))
			require.Error(t, res.err)
			assert.ErrorIs(t, res.err, middleware.ErrHandedBack)
			var hb *middleware.HandBackError
			require.ErrorAs(t, res.err, &hb)
			assert.Empty(t, waits, "nothing waited")
			assert.Equal(t, epoch.Add(time.Second), clk.Now(), "no virtual time passed")
			assert.Len(t, srv.attempts(), 1, "no attempt sent")
			at, ok := middleware.RetryAt(nil, res.err)
			require.True(t, ok)
			assert.Equal(t, epoch.Add(5*time.Second), at, "the throttle's end")
		})
	}
}

// TestHandBackThrottlesOnly: with HandBackThrottles a failure still
// retries as the policy says; HandBackAll hands it back too.
func TestHandBackThrottlesOnly(t *testing.T) {
	unavailable := reply{status: http.StatusServiceUnavailable}
	tests := []struct {
		mode     options.HandBack
		attempts int
		waits    []time.Duration
	}{
		{options.HandBackThrottles, 2, clocktest.Seconds(2)},
		{options.HandBackAll, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := newScripted(t, unavailable)
			h, clk := newHandler(t, options.RetryHandlerOptions{HandBack: tt.mode, Policy: fixedPolicy(3, 2*time.Second)})
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/1", nil)
			res, waits := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
			assert.Equal(t, tt.waits, waits)
			at, ok := middleware.RetryAt(res.resp, nil)
			assert.Equal(t, tt.mode == options.HandBackAll, ok)
			if ok {
				assert.Equal(t, epoch.Add(2*time.Second), at, "the policy's delay")
			}
		})
	}
}

// TestRetryAtReadsKiotaErrors: a Kiota client gets a handed-back answer as
// an ApiError, which keeps the response's headers.
func TestRetryAtReadsKiotaErrors(t *testing.T) {
	want := epoch.Add(1500 * time.Millisecond)
	apiErr := abstractions.NewApiError()
	apiErr.ResponseHeaders.Add(middleware.HeaderRetryAt, want.Format(time.RFC3339Nano))
	at, ok := middleware.RetryAt(nil, errors.Join(errors.New("graph: throttled"), apiErr))
	require.True(t, ok)
	assert.True(t, want.Equal(at))

	_, ok = middleware.RetryAt(nil, abstractions.NewApiError())
	assert.False(t, ok, "an error not handed back")
	_, ok = middleware.RetryAt(&http.Response{Header: http.Header{}}, nil)
	assert.False(t, ok, "a response not handed back")
}

func TestHandBackValidated(t *testing.T) {
	_, err := middleware.NewRetryHandler(options.RetryHandlerOptions{HandBack: options.HandBack(7)})
	require.ErrorIs(t, err, options.ErrInvalidOption)
	assert.Contains(t, err.Error(), "HandBack")
}

// TestRetriesOffAnswersANamedHold: with retries off, a request the server's
// own Retry-After for its URL still holds is answered at once with a
// stand-in 429 that says how long is left, no attempt sent; anything else
// goes as it would with retries on.
func TestRetriesOffAnswersANamedHold(t *testing.T) {
	off := options.RetryHandlerOptions{MaxRetries: -1}
	tests := []struct {
		name    string
		opts    options.RetryHandlerOptions
		after   time.Duration // since the throttle came back
		path    string
		status  int
		handed  bool // an ErrHandedBack error instead of a response
		sent    int  // attempts the second request sent
		waited  []time.Duration
		wantRA  string
		retryAt time.Duration // since epoch; 0: not handed back
	}{
		{name: "retries off, the throttled URL", opts: off, after: time.Second, path: "/v1.0/users/1",
			status: http.StatusTooManyRequests, wantRA: "4", retryAt: 5 * time.Second},
		{name: "retries off, half a second left", opts: off, after: 4500 * time.Millisecond, path: "/v1.0/users/1",
			status: http.StatusTooManyRequests, wantRA: "1", retryAt: 5 * time.Second},
		{name: "the NoRetry policy, the throttled URL", opts: options.RetryHandlerOptions{Policy: options.NoRetry{}}, after: time.Second,
			path: "/v1.0/users/1", status: http.StatusTooManyRequests, wantRA: "4", retryAt: 5 * time.Second},
		{name: "retries off, the hold over", opts: off, after: 5 * time.Second, path: "/v1.0/users/1",
			status: http.StatusOK, sent: 1},
		{name: "retries off, a sibling the server did not name", opts: off, after: time.Second, path: "/v1.0/users/2",
			status: http.StatusOK, sent: 1},
		{name: "retries on, the throttled URL waits", opts: options.RetryHandlerOptions{}, after: time.Second, path: "/v1.0/users/1",
			status: http.StatusOK, sent: 1, waited: clocktest.Seconds(4)},
		{name: "retries off, handed back as asked", opts: options.RetryHandlerOptions{MaxRetries: -1, HandBack: options.HandBackThrottles},
			after: time.Second, path: "/v1.0/users/1", handed: true, retryAt: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, throttled("5"))
			h, clk := newHandler(t, tt.opts)
			client := newClient(t, h)
			// The throttle, taken as it comes whatever the handler's options.
			first, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/1", nil)
			first = first.WithContext(context.WithValue(first.Context(), options.Key(), &off))
			res, _ := do(clk, client, first)
			require.NoError(t, res.err)
			require.Equal(t, http.StatusTooManyRequests, res.resp.StatusCode)
			require.Len(t, srv.attempts(), 1)

			clk.Advance(tt.after)
			again, _ := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
			res, waits := do(clk, client, again)
			assert.Len(t, srv.attempts(), 1+tt.sent, "attempts sent")
			assert.Equal(t, tt.waited, waits)
			if tt.handed {
				assert.ErrorIs(t, res.err, middleware.ErrHandedBack)
			} else {
				require.NoError(t, res.err)
				assert.Equal(t, tt.status, res.resp.StatusCode)
				assert.Equal(t, tt.wantRA, res.resp.Header.Get("Retry-After"))
			}
			at, ok := middleware.RetryAt(res.resp, res.err)
			assert.Equal(t, tt.retryAt != 0, ok, "handed back")
			if ok {
				assert.Equal(t, epoch.Add(tt.retryAt), at)
			}
		})
	}
}
