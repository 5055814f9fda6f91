package options

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
)

// Attempt is a failed attempt as a policy sees it.
type Attempt struct {
	// Retry is the retry about to be made: 1 for the first retry.
	Retry int
	// Timed is how many of the request's failed attempts so far, this one
	// included, were retried at a time the backoff did not set, or failed
	// for a reason the throttle queue answers for: those that named the
	// wait before their retry (HasRetryAfter), the server timing it;
	// retries the outage gate sent before their delay ended because a
	// probe found the host up again; and throttles naming no wait of an
	// attempt a budget's pace let go, the pace's overshoot, for which the
	// pace slows the whole budget down. Step leaves them out. 0 in an
	// Attempt built by hand.
	Timed int
	// Elapsed is the time since the first attempt started.
	Elapsed time.Duration
	// Request is the request of the failed attempt.
	Request *http.Request
	// Response is the failed response; nil when Err is set.
	Response *http.Response
	// Err is the transport error of the failed attempt, if any.
	Err error
	// RetryAfter is the delay the server asked for (Retry-After,
	// retry-after-ms or x-ms-retry-after-ms), valid when HasRetryAfter is
	// true. The handler never retries sooner, whatever a policy returns.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// Policy decides whether to retry after a failed attempt, and after what
// delay. Implementations must be safe for concurrent use: one policy value
// serves every request through a handler.
//
// The built-in policies are NoRetry, Fixed, Linear, Exponential (the
// default), AzureStorageExponential and APIManagement; PolicyFunc turns a
// function into a Policy.
//
// # How the handler applies a policy
//
// The handler asks the policy only about attempts that failed in a
// retryable way: a status in RetryHandlerOptions.StatusCodes or a transport
// error, unless the policy is a Classifier that decides instead. It never
// resends a forward-only body, nor a non-idempotent request (a POST without
// an idempotency key) whose outcome is unknown: a 504 or another 5xx but
// 503, or a connection broken once the request had one (see
// RetryHandlerOptions.AssumeIdempotent). On top of whatever the policy
// answers, one rule set applies:
//
//   - Retry-After: when the failed response names a time to wait
//     (Retry-After, retry-after-ms or x-ms-retry-after-ms), the delay is the
//     longer of the policy's delay and that time. A policy can lengthen the
//     server's wait, never shorten it. A negative delay counts as zero.
//   - MaxRetries: with a Policy set, 0 (the zero value) leaves the count to
//     the policy alone; every built-in policy has its own documented count
//     (10 for Fixed, Linear and Exponential, 3 for AzureStorageExponential,
//     Count for APIManagement). MaxRetries > 0 is a ceiling: the handler
//     stops at whichever of MaxRetries and the policy's own count comes
//     first. MaxRetries < 0 means never retry. With no Policy, 0 means 10.
//   - MaxElapsed (default 1800 s): a retry whose delay would end more than
//     MaxElapsed after the first attempt started is not made.
//   - RetriesTimeLimit (when > 0): a retry whose delay would bring the total
//     time spent waiting between attempts past it is not made.
//   - ShouldRetry, when set, may veto any retry the policy allows.
//   - InitialDelay and MaxDelay configure the default policy only; they
//     neither shape nor cap another policy's delays or a Retry-After.
//
// When a limit, the policy or the context's deadline stops the retries, the
// handler returns the last failed response whole (with a nil error) or the
// last transport error at once, without waiting.
//
// Next (and ShouldRetry, and a Classifier) may read a.Response.Body, up to
// 64 KiB: what it reads is kept for the caller, who still reads the body
// whole.
type Policy interface {
	// Next is called with the failed attempt and the number of the retry
	// about to be made (a.Retry, 1 for the first retry). It returns the
	// delay before that retry, or false to stop retrying. The handler asks
	// at most once per failed attempt: the one answer is both the delay
	// and, for a throttle that names no wait, how long the throttle queue
	// holds the throttled target.
	Next(a Attempt) (delay time.Duration, retry bool)
}

// Step is the retry's place in a schedule that grows: the failures a
// backoff timed, Retry less Timed, at least 1. The built-in policies
// that grow (Linear, Exponential, AzureStorageExponential and
// APIManagement) grow with Step and count their retries with Retry, so
// that a request throttled three times with a Retry-After and then
// failing without one waits the first failure's delay, not the fourth's.
// Without such throttles Step is Retry.
func (a Attempt) Step() int { return max(a.Retry-a.Timed, 1) }

// PolicyFunc adapts an ordinary function to the Policy interface.
type PolicyFunc func(a Attempt) (time.Duration, bool)

// Next calls f(a).
func (f PolicyFunc) Next(a Attempt) (time.Duration, bool) { return f(a) }

// Exponential is the Graph design's default backoff. The delay
// before retry n (the Attempt's Step: 1 for the first retry, and for
// a failure that only throttles naming their wait came before) is
//
//	d(n)  = min(MaxDelay, InitialDelay · n²)
//	delay = d(n) · (1 − 0.2·u),  u uniform in [0, 1)
//
// so with the defaults the retries wait about 3, 12, 27, 48, 75, 108, 147,
// 180, 180, 180 s. As the Graph design asks, the backoff applies only when
// the server names no delay: when the failed response carries Retry-After,
// Exponential returns exactly that delay. The random offset only shortens a delay, by up to 20 %,
// so that clients throttled together do not retry in lockstep while no
// delay ever exceeds its schedule or MaxDelay.
type Exponential struct {
	// Retries is the number of retries. 0: 10 (DefaultMaxRetries).
	Retries int
	// InitialDelay is d(1). 0: 3 s.
	InitialDelay time.Duration
	// MaxDelay caps d(n). 0: 180 s.
	MaxDelay time.Duration
	// Random returns a number in [0, 1). nil: math/rand/v2.Float64.
	Random func() float64
}

// Next implements Policy.
func (p Exponential) Next(a Attempt) (time.Duration, bool) {
	if a.Retry > orDefaultInt(p.Retries, DefaultMaxRetries) {
		return 0, false
	}
	if a.HasRetryAfter {
		return a.RetryAfter, true
	}
	initial := orDefault(p.InitialDelay, DefaultInitialDelay)
	maxDelay := orDefault(p.MaxDelay, DefaultMaxDelay)
	n := a.Step()
	d := maxDelay
	// Compare in float64 so that a large retry number cannot overflow.
	if f := float64(initial) * float64(n) * float64(n); f < float64(maxDelay) {
		d = time.Duration(f)
	}
	// float64 cannot hold every Duration: near the top of the range the
	// product may round above d(n), and the jitter must only shorten.
	return min(scale(d, 1-0.2*draw(p.Random)), d), true
}

// Validate reports a negative field or an InitialDelay above MaxDelay.
func (p Exponential) Validate() error {
	if p.Retries < 0 {
		return invalid("Exponential", "Retries", p.Retries, "must not be negative")
	}
	if err := firstNegative("Exponential", duration{"InitialDelay", p.InitialDelay}, duration{"MaxDelay", p.MaxDelay}); err != nil {
		return err
	}
	if p.InitialDelay > 0 && p.MaxDelay > 0 && p.InitialDelay > p.MaxDelay {
		return invalid("Exponential", "InitialDelay", p.InitialDelay, "must not exceed MaxDelay")
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// draw returns a number in [0, 1) from random, or from math/rand/v2 when
// random is nil. Values a faulty source returns outside [0, 1) are clamped.
func draw(random func() float64) float64 {
	var u float64
	if random == nil {
		u = rand.Float64()
	} else {
		u = random()
	}
	switch {
	case !(u >= 0): // also catches NaN
		return 0
	case u >= 1:
		return 0.9999999999
	}
	return u
}

// scale multiplies d by f >= 0 without overflowing.
func scale(d time.Duration, f float64) time.Duration {
	return durations.FromNanos(float64(d) * f)
}

// Classifier is implemented by a Policy that decides itself which attempts
// failed in a retryable way, instead of the handler's status code list (for
// example APIManagement with a Condition). The handler still never resends
// a non-idempotent request whose outcome is unknown, nor retries a canceled
// context, a TLS verification failure or a malformed request.
type Classifier interface {
	// Retryable reports whether the attempt failed in a way worth
	// retrying. It is asked about every attempt, successful ones included.
	// ok false leaves the decision to the handler's status code list, so a
	// policy can classify some attempts and not others.
	Retryable(a Attempt) (retry, ok bool)
}
