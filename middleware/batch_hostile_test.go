package middleware_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// TestBatchFinalAnswersStayFinal checks that an item's final answer stays
// final whatever a later answer claims: an answer counts only for an item
// of the round it answers, a response that answers one id twice counts
// the answer that was not a throttle, and an id the caller's batch does
// not hold is kept once, from the first round. A POST answered 202 is
// never sent again.
func TestBatchFinalAnswersStayFinal(t *testing.T) {
	const request = `{"requests":[{"id":"1","method":"POST","url":"/me/sendMail","body":{}},{"id":"2","method":"GET","url":"/me"}]}`
	tests := []struct {
		name    string
		replies []reply
		resends []string   // the ids each resend holds, in order
		want    []batchRef // nil: the first answer, as the server sent it
	}{
		{
			name: "a stray 429 in a resend that did not hold the item",
			replies: []reply{
				batchOK(`{"responses":[{"id":"1","status":202},{"id":"2","status":429,"headers":{"Retry-After":"1"}}]}`),
				batchOK(`{"responses":[{"id":"2","status":200},{"id":"1","status":429,"headers":{"Retry-After":"1"}}]}`),
			},
			resends: []string{"2"},
			want:    []batchRef{{ID: "1", Status: 202}, {ID: "2", Status: 200}},
		},
		{
			name: "a 429 after a 202 for one id in one response",
			replies: []reply{
				batchOK(`{"responses":[{"id":"1","status":202},{"id":"1","status":429,"headers":{"Retry-After":"1"}},{"id":"2","status":200}]}`),
			},
		},
		{
			name: "a 429 before a 202 for one id in one response",
			replies: []reply{
				batchOK(`{"responses":[{"id":"1","status":429,"headers":{"Retry-After":"1"}},{"id":"2","status":200},{"id":"1","status":202}]}`),
			},
		},
		{
			name: "contradictory answers in a resend",
			replies: []reply{
				batchOK(`{"responses":[{"id":"1","status":429,"headers":{"Retry-After":"1"}},{"id":"2","status":200}]}`),
				batchOK(`{"responses":[{"id":"1","status":202},{"id":"1","status":429,"headers":{"Retry-After":"1"}}]}`),
			},
			resends: []string{"1"},
			want:    []batchRef{{ID: "1", Status: 202}, {ID: "2", Status: 200}},
		},
		{
			name: "an id the batch does not hold, answered every round",
			replies: []reply{
				batchOK(`{"responses":[{"id":"1","status":202},{"id":"2","status":429,"headers":{"Retry-After":"1"}},{"id":"9","status":200}]}`),
				batchOK(`{"responses":[{"id":"2","status":429,"headers":{"Retry-After":"1"}},{"id":"9","status":200}]}`),
				batchOK(`{"responses":[{"id":"2","status":200},{"id":"9","status":200},{"id":"9","status":200}]}`),
			},
			resends: []string{"2", "2"},
			want:    []batchRef{{ID: "1", Status: 202}, {ID: "2", Status: 200}, {ID: "9", Status: 200}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.replies...)
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(5, time.Second)})
			res, _ := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, []byte(request)))
			require.NoError(t, res.err)
			got := srv.attempts()
			require.Len(t, got, 1+len(tt.resends), "attempts")
			for i, id := range tt.resends {
				assert.Equal(t, []batchRef{{ID: id}}, requestIDs(t, got[i+1].body), "resend %d", i+1)
			}
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			if tt.want == nil {
				assert.Equal(t, tt.replies[0].body, res.body)
				return
			}
			assert.Equal(t, tt.want, responseRefs(t, res.body))
		})
	}
}

// TestBatchHugeItemRetryAfter checks that an item's Retry-After too large
// to represent, in seconds or as a date, means longer than any limit: the
// stand-in names the longest wait there is, the limits decide, and the
// batch is not resent.
func TestBatchHugeItemRetryAfter(t *testing.T) {
	for _, retryAfter := range []string{
		strings.Repeat("9", 20),
		"Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		t.Run(retryAfter, func(t *testing.T) {
			answer := `{"responses":[{"id":"1","status":200},{"id":"2","status":429,"headers":{"Retry-After":"` + retryAfter + `"}}]}`
			srv := newScripted(t, batchOK(answer), batchOK(secondOK), batchOK(secondOK))
			var seen []time.Duration
			h, clk := newHandler(t, options.RetryHandlerOptions{ShouldRetry: func(a options.Attempt) bool {
				seen = append(seen, a.RetryAfter)
				return true
			}})
			res, waits := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, []byte(twoItems)))
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), 1, "no resend")
			assert.Empty(t, waits)
			for _, d := range seen {
				assert.Greater(t, d, 100*365*24*time.Hour, "the stand-in's Retry-After-Ms")
			}
			assert.Equal(t, []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 429}}, responseRefs(t, res.body))
		})
	}
}
