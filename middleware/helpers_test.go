package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// epoch is the fake clock's start; HTTP-date tests are relative to it.
var epoch = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// reply is one scripted server answer; hangup closes the connection
// without a response, which the client sees as a transport error.
type reply struct {
	status int
	header map[string]string
	body   string
	hangup bool
}

// received is what the server saw of one attempt.
type received struct {
	method string
	header http.Header
	body   string
	length int64
}

// scripted is a loopback server that answers attempts from a script, then
// 200 OK (or, made by newRepeating, the script's last reply again), and
// records every attempt.
type scripted struct {
	*httptest.Server
	mu      sync.Mutex
	replies []reply
	repeat  bool // the last reply answers every attempt past the script
	got     []received
}

func newScripted(t *testing.T, replies ...reply) *scripted {
	t.Helper()
	s := &scripted{replies: replies}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// newRepeating returns a scripted server that answers attempt i with
// replies[i], repeating the last reply once the script runs out.
func newRepeating(t *testing.T, replies ...reply) *scripted {
	t.Helper()
	s := newScripted(t, replies...)
	s.repeat = true
	return s
}

func (s *scripted) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.got = append(s.got, received{method: r.Method, header: r.Header.Clone(), body: string(b), length: r.ContentLength})
	rep := reply{status: http.StatusOK, body: "ok"}
	if len(s.replies) > 0 {
		rep = s.replies[0]
		if len(s.replies) > 1 || !s.repeat {
			s.replies = s.replies[1:]
		}
	}
	s.mu.Unlock()
	if rep.hangup {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (s *scripted) attempts() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// retryAttempts returns the Retry-Attempt header of every attempt.
func (s *scripted) retryAttempts() []string {
	var out []string
	for _, a := range s.attempts() {
		out = append(out, a.header.Get("Retry-Attempt"))
	}
	return out
}

// newClient returns a plain http.Client whose transport runs h in
// kiota-http-go's pipeline over a private loopback transport.
func newClient(t *testing.T, h nethttplibrary.Middleware) *http.Client {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}
}

// newHandler returns a handler on a fake clock; opts.Clock is overwritten.
func newHandler(t *testing.T, opts options.RetryHandlerOptions) (*middleware.RetryHandler, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(epoch)
	opts.Clock = clk
	h, err := middleware.NewRetryHandler(opts)
	require.NoError(t, err)
	return h, clk
}

type result struct {
	resp *http.Response
	body string
	err  error
}

// do sends req through client, advancing clk by every wait the handler
// starts, and returns the response (body read and closed) and the waits.
func do(clk *clocktest.Clock, client *http.Client, req *http.Request) (result, []time.Duration) {
	return clocktest.Drive(clk, func() result {
		resp, err := client.Do(req)
		if err != nil {
			return result{err: err}
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return result{resp: resp, body: string(b), err: err}
	})
}

// fixedHalf is a random source that always returns 0.5.
func fixedHalf() float64 { return 0.5 }

func throttled(retryAfter string) reply {
	return reply{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": retryAfter}, body: "slow down"}
}

// fixedPolicy retries up to retries times, waiting d each time.
func fixedPolicy(retries int, d time.Duration) options.Policy {
	return options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
		return d, a.Retry <= retries
	})
}
