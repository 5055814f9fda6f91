package middleware_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/internal/durations"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// FuzzBatchItemHeaders completes a two-item batch whose second item is
// answered with a fuzzed status and headers, then 200, through
// RetryHandler.Intercept on a clock that jumps instead of waiting. Whatever
// the item's headers say, the caller gets one 200 batch holding each item
// once; a wait the item names (read as RetryAfter reads it, saturating) is
// never cut short, and one past MaxElapsed means no resend.
func FuzzBatchItemHeaders(f *testing.F) {
	for _, s := range []struct {
		status            int
		name1, v1, n2, v2 string
	}{
		{429, "Retry-After", "2", "", ""},
		{429, "Retry-After", "2.128", "Retry-After-Ms", "2500"},
		{429, "Retry-After", strings.Repeat("9", 20), "", ""},
		{429, "Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT", "", ""},
		{503, "Retry-After-Ms", "9223372036854775807", "", ""},
		{504, "x-ms-retry-after-ms", "18446744073709551616", "Retry-After", "1"},
		{429, "Retry-After", "1800", "", ""},
		{429, "Retry-After", "1800.000000001", "", ""},
		{429, "", "", "", ""},
		{503, "Retry-After", "-1", "Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"},
	} {
		f.Add(s.status, s.name1, s.v1, s.n2, s.v2)
	}
	f.Fuzz(func(t *testing.T, status int, name1, value1, name2, value2 string) {
		if status < 100 || status > 999 {
			status = []int{429, 503, 504, 200, 424}[uint(status)%5]
		}
		headers := map[string]string{}
		for _, kv := range [][2]string{{name1, value1}, {name2, value2}} {
			if kv[0] == "" {
				continue
			}
			if _, dup := headers[http.CanonicalHeaderKey(kv[0])]; dup {
				continue // one value per name, whatever JSON key order does
			}
			headers[http.CanonicalHeaderKey(kv[0])] = kv[1]
		}
		itemHeaders, err := json.Marshal(headers)
		require.NoError(t, err)
		first := `{"responses":[{"id":"1","status":200},{"id":"2","status":` + itoa(status) + `,"headers":` + string(itemHeaders) + `}]}`

		clock := clocktest.NewJumping(fuzzNow)
		h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Clock: clock})
		require.NoError(t, err)
		p := &batchPipeline{clock: clock, answers: []string{first, `{"responses":[{"id":"2","status":200}]}`}}
		req, err := http.NewRequest(http.MethodPost, "http://fuzz.test/v1.0/$batch", strings.NewReader(twoItems))
		require.NoError(t, err)
		resp, err := h.Intercept(p, 0, req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		var doc struct {
			Responses []struct {
				ID string `json:"id"`
			} `json:"responses"`
		}
		require.NoError(t, json.Unmarshal(body, &doc), "%s", body)
		ids := []string{}
		for _, r := range doc.Responses {
			ids = append(ids, r.ID)
		}
		require.Equal(t, []string{"1", "2"}, ids)

		header := http.Header{}
		for k, v := range headers {
			header.Set(k, v)
		}
		named, has := middleware.RetryAfter(header, fuzzNow)
		require.GreaterOrEqual(t, named, time.Duration(0))
		retryable := status == 429 || status == 503 || status == 504
		if !retryable {
			require.Len(t, p.sent, 1, "an item answered for good is not resent")
			return
		}
		if has && durations.Ceil(named, time.Millisecond) > int64(options.DefaultMaxElapsed/time.Millisecond) {
			require.Len(t, p.sent, 1, "a wait past MaxElapsed: no resend")
			return
		}
		require.Len(t, p.sent, 2)
		require.GreaterOrEqual(t, p.sent[1].Sub(p.sent[0]), named, "the resend waits the item's time")
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// batchPipeline answers each batch attempt with the next of answers, as
// 200 batch JSON, recording when each attempt was sent.
type batchPipeline struct {
	clock   *clocktest.Jumping
	answers []string
	sent    []time.Time
}

func (p *batchPipeline) Next(req *http.Request, _ int) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	p.sent = append(p.sent, p.clock.Now())
	answer := `{"responses":[]}`
	if len(p.answers) > 0 {
		answer, p.answers = p.answers[0], p.answers[1:]
	}
	return &http.Response{
		StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader([]byte(answer))), Request: req,
	}, nil
}
