// Package durations converts amounts of time into time.Duration values that
// saturate instead of overflowing.
//
// A server may name a wait of any size (a Retry-After of twenty digits, a
// date in the year 9999), and arithmetic on it must not wrap around into
// a negative duration, which would read as "now". Every conversion from a
// number the handler did not choose goes through this package: a value
// too large to represent becomes Max, "longer than any limit", and the
// request's limits decide what to do with it.
package durations

import (
	"math"
	"time"
)

// Max is the longest duration there is, about 292 years: what a wait too
// long to represent saturates to.
const Max = time.Duration(math.MaxInt64)

// FromNanos returns ns nanoseconds as a Duration: Max from Max up
// (infinity included), 0 for a negative or NaN amount.
func FromNanos(ns float64) time.Duration {
	switch {
	case !(ns > 0): // also catches NaN
		return 0
	case ns >= float64(Max):
		// float64(Max) rounds up to 2^63, which time.Duration cannot hold.
		return Max
	}
	return time.Duration(ns)
}

// FromSeconds returns s seconds as a Duration, as FromNanos does.
func FromSeconds(s float64) time.Duration { return FromNanos(s * float64(time.Second)) }

// Add returns a+b for non-negative a and b, Max when the sum would not fit.
func Add(a, b time.Duration) time.Duration {
	if a > Max-b {
		return Max
	}
	return a + b
}

// Ceil returns how many whole units d lasts, rounded up, without the
// overflow of (d+unit-1)/unit near Max; 0 for d <= 0. unit must be positive.
func Ceil(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / unit)
	if d%unit != 0 {
		n++
	}
	return n
}
