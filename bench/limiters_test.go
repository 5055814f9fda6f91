package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

func TestLimiterScenarioLimits(t *testing.T) {
	p := params{n: 2000, c: 200, rate: 400, burst: 40}
	byKey := map[string]scenario{}
	for _, s := range scenarios {
		byKey[s.key] = s
	}
	tests := []struct {
		key       string
		want      time.Duration
		wantAbout string
	}{
		{"retry-after-3", 5 * time.Second, ""},
		{"fixed-window", 10 * time.Second, " (window floor: 2000 requests at 1000 per 10s)"},
		{"rate-change", 5880 * time.Millisecond, " (2000 requests, 400/s then 200/s then 400/s, burst 40)"},
		{"headers-draft03", 5 * time.Second, ""},
		{"headers-current", 5 * time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			sc, ok := byKey[tt.key]
			require.True(t, ok)
			assert.InDelta(t, tt.want.Seconds(), sc.limit(p).Seconds(), 1e-9)
			require.NoError(t, sc.config(p).Validate())
			if tt.wantAbout != "" {
				assert.Equal(t, tt.wantAbout, sc.limitAbout(p))
			}
		})
	}
}

func TestWindowFloor(t *testing.T) {
	w := throttletest.Window{Quota: 1000, Per: 10 * time.Second}
	for n, want := range map[int]time.Duration{1: 0, 1000: 0, 1001: 10 * time.Second, 2000: 10 * time.Second, 2001: 20 * time.Second} {
		assert.Equal(t, want, windowFloor(n, w), "n = %d", n)
	}
}
