package middleware

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

const graph = "https://graph.test"

func targetOf(t *testing.T, rawURL string) *target {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return newTarget(&http.Request{URL: u})
}

// matchAt runs the matching rules for rawURL at now.
func matchAt(t *testing.T, q *queue, rawURL string, now time.Time) (until time.Time, paced bool) {
	t.Helper()
	tg := targetOf(t, rawURL)
	s := q.state(tg.host, false)
	if s == nil {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return q.match(s, tg, now)
}

// throttle is one throttled answer: the URL, and when its throttle ends
// after t0.
type throttle struct {
	url string
	end time.Duration
}

// throttledFor returns throttles of urls, each ending 10 s after t0.
func throttledFor(urls ...string) []throttle {
	out := make([]throttle, len(urls))
	for i, u := range urls {
		out[i] = throttle{graph + u, 10 * time.Second}
	}
	return out
}

func TestQueueMatch(t *testing.T) {
	const (
		s = time.Second
		// recovery is the queue's; every throttle below ends at 10 s unless
		// told, so it paces until 15 s.
		recovery = 5 * s
	)
	tests := []struct {
		name      string
		throttled []throttle
		probe     string        // URL asked about
		at        time.Duration // after t0
		until     time.Duration // after t0; 0: not held
		paced     bool
	}{
		{"exact URL held", throttledFor("/v1.0/users/a?$select=id"), graph + "/v1.0/users/a?$select=id", s, 10 * s, true},
		{"same path, other query held", throttledFor("/v1.0/me/messages?$top=5"), graph + "/v1.0/me/messages?$top=10", s, 10 * s, true},
		{"same path, no query held", throttledFor("/v1.0/me/messages?$top=5"), graph + "/v1.0/me/messages", s, 10 * s, true},
		{"n=2: 1 throttled sharing two segments is not enough", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/x", s, 0, false},
		{"n=2: 2 throttled sharing two segments are not enough", throttledFor("/v1.0/users/a", "/v1.0/users/b"), graph + "/v1.0/users/x", s, 0, false},
		{"n=2: 3 throttled sharing two segments hold", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/users/x", s, 10 * s, true},
		{"n=2: 3 throttles of one URL count as 3", throttledFor("/v1.0/users/a", "/v1.0/users/a", "/v1.0/users/a"), graph + "/v1.0/users/x", s, 10 * s, true},
		{"n=1: 3 throttled sharing one segment are not enough", throttledFor("/v1.0/a/1", "/v1.0/b/1", "/v1.0/c/1"), graph + "/v1.0/z", s, 0, false},
		{"n=1: 4 throttled sharing one segment hold", throttledFor("/v1.0/a/1", "/v1.0/b/1", "/v1.0/c/1", "/v1.0/d/1"), graph + "/v1.0/z", s, 10 * s, true},
		{"n=3: 1 throttled sharing three segments is not enough", throttledFor("/v1.0/users/a/messages/1"), graph + "/v1.0/users/a/events", s, 0, false},
		{"n=3: 2 throttled sharing three segments hold", throttledFor("/v1.0/users/a/messages/1", "/v1.0/users/a/events/2"), graph + "/v1.0/users/a/calendar", s, 10 * s, true},
		{"n=4: 1 throttled sharing four segments holds", throttledFor("/v1.0/users/a/messages/1"), graph + "/v1.0/users/a/messages/2", s, 10 * s, true},
		{"the rule takes the n-th newest end", []throttle{
			{graph + "/v1.0/users/a", 30 * s}, {graph + "/v1.0/users/b", 10 * s}, {graph + "/v1.0/users/c", 20 * s}, {graph + "/v1.0/users/d", 5 * s},
		}, graph + "/v1.0/users/x", s, 10 * s, true},
		{"the latest matching throttle wins", []throttle{
			{graph + "/v1.0/me/messages?$top=1", 10 * s}, {graph + "/v1.0/me/messages?$top=2", 20 * s},
		}, graph + "/v1.0/me/messages?$top=1", s, 20 * s, true},
		{"another host is never held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"), "https://other.test/v1.0/users/a", s, 0, false},
		{"no shared leading segment is never held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"), graph + "/beta/users/a", s, 0, false},
		{"too few shared segments not held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/groups/x", s, 0, false},
		{"ended: not held but paced", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/a", 10 * s, 0, true},
		{"ended: paced to the end of recovery", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/a", 15*s - time.Nanosecond, 0, true},
		{"after recovery: neither held nor paced", throttledFor("/v1.0/users/a"), graph + "/v1.0/users/a", 15 * s, 0, false},
		{"n=2 rule ended: paced, not held", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/users/x", 12 * s, 0, true},
		{"n=2 rule after recovery: not paced", throttledFor("/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"), graph + "/v1.0/users/x", 15 * s, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(clocktest.New(t0), options.QueueOptions{Recovery: recovery})
			for _, th := range tt.throttled {
				q.throttled(targetOf(t, th.url), t0, t0, t0.Add(th.end))
			}
			now := t0.Add(tt.at)
			until, paced := matchAt(t, q, tt.probe, now)
			if tt.until == 0 {
				assert.False(t, until.After(now), "held until %v", until.Sub(t0))
			} else {
				assert.Equal(t, tt.until, until.Sub(t0), "held until")
			}
			assert.Equal(t, tt.paced, paced, "paced")
		})
	}
}

func TestQueueIdle(t *testing.T) {
	q := newQueue(clocktest.New(t0), options.QueueOptions{})
	assert.True(t, q.idle("graph.test"), "never throttled")
	q.succeeded("graph.test", t0, t0)
	assert.True(t, q.idle("graph.test"), "a success does not wake the queue")
	q.throttled(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(time.Second))
	assert.False(t, q.idle("graph.test"), "throttled")
	assert.True(t, q.idle("other.test"), "another host")
}
