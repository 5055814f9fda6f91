package throttletest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// greedy admits n requests of cost 1 from a client that sends each as soon
// as the limiter's Wait says it passes, and returns when the last passed,
// counted from start.
func greedy(t *testing.T, l Limiter, n int, start time.Time) time.Duration {
	t.Helper()
	now := start
	for admitted := 0; admitted < n; {
		if w := l.Wait(now, 1); w > 0 {
			now = now.Add(w)
			continue
		}
		l.Take(now, 1)
		admitted++
	}
	return now.Sub(start)
}

var epoch = time.UnixMilli(1_700_000_000_000)

func TestLimitReqLimiter(t *testing.T) {
	newLimiter := func(rate float64, burst int) Limiter {
		mk, err := LimitReqLimiter(LimitReq{Rate: rate, Burst: burst})
		require.NoError(t, err)
		return mk("", epoch)
	}
	t.Run("burst and one more pass at once, then one per 1/rate", func(t *testing.T) {
		l := newLimiter(400, 40)
		for i := range 41 {
			require.Zero(t, l.Wait(epoch, 1), "request %d", i)
			l.Take(epoch, 1)
		}
		// excess 40000; the next needs 1000 drained at 400 per ms: 2.5 ms,
		// and nginx counts whole milliseconds.
		assert.Equal(t, 3*time.Millisecond, l.Wait(epoch, 1))
		assert.Equal(t, time.Millisecond, l.Wait(epoch.Add(2*time.Millisecond), 1))
		assert.Zero(t, l.Wait(epoch.Add(3*time.Millisecond), 1))
	})
	tests := []struct {
		name  string
		rate  float64
		burst int
		n     int
		want  time.Duration
	}{
		// (n − burst − 1)/rate, rounded up to nginx's millisecond.
		{"400/s burst 40", 400, 40, 2000, 4898 * time.Millisecond},
		{"200/s burst 20", 200, 20, 300, 1395 * time.Millisecond},
		{"40/s burst 4", 40, 4, 100, 2375 * time.Millisecond},
		{"no burst", 10, 0, 11, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, greedy(t, newLimiter(tt.rate, tt.burst), tt.n, epoch))
		})
	}
	t.Run("a refused request changes nothing", func(t *testing.T) {
		l := newLimiter(10, 0)
		l.Take(epoch, 1)
		for ms := range 99 {
			require.Positive(t, l.Wait(epoch.Add(time.Duration(ms)*time.Millisecond), 1))
		}
		assert.Zero(t, l.Wait(epoch.Add(100*time.Millisecond), 1))
	})
	t.Run("invalid", func(t *testing.T) {
		_, err := LimitReqLimiter(LimitReq{Rate: 0, Burst: 1})
		assert.ErrorContains(t, err, "LimitReq.Rate = 0")
		_, err = LimitReqLimiter(LimitReq{Rate: 1, Burst: -1})
		assert.ErrorContains(t, err, "LimitReq.Burst = -1")
	})
}
