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

func TestGraphUsersPaging(t *testing.T) {
	tests := []struct {
		name  string
		first string // query of the first page
		pages []int  // users per page
	}{
		{"default page size", "", []int{10, 10, 5}},
		{"$top", "?$top=7", []int{7, 7, 7, 4}},
		{"one page", "?$top=999", []int{25}},
		{"invalid $top takes the default", "?$top=0", []int{10, 10, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			var sizes []int
			var ids []string
			next := h.srv.URL + "/v1.0/users" + tt.first
			for next != "" {
				rep := h.do(http.MethodGet, next, "")
				require.Equal(t, http.StatusOK, rep.status)
				var page graphPage
				require.NoError(t, json.Unmarshal([]byte(rep.body), &page))
				sizes = append(sizes, len(page.Value))
				for _, u := range page.Value {
					ids = append(ids, u.ID)
				}
				if page.NextLink != "" {
					assert.True(t, strings.HasPrefix(page.NextLink, h.srv.URL+"/v1.0/users?"), page.NextLink)
				}
				next = page.NextLink
			}
			assert.Equal(t, tt.pages, sizes)
			require.Len(t, ids, GraphUsers)
			assert.Equal(t, "user-01", ids[0])
			assert.Equal(t, "user-25", ids[GraphUsers-1])
		})
	}
}

// A page is throttled like any other request, and its retry gets the page.
func TestGraphUsersPageThrottled(t *testing.T) {
	h := newHarness(t, Config{Bucket: Bucket{Rate: 1, Burst: 1}})
	first := h.do(http.MethodGet, h.srv.URL+"/v1.0/users?$top=5", "")
	require.Equal(t, http.StatusOK, first.status)
	var page graphPage
	require.NoError(t, json.Unmarshal([]byte(first.body), &page))
	require.NotEmpty(t, page.NextLink)

	throttled := h.do(http.MethodGet, page.NextLink, "")
	assert.Equal(t, http.StatusTooManyRequests, throttled.status)
	assert.Equal(t, "1", throttled.retryAfter)
	assert.Contains(t, throttled.body, "TooManyRequests")

	h.now.Advance(time.Second)
	again := h.do(http.MethodGet, page.NextLink, "")
	require.Equal(t, http.StatusOK, again.status)
	require.NoError(t, json.Unmarshal([]byte(again.body), &page))
	assert.Equal(t, "user-06", page.Value[0].ID)
}

// Other paths keep their single-object answers: GET /me reads as a user.
func TestGraphMe(t *testing.T) {
	h := newHarness(t, Config{})
	rep := h.do(http.MethodGet, h.srv.URL+"/v1.0/me", "")
	require.Equal(t, http.StatusOK, rep.status)
	var u graphUser
	require.NoError(t, json.Unmarshal([]byte(rep.body), &u))
	assert.Equal(t, "me", u.ID)
}
