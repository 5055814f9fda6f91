package batch

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtures is the repository's batch fixture directory.
const fixtures = "../../testdata/batch"

// fixture is one batch followed through its rounds.
type fixture struct {
	Request json.RawMessage `json:"request"`
	Rounds  []struct {
		Response json.RawMessage `json:"response"`
		Resend   []resent        `json:"resend"`
	} `json:"rounds"`
	Merged []struct {
		ID     string `json:"id"`
		Status int    `json:"status"`
	} `json:"merged"`
}

// resent is an item of a resend body as the fixtures state it.
type resent struct {
	ID        string   `json:"id"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

func TestCompleterFixtures(t *testing.T) {
	for _, name := range []string{"partial", "depends", "gateway", "outoforder", "msgraph-sdk-go-core"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(fixtures, name+".json"))
			require.NoError(t, err)
			var f fixture
			require.NoError(t, json.Unmarshal(raw, &f))
			c, err := NewCompleter(f.Request)
			require.NoError(t, err)
			for i, round := range f.Rounds {
				_, err := c.Absorb(round.Response)
				require.NoError(t, err, "round %d", i+1)
				body, err := c.ResendBody()
				require.NoError(t, err)
				var doc struct {
					Requests []resent `json:"requests"`
				}
				require.NoError(t, json.Unmarshal(body, &doc), "round %d resend body %s", i+1, body)
				want := round.Resend
				if want == nil {
					want = []resent{}
				}
				if doc.Requests == nil {
					doc.Requests = []resent{}
				}
				assert.Equal(t, want, doc.Requests, "round %d", i+1)
				assert.Len(t, c.Pending(), len(want), "round %d", i+1)
			}
			var merged struct {
				Responses []struct {
					ID     string `json:"id"`
					Status int    `json:"status"`
				} `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(c.Merged(), &merged))
			assert.Equal(t, f.Merged, merged.Responses)
		})
	}
}

// TestResendKeepsItems checks that a resent item is sent as the caller
// wrote it, body and headers included, but for a met dependency.
func TestResendKeepsItems(t *testing.T) {
	c, err := NewCompleter([]byte(`{"requests":[
		{"id":"1","method":"POST","url":"/me/mailFolders","body":{"displayName":"R"},"headers":{"Content-Type":"application/json"}},
		{"id":"2","method":"POST","url":"/me/mailFolders/R/childFolders","dependsOn":["1"],"body":{"displayName":"S"},"headers":{"Content-Type":"application/json"}}]}`))
	require.NoError(t, err)
	_, err = c.Absorb([]byte(`{"responses":[{"id":"1","status":201},{"id":"2","status":429,"headers":{"Retry-After":"1"}}]}`))
	require.NoError(t, err)
	body, err := c.ResendBody()
	require.NoError(t, err)
	assert.JSONEq(t, `{"requests":[{"id":"2","method":"POST","url":"/me/mailFolders/R/childFolders","body":{"displayName":"S"},"headers":{"Content-Type":"application/json"}}]}`, string(body))
	assert.Equal(t, []Item{{ID: "2", Method: "POST", URL: "/me/mailFolders/R/childFolders", Status: 429, Header: http.Header{"Retry-After": {"1"}}}}, c.Pending())
}

func TestRetryableNarrowsStatuses(t *testing.T) {
	c, err := NewCompleter([]byte(`{"requests":[{"id":"1","method":"GET","url":"/a"},{"id":"2","method":"GET","url":"/b"}]}`))
	require.NoError(t, err)
	c.Retryable = func(status int) bool { return status == http.StatusTooManyRequests }
	_, err = c.Absorb([]byte(`{"responses":[{"id":"1","status":503},{"id":"2","status":429}]}`))
	require.NoError(t, err)
	require.Len(t, c.Pending(), 1)
	assert.Equal(t, "2", c.Pending()[0].ID)
}

func TestMalformedBodies(t *testing.T) {
	good := []byte(`{"requests":[{"id":"1","method":"GET","url":"/me"}]}`)
	entries, err := os.ReadDir(filepath.Join(fixtures, "malformed"))
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(fixtures, "malformed", e.Name()))
			require.NoError(t, err)
			if strings.HasPrefix(e.Name(), "request-") {
				_, err := NewCompleter(body)
				require.ErrorIs(t, err, ErrNotBatch)
				return
			}
			c, err := NewCompleter(good)
			require.NoError(t, err)
			_, err = c.Absorb([]byte(`{"responses":[{"id":"1","status":429}]}`))
			require.NoError(t, err)
			before := c.Merged()
			_, err = c.Absorb(body)
			require.ErrorIs(t, err, ErrNotBatch)
			assert.Equal(t, before, c.Merged(), "a rejected response leaves the answers as they were")
			assert.Len(t, c.Pending(), 1)
		})
	}
}

func TestOversizedBodies(t *testing.T) {
	big := []byte(`{"requests":[{"id":"1","method":"GET","url":"/me","body":"` + strings.Repeat("x", MaxBodySize) + `"}]}`)
	_, err := NewCompleter(big)
	require.ErrorIs(t, err, ErrNotBatch)

	c, err := NewCompleter([]byte(`{"requests":[{"id":"1","method":"GET","url":"/me"}]}`))
	require.NoError(t, err)
	_, err = c.Absorb(bytes.Replace(big, []byte("requests"), []byte("responses"), 1))
	require.ErrorIs(t, err, ErrNotBatch)
}

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        bool
	}{
		{"POST", "https://graph.microsoft.com/v1.0/$batch", true},
		{"POST", "https://graph.microsoft.com/beta/$batch", true},
		{"POST", "https://graph.microsoft.com/v1.0/%24batch", true},
		{"GET", "https://graph.microsoft.com/v1.0/$batch", false},
		{"POST", "https://graph.microsoft.com/v1.0/me/$batchy", false},
		{"POST", "https://graph.microsoft.com/v1.0/me", false},
	} {
		u, err := url.Parse(tc.url)
		require.NoError(t, err)
		assert.Equal(t, tc.want, Is(tc.method, u), "%s %s", tc.method, tc.url)
	}
}

func TestResolve(t *testing.T) {
	base, err := url.Parse("https://graph.microsoft.com/v1.0/$batch?x=1")
	require.NoError(t, err)
	for item, want := range map[string]string{
		"/me/messages?$top=5":                    "https://graph.microsoft.com/v1.0/me/messages?$top=5",
		"me/events":                              "https://graph.microsoft.com/v1.0/me/events",
		"https://graph.microsoft.com/beta/me":    "https://graph.microsoft.com/beta/me",
		"/users/a@contoso.com/mailFolders/inbox": "https://graph.microsoft.com/v1.0/users/a@contoso.com/mailFolders/inbox",
	} {
		u, err := Resolve(base, item)
		require.NoError(t, err)
		assert.Equal(t, want, u.String(), item)
	}
}

func TestEncodings(t *testing.T) {
	body := []byte(`{"responses":[]}`)
	for _, enc := range []string{"", "identity", "gzip"} {
		coded, err := Encode(body, enc)
		require.NoError(t, err, enc)
		back, err := Decode(coded, enc)
		require.NoError(t, err, enc)
		assert.Equal(t, body, back, enc)
	}
	_, err := Decode(body, "br")
	require.ErrorIs(t, err, ErrNotBatch)
	_, err = Decode(body, "gzip")
	require.ErrorIs(t, err, ErrNotBatch, "a body that is not gzip")

	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, err = zw.Write(make([]byte, MaxBodySize+1))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	_, err = Decode(bomb.Bytes(), "gzip")
	require.ErrorIs(t, err, ErrNotBatch, "decoding stops at the bound")
}

// TestAbsorbCountsOnlyTheRound checks that an answer counts only for an
// item of the round it answers, that a response answering one id twice
// counts the answer not worth resending over one that is (else the
// first), and that an id the request does not hold is kept once, from the
// first round.
func TestAbsorbCountsOnlyTheRound(t *testing.T) {
	const request = `{"requests":[{"id":"1","method":"POST","url":"/me/sendMail"},{"id":"2","method":"GET","url":"/me"}]}`
	for _, tt := range []struct {
		name    string
		rounds  []string
		pending []string
		merged  string
	}{
		{
			name: "a final answer is not reopened by a later round",
			rounds: []string{
				`{"responses":[{"id":"1","status":202},{"id":"2","status":429}]}`,
				`{"responses":[{"id":"1","status":429},{"id":"2","status":429}]}`,
			},
			pending: []string{"2"},
			merged:  `{"responses":[{"id":"1","status":202},{"id":"2","status":429}]}`,
		},
		{
			name:    "a throttle and a final answer for one id: the final one",
			rounds:  []string{`{"responses":[{"id":"1","status":429},{"id":"1","status":202},{"id":"2","status":200}]}`},
			pending: []string{},
			merged:  `{"responses":[{"id":"1","status":202},{"id":"2","status":200}]}`,
		},
		{
			name:    "two throttles for one id: the first",
			rounds:  []string{`{"responses":[{"id":"2","status":503},{"id":"2","status":429},{"id":"1","status":202}]}`},
			pending: []string{"2"},
			merged:  `{"responses":[{"id":"1","status":202},{"id":"2","status":503}]}`,
		},
		{
			name:    "a POST's 504 is final, and two final answers: the first",
			rounds:  []string{`{"responses":[{"id":"1","status":504},{"id":"1","status":202},{"id":"2","status":200}]}`},
			pending: []string{},
			merged:  `{"responses":[{"id":"1","status":504},{"id":"2","status":200}]}`,
		},
		{
			name: "strays: kept once, from the first round",
			rounds: []string{
				`{"responses":[{"id":"9","status":400},{"id":"9","status":200},{"id":"1","status":202},{"id":"2","status":429}]}`,
				`{"responses":[{"id":"2","status":200},{"id":"8","status":400}]}`,
			},
			pending: []string{},
			merged:  `{"responses":[{"id":"1","status":202},{"id":"2","status":200},{"id":"9","status":400}]}`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCompleter([]byte(request))
			require.NoError(t, err)
			for _, r := range tt.rounds {
				_, err := c.Absorb([]byte(r))
				require.NoError(t, err)
			}
			pending := []string{}
			for _, it := range c.Pending() {
				pending = append(pending, it.ID)
			}
			assert.Equal(t, tt.pending, pending)
			assert.JSONEq(t, tt.merged, string(c.Merged()))
		})
	}
}
