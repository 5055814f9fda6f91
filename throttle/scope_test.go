package throttle

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

func TestSegmentsBelowRoot(t *testing.T) {
	tests := []struct {
		name  string
		roots []string
		path  string
		want  []string
	}{
		{"Graph v1.0", nil, "/v1.0/users/42/messages", []string{"users", "42", "messages"}},
		{"Graph beta", nil, "/beta/sites/root", []string{"sites", "root"}},
		{"v1", nil, "/v1/items", []string{"items"}},
		{"v2.1", nil, "/v2.1/items/", []string{"items"}},
		{"no version", nil, "/users/42", []string{"users", "42"}},
		{"not a version: v alone", nil, "/v/items", []string{"v", "items"}},
		{"not a version: v1.", nil, "/v1./items", []string{"v1.", "items"}},
		{"not a version: video", nil, "/video/1", []string{"video", "1"}},
		{"only the leading segment is the root", nil, "/users/v1.0", []string{"users", "v1.0"}},
		{"a named root", []string{"/api/data/v9.2"}, "/api/data/v9.2/accounts(1)/contacts", []string{"accounts(1)", "contacts"}},
		{"a named root with a trailing slash", []string{"/api/data/v9.2/"}, "/api/data/v9.2/accounts", []string{"accounts"}},
		{"the longest named root", []string{"/api", "/api/data/v9.2"}, "/api/data/v9.2/accounts", []string{"accounts"}},
		{"a named root matches whole segments", []string{"/api/data"}, "/api/database/x", []string{"api", "database", "x"}},
		{"a path outside the named roots keeps the version rule", []string{"/api/data/v9.2"}, "/v1.0/me", []string{"me"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{Roots: tt.roots})
			assert.Equal(t, tt.want, q.segments(tt.path))
			want := ""
			if n := len(tt.want); n > 0 {
				want = strings.Join(tt.want[:max(n-1, 1)], "/")
			}
			assert.Equal(t, want, q.scopeOf(tt.path), "the throttle scope")
		})
	}
}

// TestMatchBelowRoot checks the 5-n rule on Graph's paths: the version
// segment is shared by every request and counts for nothing.
func TestMatchBelowRoot(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		throttled []string
		probe     string
		held      bool // until 10 s, by the server's word or by inference
		inferred  bool // by inference only
	}{
		{"4 Identity throttles do not hold sites", []string{"/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"}, "/v1.0/sites/root", false, false},
		{"4 Identity throttles do not hold groups", []string{"/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"}, "/v1.0/groups/g", false, false},
		{"4 Identity throttles infer a hold on users", []string{"/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"}, "/v1.0/users/x", true, true},
		{"3 throttled mailboxes do not hold a fourth", []string{"/v1.0/users/m1/messages", "/v1.0/users/m2/messages", "/v1.0/users/m3/messages"}, "/v1.0/users/m4/messages", false, false},
		{"2 throttles in two folders of a mailbox do not hold a third", []string{"/v1.0/users/m1/messages/1", "/v1.0/users/m1/events/2"}, "/v1.0/users/m1/calendar", false, false},
		{"2 throttles of one mailbox folder infer a hold on it", []string{"/v1.0/users/m1/messages/1", "/v1.0/users/m1/messages/2"}, "/v1.0/users/m1/messages/3", true, true},
		{"the exact path is the server's word", []string{"/v1.0/users/a"}, "/v1.0/users/a", true, false},
		{"the same path with another query is the server's word", []string{"/v1.0/me/messages?$top=5"}, "/v1.0/me/messages?$top=10", true, false},
		{"beta and v1.0 share their segments", []string{"/beta/users/a", "/beta/users/b", "/beta/users/c", "/beta/users/d"}, "/v1.0/users/x", true, true},
		{"another host", []string{"/v1.0/users/a"}, "https://other.test/v1.0/users/a", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			for _, u := range tt.throttled {
				q.throttled(targetOf(t, graph+u), t0, t0, t0.Add(10*s))
			}
			probe := tt.probe
			if probe[0] == '/' {
				probe = graph + probe
			}
			tg := targetOf(t, probe)
			s := q.state(tg.host, true)
			h := q.match(s, tg, t0.Add(time.Second))
			end := later(h.until, h.inferred)
			assert.Equal(t, tt.held, end.Equal(t0.Add(10*time.Second)), "held until 10 s (until %v)", end.Sub(t0))
			assert.Equal(t, tt.inferred, h.probe != nil, "inferred")
		})
	}
}

// admitted is what one Admit returned.
type admitted struct {
	pass Pass
	err  error
	at   time.Duration
}

// admit runs Admit for rawURL in a goroutine and returns a channel of its
// result, once it has blocked or returned.
func admit(q *Queue, clk *clocktest.Clock, rawURL string, notBefore, deadline time.Time) <-chan admitted {
	out := make(chan admitted, 1)
	req, _ := http.NewRequest(http.MethodGet, rawURL, nil)
	go func() {
		p, err := q.Admit(context.Background(), req, notBefore, deadline, nil)
		out <- admitted{p, err, clk.Now().Sub(t0)}
	}()
	synctest.Wait()
	return out
}

func ready(t *testing.T, c <-chan admitted) (admitted, bool) {
	t.Helper()
	select {
	case a := <-c:
		return a, true
	default:
		return admitted{}, false
	}
}

// TestProbe checks that a hold inferred from shared segments lets one
// request through at a time: its success lifts the hold at once, its
// throttle confirms the hold until the time the server names.
func TestProbe(t *testing.T) {
	for _, tt := range []struct {
		name    string
		outcome Outcome
		// when the held one goes, after t0; the throttles end at 10 s.
		want time.Duration
	}{
		{"a success lifts the hold", Succeeded, time.Second},
		{"a throttle confirms it", Throttled, 10 * time.Second},
		{"a failure neither lifts nor confirms: the next probe goes", Failed, time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.New(t0)
				q := New(clk, options.QueueOptions{})
				q.newPacer = func(time.Time) pacer { return &fixedPacer{} }
				for _, u := range []string{"a", "b", "c", "d"} {
					q.throttled(targetOf(t, graph+"/v1.0/users/"+u), t0, t0, t0.Add(10*time.Second))
				}
				probe, ok := ready(t, admit(q, clk, graph+"/v1.0/users/x", t0, time.Time{}))
				require.True(t, ok, "the first request goes at once, as a probe")
				require.NoError(t, probe.err)
				require.NotNil(t, probe.pass.probe)

				held := admit(q, clk, graph+"/v1.0/users/y", t0, time.Time{})
				_, ok = ready(t, held)
				require.False(t, ok, "a second one waits for the probe")

				clk.Advance(time.Second)
				req, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/users/x", nil)
				q.Report(req, probe.pass, tt.outcome, 9*time.Second, nil, clk.Now)
				synctest.Wait()
				for {
					if a, ok := ready(t, held); ok {
						require.NoError(t, a.err)
						assert.Equal(t, tt.want, a.at)
						break
					}
					p := clk.Pending()
					require.NotEmpty(t, p)
					clk.Advance(p[0])
					synctest.Wait()
				}
			})
		})
	}
}

// TestScopesPacedApart checks that each throttle scope has a pace of its
// own: requests of one scope never wait behind another scope's queue, and
// a request that matches no recent throttle is not paced at all.
func TestScopesPacedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		q := New(clk, options.QueueOptions{})
		q.newPacer = func(time.Time) pacer { return &fixedPacer{every: time.Second} }
		// Both scopes throttled once and ended: paced, not held.
		q.throttled(targetOf(t, graph+"/v1.0/users/a"), t0, t0, t0)
		q.throttled(targetOf(t, graph+"/v1.0/sites/a"), t0, t0, t0)
		var users, sites []<-chan admitted
		for range 3 {
			users = append(users, admit(q, clk, graph+"/v1.0/users/x", t0, time.Time{}))
			sites = append(sites, admit(q, clk, graph+"/v1.0/sites/x", t0, time.Time{}))
		}
		other, ok := ready(t, admit(q, clk, graph+"/v1.0/groups/x", t0, time.Time{}))
		require.True(t, ok, "never throttled: not queued")
		assert.Zero(t, other.at)

		at := func(cs []<-chan admitted) []time.Duration {
			var out []time.Duration
			for _, c := range cs {
				out = append(out, (<-c).at)
			}
			return out
		}
		go func() {
			for range 2 {
				synctest.Wait()
				clk.Advance(time.Second)
			}
		}()
		want := []time.Duration{0, time.Second, 2 * time.Second}
		assert.Equal(t, want, at(users), "users at its own pace")
		assert.Equal(t, want, at(sites), "sites at its own pace, beside users")
		synctest.Wait()
	})
}

// TestHoldWithinLimits checks that a hold never outlasts the request's
// own limits: one that would is refused at once, for the caller to decide.
func TestHoldWithinLimits(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		notBefore time.Duration
		deadline  time.Duration // 0: none
		want      time.Duration
		wantErr   error
	}{
		{"no limit: held until the server's time", 0, 0, 600 * s, nil},
		{"a deadline before the end: refused at once", 0, 2 * s, 0, ErrHoldTooLong},
		{"a deadline before the end: refused before its own delay", s, 2 * s, 0, ErrHoldTooLong},
		{"a deadline after the end: held", 0, 601 * s, 600 * s, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.New(t0)
				q := New(clk, options.QueueOptions{})
				q.throttled(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(600*s))
				var deadline time.Time
				if tt.deadline > 0 {
					deadline = t0.Add(tt.deadline)
				}
				req, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/me", nil)
				done := make(chan time.Duration, 1)
				go func() {
					_, err := q.Admit(context.Background(), req, t0.Add(tt.notBefore), deadline, nil)
					assert.ErrorIs(t, err, tt.wantErr)
					done <- clk.Now().Sub(t0)
				}()
				for {
					synctest.Wait()
					select {
					case at := <-done:
						assert.Equal(t, tt.want, at)
						return
					default:
					}
					p := clk.Pending()
					require.NotEmpty(t, p)
					clk.Advance(p[0])
				}
			})
		})
	}
}

// TestHostKey checks that state is keyed by the host the request names:
// its Host header when set.
func TestHostKey(t *testing.T) {
	q := New(clocktest.New(t0), options.QueueOptions{})
	a, _ := http.NewRequest(http.MethodGet, "https://10.0.0.1/v1.0/me", nil)
	a.Host = "a.example"
	b, _ := http.NewRequest(http.MethodGet, "https://10.0.0.1/v1.0/me", nil)
	b.Host = "b.example"
	q.Report(a, Pass{Sent: t0}, Throttled, time.Minute, nil, func() time.Time { return t0 })
	assert.True(t, q.Active(a))
	assert.False(t, q.Active(b), "another virtual host on the same address")
	plain, _ := http.NewRequest(http.MethodGet, "https://10.0.0.1/v1.0/me", nil)
	assert.False(t, q.Active(plain))
}

// TestIdleHostsForgotten checks that a host with no throttle and no answer
// for the recovery window is forgotten once another host comes.
func TestIdleHostsForgotten(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{Recovery: 10 * time.Second})
	req := func(host string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "https://"+host+"/v1.0/me", nil)
		return r
	}
	q.Report(req("throttled.test"), Pass{Sent: t0}, Throttled, time.Second, nil, clk.Now)
	q.Report(req("quiet.test"), Pass{Sent: t0}, Succeeded, 0, nil, clk.Now)
	count := func() (n int) {
		q.hosts.Range(func(any, any) bool { n++; return true })
		return n
	}
	require.Equal(t, 2, count())

	clk.Advance(5 * time.Second)
	q.Report(req("new1.test"), Pass{Sent: clk.Now()}, Succeeded, 0, nil, clk.Now)
	assert.Equal(t, 3, count(), "within the recovery window nothing is forgotten")

	clk.Advance(10 * time.Second)
	q.Report(req("new2.test"), Pass{Sent: clk.Now()}, Succeeded, 0, nil, clk.Now)
	assert.Equal(t, 2, count(), "the two idle hosts are forgotten")
	assert.False(t, q.Active(req("throttled.test")))
	assert.NotNil(t, q.state("new1.test", false), "a host seen 10 s ago is kept")
}

// TestPruneKeepsNewest checks that past MaxTracked exactly the newest
// throttles are kept, also when many end at the same instant (one
// HTTP-date for many URLs), and that MaxTracked 1 keeps the newest.
func TestPruneKeepsNewest(t *testing.T) {
	for _, maxTracked := range []int{1, 3, 12} {
		q := New(clocktest.New(t0), options.QueueOptions{MaxTracked: maxTracked})
		const n = 20
		for i := range n {
			q.throttled(targetOf(t, graph+"/v1.0/items/"+string(rune('a'+i))), t0, t0, t0.Add(time.Minute))
		}
		s := q.state("graph.test", false)
		assert.Len(t, s.urls, maxTracked, "MaxTracked %d: URLs", maxTracked)
		assert.Len(t, s.paths, maxTracked, "MaxTracked %d: paths", maxTracked)
		assert.LessOrEqual(t, len(s.prefixes), maxTracked, "MaxTracked %d: prefixes", maxTracked)
		newest := targetOf(t, graph+"/v1.0/items/"+string(rune('a'+n-1)))
		assert.Contains(t, s.urls, newest.url, "MaxTracked %d: the newest throttle is kept", maxTracked)
		h := q.match(s, newest, t0.Add(time.Second))
		assert.Equal(t, t0.Add(time.Minute), h.until, "MaxTracked %d: and still holds", maxTracked)
		for i := range n - maxTracked {
			assert.NotContains(t, s.urls, "/v1.0/items/"+string(rune('a'+i)), "MaxTracked %d: the oldest go first", maxTracked)
		}
	}
}
