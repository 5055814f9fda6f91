package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// answer is a scripted reply with status and a body.
func answer(status int) reply { return reply{status: status, body: "body"} }

// after is a scripted reply with status and a Retry-After of retryAfter.
func after(status int, retryAfter string) reply {
	return reply{status: status, header: map[string]string{"Retry-After": retryAfter}, body: "body"}
}

func get(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	return req
}

// nonZero drops the zero delays from want: an immediate retry starts no
// timer. The Retry-Attempt headers the server saw still count it.
func nonZero(want []time.Duration) []time.Duration {
	var out []time.Duration
	for _, d := range want {
		if d != 0 {
			out = append(out, d)
		}
	}
	return out
}

// wantAttempts is the Retry-Attempt header each attempt carried: none on
// the first, then 1, 2, ...
func wantAttempts(n int) []string {
	out := []string{""}
	for i := 1; i < n; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

// doNotRetry502 is the Azure Storage blog's second custom policy: a fixed
// interval that gives up at once on a status it was told to fail on.
func doNotRetry502(retries int, interval time.Duration, fail ...int) options.Policy {
	return options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
		if a.Response != nil && slices.Contains(fail, a.Response.StatusCode) {
			return 0, false
		}
		return interval, a.Retry <= retries
	})
}

// queueModes runs the policy tests with the throttle queue on (the
// default) and off: the queue honours Retry-After on its own, and the
// rules must hold without it too.
var queueModes = []struct {
	name     string
	disabled bool
}{{"queue on", false}, {"queue off", true}}

// runScript sends one GET through a handler built from opts, with the
// queue turned off when queueOff, to a server answering steps, and returns
// what the client got, the waits the handler started, and the server.
func runScript(t *testing.T, opts options.RetryHandlerOptions, queueOff bool, steps []reply) (result, []time.Duration, *scripted) {
	t.Helper()
	opts.Queue.Disabled = queueOff
	h, clock := newHandler(t, opts)
	srv := newRepeating(t, steps...)
	got, waits := do(clock, newClient(t, h), get(t, srv.URL))
	return got, waits, srv
}

func TestPoliciesDriveTheHandler(t *testing.T) {
	serverErrors := func(a options.Attempt) bool { return a.Err != nil || a.Response.StatusCode >= 500 }
	tests := []struct {
		name       string
		opts       options.RetryHandlerOptions
		steps      []reply
		delays     []time.Duration
		wantStatus int  // 0 when an error is expected
		wantErr    bool // a transport error reaches the caller
	}{
		{name: "NoRetry returns the first failure",
			opts: options.RetryHandlerOptions{Policy: options.NoRetry{}}, steps: []reply{answer(503)},
			wantStatus: 503},
		{name: "Fixed retries its count, then returns the last failure",
			opts:  options.RetryHandlerOptions{Policy: options.Fixed{Retries: 2, Interval: 2 * time.Second}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(2, 2), wantStatus: 503},
		{name: "Linear until success",
			opts:  options.RetryHandlerOptions{Policy: options.Linear{Retries: 5, Interval: time.Second, Delta: 500 * time.Millisecond}},
			steps: []reply{answer(503), answer(504), answer(429), answer(200)}, delays: clocktest.Seconds(1, 1.5, 2), wantStatus: 200},
		{name: "Exponential as a policy value keeps its count of 10",
			opts:  options.RetryHandlerOptions{Policy: options.Exponential{Random: func() float64 { return 0 }}},
			steps: []reply{answer(429)}, delays: clocktest.Seconds(3, 12, 27, 48, 75, 108, 147, 180, 180, 180), wantStatus: 429},
		{name: "AzureStorageExponential defaults: 3 s, about 30 s, 90 s",
			opts:  options.RetryHandlerOptions{Policy: options.AzureStorageExponential{Random: fixedHalf}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(3, 33, 90), wantStatus: 503},
		{name: "APIManagement exponential: 10, 20, 40, 80, 100, 100 s",
			opts: options.RetryHandlerOptions{Policy: options.APIManagement{Count: 6, Interval: 10 * time.Second,
				Delta: 10 * time.Second, MaxInterval: 100 * time.Second, Random: fixedHalf}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(10, 20, 40, 80, 100, 100), wantStatus: 503},
		{name: "APIManagement linear with a first fast retry",
			opts: options.RetryHandlerOptions{Policy: options.APIManagement{Count: 3, Interval: 10 * time.Second,
				Delta: 5 * time.Second, FirstFastRetry: true}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(0, 15, 20), wantStatus: 503},
		{name: "APIManagement without Condition leaves 500 to the status list",
			opts:  options.RetryHandlerOptions{Policy: options.APIManagement{Count: 3, Interval: time.Second}},
			steps: []reply{answer(500)}, wantStatus: 500},
		{name: "APIManagement Condition retries a 500",
			opts:  options.RetryHandlerOptions{Policy: options.APIManagement{Count: 3, Interval: time.Second, Condition: serverErrors}},
			steps: []reply{answer(500), answer(502), answer(200)}, delays: clocktest.Seconds(1, 1), wantStatus: 200},
		{name: "APIManagement Condition declines a 429 the status list would retry",
			opts:  options.RetryHandlerOptions{Policy: options.APIManagement{Count: 3, Interval: time.Second, Condition: serverErrors}},
			steps: []reply{answer(429)}, wantStatus: 429},
		{name: "APIManagement Condition retries a transport error",
			opts:  options.RetryHandlerOptions{Policy: options.APIManagement{Count: 3, Interval: time.Second, Condition: serverErrors}},
			steps: []reply{{hangup: true}, answer(200)}, delays: clocktest.Seconds(1), wantStatus: 200},
		{name: "APIManagement Condition can refuse a transport error",
			opts: options.RetryHandlerOptions{Policy: options.APIManagement{Count: 3, Interval: time.Second,
				Condition: func(a options.Attempt) bool { return a.Err == nil && a.Response.StatusCode == 503 }}},
			steps: []reply{{hangup: true}, answer(200)}, wantErr: true},
		{name: "user-written policy: do not retry 502",
			opts: options.RetryHandlerOptions{Policy: doNotRetry502(5, time.Second, http.StatusBadGateway),
				StatusCodes: []int{502, 503}},
			steps: []reply{answer(503), answer(502), answer(200)}, delays: clocktest.Seconds(1), wantStatus: 502},
	}
	for _, tt := range tests {
		for _, queue := range queueModes {
			t.Run(tt.name+"/"+queue.name, func(t *testing.T) {
				got, waits, srv := runScript(t, tt.opts, queue.disabled, tt.steps)

				assert.Equal(t, nonZero(tt.delays), waits, "delays")

				if tt.wantErr {
					assert.Error(t, got.err)
				} else {
					require.NoError(t, got.err)
					assert.Equal(t, tt.wantStatus, got.resp.StatusCode)
				}
				assert.Equal(t, wantAttempts(len(tt.delays)+1), srv.retryAttempts())
			})
		}
	}
}

// TestHandlerRulesOnTopOfPolicies checks the rule set documented on
// options.Policy: Retry-After is never undercut, and MaxRetries,
// MaxElapsed and RetriesTimeLimit stay ceilings over the policy's count.
func TestHandlerRulesOnTopOfPolicies(t *testing.T) {
	fixed := func(retries int, interval time.Duration) options.Policy {
		return options.Fixed{Retries: retries, Interval: interval}
	}
	tests := []struct {
		name   string
		opts   options.RetryHandlerOptions
		steps  []reply
		delays []time.Duration
		status int
	}{
		{name: "Retry-After longer than the policy's delay wins",
			opts:  options.RetryHandlerOptions{Policy: fixed(2, time.Second)},
			steps: []reply{after(429, "5")}, delays: clocktest.Seconds(5, 5), status: 429},
		{name: "policy's delay longer than Retry-After wins",
			opts:  options.RetryHandlerOptions{Policy: fixed(1, 10*time.Second)},
			steps: []reply{after(429, "2"), answer(200)}, delays: clocktest.Seconds(10), status: 200},
		{name: "a first fast retry still waits for Retry-After",
			opts:  options.RetryHandlerOptions{Policy: options.APIManagement{Count: 2, Interval: time.Second, FirstFastRetry: true}},
			steps: []reply{after(503, "4")}, delays: clocktest.Seconds(4, 4), status: 503},
		{name: "Retry-After on a response the policy declines is not waited for",
			opts:  options.RetryHandlerOptions{Policy: options.NoRetry{}},
			steps: []reply{after(429, "5")}, status: 429},
		{name: "MaxRetries 0 leaves the count to the policy",
			opts:  options.RetryHandlerOptions{Policy: fixed(2, time.Second)},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(1, 1), status: 503},
		{name: "MaxRetries 0 and a policy's default count",
			opts:  options.RetryHandlerOptions{Policy: options.Fixed{Interval: time.Second}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(1, 1, 1, 1, 1, 1, 1, 1, 1, 1), status: 503},
		{name: "MaxRetries below the policy's count caps it",
			opts:  options.RetryHandlerOptions{MaxRetries: 1, Policy: fixed(5, time.Second)},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(1), status: 503},
		{name: "MaxRetries above the policy's count does not extend it",
			opts:  options.RetryHandlerOptions{MaxRetries: 5, Policy: fixed(2, time.Second)},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(1, 1), status: 503},
		{name: "negative MaxRetries never retries",
			opts:  options.RetryHandlerOptions{MaxRetries: -1, Policy: fixed(5, time.Second)},
			steps: []reply{answer(503)}, status: 503},
		{name: "MaxRetries caps APIManagement's Count",
			opts:  options.RetryHandlerOptions{MaxRetries: 2, Policy: options.APIManagement{Count: 50, Interval: time.Second}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(1, 1), status: 503},
		{name: "MaxElapsed stops a retry whose delay would pass it",
			opts:  options.RetryHandlerOptions{MaxElapsed: 25 * time.Second, Policy: fixed(10, 10*time.Second)},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(10, 10), status: 503},
		{name: "MaxElapsed is checked against Retry-After too",
			opts:  options.RetryHandlerOptions{MaxElapsed: 50 * time.Second, Policy: fixed(10, time.Second)},
			steps: []reply{after(429, "100")}, status: 429},
		{name: "RetriesTimeLimit bounds the total wait",
			opts:  options.RetryHandlerOptions{RetriesTimeLimit: 15 * time.Second, Policy: options.Linear{Retries: 10, Interval: 5 * time.Second, Delta: 5 * time.Second}},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(5, 10), status: 503},
		{name: "MaxDelay does not cap a policy's delay",
			opts:  options.RetryHandlerOptions{MaxDelay: time.Second, Policy: fixed(1, 5*time.Second)},
			steps: []reply{answer(503)}, delays: clocktest.Seconds(5), status: 503},
	}
	for _, tt := range tests {
		for _, queue := range queueModes {
			t.Run(tt.name+"/"+queue.name, func(t *testing.T) {
				got, waits, srv := runScript(t, tt.opts, queue.disabled, tt.steps)

				assert.Equal(t, nonZero(tt.delays), waits, "delays")

				require.NoError(t, got.err)
				assert.Equal(t, tt.status, got.resp.StatusCode)
				assert.Equal(t, wantAttempts(len(tt.delays)+1), srv.retryAttempts())
			})
		}
	}
}

func TestPerRequestPolicyOverride(t *testing.T) {
	h, clock := newHandler(t, options.RetryHandlerOptions{Policy: options.Fixed{Retries: 5, Interval: time.Second}})
	srv := newRepeating(t, answer(503))
	override := &options.RetryHandlerOptions{Policy: options.APIManagement{Count: 1, Interval: 7 * time.Second}}
	req := get(t, srv.URL)
	req = req.WithContext(context.WithValue(req.Context(), override.GetKey(), override))

	got, waits := do(clock, newClient(t, h), req)

	require.NoError(t, got.err)
	assert.Equal(t, 503, got.resp.StatusCode)
	assert.Equal(t, clocktest.Seconds(7), waits)
	assert.Equal(t, wantAttempts(2), srv.retryAttempts())
}

func TestNewRetryHandlerRejectsInvalidPolicies(t *testing.T) {
	tests := []struct {
		policy options.Policy
		want   string
	}{
		{options.Fixed{Retries: -1}, "Fixed.Retries = -1"},
		{options.Linear{Delta: -time.Second}, "Linear.Delta = -1s"},
		{options.Exponential{MaxDelay: -time.Second}, "Exponential.MaxDelay = -1s"},
		{options.AzureStorageExponential{MinBackoff: 2 * time.Minute}, "AzureStorageExponential.MinBackoff = 2m0s"},
		{options.APIManagement{Count: 0, Interval: time.Second}, "APIManagement.Count = 0"},
		{options.APIManagement{Count: 51, Interval: time.Second}, "APIManagement.Count = 51"},
		{&options.APIManagement{Count: 3}, "APIManagement.Interval = 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: tt.policy})
			assert.Nil(t, h)
			require.Error(t, err)
			assert.True(t, errors.Is(err, options.ErrInvalidOption))
			assert.Contains(t, err.Error(), "RetryHandlerOptions.Policy")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestPolicyAskedOncePerRetry checks that the policy is asked once per
// retry, and its one answer is both the queue's hold of a throttle that
// names no wait and the delay: a stateful policy (kiota-http-go's schedule
// adds up the delays it gave) must not be asked again for the same retry.
// A batch's items throttled without a wait are held for that same answer.
// Each call also says how many answers so far named their wait
// (Attempt.Timed), with the queue on or off.
func TestPolicyAskedOncePerRetry(t *testing.T) {
	const bareItems = `{"responses":[{"id":"1","status":429},{"id":"2","status":429}]}`
	const namedItems = `{"responses":[{"id":"1","status":429,"headers":{"Retry-After":"1"}},{"id":"2","status":200,"body":{}}]}`
	bothOK := `{"responses":[{"id":"1","status":200,"body":{}},{"id":"2","status":200,"body":{}}]}`
	tests := []struct {
		name    string
		replies []reply
		batch   bool
		retries []int // the retry each call was about
		// Attempt.Timed at each call: the answers so far that named their
		// wait, whose retries the server timed rather than a backoff.
		timed []int
	}{
		{"429s naming no wait", []reply{answer(429), answer(429), answer(429)}, false, []int{1, 2, 3}, []int{0, 0, 0}},
		{"429s naming a wait", []reply{after(429, "2"), after(429, "2")}, false, []int{1, 2}, []int{1, 2}},
		{"503s", []reply{answer(503), answer(503)}, false, []int{1, 2}, []int{0, 0}},
		{"429s naming a wait, then 503s", []reply{after(429, "1"), after(429, "1"), answer(503), answer(503)}, false, []int{1, 2, 3, 4}, []int{1, 2, 2, 2}},
		{"a 503 naming a wait, then one naming none", []reply{after(503, "1"), answer(503)}, false, []int{1, 2}, []int{1, 1}},
		{"a batch whose items name no wait", []reply{batchOK(bareItems), batchOK(bareItems), batchOK(bothOK)}, true, []int{1, 2}, []int{0, 0}},
		{"a batch whose items name a wait", []reply{batchOK(namedItems), batchOK(bothOK)}, true, []int{1}, []int{1}},
	}
	for _, tt := range tests {
		for _, queue := range queueModes {
			t.Run(tt.name+"/"+queue.name, func(t *testing.T) {
				var mu sync.Mutex
				var asked, timed []int
				policy := options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
					mu.Lock()
					defer mu.Unlock()
					asked, timed = append(asked, a.Retry), append(timed, a.Timed)
					return time.Second, a.Retry <= 5
				})
				h, clk := newHandler(t, options.RetryHandlerOptions{Policy: policy, Queue: options.QueueOptions{Disabled: queue.disabled}})
				srv := newScripted(t, tt.replies...)
				req := get(t, srv.URL)
				if tt.batch {
					req = kiotaBatch(t, srv.URL, []byte(twoItems))
				}

				got, _ := do(clk, newClient(t, h), req)

				require.NoError(t, got.err)
				assert.Equal(t, http.StatusOK, got.resp.StatusCode)
				assert.Equal(t, tt.retries, asked)
				assert.Equal(t, tt.timed, timed)
			})
		}
	}
}

// TestDefaultBackoffGrowsWithFailures checks the default backoff's
// schedule across throttles: a failure after throttles the server timed
// waits the first failure's delay, not the one its retry number gives.
func TestDefaultBackoffGrowsWithFailures(t *testing.T) {
	const first, second = 2700 * time.Millisecond, 10800 * time.Millisecond // 3 s and 12 s, less the jitter at 0.5
	tests := []struct {
		name    string
		replies []reply
		waits   []time.Duration
	}{
		{"503s", []reply{answer(503), answer(503)}, []time.Duration{first, second}},
		{"two throttles naming 1 s, then two 503s", []reply{after(429, "1"), after(429, "1"), answer(503), answer(503)},
			[]time.Duration{time.Second, time.Second, first, second}},
		{"a 503 between throttles", []reply{answer(503), after(429, "1"), answer(503)}, []time.Duration{first, time.Second, second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, clk := newHandler(t, options.RetryHandlerOptions{
				Policy: options.Exponential{Random: fixedHalf},
				Queue:  options.QueueOptions{Disabled: true},
			})
			srv := newScripted(t, tt.replies...)

			got, waits := do(clk, newClient(t, h), get(t, srv.URL))

			require.NoError(t, got.err)
			assert.Equal(t, http.StatusOK, got.resp.StatusCode)
			assert.Equal(t, tt.waits, waits)
		})
	}
}
