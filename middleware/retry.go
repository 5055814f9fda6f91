// Package middleware provides RetryHandler, a kiota-http-go Middleware that
// retries failed requests without corrupting or duplicating them, obeys the
// server's Retry-After, and holds requests back while their target is
// throttled.
package middleware

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// ErrAttemptTimeout is wrapped by the error of an attempt that did not get
// its response headers within RetryHandlerOptions.AttemptTimeout.
var ErrAttemptTimeout = errors.New("attempt timed out")

// RetryHandler is a kiota-http-go Middleware that retries failed attempts
// as its options say. It is safe for concurrent use; one handler is meant
// to serve every request of a client.
type RetryHandler struct {
	opts   options.RetryHandlerOptions
	policy options.Policy // opts.EffectivePolicy(), built once
	limits options.Limits // opts.Limits()
	clock  options.Clock
	queue  *throttle.Queue // nil when the handler's options turn it off
	inst   *observability.Instruments
	stats  stats
}

var _ nethttplibrary.Middleware = (*RetryHandler)(nil)

// retryOptionsKey is the context key of per-request options, converted to
// an interface once: converting options.Key() allocates on every lookup.
var retryOptionsKey any = options.Key()

// NewRetryHandler returns a RetryHandler configured by opts, whose zero
// fields take their documented defaults. It rejects invalid options with an
// error that names the field and its value.
func NewRetryHandler(opts options.RetryHandlerOptions) (*RetryHandler, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("middleware.NewRetryHandler: %w", err)
	}
	opts.StatusCodes = append([]int(nil), opts.StatusCodes...)
	clock := opts.Clock
	if clock == nil {
		clock = options.SystemClock
	}
	h := &RetryHandler{
		opts: opts, policy: opts.EffectivePolicy(), limits: opts.Limits(),
		clock: clock, inst: observability.NewInstruments(opts.MeterProvider),
	}
	if !opts.Queue.Disabled {
		h.queue = throttle.New(clock, opts.Queue)
	}
	return h, nil
}

// Stats are cumulative counts of a handler's work.
type Stats struct {
	Requests int64 // requests that entered the handler
	Attempts int64 // attempts sent down the pipeline, first attempts included
	Retries  int64 // attempts after the first
}

type stats struct{ requests, attempts, retries atomic.Int64 }

// Stats returns the handler's counts so far.
func (h *RetryHandler) Stats() Stats {
	return Stats{Requests: h.stats.requests.Load(), Attempts: h.stats.attempts.Load(), Retries: h.stats.retries.Load()}
}

// Intercept implements nethttplibrary.Middleware. It sends req down the
// pipeline and, while the attempt failed in a retryable way and no limit is
// reached, waits and sends a fresh copy of it again. The caller's request is
// never modified. It returns the first successful or non-retryable response,
// or the last failed response (with a nil error) or transport error once it
// stops retrying.
func (h *RetryHandler) Intercept(pipeline nethttplibrary.Pipeline, index int, req *http.Request) (_ *http.Response, err error) {
	h.stats.requests.Add(1)
	r := run{h: h, pipeline: pipeline, index: index, req: req, obs: observer{inst: h.inst, clock: h.clock}}
	ctx := r.obs.begin(req)
	defer func() { r.obs.end(req.Context(), err) }()
	r.opts, r.policy, r.limits = &h.opts, h.policy, h.limits
	if o, ok := req.Context().Value(retryOptionsKey).(*options.RetryHandlerOptions); ok && o != nil {
		if err := o.Validate(); err != nil {
			closeRequestBody(req)
			return nil, fmt.Errorf("retry handler: %s %s: per-request options: %w", req.Method, hostOf(req), err)
		}
		r.opts, r.policy, r.limits = o, o.EffectivePolicy(), o.Limits()
	}
	r.body = newReplayer(req)
	defer r.body.finish()
	return r.do(ctx)
}

// run is the state of one request through the handler.
type run struct {
	h        *RetryHandler
	opts     *options.RetryHandlerOptions
	policy   options.Policy
	limits   options.Limits
	pipeline nethttplibrary.Pipeline
	index    int
	req      *http.Request
	body     replayer
	start    time.Time
	waited   time.Duration // cumulative time spent between attempts
	obs      observer      // reports the request's signals; see observe.go
}

// do runs the attempts. ctx is the request's context, carrying the
// handler's span when tracing is on.
func (r *run) do(ctx context.Context) (*http.Response, error) {
	r.start = r.h.clock.Now()
	notBefore := r.start
	actx := ctx // the current attempt's context: carries its span
	for retry := 0; ; retry++ {
		pass, err := r.admit(ctx, retry, notBefore)
		if err != nil {
			return nil, r.canceled(ctx, retry)
		}
		attemptReq, err := r.attemptRequest(actx, retry)
		if err != nil {
			return nil, fmt.Errorf("retry handler: %s %s: preparing attempt %d: %w", r.req.Method, hostOf(r.req), retry+1, err)
		}
		resp, err := r.send(actx, attemptReq, retry)
		back := reading{clock: r.h.clock} // when the attempt came back
		r.obs.sent(ctx, err)
		if err != nil && ctx.Err() != nil {
			discard(resp)
			return nil, r.canceled(ctx, retry+1)
		}
		r.observe(resp, err, pass, retry+1, &back)
		if stop := r.classify(attemptReq, resp, err, retry+1); stop != "" {
			return r.giveUp(resp, err, retry+1, stop)
		}
		delay, stop := r.retryDelay(attemptReq, resp, err, retry+1, back.now())
		if stop != "" {
			return r.giveUp(resp, err, retry+1, stop)
		}
		actx = r.obs.retrying(ctx, retry+1, resp, err, delay)
		discard(resp)
		notBefore = back.now().Add(delay)
	}
}

// reading reads its clock once, when first asked: a request that succeeds
// at once never needs the time its attempt came back.
type reading struct {
	clock options.Clock
	t     time.Time
	read  bool
}

func (r *reading) now() time.Time {
	if !r.read {
		r.t, r.read = r.clock.Now(), true
	}
	return r.t
}

// admit waits until attempt retry+1 may be sent: after notBefore and, with
// the queue on, once no throttle holds it and its scope's pace allows. The
// queue holds it no later than the request's own limits (its context's
// deadline, MaxElapsed and RetriesTimeLimit, which a first attempt's hold
// counts against too): past them it is sent and the server answers.
func (r *run) admit(ctx context.Context, retry int, notBefore time.Time) (throttle.Pass, error) {
	now := r.start // a first attempt is admitted as the request starts
	if retry > 0 {
		now = r.h.clock.Now()
	}
	if ctx.Err() != nil {
		return throttle.Pass{Sent: now}, ctx.Err()
	}
	var pass throttle.Pass
	var err error
	switch q := r.queue(); {
	case q != nil && q.Active(r.req):
		deadline := r.start.Add(r.limits.MaxElapsed)
		if l := r.limits.RetriesTimeLimit; l > 0 {
			deadline = earlier(deadline, now.Add(l-r.waited))
		}
		// The queue sees a copy of the observer, so that the request's run
		// stays on the stack when the queue is not in the way.
		obs := &queueObserver{r.obs}
		pass, err = q.Admit(ctx, r.req, notBefore, deadline, obs)
		r.obs = obs.observer
	case notBefore.After(now):
		err = sleepUntil(ctx, r.h.clock, notBefore)
		pass.Sent = r.h.clock.Now()
	default:
		return throttle.Pass{Sent: now}, nil // nothing to wait for
	}
	r.waited += pass.Sent.Sub(now)
	return pass, err
}

// sleepUntil waits until at, or until ctx ends.
func sleepUntil(ctx context.Context, clock options.Clock, at time.Time) error {
	d := at.Sub(clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// queueObserver reports the queue's holds as the request's signals.
type queueObserver struct{ observer }

func (q *queueObserver) Held(ctx context.Context, expected time.Duration) { q.held(ctx, expected) }
func (q *queueObserver) Released(ctx context.Context)                     { q.released(ctx) }

// queue returns the handler's queue unless it is off for this request.
func (r *run) queue() *throttle.Queue {
	if r.opts.Queue.Disabled {
		return nil
	}
	return r.h.queue
}

// observe tells the queue what the server answered to attempt n, so that
// requests to a throttled target are held and its scope's pace is learned.
// It runs even for a request that opted out of the queue, for the others'
// sake. back is when the response came; only some answers need it.
func (r *run) observe(resp *http.Response, err error, pass throttle.Pass, n int, back *reading) {
	q := r.h.queue
	if q == nil {
		return
	}
	outcome, hold := throttle.Failed, time.Duration(0)
	switch {
	case err != nil || resp == nil:
	case resp.StatusCode == http.StatusTooManyRequests:
		outcome = throttle.Throttled
		var has bool
		if hold, has = RetryAfter(resp.Header, back.now()); !has {
			hold = r.policyDelay(resp, n, back.now())
		}
	case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		var has bool
		if hold, has = RetryAfter(resp.Header, back.now()); has {
			outcome = throttle.Throttled
		}
	case resp.StatusCode < 500:
		outcome = throttle.Succeeded
	}
	q.Report(r.req, pass, outcome, hold, back.now)
}

// policyDelay is how long a 429 without a usable Retry-After holds its
// target: the delay the request's policy gives retry n, or none when the
// policy would not retry.
func (r *run) policyDelay(resp *http.Response, n int, now time.Time) time.Duration {
	delay, ok := r.policy.Next(options.Attempt{Retry: n, Elapsed: now.Sub(r.start), Request: r.req, Response: resp})
	if !ok {
		return 0
	}
	return delay
}

// attemptRequest clones the caller's request for attempt retry+1 with a
// fresh body, so that neither this handler nor the handlers after it can
// change what a later attempt sends.
func (r *run) attemptRequest(ctx context.Context, retry int) (*http.Request, error) {
	b, err := r.body.next()
	if err != nil {
		return nil, err
	}
	out := r.req.Clone(ctx)
	out.Body = b
	if retry > 0 {
		out.Header.Set(headerRetryAttempt, strconv.Itoa(retry))
	}
	return out, nil
}

// send runs one attempt down the rest of the pipeline, bounded by the
// per-attempt timeout when one is set.
func (r *run) send(ctx context.Context, req *http.Request, retry int) (*http.Response, error) {
	r.h.stats.attempts.Add(1)
	if retry > 0 {
		r.h.stats.retries.Add(1)
	}
	timeout := r.opts.AttemptTimeout
	if timeout <= 0 {
		return r.pipeline.Next(req, r.index)
	}
	actx, cancel := context.WithCancelCause(ctx)
	timer := r.h.clock.AfterFunc(timeout, func() { cancel(ErrAttemptTimeout) })
	resp, err := r.pipeline.Next(req.WithContext(actx), r.index)
	if !timer.Stop() && ctx.Err() == nil {
		// The timeout fired, possibly after the headers arrived: the
		// attempt's context is gone, so its body is unusable.
		discard(resp)
		cancel(nil)
		return nil, fmt.Errorf("retry handler: %s %s: %w after %v", req.Method, hostOf(req), ErrAttemptTimeout, timeout)
	}
	if err != nil {
		cancel(nil)
		return resp, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// Reasons the handler stops retrying, as reported in errors and telemetry.
const (
	stopSucceeded     = "succeeded"
	stopNotRetryable  = "not retryable"
	stopNotIdempotent = "not idempotent"
	stopPermanent     = "permanent error"
	stopForwardOnly   = "forward-only body"
	stopRetries       = "max retries"
	stopPolicy        = "policy"
	stopVetoed        = "vetoed by ShouldRetry"
	stopElapsed       = "max elapsed"
	stopTimeLimit     = "retries time limit"
)

// classify returns "" when the attempt failed in a way worth retrying
// with retry n, or why it is final. A policy that implements
// options.Classifier decides which attempts failed when it has an opinion;
// otherwise the status code list does, and every transport error counts as
// a failure.
func (r *run) classify(req *http.Request, resp *http.Response, err error, n int) string {
	if err != nil {
		// A request the server may have acted on is only resent when
		// resending it is harmless; a broken TLS setup will not mend.
		if !idempotent(req) {
			return stopNotIdempotent
		}
		if permanent(err) {
			return stopPermanent
		}
	}
	failed := err != nil || r.opts.Retryable(resp.StatusCode)
	if c, ok := r.policy.(options.Classifier); ok {
		a := options.Attempt{Retry: n, Elapsed: r.h.clock.Now().Sub(r.start), Request: req, Response: resp, Err: err}
		if retry, decided := c.Retryable(a); decided {
			failed = retry
		}
	}
	switch {
	case !failed && err == nil:
		return stopSucceeded
	case !failed:
		return stopNotRetryable
	case !r.body.rewindable():
		return stopForwardOnly
	}
	return ""
}

// retryDelay applies the handler's rules on top of the policy: it returns
// the delay before retry n, or why that retry may not be made. now is when
// the failed attempt came back.
func (r *run) retryDelay(req *http.Request, resp *http.Response, err error, n int, now time.Time) (time.Duration, string) {
	if max := r.limits.MaxRetries; max < 0 || max > 0 && n > max {
		return 0, stopRetries
	}
	a := options.Attempt{Retry: n, Elapsed: now.Sub(r.start), Request: req, Response: resp, Err: err}
	if resp != nil {
		a.RetryAfter, a.HasRetryAfter = RetryAfter(resp.Header, now)
	}
	delay, ok := r.policy.Next(a)
	if !ok {
		return 0, stopPolicy
	}
	delay = max(delay, a.RetryAfter)
	if r.opts.ShouldRetry != nil && !r.opts.ShouldRetry(a) {
		return 0, stopVetoed
	}
	if exceeds(a.Elapsed, delay, r.limits.MaxElapsed) {
		return 0, stopElapsed
	}
	if l := r.limits.RetriesTimeLimit; l > 0 && exceeds(r.waited, delay, l) {
		return 0, stopTimeLimit
	}
	return delay, ""
}

// exceeds reports whether spent+next > limit, without overflowing.
func exceeds(spent, next, limit time.Duration) bool {
	return next > limit-spent
}

// giveUp returns a successful or final response unchanged (with a nil
// error), or the last transport error wrapped so that errors.Is and
// errors.As still find it.
func (r *run) giveUp(resp *http.Response, err error, attempts int, why string) (*http.Response, error) {
	r.obs.gaveUp(why, attempts-1, resp)
	if err == nil {
		return resp, nil
	}
	return resp, fmt.Errorf("retry handler: %s %s: %s after %d attempt(s): %w", r.req.Method, hostOf(r.req), why, attempts, err)
}

// canceled reports the end of the request's context. It wraps ctx.Err()
// and, when the context was ended with a cause of its own, that cause too:
// callers test for context.Canceled or context.DeadlineExceeded, and a
// cause alone would hide them.
func (r *run) canceled(ctx context.Context, attempts int) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return fmt.Errorf("retry handler: %s %s: canceled after %d attempt(s): %w", r.req.Method, hostOf(r.req), attempts, err)
	}
	return fmt.Errorf("retry handler: %s %s: canceled after %d attempt(s): %w: %w", r.req.Method, hostOf(r.req), attempts, err, cause)
}

// idempotent reports whether sending req twice is harmless: its method is
// idempotent (RFC 9110 §9.2.2) or it carries an idempotency key.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete, "":
		return true
	}
	_, ok := req.Header[headerIdempotencyKey]
	if !ok {
		_, ok = req.Header[headerXIdempotencyKey]
	}
	return ok
}

// permanent reports transport errors that another attempt cannot mend.
func permanent(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		alert    tls.AlertError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &record) || errors.As(err, &alert)
}

// hostOf names a request in errors without its path or query, which may
// carry personal data.
func hostOf(req *http.Request) string {
	if req.URL == nil {
		return ""
	}
	return req.URL.Scheme + "://" + req.URL.Host
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// cancelOnClose releases an attempt's context once the caller is done with
// the response body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}
