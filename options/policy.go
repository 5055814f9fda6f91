package options

import (
	"math/rand/v2"
	"net/http"
	"time"
)

// Attempt is a failed attempt as a policy sees it.
type Attempt struct {
	// Retry is the retry about to be made: 1 for the first retry.
	Retry int
	// Elapsed is the time since the first attempt started.
	Elapsed time.Duration
	// Request is the request of the failed attempt.
	Request *http.Request
	// Response is the failed response; nil when Err is set.
	Response *http.Response
	// Err is the transport error of the failed attempt, if any.
	Err error
}

// Policy decides whether to retry after a failed attempt, and after what
// delay. Implementations must be safe for concurrent use: one policy value
// serves every request through a handler.
type Policy interface {
	Next(a Attempt) (delay time.Duration, retry bool)
}

// PolicyFunc adapts an ordinary function to the Policy interface.
type PolicyFunc func(a Attempt) (time.Duration, bool)

// Next calls f(a).
func (f PolicyFunc) Next(a Attempt) (time.Duration, bool) { return f(a) }

// Exponential is the Graph design's default backoff (R5, R6). The delay
// before retry n (1 for the first retry) is
//
//	d(n)  = min(MaxDelay, InitialDelay · n²)
//	delay = d(n) · (1 − 0.2·u),  u uniform in [0, 1)
//
// so with the defaults the retries wait about 3, 12, 27, 48, 75, 108, 147,
// 180, 180, 180 s. The random offset only shortens a delay, by up to 20 %,
// so that clients throttled together do not retry in lockstep while no
// delay ever exceeds its schedule or MaxDelay.
type Exponential struct {
	// Retries caps the number of retries; 0 leaves the cap to the handler's
	// MaxRetries.
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
	if p.Retries > 0 && a.Retry > p.Retries {
		return 0, false
	}
	initial := orDefault(p.InitialDelay, DefaultInitialDelay)
	maxDelay := orDefault(p.MaxDelay, DefaultMaxDelay)
	n := max(a.Retry, 1)
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
	if p.InitialDelay < 0 {
		return invalid("Exponential", "InitialDelay", p.InitialDelay, "must not be negative")
	}
	if p.MaxDelay < 0 {
		return invalid("Exponential", "MaxDelay", p.MaxDelay, "must not be negative")
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
	r := float64(d) * f
	if r >= float64(maxDuration) {
		return maxDuration
	}
	if r <= 0 {
		return 0
	}
	return time.Duration(r)
}

const maxDuration = time.Duration(1<<63 - 1)

// Classifier is implemented by a Policy that decides itself which attempts
// failed in a retryable way, instead of the handler's status code list (for
// example APIManagement with a Condition). The handler still never resends
// a non-idempotent request after a transport error, nor retries a canceled
// context or a TLS verification failure.
type Classifier interface {
	Retryable(a Attempt) bool
}
