package middleware

import (
	"math/rand/v2"
	"net/http"
	"time"

	abstractions "github.com/microsoft/kiota-abstractions-go"
	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// kiotaOptionsKey is the context key under which kiota-http-go's request
// adapter stores a per-request *nethttplibrary.RetryHandlerOptions, so that
// code written for kiota-http-go's retry handler keeps working here.
var kiotaOptionsKey any = (&nethttplibrary.RetryHandlerOptions{}).GetKey()

// kiotaOptions is what kiota-http-go's retry handler reads from its
// per-request option; its getters apply kiota-http-go's defaults and caps.
type kiotaOptions interface {
	abstractions.RequestOption
	GetShouldRetry() func(delay time.Duration, executionCount int, request *http.Request, response *http.Response) bool
	GetDelaySeconds() int
	GetMaxRetries() int
}

// kiotaMaxCumulativeDelay is kiota-http-go's ceiling on the delays of one
// request: no retry starts once they add up to it.
const kiotaMaxCumulativeDelay = 180 * time.Second

// fromKiota returns the handler's options with the retry decisions of a
// kiota-http-go RetryHandlerOptions found in req's context, or nil when
// there is none. Everything kiota-http-go has no field for (the queue,
// limits, per-attempt timeout) stays as the handler has it.
func fromKiota(req *http.Request, base *options.RetryHandlerOptions) *options.RetryHandlerOptions {
	k, ok := req.Context().Value(kiotaOptionsKey).(kiotaOptions)
	if !ok || k == nil || isNilOption(k) {
		return nil
	}
	o := *base
	p := &kiotaPolicy{delaySeconds: k.GetDelaySeconds()}
	o.Policy, o.MaxRetries, o.StatusCodes = p, k.GetMaxRetries(), nil
	o.ShouldRetry = p.shouldRetry(k.GetShouldRetry())
	return &o
}

// isNilOption reports a typed nil *nethttplibrary.RetryHandlerOptions, whose
// getters would panic.
func isNilOption(k kiotaOptions) bool {
	p, ok := k.(*nethttplibrary.RetryHandlerOptions)
	return ok && p == nil
}

// kiotaPolicy is kiota-http-go's retry schedule for one request: the
// server's Retry-After when it sent one, else DelaySeconds doubled on each
// retry plus up to a second of jitter, until the delays add up to 180 s.
// It keeps the request's cumulative delay, so it serves one request only.
type kiotaPolicy struct {
	delaySeconds int
	waited       time.Duration // the delays of the retries already made
	next         time.Duration // the delay of the retry being decided
}

// Next implements options.Policy.
func (p *kiotaPolicy) Next(a options.Attempt) (time.Duration, bool) {
	p.waited = durations.Add(p.waited, p.next)
	p.next = 0
	if a.Err != nil || p.waited >= kiotaMaxCumulativeDelay {
		// kiota-http-go returns a transport error as it comes.
		return 0, false
	}
	if a.HasRetryAfter {
		p.next = a.RetryAfter
	} else {
		exp := min(a.Retry-1, 30)
		p.next = time.Duration(p.delaySeconds)*time.Second<<exp + rand.N(time.Second)
	}
	return p.next, true
}

// shouldRetry adapts kiota-http-go's callback, which is given the delay
// waited so far and the number of retries made; nil allows every retry
// (kiota-http-go itself would panic).
func (p *kiotaPolicy) shouldRetry(f func(time.Duration, int, *http.Request, *http.Response) bool) func(options.Attempt) bool {
	if f == nil {
		return nil
	}
	return func(a options.Attempt) bool {
		return f(p.waited, a.Retry-1, a.Request, a.Response)
	}
}
