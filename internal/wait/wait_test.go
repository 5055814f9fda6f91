package wait

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
)

func TestUntil(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name    string
		at      time.Duration // after t0
		cancel  bool          // cancel the context while it waits
		want    error
		waitFor time.Duration // how long the clock must advance
	}{
		{"a time passed returns at once", -time.Second, false, nil, 0},
		{"a time to come is waited for", 2 * time.Second, false, nil, 2 * time.Second},
		{"a canceled context ends the wait", time.Hour, true, context.Canceled, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.New(t0)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- Until(ctx, clk, t0.Add(tt.at)) }()
				synctest.Wait()
				if tt.cancel {
					cancel()
				} else if tt.waitFor > 0 {
					select {
					case <-done:
						t.Fatal("returned before its time")
					default:
					}
					clk.Advance(tt.waitFor)
				}
				assert.ErrorIs(t, <-done, tt.want)
				assert.Empty(t, clk.Pending(), "no timer left")
			})
		})
	}
}

func TestWoken(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name   string
		d      time.Duration
		act    func(clk *clocktest.Clock, wake chan<- struct{}, cancel context.CancelFunc)
		want   error
		timers int // timers the wait starts
	}{
		{"its time comes", 2 * time.Second, func(clk *clocktest.Clock, _ chan<- struct{}, _ context.CancelFunc) { clk.Advance(2 * time.Second) }, nil, 1},
		{"a wake ends a timed wait", time.Hour, func(_ *clocktest.Clock, wake chan<- struct{}, _ context.CancelFunc) { wake <- struct{}{} }, nil, 1},
		{"a wake ends an untimed wait", -1, func(_ *clocktest.Clock, wake chan<- struct{}, _ context.CancelFunc) { wake <- struct{}{} }, nil, 0},
		{"a canceled context ends a timed wait", time.Hour, func(_ *clocktest.Clock, _ chan<- struct{}, cancel context.CancelFunc) { cancel() }, context.Canceled, 1},
		{"a canceled context ends an untimed wait", -1, func(_ *clocktest.Clock, _ chan<- struct{}, cancel context.CancelFunc) { cancel() }, context.Canceled, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.New(t0)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				wake := make(chan struct{}, 1)
				done := make(chan error, 1)
				go func() { done <- Woken(ctx, clk, tt.d, wake) }()
				synctest.Wait()
				assert.Len(t, clk.Pending(), tt.timers)
				select {
				case <-done:
					t.Fatal("returned before anything ended its wait")
				default:
				}
				tt.act(clk, wake, cancel)
				assert.ErrorIs(t, <-done, tt.want)
				assert.Empty(t, clk.Pending(), "no timer left")
			})
		})
	}
}
