package options

import (
	"fmt"
	"math"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
)

// Defaults of AzureStorageExponential, those of the Azure Storage client's
// RetryPolicies.RetryExponential.
const (
	DefaultStorageRetries      = 3
	DefaultStorageMinBackoff   = 3 * time.Second
	DefaultStorageMaxBackoff   = 90 * time.Second
	DefaultStorageDeltaBackoff = 30 * time.Second
)

// MaxAPIManagementCount is the largest Count APIManagement accepts, as the
// APIM retry policy's count attribute does.
const MaxAPIManagementCount = 50

// NoRetry is the policy that never retries: the first response or error
// is returned as is. As with MaxRetries < 0, a request the server's
// Retry-After still holds is answered at once with a stand-in 429 rather
// than held.
type NoRetry struct{}

// Next implements Policy; it always declines.
func (NoRetry) Next(Attempt) (time.Duration, bool) { return 0, false }

// Validate implements the validation NewRetryHandler runs; NoRetry is
// always valid.
func (NoRetry) Validate() error { return nil }

// Fixed retries up to Retries times, waiting Interval before each retry.
// The zero value retries 10 times, 3 s apart.
type Fixed struct {
	// Retries is the number of retries. 0: 10 (DefaultMaxRetries).
	Retries int
	// Interval is the delay before every retry. 0: 3 s (DefaultInitialDelay).
	Interval time.Duration
}

// Next implements Policy.
func (p Fixed) Next(a Attempt) (time.Duration, bool) {
	if a.Retry > orDefaultInt(p.Retries, DefaultMaxRetries) {
		return 0, false
	}
	return orDefault(p.Interval, DefaultInitialDelay), true
}

// Validate reports a negative field.
func (p Fixed) Validate() error {
	if p.Retries < 0 {
		return invalid("Fixed", "Retries", p.Retries, "must not be negative")
	}
	return firstNegative("Fixed", duration{"Interval", p.Interval})
}

// Linear retries up to Retries times; the delay before retry n (the
// Attempt's Step: 1 for the first retry) is
//
//	Interval + (n−1)·Delta
//
// The zero value retries 10 times after 3, 6, 9, ... s.
type Linear struct {
	// Retries is the number of retries. 0: 10 (DefaultMaxRetries).
	Retries int
	// Interval is the delay before the first retry. 0: 3 s
	// (DefaultInitialDelay).
	Interval time.Duration
	// Delta is added to the delay for every further retry. 0: Interval.
	// For a constant delay use Fixed.
	Delta time.Duration
}

// Next implements Policy.
func (p Linear) Next(a Attempt) (time.Duration, bool) {
	if a.Retry > orDefaultInt(p.Retries, DefaultMaxRetries) {
		return 0, false
	}
	interval := orDefault(p.Interval, DefaultInitialDelay)
	delta := orDefault(p.Delta, interval)
	return grow(interval, delta, float64(a.Step()-1)), true
}

// Validate reports a negative field.
func (p Linear) Validate() error {
	if p.Retries < 0 {
		return invalid("Linear", "Retries", p.Retries, "must not be negative")
	}
	return firstNegative("Linear", duration{"Interval", p.Interval}, duration{"Delta", p.Delta})
}

// AzureStorageExponential is the Azure Storage client library's default
// policy (RetryPolicies.RetryExponential). The delay before retry n
// (the Attempt's Step: 1 for the first retry) is
//
//	k     = n − 1
//	delay = min(MaxBackoff, MinBackoff + (2^k − 1)·DeltaBackoff·(0.8 + 0.4·u)),  u uniform in [0, 1)
//
// so the random part is within ±20 % of the delta and the first retry waits
// exactly MinBackoff. With the defaults (3 retries, 3 s, 90 s, 30 s) the
// retries wait 3 s, then 27–39 s (about 30 s), then 90 s: the schedule the
// Azure Storage team describes for a client that keeps timing out.
//
// Every zero field takes the storage client's default.
type AzureStorageExponential struct {
	// Retries is the number of retries. 0: 3.
	Retries int
	// MinBackoff is the delay before the first retry and the base of every
	// later one. 0: 3 s.
	MinBackoff time.Duration
	// MaxBackoff caps every delay, jitter included. 0: 90 s.
	MaxBackoff time.Duration
	// DeltaBackoff is the unit of growth, randomised by ±20 %. 0: 30 s.
	DeltaBackoff time.Duration
	// Random returns a number in [0, 1); it must be safe for concurrent
	// use. nil: math/rand/v2.Float64.
	Random func() float64
}

// Next implements Policy.
func (p AzureStorageExponential) Next(a Attempt) (time.Duration, bool) {
	if a.Retry > orDefaultInt(p.Retries, DefaultStorageRetries) {
		return 0, false
	}
	minB := orDefault(p.MinBackoff, DefaultStorageMinBackoff)
	maxB := orDefault(p.MaxBackoff, DefaultStorageMaxBackoff)
	delta := orDefault(p.DeltaBackoff, DefaultStorageDeltaBackoff)
	k := a.Step() - 1
	return min(maxB, grow(minB, delta, (math.Exp2(float64(k))-1)*jitter(p.Random))), true
}

// Validate reports a negative field or a MinBackoff above MaxBackoff
// (defaults resolved).
func (p AzureStorageExponential) Validate() error {
	const typ = "AzureStorageExponential"
	if p.Retries < 0 {
		return invalid(typ, "Retries", p.Retries, "must not be negative")
	}
	if err := firstNegative(typ, duration{"MinBackoff", p.MinBackoff}, duration{"MaxBackoff", p.MaxBackoff}, duration{"DeltaBackoff", p.DeltaBackoff}); err != nil {
		return err
	}
	if minB, maxB := orDefault(p.MinBackoff, DefaultStorageMinBackoff), orDefault(p.MaxBackoff, DefaultStorageMaxBackoff); minB > maxB {
		return invalid(typ, "MinBackoff", minB, fmt.Sprintf("must not exceed MaxBackoff (%v)", maxB))
	}
	return nil
}

// APIManagement mirrors Azure API Management's retry policy: the
// attributes count, interval, max-interval, delta, first-fast-retry and
// condition become Count, Interval, MaxInterval, Delta, FirstFastRetry and
// Condition. The fields that are set choose the schedule; the delay before
// retry n (the Attempt's Step: 1 for the first retry) is
//
//   - Interval only: fixed, Interval.
//   - Interval and Delta: linear, Interval + (n−1)·Delta.
//   - Interval, Delta and MaxInterval: exponential,
//     min(MaxInterval, Interval + (2^(n−1) − 1)·Delta·(0.8 + 0.4·u)), u uniform in [0, 1).
//
// The APIM reference gives the exponential formula as
// interval + 2^(count−1)·random(0.8·delta, 1.2·delta), but its own worked
// example (interval = delta = 10 s, max-interval = 100 s waits about 10, 20,
// 40, 80, 100, 100 s) does not fit it: that formula gives about 20, 30, 50,
// 90, 100 s. This type follows the worked example, hence the "− 1".
//
// With FirstFastRetry the first retry is sent at once; retry n ≥ 2 still
// waits the delay above for its own n. The first retry counts against Count.
//
// Condition, when set, decides whether an attempt failed in a retryable way
// in place of the handler's status code list (APIManagement then acts as a
// Classifier), so it can retry a 500, a transport error of an idempotent
// request, or decline a 503. Retries stop when it returns false or Count
// is used up, as in APIM.
//
// Count and Interval are required, as in APIM: the zero value is invalid.
type APIManagement struct {
	// Count is the number of retries, 1 to 50.
	Count int
	// Interval is the base delay between retries; it must be positive.
	Interval time.Duration
	// MaxInterval, when set together with Delta, makes the growth
	// exponential and caps every delay, jitter included. 0: none.
	MaxInterval time.Duration
	// Delta is the growth of the delay per retry. 0: none (fixed).
	Delta time.Duration
	// FirstFastRetry makes the first retry immediate.
	FirstFastRetry bool
	// Condition, when set, reports whether to retry after an attempt, in
	// place of the handler's status code list. The handler may call it
	// more than once per attempt, from many goroutines at once, so it
	// should be a pure function of the Attempt. nil: the status list
	// decides.
	Condition func(Attempt) bool
	// Random returns a number in [0, 1) for the exponential schedule's
	// jitter; it must be safe for concurrent use. nil: math/rand/v2.Float64.
	Random func() float64
}

// Next implements Policy.
func (p APIManagement) Next(a Attempt) (time.Duration, bool) {
	if a.Retry > p.Count {
		return 0, false
	}
	if p.Condition != nil && !p.Condition(a) {
		return 0, false
	}
	n := a.Step()
	switch {
	case p.FirstFastRetry && a.Retry <= 1:
		return 0, true
	case p.Delta <= 0:
		return max(p.Interval, 0), true
	case p.MaxInterval <= 0:
		return grow(p.Interval, p.Delta, float64(n-1)), true
	}
	return min(p.MaxInterval, grow(p.Interval, p.Delta, (math.Exp2(float64(n-1))-1)*jitter(p.Random))), true
}

// Retryable implements Classifier: when Condition is set it decides, and
// ok is true; when it is nil, ok is false and the handler's status code
// list decides.
func (p APIManagement) Retryable(a Attempt) (retry, ok bool) {
	if p.Condition == nil {
		return false, false
	}
	return p.Condition(a), true
}

// Validate reports a Count outside 1..50, a non-positive Interval, a
// negative MaxInterval or Delta, a MaxInterval without Delta, or a
// MaxInterval below Interval.
func (p APIManagement) Validate() error {
	const typ = "APIManagement"
	switch {
	case p.Count < 1 || p.Count > MaxAPIManagementCount:
		return invalid(typ, "Count", p.Count, fmt.Sprintf("must be between 1 and %d", MaxAPIManagementCount))
	case p.Interval <= 0:
		return invalid(typ, "Interval", p.Interval, "must be positive")
	case p.MaxInterval < 0:
		return invalid(typ, "MaxInterval", p.MaxInterval, "must not be negative")
	case p.Delta < 0:
		return invalid(typ, "Delta", p.Delta, "must not be negative")
	case p.MaxInterval > 0 && p.Delta == 0:
		return invalid(typ, "MaxInterval", p.MaxInterval, "needs a Delta: the exponential schedule grows by Delta")
	case p.MaxInterval > 0 && p.MaxInterval < p.Interval:
		return invalid(typ, "MaxInterval", p.MaxInterval, fmt.Sprintf("must not be below Interval (%v)", p.Interval))
	}
	return nil
}

var _ Classifier = APIManagement{}

func orDefaultInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// jitter returns a factor uniform in [0.8, 1.2), the ±20 % randomisation
// of the Azure Storage and APIM exponential schedules.
func jitter(random func() float64) float64 { return 0.8 + 0.4*draw(random) }

// grow returns base + step·f, saturating instead of overflowing and never
// below zero.
func grow(base, step time.Duration, f float64) time.Duration {
	if step == 0 || f == 0 {
		// Avoids 0·Inf = NaN when a huge retry number meets a zero step.
		return max(base, 0)
	}
	return durations.FromNanos(math.Round(float64(base) + float64(step)*f))
}
