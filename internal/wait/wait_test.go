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
