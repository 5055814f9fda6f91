package middleware

import (
	"net/http"
	"strings"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
)

// Headers that carry the server's retry time. Azure services send the two
// millisecond forms alongside, or instead of, Retry-After.
const (
	headerRetryAfter      = "Retry-After"
	headerRetryAfterMs    = "Retry-After-Ms"
	headerXMsRetryAfterMs = "X-Ms-Retry-After-Ms"
	headerRetryAttempt    = "Retry-Attempt"
	headerIdempotencyKey  = "Idempotency-Key"
	headerXIdempotencyKey = "X-Idempotency-Key"
	maxDelay              = durations.Max
)

// RetryAfter returns how long the server asked the client to wait before
// retrying, read from Retry-After (delta-seconds, or an HTTP-date in any of
// the three forms RFC 9110 §5.6.7 makes recipients accept), retry-after-ms
// and x-ms-retry-after-ms, relative to now. Every field is read, however
// often each name appears (proxies and frameworks may add one of their own),
// and the latest time any of them names wins, so no retry is sent before a
// time the server named. A date in the past means retry now (0, true).
// Values that do not parse, or are negative, are ignored; huge values
// saturate instead of overflowing. ok is false when no field gave a usable
// value.
func RetryAfter(h http.Header, now time.Time) (delay time.Duration, ok bool) {
	if h == nil {
		return 0, false
	}
	for _, v := range h.Values(headerRetryAfter) {
		if d, good := parseRetryAfter(v, now); good {
			delay, ok = max(delay, d), true
		}
	}
	for _, name := range [...]string{headerRetryAfterMs, headerXMsRetryAfterMs} {
		for _, v := range h.Values(name) {
			if d, good := parseAmount(v, time.Millisecond); good {
				delay, ok = max(delay, d), true
			}
		}
	}
	return delay, ok
}

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if c := v[0]; c >= '0' && c <= '9' || c == '.' || c == '+' || c == '-' {
		return parseAmount(v, time.Second)
	}
	t, ok := parseHTTPDate(v, now)
	if !ok {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	return t.Sub(now), true // Sub saturates at the maximum Duration
}

// parseHTTPDate parses the three HTTP-date forms, as http.ParseTime does,
// but reads a two-digit rfc850 year as RFC 9110 §5.6.7 requires: a year
// more than 50 years ahead of now is the most recent past year with the
// same last two digits (time.Parse maps 69..99 to the 1900s whatever now
// is, which would turn a date in 2070 into "retry now").
func parseHTTPDate(v string, now time.Time) (time.Time, bool) {
	for _, layout := range [...]string{http.TimeFormat, time.RFC850, time.ANSIC} {
		t, err := time.Parse(layout, v)
		if err != nil {
			continue
		}
		if layout == time.RFC850 {
			y, limit := t.Year(), now.Year()+50
			for y+100 <= limit {
				y += 100
			}
			for y > limit {
				y -= 100
			}
			t = time.Date(y, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
		}
		return t, true
	}
	return time.Time{}, false
}

// parseAmount parses a non-negative decimal number of units (DIGITS with an
// optional fraction) in integer arithmetic: floating point would round
// large values down, ending the wait before the named time. A fraction
// finer than a nanosecond is rounded up; huge values saturate. Signs,
// exponents and other number syntax are not HTTP and are ignored.
func parseAmount(v string, unit time.Duration) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(v), ".")
	if whole == "" && frac == "" || !isDigits(whole) || !isDigits(frac) {
		return 0, false
	}
	var n time.Duration // whole units
	for i := 0; i < len(whole); i++ {
		n = n*10 + time.Duration(whole[i]-'0')
		if n > maxDelay/unit {
			return maxDelay, true
		}
	}
	d := n * unit
	var f time.Duration // the fraction, in nanoseconds
	step := unit
	for i := 0; i < len(frac); i++ {
		if step /= 10; step == 0 {
			if strings.Trim(frac[i:], "0") != "" {
				f++
			}
			break
		}
		f += time.Duration(frac[i]-'0') * step
	}
	if d > maxDelay-f {
		return maxDelay, true
	}
	return d + f, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
