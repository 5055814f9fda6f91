// Package ratelimit reads the budget a server announces in its response
// headers: the IETF draft-03 RateLimit-Limit, -Remaining and -Reset fields
// (SharePoint, OneDrive), the current draft's RateLimit-Policy and RateLimit
// structured fields, Microsoft Graph's x-ms-throttle-limit-percentage with
// x-ms-throttle-scope, and Azure Resource Manager's
// x-ms-ratelimit-remaining-* counters.
//
// Servers send these to say how much is left before they throttle, so a
// client can slow down before its first 429 and send nothing into a budget
// that is spent. A value that does not parse is ignored; Parse never fails.
package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
)

// NearlySpentAt is the fraction of a budget used from which Budget.NearlySpent
// reports true: 0.8, where SharePoint and Graph start announcing budgets.
const NearlySpentAt = 0.8

// Budget is what a server announced about one of its budgets in one
// response. Every figure is optional: zero means the server did not say,
// except Remaining, which counts only when HasRemaining is set.
type Budget struct {
	// Name is the policy or scope the server named: the current draft's
	// policy name, Graph's x-ms-throttle-scope, or the ARM counter
	// ("subscription-reads", "Microsoft.Compute/HighCostGet3Min").
	Name string
	// Limit is the budget's quota per window, in the server's units.
	Limit float64
	// Remaining is what is left of the budget, in the same units.
	Remaining float64
	// HasRemaining reports that the server named Remaining; a zero
	// Remaining without it says nothing.
	HasRemaining bool
	// Used is the fraction of the budget used: 1 is all of it, and Graph
	// sends up to 1.8 when a client has gone past it. Set from Limit and
	// Remaining when the server sent both.
	Used float64
	// Window is the period the quota is granted for.
	Window time.Duration
	// Reset is when the budget is restored, at least in part.
	Reset time.Time
}

// Spent reports whether the server said the budget has nothing left for
// another request: nothing should be sent into it before Reset (or, when
// Reset is zero, before the server says more).
func (b Budget) Spent() bool {
	return b.HasRemaining && b.Remaining < 1 || b.Used >= 1
}

// NearlySpent reports whether the budget is spent or used to at least
// NearlySpentAt of its quota: time to pace requests so as not to run into it.
func (b Budget) NearlySpent() bool {
	return b.Spent() || b.Used >= NearlySpentAt
}

// tighter reports whether b leaves less room than c: a spent budget before
// a nearly spent one before the rest, then the larger fraction used, the
// smaller remainder, and the later reset.
func (b Budget) tighter(c Budget) bool {
	if b.Spent() != c.Spent() {
		return b.Spent()
	}
	if b.NearlySpent() != c.NearlySpent() {
		return b.NearlySpent()
	}
	if b.Used != c.Used {
		return b.Used > c.Used
	}
	if b.HasRemaining != c.HasRemaining {
		return b.HasRemaining
	}
	if b.Remaining != c.Remaining {
		return b.Remaining < c.Remaining
	}
	if !b.Reset.Equal(c.Reset) {
		return b.Reset.After(c.Reset)
	}
	return b.Name < c.Name // only so that the choice does not depend on map order
}

// Bounds on what one field may hold before it is ignored whole. Servers
// announce one policy, or a handful (Graph, SharePoint and ARM send one to
// three, each under a hundred bytes), and a field is parsed for every
// answer it comes in: a field past these bounds announces nothing a client
// could follow, and parsing it would let a server make every request pay
// for its size.
const (
	// maxFieldBytes bounds a field's length, all its lines together.
	maxFieldBytes = 4 << 10
	// maxPolicies bounds the policies (list members) a field names.
	maxPolicies = 32
)

// Parse returns the tightest budget the response headers h announce, with
// reset times counted from now (when the response arrived), and false when
// they announce none that parses.
func Parse(h http.Header, now time.Time) (Budget, bool) {
	var best Budget
	found := false
	for _, b := range ParseAll(h, now) {
		if !found || b.tighter(best) {
			best, found = b, true
		}
	}
	return best, found
}

// ParseAll returns every budget the response headers h announce, in no
// particular order, with reset times counted from now.
func ParseAll(h http.Header, now time.Time) []Budget {
	var out []Budget
	add := func(b Budget, ok bool) {
		if ok {
			if b.Limit > 0 && b.HasRemaining && b.Used == 0 {
				b.Used = max(0, (b.Limit-b.Remaining)/b.Limit)
			}
			out = append(out, b)
		}
	}
	add(draft03(h, now))
	for _, b := range structured(h, now) {
		add(b, true)
	}
	add(graphPercentage(h))
	for _, b := range arm(h) {
		add(b, true)
	}
	return out
}

// draft03 reads RateLimit-Limit, -Remaining and -Reset. The limit may carry
// quota policies ("100, 100;w=60", or "100;w=60" alone): the first value is
// the limit, and a w parameter on a policy of that value is its window.
func draft03(h http.Header, now time.Time) (Budget, bool) {
	var b Budget
	limit, _ := field(h["Ratelimit-Limit"])
	policies := strings.Split(limit, ",")
	if len(policies) > maxPolicies {
		policies = nil
	}
	for i, policy := range policies {
		quota, params, _ := strings.Cut(policy, ";")
		v, ok := number(quota)
		if i == 0 && ok && v > 0 {
			b.Limit = v
		}
		if !ok || v != b.Limit || b.Limit == 0 {
			continue
		}
		for _, kv := range strings.Split(params, ";") {
			if k, w, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == "w" {
				if s, ok := number(w); ok && s > 0 {
					b.Window = seconds(s)
				}
			}
		}
	}
	if v, ok := number(h.Get("RateLimit-Remaining")); ok {
		b.Remaining, b.HasRemaining = v, true
	}
	if v, ok := number(h.Get("RateLimit-Reset")); ok {
		b.Reset = now.Add(seconds(v))
	}
	return b, b.HasRemaining || b.Limit > 0
}

// structured reads the current draft's RateLimit fields, one budget per
// policy, with the quota and window of the RateLimit-Policy member of the
// same name. A policy announced without its RateLimit says nothing about
// what is left and is left out.
func structured(h http.Header, now time.Time) []Budget {
	policies := map[string]member{}
	if f, ok := field(h["Ratelimit-Policy"]); ok {
		if ms, err := parseList(f); err == nil {
			for _, m := range ms {
				policies[m.name] = m
			}
		}
	}
	f, ok := field(h["Ratelimit"])
	if !ok {
		return nil
	}
	states, err := parseList(f)
	if err != nil {
		return nil
	}
	var out []Budget
	for _, m := range states {
		r, ok := m.params["r"]
		if !ok || !r.isNum || r.num < 0 {
			continue
		}
		b := Budget{Name: m.name, Remaining: r.num, HasRemaining: true}
		if t, ok := m.params["t"]; ok && t.isNum && t.num >= 0 {
			b.Reset = now.Add(seconds(t.num))
		}
		if p, ok := policies[m.name]; ok {
			if q, ok := p.params["q"]; ok && q.isNum && q.num > 0 {
				b.Limit = q.num
			}
			if w, ok := p.params["w"]; ok && w.isNum && w.num > 0 {
				b.Window = seconds(w.num)
			}
		}
		out = append(out, b)
	}
	return out
}

// maxUsed bounds the fraction Graph's percentage header may name: Graph
// documents 0.8 to 1.8, and anything far outside that is not this header.
const maxUsed = 10

// graphPercentage reads x-ms-throttle-limit-percentage, the fraction of its
// limit a client has used, and x-ms-throttle-scope, the budget it is of.
func graphPercentage(h http.Header) (Budget, bool) {
	v, ok := number(h.Get("x-ms-throttle-limit-percentage"))
	if !ok || v > maxUsed {
		return Budget{}, false
	}
	return Budget{Name: strings.TrimSpace(h.Get("x-ms-throttle-scope")), Used: v}, true
}

// armPrefix starts the names of ARM's remaining-request counters.
const armPrefix = "X-Ms-Ratelimit-Remaining-"

// arm reads ARM's x-ms-ratelimit-remaining-<scope>-<operation> counters,
// each a count of the requests left, and x-ms-ratelimit-remaining-resource,
// a list of "policy;count" pairs.
func arm(h http.Header) []Budget {
	var out []Budget
	for name, values := range h {
		canonical := http.CanonicalHeaderKey(name)
		if !strings.HasPrefix(canonical, armPrefix) || len(values) == 0 {
			continue
		}
		counter := strings.ToLower(canonical[len(armPrefix):])
		if counter == "resource" {
			f, ok := field(values)
			pairs := strings.Split(f, ",")
			if !ok || len(pairs) > maxPolicies {
				continue
			}
			for _, pair := range pairs {
				policy, count, ok := strings.Cut(pair, ";")
				if v, valid := number(count); ok && valid {
					out = append(out, Budget{Name: strings.TrimSpace(policy), Remaining: v, HasRemaining: true})
				}
			}
			continue
		}
		if v, ok := number(values[0]); ok {
			out = append(out, Budget{Name: counter, Remaining: v, HasRemaining: true})
		}
	}
	return out
}

// field returns the lines of a field joined as one, and false, with
// nothing, when together they are longer than maxFieldBytes.
func field(lines []string) (string, bool) {
	n := 0
	for _, l := range lines {
		if n += len(l) + 2; n > maxFieldBytes+2 {
			return "", false
		}
	}
	return strings.Join(lines, ", "), true
}

// maxNumber bounds the figures read: far above any real quota, and small
// enough that a duration of that many seconds does not overflow.
const maxNumber = 1e9

// number reads a non-negative decimal number written plainly ("12",
// "0.85", " 3 "): no sign, exponent, hexadecimal, infinity or NaN.
func number(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 32 {
		return 0, false
	}
	dots := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '.':
			dots++
		case !isDigit(s[i]):
			return 0, false
		}
	}
	if dots > 1 || s == "." {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v > maxNumber {
		return 0, false
	}
	return v, true
}

// seconds turns a non-negative count of seconds into a duration of at most
// maxNumber seconds, so that adding it to a time cannot overflow.
func seconds(s float64) time.Duration {
	return durations.FromSeconds(min(s, maxNumber))
}

// Announced reports whether h carries any field Parse reads, without
// parsing or allocating, so that answers without one cost almost nothing.
func Announced(h http.Header) bool {
	if len(h) == 0 {
		return false
	}
	for _, k := range [...]string{"Ratelimit", "Ratelimit-Remaining", "Ratelimit-Limit", "X-Ms-Throttle-Limit-Percentage"} {
		if _, ok := h[k]; ok {
			return true
		}
	}
	for k := range h {
		if len(k) >= len(armPrefix) && strings.EqualFold(k[:len(armPrefix)], armPrefix) {
			return true
		}
	}
	return false
}
