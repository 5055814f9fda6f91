package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The refusals of real limiters: nginx's default 503 and bare 429s, and
// HAProxy counting what it refuses.
func TestRuleRefusal(t *testing.T) {
	limitReq, err := LimitReqLimiter(LimitReq{Rate: 1, Burst: 0})
	require.NoError(t, err)
	stick, err := StickTableLimiter(StickTable{Limit: 1, Period: time.Second})
	require.NoError(t, err)
	tests := []struct {
		name       string
		rule       Rule
		wantStatus int
		wantRA     string
	}{
		{"default: 429 with Retry-After", Rule{Limiter: limitReq}, http.StatusTooManyRequests, "1"},
		{"nginx's default: 503 without Retry-After", Rule{Limiter: limitReq, Status: http.StatusServiceUnavailable, OmitRetryAfter: true}, http.StatusServiceUnavailable, ""},
		{"bare 429", Rule{Limiter: stick, OmitRetryAfter: true}, http.StatusTooManyRequests, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.Name, tt.rule.Match = "r", everyRequest
			tr, err := NewTransport(Config{Rules: []Rule{tt.rule}}, 0)
			require.NoError(t, err)
			get := func() *http.Response {
				req, err := http.NewRequest(http.MethodGet, "http://example.test/v1.0/users/1", nil)
				require.NoError(t, err)
				req.Header.Set(HeaderRequestID, "one")
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				return resp
			}
			assert.Equal(t, http.StatusOK, get().StatusCode)
			resp := get()
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			assert.Equal(t, tt.wantRA, resp.Header.Get("Retry-After"))
			get()
			st := tr.Stats()
			assert.Equal(t, 2, st.Throttled)
			wantEarly := 0
			if tt.wantRA != "" {
				wantEarly = 1 // the third attempt came before the Retry-After
			}
			assert.Equal(t, wantEarly, st.Early)
		})
	}
	t.Run("a status that is no error is rejected", func(t *testing.T) {
		err := Config{Rules: []Rule{{Name: "r", Match: everyRequest, Limiter: limitReq, Status: 200}}}.Validate()
		assert.ErrorContains(t, err, "Status = 200")
	})
}

func everyRequest(*http.Request) (string, bool) { return "", true }

func TestCurrentDraftWhole(t *testing.T) {
	a, err := CurrentDraftWhole("default")
	require.NoError(t, err)
	h := http.Header{}
	a(h, Budget{Limit: 40, Remaining: 12.7, Reset: 70 * time.Millisecond, Window: 100 * time.Millisecond})
	assert.Equal(t, `"default";q=40;w=1`, h.Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=12;t=1`, h.Get("RateLimit"))
	_, err = CurrentDraftWhole("")
	assert.Error(t, err)
}
