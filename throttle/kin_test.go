package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// TestKinCarvedFromItsFirstThrottle checks that an item as deep as the
// items carved together below a budget with items of its own is a budget
// of its own from its first throttle (Graph's tenth mailbox beside
// Identity's users), and that nothing else is.
func TestKinCarvedFromItsFirstThrottle(t *testing.T) {
	ms := time.Millisecond
	users := []string{"/v1.0/users/u1", "/v1.0/users/u2", "/v1.0/users/u3", "/v1.0/users/u4"}
	tests := []struct {
		name    string
		carved  int      // mailboxes m1..m<carved>, each throttled twice together
		format  string   // their paths; default mailboxes
		alone   []string // throttled once each, after them
		later   time.Duration
		probe   string // throttled once, later after the rest
		budget  string // the key of the budget its throttle counts against
		charged bool   // whether the users API's budget took the throttle
	}{
		{"the next mailbox is its own", 3, "", users, 0, "/v1.0/users/m9/messages", "users/m9/messages", false},
		{"its own within the recovery window", 3, "", users, 9 * time.Second, "/v1.0/users/m9/messages", "users/m9/messages", false},
		{"a user is the API's", 3, "", users, 0, "/v1.0/users/u9", "users", true},
		// Carved users as deep as the users alone: which is which is the
		// evenness judge's to say.
		{"carved users make no kind", 3, "/v1.0/users/c%d", users, 0, "/v1.0/users/u9", "users", true},
		// Gathered: the mailboxes are one budget, the users API.
		{"no user of its own", 4, "", nil, 0, "/v1.0/users/m9/messages", "users", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.New(t0), options.QueueOptions{})
			format := tt.format
			if format == "" {
				format = "/v1.0/users/m%d/messages"
			}
			at := throttleItemsTogether(t, q, t0, tt.carved, format)
			for _, u := range tt.alone {
				q.throttleTarget(targetOf(t, graph+u), at, at.Add(ms), at.Add(time.Second))
				at = at.Add(ms)
			}
			at = at.Add(tt.later)
			if tt.later > 0 {
				// Keep the users API a budget.
				q.throttleTarget(targetOf(t, graph+"/v1.0/users/u5"), at, at.Add(ms), at.Add(time.Second))
				at = at.Add(ms)
			}
			end := at.Add(5 * time.Second) // later than any other throttle's
			tg := targetOf(t, graph+tt.probe)
			q.throttleTarget(tg, at, at.Add(ms), end)
			assert.Equal(t, tt.budget, budgetKey(t, q, tt.probe, at.Add(ms)))
			st := q.state(tg.host, false, time.Time{})
			st.mu.Lock()
			defer st.mu.Unlock()
			api := st.nodes["users"]
			require.NotNil(t, api)
			assert.Equal(t, tt.charged, api.lastEnd.Equal(end), "whether the users API's budget took the throttle")
		})
	}
}

// TestKinLapses checks that the kind is forgotten once its evidence is
// a recovery window old.
func TestKinLapses(t *testing.T) {
	ms := time.Millisecond
	q := New(clocktest.New(t0), options.QueueOptions{})
	at := throttleItemsTogether(t, q, t0, 3, "/v1.0/users/m%d/messages")
	for _, u := range []string{"/v1.0/users/u1", "/v1.0/users/u2", "/v1.0/users/u3", "/v1.0/users/u4"} {
		q.throttleTarget(targetOf(t, graph+u), at, at.Add(ms), at.Add(time.Second))
		at = at.Add(ms)
	}
	// The users API stays a budget, its users throttled now and then,
	// but no mailbox is carved for a recovery window.
	for range 11 {
		at = at.Add(time.Second)
		q.throttleTarget(targetOf(t, graph+"/v1.0/users/u5"), at, at.Add(ms), at.Add(time.Second))
	}
	probe := "/v1.0/users/m9/messages"
	q.throttleTarget(targetOf(t, graph+probe), at, at.Add(ms), at.Add(time.Second))
	assert.Equal(t, "users", budgetKey(t, q, probe, at.Add(ms)))
}
