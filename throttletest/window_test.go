package throttletest

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limiterStep is one request to a limiter: at a time since its first
// request, the wait it must answer, and when that is 0 the take.
type limiterStep struct {
	at       time.Duration
	wantWait time.Duration
	cost     float64 // 0: 1
}

func runLimiterSteps(t *testing.T, l Limiter, t0 time.Time, steps []limiterStep) {
	t.Helper()
	for i, s := range steps {
		cost := s.cost
		if cost == 0 {
			cost = 1
		}
		now := t0.Add(s.at)
		got := l.Wait(now, cost)
		assert.Equal(t, s.wantWait, got, "step %d at %v", i, s.at)
		if got == 0 {
			l.Take(now, cost)
		}
	}
}

func TestLimiterShapes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	fixed, err := FixedWindowLimiter(Window{Quota: 3, Per: 10 * time.Second})
	require.NoError(t, err)
	sliding, err := SlidingWindowLimiter(Window{Quota: 3, Per: 10 * time.Second})
	require.NoError(t, err)
	halving, err := ScheduledBucketLimiter(Bucket{Rate: 10, Burst: 1},
		RateStep{After: 10 * time.Second, Rate: 5}, RateStep{After: 20 * time.Second, Rate: 10})
	require.NoError(t, err)
	ms := time.Millisecond

	tests := []struct {
		name    string
		limiter func(key string, now time.Time) Limiter
		steps   []limiterStep
	}{
		{"fixed window releases the whole quota when the next one opens", fixed, []limiterStep{
			{0, 0, 0}, {time.Second, 0, 0}, {9 * time.Second, 0, 0},
			{9 * time.Second, time.Second, 0},
			{10 * time.Second, 0, 0}, {10 * time.Second, 0, 0}, {10 * time.Second, 0, 0},
			{15 * time.Second, 5 * time.Second, 0},
		}},
		{"fixed window skips the windows nobody used", fixed, []limiterStep{
			{0, 0, 0}, {0, 0, 0}, {0, 0, 0},
			{35 * time.Second, 0, 0}, {36 * time.Second, 0, 0}, {37 * time.Second, 0, 0},
			{39 * time.Second, time.Second, 0},
		}},
		{"fixed window counts costs, and a cost above the quota takes a window of its own", fixed, []limiterStep{
			{0, 0, 2}, {0, 10 * time.Second, 2}, {0, 0, 1},
			{10 * time.Second, 0, 5}, {10 * time.Second, 10 * time.Second, 1},
		}},
		{"sliding window frees each request a window after it came", sliding, []limiterStep{
			{0, 0, 0}, {4 * time.Second, 0, 0}, {6 * time.Second, 0, 0},
			{7 * time.Second, 3 * time.Second, 0},
			{10 * time.Second, 0, 0},
			{11 * time.Second, 3 * time.Second, 0},
			{14 * time.Second, 0, 0},
		}},
		{"sliding window waits until enough cost leaves it", sliding, []limiterStep{
			{0, 0, 1}, {time.Second, 0, 1}, {2 * time.Second, 0, 1},
			{2 * time.Second, 9 * time.Second, 2}, // until the second of them leaves
		}},
		{"scheduled bucket halves its rate and restores it", halving, []limiterStep{
			{0, 0, 0}, {0, 100 * ms, 0}, {100 * ms, 0, 0},
			{10 * time.Second, 0, 0}, {10 * time.Second, 200 * ms, 0}, {10*time.Second + 200*ms, 0, 0},
			{20 * time.Second, 0, 0}, {20 * time.Second, 100 * ms, 0},
		}},
		{"scheduled bucket earns at the old rate up to the step", halving, []limiterStep{
			{9*time.Second + 950*ms, 0, 0},
			// 50 ms at 10/s then 50 ms at 5/s: 0.75 of a token.
			{10*time.Second + 50*ms, 50 * ms, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runLimiterSteps(t, tt.limiter("k", t0), t0, tt.steps)
		})
	}
}

func TestLimiterBudgets(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	fixed, err := FixedWindowLimiter(Window{Quota: 4, Per: 10 * time.Second})
	require.NoError(t, err)
	sliding, err := SlidingWindowLimiter(Window{Quota: 4, Per: 10 * time.Second})
	require.NoError(t, err)
	scheduled, err := ScheduledBucketLimiter(Bucket{Rate: 10, Burst: 4}, RateStep{After: time.Second, Rate: 2})
	require.NoError(t, err)
	tests := []struct {
		name    string
		limiter func(key string, now time.Time) Limiter
		takes   []time.Duration
		at      time.Duration
		want    Budget
	}{
		{"token bucket", BucketLimiter(Bucket{Rate: 10, Burst: 4}), []time.Duration{0, 0, 0}, 50 * time.Millisecond,
			Budget{Limit: 4, Remaining: 1.5, Reset: 250 * time.Millisecond, Window: 400 * time.Millisecond}},
		{"scheduled bucket at its new rate", scheduled, []time.Duration{0, 0, time.Second, time.Second, time.Second, time.Second}, time.Second,
			Budget{Limit: 4, Remaining: 0, Reset: 2 * time.Second, Window: 2 * time.Second}},
		{"fixed window", fixed, []time.Duration{0, time.Second, 3 * time.Second}, 4 * time.Second,
			Budget{Limit: 4, Remaining: 1, Reset: 6 * time.Second, Window: 10 * time.Second}},
		{"fixed window after it opened again", fixed, []time.Duration{0, time.Second}, 12 * time.Second,
			Budget{Limit: 4, Remaining: 4, Reset: 8 * time.Second, Window: 10 * time.Second}},
		{"sliding window", sliding, []time.Duration{0, time.Second, 3 * time.Second}, 4 * time.Second,
			Budget{Limit: 4, Remaining: 1, Reset: 6 * time.Second, Window: 10 * time.Second}},
		{"sliding window after its oldest left", sliding, []time.Duration{0, time.Second, 3 * time.Second}, 10 * time.Second,
			Budget{Limit: 4, Remaining: 2, Reset: time.Second, Window: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.limiter("k", t0)
			for _, at := range tt.takes {
				l.Take(t0.Add(at), 1)
			}
			b, ok := l.(Budgeter)
			require.True(t, ok, "%T is no Budgeter", l)
			got := b.Budget(t0.Add(tt.at))
			assert.InDelta(t, tt.want.Remaining, got.Remaining, 1e-9)
			got.Remaining = tt.want.Remaining
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestLimiterConstructorsRejectBadValues(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"window quota", second(FixedWindowLimiter(Window{Quota: 0, Per: time.Second})), "Window.Quota = 0"},
		{"window length", second(SlidingWindowLimiter(Window{Quota: 1, Per: -time.Second})), "Window.Per = -1s"},
		{"schedule without rate", second(ScheduledBucketLimiter(Bucket{})), "Bucket.Rate = 0"},
		{"schedule negative burst", second(ScheduledBucketLimiter(Bucket{Rate: 1, Burst: -1})), "Bucket.Burst = -1"},
		{"step rate", second(ScheduledBucketLimiter(Bucket{Rate: 1}, RateStep{After: time.Second})), "RateStep[0].Rate = 0"},
		{"steps out of order", second(ScheduledBucketLimiter(Bucket{Rate: 1},
			RateStep{After: 2 * time.Second, Rate: 1}, RateStep{After: time.Second, Rate: 1})), "RateStep[1].After = 1s"},
		{"fixed Retry-After", second(FixedRetryAfter(0)), "FixedRetryAfter(0)"},
		{"draft-03 threshold", second(Draft03(1.5)), "Draft03(1.5)"},
		{"policy name", second(CurrentDraft("")), `CurrentDraft("")`},
		{"policy name bytes", second(CurrentDraft("a\nb")), `CurrentDraft("a\nb")`},
		{"graph threshold", second(GraphPercentage("s", -1)), `GraphPercentage("s", -1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, tt.err)
			assert.Contains(t, tt.err.Error(), tt.want)
		})
	}
}

func second[T any](_ T, err error) error { return err }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func everything(*http.Request) (string, bool) { return "", true }

func TestServerAnnouncesBudgets(t *testing.T) {
	bucket := BucketLimiter(Bucket{Rate: 1, Burst: 4})
	tests := []struct {
		name     string
		rules    []Rule
		requests int
		// want are the headers of the answer to each request, nil for
		// none of the rate-limit headers.
		want []http.Header
	}{
		{
			name:     "draft-03 from 50 % spent",
			rules:    []Rule{{Name: "sp", Match: everything, Limiter: bucket, Announce: must(Draft03(0.5))}},
			requests: 5,
			want: []http.Header{
				nil,
				{"Ratelimit-Limit": {"4"}, "Ratelimit-Remaining": {"2"}, "Ratelimit-Reset": {"2"}},
				{"Ratelimit-Limit": {"4"}, "Ratelimit-Remaining": {"1"}, "Ratelimit-Reset": {"3"}},
				{"Ratelimit-Limit": {"4"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"4"}},
				{"Ratelimit-Limit": {"4"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"4"}},
			},
		},
		{
			name: "current draft, a member per rule",
			rules: []Rule{
				{Name: "a", Match: everything, Limiter: bucket, Announce: must(CurrentDraft("burst"))},
				{Name: "b", Match: everything, Limiter: must(FixedWindowLimiter(Window{Quota: 100, Per: time.Minute})), Announce: must(CurrentDraft("minute"))},
			},
			requests: 1,
			want: []http.Header{{
				"Ratelimit-Policy": {`"burst";q=4;w=4`, `"minute";q=100;w=60`},
				"Ratelimit":        {`"burst";r=3;t=1`, `"minute";r=99;t=60`},
			}},
		},
		{
			name:     "Graph's percentage from 80 %, past it on the 429",
			rules:    []Rule{{Name: "id", Match: everything, Limiter: bucket, Announce: must(GraphPercentage("Tenant_Application", 0.8))}},
			requests: 5,
			want: []http.Header{nil, nil, nil,
				{"X-Ms-Throttle-Limit-Percentage": {"1.00"}, "X-Ms-Throttle-Scope": {"Tenant_Application"}},
				{"X-Ms-Throttle-Limit-Percentage": {"1.00"}, "X-Ms-Throttle-Scope": {"Tenant_Application"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Rules: tt.rules})
			for i := range tt.requests {
				resp, err := h.client.Get(h.srv.URL + "/users/1")
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
				got := http.Header{}
				for _, k := range []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit",
					"X-Ms-Throttle-Limit-Percentage", "X-Ms-Throttle-Scope"} {
					if v := resp.Header.Values(k); len(v) > 0 {
						got[k] = v
					}
				}
				want := tt.want[i]
				if want == nil {
					want = http.Header{}
				}
				assert.Equal(t, want, got, "request %d (%d)", i, resp.StatusCode)
			}
		})
	}
}

func TestServerFixedRetryAfter(t *testing.T) {
	h := newHarness(t, Config{Rules: []Rule{{
		Name: "slow", Match: everything, RetryAfter: must(FixedRetryAfter(3)),
		Limiter: BucketLimiter(Bucket{Rate: 400, Burst: 1}),
	}}})
	assert.Equal(t, http.StatusOK, h.do(http.MethodGet, h.srv.URL+"/users/1", "").status)
	got := h.do(http.MethodGet, h.srv.URL+"/users/1", "")
	assert.Equal(t, reply{status: http.StatusTooManyRequests, retryAfter: "3"}, reply{status: got.status, retryAfter: got.retryAfter})
	h.now.Advance(3 * time.Millisecond) // the bucket has a token again, long before the 3 s
	assert.Equal(t, http.StatusOK, h.do(http.MethodGet, h.srv.URL+"/users/1", "").status)
	assert.Equal(t, map[string]int{"slow": 1}, h.srv.Stats().ThrottledBy)
}
