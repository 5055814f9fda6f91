package middleware

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// countingPacer records the successes it is told of.
type countingPacer struct {
	successes      int // all of them
	beforeThrottle int // the ones it knew of at its first throttle
	throttles      int
	oneByOne       int // successes told with their sent time
}

func (p *countingPacer) next(now time.Time) time.Time { return now }
func (p *countingPacer) sent(time.Time)               {}
func (p *countingPacer) succeeded(_, _ time.Time) {
	p.successes++
	p.oneByOne++
}
func (p *countingPacer) settle(n int, _ time.Time) { p.successes += n }
func (p *countingPacer) throttled(_, _, _ time.Time) {
	if p.throttles == 0 {
		p.beforeThrottle = p.successes
	}
	p.throttles++
}

// TestQueue_Successes checks that every success reaches the host's pacer
// exactly once, those before the first throttle (counted without the
// lock) in time for it, even when a success races with that throttle. All
// are sent before the host's first answer, so all count toward its burst.
func TestQueue_Successes(t *testing.T) {
	epoch := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	sent := epoch.Add(time.Second)
	tgt := &target{host: "graph.example", url: "/v1.0/me", path: "/v1.0/me", segs: []string{"v1.0", "me"}}
	tests := []struct {
		name       string
		workers    int
		each       int
		throttleAt int  // successes of worker 0 before it reports the throttle
		late       bool // the throttle lands between a success's check and its count
	}{
		{"one by one", 1, 10, 5, false},
		{"throttled while a success is being counted", 1, 10, 5, true},
		{"concurrent", 4, 500, 250, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &countingPacer{}
			q := newQueue(clocktest.New(epoch), options.QueueOptions{})
			q.newPacer = func(time.Time) pacer { return rec }
			s := q.state(tgt.host, true)
			throttle := func() { q.throttled(tgt, sent, sent, sent.Add(time.Second)) }
			if tt.late {
				n := 0
				testHookCold = func() {
					if n++; n == tt.throttleAt+1 {
						throttle()
					}
				}
				t.Cleanup(func() { testHookCold = nil })
			}
			var wg sync.WaitGroup
			for w := range tt.workers {
				wg.Go(func() {
					for i := range tt.each {
						if w == 0 && i == tt.throttleAt && !tt.late {
							throttle()
						}
						s.succeeded(sent, &reading{t: sent.Add(time.Millisecond), read: true})
					}
				})
			}
			wg.Wait()

			s.mu.Lock()
			defer s.mu.Unlock()
			require.Equal(t, 1, rec.throttles)
			assert.Equal(t, tt.workers*tt.each, rec.successes, "successes told to the pacer")
			assert.Zero(t, s.cold.Load(), "successes left uncounted")
			assert.GreaterOrEqual(t, rec.beforeThrottle, tt.throttleAt, "successes known at the first throttle")
			if tt.workers == 1 {
				assert.Equal(t, tt.throttleAt, rec.beforeThrottle)
				late := tt.each - tt.throttleAt
				if tt.late {
					late-- // the racing one is settled as cold
				}
				assert.Equal(t, late, rec.oneByOne, "successes after the throttle, told one by one")
			}
		})
	}
}
