package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
)

func TestAnnouncedNext(t *testing.T) {
	t0 := time.Unix(1000, 0)
	remaining := func(r float64, reset time.Duration) ratelimit.Budget {
		b := ratelimit.Budget{Limit: 10, Remaining: r, HasRemaining: true}
		if reset > 0 {
			b.Reset = t0.Add(reset)
		}
		return b
	}
	tests := []struct {
		name     string
		budget   ratelimit.Budget
		inflight int // when the answer came
		out      int // when next is asked
		at       time.Duration
		want     time.Duration // from t0
	}{
		{name: "room left", budget: remaining(3, time.Second), want: 0},
		{name: "room taken by requests in flight", budget: remaining(3, time.Second), inflight: 3, out: 3, want: time.Second},
		{name: "spent: closed until its reset", budget: remaining(0, 2*time.Second), want: 2 * time.Second},
		{name: "spent, reset passed: open", budget: remaining(0, time.Second), at: time.Second, want: time.Second},
		{name: "spent, reset passed, limit in flight", budget: remaining(0, answerWait/2), inflight: 10, out: 10, at: answerWait / 2, want: answerWait},
		{name: "spent without reset, answers due", budget: remaining(0, 0), out: 2, want: answerWait},
		{name: "spent without reset, none out: one asks", budget: remaining(0, 0), want: 0},
		{name: "spent without reset, answers overdue: one asks", budget: remaining(0, 0), out: 2, at: 2 * answerWait, want: 2 * answerWait},
		{name: "graph percentage spent", budget: ratelimit.Budget{Used: 1.2}, out: 1, want: answerWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a announced
			a.refresh(tt.budget, t0, t0, tt.inflight)
			assert.True(t, a.counted())
			assert.Equal(t, t0.Add(tt.want), a.next(t0.Add(tt.at), tt.out))
		})
	}
}

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
