package clocktest

import "time"

// Seconds returns the durations of s, each in seconds: the schedule a
// test expects, written as the documentation writes it (Seconds(3, 12, 27)).
func Seconds(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}

// Repeat returns n copies of v: a schedule of equal steps.
func Repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}
