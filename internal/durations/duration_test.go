package durations

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestFromNanos(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   float64
		want time.Duration
	}{
		{"zero", 0, 0},
		{"a second", 1e9, time.Second},
		{"negative", -5, 0},
		{"NaN", math.NaN(), 0},
		{"infinity", math.Inf(1), Max},
		{"2^63, which float64(Max) rounds to", float64(Max), Max},
		{"far beyond", 1e30, Max},
	} {
		assert.Equal(t, tt.want, FromNanos(tt.in), tt.name)
	}
	assert.Equal(t, Max, FromSeconds(1e20), "1e20 s")
	assert.Equal(t, 1500*time.Millisecond, FromSeconds(1.5))
}

func TestAdd(t *testing.T) {
	assert.Equal(t, 3*time.Second, Add(time.Second, 2*time.Second))
	assert.Equal(t, Max, Add(Max, 1))
	assert.Equal(t, Max, Add(Max, Max))
	assert.Equal(t, Max, Add(Max-1, 1))
}

func TestCeil(t *testing.T) {
	for _, tt := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Millisecond, 0},
		{-time.Second, time.Millisecond, 0},
		{time.Millisecond, time.Millisecond, 1},
		{time.Millisecond + 1, time.Millisecond, 2},
		{Max, time.Millisecond, int64(Max/time.Millisecond) + 1},
		{Max, 1, int64(Max)},
	} {
		assert.Equal(t, tt.want, Ceil(tt.d, tt.unit), "%d / %d", tt.d, tt.unit)
	}
}
