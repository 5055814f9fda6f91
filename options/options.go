// Package options holds the configuration of the retry handler: the
// handler-wide defaults, the per-request override carried as a Kiota
// RequestOption, their validation, and the retry policies that compute
// backoff delays.
package options

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	abstractions "github.com/microsoft/kiota-abstractions-go"
	"go.opentelemetry.io/otel/metric"
)

// Defaults applied to zero-valued fields of RetryHandlerOptions, as the
// Graph retry handler design sets them.
const (
	DefaultMaxRetries   = 10
	DefaultInitialDelay = 3 * time.Second
	DefaultMaxDelay     = 180 * time.Second
	DefaultMaxElapsed   = 1800 * time.Second
)

// ErrInvalidOption is wrapped by every validation error, so callers can
// tell a configuration mistake from a failed request with errors.Is.
var ErrInvalidOption = errors.New("invalid retry option")

var retryOptionKey = abstractions.RequestOptionKey{Key: "kiota-resilience-go.RetryHandlerOptions"}

// RetryHandlerOptions configures the retry handler. Passed to
// middleware.NewRetryHandler it is the handler's configuration; added to a
// Kiota RequestInformation with AddRequestOptions (or stored in a request's
// context under GetKey()), it replaces the handler's options for that request.
//
// Every zero-valued field takes its documented default, so the zero value is
// the Graph design's default behaviour.
type RetryHandlerOptions struct {
	// MaxRetries caps the number of retries after the first attempt.
	// 0 means the default, 10, unless Policy is set, in which case the
	// policy's own count governs alone; < 0 means never retry. See Policy
	// for how it combines with a policy's count. With retries off, a
	// request whose URL the server's Retry-After still holds is answered
	// at once with a stand-in 429 instead of held (see HandBack).
	MaxRetries int
	// InitialDelay is the first delay of the default backoff. 0: 3 s.
	InitialDelay time.Duration
	// MaxDelay caps one delay computed by the default backoff. 0: 180 s.
	// It does not cap a Retry-After the server sends.
	MaxDelay time.Duration
	// MaxElapsed bounds the time from the start of the first attempt to
	// the start of the last retry: a retry whose delay would end past it is
	// not made and the failed response is returned at once. 0: 1800 s.
	MaxElapsed time.Duration
	// RetriesTimeLimit, when > 0, bounds the cumulative time spent waiting
	// between attempts: before each retry, that time plus the next delay
	// (the Retry-After value when present) is compared with the limit and,
	// if it would exceed it, the failed response is returned at once.
	// 0: off.
	RetriesTimeLimit time.Duration
	// Policy decides whether to retry a failed attempt and after what delay.
	// nil: the default backoff, Exponential built from InitialDelay,
	// MaxDelay and MaxRetries. The handler's rules, documented on the
	// Policy type, apply on top of any policy.
	Policy Policy
	// StatusCodes lists the response status codes that count as a failed,
	// retryable attempt. Empty: 429, 503 and 504.
	StatusCodes []int
	// ShouldRetry, when set, is asked before every retry and may veto it by
	// returning false; the failed response or error is then returned as is.
	ShouldRetry func(Attempt) bool
	// AssumeIdempotent declares that every request through the handler (or,
	// set per request, that request) may be executed twice without harm,
	// as if it carried an Idempotency-Key. A request whose outcome is
	// unknown (a 504 or another 5xx other than 503 listed in StatusCodes, a
	// connection broken once the request had one) is then resent even
	// when its method is not idempotent. false: such a POST or PATCH
	// without an Idempotency-Key or X-Idempotency-Key header is never
	// resent; 429 and 503 are refusals and are resent for every method.
	AssumeIdempotent bool
	// AttemptTimeout, when > 0, bounds each attempt separately, from sending
	// the request until the response headers arrive. An attempt that times
	// out counts as a transport error (retried for idempotent requests only).
	// 0: no per-attempt timeout.
	AttemptTimeout time.Duration
	// Queue configures the throttle-aware queue; the zero value turns it on.
	// Set per request, Queue.Disabled exempts that request from the queue.
	Queue QueueOptions
	// Batch configures how a JSON batch whose items were throttled is
	// completed; the zero value turns completion on. Set per request,
	// Batch.Disabled returns that batch as the server answered it.
	Batch BatchOptions
	// Outage configures hold-and-probe of a host that is down and the
	// budget on retries of failures; the zero value turns both on.
	Outage OutageOptions
	// HandBack says which waits are handed back to the caller at once
	// instead of waited out. 0: HandBackNone, every wait is waited out.
	HandBack HandBack
	// Clock is the source of time for delays, limits and timeouts.
	// nil: the system clock. It is a handler-wide setting: the handler's
	// clock is used even when a per-request option sets its own.
	Clock Clock
	// MeterProvider is the source of the handler's metric instruments
	// (see package observability). nil: otel.GetMeterProvider(), the
	// global provider, which forwards to whatever provider the
	// application installs, even later. It is a handler-wide setting: it
	// is ignored on per-request options. Traces always use the global
	// tracer provider, as the Kiota design asks.
	MeterProvider metric.MeterProvider
}

// GetKey returns the key under which the options are stored in a request's
// context, making *RetryHandlerOptions a Kiota RequestOption.
func (o *RetryHandlerOptions) GetKey() abstractions.RequestOptionKey {
	return retryOptionKey
}

// Key returns the RequestOptionKey used by every *RetryHandlerOptions.
func Key() abstractions.RequestOptionKey { return retryOptionKey }

// Validate reports the first field that holds an invalid value, naming the
// field and the value. The zero value is valid.
func (o *RetryHandlerOptions) Validate() error {
	if err := firstNegative("RetryHandlerOptions",
		duration{"InitialDelay", o.InitialDelay},
		duration{"MaxDelay", o.MaxDelay},
		duration{"MaxElapsed", o.MaxElapsed},
		duration{"RetriesTimeLimit", o.RetriesTimeLimit},
		duration{"AttemptTimeout", o.AttemptTimeout},
		duration{"Queue.Recovery", o.Queue.Recovery},
		duration{"Outage.MaxProbeInterval", o.Outage.MaxProbeInterval},
	); err != nil {
		return err
	}
	if err := o.HandBack.validate(); err != nil {
		return err
	}
	if o.InitialDelay > 0 && o.MaxDelay > 0 && o.InitialDelay > o.MaxDelay {
		return invalid("RetryHandlerOptions", "InitialDelay", o.InitialDelay, fmt.Sprintf("must not exceed MaxDelay (%v)", o.MaxDelay))
	}
	if o.Queue.MaxTracked < 0 {
		return invalid("RetryHandlerOptions", "Queue.MaxTracked", o.Queue.MaxTracked, "must not be negative")
	}
	for _, root := range o.Queue.Roots {
		if !strings.HasPrefix(root, "/") || strings.Trim(root, "/") == "" {
			return invalid("RetryHandlerOptions", "Queue.Roots", fmt.Sprintf("%q", root), "must be a path below \"/\", starting with \"/\"")
		}
	}
	if o.Queue.Store != nil && isNil(o.Queue.Store) {
		return invalid("RetryHandlerOptions", "Queue.Store", fmt.Sprintf("%T(nil)", o.Queue.Store), "is a nil value (leave Store nil to keep the queue's state in this process)")
	}
	for _, code := range o.StatusCodes {
		if code < 100 || code > 999 {
			return invalid("RetryHandlerOptions", "StatusCodes", code, "is not an HTTP status code")
		}
	}
	if o.Policy != nil && isNil(o.Policy) {
		// A typed nil would panic in Validate or Next, on the first
		// failed request rather than here.
		return invalid("RetryHandlerOptions", "Policy", fmt.Sprintf("%T(nil)", o.Policy), "is a nil value (leave Policy nil for the default backoff)")
	}
	if v, ok := o.Policy.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("RetryHandlerOptions.Policy: %w", err)
		}
	}
	return nil
}

// isNil reports whether v holds a nil pointer, func, map, slice, channel
// or interface.
func isNil(v any) bool {
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// invalid builds a validation error that names the type, field and value.
func invalid(typ, field string, value any, why string) error {
	return fmt.Errorf("%w: %s.%s = %v %s", ErrInvalidOption, typ, field, value, why)
}

// duration is a field of typ that firstNegative checks.
type duration struct {
	name string
	d    time.Duration
}

// firstNegative returns the error for the first of fields below zero, or
// nil.
func firstNegative(typ string, fields ...duration) error {
	for _, f := range fields {
		if f.d < 0 {
			return invalid(typ, f.name, f.d, "must not be negative")
		}
	}
	return nil
}

// QueueOptions configures the throttle-aware queue that holds requests
// back while their target is throttled. The zero value turns the
// queue on with its defaults.
type QueueOptions struct {
	// Disabled turns the queue off: every attempt is sent when its own
	// delay has passed, whatever other requests learned about the throttle.
	Disabled bool
	// Recovery is how long after a throttle ends requests that match it
	// are still released through the queue's pacer, so that a release does
	// not set off a new wave of throttling. 0: 10 s.
	Recovery time.Duration
	// MaxTracked bounds how many throttled URLs, paths, path prefixes and
	// throttle scopes the queue remembers per host, of each kind; the ones
	// throttled longest ago are forgotten first, and the newest throttle is
	// always kept. 0: 1024. Handler-wide: ignored on per-request options.
	MaxTracked int
	// Roots are path prefixes that name a service root, such as
	// "/api/data/v9.2": the queue's rules count a request's segments below
	// the longest root its path starts with. Without a matching root, a
	// leading version segment (Graph's v1.0 and beta, v1, v2.1) is the root,
	// so that /v1.0/users/{id} and /v1.0/sites/root share no segment.
	// Each must start with "/". Handler-wide: ignored on per-request options.
	Roots []string
	// MeterProvider is the source of the queue's gauges: the pace it
	// learned and the budget the server announced, per throttle scope (see
	// package observability). nil: the handler's MeterProvider.
	// Handler-wide: ignored on per-request options.
	MeterProvider metric.MeterProvider
	// Store shares what the queue learns with the other processes of a
	// fleet: the holds servers named, the hosts throttled, each budget's
	// pace and a fleet-wide release schedule (module redisstore implements
	// it on Redis; docs/fleet.md). nil: the queue keeps its state in this
	// process only. Handler-wide: ignored on per-request options.
	Store Store
	// Concurrency names the concurrency cap a request falls under, if any:
	// the key of the target it counts against (Outlook's mailbox, say)
	// and how many requests with that key may be out at once, as a server
	// that limits concurrent requests counts them (graph.MailboxConcurrency
	// gives Outlook's 4 per mailbox). An empty key or a limit below 1 means
	// none. Caps hold only requests to a host that was throttled, here or
	// (with a Store) anywhere in the fleet, as every other hold does; with
	// a Store that implements SlotStore a cap is kept fleet-wide. nil: no
	// caps named, and the queue learns those its budgets' answers show, in
	// this process (package throttle's model; graph.NewClient sets
	// graph.MailboxConcurrency; NoConcurrency turns that off).
	// Handler-wide: ignored on per-request options.
	Concurrency func(req *http.Request) (key string, limit int)
}

// NoConcurrency is a QueueOptions.Concurrency that caps no request, for a
// client whose builder sets a cap by default (graph.NewClient) when the
// server's concurrency limits are known not to apply.
func NoConcurrency(*http.Request) (key string, limit int) { return "", 0 }

// BatchOptions configures the completion of JSON batches: a POST to
// {service root}/$batch (as Microsoft Graph serves it) answered 200 with
// items answered 429, 503 or 504 is resent, those items only, until every
// item has its final answer or a limit stops it, and the caller gets one
// batch response holding every item's last answer in the original order.
// The batch counts as one request: MaxRetries, MaxElapsed,
// RetriesTimeLimit, the context's deadline and ShouldRetry apply to it as a
// whole. While items remain to be resent, Policy and ShouldRetry see the
// batch as a failed attempt whose status is the most urgent of theirs
// (429, then 503, then 504) and whose Attempt.RetryAfter is the longest
// Retry-After among them. The zero value turns completion on.
type BatchOptions struct {
	// Disabled returns every batch response as the server sent it: its
	// throttled items are the caller's to resend.
	Disabled bool
}
