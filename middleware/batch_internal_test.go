package middleware

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/kiota-resilience/kiota-resilience-go/internal/batch"
	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// batchScript is a Pipeline that answers each attempt with the next of its
// batch response bodies, and records the bodies it was sent.
type batchScript struct {
	mu     sync.Mutex
	bodies []string
	sent   []string
}

func (s *batchScript) Next(req *http.Request, _ int) (*http.Response, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, string(b))
	body := s.bodies[min(len(s.sent), len(s.bodies))-1]
	return &http.Response{
		StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}, nil
}

const chain = `{"requests":[
	{"id":"1","method":"POST","url":"/me/mailFolders","body":{}},
	{"id":"2","method":"GET","url":"/me/mailFolders/x/messages","dependsOn":["1"]},
	{"id":"3","method":"GET","url":"me/events"},
	{"id":"4","method":"GET","url":"/me/contacts"}]}`

func TestTraceBatchItemsResent(t *testing.T) {
	tel := newTelemetry(t)
	h := tel.handler(t, options.RetryHandlerOptions{})
	p := &batchScript{bodies: []string{
		`{"responses":[{"id":"1","status":429,"headers":{"Retry-After":"2"}},{"id":"2","status":424},{"id":"3","status":503},{"id":"4","status":200}]}`,
		`{"responses":[{"id":"1","status":201},{"id":"2","status":200},{"id":"3","status":503}]}`,
		`{"responses":[{"id":"3","status":200}]}`,
	}}
	req := request(t, context.Background(), http.MethodPost, "https://graph.microsoft.com/v1.0/$batch", strings.NewReader(chain), true, false)
	res := tel.intercept(t, h, p, req, 2*time.Second, 2*time.Second)
	require.NoError(t, res.err)
	require.Len(t, p.sent, 3)

	spans := tel.ended(t)
	ev := events(spans[observability.SpanIntercept])
	resent := func(status, items, retry int) event {
		return event{observability.EventBatchItemsResent, map[string]any{
			keyStatusCode: int64(status), string(observability.BatchItemsKey): int64(items), keyResendCount: int64(retry)}}
	}
	assert.Equal(t, []event{resent(429, 1, 1), resent(424, 1, 1), resent(503, 1, 1), resent(503, 1, 2)}, ev)

	m := tel.collect(t)
	got := counts(t, m[observability.MetricBatchItemsResent], observability.UnitBatchItemsResent, true)
	assert.Equal(t, map[string]int64{
		enc(attribute.Int(keyStatusCode, 429)): 1,
		enc(attribute.Int(keyStatusCode, 424)): 1,
		enc(attribute.Int(keyStatusCode, 503)): 2,
	}, got)
}

// TestBatchItemAnswered checks the seam through which the queue can learn
// from items: every answer, with the item's URL resolved against the
// batch's service root.
func TestBatchItemAnswered(t *testing.T) {
	h, err := NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	p := &batchScript{bodies: []string{
		`{"responses":[{"id":"4","status":200},{"id":"3","status":429,"headers":{"Retry-After":"7"}},{"id":"1","status":201},{"id":"2","status":200}]}`,
	}}
	req, err := http.NewRequest(http.MethodPost, "https://graph.microsoft.com/beta/$batch", bytes.NewReader([]byte(chain)))
	require.NoError(t, err)
	r := run{h: h, opts: &h.opts, pipeline: p, req: req, obs: observer{inst: h.inst, clock: h.clock}}
	r.body = newReplayer(req)
	b := r.completeBatch()
	require.NotNil(t, b)
	r.batch = b
	type seen struct {
		url    string
		status int
		after  string
	}
	b.attempt = 1
	resp, err := r.pipeline.Next(req, 0)
	require.NoError(t, err)
	discard(resp)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the stand-in names the throttled item's status")
	assert.True(t, b.answeredByItems())
	ans := r.newAnswer(1, req, resp, nil)
	a := ans.attempt()
	assert.Equal(t, 7*time.Second, a.RetryAfter, "the attempt names the item's Retry-After")
	assert.True(t, a.HasRetryAfter)
	assert.Empty(t, resp.Header.Get(headerRetryAfterMs), "the stand-in's header is not read back")
	var got []seen
	for _, a := range b.answers {
		got = append(got, seen{a.url.String(), a.Status, a.Header.Get("Retry-After")})
	}
	assert.Equal(t, []seen{
		{"https://graph.microsoft.com/beta/me/contacts", 200, ""},
		{"https://graph.microsoft.com/beta/me/events", 429, "7"},
		{"https://graph.microsoft.com/beta/me/mailFolders", 201, ""},
		{"https://graph.microsoft.com/beta/me/mailFolders/x/messages", 200, ""},
	}, got)
}

func TestMoreUrgent(t *testing.T) {
	for _, tt := range []struct{ a, b, want int }{
		{0, 424, 424}, {424, 504, 504}, {504, 503, 503}, {503, 429, 429}, {429, 503, 429}, {429, 424, 429},
	} {
		assert.Equal(t, tt.want, moreUrgent(tt.a, tt.b), "%d, %d", tt.a, tt.b)
	}
}

// pipelineFunc adapts a function to nethttplibrary.Pipeline.
type pipelineFunc func(req *http.Request, index int) (*http.Response, error)

func (f pipelineFunc) Next(req *http.Request, index int) (*http.Response, error) {
	return f(req, index)
}

type brokenBody struct{}

func (brokenBody) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
func (brokenBody) Close() error             { return nil }

// TestBatchResendBodyBroken checks that a resend whose answer breaks off
// leaves the caller the batch merged so far, nothing lost.
func TestBatchResendBodyBroken(t *testing.T) {
	clk := clocktest.New(t0)
	h, err := NewRetryHandler(options.RetryHandlerOptions{Clock: clk})
	require.NoError(t, err)
	calls := 0
	p := pipelineFunc(func(req *http.Request, _ int) (*http.Response, error) {
		calls++
		if calls == 1 {
			body := `{"responses":[{"id":"1","status":200,"body":{"a":1}},{"id":"2","status":429,"headers":{"Retry-After":"1"}}]}`
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: brokenBody{}, Request: req}, nil
	})
	req, err := http.NewRequest(http.MethodPost, "https://graph.microsoft.com/v1.0/$batch", strings.NewReader(
		`{"requests":[{"id":"1","method":"GET","url":"/me"},{"id":"2","method":"GET","url":"/me/events"}]}`))
	require.NoError(t, err)
	type out struct {
		body string
		err  error
	}
	res, _ := clocktest.Drive(clk, func() out {
		resp, err := h.Intercept(p, 0, req)
		if err != nil {
			return out{err: err}
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return out{string(b), err}
	})
	require.NoError(t, res.err)
	assert.Equal(t, 2, calls)
	assert.JSONEq(t, `{"responses":[{"id":"1","status":200,"body":{"a":1}},{"id":"2","status":429,"headers":{"Retry-After":"1"}}]}`, res.body)
}

// TestLearnItem checks which item answers hold single requests, and on
// which host: the one the batch named, its Host header included, unless
// the item's URL names another.
func TestLearnItem(t *testing.T) {
	const batchURL = "https://10.0.0.1/v1.0/$batch"
	tests := []struct {
		name      string
		batchHost string // the batch's Host header
		itemURL   string // as written in the batch
		status    int
		header    http.Header
		single    string // the single request's URL
		host      string // its Host header
		held      bool
	}{
		{"a 429", "", "/me/events", 429, http.Header{"Retry-After": {"5"}}, "https://10.0.0.1/v1.0/me/events", "", true},
		{"a 200", "", "/me/events", 200, http.Header{}, "https://10.0.0.1/v1.0/me/events", "", false},
		{"a 424 was never run", "", "/me/events", 424, http.Header{"Retry-After": {"5"}}, "https://10.0.0.1/v1.0/me/events", "", false},
		{"on the batch's Host", "graph.example", "/me/events", 429, http.Header{"Retry-After": {"5"}}, "https://10.0.0.1/v1.0/me/events", "graph.example", true},
		{"not on its address", "graph.example", "/me/events", 429, http.Header{"Retry-After": {"5"}}, "https://10.0.0.1/v1.0/me/events", "", false},
		{"an absolute URL's own host", "graph.example", "https://other.example/v1.0/me", 429, http.Header{"Retry-After": {"5"}}, "https://other.example/v1.0/me", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			h, err := NewRetryHandler(options.RetryHandlerOptions{Clock: clk})
			require.NoError(t, err)
			breq, err := http.NewRequest(http.MethodPost, batchURL, nil)
			require.NoError(t, err)
			breq.Host = tt.batchHost
			b := &batchRun{req: breq, keep: true}
			u, err := batch.Resolve(breq.URL, tt.itemURL)
			require.NoError(t, err)
			b.answers = []itemAnswer{{
				Item: batch.Item{ID: "1", Method: http.MethodGet, URL: tt.itemURL, Status: tt.status, Header: tt.header},
				url:  u, sent: t0, back: t0,
			}}
			r := &run{h: h, opts: &h.opts, policy: h.policy, batch: b, start: t0}
			ans := r.newAnswer(1, breq, nil, nil)
			b.learn(h.queue, &ans)

			single, err := http.NewRequest(http.MethodGet, tt.single, nil)
			require.NoError(t, err)
			single.Host = tt.host
			_, err = h.queue.Admit(context.Background(), single, t0, t0.Add(time.Second), nil)
			if tt.held {
				assert.ErrorIs(t, err, throttle.ErrHoldTooLong)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
