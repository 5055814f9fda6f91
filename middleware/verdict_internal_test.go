package middleware

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// An answer is classified in one place, from its status and the wait its
// Retry-After names.
func TestVerdict(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		wait       time.Duration
		named      bool
		want       throttle.Outcome
		hold       time.Duration
		policyHold bool
	}{
		{"a success", http.StatusOK, 0, false, throttle.Succeeded, 0, false},
		{"a client error", http.StatusNotFound, 0, false, throttle.Succeeded, 0, false},
		{"a 429 naming its wait", http.StatusTooManyRequests, 3 * time.Second, true, throttle.Throttled, 3 * time.Second, false},
		{"a bare 429 names no wait: the policy's delay is the retry's", http.StatusTooManyRequests, 0, false, throttle.ThrottledNoWait, 0, true},
		{"a 503 naming its wait", http.StatusServiceUnavailable, time.Second, true, throttle.Throttled, time.Second, false},
		{"a bare 503 is for the queue to judge", http.StatusServiceUnavailable, 0, false, throttle.Unavailable, 0, true},
		{"a 504 naming its wait", http.StatusGatewayTimeout, time.Second, true, throttle.Throttled, time.Second, false},
		{"a bare 504 is a failure", http.StatusGatewayTimeout, 0, false, throttle.Failed, 0, false},
		{"a 500 is a failure", http.StatusInternalServerError, 0, false, throttle.Failed, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, hold, policyHold := verdict(tt.status, tt.wait, tt.named)
			assert.Equal(t, tt.want, o)
			assert.Equal(t, tt.hold, hold)
			assert.Equal(t, tt.policyHold, policyHold)
			if !namesItsWait(tt.status) {
				assert.False(t, tt.named, "only a 429, 503 or 504 is judged by its wait")
			}
		})
	}
}

// A throttle that names no wait of an attempt a budget's pace let go is
// the pace's overshoot: the policy sees it as timed, and its delay does
// not step up. One the pace did not let go steps it, as the design's
// backoff does for every failure.
func TestPacedThrottleIsTimed(t *testing.T) {
	tests := []struct {
		name      string
		paced     bool
		wantTimed int
	}{
		{"let go by a budget's pace", true, 2},
		{"sent unpaced", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
			var seen int
			policy := options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) { seen = a.Timed; return time.Second, true })
			ans := answer{n: 3, resp: resp, back: reading{clock: clocktest.New(time.Unix(0, 0))}, policy: policy, timed: 1}
			assert.Equal(t, time.Second, ans.policyHold(tt.paced))
			assert.Equal(t, tt.wantTimed, seen)
			assert.Equal(t, tt.wantTimed, ans.attempt().Timed, "the loop carries it to the next answer")
		})
	}
}

// The header is parsed once per answer: the queue and the policy see the
// same wait, whatever changes the header after.
func TestAnswerParsesItsWaitOnce(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3"}}}
	ans := answer{n: 1, resp: resp, back: reading{clock: clocktest.New(time.Unix(0, 0))}, policy: nil}
	d, ok := ans.namedWait()
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d)
	resp.Header.Set("Retry-After", "7")
	a := ans.attempt()
	assert.True(t, a.HasRetryAfter)
	assert.Equal(t, 3*time.Second, a.RetryAfter, "the wait read for the queue")
}

// With the queue off, an answer is read alone: a bare 503 is a failure
// and no throttle is held for the policy's delay; the wait is parsed only
// for the statuses judged by it.
func TestClassifyWithTheQueueOff(t *testing.T) {
	tests := []struct {
		name   string
		status int
		named  time.Duration // 0: none named
		want   throttle.Outcome
		hold   time.Duration
		parsed bool
	}{
		{"a success is not parsed", http.StatusOK, 0, throttle.Succeeded, 0, false},
		{"a 429 holds what it names", http.StatusTooManyRequests, 2 * time.Second, throttle.Throttled, 2 * time.Second, true},
		{"a bare 429 holds nothing without a queue", http.StatusTooManyRequests, 0, throttle.ThrottledNoWait, 0, true},
		{"a bare 503 is a failure without a queue", http.StatusServiceUnavailable, 0, throttle.Failed, 0, true},
		{"a 500 is not parsed", http.StatusInternalServerError, 0, throttle.Failed, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parsed := false
			namedWait := func() (time.Duration, bool) { parsed = true; return tt.named, tt.named > 0 }
			back := func() time.Time { t.Fatal("no queue asks when the answer came"); return time.Time{} }
			policy := func(bool) time.Duration { t.Fatal("no queue holds for the policy's delay"); return 0 }
			o, hold := classify(nil, nil, nil, tt.status, namedWait, back, policy)
			assert.Equal(t, tt.want, o)
			assert.Equal(t, tt.hold, hold)
			assert.Equal(t, tt.parsed, parsed)
		})
	}
}

// Only a 429 that named no wait, to a request that is no JSON batch and
// whose retries have not gone early maxEarlyRetries times, lets its retry
// go before the policy's delay.
func TestRefusedRate(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		outcome throttle.Outcome
		early   int // retries of the request that went early
		batch   bool
		want    bool
	}{
		{"a bare 429", http.StatusTooManyRequests, throttle.ThrottledNoWait, 0, false, true},
		{"a bare 429 after early retries refused", http.StatusTooManyRequests, throttle.ThrottledNoWait, maxEarlyRetries - 1, false, true},
		{"a 429 naming its wait", http.StatusTooManyRequests, throttle.Throttled, 0, false, false},
		{"a 503 taken for a capacity limit", http.StatusServiceUnavailable, throttle.ThrottledNoWait, 0, false, false},
		{"a bare 429 after as many early retries as allowed", http.StatusTooManyRequests, throttle.ThrottledNoWait, maxEarlyRetries, false, false},
		{"a JSON batch", http.StatusTooManyRequests, throttle.ThrottledNoWait, 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{early: tt.early}
			if tt.batch {
				r.batch = &batchRun{}
			}
			assert.Equal(t, tt.want, r.refusedRate(&http.Response{StatusCode: tt.status}, tt.outcome))
		})
	}
}
