package throttle

import (
	"fmt"
	"net/http"
	"net/url"
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
// lock) in time for it as its wave, even when a success races with that
// throttle; the later ones one by one.
func TestQueue_Successes(t *testing.T) {
	epoch := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	sent := epoch.Add(time.Second)
	tgt := &target{host: "graph.example", url: "/v1.0/me", path: "/v1.0/me", segs: []string{"me"}}
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
			q := New(clocktest.New(epoch), options.QueueOptions{})
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
						q.succeededAt(s, tgt.path, sent, sent.Add(time.Millisecond))
					}
				})
			}
			wg.Wait()

			s.mu.Lock()
			defer s.mu.Unlock()
			require.Equal(t, 1, rec.throttles)
			assert.Equal(t, tt.workers*tt.each, rec.successes, "successes told to the pacer")
			c, _ := s.cold.Load("me")
			assert.Zero(t, c.(*waveCount).cur.Load()+c.(*waveCount).prev.Load(), "successes left uncounted")
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

// TestWaveCount checks that the first wave is counted from the successes
// sent in the second of the throttle and the one before, with the earliest
// send among them: what a bucket let through shortly before, not traffic
// it absorbed long ago.
func TestWaveCount(t *testing.T) {
	epoch := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name      string
		sent      []int // ms after epoch
		throttle  int
		want      int
		wantStart int
	}{
		{"one wave", []int{10, 12, 11, 15}, 20, 4, 10},
		{"across a second", []int{990, 995, 1005}, 1010, 3, 990},
		{"older seconds are forgotten", []int{10, 20, 1500, 2100, 2200}, 2300, 3, 1500},
		{"a late success of the second before", []int{1010, 990, 1020}, 1030, 3, 990},
		{"nothing recent", []int{10, 20}, 5000, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c waveCount
			for _, ms := range tt.sent {
				c.add(at(ms))
			}
			n, start := c.take(at(tt.throttle))
			assert.Equal(t, tt.want, n)
			if tt.want > 0 {
				assert.Equal(t, at(tt.wantStart).UnixNano(), start.UnixNano())
			}
			n, _ = c.take(at(tt.throttle))
			assert.Zero(t, n, "taken once")
		})
	}
}

// TestQueue_BurstOfThrottledAPI checks that the burst the first throttle
// learns counts only the successes of its own API (first path segment):
// another API on the host, not throttled, does not inflate it, and the
// wave's successes that come back after the throttle do count.
func TestQueue_BurstOfThrottledAPI(t *testing.T) {
	epoch := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	q := New(clocktest.New(epoch), options.QueueOptions{})
	mail := &target{host: "graph.example", url: "/mail/1", path: "/mail/1", segs: []string{"mail", "1"}}
	s := q.state(mail.host, true)
	back := epoch.Add(5 * time.Millisecond)
	for i := range 30 {
		q.succeededAt(s, "/mail/1", epoch.Add(time.Duration(i)*100*time.Microsecond), back)
		q.succeededAt(s, "/files/1", epoch, back)
	}
	q.throttled(mail, epoch.Add(3*time.Millisecond), epoch.Add(5*time.Millisecond), epoch.Add(time.Second))
	q.succeededAt(s, "/mail/1", epoch.Add(4*time.Millisecond), back)  // sent before the throttle came back
	q.succeededAt(s, "/files/1", epoch.Add(4*time.Millisecond), back) // another API
	q.succeededAt(s, "/mail/1", epoch.Add(6*time.Millisecond), back)  // sent after
	p := s.scopes["mail"].pacer.(*adaptivePacer)
	assert.Equal(t, 31, p.burst)
	assert.Equal(t, epoch.UnixNano(), p.waveStart.UnixNano())
	assert.Equal(t, epoch.Add(5*time.Millisecond), p.waveEnd)
}

// TestQueue_CountsBoundedAPIs checks that a host whose paths start with
// ever new segments keeps counters for at most maxAPIs of them.
func TestQueue_CountsBoundedAPIs(t *testing.T) {
	epoch := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	q := New(clocktest.New(epoch), options.QueueOptions{})
	s := q.state("graph.example", true)
	back := epoch
	for i := range 3 * maxAPIs {
		q.succeededAt(s, fmt.Sprintf("/api%d", i), epoch, back)
	}
	n := 0
	s.cold.Range(func(any, any) bool { n++; return true })
	assert.Equal(t, maxAPIs, n)
	assert.Nil(t, s.count("another"), "past the cap nothing is counted")
	assert.NotNil(t, s.count("api0"), "a counted API goes on being counted")
}

// succeededAt reports a success of a request to path on the host of s,
// sent at sent and answered at back.
func (q *Queue) succeededAt(s *hostState, path string, sent, back time.Time) {
	q.succeeded(s, &http.Request{URL: &url.URL{Path: path}}, sent, func() time.Time { return back })
}
