package throttletest

import (
	"fmt"
	"net/http"
	"time"
)

// Limiter is one budget of the server: a token bucket, a window, a quota
// per mailbox. The server calls it with its lock held, so an
// implementation need not be safe for concurrent use.
type Limiter interface {
	// Wait returns how long until a request of the given cost may pass at
	// now; 0 when it may pass now. It must not consume anything.
	Wait(now time.Time, cost float64) time.Duration
	// Take consumes cost at now, after every limiter that applies to the
	// request answered 0 to Wait for the same instant.
	Take(now time.Time, cost float64)
}

// Refuser is a Limiter that counts refused requests too, as HAProxy's
// stick-table counters do: a client that keeps sending while refused stays
// refused. The server calls Refuse on every limiter that applies to a
// request it refuses.
type Refuser interface {
	Refuse(now time.Time, cost float64)
}

// Releaser is a Limiter that counts requests in flight, as a server that
// serves a few requests at once per target does (Outlook: 4 per mailbox):
// the server calls Release on every Releaser that admitted a request once
// it has served it (Config.ServeTime).
type Releaser interface {
	Release(now time.Time, cost float64)
}

// Concurrent returns a Rule.Limiter that gives every key limit requests
// in flight at once; one more is refused with a Retry-After of one second,
// as Graph answers a mailbox's fifth concurrent request.
func Concurrent(limit int) func(key string, now time.Time) Limiter {
	return func(string, time.Time) Limiter { return &concurrency{limit: float64(limit)} }
}

type concurrency struct{ limit, inflight float64 }

// busyWait is the Retry-After of a request refused for concurrency: the
// server cannot know when a request in flight ends, and Graph names a
// second.
const busyWait = time.Second

func (c *concurrency) Wait(_ time.Time, cost float64) time.Duration {
	if c.inflight+cost > c.limit {
		return busyWait
	}
	return 0
}
func (c *concurrency) Take(_ time.Time, cost float64)    { c.inflight += cost }
func (c *concurrency) Release(_ time.Time, cost float64) { c.inflight = max(c.inflight-cost, 0) }

// Rule throttles the requests it matches with budgets of their own: one
// Limiter per key that Match returns, so that one rule can model a budget
// per mailbox, per team or per item.
type Rule struct {
	// Name names the rule in errors and in Stats.ThrottledBy.
	Name string
	// Match returns the budget key of the request, and false when the
	// rule does not apply to it. Required.
	Match func(r *http.Request) (key string, ok bool)
	// Limiter makes the limiter of a key the first time the key is seen,
	// at now. Required.
	Limiter func(key string, now time.Time) Limiter
	// Cost is what one request draws from the budget. nil: 1.
	Cost func(r *http.Request) float64
	// RetryAfter turns the time until the budget admits the request into
	// the Retry-After value sent, in seconds. nil: whole seconds rounded
	// up, at least 1, as Graph sends it. A value below 1 sends none.
	RetryAfter func(wait time.Duration) int64
	// Status is the status of a refusal. 0: 429 Too Many Requests; nginx's
	// limit_req answers 503 unless told otherwise.
	Status int
	// OmitRetryAfter sends refusals without Retry-After, as nginx and
	// HAProxy do unless configured to add one.
	OmitRetryAfter bool
	// Announce writes the budget of the request's limiter into the
	// headers of every answer to a request the rule matches, when the
	// limiter is a Budgeter. nil: the rule announces nothing.
	Announce Announce
}

func (r Rule) validate(i int) error {
	switch {
	case r.Match == nil:
		return fmt.Errorf("throttletest: Config.Rules[%d] (%q).Match is nil", i, r.Name)
	case r.Limiter == nil:
		return fmt.Errorf("throttletest: Config.Rules[%d] (%q).Limiter is nil", i, r.Name)
	case r.Status != 0 && (r.Status < 400 || r.Status > 599):
		return fmt.Errorf("throttletest: Config.Rules[%d] (%q).Status = %d must be 0 or an error status", i, r.Name, r.Status)
	}
	return nil
}

// BucketLimiter returns a Rule.Limiter that gives every key a token
// bucket of its own, full at first use.
func BucketLimiter(b Bucket) func(key string, now time.Time) Limiter {
	return func(_ string, now time.Time) Limiter { return newTokenBucket(b, now) }
}

// ruleState is a rule and the limiters of the keys seen so far.
type ruleState struct {
	Rule
	limiters map[string]Limiter
}

// applying returns the limiter of the request's key under the rule, made
// on first use, and the request's cost; nil when the rule does not apply.
func (rs *ruleState) applying(r *http.Request, now time.Time) (Limiter, float64) {
	key, ok := rs.Match(r)
	if !ok {
		return nil, 0
	}
	l, ok := rs.limiters[key]
	if !ok {
		l = rs.Limiter(key, now)
		rs.limiters[key] = l
	}
	cost := 1.0
	if rs.Cost != nil {
		cost = rs.Cost(r)
	}
	return l, cost
}

// refusal returns the status of a refusal under the rule.
func (rs *ruleState) refusal() int {
	if rs.Status != 0 {
		return rs.Status
	}
	return http.StatusTooManyRequests
}

func (rs *ruleState) retryAfter(wait time.Duration) int64 {
	if rs.RetryAfter != nil {
		return rs.RetryAfter(wait)
	}
	return retryAfterSeconds(wait)
}
