package middleware

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
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
	maxDelay              = time.Duration(math.MaxInt64)
)

// RetryAfter returns how long the server asked the client to wait before
// retrying, read from Retry-After (delta-seconds, or an HTTP-date in any of
// the three forms RFC 9110 §5.6.7 makes recipients accept), retry-after-ms
// and x-ms-retry-after-ms, relative to now. When several are present the
// longest wait wins, so no retry is sent before any time the server named.
// A date in the past means retry now (0, true). Values that do not parse, or
// are negative, are ignored; huge values saturate instead of overflowing.
// ok is false when no header gave a usable value.
func RetryAfter(h http.Header, now time.Time) (delay time.Duration, ok bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get(headerRetryAfter); v != "" {
		if d, good := parseRetryAfter(v, now); good {
			delay, ok = d, true
		}
	}
	for _, name := range [...]string{headerRetryAfterMs, headerXMsRetryAfterMs} {
		if v := h.Get(name); v != "" {
			if d, good := parseAmount(v, float64(time.Millisecond)); good {
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
		return parseAmount(v, float64(time.Second))
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	return t.Sub(now), true // Sub saturates at the maximum Duration
}

// parseAmount parses a non-negative decimal number of units. Fractions are
// rounded up so the wait never ends before the named time.
func parseAmount(v string, unit float64) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil && !isRange(err) || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	ns := math.Ceil(f * unit)
	if ns >= float64(maxDelay) || math.IsInf(ns, 1) {
		return maxDelay, true
	}
	return time.Duration(ns), true
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
