package throttletest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mailboxRule gives every mailbox (/v1.0/users/{id}/...) a budget of its
// own: burst requests, then one every 10 s.
func mailboxRule(burst int) Rule {
	return Rule{
		Name: "mailbox",
		Match: func(r *http.Request) (string, bool) {
			seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
			if len(seg) < 3 || seg[1] != "users" {
				return "", false
			}
			return seg[2], true
		},
		Limiter: BucketLimiter(Bucket{Rate: 0.1, Burst: burst}),
	}
}

func batchStatuses(t *testing.T, body string) (ids []string, status map[string]batchAnswer) {
	t.Helper()
	var doc struct {
		Responses []batchAnswer `json:"responses"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	status = map[string]batchAnswer{}
	for _, a := range doc.Responses {
		ids = append(ids, a.ID)
		status[a.ID] = a
	}
	return ids, status
}

func TestBatchItemsThrottledOneByOne(t *testing.T) {
	// Always 0: the shuffle moves every answer, so that none is in place.
	h := newHarness(t, Config{Rules: []Rule{mailboxRule(2)}, Rand: func() float64 { return 0 }})
	batch := `{"requests":[
		{"id":"1","method":"GET","url":"/users/a/messages"},
		{"id":"2","method":"GET","url":"/users/a/events"},
		{"id":"3","method":"GET","url":"users/a/contacts"},
		{"id":"4","method":"POST","url":"/users/a/mailFolders","dependsOn":["3"],"body":{}},
		{"id":"5","method":"GET","url":"/users/b/messages"},
		{"id":"6","method":"GET","url":"/me"}]}`
	r := h.do(http.MethodPost, h.srv.URL+"/v1.0/$batch", batch, HeaderRequestID, "b1")
	require.Equal(t, http.StatusOK, r.status)
	ids, got := batchStatuses(t, r.body)
	assert.ElementsMatch(t, []string{"1", "2", "3", "4", "5", "6"}, ids)
	assert.NotEqual(t, []string{"1", "2", "3", "4", "5", "6"}, ids, "answers come in the server's order")
	want := map[string]int{"1": 200, "2": 200, "3": 429, "4": 424, "5": 200, "6": 200}
	for id, status := range want {
		assert.Equal(t, status, got[id].Status, "item %s", id)
	}
	assert.Equal(t, "10", got["3"].Headers["Retry-After"])
	assert.Empty(t, got["4"].Headers["Retry-After"])

	st := h.srv.Stats()
	assert.Equal(t, 5, st.Attempts, "the items run, the 424 one excepted; the batch itself is not counted")
	assert.Equal(t, map[string]int{"mailbox": 1}, st.ThrottledBy)
	byID := map[string]Request{}
	for _, rq := range h.srv.Requests() {
		byID[rq.ID] = rq
	}
	assert.Equal(t, "/v1.0/users/a/contacts", byID["b1/3"].Path)
	assert.Equal(t, 1, byID["b1/3"].Throttled)

	// Resent alone after its Retry-After, the item passes and is counted
	// as the same logical request.
	h.now.Advance(10 * time.Second)
	r = h.do(http.MethodPost, h.srv.URL+"/v1.0/$batch", `{"requests":[{"id":"3","method":"GET","url":"/users/a/contacts"}]}`, HeaderRequestID, "b1")
	_, got = batchStatuses(t, r.body)
	assert.Equal(t, 200, got["3"].Status)
	for _, rq := range h.srv.Requests() {
		if rq.ID == "b1/3" {
			assert.Equal(t, 2, rq.Attempts)
			assert.Zero(t, rq.Early)
			assert.False(t, rq.Done.IsZero())
		}
	}
}

func TestBatchRejected(t *testing.T) {
	many := make([]string, MaxBatchItems+1)
	for i := range many {
		many[i] = `{"id":"` + strings.Repeat("x", i+1) + `","method":"GET","url":"/me"}`
	}
	for name, body := range map[string]string{
		"not JSON": `{"requests":[`,
		"empty":    `{"requests":[]}`,
		"too many": `{"requests":[` + strings.Join(many, ",") + `]}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Config{})
			r := h.do(http.MethodPost, h.srv.URL+"/v1.0/$batch", body)
			assert.Equal(t, http.StatusBadRequest, r.status)
			assert.Zero(t, h.srv.Stats().Attempts)
		})
	}
}
