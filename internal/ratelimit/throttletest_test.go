package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// The fake server's announcements read back as the budget it holds, so
// that simulations with throttletest test what a real server would say.
func TestParseReadsWhatThrottletestAnnounces(t *testing.T) {
	draft03, err := throttletest.Draft03(0)
	require.NoError(t, err)
	current, err := throttletest.CurrentDraft("default")
	require.NoError(t, err)
	graph, err := throttletest.GraphPercentage("Tenant_Application", 0)
	require.NoError(t, err)
	window, err := throttletest.FixedWindowLimiter(throttletest.Window{Quota: 4, Per: 10 * time.Second})
	require.NoError(t, err)
	tests := []struct {
		name     string
		announce throttletest.Announce
		limiter  func(string, time.Time) throttletest.Limiter
		// want are the budgets after each of 5 requests at one instant;
		// Reset is checked against wantReset.
		want      []ratelimit.Budget
		wantReset time.Duration
	}{
		{"draft-03 on a fixed window", draft03, window, []ratelimit.Budget{
			{Limit: 4, Remaining: 3, HasRemaining: true, Used: 0.25},
			{Limit: 4, Remaining: 2, HasRemaining: true, Used: 0.5},
			{Limit: 4, Remaining: 1, HasRemaining: true, Used: 0.75},
			{Limit: 4, Remaining: 0, HasRemaining: true, Used: 1},
			{Limit: 4, Remaining: 0, HasRemaining: true, Used: 1},
		}, 10 * time.Second},
		{"the current draft on a fixed window", current, window, []ratelimit.Budget{
			{Name: "default", Limit: 4, Remaining: 3, HasRemaining: true, Used: 0.25, Window: 10 * time.Second},
			{Name: "default", Limit: 4, Remaining: 2, HasRemaining: true, Used: 0.5, Window: 10 * time.Second},
			{Name: "default", Limit: 4, Remaining: 1, HasRemaining: true, Used: 0.75, Window: 10 * time.Second},
			{Name: "default", Limit: 4, Remaining: 0, HasRemaining: true, Used: 1, Window: 10 * time.Second},
			{Name: "default", Limit: 4, Remaining: 0, HasRemaining: true, Used: 1, Window: 10 * time.Second},
		}, 10 * time.Second},
		{"Graph's percentage on a bucket", graph, throttletest.BucketLimiter(throttletest.Bucket{Rate: 0.001, Burst: 4}), []ratelimit.Budget{
			{Name: "Tenant_Application", Used: 0.25},
			{Name: "Tenant_Application", Used: 0.5},
			{Name: "Tenant_Application", Used: 0.75},
			{Name: "Tenant_Application", Used: 1},
			{Name: "Tenant_Application", Used: 1},
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{{
				Name: "r", Match: func(*http.Request) (string, bool) { return "", true }, Limiter: tt.limiter, Announce: tt.announce,
			}}}, 0)
			require.NoError(t, err)
			for i, want := range tt.want {
				req, err := http.NewRequest(http.MethodGet, "https://graph.test/v1.0/users/1", nil)
				require.NoError(t, err)
				before := time.Now()
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				got, ok := ratelimit.Parse(resp.Header, before)
				require.True(t, ok, "request %d: %v", i, resp.Header)
				if tt.wantReset > 0 {
					// The window opened at the first request, a moment before.
					assert.WithinDuration(t, before.Add(tt.wantReset), got.Reset, 100*time.Millisecond, "request %d", i)
				}
				got.Reset = time.Time{}
				assert.Equal(t, want, got, "request %d", i)
				assert.Equal(t, i >= 3, got.Spent(), "request %d", i)
			}
		})
	}
}
