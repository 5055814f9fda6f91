package throttletest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStickTableLimiter(t *testing.T) {
	newLimiter := func(limit int, period time.Duration) Limiter {
		mk, err := StickTableLimiter(StickTable{Limit: limit, Period: period})
		require.NoError(t, err)
		return mk("", epoch)
	}
	t.Run("the limit at once, then nothing until the first period ends", func(t *testing.T) {
		l := newLimiter(400, time.Second)
		for i := range 400 {
			require.Zero(t, l.Wait(epoch, 1), "request %d", i)
			l.Take(epoch, 1)
		}
		// At the period's end the previous count weighs whole: 400 plus
		// this request is 401; a millisecond later 400·999/1000 + 1 rounds
		// down to 400.
		assert.Equal(t, 1001*time.Millisecond, l.Wait(epoch, 1))
		assert.Equal(t, 2*time.Millisecond, l.Wait(epoch.Add(999*time.Millisecond), 1))
	})
	tests := []struct {
		name   string
		limit  int
		period time.Duration
		n      int
		want   time.Duration
	}{
		// n/limit periods, less the estimate's rounding down.
		{"400 per second", 400, time.Second, 2000, 4998 * time.Millisecond},
		{"10 per second", 10, time.Second, 30, 2901 * time.Millisecond},
		{"the limit alone passes at once", 50, time.Second, 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, greedy(t, newLimiter(tt.limit, tt.period), tt.n, epoch))
		})
	}
	t.Run("refused requests count", func(t *testing.T) {
		l := newLimiter(10, time.Second)
		for range 10 {
			l.Take(epoch, 1)
		}
		r, ok := l.(Refuser)
		require.True(t, ok)
		// Ten more refused in the first period fill the previous period's
		// share of the second one: at its middle the estimate is still 10.
		for range 10 {
			r.Refuse(epoch, 1)
		}
		assert.Positive(t, l.Wait(epoch.Add(1500*time.Millisecond), 1))
		assert.Zero(t, newLimiterAfter(t, 10, 10, 1500*time.Millisecond))
	})
	t.Run("invalid", func(t *testing.T) {
		_, err := StickTableLimiter(StickTable{Limit: 0, Period: time.Second})
		assert.ErrorContains(t, err, "StickTable.Limit = 0")
		_, err = StickTableLimiter(StickTable{Limit: 1, Period: 1500 * time.Microsecond})
		assert.ErrorContains(t, err, "StickTable.Period = 1.5ms")
	})
}

// newLimiterAfter is the wait of a stick table of limit per second that
// admitted taken requests at its start and is asked again after d.
func newLimiterAfter(t *testing.T, limit, taken int, d time.Duration) time.Duration {
	mk, err := StickTableLimiter(StickTable{Limit: limit, Period: time.Second})
	require.NoError(t, err)
	l := mk("", epoch)
	for range taken {
		l.Take(epoch, 1)
	}
	return l.Wait(epoch.Add(d), 1)
}
