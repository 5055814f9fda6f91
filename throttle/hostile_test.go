package throttle

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// These tests drive the queue through Admit, Report and ReportItem only,
// but for tracked, which counts what the queue keeps.

// tracked returns how many budget-tree nodes the queue keeps, over all
// hosts.
func (q *Queue) tracked() int {
	n := 0
	q.hosts.Range(func(_, v any) bool {
		s := v.(*hostState)
		s.mu.Lock()
		n += len(s.nodes)
		s.mu.Unlock()
		return true
	})
	return n
}

// get returns a GET of rawURL, with a Host header when host is set.
func get(t testing.TB, rawURL, host string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	req.Host = host
	return req
}

// throttle429 admits req and reports a 429 holding it for hold, answered
// after rtt.
func throttle429(t testing.TB, q *Queue, clk *clocktest.Clock, req *http.Request, hold, rtt time.Duration) {
	t.Helper()
	p, err := q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	clk.Advance(rtt)
	q.Report(req, p, Throttled, hold, nil, clk.Now)
}

// held reports whether the queue would hold req past a second from now:
// Admit then refuses at once with ErrHoldTooLong.
func held(t testing.TB, q *Queue, clk *clocktest.Clock, req *http.Request) bool {
	t.Helper()
	_, err := q.Admit(context.Background(), req, time.Time{}, clk.Now().Add(time.Second), nil)
	if err != nil {
		require.ErrorIs(t, err, ErrHoldTooLong)
		return true
	}
	return false
}

// TestQueue_HostsKeyedAsAuthorities checks that requests are keyed by
// their authority as RFC 9110 compares them: host names in any case, with
// or without the scheme's default port, from the URL or the Host header.
func TestQueue_HostsKeyedAsAuthorities(t *testing.T) {
	for _, tt := range []struct {
		name            string
		throttled, host string // the throttled request's URL and Host header
		next, nextHost  string
		want            bool
	}{
		{"case", "https://TENANT-A.example/v1.0/users/1", "", "https://tenant-a.example/v1.0/users/1", "", true},
		{"http's default port", "http://TENANT-A.example/v1.0/users/1", "", "http://tenant-a.example:80/v1.0/users/1", "", true},
		{"https's default port", "https://tenant-a.example:443/v1.0/users/1", "", "https://Tenant-A.Example/v1.0/users/1", "", true},
		{"an empty port", "https://tenant-a.example:/v1.0/users/1", "", "https://tenant-a.example/v1.0/users/1", "", true},
		{"Host headers", "http://10.0.0.1/v1.0/users/1", "TENANT-A.example:80", "http://10.0.0.1/v1.0/users/1", "tenant-a.example", true},
		{"IPv6", "https://[::1]:443/v1.0/users/1", "", "https://[::1]/v1.0/users/1", "", true},
		{"another port", "https://tenant-a.example:8443/v1.0/users/1", "", "https://tenant-a.example/v1.0/users/1", "", false},
		{"the other scheme's default port", "http://tenant-a.example:443/v1.0/users/1", "", "http://tenant-a.example/v1.0/users/1", "", false},
		{"another host", "https://tenant-a.example/v1.0/users/1", "", "https://tenant-b.example/v1.0/users/1", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{})
			throttle429(t, q, clk, get(t, tt.throttled, tt.host), 10*time.Second, 0)
			assert.Equal(t, tt.want, held(t, q, clk, get(t, tt.next, tt.nextHost)))
		})
	}
}

// TestQueue_SweepWhileInFlight checks that a host swept as idle while one
// of its requests is out keeps what that request's answer reports: its
// 429 holds the next request to the throttled URL.
func TestQueue_SweepWhileInFlight(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{Recovery: 10 * time.Second})
	url := graph + "/v1.0/users/1/messages"
	// The host is known: one success.
	p, err := q.Admit(context.Background(), get(t, url, ""), time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	q.Report(get(t, url, ""), p, Succeeded, 0, nil, clk.Now)

	clk.Advance(time.Minute)
	out, err := q.Admit(context.Background(), get(t, url, ""), time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	// While it is out, another host's first answer sweeps the idle ones.
	clk.Advance(30 * time.Second)
	other := get(t, "https://other.test/v1.0/me", "")
	po, err := q.Admit(context.Background(), other, time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	q.Report(other, po, Succeeded, 0, nil, clk.Now)

	q.Report(get(t, url, ""), out, Throttled, 5*time.Second, nil, clk.Now)
	assert.True(t, held(t, q, clk, get(t, url, "")), "the late 429 holds its URL")
}

// TestQueue_UnthrottledScopesNotKept checks that after a host's throttle,
// requests to collections that were never throttled leave nothing behind:
// what the queue keeps does not grow with the collections a host serves.
func TestQueue_UnthrottledScopesNotKept(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{MaxTracked: 64})
	throttle429(t, q, clk, get(t, graph+"/v1.0/users/1/messages/1", ""), time.Second, 10*time.Millisecond)
	base := q.tracked()
	for i := range 2000 {
		req := get(t, fmt.Sprintf("%s/v1.0/sites/s%d/lists/l", graph, i), "")
		p, err := q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		q.Report(req, p, Succeeded, 0, nil, clk.Now)
	}
	assert.LessOrEqual(t, q.tracked(), max(base, 1), "scopes kept after 2000 collections that were never throttled")

	// A request held by its URL's own throttle waits in a room made for
	// it; once it goes, the room is not kept.
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		q := New(clk, options.QueueOptions{MaxTracked: 64})
		url := graph + "/v1.0/users/x/events/1"
		throttle429(t, q, clk, get(t, url, ""), time.Second, 0)
		base := q.tracked()
		out := make(chan admitted, 1)
		go func() {
			p, err := q.Admit(context.Background(), get(t, url, ""), time.Time{}, time.Time{}, nil)
			out <- admitted{p, err, clk.Now().Sub(t0)}
		}()
		synctest.Wait()
		assert.Equal(t, base+1, q.tracked(), "a room while it waits")
		assert.Equal(t, []time.Duration{time.Second}, releases(t, clk, []<-chan admitted{out}))
		assert.Equal(t, base, q.tracked(), "rooms kept after the held request went")
	})
}

// TestQueue_NamedHoldNotCutShortByPacer checks that when the pacer would
// start its scope past the request's deadline, a request the server's
// Retry-After holds still waits exactly that time, which fits, rather than
// being refused (and then sent at once into the throttle).
func TestQueue_NamedHoldNotCutShortByPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		q := New(clk, options.QueueOptions{})
		url := graph + "/v1.0/users/1/messages"
		// A slow answer: the pacer starts two round trips (2.4 s) after it.
		throttle429(t, q, clk, get(t, url, ""), time.Second, 1200*time.Millisecond)
		start := clk.Now()
		out := make(chan admitted, 1)
		go func() {
			p, err := q.Admit(context.Background(), get(t, url, ""), time.Time{}, start.Add(2*time.Second), nil)
			out <- admitted{p, err, clk.Now().Sub(start)}
		}()
		got := releases(t, clk, []<-chan admitted{out})
		assert.Equal(t, []time.Duration{time.Second}, got, "sent when the server's Retry-After ends")
	})
}

// BenchmarkAnswerAfterThrottle measures an Admit and a Report of a GET to
// a host throttled once, over a number of distinct collections: their
// cost must not grow with the collections the host ever served.
func BenchmarkAnswerAfterThrottle(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("collections=%d", n), func(b *testing.B) {
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{})
			throttle429(b, q, clk, get(b, graph+"/v1.0/users/1/messages/1", ""), time.Hour, 10*time.Millisecond)
			reqs := make([]*http.Request, n)
			for i := range reqs {
				reqs[i] = get(b, fmt.Sprintf("%s/v1.0/sites/s%d/lists/l", graph, i), "")
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := reqs[i%n]
				i++
				p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
				if err != nil {
					b.Fatal(err)
				}
				q.Report(req, p, Succeeded, 0, nil, clk.Now)
			}
		})
	}
}

// TestQueue_RateLimitParsedOutsideLock checks that an answer's rate-limit
// fields are parsed before its host's lock is taken, so that a server's
// field, however long, does not hold up the host's other requests; and
// that a field past the bounds announces nothing.
func TestQueue_RateLimitParsedOutsideLock(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	url := graph + "/v1.0/users/1/messages"
	throttle429(t, q, clk, get(t, url, ""), time.Second, 10*time.Millisecond)
	v, ok := q.hosts.Load(hostKey(get(t, url, "")))
	require.True(t, ok)
	s := v.(*hostState)

	parsed, lockedWhileParsing := 0, false
	orig := parseBudget
	t.Cleanup(func() { parseBudget = orig })
	parseBudget = func(h http.Header, now time.Time) (ratelimit.Budget, bool) {
		parsed++
		if s.mu.TryLock() {
			s.mu.Unlock()
		} else {
			lockedWhileParsing = true
		}
		return orig(h, now)
	}
	policies := strings.Repeat(`"p";r=1000;t=60, `, 2000) + `"p";r=0;t=60`
	var spent []bool
	for i, header := range []http.Header{
		{"Ratelimit": {`"p";r=0;t=60`}},
		{"Ratelimit": {policies}},
	} {
		s.mu.Lock()
		if host := s.nodes[""]; host != nil {
			host.budget = announced{}
		}
		s.mu.Unlock()
		// Reported as a batch item is: a spent budget paces the host's
		// admissions, and this test's clock does not move.
		req := get(t, fmt.Sprintf("%s/v1.0/sites/s%d/lists/l", graph, i), "")
		q.Report(req, Pass{Sent: clk.Now()}, Succeeded, 0, header, clk.Now)
		s.mu.Lock()
		host := s.nodes[""]
		spent = append(spent, host != nil && host.budget.live(clk.Now(), time.Second))
		s.mu.Unlock()
	}
	assert.Equal(t, 2, parsed)
	assert.False(t, lockedWhileParsing, "parsed under the host's lock")
	// The first field spent the host's budget; the second, past the
	// bounds, said nothing.
	assert.Equal(t, []bool{true, false}, spent, "a budget followed")
}

// BenchmarkReportRateLimitField measures the Report of a success carrying
// 2000 roomy policies in one field, against the same bytes under a name
// the queue does not read: past the bounds, the field costs about as much.
func BenchmarkReportRateLimitField(b *testing.B) {
	policies := strings.Repeat(`"p";r=1000;t=60, `, 1999) + `"p";r=1000;t=60`
	for _, name := range []string{"X-Ignored", "Ratelimit"} {
		b.Run(name, func(b *testing.B) {
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{})
			throttle429(b, q, clk, get(b, graph+"/v1.0/users/1/messages/1", ""), time.Hour, 10*time.Millisecond)
			req := get(b, graph+"/v1.0/sites/s/lists/l", "")
			header := http.Header{name: {policies}}
			ctx := context.Background()
			for b.Loop() {
				p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
				if err != nil {
					b.Fatal(err)
				}
				q.Report(req, p, Succeeded, 0, header, clk.Now)
			}
		})
	}
}

// TestQueueHeldUntil: HeldUntil names the server's own hold of a URL or its
// path, and nothing for a sibling or a host never throttled.
func TestQueueHeldUntil(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	users := graph + "/v1.0/users/"
	throttle429(t, q, clk, get(t, users+"1?$select=id", ""), 5*time.Second, 10*time.Millisecond)
	end := t0.Add(10*time.Millisecond + 5*time.Second)
	tests := []struct {
		name string
		url  string
		want time.Time
	}{
		{"the URL throttled", users + "1?$select=id", end},
		{"its path, another query", users + "1", end},
		{"a sibling", users + "2", time.Time{}},
		{"a host never throttled", "https://other.example/v1.0/users/1", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, q.HeldUntil(get(t, tt.url, "")))
		})
	}
}
