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
	byKey := scenariosByKey()
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

func TestRealScenarioLimits(t *testing.T) {
	p := params{n: 2000, c: 200, rate: 400, burst: 40}
	byKey := scenariosByKey()
	tests := []struct {
		key  string
		want time.Duration
	}{
		{"nginx-ra", 4897500 * time.Microsecond}, // (2000 − 41) / 400
		{"nginx-429", 4897500 * time.Microsecond},
		{"nginx-503", 4897500 * time.Microsecond},
		{"haproxy", 5 * time.Second},
		{"bucket", 5 * time.Second},
		{"bucket-announce", 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			sc, ok := byKey[tt.key]
			require.True(t, ok)
			assert.Equal(t, tt.want, sc.limit(sc.sized(p)))
			assert.True(t, sc.workloads)
		})
	}
	t.Run("nginx-zones", func(t *testing.T) {
		sc := byKey["nginx-zones"]
		q := sc.sized(p)
		assert.Equal(t, 1500, q.n)
		assert.Equal(t, 150, q.c)
		apiOf, limits := sc.apis(q)
		assert.Equal(t, "/v1.0/users", apiOf(0))
		assert.Equal(t, "/v1.0/me/messages", apiOf(40))
		assert.Equal(t, "/v1.0/sites", apiOf(44))
		// 1500 requests: 1120 users at 400/s (burst 40), 110 messages at
		// 40/s (burst 4), 270 sites at 100/s (burst 10).
		assert.Equal(t, map[string]time.Duration{
			"/v1.0/users":       time.Duration(float64(1120-41) / 400 * float64(time.Second)),
			"/v1.0/me/messages": time.Duration(float64(110-5) / 40 * float64(time.Second)),
			"/v1.0/sites":       time.Duration(float64(270-11) / 100 * float64(time.Second)),
		}, limits)
		assert.Equal(t, limits["/v1.0/users"], sc.limit(q))
		w, err := parseWorkload("user/50")
		require.NoError(t, err)
		assert.Equal(t, "/v1.0/me/messages/40", sc.path(w, q, 40))
		assert.Equal(t, "/v1.0/sites/48", sc.path(w, q, 98))
		coll, err := parseWorkload("collection")
		require.NoError(t, err)
		assert.Equal(t, "/v1.0/users", sc.path(coll, q, 1))
		assert.False(t, sc.takes(shapes[1]), "mailboxes mean nothing behind three zones")
	})
}

// scenariosByKey indexes the bench's scenarios by their flag value.
func scenariosByKey() map[string]scenario {
	byKey := map[string]scenario{}
	for _, s := range scenarios {
		byKey[s.key] = s
	}
	return byKey
}

func TestGraphMixLimits(t *testing.T) {
	p := params{n: 2000, c: 200, rate: 400, burst: 40}
	sc := scenariosByKey()["e"]
	// The last locked item is request 1600 (item 80), sent at the 1401st
	// answer. Of the 1600 before it, 80 are the drive's; the other 1321 must
	// finish at best at 700/s in all (identity 400, ten mailboxes 20 each,
	// sites 100), none of them running out first: 1321/700 s.
	reached := 1321 * time.Second / 700
	assert.InDelta(t, (reached + graphLocked).Seconds(), graphLockFloor(p).Seconds(), 2e-6)
	assert.InDelta(t, graphLockFloor(p).Seconds(), sc.limit(p).Seconds(), 1e-9, "the lock, not a budget, bounds the whole")
	_, limits := sc.apis(p)
	assert.Equal(t, sc.limit(p), limits["drive"])
	assert.Equal(t, perSecond(1087, 400), limits["identity"])
	assert.Less(t, limits["identity"], sc.limit(p))

	few := params{n: 100, c: 200}
	assert.InDelta(t, graphLocked.Seconds(), graphLockFloor(few).Seconds(), 2e-6, "a lock reached at once ends 2 s on")
	assert.Equal(t, graphLockFloor(few), sc.limit(few))
}
