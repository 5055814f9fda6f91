package middleware_test

import (
	"math"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
)

// fuzzNow is the reference time of the seeds: dates in them are written
// relative to it.
var fuzzNow = time.Date(2026, time.March, 4, 5, 6, 7, 0, time.UTC)

// FuzzRetryAfter feeds RetryAfter every header form the handler reads and
// checks it against an independent reading of RFC 9110 §10.2.3 and the
// Azure millisecond headers: no panic, no negative delay, and never a delay
// shorter than the time the server named.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []struct {
		ra, ms, xms string
		sec, nsec   int64
	}{
		{"120", "", "", 0, 0},
		{"0", "", "", 0, 0},
		{" 7 ", "", "", 0, 0},
		{"1.5", "", "", 0, 0},
		{".25", "", "", 0, 0},
		{"3.", "", "", 0, 0},
		{"-1", "", "", 0, 0},
		{"-0", "", "", 0, 0},
		{"+5", "", "", 0, 0},
		{"1e3", "", "", 0, 0},
		{"0x1p4", "", "", 0, 0},
		{"Inf", "", "", 0, 0},
		{"NaN", "", "", 0, 0},
		{"9223372036", "", "", 0, 0},
		{"9223372037", "", "", 0, 0},
		{"5000000001", "", "", 0, 0},
		{"99999999999999999999999999999", "", "", 0, 0},
		{"1e400", "", "", 0, 0},
		{"garbage", "", "", 0, 0},
		{"", "", "", 0, 0},
		{"Wed, 04 Mar 2026 05:08:07 GMT", "", "", 0, 0},
		{"Wed, 04 Mar 2026 05:06:06 GMT", "", "", 0, 500},
		{"Wednesday, 04-Mar-26 05:08:07 GMT", "", "", 0, 0},
		{"Friday, 01-Jan-70 00:00:00 GMT", "", "", 0, 0},
		{"Wed Mar  4 05:08:07 2026", "", "", 0, 0},
		{"Mon, 01 Jan 0001 00:00:00 GMT", "", "", 0, 0},
		{"Fri, 31 Dec 9999 23:59:59 GMT", "", "", 0, 0},
		{"Wed, 04 Mar 2026 05:08:07.999999999 GMT", "", "", 0, 0},
		{"", "1500", "", 0, 0},
		{"", "", "250", 0, 0},
		{"2", "1500", "3500", 0, 0},
		{"", "0.0000001", "", 0, 0},
		{"", "9223372036854", "", 0, 0},
		{"", "5764607523034", "", 0, 0},
		{"", "-3", "abc", 0, 0},
		{"0\n2", "", "", 0, 0},
		{"2\n0", "", "", 0, 0},
		{"garbage\n3", "", "", 0, 0},
		{"Wed, 04 Mar 2026 05:08:07 GMT\n1", "", "", 0, 0},
		{"1", "0\n2500", "", 0, 0},
		{"", "", "100\n-1\n300", 0, 0},
		{"1", "", "", math.MaxInt64, 0},
		{"Wed, 04 Mar 2026 05:08:07 GMT", "", "", math.MinInt64, 0},
	} {
		f.Add(s.ra, s.ms, s.xms, s.sec, s.nsec)
	}
	f.Fuzz(func(t *testing.T, ra, ms, xms string, sec, nsec int64) {
		now := fuzzNow.Add(time.Duration(sec % (1 << 62))).Add(time.Duration(nsec))
		// A newline in a fuzzed value separates fields of the same name.
		h := http.Header{}
		for name, v := range map[string]string{"Retry-After": ra, "Retry-After-Ms": ms, "X-Ms-Retry-After-Ms": xms} {
			for _, field := range strings.Split(v, "\n") {
				if field != "" {
					h.Add(name, field)
				}
			}
		}

		delay, ok := middleware.RetryAfter(h, now)

		require.GreaterOrEqual(t, delay, time.Duration(0), "negative delay")
		if !ok {
			require.Zero(t, delay, "a delay without a usable header")
		}
		var (
			longest  time.Duration
			anyNamed bool
			allNamed = true
		)
		for _, n := range []struct {
			value   string
			unit    time.Duration
			dateToo bool
		}{{ra, time.Second, true}, {ms, time.Millisecond, false}, {xms, time.Millisecond, false}} {
			for _, field := range strings.Split(n.value, "\n") {
				if field == "" {
					continue
				}
				d, named := namedDelay(field, n.unit, n.dateToo, now)
				if !named {
					allNamed = false
					continue
				}
				anyNamed = true
				longest = max(longest, d)
			}
		}
		if anyNamed {
			require.True(t, ok, "a header that names a time was ignored")
			require.GreaterOrEqual(t, delay, longest, "delay ends before the time the server named")
		}
		if anyNamed && allNamed {
			// Fractions are rounded up to the nanosecond, nothing more.
			require.Equal(t, longest, delay)
		}
	})
}

// namedDelay reads a header value the strict way: 1*DIGIT ["." *DIGIT]
// (a fraction is tolerated, as Azure sends them) in unit, or, when dateToo,
// an HTTP-date. It returns the wait it names, rounded up to the nanosecond
// and saturated at the largest Duration, computed without floating point.
func namedDelay(v string, unit time.Duration, dateToo bool, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if d, ok := decimalDelay(v, unit); ok {
		return d, true
	}
	if !dateToo {
		return 0, false
	}
	t, ok := httpDate(v, now)
	if !ok {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	return t.Sub(now), true
}

func decimalDelay(v string, unit time.Duration) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(v, ".")
	if whole+frac == "" || strings.Count(v, ".") > 1 || !digits(whole) || !digits(frac) {
		return 0, false
	}
	num, _ := new(big.Int).SetString(whole+frac+"0", 10) // the trailing 0 makes "" parse
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac)+1)), nil)
	num.Mul(num, big.NewInt(int64(unit)))
	ns, rem := new(big.Int).QuoRem(num, den, new(big.Int))
	if rem.Sign() > 0 {
		ns.Add(ns, big.NewInt(1))
	}
	if !ns.IsInt64() {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ns.Int64()), true
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// httpDate parses the three forms RFC 9110 §5.6.7 makes recipients accept.
// A two-digit rfc850 year that would lie more than 50 years ahead of now
// means the most recent past year with those digits.
func httpDate(v string, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(http.TimeFormat, v); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.ANSIC, v); err == nil {
		return t, true
	}
	t, err := time.Parse(time.RFC850, v)
	if err != nil {
		return time.Time{}, false
	}
	// Start from the century of now and step back while more than 50
	// years ahead.
	y := now.Year() - now.Year()%100 + t.Year()%100
	for y > now.Year()+50 {
		y -= 100
	}
	return t.AddDate(y-t.Year(), 0, 0), true
}
