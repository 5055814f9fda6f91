// Package effective resolves the documented defaults of
// options.RetryHandlerOptions into what the retry handler enforces: the
// policy it asks, the limits on top of it and the status codes it retries.
package effective

import (
	"net/http"
	"slices"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Limits are the ceilings the handler enforces on top of any policy.
type Limits struct {
	// MaxRetries is the cap on retries; 0 means no cap of its own (a policy
	// decides), < 0 means never retry.
	MaxRetries       int
	MaxElapsed       time.Duration
	RetriesTimeLimit time.Duration
}

// LimitsOf returns o's ceilings with defaults resolved: MaxRetries
// defaults to 10 only when no Policy is set, MaxElapsed to 1800 s.
func LimitsOf(o *options.RetryHandlerOptions) Limits {
	l := Limits{MaxRetries: o.MaxRetries, MaxElapsed: o.MaxElapsed, RetriesTimeLimit: o.RetriesTimeLimit}
	if l.MaxRetries == 0 && o.Policy == nil {
		l.MaxRetries = options.DefaultMaxRetries
	}
	if l.MaxElapsed == 0 {
		l.MaxElapsed = options.DefaultMaxElapsed
	}
	return l
}

// Policy returns o.Policy, or the default backoff built from InitialDelay,
// MaxDelay and MaxRetries when it is nil.
func Policy(o *options.RetryHandlerOptions) options.Policy {
	if o.Policy != nil {
		return o.Policy
	}
	return options.Exponential{Retries: max(o.MaxRetries, 0), InitialDelay: o.InitialDelay, MaxDelay: o.MaxDelay}
}

// statusCodes are retried when RetryHandlerOptions.StatusCodes is empty.
var statusCodes = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// Retryable reports whether status is one of the status codes o retries.
func Retryable(o *options.RetryHandlerOptions, status int) bool {
	codes := o.StatusCodes
	if len(codes) == 0 {
		codes = statusCodes
	}
	return slices.Contains(codes, status)
}
