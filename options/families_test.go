package options_test

import (
	"errors"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/internal/effective"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// fixed returns a random source that always yields u.
func fixed(u float64) func() float64 { return func() float64 { return u } }

// schedule asks p about retries 1, 2, ... until it declines (at most
// limit+1 times) and returns the delays it gave.
func schedule(t *testing.T, p options.Policy, limit int) []time.Duration {
	t.Helper()
	out := []time.Duration{}
	for n := 1; n <= limit+1; n++ {
		d, ok := p.Next(options.Attempt{Retry: n, Response: &http.Response{StatusCode: http.StatusServiceUnavailable}})
		if !ok {
			return out
		}
		out = append(out, d)
	}
	t.Fatalf("%T did not stop after %d retries", p, limit)
	return nil
}

func TestSchedulesExact(t *testing.T) {
	tests := []struct {
		name   string
		policy options.Policy
		want   []time.Duration
	}{
		{"NoRetry", options.NoRetry{}, []time.Duration{}},
		{"Fixed zero value: 10 retries 3 s apart", options.Fixed{}, clocktest.Repeat(3*time.Second, 10)},
		{"Fixed", options.Fixed{Retries: 2, Interval: 1500 * time.Millisecond}, clocktest.Seconds(1.5, 1.5)},
		{"Linear zero value: 3 s steps", options.Linear{}, clocktest.Seconds(3, 6, 9, 12, 15, 18, 21, 24, 27, 30)},
		{"Linear", options.Linear{Retries: 4, Interval: time.Second, Delta: 500 * time.Millisecond}, clocktest.Seconds(1, 1.5, 2, 2.5)},
		{"Linear Delta defaults to Interval", options.Linear{Retries: 3, Interval: 2 * time.Second}, clocktest.Seconds(2, 4, 6)},
		{"Exponential zero value, no jitter drawn", options.Exponential{Random: fixed(0)},
			clocktest.Seconds(3, 12, 27, 48, 75, 108, 147, 180, 180, 180)},
		{"Exponential mid jitter", options.Exponential{Retries: 3, Random: fixed(0.5)}, clocktest.Seconds(2.7, 10.8, 24.3)},
		{"AzureStorageExponential defaults, mid jitter: the blog's 3 s, ~30 s, 90 s",
			options.AzureStorageExponential{Random: fixed(0.5)}, clocktest.Seconds(3, 33, 90)},
		{"AzureStorageExponential defaults, lowest jitter",
			options.AzureStorageExponential{Random: fixed(0)}, clocktest.Seconds(3, 27, 75)},
		{"AzureStorageExponential defaults, highest jitter stays under the cap",
			options.AzureStorageExponential{Random: fixed(math.Nextafter(1, 0))}, clocktest.Seconds(3, 39, 90)},
		{"AzureStorageExponential custom",
			options.AzureStorageExponential{Retries: 6, MinBackoff: time.Second, MaxBackoff: time.Minute, DeltaBackoff: 2 * time.Second, Random: fixed(0.5)},
			clocktest.Seconds(1, 3, 7, 15, 31, 60)},
		{"APIManagement fixed", options.APIManagement{Count: 3, Interval: 10 * time.Second}, clocktest.Seconds(10, 10, 10)},
		{"APIManagement linear", options.APIManagement{Count: 4, Interval: 10 * time.Second, Delta: 5 * time.Second}, clocktest.Seconds(10, 15, 20, 25)},
		{"APIManagement exponential: the APIM page's example",
			options.APIManagement{Count: 7, Interval: 10 * time.Second, Delta: 10 * time.Second, MaxInterval: 100 * time.Second, Random: fixed(0.5)},
			clocktest.Seconds(10, 20, 40, 80, 100, 100, 100)},
		{"APIManagement exponential, lowest jitter",
			options.APIManagement{Count: 5, Interval: 10 * time.Second, Delta: 10 * time.Second, MaxInterval: 100 * time.Second, Random: fixed(0)},
			clocktest.Seconds(10, 18, 34, 66, 100)},
		{"APIManagement first fast retry, fixed",
			options.APIManagement{Count: 3, Interval: time.Second, FirstFastRetry: true}, clocktest.Seconds(0, 1, 1)},
		{"APIManagement first fast retry, linear keeps n",
			options.APIManagement{Count: 3, Interval: 10 * time.Second, Delta: 5 * time.Second, FirstFastRetry: true}, clocktest.Seconds(0, 15, 20)},
		{"APIManagement first fast retry, exponential keeps n",
			options.APIManagement{Count: 3, Interval: 10 * time.Second, Delta: 10 * time.Second, MaxInterval: 100 * time.Second, FirstFastRetry: true, Random: fixed(0.5)},
			clocktest.Seconds(0, 20, 40)},
		{"APIManagement 50 retries", options.APIManagement{Count: 50, Interval: time.Second}, clocktest.Repeat(time.Second, 50)},
		{"PolicyFunc", options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			return time.Duration(a.Retry) * time.Millisecond, a.Retry <= 2
		}), []time.Duration{time.Millisecond, 2 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, schedule(t, tt.policy, 100))
		})
	}
}

// TestSchedulesGrowWithFailures checks that each policy grows its delay
// with the failures it timed (Attempt.Step), not with the throttles the
// server or the queue timed (Attempt.Timed), while its retry count still
// counts every retry.
func TestSchedulesGrowWithFailures(t *testing.T) {
	failure := &http.Response{StatusCode: http.StatusServiceUnavailable}
	tests := []struct {
		name         string
		policy       options.Policy
		retry, timed int
		want         time.Duration
		retries      bool
	}{
		{"Exponential, no throttle before", options.Exponential{Random: fixed(0)}, 3, 0, 27 * time.Second, true},
		{"Exponential, after three throttles", options.Exponential{Random: fixed(0)}, 4, 3, 3 * time.Second, true},
		{"Exponential, after a throttle and a failure", options.Exponential{Random: fixed(0)}, 3, 1, 12 * time.Second, true},
		{"Exponential counts throttles against Retries", options.Exponential{Retries: 3, Random: fixed(0)}, 4, 3, 0, false},
		{"Linear, after two throttles", options.Linear{}, 3, 2, 3 * time.Second, true},
		{"AzureStorageExponential, after two throttles", options.AzureStorageExponential{Random: fixed(0)}, 3, 2, 3 * time.Second, true},
		{"APIManagement exponential, after a throttle",
			options.APIManagement{Count: 5, Interval: 10 * time.Second, Delta: 10 * time.Second, MaxInterval: 100 * time.Second, Random: fixed(0.5)},
			3, 1, 20 * time.Second, true},
		{"APIManagement's first fast retry is the first retry only",
			options.APIManagement{Count: 3, Interval: 10 * time.Second, Delta: 5 * time.Second, FirstFastRetry: true}, 2, 1, 10 * time.Second, true},
		{"Fixed does not grow", options.Fixed{Interval: time.Second}, 5, 4, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.policy.Next(options.Attempt{Retry: tt.retry, Timed: tt.timed, Response: failure})
			assert.Equal(t, tt.retries, ok)
			if ok {
				assert.Equal(t, tt.want, got)
			}
		})
	}
}

func TestAttemptStep(t *testing.T) {
	tests := []struct {
		retry, timed, want int
	}{
		{1, 0, 1}, {3, 0, 3}, {3, 1, 2}, {3, 3, 1}, {1, 1, 1}, {0, 0, 1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, options.Attempt{Retry: tt.retry, Timed: tt.timed}.Step(), "Retry %d, Timed %d", tt.retry, tt.timed)
	}
}

func TestSchedulesBoundsWithRealRandom(t *testing.T) {
	const draws = 2000
	tests := []struct {
		name   string
		policy options.Policy
		// lo and hi bound the delay before retry n (index n-1), inclusive.
		lo, hi []time.Duration
	}{
		{"AzureStorageExponential defaults: about 3 s, 30 s, 90 s", options.AzureStorageExponential{},
			clocktest.Seconds(3, 27, 75), clocktest.Seconds(3, 39, 90)},
		{"AzureStorageExponential custom",
			options.AzureStorageExponential{Retries: 5, MinBackoff: time.Second, MaxBackoff: 20 * time.Second, DeltaBackoff: time.Second},
			clocktest.Seconds(1, 1.8, 3.4, 6.6, 13), clocktest.Seconds(1, 2.2, 4.6, 9.4, 19)},
		{"APIManagement exponential: about 10, 20, 40, 80, 100, 100 s",
			options.APIManagement{Count: 6, Interval: 10 * time.Second, Delta: 10 * time.Second, MaxInterval: 100 * time.Second},
			clocktest.Seconds(10, 18, 34, 66, 100, 100), clocktest.Seconds(10, 22, 46, 94, 100, 100)},
		{"Exponential defaults", options.Exponential{},
			clocktest.Seconds(2.4, 9.6, 21.6, 38.4, 60, 86.4, 117.6, 144, 144, 144),
			clocktest.Seconds(3, 12, 27, 48, 75, 108, 147, 180, 180, 180)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.lo {
				lo, hi := tt.lo[i], tt.hi[i]
				seenLo, seenHi := time.Duration(math.MaxInt64), time.Duration(0)
				for range draws {
					d, ok := tt.policy.Next(options.Attempt{Retry: i + 1})
					if !ok || d < lo || d > hi {
						t.Fatalf("retry %d: got %v, %v; want a delay in [%v, %v]", i+1, d, ok, lo, hi)
					}
					seenLo, seenHi = min(seenLo, d), max(seenHi, d)
				}
				// The jitter must actually spread the delays over most of
				// the range; a constant source would fail here.
				if hi > lo {
					assert.Less(t, seenHi-seenLo, hi-lo+1, "retry %d", i+1)
					assert.Greater(t, seenHi-seenLo, (hi-lo)*8/10, "retry %d: spread %v..%v", i+1, seenLo, seenHi)
				}
			}
			_, ok := tt.policy.Next(options.Attempt{Retry: len(tt.lo) + 1})
			assert.False(t, ok, "retry after the last")
		})
	}
}

func TestJitterNeverPassesCapOrZero(t *testing.T) {
	sources := map[string]func() float64{
		"negative": fixed(-1), "one": fixed(1), "huge": fixed(1e300), "NaN": fixed(math.NaN()), "+Inf": fixed(math.Inf(1)),
	}
	for name, src := range sources {
		t.Run(name, func(t *testing.T) {
			az := options.AzureStorageExponential{Retries: math.MaxInt, Random: src}
			apim := options.APIManagement{Count: 50, Interval: time.Second, Delta: time.Second, MaxInterval: time.Minute, Random: src}
			exp := options.Exponential{Retries: math.MaxInt, Random: src}
			for _, n := range []int{-5, 0, 1, 2, 3, 10, 50, 64, 1000, math.MaxInt} {
				d, ok := az.Next(options.Attempt{Retry: n})
				require.True(t, ok)
				assert.True(t, d >= options.DefaultStorageMinBackoff && d <= options.DefaultStorageMaxBackoff, "AzureStorageExponential retry %d: %v", n, d)
				if n <= 50 {
					d, ok = apim.Next(options.Attempt{Retry: n})
					require.True(t, ok)
					assert.True(t, d >= time.Second && d <= time.Minute, "APIManagement retry %d: %v", n, d)
				}
				d, ok = exp.Next(options.Attempt{Retry: n})
				require.True(t, ok)
				assert.True(t, d >= 0 && d <= options.DefaultMaxDelay, "Exponential retry %d: %v", n, d)
			}
		})
	}
}

func TestHugeRetryNumbersSaturate(t *testing.T) {
	d, ok := options.Linear{Retries: math.MaxInt, Interval: time.Hour, Delta: time.Hour}.Next(options.Attempt{Retry: math.MaxInt})
	require.True(t, ok)
	assert.Equal(t, time.Duration(math.MaxInt64), d)
	d, ok = options.APIManagement{Count: 50, Interval: time.Hour, Delta: 1 << 62}.Next(options.Attempt{Retry: 50})
	require.True(t, ok)
	assert.Equal(t, time.Duration(math.MaxInt64), d)
}

func TestValidate(t *testing.T) {
	type validator interface{ Validate() error }
	tests := []struct {
		name   string
		policy validator
		want   string // "" for valid
	}{
		{"NoRetry", options.NoRetry{}, ""},
		{"Fixed zero", options.Fixed{}, ""},
		{"Fixed negative Retries", options.Fixed{Retries: -1}, "Fixed.Retries = -1 must not be negative"},
		{"Fixed negative Interval", options.Fixed{Interval: -time.Second}, "Fixed.Interval = -1s must not be negative"},
		{"Linear zero", options.Linear{}, ""},
		{"Linear negative Retries", options.Linear{Retries: -2}, "Linear.Retries = -2 must not be negative"},
		{"Linear negative Interval", options.Linear{Interval: -time.Second}, "Linear.Interval = -1s must not be negative"},
		{"Linear negative Delta", options.Linear{Delta: -time.Millisecond}, "Linear.Delta = -1ms must not be negative"},
		{"Exponential zero", options.Exponential{}, ""},
		{"Exponential negative Retries", options.Exponential{Retries: -1}, "Exponential.Retries = -1 must not be negative"},
		{"AzureStorageExponential zero", options.AzureStorageExponential{}, ""},
		{"AzureStorageExponential negative Retries", options.AzureStorageExponential{Retries: -1}, "AzureStorageExponential.Retries = -1 must not be negative"},
		{"AzureStorageExponential negative MinBackoff", options.AzureStorageExponential{MinBackoff: -time.Second}, "AzureStorageExponential.MinBackoff = -1s must not be negative"},
		{"AzureStorageExponential negative MaxBackoff", options.AzureStorageExponential{MaxBackoff: -time.Second}, "AzureStorageExponential.MaxBackoff = -1s must not be negative"},
		{"AzureStorageExponential negative DeltaBackoff", options.AzureStorageExponential{DeltaBackoff: -time.Second}, "AzureStorageExponential.DeltaBackoff = -1s must not be negative"},
		{"AzureStorageExponential MinBackoff above default MaxBackoff", options.AzureStorageExponential{MinBackoff: 100 * time.Second},
			"AzureStorageExponential.MinBackoff = 1m40s must not exceed MaxBackoff (1m30s)"},
		{"AzureStorageExponential MaxBackoff below default MinBackoff", options.AzureStorageExponential{MaxBackoff: time.Second},
			"AzureStorageExponential.MinBackoff = 3s must not exceed MaxBackoff (1s)"},
		{"APIManagement minimal", options.APIManagement{Count: 1, Interval: time.Second}, ""},
		{"APIManagement full", options.APIManagement{Count: 50, Interval: time.Second, Delta: time.Second, MaxInterval: time.Second, FirstFastRetry: true}, ""},
		{"APIManagement zero value", options.APIManagement{}, "APIManagement.Count = 0 must be between 1 and 50"},
		{"APIManagement Count 51", options.APIManagement{Count: 51, Interval: time.Second}, "APIManagement.Count = 51 must be between 1 and 50"},
		{"APIManagement negative Count", options.APIManagement{Count: -3, Interval: time.Second}, "APIManagement.Count = -3 must be between 1 and 50"},
		{"APIManagement zero Interval", options.APIManagement{Count: 1}, "APIManagement.Interval = 0s must be positive"},
		{"APIManagement negative Interval", options.APIManagement{Count: 1, Interval: -time.Second}, "APIManagement.Interval = -1s must be positive"},
		{"APIManagement negative MaxInterval", options.APIManagement{Count: 1, Interval: time.Second, MaxInterval: -time.Second}, "APIManagement.MaxInterval = -1s must not be negative"},
		{"APIManagement negative Delta", options.APIManagement{Count: 1, Interval: time.Second, Delta: -time.Second}, "APIManagement.Delta = -1s must not be negative"},
		{"APIManagement MaxInterval without Delta", options.APIManagement{Count: 1, Interval: time.Second, MaxInterval: time.Minute},
			"APIManagement.MaxInterval = 1m0s needs a Delta"},
		{"APIManagement MaxInterval below Interval", options.APIManagement{Count: 1, Interval: time.Minute, Delta: time.Second, MaxInterval: time.Second},
			"APIManagement.MaxInterval = 1s must not be below Interval (1m0s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, options.ErrInvalidOption)
			assert.Contains(t, err.Error(), tt.want)

			// The handler's options report the same error, under the Policy field.
			o := options.RetryHandlerOptions{Policy: tt.policy.(options.Policy)}
			err = o.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, options.ErrInvalidOption)
			assert.Contains(t, err.Error(), "RetryHandlerOptions.Policy: ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestAPIManagementCondition(t *testing.T) {
	status := func(code int) options.Attempt {
		return options.Attempt{Retry: 1, Response: &http.Response{StatusCode: code}}
	}
	serverErrors := func(a options.Attempt) bool { return a.Err != nil || a.Response.StatusCode >= 500 }
	tests := []struct {
		name           string
		condition      func(options.Attempt) bool
		attempt        options.Attempt
		retry, decided bool
		nextOK         bool
	}{
		{"no condition leaves the status list to decide", nil, status(500), false, false, true},
		{"condition retries a 500", serverErrors, status(500), true, true, true},
		{"condition retries a transport error", serverErrors, options.Attempt{Retry: 1, Err: errors.New("connection reset")}, true, true, true},
		{"condition declines a 429", serverErrors, status(429), false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := options.APIManagement{Count: 2, Interval: time.Second, Condition: tt.condition}
			var c options.Classifier = p
			retry, decided := c.Retryable(tt.attempt)
			assert.Equal(t, tt.retry, retry)
			assert.Equal(t, tt.decided, decided)
			_, ok := p.Next(tt.attempt)
			assert.Equal(t, tt.nextOK, ok, "Next")
		})
	}
}

func TestEffectivePolicyFollowsMaxRetries(t *testing.T) {
	tests := []struct {
		maxRetries int
		want       int
	}{{0, 10}, {3, 3}, {20, 20}}
	for _, tt := range tests {
		o := options.RetryHandlerOptions{MaxRetries: tt.maxRetries}
		got := len(schedule(t, effective.Policy(&o), 100))
		assert.Equal(t, tt.want, got, "MaxRetries %d", tt.maxRetries)
	}
}

func TestPoliciesAreSafeForConcurrentUse(t *testing.T) {
	policies := []options.Policy{
		options.NoRetry{}, options.Fixed{}, options.Linear{}, options.Exponential{}, options.AzureStorageExponential{},
		options.APIManagement{Count: 10, Interval: time.Second, Delta: time.Second, MaxInterval: time.Minute,
			Condition: func(a options.Attempt) bool { return a.Err != nil }},
	}
	var wg sync.WaitGroup
	for _, p := range policies {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 1; n <= 200; n++ {
					p.Next(options.Attempt{Retry: n%12 + 1, Err: errors.New("x")})
				}
			}()
		}
	}
	wg.Wait()
}
