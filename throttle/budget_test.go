package throttle

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

func TestAnnouncedRefresh(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := func(r float64, reset time.Duration) ratelimit.Budget {
		return ratelimit.Budget{Limit: 10, Remaining: r, HasRemaining: true, Reset: t0.Add(reset)}
	}
	tests := []struct {
		name      string
		second    ratelimit.Budget
		sent      time.Duration // of the second answer's request
		wantLeft  float64
		wantReset time.Duration
	}{
		{name: "a later request's answer replaces", second: b(8, time.Second), sent: time.Millisecond, wantLeft: 8, wantReset: time.Second},
		{name: "an earlier request's answer with more left is stale", second: b(8, time.Second), sent: -time.Millisecond, wantLeft: 2, wantReset: 3 * time.Second},
		{name: "an earlier request's answer may only lower", second: b(1, time.Second), sent: -time.Millisecond, wantLeft: 1, wantReset: 3 * time.Second},
		{name: "an earlier request's answer may delay the reset", second: b(5, 4*time.Second), sent: -time.Millisecond, wantLeft: 2, wantReset: 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a announced
			a.refresh(b(2, 3*time.Second), t0.Add(-time.Millisecond), t0, 0)
			a.refresh(tt.second, t0.Add(tt.sent), t0.Add(time.Millisecond), 0)
			assert.Equal(t, tt.wantLeft, a.left)
			assert.Equal(t, t0.Add(tt.wantReset), a.budget.Reset)
		})
	}
	var a announced
	assert.False(t, a.live(t0, time.Second), "no budget announced")
	a.refresh(b(0, time.Minute), t0, t0, 0)
	assert.True(t, a.live(t0.Add(30*time.Second), time.Second), "until its reset")
	assert.False(t, a.live(t0.Add(time.Minute), time.Second))
}

// TestQueue_AnnouncedBudgetTeachesThePace checks that an announced budget
// is a hint: followed once nearly spent, it holds nothing (its reset would
// release every waiter at once); spent, it is the news a throttle brings,
// and its budget is paced from then on, nothing held for the reset.
func TestQueue_AnnouncedBudgetTeachesThePace(t *testing.T) {
	announce := func(remaining string) http.Header {
		return http.Header{"Ratelimit-Limit": {"10"}, "Ratelimit-Remaining": {remaining}, "Ratelimit-Reset": {"1"}}
	}
	tests := []struct {
		name       string
		header     http.Header
		wantActive bool
		wantPaced  bool
	}{
		{name: "no budget announced", header: nil},
		{name: "room enough: not followed", header: announce("5")},
		{name: "one left: followed, nothing held", header: announce("1"), wantActive: true},
		{name: "spent: paced, not held for the reset", header: announce("0"), wantActive: true, wantPaced: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := New(options.SystemClock(), options.QueueOptions{})
				req := httptest.NewRequest(http.MethodGet, "https://graph.test/v1.0/users/1", nil)
				q.Report(req, Pass{Sent: time.Now()}, Succeeded, 0, tt.header, time.Now)
				require.Equal(t, tt.wantActive, q.Active(req))
				if !tt.wantActive {
					return
				}
				start := time.Now()
				var last Pass
				for range 2 {
					p, err := q.Admit(t.Context(), req, time.Time{}, time.Time{}, nil)
					require.NoError(t, err)
					last = p
				}
				assert.Less(t, last.Sent.Sub(start), time.Second, "never held for the reset")
				assert.Equal(t, tt.wantPaced, last.budget != nil && last.budget.pacer != nil, "paced")
			})
		})
	}
}

// TestQueue_PacedThrottleHoldsOnlyItsRequest checks that a throttle of a
// request its budget released holds nothing else: the pace slows, and the
// request waits out its own Retry-After; a throttle that is its target's
// own holds the target for the time named.
func TestQueue_PacedThrottleHoldsOnlyItsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(options.SystemClock(), options.QueueOptions{})
		post := func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "https://graph.test/v1.0/users", nil)
		}
		// Two requests throttled together: the collection is a budget.
		sent := time.Now()
		time.Sleep(time.Millisecond)
		q.Report(post(), Pass{Sent: sent}, Throttled, time.Second, nil, time.Now)
		q.Report(post(), Pass{Sent: sent}, Throttled, time.Second, nil, time.Now)
		p, err := q.Admit(t.Context(), post(), time.Time{}, time.Now().Add(10*time.Second), nil)
		require.NoError(t, err)
		require.NotNil(t, p.budget, "released by its budget")

		// A throttle of a paced release holds nothing else for its minute.
		q.Report(post(), p, Throttled, time.Minute, nil, time.Now)
		_, err = q.Admit(t.Context(), post(), time.Time{}, time.Now().Add(10*time.Second), nil)
		assert.NoError(t, err, "held for the paced request's Retry-After")

		// A throttle of another item, alone, holds that item.
		me := httptest.NewRequest(http.MethodGet, "https://graph.test/v1.0/me", nil)
		q.Report(me, Pass{Sent: time.Now()}, Throttled, time.Minute, nil, time.Now)
		_, err = q.Admit(t.Context(), me, time.Time{}, time.Now().Add(10*time.Second), nil)
		assert.ErrorIs(t, err, ErrHoldTooLong)
	})
}
