package options

import (
	"fmt"
	"time"
)

// DefaultMaxProbeInterval is the default of OutageOptions.MaxProbeInterval.
// A probe is one request, so a host that is down costs at most one
// request a second; and a caller waits at most about a second past the
// host's recovery before its held request is released.
const DefaultMaxProbeInterval = time.Second

// OutageOptions configures how the handler treats a host that is down
// (every answer a failure that is not a throttle: 502, 503 or 504 without
// Retry-After, a refused or broken connection) and the budget that bounds
// the retries of failures. The zero value turns both on. See
// docs/outages.md for the model.
type OutageOptions struct {
	// Disabled turns hold-and-probe and the retry budget off: every
	// retry of a failure waits its own backoff and is sent, whatever other
	// requests learned of the host. Set per request, it exempts that
	// request; its answers still tell the others.
	Disabled bool
	// MaxProbeInterval caps the spacing of the probes sent to a host that
	// is down: each failed probe sets the next one the probing request's
	// own backoff later, no further than this. 0: 1 s.
	// Handler-wide: ignored on per-request options.
	MaxProbeInterval time.Duration
	// OnStateChange, when set, is called each time the handler's belief
	// about a host changes: it was seen down, a probe went, it is up
	// again. It runs in the goroutine of the request whose answer (or
	// probe) changed the state, after the handler's locks are released,
	// and must not block. nil: none. Handler-wide: ignored on per-request
	// options.
	OnStateChange func(host string, state HostState, at time.Time)
}

// HostState is what the handler believes of a host.
type HostState int

const (
	// HostUp: the host answers; its requests go as their own delays say.
	HostUp HostState = iota
	// HostDown: every recent answer was a failure; its requests are held
	// until a probe shows it is back.
	HostDown
	// HostProbing: the host is down and one request is out to test it.
	HostProbing
)

// String returns "up", "down" or "probing", the values of the host state
// attribute in telemetry.
func (s HostState) String() string {
	switch s {
	case HostUp:
		return "up"
	case HostDown:
		return "down"
	case HostProbing:
		return "probing"
	}
	return fmt.Sprintf("HostState(%d)", int(s))
}

// HandBack says which waits the handler hands back to its caller instead
// of waiting them out, for callers that reschedule work themselves (a
// worker serving many tenants). A request handed back ends at once; the
// caller reads when it may be tried again with middleware.RetryAt.
type HandBack int

const (
	// HandBackNone waits out every delay and hold within the request's
	// limits. The default.
	HandBackNone HandBack = iota
	// HandBackThrottles returns a throttled answer (a 429, or a 503 or 504
	// naming a Retry-After) at once instead of waiting to retry it, and a
	// request the throttle queue would hold at once with an error, no
	// attempt sent. Failures still retry as the policy says.
	HandBackThrottles
	// HandBackAll also returns a failed answer at once instead of waiting
	// its backoff, and a request held behind a host that is down at once
	// with an error, no attempt sent.
	HandBackAll
)

// String returns the constant's name without its prefix: "none",
// "throttles" or "all".
func (h HandBack) String() string {
	switch h {
	case HandBackNone:
		return "none"
	case HandBackThrottles:
		return "throttles"
	case HandBackAll:
		return "all"
	}
	return fmt.Sprintf("HandBack(%d)", int(h))
}

// validate reports a HandBack value that is none of the constants.
func (h HandBack) validate() error {
	if h < HandBackNone || h > HandBackAll {
		return invalid("RetryHandlerOptions", "HandBack", int(h), "is not one of HandBackNone, HandBackThrottles, HandBackAll")
	}
	return nil
}
