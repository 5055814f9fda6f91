package throttle

import (
	"context"
	"fmt"
	"net/http"
	"slices"
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
		{"the root alone", []string{"/api/data/v9.2"}, "/api/data/v9.2", nil},
		{"the version alone", nil, "/v1.0/", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{Roots: tt.roots})
			assert.Equal(t, tt.want, q.segments(tt.path))
			api := ""
			if len(tt.want) > 0 {
				api = tt.want[0]
			}
			assert.Equal(t, api, q.api(tt.path), "the API: the first segment")
			assert.Zero(t, testing.AllocsPerRun(10, func() { q.api(tt.path) }), "the API is read without allocating")
		})
	}
}

// TestBudgetFromEvidence checks where throttles place a request's budget.
// The seed's 5-n rule is the first guess, counted in distinct throttled
// children of a node (the host's are its APIs) within the spread window;
// a throttle that makes no budget holds only its own URL and path (R21),
// and nothing else is held or paced (R22).
func TestBudgetFromEvidence(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		throttled []string
		probe     string
		budget    string // the key of the budget pacing probe; "-" for none
		held      bool   // until 10 s, by the server's word
	}{
		{"4 throttled users make users the budget", []string{"/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"}, "/v1.0/users/x", "users", false},
		{"and pace nothing of sites", []string{"/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c", "/v1.0/users/d"}, "/v1.0/sites/root", "-", false},
		{"3 throttled users make no budget", []string{"/v1.0/users/a", "/v1.0/users/b", "/v1.0/users/c"}, "/v1.0/users/x", "-", false},
		{"4 throttled mailboxes make users the budget", []string{"/v1.0/users/m1/messages", "/v1.0/users/m2/messages", "/v1.0/users/m3/messages", "/v1.0/users/m4/messages"}, "/v1.0/users/m9/messages", "users", false},
		{"2 folders of a mailbox make no budget", []string{"/v1.0/users/m1/messages/1", "/v1.0/users/m1/events/2"}, "/v1.0/users/m1/calendar", "-", false},
		{"2 items of a folder make it the budget", []string{"/v1.0/users/m1/messages/1", "/v1.0/users/m1/messages/2"}, "/v1.0/users/m1/messages/3", "users/m1/messages", false},
		{"5 throttled APIs make the host the budget", []string{"/v1.0/a/1", "/v1.0/b/1", "/v1.0/c/1", "/v1.0/d/1", "/v1.0/e/1"}, "/v1.0/f/1", "", false},
		{"the exact path is the server's word", []string{"/v1.0/users/a"}, "/v1.0/users/a", "-", true},
		{"the same path with another query is the server's word", []string{"/v1.0/me/messages?$top=5"}, "/v1.0/me/messages?$top=10", "-", true},
		{"beta and v1.0 share their segments", []string{"/beta/users/a", "/beta/users/b", "/beta/users/c", "/beta/users/d"}, "/v1.0/users/x", "users", false},
		{"another host", []string{"/v1.0/users/a"}, "https://other.test/v1.0/users/a", "-", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			for _, u := range tt.throttled {
				q.throttleTarget(targetOf(t, graph+u), t0, t0, t0.Add(10*s))
			}
			probe := tt.probe
			if probe[0] == '/' {
				probe = graph + probe
			}
			tg := targetOf(t, probe)
			st := q.state(tg.host, true, t0)
			st.mu.Lock()
			defer st.mu.Unlock()
			got := "-"
			if n := q.budgetOf(st, tg.keys(), t0.Add(s)); n != nil {
				got = n.key
			}
			assert.Equal(t, tt.budget, got, "budget")
			assert.Equal(t, tt.held, st.held(tg).Equal(t0.Add(10*s)), "held by the server's word")
		})
	}
}

// TestThrottlesTogetherMakeAnItemABudget checks that requests to one item
// throttled together (sent before its throttle came back) make the item a
// budget, paced rather than held, while one throttled after another only
// holds it for the time named.
func TestThrottlesTogetherMakeAnItemABudget(t *testing.T) {
	q := New(clocktest.New(t0), options.QueueOptions{})
	post := targetOf(t, graph+"/v1.0/users")
	ms := time.Millisecond
	q.throttleTarget(post, t0, t0.Add(2*ms), t0.Add(time.Second))
	st := q.state("graph.test", false, time.Time{})
	assert.Nil(t, q.budgetOf(st, post.keys(), t0.Add(2*ms)), "one throttle: the item's own")
	assert.Equal(t, t0.Add(time.Second), st.held(post))

	q.throttleTarget(post, t0.Add(ms), t0.Add(3*ms), t0.Add(time.Second))
	n := q.budgetOf(st, post.keys(), t0.Add(3*ms))
	require.NotNil(t, n, "sent before the first came back: throttled together")
	assert.Equal(t, "users", n.key)
	assert.True(t, st.held(post).IsZero(), "its pace governs it now")
}

// TestBudgetTakesOverItsSpreadsHolds checks that the throttles a budget
// formed from stop holding their targets once it forms: they were its
// own, and their targets go through its pace. A target throttled before
// the spread window, or locked by its own throttles, stays held.
func TestBudgetTakesOverItsSpreadsHolds(t *testing.T) {
	ms := time.Millisecond
	end := t0.Add(10 * time.Second)
	tests := []struct {
		name    string
		before  []string // throttled 2 s before the spread, until end
		spread  []string // throttled within the spread window, until end
		probe   string
		held    bool // until end
		strikes int  // the probe's path's strikes before the spread
	}{
		{"the first throttles of the spread", nil, []string{"a", "b", "c", "d"}, "a", false, 0},
		{"its last", nil, []string{"a", "b", "c", "d"}, "d", false, 0},
		{"three make no budget and hold on", nil, []string{"a", "b", "c"}, "a", true, 0},
		{"a throttle before the spread holds on", []string{"z"}, []string{"a", "b", "c", "d"}, "z", true, 0},
		{"a locked item holds on", nil, []string{"a", "b", "c", "d"}, "a", true, lockedStrikes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			url := func(id string) string { return graph + "/v1.0/users/" + id }
			at := t0
			for _, id := range tt.before {
				q.throttleTarget(targetOf(t, url(id)), at, at.Add(ms), end)
			}
			at = at.Add(2 * time.Second)
			for i, id := range tt.spread {
				if i == 0 && tt.strikes > 0 {
					q.throttleTarget(targetOf(t, url(id)), at, at.Add(ms), at.Add(ms))
					st := q.state("graph.test", false, time.Time{})
					st.mu.Lock()
					st.paths["/v1.0/users/"+id].strikes = tt.strikes
					st.mu.Unlock()
				}
				q.throttleTarget(targetOf(t, url(id)), at, at.Add(ms), end)
				at = at.Add(10 * ms)
			}
			tg := targetOf(t, url(tt.probe))
			st := q.state(tg.host, false, time.Time{})
			st.mu.Lock()
			defer st.mu.Unlock()
			assert.Equal(t, tt.held, st.held(tg).Equal(end))
		})
	}
}

// TestHeldRequestGoesWithItsBudget checks that a request waiting out a
// throttle of its URL goes through the pace of the budget that throttle
// turns out to be part of, not at the end of the time the throttle held
// it for: behind nginx's bare 429s, that time is the retry policy's 3 s.
func TestHeldRequestGoesWithItsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(options.SystemClock(), options.QueueOptions{})
		const hold = 3 * time.Second
		req := func(id string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/sites/"+id, nil)
			return r
		}
		for _, id := range []string{"a", "b", "c"} {
			q.Report(req(id), q.Bypass(time.Now()), Throttled, hold, nil, time.Now)
		}
		start := time.Now()
		done := make(chan error)
		go func() {
			p, err := q.Admit(context.Background(), req("a"), time.Time{}, time.Time{}, nil)
			if err == nil {
				q.Report(req("a"), p, Succeeded, 0, nil, time.Now)
			}
			done <- err
		}()
		synctest.Wait()
		q.Report(req("d"), q.Bypass(time.Now()), Throttled, hold, nil, time.Now)
		require.NoError(t, <-done)
		assert.Less(t, time.Since(start), hold/2, "released by the budget's pace")
	})
}

// TestUnnamedThrottlePacesItsItem checks that a 429 naming no wait holds
// nothing for the retry policy's delay, the client's and not the server's
// word: its item is a budget of its own, the next request goes at its
// pace, and only once a request it let go succeeded is a release of it
// the budget's (Paced), so that the policy's backoff steps for an item
// that refuses everything. A 429 naming a wait holds its URL for it.
func TestUnnamedThrottlePacesItsItem(t *testing.T) {
	const hold = 3 * time.Second
	tests := []struct {
		name       string
		o          Outcome
		held       bool // the next request waits the hold out
		paced      bool // the next request's pass, before and after a success
		pacedAfter bool
	}{
		{"a 429 naming its wait holds its URL", Throttled, true, false, false},
		{"a 429 naming none paces its item", ThrottledNoWait, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := New(options.SystemClock(), options.QueueOptions{})
				req, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/me/messages", nil)
				q.Report(req, q.Bypass(time.Now()), tt.o, hold, nil, time.Now)
				start := time.Now()
				p, err := q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
				require.NoError(t, err)
				assert.Equal(t, tt.held, time.Since(start) >= hold, "held for the hold")
				assert.Equal(t, tt.paced, p.Paced(), "paced before a success")
				time.Sleep(time.Millisecond)
				q.Report(req, p, Succeeded, 0, nil, time.Now)
				p, err = q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
				require.NoError(t, err)
				assert.Equal(t, tt.pacedAfter, p.Paced(), "paced after a success")
				q.Report(req, p, Succeeded, 0, nil, time.Now)
			})
		})
	}
}

// TestUnnamedLockedItemHeld checks that an item that answers every
// request with a 429 naming no wait, each sent after the policy's delay
// ran out while its neighbours succeed, is locked and held by its
// throttles, as one naming its wait is.
func TestUnnamedLockedItemHeld(t *testing.T) {
	q := New(clocktest.New(t0), options.QueueOptions{})
	const hold = 3 * time.Second
	drive := func(id string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/drives/d1/items/"+id, nil)
		return r
	}
	at := func(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }
	round := hold + time.Millisecond
	var last time.Duration
	for i := range 3 {
		sent := time.Duration(i) * round
		q.Report(drive("1"), Pass{Sent: t0.Add(sent)}, ThrottledNoWait, hold, nil, at(sent+time.Millisecond))
		q.Report(drive("2"), Pass{Sent: t0.Add(sent + 10*time.Millisecond)}, Succeeded, 0, nil, at(sent+20*time.Millisecond))
		last = sent + time.Millisecond
	}
	st := q.state("graph.test", false, time.Time{})
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.GreaterOrEqual(t, st.paths["/v1.0/drives/d1/items/1"].strikes, lockedStrikes, "locked")
	assert.Equal(t, t0.Add(last+hold), st.held(targetOf(t, graph+"/v1.0/drives/d1/items/1")), "held by its throttle")
}

// TestPacedRefusalsAreNoStrikes checks that an item is locked only by
// throttles of requests that waited out its previous wait: a budget's
// paced releases refused within a bare 429's 3 s wait (a zone of nginx
// still refusing while the pace finds its rate) leave it a budget, paced,
// not held by the server's word for 3 s.
func TestPacedRefusalsAreNoStrikes(t *testing.T) {
	ms := time.Millisecond
	const wait = 3 * time.Second
	tests := []struct {
		name   string
		sent   []time.Duration // the item's next throttled requests
		locked bool
	}{
		{"paced releases within the wait", []time.Duration{10 * ms, 20 * ms}, false},
		{"retries after each wait", []time.Duration{wait + 3*ms, 2*wait + 6*ms}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			post := targetOf(t, graph+"/v1.0/users")
			sites, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/sites/1", nil)
			q.throttleTarget(post, t0, t0.Add(2*ms), t0.Add(2*ms+wait))
			q.throttleTarget(post, t0.Add(ms), t0.Add(3*ms), t0.Add(3*ms+wait)) // together: a budget
			var end time.Time
			for _, sent := range tt.sent {
				q.Report(sites, Pass{Sent: t0.Add(sent - 2*ms)}, Succeeded, 0, nil, func() time.Time { return t0.Add(sent - ms) })
				end = t0.Add(sent + 2*ms + wait)
				q.throttleTarget(post, t0.Add(sent), t0.Add(sent+2*ms), end)
			}
			st := q.state("graph.test", false, time.Time{})
			st.mu.Lock()
			defer st.mu.Unlock()
			if tt.locked {
				assert.Equal(t, end, st.held(post), "locked: the server's word holds it")
				return
			}
			assert.True(t, st.held(post).IsZero(), "its pace governs it")
			assert.NotNil(t, q.budgetOf(st, post.keys(), t0.Add(tt.sent[1]+2*ms)), "still a budget")
		})
	}
}

// TestLockedItemHoldsOnlyItself checks that an item throttled again after
// each wait while its neighbours succeed is locked: its throttles count
// for no budget (R21: one item's lock says nothing of the rest), and the
// server's word holds it alone.
func TestLockedItemHoldsOnlyItself(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	s := time.Second
	drive := func(id string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/drives/d1/items/"+id, nil)
		return r
	}
	at := func(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }
	// Item 1 throttled three times, each time after waiting out the
	// second it was told to (answered a millisecond after it was sent);
	// item 2 succeeds in between.
	round := s + time.Millisecond
	for i := range 3 {
		sent := time.Duration(i) * round
		q.Report(drive("1"), Pass{Sent: t0.Add(sent)}, Throttled, s, nil, at(sent+time.Millisecond))
		q.Report(drive("2"), Pass{Sent: t0.Add(sent + 10*time.Millisecond)}, Succeeded, 0, nil, at(sent+20*time.Millisecond))
	}
	st := q.state("graph.test", false, time.Time{})
	st.mu.Lock()
	e := st.paths["/v1.0/drives/d1/items/1"]
	require.NotNil(t, e)
	assert.GreaterOrEqual(t, e.strikes, lockedStrikes, "locked")
	items := st.nodes["drives/d1/items"]
	marks := 0
	if items != nil {
		marks = len(items.marks)
	}
	st.mu.Unlock()
	// Another locked item's first throttle and item 1's next: the
	// collection has seen one countable child, not two.
	q.Report(drive("3"), Pass{Sent: t0.Add(3 * round)}, Throttled, s, nil, at(3*round+time.Millisecond))
	q.Report(drive("1"), Pass{Sent: t0.Add(3 * round)}, Throttled, s, nil, at(3*round+time.Millisecond))
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.Nil(t, q.budgetOf(st, targetOf(t, graph+"/v1.0/drives/d1/items/9").keys(), t0.Add(3*round+time.Millisecond)), "no budget from a locked item")
	assert.LessOrEqual(t, len(st.nodes["drives/d1/items"].marks), marks+1)
}

// TestNoWaitUnasked checks that a throttle naming 1 ms costs 1 ms: twenty
// callers one after another on a URL that always answers so are never
// paced (the probe took 4 s).
func TestNoWaitUnasked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(options.SystemClock(), options.QueueOptions{})
		start := time.Now()
		for range 20 {
			req, _ := http.NewRequest(http.MethodGet, graph+"/v1.0/me/photo", nil)
			p, err := q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
			require.NoError(t, err)
			time.Sleep(time.Millisecond / 2) // the round trip
			q.Report(req, p, Throttled, time.Millisecond, nil, time.Now)
		}
		assert.Less(t, time.Since(start), 100*time.Millisecond)
	})
}

func TestEvenness(t *testing.T) {
	tests := []struct {
		name   string
		kids   map[string]tally
		uneven bool
		hot    []string // the children cut out when uneven
	}{
		{"alike", map[string]tally{"a": {100, 10}, "b": {100, 9}, "c": {50, 6}}, false, nil},
		{"a busy child never throttled", map[string]tally{"a": {100, 40}, "b": {100, 0}}, true, []string{"a"}},
		{"too little traffic to tell", map[string]tally{"a": {10, 4}, "b": {3, 0}}, false, nil},
		{"far fewer than its share", map[string]tally{"a": {400, 200}, "b": {400, 20}}, true, []string{"a", "b"}},
		{"one child: nothing to compare", map[string]tally{"a": {400, 200}}, false, nil},
		{"a child throttled once is luck, not a budget", map[string]tally{"a": {1, 1}, "b": {100, 0}, "c": {100, 0}}, false, nil},
		// Neither b nor c escaped enough to tell (1.4 throttles expected
		// each), but a met 3 where 0.14 were its share.
		{"a child met far more than its share", map[string]tally{"a": {30, 3}, "b": {300, 0}, "c": {300, 0}}, true, []string{"a"}},
		// Mailboxes throttled once each under Identity's budget, whose
		// users met none of the 5.4 throttles their share was.
		{"busy children throttled once each beside one never throttled", map[string]tally{
			"m1": {20, 1}, "m2": {20, 1}, "m3": {20, 1}, "m4": {20, 1}, "m5": {20, 1}, "m6": {20, 1}, "u": {1000, 0},
		}, true, []string{"m1", "m2", "m3", "m4", "m5", "m6"}},
		// Three mailboxes throttled once each beside users who met none:
		// against a budget-wide ratio of 0.45 % the users escaped 2.7
		// throttles, against the mailboxes' 5 % they escaped 30.
		{"a child compared with the rest, not with itself", map[string]tally{
			"m1": {20, 1}, "m2": {20, 1}, "m3": {20, 1}, "u": {600, 0},
		}, true, []string{"m1", "m2", "m3"}},
		// A sliding window's burst at its boundary met three requests of
		// each of two children out of twenty, sent together: 0.15³ is
		// under 1 % for each, but one child in twenty meets it by chance
		// more often than not.
		{"three of three in one child among many is chance", map[string]tally{
			"a": {3, 3}, "b": {3, 3}, "c": {3, 1}, "d": {3, 1}, "e": {3, 1},
			"f": {3, 0}, "g": {3, 0}, "h": {3, 0}, "i": {3, 0}, "j": {3, 0}, "k": {3, 0}, "l": {3, 0},
			"m": {3, 0}, "n": {3, 0}, "o": {3, 0}, "p": {3, 0}, "q": {3, 0}, "r": {3, 0}, "s": {3, 0}, "t": {3, 0},
		}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e evenness
			for k, c := range tt.kids {
				for i := range c.sent {
					e.add(k, i < c.throttled, t0)
				}
			}
			hot, uneven := e.uneven()
			if uneven {
				slices.Sort(hot)
				assert.Equal(t, tt.hot, hot)
			} else {
				assert.Equal(t, tt.uneven, uneven)
			}
			assert.Equal(t, tt.uneven, uneven && len(hot) > 0)
		})
	}
}

// TestOneIdPerRequestDoesNotSplit: with one id per request no id can
// show a budget of its own, yet the evenness test read one. The ids it
// tallies one by one are the latest, on which a window's throttles
// cluster (a limiter that counts its refusals refuses everything for a
// while), and every id throttled once was "hot": the budget was split and
// its pace restarted at nothing, six times in one run behind HAProxy. A
// child must now be throttled on two first attempts to be cut out.
func TestOneIdPerRequestDoesNotSplit(t *testing.T) {
	q, clk, st, users := usersBudget()
	for round := range 3 {
		for i := range 100 {
			clk.Advance(time.Millisecond)
			o := Succeeded
			if i >= 92 {
				o = Throttled // the window full at the end of each round
			}
			req := get(t, fmt.Sprintf("%s/v1.0/users/%d", graph, 100*round+i), "")
			st.mu.Lock()
			users.inflight++ // as the budget's pacer released it
			st.mu.Unlock()
			q.Report(req, Pass{Sent: clk.Now().Add(-time.Millisecond), host: st, budget: users}, o, time.Second, nil, clk.Now)
		}
		clk.Advance(time.Second)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for key, n := range st.nodes {
		assert.False(t, n.carved, "%s cut out of the budget", key)
	}
	assert.Same(t, users, q.budgetOf(st, targetOf(t, graph+"/v1.0/users/7").keys(), clk.Now()))
}

// usersBudget returns a queue on a fake clock whose host graph.test has
// one budget, /v1.0/users, pacing for the next hour.
func usersBudget() (*Queue, *clocktest.Clock, *hostState, *node) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	st := q.state("graph.test", true, time.Time{})
	st.mu.Lock()
	defer st.mu.Unlock()
	st.activate()
	users := st.node("users", 1)
	users.share(t0, q.newPacer)
	users.lastEnd = t0.Add(time.Hour)
	return q, clk, st, users
}

// TestRetriesAreNotTallied: a retry exists because its request was
// throttled, so its answer would tally most for the children throttled
// before; the evenness test counts first attempts only.
func TestRetriesAreNotTallied(t *testing.T) {
	q, clk, st, users := usersBudget()
	st.mu.Lock()
	users.inflight = 2
	st.mu.Unlock()
	req := get(t, graph+"/v1.0/users/7", "")
	first := Pass{Sent: t0, host: st, budget: users}
	q.Report(req, first, Succeeded, 0, nil, clk.Now)
	q.Report(req, first.Retried(), Throttled, time.Second, nil, clk.Now)
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.Equal(t, tally{sent: 1}, users.even.all, "the first attempt only")
}

// TestUnevenBudgetSplit checks that a budget whose throttles fall on some
// children while another with more traffic escapes them is split: its
// throttled children become budgets of their own, cut out of it, and it
// searches for its pace afresh for the rest, from the pace it had.
func TestUnevenBudgetSplit(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	mailboxes := []string{"m1", "m2", "m3", "m4"}
	for _, m := range mailboxes {
		q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+m+"/messages"), t0, t0, t0.Add(time.Second))
	}
	st := q.state("graph.test", false, time.Time{})
	st.mu.Lock()
	users := st.nodes["users"]
	require.NotNil(t, users)
	require.True(t, users.shared)
	learned := users.pacer
	st.mu.Unlock()
	req := func(p string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, graph+p, nil)
		return r
	}
	back := func() time.Time { return t0.Add(time.Second) }
	released := Pass{Sent: t0.Add(time.Second), host: st, budget: users}
	for i := range 60 {
		st.mu.Lock()
		users.inflight += 2
		st.mu.Unlock()
		q.Report(req("/v1.0/users/"+mailboxes[i%4]+"/messages"), released, Throttled, time.Second, nil, back)
		q.Report(req("/v1.0/users/id"), released, Succeeded, 0, nil, back)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.NotSame(t, learned, users.pacer, "users learns afresh")
	searching := users.pacer.(*adaptivePacer)
	assert.Equal(t, pacerSearching, searching.state, "from the pace it had")
	assert.Positive(t, searching.rateAt(back()))
	for _, m := range mailboxes {
		n := q.budgetOf(st, targetOf(t, graph+"/v1.0/users/"+m+"/messages").keys(), back())
		require.NotNil(t, n, m)
		assert.Equal(t, "users/"+m, n.key, "a budget of its own")
	}
	assert.Same(t, users, q.budgetOf(st, targetOf(t, graph+"/v1.0/users/id").keys(), back()), "the rest stays with users")
}

// TestWideningKeepsThePace checks that a budget that widens takes the pace
// learned below it: the same server's budget, seen through more targets.
func TestWideningKeepsThePace(t *testing.T) {
	q := New(clocktest.New(t0), options.QueueOptions{})
	q.throttleTarget(targetOf(t, graph+"/v1.0/users/m1/messages/1"), t0, t0, t0.Add(time.Second))
	q.throttleTarget(targetOf(t, graph+"/v1.0/users/m1/messages/2"), t0, t0, t0.Add(time.Second))
	st := q.state("graph.test", false, time.Time{})
	folder := st.nodes["users/m1/messages"]
	require.True(t, folder.shared)
	learned := folder.pacer
	for _, m := range []string{"m2", "m3", "m4"} {
		q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+m+"/messages/1"), t0, t0, t0.Add(time.Second))
	}
	users := st.nodes["users"]
	require.True(t, users.shared)
	assert.Same(t, learned, users.pacer)
	assert.False(t, folder.shared)
}

// TestWideningKeepsTheWave checks that a budget that widens keeps the
// whole first wave its server let through, whichever budget below counted
// it: the wider budget let all of it through, and a search starting from
// the latest budget's share alone began at a few requests a second.
func TestWideningKeepsTheWave(t *testing.T) {
	q := New(clocktest.New(t0), options.QueueOptions{})
	for _, m := range []string{"m1", "m2"} {
		q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+m+"/messages/1"), t0, t0, t0.Add(time.Second))
		q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+m+"/messages/2"), t0, t0, t0.Add(time.Second))
	}
	st := q.state("graph.test", false, time.Time{})
	first, latest := st.nodes["users/m1/messages"], st.nodes["users/m2/messages"]
	require.True(t, first.shared)
	require.True(t, latest.shared)
	require.NotSame(t, first.pacer, latest.pacer)
	waveStart := t0.Add(-time.Millisecond)
	first.pacer.settle(220, waveStart) // the host's wave, counted by the first
	latest.pacer.settle(5, t0)         // its own successes before its throttle
	learned := latest.pacer
	for _, m := range []string{"m3", "m4"} {
		q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+m+"/messages/1"), t0, t0, t0.Add(time.Second))
	}
	users := st.nodes["users"]
	require.True(t, users.shared)
	assert.Same(t, learned, users.pacer, "the latest pace")
	ap, ok := users.pacer.(*adaptivePacer)
	require.True(t, ok)
	assert.Equal(t, 225, ap.burst, "the whole wave")
	assert.Equal(t, waveStart, ap.waveStart)
}

// TestScopesPacedApart checks that each budget has a pace of its own:
// requests of one never wait behind another's queue, and a request that
// no budget holds is not paced at all.
func TestBudgetsPacedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(t0)
		q := New(clk, options.QueueOptions{})
		q.newPacer = func(time.Time) pacer { return &fixedPacer{every: time.Second} }
		// Both budgets throttled and ended: paced, not held.
		for _, id := range []string{"a", "b", "c", "d"} {
			q.throttleTarget(targetOf(t, graph+"/v1.0/users/"+id), t0, t0, t0)
			q.throttleTarget(targetOf(t, graph+"/v1.0/sites/"+id), t0, t0, t0)
		}
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
				q.throttleTarget(targetOf(t, graph+"/v1.0/me"), t0, t0, t0.Add(600*s))
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
	assert.NotNil(t, q.state("new1.test", false, time.Time{}), "a host seen 10 s ago is kept")
}

// TestPruneKeepsNewest checks that past MaxTracked exactly the newest
// throttles are kept, also when many end at the same instant (one
// HTTP-date for many URLs), and that MaxTracked 1 keeps the newest. 5 of
// 20 is the probe: the newest quarter kept, not none.
func TestPruneKeepsNewest(t *testing.T) {
	for _, maxTracked := range []int{1, 3, 5, 12} {
		q := New(clocktest.New(t0), options.QueueOptions{MaxTracked: maxTracked})
		const n = 20
		// Each throttle its own: a second apart, so that none spreads to
		// a budget, all ending at the same instant.
		for i := range n {
			at := t0.Add(time.Duration(i) * 2 * time.Second)
			q.throttleTarget(targetOf(t, graph+"/v1.0/items"+string(rune('a'+i))), at, at, t0.Add(time.Hour))
		}
		s := q.state("graph.test", false, time.Time{})
		assert.Len(t, s.urls, maxTracked, "MaxTracked %d: URLs", maxTracked)
		assert.Len(t, s.paths, maxTracked, "MaxTracked %d: paths", maxTracked)
		assert.LessOrEqual(t, len(s.nodes), maxTracked, "MaxTracked %d: nodes", maxTracked)
		newest := targetOf(t, graph+"/v1.0/items"+string(rune('a'+n-1)))
		assert.Contains(t, s.urls, newest.url, "MaxTracked %d: the newest throttle is kept", maxTracked)
		assert.Equal(t, t0.Add(time.Hour), s.held(newest), "MaxTracked %d: and still holds", maxTracked)
		for i := range n - maxTracked {
			assert.NotContains(t, s.urls, "/v1.0/items"+string(rune('a'+i)), "MaxTracked %d: the oldest go first", maxTracked)
		}
	}
}

// TestOverrunBeyondChance checks when a node's share of throttles makes it
// an overrun budget: a fifth of its answers where three or more throttled
// children are needed anyway, counted since the node's first throttle,
// and beyond chance where two are, counted with the host's wave before it
// (a drive's few locked items among its first answers are a draw).
func TestOverrunBeyondChance(t *testing.T) {
	tests := []struct {
		name           string
		depth          int
		throttles, oks int
		// wave is the host's successes before its first throttle.
		wave int
		want bool
	}{
		{"an API, a fifth throttled", 1, 4, 16, 0, true},
		{"an API, under a fifth", 1, 4, 17, 0, false},
		// HAProxy's window let a wave of 400 through: counted, the API
		// waited for 100 refusals before it held anything.
		{"an API overrun after a wave served", 1, 4, 0, 400, true},
		{"an API, a few throttles among its own answers after a wave", 1, 4, 17, 400, false},
		{"items, two throttled and nothing served", 3, 2, 0, 0, true},
		{"items, two locked among ten answers", 3, 2, 8, 0, false},
		{"items, two locked after eight served before", 3, 2, 0, 8, false},
		{"items, half of forty throttled", 3, 20, 20, 0, true},
		{"items, a fifth of forty throttled", 3, 8, 32, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{depth: tt.depth}
			for range tt.throttles {
				n.throttles.add(t0)
			}
			for range tt.oks {
				n.successes.add(t0)
			}
			var wave waveCount
			for range tt.wave {
				wave.add(t0)
			}
			assert.Equal(t, tt.want, n.overrun(&wave))
		})
	}
}
