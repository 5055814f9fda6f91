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
		first string // path and query of the first page
		pages []int  // users per page
	}{
		{"default page size", "/v1.0/users", []int{10, 10, 5}},
		{"$top", "/v1.0/users?$top=7", []int{7, 7, 7, 4}},
		{"one page", "/v1.0/users?$top=999", []int{25}},
		{"invalid $top takes the default", "/v1.0/users?$top=0", []int{10, 10, 5}},
		{"beta", "/beta/users", []int{10, 10, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			var sizes []int
			var ids []string
			next := h.srv.URL + tt.first
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
					assert.True(t, strings.HasPrefix(page.NextLink, h.srv.URL+strings.Split(tt.first, "?")[0]+"?"), page.NextLink)
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

func TestGraphUsersPost(t *testing.T) {
	h := newHarness(t, Config{})
	rep := h.do(http.MethodPost, h.srv.URL+"/v1.0/users", `{"displayName":"Ada Lovelace","userPrincipalName":"ada@example.com"}`)
	require.Equal(t, http.StatusCreated, rep.status)
	var u graphUser
	require.NoError(t, json.Unmarshal([]byte(rep.body), &u))
	assert.Equal(t, "Ada Lovelace", u.DisplayName)
	assert.Equal(t, "ada@example.com", u.UserPrincipalName)
	assert.True(t, strings.HasPrefix(u.ID, "new-"), u.ID)

	for _, path := range []string{"/v1.0/users/x/sendMail", "/users"} {
		other := h.do(http.MethodPost, h.srv.URL+path, `{"displayName":"x"}`)
		assert.Equal(t, http.StatusCreated, other.status)
		assert.Contains(t, other.body, `"sha256"`, "%s keeps the echo", path)
	}
}
