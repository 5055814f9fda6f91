package throttletest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGraphBudgets checks that each Graph service draws from its own
// budget on one host, Outlook's per mailbox, and that a locked item
// answers 429 alone until its lock ends.
func TestGraphBudgets(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	one := Bucket{Rate: 0.001, Burst: 1} // one request, then throttled for long
	srv, err := newServer(Config{Rules: GraphBudgets{
		Identity: one, Mailbox: one, Sites: one, Drives: Bucket{Rate: 1000, Burst: 1000},
		Locked:    func(_, item string) bool { return item == "locked" },
		LockedFor: time.Second,
	}.Rules()}, func() time.Time { return now })
	require.NoError(t, err)
	defer srv.Close()

	steps := []struct {
		path  string
		after time.Duration // the clock moves on by it before the request
		want  int
		by    string // the budget that throttled it
	}{
		{"/v1.0/users/1", 0, 200, ""},
		{"/v1.0/users/2", 0, 429, "identity"},
		{"/v1.0/groups/g", 0, 429, "identity"},
		{"/v1.0/users/m1/messages", 0, 200, ""},
		{"/v1.0/users/m1/messages/7", 0, 429, "mailbox"},
		{"/beta/users/m2/mailFolders/inbox/messages", 0, 200, ""},
		{"/v1.0/me/events", 0, 200, ""},
		{"/v1.0/sites/root", 0, 200, ""},
		{"/v1.0/sites/root/lists", 0, 429, "sites"},
		{"/v1.0/drives/d/items/a", 0, 200, ""},
		{"/v1.0/drives/d/items/locked", 0, 429, "locked"},
		{"/v1.0/drives/d/items/locked/content", 0, 429, "locked"},
		{"/v1.0/drives/d/items/b", 0, 200, ""},
		{"/v1.0/drives/d/items/locked", time.Second, 200, ""},
	}
	for _, st := range steps {
		now = now.Add(st.after)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://graph.test"+st.path, nil))
		assert.Equal(t, st.want, rec.Code, st.path)
		if st.want == 429 {
			assert.NotEmpty(t, rec.Header().Get("Retry-After"), st.path)
		}
	}
	want := map[string]int{}
	for _, st := range steps {
		if st.by != "" {
			want[st.by]++
		}
	}
	assert.Equal(t, want, srv.Stats().ThrottledBy)
}
