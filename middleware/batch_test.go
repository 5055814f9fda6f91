package middleware_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// batchFixture is a batch followed through its rounds, from testdata/batch.
type batchFixture struct {
	Request json.RawMessage `json:"request"`
	Rounds  []struct {
		Response json.RawMessage `json:"response"`
		Resend   []batchRef      `json:"resend"`
	} `json:"rounds"`
	Merged []batchRef `json:"merged"`
}

// batchRef names an item of a batch request or response.
type batchRef struct {
	ID        string   `json:"id"`
	Status    int      `json:"status,omitempty"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

func loadBatchFixture(t *testing.T, name string) batchFixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "batch", name+".json"))
	require.NoError(t, err)
	var f batchFixture
	require.NoError(t, json.Unmarshal(raw, &f))
	return f
}

// batchReplies answers each round of f in turn.
func batchReplies(f batchFixture) []reply {
	out := make([]reply, len(f.Rounds))
	for i, r := range f.Rounds {
		out[i] = reply{status: http.StatusOK, header: map[string]string{"Content-Type": "application/json"}, body: string(r.Response)}
	}
	return out
}

// kiotaBatch returns a $batch request to srv with body as Kiota's request
// adapter builds it: a seekable body without GetBody.
func kiotaBatch(t *testing.T, url string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1.0/$batch", nil)
	require.NoError(t, err)
	req.Body = nethttplibrary.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

func requestIDs(t *testing.T, body string) []batchRef {
	t.Helper()
	var doc struct {
		Requests []batchRef `json:"requests"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	return doc.Requests
}

func responseRefs(t *testing.T, body string) []batchRef {
	t.Helper()
	var doc struct {
		Responses []batchRef `json:"responses"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	return doc.Responses
}

func TestBatchCompletesFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		waits   []time.Duration // the longest Retry-After of the resent items, or the policy's 1 s
	}{
		{"partial", clocktest.Seconds(10)},
		{"depends", clocktest.Seconds(3, 2)},
		{"gateway", clocktest.Seconds(1)},
		{"outoforder", clocktest.Seconds(1)},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			f := loadBatchFixture(t, tt.fixture)
			srv := newScripted(t, batchReplies(f)...)
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(5, time.Second)})
			res, waits := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, f.Request))
			require.NoError(t, res.err)
			assert.Equal(t, tt.waits, waits)

			got := srv.attempts()
			require.Len(t, got, len(f.Rounds))
			assert.JSONEq(t, string(f.Request), got[0].body, "the first attempt is the caller's batch")
			assert.Empty(t, got[0].header.Values("Retry-Attempt"))
			for i := 1; i < len(got); i++ {
				assert.Equal(t, f.Rounds[i-1].Resend, requestIDs(t, got[i].body), "resend %d", i)
				assert.Equal(t, strconv.Itoa(i), got[i].header.Get("Retry-Attempt"))
				assert.Equal(t, int64(len(got[i].body)), got[i].length, "resend %d Content-Length", i)
			}

			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, f.Merged, responseRefs(t, res.body))
			assert.Equal(t, strconv.Itoa(len(res.body)), res.resp.Header.Get("Content-Length"))
			assert.Equal(t, "application/json", res.resp.Header.Get("Content-Type"))
			assert.Empty(t, res.resp.Header.Get("Retry-After-Ms"))
		})
	}
}

// TestBatchKeepsAnswers checks that every item's answer reaches the caller
// byte for byte, whichever round it came in.
func TestBatchKeepsAnswers(t *testing.T) {
	f := loadBatchFixture(t, "partial")
	srv := newScripted(t, batchReplies(f)...)
	h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(5, time.Second)})
	res, _ := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, f.Request))
	require.NoError(t, res.err)
	var doc struct {
		Responses []json.RawMessage `json:"responses"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.body), &doc))
	var first, second struct {
		Responses []json.RawMessage `json:"responses"`
	}
	require.NoError(t, json.Unmarshal(f.Rounds[0].Response, &first))
	require.NoError(t, json.Unmarshal(f.Rounds[1].Response, &second))
	want := []json.RawMessage{first.Responses[0], second.Responses[0], first.Responses[2], second.Responses[1], second.Responses[2]}
	require.Len(t, doc.Responses, len(want))
	for i := range want {
		assert.JSONEq(t, string(want[i]), string(doc.Responses[i]), "item %d", i+1)
	}
}

const (
	twoItems      = `{"requests":[{"id":"1","method":"GET","url":"/me"},{"id":"2","method":"GET","url":"/me/events"}]}`
	bothThrottled = `{"responses":[{"id":"1","status":429,"headers":{"Retry-After":"2"}},{"id":"2","status":429,"headers":{"Retry-After":"4"}}]}`
	oneThrottled  = `{"responses":[{"id":"1","status":200,"body":{}},{"id":"2","status":429,"headers":{"Retry-After":"4"}}]}`
	secondOK      = `{"responses":[{"id":"2","status":200,"body":{}}]}`
	secondStill   = `{"responses":[{"id":"2","status":429,"headers":{"Retry-After":"4"}}]}`
)

func batchOK(body string) reply {
	return reply{status: http.StatusOK, header: map[string]string{"Content-Type": "application/json"}, body: body}
}

// TestBatchLimits checks that whatever stops the retries, the caller gets
// one 200 batch holding every item's last answer, the still-failed ones
// included.
func TestBatchLimits(t *testing.T) {
	tests := []struct {
		name     string
		opts     options.RetryHandlerOptions
		replies  []reply
		attempts int
		want     []batchRef
	}{
		{
			name:     "max retries mid-way",
			opts:     options.RetryHandlerOptions{MaxRetries: 1},
			replies:  []reply{batchOK(bothThrottled), batchOK(`{"responses":[{"id":"1","status":200},{"id":"2","status":429,"headers":{"Retry-After":"4"}}]}`)},
			attempts: 2,
			want:     []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 429}},
		},
		{
			name:     "max elapsed",
			opts:     options.RetryHandlerOptions{MaxElapsed: 3 * time.Second},
			replies:  []reply{batchOK(oneThrottled)},
			attempts: 1,
			want:     []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 429}},
		},
		{
			name:     "retries time limit",
			opts:     options.RetryHandlerOptions{RetriesTimeLimit: 6 * time.Second},
			replies:  []reply{batchOK(oneThrottled), batchOK(secondStill)},
			attempts: 2,
			want:     []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 429}},
		},
		{
			name:     "should retry vetoes",
			opts:     options.RetryHandlerOptions{ShouldRetry: func(options.Attempt) bool { return false }},
			replies:  []reply{batchOK(oneThrottled)},
			attempts: 1,
			want:     []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 429}},
		},
		{
			name:     "resend refused as a whole",
			opts:     options.RetryHandlerOptions{},
			replies:  []reply{batchOK(oneThrottled), {status: http.StatusBadRequest, body: `{"error":{"code":"BadRequest"}}`}},
			attempts: 2,
			want:     []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 429}},
		},
		{
			name:     "resend throttled as a whole, then answered",
			opts:     options.RetryHandlerOptions{},
			replies:  []reply{batchOK(oneThrottled), throttled("1"), batchOK(secondOK)},
			attempts: 3,
			want:     []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 200}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.replies...)
			h, clk := newHandler(t, tt.opts)
			res, _ := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, []byte(twoItems)))
			require.NoError(t, res.err)
			assert.Len(t, srv.attempts(), tt.attempts)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, tt.want, responseRefs(t, res.body))
			assert.Equal(t, strconv.Itoa(len(res.body)), res.resp.Header.Get("Content-Length"))
		})
	}
}

// TestBatchWholeThrottleResendsSameItems checks that a resend throttled as
// a whole is repeated with the same items, and that the resends count as
// retries of one request.
func TestBatchWholeThrottleResendsSameItems(t *testing.T) {
	srv := newScripted(t, batchOK(oneThrottled), throttled("1"), batchOK(secondOK))
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	res, waits := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, []byte(twoItems)))
	require.NoError(t, res.err)
	assert.Equal(t, clocktest.Seconds(4, 1), waits)
	got := srv.attempts()
	require.Len(t, got, 3)
	assert.Equal(t, got[1].body, got[2].body)
	assert.Equal(t, []batchRef{{ID: "2"}}, requestIDs(t, got[2].body))
	assert.Equal(t, "2", got[2].header.Get("Retry-Attempt"))
	assert.Equal(t, middlewareStats{Requests: 1, Attempts: 3, Retries: 2}, middlewareStats(h.Stats()))
}

// TestBatchPassesThrough checks the batches the handler leaves alone: they
// reach the caller byte for byte as the server sent them, after one attempt.
func TestBatchPassesThrough(t *testing.T) {
	html := reply{status: http.StatusOK, header: map[string]string{"Content-Type": "text/html"}, body: "<html>maintenance</html>"}
	tests := []struct {
		name    string
		opts    options.RetryHandlerOptions
		perReq  *options.RetryHandlerOptions
		request string
		reply   reply
	}{
		{"disabled", options.RetryHandlerOptions{Batch: options.BatchOptions{Disabled: true}}, nil, twoItems, batchOK(oneThrottled)},
		{"disabled per request", options.RetryHandlerOptions{}, &options.RetryHandlerOptions{Batch: options.BatchOptions{Disabled: true}}, twoItems, batchOK(oneThrottled)},
		{"request not batch JSON", options.RetryHandlerOptions{}, nil, `{"requests":[{"id":"1"`, batchOK(oneThrottled)},
		{"response not batch JSON", options.RetryHandlerOptions{}, nil, twoItems, html},
		{"nothing to resend", options.RetryHandlerOptions{}, nil, twoItems, batchOK(`{"responses":[{"id":"2","status":404},{"id":"1","status":200}]}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.reply)
			h, clk := newHandler(t, tt.opts)
			req := kiotaBatch(t, srv.URL, []byte(tt.request))
			if tt.perReq != nil {
				req = req.WithContext(context.WithValue(req.Context(), options.Key(), tt.perReq))
			}
			res, waits := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Empty(t, waits)
			got := srv.attempts()
			require.Len(t, got, 1)
			assert.Equal(t, tt.request, got[0].body)
			assert.Equal(t, tt.reply.body, res.body)
			assert.Equal(t, tt.reply.header["Content-Type"], res.resp.Header.Get("Content-Type"))
		})
	}
}

// TestBatchOversizedResponsePassesThrough checks that a response past the
// bound reaches the caller whole, and that its throttled items, unread,
// are not resent.
func TestBatchOversizedResponsePassesThrough(t *testing.T) {
	pad := bytes.Repeat([]byte("x"), 4<<20)
	big := `{"responses":[{"id":"1","status":200,"body":"` + string(pad) + `"},{"id":"2","status":429}]}`
	srv := newScripted(t, batchOK(big))
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	res, _ := do(clk, newClient(t, h), kiotaBatch(t, srv.URL, []byte(twoItems)))
	require.NoError(t, res.err)
	assert.Len(t, srv.attempts(), 1)
	assert.Equal(t, len(big), len(res.body))
	assert.Equal(t, big, res.body)
}

// TestBatchGetBody checks a batch built with http.NewRequest, whose body
// is replayed through GetBody.
func TestBatchGetBody(t *testing.T) {
	srv := newScripted(t, batchOK(oneThrottled), batchOK(secondOK))
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/beta/$batch", bytes.NewReader([]byte(twoItems)))
	require.NoError(t, err)
	res, _ := do(clk, newClient(t, h), req)
	require.NoError(t, res.err)
	got := srv.attempts()
	require.Len(t, got, 2)
	assert.Equal(t, twoItems, got[0].body)
	assert.Equal(t, []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 200}}, responseRefs(t, res.body))
}

// TestBatchGzip checks that a batch the server gzipped reaches a caller
// that asked for gzip in gzip, with the merged body and its length.
func TestBatchGzip(t *testing.T) {
	gz := func(s string) string {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return buf.String()
	}
	hdr := map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}
	srv := newScripted(t, reply{status: 200, header: hdr, body: gz(oneThrottled)}, reply{status: 200, header: hdr, body: gz(secondOK)})
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	req := kiotaBatch(t, srv.URL, []byte(twoItems))
	req.Header.Set("Accept-Encoding", "gzip") // the caller decodes: the transport leaves the body as sent
	res, _ := do(clk, newClient(t, h), req)
	require.NoError(t, res.err)
	assert.Len(t, srv.attempts(), 2)
	assert.Equal(t, "gzip", res.resp.Header.Get("Content-Encoding"))
	assert.Equal(t, strconv.Itoa(len(res.body)), res.resp.Header.Get("Content-Length"))
	zr, err := gzip.NewReader(bytes.NewReader([]byte(res.body)))
	require.NoError(t, err)
	plain, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.Equal(t, []batchRef{{ID: "1", Status: 200}, {ID: "2", Status: 200}}, responseRefs(t, string(plain)))
}

// TestBatchCanceledWhileWaiting checks that the wait for a resend ends with
// the request's context, as an error wrapping the context's.
func TestBatchCanceledWhileWaiting(t *testing.T) {
	srv := newScripted(t, batchOK(oneThrottled))
	h, clk := newHandler(t, options.RetryHandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	req := kiotaBatch(t, srv.URL, []byte(twoItems)).WithContext(ctx)
	done := make(chan error, 1)
	go func() {
		resp, err := newClient(t, h).Do(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	clk.WaitForTimers(1)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.Len(t, srv.attempts(), 1)
}

type middlewareStats struct{ Requests, Attempts, Retries int64 }

// TestBatchOversizedRequestPassesThrough checks that a batch request past
// the bound is sent whole and its answer returned as it came, whether its
// length is declared or, as Kiota sends it, not.
func TestBatchOversizedRequestPassesThrough(t *testing.T) {
	big := []byte(`{"requests":[{"id":"1","method":"POST","url":"/me/drive/items","body":"` + strings.Repeat("x", 4<<20) + `"},{"id":"2","method":"GET","url":"/me"}]}`)
	for _, declared := range []bool{true, false} {
		t.Run("length declared "+strconv.FormatBool(declared), func(t *testing.T) {
			srv := newScripted(t, batchOK(oneThrottled))
			h, clk := newHandler(t, options.RetryHandlerOptions{})
			req := kiotaBatch(t, srv.URL, big)
			if !declared {
				req.ContentLength = 0
			}
			res, waits := do(clk, newClient(t, h), req)
			require.NoError(t, res.err)
			assert.Empty(t, waits)
			got := srv.attempts()
			require.Len(t, got, 1)
			assert.Equal(t, string(big), got[0].body)
			assert.Equal(t, oneThrottled, res.body)
		})
	}
}

// TestBatchItemThrottleHoldsRequests checks that the queue learns from a
// batch's items: a single request to the URL of an item throttled inside a
// 200 batch is held for the item's own Retry-After, in each form the
// handler reads, or, when a 429 names none, paced by the item's budget,
// not held for the policy's delay; items that were not throttled hold
// nothing. The batch itself is not retried,
// so that the hold is still on when the single request comes.
func TestBatchItemThrottleHoldsRequests(t *testing.T) {
	const item = "/users/u1/messages/1"
	retryAt := epoch.Add(9 * time.Second).Format(http.TimeFormat)
	tests := []struct {
		name    string
		status  int
		headers string // the item's answer's, as JSON
		single  string // the path of the single request, below /v1.0
		noQueue bool   // the batch opts out of the queue
		want    []time.Duration
	}{
		{"Retry-After in seconds", 429, `{"Retry-After":"7"}`, item, false, clocktest.Seconds(7)},
		{"Retry-After as a date", 429, `{"Retry-After":"` + retryAt + `"}`, item, false, clocktest.Seconds(9)},
		{"Retry-After-Ms", 429, `{"Retry-After-Ms":"1500"}`, item, false, clocktest.Seconds(1.5)},
		{"x-ms-retry-after-ms", 429, `{"x-ms-retry-after-ms":"2500"}`, item, false, clocktest.Seconds(2.5)},
		{"a 429 naming none: paced, not held", 429, `{}`, item, false, nil},
		{"a 503 naming one", 503, `{"Retry-After":"4"}`, item, false, clocktest.Seconds(4)},
		{"a 503 naming none holds nothing", 503, `{}`, item, false, nil},
		{"another scope is not held", 429, `{"Retry-After":"7"}`, "/me/events", false, nil},
		{"learned from a batch that opted out of the queue", 429, `{"Retry-After":"7"}`, item, true, clocktest.Seconds(7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer := `{"responses":[{"id":"1","status":` + strconv.Itoa(tt.status) + `,"headers":` + tt.headers + `},{"id":"2","status":200}]}`
			srv := newScripted(t, batchOK(answer), reply{status: http.StatusOK, body: "{}"})
			h, clk := newHandler(t, options.RetryHandlerOptions{Policy: fixedPolicy(5, 2*time.Second)})
			client := newClient(t, h)
			body := `{"requests":[{"id":"1","method":"GET","url":"` + item + `"},{"id":"2","method":"GET","url":"/me/events"}]}`
			req := kiotaBatch(t, srv.URL, []byte(body))
			perReq := &options.RetryHandlerOptions{MaxRetries: -1, Policy: fixedPolicy(5, 2*time.Second)}
			perReq.Queue.Disabled = tt.noQueue
			req = req.WithContext(context.WithValue(req.Context(), options.Key(), perReq))
			res, waits := do(clk, client, req)
			require.NoError(t, res.err)
			require.Empty(t, waits, "the batch is not retried")
			assert.Equal(t, answer, res.body)

			single, err := http.NewRequest(http.MethodGet, srv.URL+"/v1.0"+tt.single, nil)
			require.NoError(t, err)
			res, waits = do(clk, client, single)
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			if tt.want == nil && tt.status == http.StatusTooManyRequests && tt.single == item {
				// Its first slot in the item's pace, well before the policy's 2 s.
				require.Len(t, waits, 1, "paced")
				assert.Less(t, waits[0], 500*time.Millisecond, "paced, not held for the policy's delay")
			} else {
				assert.Equal(t, tt.want, waits, "the single request's hold")
			}
			assert.Len(t, srv.attempts(), 2)
		})
	}
}
