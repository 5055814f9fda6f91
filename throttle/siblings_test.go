package throttle

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// TestCarvedSiblingsShareABudget checks that items carved one by one
// below one ancestor, as many as the 5-n rule asks, are the ancestor's
// budget together, unless an item throttled on its own below it shows the
// ancestor's own traffic a budget of its own (Graph's users API beside
// its mailboxes).
func TestCarvedSiblingsShareABudget(t *testing.T) {
	mailbox := func(i int) string { return fmt.Sprintf("/v1.0/users/m%d/messages", i) }
	tests := []struct {
		name      string
		alone     []string // throttled once each, first
		mailboxes int      // each throttled twice together
		after     []string // throttled once each, last
		probe     int      // the mailbox whose budget is asked for
		budget    string   // its key
	}{
		{"4 carved mailboxes are one budget", nil, 4, nil, 1, "users"},
		{"the last carved too", nil, 4, nil, 4, "users"},
		{"a mailbox throttled together later too", nil, 6, nil, 6, "users"},
		{"a mailbox never throttled too", nil, 4, nil, 9, "users"},
		{"3 carved mailboxes keep their own", nil, 3, nil, 1, "users/m1/messages"},
		{"a user throttled alone keeps them apart", []string{"/v1.0/users/u1"}, 4, nil, 1, "users/m1/messages"},
		{"a mailbox refused once says nothing", []string{"/v1.0/users/m9/messages"}, 4, nil, 1, "users"},
		// The users API's own bucket ran dry after its mailboxes' did:
		// gathered, the mailboxes are budgets of their own again.
		{"a user throttled alone after the gathering parts them", nil, 4, []string{"/v1.0/users/u1"}, 1, "users/m1/messages"},
		// Users throttled alone make the users API a budget by the 5-n
		// rule; the mailboxes carved before it stay their own.
		{"users throttled alone widen past carved mailboxes", nil, 3,
			[]string{"/v1.0/users/u1", "/v1.0/users/u2", "/v1.0/users/u3", "/v1.0/users/u4"}, 1, "users/m1/messages"},
		{"the users API is their budget", nil, 3,
			[]string{"/v1.0/users/u1", "/v1.0/users/u2", "/v1.0/users/u3", "/v1.0/users/u4"}, 9, "users"},
	}
	ms := time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			at := t0
			for _, u := range tt.alone {
				q.throttleTarget(targetOf(t, graph+u), at, at.Add(ms), at.Add(time.Second))
				at = at.Add(ms)
			}
			at = throttleTogether(t, q, at, tt.mailboxes)
			for _, u := range tt.after {
				q.throttleTarget(targetOf(t, graph+u), at, at.Add(ms), at.Add(time.Second))
				at = at.Add(ms)
			}
			tg := targetOf(t, graph+mailbox(tt.probe))
			st := q.state(tg.host, false, time.Time{})
			st.mu.Lock()
			defer st.mu.Unlock()
			n := q.budgetOf(st, tg.keys(), at)
			require.NotNil(t, n)
			assert.Equal(t, tt.budget, n.key)
			assert.NotNil(t, n.pacer)
			if n.gathers {
				for i := 1; i <= tt.mailboxes; i++ {
					m := st.nodes[targetOf(t, graph+mailbox(i)).keys()[3]]
					assert.False(t, m != nil && (m.carved || m.shared), "mailbox %d keeps no budget of its own", i)
				}
			}
		})
	}
}

// TestCarvedUsersBesideAUserAlone checks that an item throttled on its
// own as deep as the carved ones is one of them, sent alone, not a budget
// of the ancestor's own traffic: 50 users behind one limiter, some of
// them refused one request at a time, are the users API's budget
// together. A user alone beside carved mailboxes still keeps them apart
// (TestCarvedSiblingsShareABudget).
func TestCarvedUsersBesideAUserAlone(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		alone  string // throttled once, first
		budget string // the budget of the first carved user
	}{
		{"a user alone", "/v1.0/users/x1", "users"},
		{"a user's mailbox alone", "/v1.0/users/x1/messages", "users"},
		{"nothing alone", "", "users"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			at := t0
			if tt.alone != "" {
				q.throttleTarget(targetOf(t, graph+tt.alone), at, at.Add(ms), at.Add(time.Second))
				at = at.Add(ms)
			}
			at = throttleItemsTogether(t, q, at, 4, "/v1.0/users/u%d")
			assert.Equal(t, tt.budget, budgetKey(t, q, "/v1.0/users/u1", at))
		})
	}
}

// budgetKey returns the key of the budget that paces a request to path at
// at; it fails the test when none does.
func budgetKey(t *testing.T, q *Queue, path string, at time.Time) string {
	t.Helper()
	tg := targetOf(t, graph+path)
	st := q.state(tg.host, false, time.Time{})
	st.mu.Lock()
	defer st.mu.Unlock()
	n := q.budgetOf(st, tg.keys(), at)
	require.NotNil(t, n)
	return n.key
}

// TestCarvedSiblingSplitOut checks that carved siblings gathered into
// one budget are a hypothesis like any budget: a sibling its releases met
// throttles at while the others escaped them is split out with a pace of
// its own, and stays out.
func TestCarvedSiblingSplitOut(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	ms := time.Millisecond
	at := throttleTogether(t, q, t0, 4)
	st := q.state("graph.test", false, time.Time{})
	st.mu.Lock()
	defer st.mu.Unlock()
	g := st.nodes["users"]
	require.True(t, g.gathers)
	hot := targetOf(t, graph+"/v1.0/users/m1/messages")
	for i := range 100 {
		at = at.Add(10 * ms)
		if i%4 == 0 {
			// Sent before its last throttle came back, so not a locked
			// item's strike.
			q.throttled(st, hot, Pass{Sent: at.Add(-50 * ms), budget: g}, at.Add(ms), at.Add(time.Second))
			continue
		}
		other := targetOf(t, graph+fmt.Sprintf("/v1.0/users/m%d/messages", 2+i%3))
		q.succeeded(st, other, Pass{Sent: at, budget: g}, at.Add(ms), false)
	}
	n := q.budgetOf(st, hot.keys(), at)
	require.NotNil(t, n)
	assert.Equal(t, "users/m1", n.key, "split out")
	assert.True(t, n.carved)
	// Throttled together again, it stays out.
	q.throttled(st, hot, Pass{Sent: at.Add(-ms), budget: n}, at.Add(ms), at.Add(time.Second))
	q.throttled(st, hot, Pass{Sent: at, budget: n}, at.Add(2*ms), at.Add(time.Second))
	assert.Same(t, n, q.budgetOf(st, hot.keys(), at.Add(2*ms)))
	assert.Same(t, g, q.budgetOf(st, targetOf(t, graph+"/v1.0/users/m2/messages").keys(), at), "the others stay together")
}

// throttleTogether throttles mailboxes 1 to k as a first wave does: each
// is sent twice, all at once from at, and every answer is a throttle, the
// first to each mailbox before the second. It returns when the last came
// back.
func throttleTogether(t *testing.T, q *Queue, at time.Time, k int) time.Time {
	return throttleItemsTogether(t, q, at, k, "/v1.0/users/m%d/messages")
}

// throttleItemsTogether is throttleTogether for the items the path format
// names, i from 1 to k.
func throttleItemsTogether(t *testing.T, q *Queue, at time.Time, k int, format string) time.Time {
	ms := time.Millisecond
	back := at.Add(10 * ms)
	for round := range 2 {
		for i := 1; i <= k; i++ {
			tg := targetOf(t, graph+fmt.Sprintf(format, i))
			sent := at.Add(time.Duration(round*k+i) * 10 * time.Microsecond)
			back = back.Add(ms)
			q.throttleTarget(tg, sent, back, back.Add(time.Second))
		}
	}
	return back
}

// TestGatheredBudgetEnds checks that a node gathers its carved siblings
// only while it is a budget: once its last throttle is a recovery window
// old, requests to one item throttled together make the item a budget of
// its own again, until the evidence gathers them anew.
func TestGatheredBudgetEnds(t *testing.T) {
	q := New(clocktest.New(t0), options.QueueOptions{})
	at := throttleTogether(t, q, t0, 4)
	st := q.state("graph.test", false, time.Time{})
	require.True(t, st.nodes["users"].gathers)

	later := at.Add(time.Minute)
	tg := targetOf(t, graph+"/v1.0/users/m1/messages")
	q.throttleTarget(tg, later, later.Add(time.Millisecond), later.Add(time.Second))
	q.throttleTarget(tg, later, later.Add(2*time.Millisecond), later.Add(time.Second))
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.False(t, st.nodes["users"].gathers)
	n := q.budgetOf(st, tg.keys(), later.Add(2*time.Millisecond))
	require.NotNil(t, n)
	assert.Equal(t, "users/m1/messages", n.key)
}

// TestLockedItemsAmongServedSiblingsStayApart checks that items throttled
// together gather into their ancestor only while the ancestor's throttles
// are a budget's share of its answers: locked items of a drive, each
// requested twice at once now and then, are refused together as often as
// a budget's items would be, but among thousands of their siblings'
// successes they are a few of its answers, and no request to an item
// the server serves is paced. Without the share, two locked items
// requested twice within a second made the drive's items a budget paced
// at a hundredth of what the server served (the locked-items simulation,
// 0.01 of the queue off, in one schedule in a few hundred).
func TestLockedItemsAmongServedSiblingsStayApart(t *testing.T) {
	ms := time.Millisecond
	item := func(i int) *target { return targetOf(t, graph+fmt.Sprintf("/v1.0/drives/d1/items/%d", i)) }
	tests := []struct {
		name   string
		served int    // successes to other items before the locked ones
		budget string // the budget of a served item; "" for none
	}{
		{"among thousands served", 2000, ""},
		{"with nothing served", 0, "drives/d1/items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			// The first throttle makes the drive's nodes, which count the
			// successes after it.
			q.throttleTarget(item(20), t0, t0.Add(ms), t0.Add(time.Second))
			st := q.state("graph.test", false, time.Time{})
			at := t0.Add(ms)
			for i := range tt.served {
				at = at.Add(100 * time.Microsecond)
				st.mu.Lock()
				q.succeeded(st, item(20*i+1), Pass{Sent: at.Add(-ms)}, at, false)
				st.mu.Unlock()
			}
			at = throttleItemsTogether(t, q, at, 4, "/v1.0/drives/d1/items/%d00")
			tg := item(7)
			st.mu.Lock()
			defer st.mu.Unlock()
			got := "" // no budget: the item is not paced
			if n := q.budgetOf(st, tg.keys(), at); n != nil {
				got = n.key
			}
			assert.Equal(t, tt.budget, got)
		})
	}
}
