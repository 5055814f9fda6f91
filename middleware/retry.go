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
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/internal/effective"
	"github.com/kiota-resilience/kiota-resilience-go/internal/metrics"
	"github.com/kiota-resilience/kiota-resilience-go/internal/outage"
	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
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
	policy options.Policy   // effective.Policy(opts), built once
	limits effective.Limits // effective.LimitsOf(opts)
	clock  options.Clock
	queue  *throttle.Queue // nil when the handler's options turn it off
	// outages holds the requests to hosts that are down; see outage.go.
	outages *outage.Hosts
	inst    *metrics.Instruments
	stats   stats
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
		clock = options.SystemClock()
	}
	h := &RetryHandler{
		opts: opts, policy: effective.Policy(&opts), limits: effective.LimitsOf(&opts),
		clock: clock, inst: metrics.New(opts.MeterProvider),
	}
	if !opts.Queue.Disabled {
		qo := opts.Queue
		if qo.MeterProvider == nil {
			qo.MeterProvider = opts.MeterProvider
		}
		h.queue = throttle.New(clock, qo)
	}
	h.outages = outage.New(clock, opts.Outage, opts.MeterProvider)
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
// or, whatever stops the retries, the last failed response whole (with a nil
// error) or the last transport error.
func (h *RetryHandler) Intercept(pipeline nethttplibrary.Pipeline, index int, req *http.Request) (_ *http.Response, err error) {
	h.stats.requests.Add(1)
	r := run{h: h, pipeline: pipeline, index: index, req: req, obs: observer{inst: h.inst, clock: h.clock}}
	ctx := r.obs.begin(req)
	defer func() { r.obs.end(req.Context(), err) }()
	r.opts, r.policy, r.limits = &h.opts, h.policy, h.limits
	switch o := req.Context().Value(retryOptionsKey).(type) {
	case nil:
		if o := fromKiota(req, &h.opts); o != nil {
			r.opts, r.policy, r.limits = o, effective.Policy(o), effective.LimitsOf(o)
		}
	case *options.RetryHandlerOptions:
		if o != nil {
			if err := r.override(o); err != nil {
				return nil, err
			}
		}
	case options.RetryHandlerOptions:
		if err := r.override(&o); err != nil {
			return nil, err
		}
	default:
		closeRequestBody(req)
		return nil, fmt.Errorf("retry handler: %s %s: per-request options: %w: a %T is stored under options.Key(), want *options.RetryHandlerOptions",
			req.Method, hostOf(req), options.ErrInvalidOption, o)
	}
	r.body = newReplayer(req)
	defer r.body.finish()
	if r.batch = r.completeBatch(); r.batch != nil {
		return r.batch.finish(r.do(ctx))
	}
	return r.do(ctx)
}

// override makes per-request options replace the handler's for this
// request, once they are found valid.
func (r *run) override(o *options.RetryHandlerOptions) error {
	if err := o.Validate(); err != nil {
		closeRequestBody(r.req)
		return fmt.Errorf("retry handler: %s %s: per-request options: %w", r.req.Method, hostOf(r.req), err)
	}
	r.opts, r.policy, r.limits = o, effective.Policy(o), effective.LimitsOf(o)
	return nil
}

// run is the state of one request through the handler.
type run struct {
	h        *RetryHandler
	opts     *options.RetryHandlerOptions
	policy   options.Policy
	limits   effective.Limits
	pipeline nethttplibrary.Pipeline
	index    int
	req      *http.Request
	body     replayer
	start    time.Time
	waited   time.Duration // cumulative time spent between attempts
	obs      observer      // reports the request's signals; see observe.go
	batch    *batchRun     // completes a JSON batch; nil for other requests
	// current is the response of the attempt being judged, open until it
	// becomes last; last and lastErr are the outcome of the latest
	// attempt, returned if no further attempt is made.
	current *http.Response
	last    *http.Response
	lastErr error
	// The outage gate's part (outage.go): the tickets of the attempt in
	// flight and of the first attempt, whether the last answer was a failure rather than a
	// throttle, and the error of a request handed back unsent.
	ticket, first outage.Ticket
	afterFailure  bool
	handedBack    error
	// timed counts the answers so far that named their wait
	// (options.Attempt.Timed).
	timed int
	// refused is when the last answer, a 429 that named no wait, came
	// back: its retry may go before the policy's delay (refusedRate).
	// early counts the retries that did.
	refused time.Time
	early   int
}

// do runs the attempts. ctx is the request's context, carrying the
// handler's span when tracing is on. Should a callback panic, the panic goes
// on unchanged once the responses the handler holds are closed.
func (r *run) do(ctx context.Context) (*http.Response, error) {
	defer r.hostDone()
	returned := false
	defer func() {
		if !returned {
			closeResponse(r.current)
			closeResponse(r.last)
		}
	}()
	resp, err := r.attempts(ctx)
	returned = true
	return resp, err
}

// attempts sends the attempts until one is final or a retry cannot be
// made. Whatever stops the retries, the caller gets the last response the
// server sent, whole, or the last transport error.
func (r *run) attempts(ctx context.Context) (*http.Response, error) {
	r.start = r.h.clock.Now()
	notBefore := r.start
	actx := ctx // the current attempt's context: carries its span
	for retry := 0; ; retry++ {
		pass, held, err := r.admit(ctx, retry, notBefore)
		if held != "" || err != nil {
			// A ticket the gate gave is handed back unused.
			r.reportHost(outage.Unsent, 0)
		}
		if held != "" {
			return r.giveUp(retry, held, r.handedBack)
		}
		if err != nil {
			r.drop()
			return nil, r.canceled(ctx, retry)
		}
		reqCtx, wrote := actx, (*writes)(nil)
		if !r.resendable(r.req) {
			reqCtx, wrote = traceWrites(actx)
		}
		attemptReq, err := r.attemptRequest(reqCtx, retry)
		if err != nil {
			wrote.release()
			// The queue let the attempt go and counts it in flight until
			// it hears of it.
			ans := r.newAnswer(retry+1, nil, nil, err)
			r.observe(&ans, pass)
			r.reportHost(outage.Unsent, 0)
			return r.giveUp(retry, stopRewind, fmt.Errorf("preparing attempt %d: %w", retry+1, err))
		}
		r.drop()
		resp, err := r.send(attemptReq, retry)
		r.current = resp
		ans := r.newAnswer(retry+1, attemptReq, resp, err)
		r.obs.sent(ctx, err)
		// Every admitted attempt is reported, a canceled one too, so that a
		// probe it was does not hold its scope.
		outcome := r.observe(&ans, pass)
		if err != nil && ctx.Err() != nil {
			r.reportHost(outage.NoAnswer, 0)
			wrote.release()
			discard(resp)
			r.current = nil
			return nil, r.canceled(ctx, retry+1)
		}
		stop := r.classify(&ans, wrote)
		wrote.release()
		var delay time.Duration
		if stop == "" {
			delay, stop = r.retryDelay(ctx, &ans)
		}
		r.reportHost(hostOutcome(resp, err, outcome), delay)
		// Items of a batch answered one by one are throttles, not failures.
		r.afterFailure = !throttled(outcome) && !r.batch.answeredByItems()
		if stop == "" && r.handsBack(outcome) {
			stop = r.handBackAnswer(ctx, resp, ans.back.now(), delay)
		}
		unpeek(resp)
		r.current, r.last, r.lastErr = nil, resp, err
		if stop != "" {
			return r.giveUp(retry+1, stop, r.handedBack)
		}
		actx = r.obs.retrying(ctx, retry+1, resp, err, delay)
		r.last = keep(resp)
		r.timed = ans.attempt().Timed
		notBefore = ans.back.now().Add(delay)
		r.refused = time.Time{}
		if r.refusedRate(resp, outcome) {
			r.refused = ans.back.now()
		}
	}
}

// maxEarlyRetries bounds the retries of a request that go before the
// policy's delay (refusedRate), so that an item that refuses every
// request while others are served (locked) waits out the policy's delays
// after as many quick refusals. Behind nginx's zones, 2 %-3 % of the
// retries that went early met the pace's overshoot and were refused
// again; allowed one early retry, each such request waited the policy's
// 2.4-3 s and most runs ended at 1.1x-1.35x of the limit, where allowed
// any number they ended at 1.03x-1.08x. Three refusals in a row come to
// about one request in 30,000: under one run in a hundred of 150 early
// retries.
const maxEarlyRetries = 3

// refusedRate reports whether the answer resp, which the queue read as
// outcome, refused a rate rather than the request: a 429 that named no
// wait, whose retry the queue lets go before the policy's delay once the
// host serves requests sent after it (throttle.Queue.AdmitEarly). The
// policy's delay is a guess at a wait the server did not name, and while
// the server serves, at the pace that slowed for the refusal, it waits
// for nothing: one such refusal near the end of a run behind nginx's
// zones cost its request 3 s where the run needs 2.7. At most
// maxEarlyRetries times a request. A 503 that names no wait, which the
// queue may take for a capacity limit, and a JSON batch, whose items are
// answered one by one, wait their delay (R6).
func (r *run) refusedRate(resp *http.Response, outcome throttle.Outcome) bool {
	return r.early < maxEarlyRetries && r.batch == nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests &&
		outcome == throttle.ThrottledNoWait
}

// retriesOff reports whether the request's options never retry: MaxRetries
// below zero, or the NoRetry policy.
func (r *run) retriesOff() bool {
	switch r.policy.(type) {
	case options.NoRetry, *options.NoRetry:
		return true
	}
	return r.limits.MaxRetries < 0
}

// drop discards the last failed response: a newer attempt replaces it, or
// the caller will get an error instead.
func (r *run) drop() {
	discard(r.last)
	r.last, r.lastErr = nil, nil
}

// reading reads its clock once, when first asked: with the queue off, a
// request that succeeds at once never needs the time its attempt came
// back.
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
// counts against too). A first attempt the queue would hold past them is
// sent at once and the server answers; for a retry, admit returns the
// limit as the reason not to make it, and the answer in hand is returned.
func (r *run) admit(ctx context.Context, retry int, notBefore time.Time) (throttle.Pass, string, error) {
	now := r.start // a first attempt is admitted as the request starts
	if retry > 0 {
		now = r.h.clock.Now()
	}
	// No attempt is made on these returns: their pass is never reported.
	if ctx.Err() != nil {
		return throttle.Pass{}, "", ctx.Err()
	}
	if held, err := r.passGate(ctx, retry, &notBefore, now); held != "" || err != nil {
		return throttle.Pass{}, held, err
	}
	var pass throttle.Pass
	var err error
	sent := now
	switch q := r.queue(); {
	case q != nil && q.Active(r.req):
		if retry == 0 && r.retriesOff() && r.opts.HandBack == options.HandBackNone {
			// The caller spends no retries: it does its own, and the server
			// already said what this one would get.
			if until := q.HeldUntil(r.req); until.After(later(now, notBefore)) {
				return pass, r.standIn(now, until), nil
			}
		}
		deadline, limit := r.holdDeadline(ctx, now)
		if r.opts.HandBack != options.HandBackNone {
			deadline = later(now, notBefore) // no hold past its own time
		}
		// The queue sees a copy of the observer, so that the request's run
		// stays on the stack when the queue is not in the way.
		obs := &queueObserver{r.obs}
		if r.refused.IsZero() {
			pass, err = q.Admit(ctx, r.req, notBefore, deadline, obs)
		} else {
			pass, err = q.AdmitEarly(ctx, r.req, r.refused, notBefore, deadline, obs)
			if err == nil && pass.Sent.Before(notBefore) {
				// The backoff did not time this retry: should it be
				// refused, the next delay is the same step again
				// (options.Attempt.Timed).
				r.early++
				r.timed++
				obs.sentEarly(ctx, hostKey(r.req))
			}
		}
		r.obs = obs.observer
		var hold *throttle.HoldError
		if errors.As(err, &hold) && r.opts.HandBack != options.HandBackNone {
			return pass, r.handBack(retry, hold.Until), nil
		}
		if errors.Is(err, throttle.ErrHoldTooLong) {
			if retry > 0 {
				// The answer in hand is worth more than a retry past the
				// limits: it is returned.
				return pass, limit, nil
			}
			// No answer in hand: the server answers this one.
			pass, err = q.Bypass(r.h.clock.Now()), nil
		}
		sent = pass.Sent
	case notBefore.After(now):
		err = wait.Until(ctx, r.h.clock, notBefore)
		sent = r.h.clock.Now()
	}
	if q := r.h.queue; q != nil && pass.Sent.IsZero() {
		// Not the queue's to hold (no throttle of its host, or the request
		// opted out), but its answer is the queue's to learn from.
		pass = q.Bypass(sent)
	}
	if retry > 0 {
		pass = pass.Retried()
	}
	r.waited += sent.Sub(now)
	return pass, "", err
}

// holdDeadline returns the latest time the queue may hold the next
// attempt, which is sent at now at the earliest, and the limit it comes
// from: MaxElapsed, RetriesTimeLimit (a first attempt's hold counts as
// waiting) or the context's deadline.
func (r *run) holdDeadline(ctx context.Context, now time.Time) (time.Time, string) {
	deadline, limit := r.start.Add(r.limits.MaxElapsed), stopElapsed
	if l := r.limits.RetriesTimeLimit; l > 0 {
		if t := now.Add(l - r.waited); t.Before(deadline) {
			deadline, limit = t, stopTimeLimit
		}
	}
	// Context deadlines are wall-clock time, whatever the handler's clock:
	// the time left is read against the handler's clock read at the same
	// moment, not against now, which the outage gate's wait may have
	// left seconds behind.
	if d, ok := ctx.Deadline(); ok {
		if t := r.h.clock.Now().Add(time.Until(d)); t.Before(deadline) {
			deadline, limit = t, stopDeadline
		}
	}
	return deadline, limit
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

// observe tells the queue what the server answered to an admitted
// attempt, and to the items of a JSON batch, so that requests to a
// throttled target are held and its scope's pace is learned, and returns
// its reading of the answer. It runs even for a request that opted out of
// the queue, for the others' sake.
func (r *run) observe(ans *answer, pass throttle.Pass) throttle.Outcome {
	q := r.h.queue
	if q != nil {
		r.batch.learn(q, ans)
	}
	outcome, hold := throttle.Failed, time.Duration(0)
	switch {
	case ans.err != nil || ans.resp == nil:
	case r.batch.answeredByItems():
		// The batch itself was answered; its items are throttled one by
		// one, and its stand-in says nothing of the batch's own URL.
		outcome = throttle.Succeeded
	default:
		outcome, hold = classify(q, r.req, &pass, ans.resp.StatusCode, ans.namedWait, ans.back.now, ans.policyHold)
	}
	if q != nil {
		var header http.Header
		if ans.resp != nil {
			header = ans.resp.Header
		}
		q.Report(r.req, pass, outcome, hold, header, ans.back.now)
	}
	return outcome
}

// namesItsWait reports whether an answer with status is judged by the
// wait its Retry-After names: a throttle's hold, or what tells a 503 that
// is a throttle from one that may be an outage. Other answers are judged
// by their status alone, and their header is never parsed.
func namesItsWait(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable ||
		status == http.StatusGatewayTimeout
}

// verdict is what an answer with status tells the throttle queue, given
// the wait its Retry-After names (named says whether it names one; read
// only when namesItsWait): its outcome and, for a throttle, how long it
// holds its target. A 429 without a usable Retry-After holds it for the
// policy's delay, which the caller knows: policyHold says so. A 503 or 504
// is a throttle when it names a Retry-After; a 503 that names none is
// Unavailable, for the queue to tell a capacity limit (held for the
// policy's delay, as a bare 429) from an outage. The answer is classified
// here and only here; the header is parsed once, by the caller.
func verdict(status int, wait time.Duration, named bool) (o throttle.Outcome, hold time.Duration, policyHold bool) {
	switch {
	case status == http.StatusTooManyRequests && named:
		return throttle.Throttled, wait, false
	case status == http.StatusTooManyRequests:
		return throttle.ThrottledNoWait, 0, true
	case status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		if named {
			return throttle.Throttled, wait, false
		}
		if status == http.StatusServiceUnavailable {
			return throttle.Unavailable, 0, true
		}
	case status < 500:
		return throttle.Succeeded, 0, false
	}
	return throttle.Failed, 0, false
}

// throttled reports whether the queue reads an answer as o as a throttle.
func throttled(o throttle.Outcome) bool {
	return o == throttle.Throttled || o == throttle.ThrottledNoWait
}

// classify is how the queue takes an answer with status, an attempt's
// or a JSON batch item's: its outcome and, for a throttle, how long it
// holds its target. namedWait parses the answer's Retry-After and is
// called only when verdict reads it. A 503 that names no wait is put to q
// (nil: the queue is off, and it is a failure) through pass, which tells
// a capacity limit from an outage; back returns when the answer came.
// A throttle that names no wait holds its target for policyHold's delay,
// told whether a budget's pace let the attempt go.
func classify(q *throttle.Queue, req *http.Request, pass *throttle.Pass, status int,
	namedWait func() (time.Duration, bool), back func() time.Time, policyHold func(paced bool) time.Duration) (throttle.Outcome, time.Duration) {
	var wait time.Duration
	var named bool
	if namesItsWait(status) {
		wait, named = namedWait()
	}
	outcome, hold, byPolicy := verdict(status, wait, named)
	if outcome == throttle.Unavailable {
		outcome = throttle.Failed
		if q != nil {
			outcome = q.Refused(req, pass, back())
		}
		// Taken for a capacity limit, it is a throttle to the outage
		// gate too: the host is answering. Otherwise, an outage or a
		// server failing at random: nothing to learn a pace from, and
		// no hold to ask the policy for.
		byPolicy = throttled(outcome)
	}
	if byPolicy && q != nil {
		hold = policyHold(pass.Paced())
	}
	return outcome, hold
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
func (r *run) send(req *http.Request, retry int) (*http.Response, error) {
	if r.batch != nil {
		r.batch.attempt = retry + 1
	}
	r.h.stats.attempts.Add(1)
	if retry > 0 {
		r.h.stats.retries.Add(1)
	}
	timeout := r.opts.AttemptTimeout
	if timeout <= 0 {
		return r.pipeline.Next(req, r.index)
	}
	ctx := req.Context()
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
	stopDeadline      = "context deadline"
	stopRewind        = "body not rewound"
)

// classify returns "" when ans failed in a way worth retrying,
// or why it is final. A policy that implements options.Classifier decides
// which attempts failed when it has an opinion; otherwise the status code
// list does, and every transport error counts as a failure. wrote, when
// not nil, tells how far a request that must not be sent twice got.
func (r *run) classify(ans *answer, wrote *writes) string {
	resp, err := ans.resp, ans.err
	if err != nil && permanent(err) {
		return stopPermanent
	}
	failed := err != nil || effective.Retryable(r.opts, resp.StatusCode)
	if c, ok := r.policy.(options.Classifier); ok {
		if retry, decided := c.Retryable(ans.attempt()); decided {
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
	case wrote != nil && !r.batch.answeredByItems() && unknownOutcome(resp, err, wrote):
		// A batch answered item by item resends only the items that are
		// safe to run again: the batch itself was answered.
		return stopNotIdempotent
	}
	return ""
}

// resendable reports whether req may be sent again whatever became of
// the previous attempt.
func (r *run) resendable(req *http.Request) bool {
	return r.opts.AssumeIdempotent || idempotent(req)
}

// unknownOutcome reports whether the server may have acted on a request
// that failed: an answer other than a refusal (a 4xx, 429 among them, or a
// 503 says the request was not executed), or a transport error unless the
// request is known to have failed before it had a connection.
func unknownOutcome(resp *http.Response, err error, w *writes) bool {
	if err != nil {
		return w.state.Load() != writesNone
	}
	refused := resp.StatusCode >= 400 && resp.StatusCode < 500 || resp.StatusCode == http.StatusServiceUnavailable
	return !refused
}

// writes records, through an httptrace.ClientTrace, how far a request got:
// whether it was given a connection, before which nothing of it can have
// been written. (net/http itself resends a request that failed on a reused
// connection before writing anything.) A transport that does not report to
// the trace leaves it untraced, and the request is then taken as possibly
// written. Watching the connection rather than each header written keeps
// net/http from allocating for every header field it reports.
//
// Records are pooled: a record is only ever moved towards "connected",
// which never causes a resend, so a late report cannot do harm.
type writes struct {
	state  atomic.Int32
	trace  httptrace.ClientTrace // bound to this record
	pooled bool
}

const (
	writesUntraced  int32 = iota // no report: anything may have been written
	writesNone                   // a connection was asked for, none given yet
	writesConnected              // the request had a connection: it may have been written
)

func newWrites() any {
	w := new(writes)
	w.trace = httptrace.ClientTrace{
		GetConn: func(string) { w.state.CompareAndSwap(writesUntraced, writesNone) },
		GotConn: func(httptrace.GotConnInfo) { w.state.Store(writesConnected) },
	}
	return w
}

var writesPool = sync.Pool{New: newWrites}

// traceWrites returns ctx with a trace that records how far a request
// sent with it got: one that failed before it had a connection was never
// seen by the server. The record goes back with release.
func traceWrites(ctx context.Context) (context.Context, *writes) {
	if httptrace.ContextClientTrace(ctx) != nil {
		// WithClientTrace composes with the trace already there by
		// changing ours, which a late report may be reading: use a record
		// of this attempt's own.
		w := newWrites().(*writes)
		return httptrace.WithClientTrace(ctx, &w.trace), w
	}
	w := writesPool.Get().(*writes)
	w.state.Store(writesUntraced)
	w.pooled = true
	return httptrace.WithClientTrace(ctx, &w.trace), w
}

// release returns w to the pool once its attempt is judged.
func (w *writes) release() {
	if w != nil && w.pooled {
		writesPool.Put(w)
	}
}

// retryDelay applies the handler's rules on top of the policy: it returns
// the delay before the retry the failed answer would lead to, or why
// that retry may not be made.
func (r *run) retryDelay(ctx context.Context, ans *answer) (time.Duration, string) {
	if max := r.limits.MaxRetries; max < 0 || max > 0 && ans.n > max {
		return 0, stopRetries
	}
	a := ans.attempt()
	delay, ok := ans.next()
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
	// Waiting into the deadline would only trade the answer in hand for
	// "context deadline exceeded". Context deadlines are wall-clock time,
	// whatever the handler's clock.
	if d, ok := ctx.Deadline(); ok && time.Until(d) < delay {
		return 0, stopDeadline
	}
	return delay, ""
}

// exceeds reports whether spent+next > limit, without overflowing.
func exceeds(spent, next, limit time.Duration) bool {
	return next > limit-spent
}

// giveUp ends the request with the outcome of its last attempt, whatever
// stopped the retries: the response, successful or not, unchanged and with
// a nil error, or the transport error wrapped so that errors.Is and
// errors.As still find it. cause, when set, is why the next attempt could
// not be prepared; it is reported only when there is no response to return.
func (r *run) giveUp(attempts int, why string, cause error) (*http.Response, error) {
	resp, err := r.last, r.lastErr
	r.last, r.lastErr = nil, nil
	r.obs.gaveUp(why, attempts-1, resp)
	switch {
	case err == nil && resp != nil:
		return resp, nil
	case err == nil:
		return nil, fmt.Errorf("retry handler: %s %s: %s after %d attempt(s): %w", r.req.Method, hostOf(r.req), why, attempts, cause)
	case cause != nil:
		return nil, fmt.Errorf("retry handler: %s %s: %s after %d attempt(s): %w; %w", r.req.Method, hostOf(r.req), why, attempts, err, cause)
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

// permanent reports transport errors that another attempt cannot mend: a
// broken TLS setup, or a request net/http refuses to send as it stands.
func permanent(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		alert    tls.AlertError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &record) || errors.As(err, &alert) {
		return true
	}
	// net/http reports a malformed request with errors of no exported
	// type; their texts are stable.
	msg := err.Error()
	for _, text := range malformedRequest {
		if strings.Contains(msg, text) {
			return true
		}
	}
	return false
}

// malformedRequest are parts of the texts of net/http's errors for a
// request that cannot be sent as it stands.
var malformedRequest = [...]string{
	"http: ContentLength=",         // body shorter or longer than ContentLength
	"http: Request.ContentLength=", // ContentLength with a nil body
	"unsupported protocol scheme",
	"net/http: invalid header",
	"net/http: invalid trailer",
	"net/http: invalid method",
	"http: nil Request.",
	"http: no Host in request URL",
	"http: invalid Host header",
	"net/http: can't write control character in Request.URL",
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
