package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"
	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// client is one retrying HTTP client under test. build returns a fresh
// *http.Client over base for every run, so that no state (a learned
// throttle, a connection pool) carries from one run into the next.
type client struct {
	key   string // flag value
	name  string // in tables and charts
	setup string // how it is configured, for RESULTS.md
	build func(base http.RoundTripper) (*http.Client, error)
	// only names the scenarios it runs; nil: all. A client whose options
	// matter only to some servers runs only there.
	only []string
}

// runs reports whether the client runs scenario sc.
func (c client) runs(sc scenario) bool {
	return c.only == nil || slices.Contains(c.only, sc.key)
}

// clients lists every client in the order of the tables.
var clients = []client{
	{"none", "no retry", "kiota-http-go `NewCustomTransportWithParentTransport(base, passThrough)`: " +
		"the Kiota pipeline with one middleware that only passes the request on (an empty list would get the default chain)",
		func(base http.RoundTripper) (*http.Client, error) {
			return &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, passThrough{})}, nil
		}, nil},
	{"kiota", "kiota-http-go RetryHandler", "kiota-http-go v1.5.4 `NewRetryHandler()` (3 retries, 3 s base delay, " +
		"honours Retry-After) alone in `NewCustomTransportWithParentTransport(base, h)`",
		func(base http.RoundTripper) (*http.Client, error) {
			return &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, nethttplibrary.NewRetryHandler())}, nil
		}, nil},
	{"retryablehttp", "go-retryablehttp", "hashicorp/go-retryablehttp v0.7.8 `NewClient()` defaults (4 retries, " +
		"1-30 s exponential backoff, honours Retry-After on 429 and 503) through `StandardClient()`; " +
		"its inner `http.Client` uses the shared base transport and its logger is off",
		func(base http.RoundTripper) (*http.Client, error) {
			rc := retryablehttp.NewClient()
			rc.HTTPClient = &http.Client{Transport: base}
			rc.Logger = nil
			return rc.StandardClient(), nil
		}, nil},
	{"failsafe", "failsafe-go", "failsafe-go v0.9.8 `failsafehttp.NewRetryPolicyBuilder().WithBackoff(1s, 30s).WithMaxRetries(3)` " +
		"as its HTTP guide shows (the builder retries 429 and 5xx and delays by Retry-After on 429 and 503) " +
		"in `failsafehttp.NewRoundTripper(base, policy)`",
		func(base http.RoundTripper) (*http.Client, error) {
			rp := failsafehttp.NewRetryPolicyBuilder().
				WithBackoff(time.Second, 30*time.Second).
				WithMaxRetries(3).
				Build()
			return &http.Client{Transport: failsafehttp.NewRoundTripper(base, rp)}, nil
		}, nil},
	{"ours-noqueue", "ours, queue off", "`middleware.NewRetryHandler(options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: true}})` " +
		"alone in `NewCustomTransportWithParentTransport(base, h)`",
		func(base http.RoundTripper) (*http.Client, error) {
			return ours(base, options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: true}})
		}, nil},
	{"ours", "ours (default)", "`middleware.NewRetryHandler(options.RetryHandlerOptions{})`, default options, " +
		"throttle queue on, alone in `NewCustomTransportWithParentTransport(base, h)`",
		func(base http.RoundTripper) (*http.Client, error) {
			return ours(base, options.RetryHandlerOptions{})
		}, nil},
	{"ours-caps", "ours, Outlook's cap", "`middleware.NewRetryHandler(options.RetryHandlerOptions{Queue: options.QueueOptions{Concurrency: graph.MailboxConcurrency}})`: " +
		"default options but for Outlook's 4 concurrent requests per mailbox, kept once the host has throttled; runs only where a server caps concurrency",
		func(base http.RoundTripper) (*http.Client, error) {
			return ours(base, options.RetryHandlerOptions{Queue: options.QueueOptions{Concurrency: graph.MailboxConcurrency}})
		}, []string{"concurrency"}},
}

func ours(base http.RoundTripper, opts options.RetryHandlerOptions) (*http.Client, error) {
	h, err := middleware.NewRetryHandler(opts)
	if err != nil {
		return nil, fmt.Errorf("building our retry handler: %w", err)
	}
	return &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}, nil
}

// passThrough is a Kiota middleware that does nothing, so that the
// no-retry client still goes through kiota-http-go's pipeline.
type passThrough struct{}

func (passThrough) Intercept(p nethttplibrary.Pipeline, i int, req *http.Request) (*http.Response, error) {
	return p.Next(req, i)
}

// newBaseTransport returns the transport every client sends through, the
// same for all: a pool large enough for every worker, so that no client
// pays for connection churn the others do not.
func newBaseTransport(workers int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     90 * time.Second,
	}
}

// countingTransport sits below every client's retry logic, on the base
// transport. It counts the response bodies that come out of the base
// transport and the ones closed again, to find bodies a client leaks, and
// notes when each request's first attempt left the client, to find
// requests the client held back.
//
// Behind a real limiter, which the bench's server cannot see past, it also
// counts per request what the server would: attempts, refusals (429 and
// 503) and attempts sent before the Retry-After of the previous answer.
type countingTransport struct {
	base           http.RoundTripper
	opened, closed atomic.Int64
	sent           sync.Map // throttletest.HeaderRequestID value → time.Time

	mu    sync.Mutex
	byReq map[string]*clientCount // by throttletest.HeaderRequestID value
}

// clientCount is what the client's transport saw of one request.
type clientCount struct {
	attempts, refused, early int
	notBefore                time.Time // named by the last answer's Retry-After; zero when none
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	id := req.Header.Get(throttletest.HeaderRequestID)
	if id != "" {
		now := time.Now()
		t.sent.LoadOrStore(id, now)
		t.attempt(id, now)
	}
	resp, err := t.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		t.opened.Add(1)
		resp.Body = &countedBody{ReadCloser: resp.Body, t: t}
	}
	if id != "" && resp != nil {
		t.answer(id, resp, time.Now())
	}
	return resp, err
}

func (t *countingTransport) attempt(id string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byReq == nil {
		t.byReq = map[string]*clientCount{}
	}
	c, ok := t.byReq[id]
	if !ok {
		c = &clientCount{}
		t.byReq[id] = c
	}
	c.attempts++
	if !c.notBefore.IsZero() && now.Before(c.notBefore.Add(-throttletest.EarlyTolerance)) {
		c.early++
	}
	c.notBefore = time.Time{}
}

func (t *countingTransport) answer(id string, resp *http.Response, now time.Time) {
	refused := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
	notBefore, _ := retryAfterOf(resp.Header, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.byReq[id]
	if refused {
		c.refused++
		c.notBefore = notBefore
	}
}

// counts returns what was counted of every request so far, by id.
func (t *countingTransport) counts() map[string]clientCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]clientCount, len(t.byReq))
	for id, c := range t.byReq {
		out[id] = *c
	}
	return out
}

// firstSent returns when the first attempt of request id reached the base
// transport.
func (t *countingTransport) firstSent(id string) (time.Time, bool) {
	v, ok := t.sent.Load(id)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

// leaked returns the bodies opened but not closed so far.
func (t *countingTransport) leaked() int64 { return t.opened.Load() - t.closed.Load() }

type countedBody struct {
	io.ReadCloser
	t    *countingTransport
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.t.closed.Add(1) })
	return b.ReadCloser.Close()
}
