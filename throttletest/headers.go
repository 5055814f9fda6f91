package throttletest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Budget is the state of a limiter at one instant, as a server announces
// it in rate-limit headers.
type Budget struct {
	// Limit is the quota: a bucket's burst, a window's quota.
	Limit float64
	// Remaining is what is left of it now.
	Remaining float64
	// Reset is the time until the budget is whole again: a bucket full, a
	// fixed window open, the oldest request out of a sliding window.
	Reset time.Duration
	// Window is the period the quota is granted for: a window's length,
	// or the time a bucket takes to fill from empty.
	Window time.Duration
}

// used is the fraction of the budget spent, 0 for a budget without limit.
func (b Budget) used() float64 {
	if b.Limit <= 0 {
		return 0
	}
	return (b.Limit - b.Remaining) / b.Limit
}

// Budgeter is a Limiter that can tell its budget, so that a Rule with
// Announce set can write it into the headers of its answers. Every
// limiter of this package is one.
type Budgeter interface {
	Budget(now time.Time) Budget
}

// Announce writes a limiter's budget into the headers of an answer, 2xx
// or 429, after the request was admitted or refused. When several rules
// apply, each announces in the order of Config.Rules.
type Announce func(h http.Header, b Budget)

// Budget reports the burst, the tokens left, and the time until the
// bucket is full.
func (t *tokenBucket) Budget(now time.Time) Budget {
	t.refill(now)
	return Budget{
		Limit:     t.burst,
		Remaining: max(0, t.tokens),
		Reset:     time.Duration((t.burst - max(0, t.tokens)) / t.rate * float64(time.Second)),
		Window:    time.Duration(t.burst / t.rate * float64(time.Second)),
	}
}

// Draft03 announces the budget in the IETF draft-03 fields RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset once the fraction from of it is
// spent (SharePoint starts at 0.8; 0 announces on every answer). When
// several rules announce, the one with the least remaining stays. It
// returns an error when from is outside [0, 1].
func Draft03(from float64) (Announce, error) {
	if !(from >= 0 && from <= 1) {
		return nil, fmt.Errorf("throttletest: Draft03(%v): from must be within [0, 1]", from)
	}
	return func(h http.Header, b Budget) {
		if b.used() < from {
			return
		}
		remaining := math.Floor(b.Remaining)
		if prev, err := strconv.ParseFloat(h.Get("RateLimit-Remaining"), 64); err == nil && prev <= remaining {
			return
		}
		h.Set("RateLimit-Limit", number(b.Limit))
		h.Set("RateLimit-Remaining", number(remaining))
		h.Set("RateLimit-Reset", number(b.Reset.Seconds()))
	}, nil
}

// CurrentDraft announces the budget in the current IETF draft's structured
// fields, `RateLimit-Policy: "policy";q=<limit>;w=<window>` and
// `RateLimit: "policy";r=<remaining>;t=<reset>`, on every answer; several
// rules add a member each. It returns an error when policy is empty or
// not printable ASCII.
func CurrentDraft(policy string) (Announce, error) {
	if policy == "" {
		return nil, fmt.Errorf("throttletest: CurrentDraft(%q): the policy needs a name", policy)
	}
	for _, c := range []byte(policy) {
		if c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("throttletest: CurrentDraft(%q): the name must be printable ASCII", policy)
		}
	}
	name := strconv.Quote(policy) // printable ASCII: Go's quoting is the RFC 9651 String's
	return func(h http.Header, b Budget) {
		h.Add("RateLimit-Policy", name+";q="+number(b.Limit)+";w="+number(b.Window.Seconds()))
		h.Add("RateLimit", name+";r="+number(math.Floor(b.Remaining))+";t="+number(b.Reset.Seconds()))
	}, nil
}

// CurrentDraftWhole announces the budget in the current draft's fields as
// CurrentDraft does, but in whole seconds, as the draft's Integer fields
// require: `RateLimit-Policy: "policy";q=<limit>;w=<window rounded up, at
// least 1>` and `RateLimit: "policy";r=<remaining>;t=<reset rounded up>`. A
// token bucket that refills within a fraction of a second then announces
// its burst per second, a tenth of what it admits at 400/s burst 40: a hint
// a client must check against what happens. It returns an error when
// policy is empty or not printable ASCII.
func CurrentDraftWhole(policy string) (Announce, error) {
	if _, err := CurrentDraft(policy); err != nil {
		return nil, err
	}
	name := strconv.Quote(policy)
	return func(h http.Header, b Budget) {
		window := max(1, math.Ceil(b.Window.Seconds()))
		h.Add("RateLimit-Policy", name+";q="+number(math.Floor(b.Limit))+";w="+number(window))
		h.Add("RateLimit", name+";r="+number(math.Floor(b.Remaining))+";t="+number(math.Ceil(b.Reset.Seconds())))
	}, nil
}

// GraphPercentage announces the budget as Microsoft Graph's Identity
// service does: x-ms-throttle-limit-percentage, the fraction of the budget
// spent, and x-ms-throttle-scope, once the fraction from is spent (Graph
// starts at 0.8). It returns an error when from is outside [0, 1].
func GraphPercentage(scope string, from float64) (Announce, error) {
	if !(from >= 0 && from <= 1) {
		return nil, fmt.Errorf("throttletest: GraphPercentage(%q, %v): from must be within [0, 1]", scope, from)
	}
	return func(h http.Header, b Budget) {
		if used := b.used(); used >= from {
			h.Set("x-ms-throttle-limit-percentage", strconv.FormatFloat(used, 'f', 2, 64))
			h.Set("x-ms-throttle-scope", scope)
		}
	}, nil
}

// number writes a figure as an integer when it is whole and otherwise with
// up to three decimals, the most an RFC 9651 Decimal holds: a bucket that
// refills within milliseconds cannot be told in whole seconds.
func number(v float64) string {
	v = math.Ceil(v*1000) / 1000
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
