package middleware

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/kiota-resilience/kiota-resilience-go/internal/batch"
	"github.com/kiota-resilience/kiota-resilience-go/internal/effective"
	"github.com/kiota-resilience/kiota-resilience-go/internal/metrics"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// batchRun completes one JSON batch request. It stands between the retry
// loop and the rest of the pipeline, so that the loop's limits, policy and
// ShouldRetry judge the batch as a whole while the batch is resent item by
// item:
//
//   - a 200 batch response with items worth resending reaches the loop as
//     a failed attempt, a stand-in response whose status is that of the
//     most urgent of those items (429, then 503, then 504) and whose body
//     is the batch merged so far; the loop's options.Attempt names the
//     longest Retry-After among them as its RetryAfter (none when they name
//     none, so that the policy's delay applies);
//   - each retry the loop sends carries, instead of the caller's body, a
//     batch of those items and the items depending on them;
//   - when the loop returns, finish hands the caller one 200 response with
//     every item's last answer, whatever stopped the loop.
//
// A body that is not batch JSON, or larger than batch.MaxBodySize, turns
// it into a plain pass-through: the server's bytes reach the caller as
// they came.
type batchRun struct {
	next      nethttplibrary.Pipeline
	completer *batch.Completer
	batchURL  *url.URL
	ctx       context.Context // the caller's request's
	clock     options.Clock
	inst      *metrics.Instruments
	span      trace.Span // the handler's span; nil when tracing is off

	resend []byte       // the body of the next resend
	resent []batch.Item // the items it holds, as last answered
	// answered is the latest 200 batch response, its body consumed: the
	// merged response takes its headers and encoding.
	answered *http.Response
	final    *http.Response // the response Next returned as the caller's answer
	standIn  bool           // the latest attempt came back as a stand-in
	stopped  bool           // completion stopped: attempts pass through untouched

	// attempt is the number of the attempt being sent, 1 for the first,
	// as the retry loop gives it.
	attempt int
	// wait is the longest wait the items of the latest stand-in name;
	// named says whether any names one.
	wait  time.Duration
	named bool

	// answers are the item answers of the latest attempt, kept for learn
	// when keep is set (the handler has a queue), so that throttles of
	// single items are learned from.
	answers []itemAnswer
	keep    bool
	req     *http.Request // the caller's
}

// itemAnswer is the server's answer to one item of a batch attempt.
type itemAnswer struct {
	batch.Item
	url  *url.URL  // the item's, resolved against the batch's service root
	sent time.Time // when the batch attempt was sent
	back time.Time // when its answer came
}

// backAt returns when the item's answer came, for the queue.
func (a *itemAnswer) backAt() time.Time { return a.back }

// completeBatch returns the batchRun of a request that is a JSON batch
// to complete, after routing the run's attempts through it; nil for any
// other request, which the handler treats as usual.
func (r *run) completeBatch() *batchRun {
	if r.opts.Batch.Disabled || !batch.Is(r.req.Method, r.req.URL) || r.req.Header.Get("Content-Encoding") != "" {
		return nil
	}
	body, ok := r.body.peek(batch.MaxBodySize, r.req.ContentLength)
	if !ok {
		return nil
	}
	c, err := batch.NewCompleter(body)
	if err != nil {
		return nil
	}
	opts := r.opts // not r, which would then escape for every request
	c.Retryable = func(status int) bool { return effective.Retryable(opts, status) }
	b := &batchRun{
		next: r.pipeline, completer: c, batchURL: r.req.URL, ctx: r.req.Context(),
		clock: r.h.clock, inst: r.obs.inst, span: r.obs.span, req: r.req,
		// Even when this request opted out of the queue, for the others'
		// sake, as observe does.
		keep: r.h.queue != nil,
	}
	r.pipeline = b
	return b
}

// Next implements nethttplibrary.Pipeline for the retry loop's attempts.
func (b *batchRun) Next(req *http.Request, index int) (*http.Response, error) {
	if b.stopped {
		return b.next.Next(req, index)
	}
	b.standIn, b.answers = false, b.answers[:0]
	if b.resent != nil {
		b.prepareResend(req)
	}
	var sent time.Time
	if b.keep {
		sent = b.clock.Now()
	}
	resp, err := b.next.Next(req, index)
	if err != nil || resp.StatusCode != http.StatusOK {
		// The loop judges a failure of the batch as a whole; a resend is
		// repeated as it was.
		return resp, err
	}
	raw, whole, err := readBounded(resp, batch.MaxBodySize)
	if err != nil {
		// The caller meets the error reading the body; the batch merged
		// so far still holds every earlier answer.
		return resp, nil
	}
	if !whole {
		return b.stop(resp), nil
	}
	encoding := resp.Header.Get("Content-Encoding")
	decoded, err := batch.Decode(raw, encoding)
	if err != nil {
		return b.stop(resp), nil
	}
	items, err := b.completer.Absorb(decoded)
	if err != nil {
		return b.stop(resp), nil
	}
	first := b.answered == nil
	b.answered = resp
	if b.keep {
		back := b.clock.Now()
		for _, it := range items {
			if u, err := batch.Resolve(b.batchURL, it.URL); err == nil {
				b.answers = append(b.answers, itemAnswer{Item: it, url: u, sent: sent, back: back})
			}
		}
	}
	pending := b.completer.Pending()
	if len(pending) == 0 {
		b.resent = nil
		if first {
			b.final = resp // as the server sent it
			return resp, nil
		}
		b.final = b.merged()
		return b.final, nil
	}
	if b.resend, err = b.completer.ResendBody(); err != nil {
		return b.stop(b.merged()), nil
	}
	b.resent = pending
	b.standIn = true
	return b.standInFor(pending), nil
}

// learn tells q what the server answered to each item of the batch
// attempt whose answer the loop judges as ans, as the loop does with a whole
// request's answer: a throttled item holds single requests to its URL for
// its own Retry-After, or, for a 429 that names none, for the delay the
// policy gives the loop's next retry (the one answer it gives about it),
// and successful items pace their scope. An item answered 424 Failed
// Dependency was never run: it says nothing. learn does nothing for a
// request that is no batch.
func (b *batchRun) learn(q *throttle.Queue, ans *answer) {
	if b == nil {
		return
	}
	for i := range b.answers {
		a := &b.answers[i]
		if a.Status == http.StatusFailedDependency {
			continue // the item was never run
		}
		pass := q.Bypass(a.sent)
		namedWait := func() (time.Duration, bool) { return RetryAfter(a.Header, a.back) }
		outcome, hold := classify(q, b.req, &pass, a.Status, namedWait, a.backAt, ans.policyHold)
		if outcome != throttle.Failed {
			q.ReportItem(a.request(b.req), pass, outcome, hold, a.Header, a.backAt)
		}
	}
	b.answers = b.answers[:0]
}

// request returns the item as a request of its own, sent to the host the
// batch named (its Host header when set) unless its URL names another.
func (a *itemAnswer) request(batchReq *http.Request) *http.Request {
	req := &http.Request{Method: a.Method, URL: a.url}
	if a.url.Host == batchReq.URL.Host {
		req.Host = batchReq.Host
	}
	return req
}

// prepareResend replaces the caller's body on a retry's request with the
// batch of the items to resend, and counts them.
func (b *batchRun) prepareResend(req *http.Request) {
	closeRequestBody(req)
	body := b.resend
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	req.Header.Del("Content-Length")
	b.reportResent(req.Context(), b.attempt-1)
}

// stop ends completion and returns resp, its body whole as the server
// sent it. After a first round, the answers merged so far are then lost to
// the caller: only a server whose later answer is no batch JSON, or past
// the bound, gets there, and its answer is what the caller must see.
func (b *batchRun) stop(resp *http.Response) *http.Response {
	b.stopped, b.resent = true, nil
	b.final = resp
	return resp
}

// standInFor builds the failed attempt the retry loop sees while items
// remain to be resent, and keeps the longest wait those items name for
// the loop's options.Attempt.
func (b *batchRun) standInFor(pending []batch.Item) *http.Response {
	now := b.clock.Now()
	status := 0
	b.wait, b.named = 0, false
	for _, it := range pending {
		status = moreUrgent(status, it.Status)
		if d, ok := RetryAfter(it.Header, now); ok {
			b.wait, b.named = max(b.wait, d), true
		}
	}
	resp := b.merged()
	resp.StatusCode = status
	resp.Status = strconv.Itoa(status) + " " + http.StatusText(status)
	// The batch's own waits are no item's: a policy reading the stand-in's
	// header must not take them for the items'.
	resp.Header.Del(headerRetryAfter)
	resp.Header.Del(headerXMsRetryAfterMs)
	resp.Header.Del(headerRetryAfterMs)
	return resp
}

// moreUrgent returns whichever of two item statuses the stand-in names:
// a throttle before an outage before a timeout, and any of them before a
// failed dependency.
func moreUrgent(a, b int) int {
	rank := func(s int) int {
		switch s {
		case http.StatusTooManyRequests:
			return 3
		case http.StatusServiceUnavailable:
			return 2
		case http.StatusGatewayTimeout:
			return 1
		}
		return 0
	}
	if a == 0 || rank(b) > rank(a) {
		return b
	}
	return a
}

// merged returns a 200 response with the batch merged so far, in the
// headers and encoding of the latest batch response.
func (b *batchRun) merged() *http.Response {
	src := b.answered
	resp := &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: src.Proto, ProtoMajor: src.ProtoMajor, ProtoMinor: src.ProtoMinor,
		Header: src.Header.Clone(), Request: src.Request, TLS: src.TLS, Uncompressed: src.Uncompressed,
	}
	body := b.completer.Merged()
	if coded, err := batch.Encode(body, src.Header.Get("Content-Encoding")); err == nil {
		body = coded
	} else {
		resp.Header.Del("Content-Encoding")
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp
}

// finish turns what the retry loop returned into the caller's answer: once
// a batch response was merged, the caller gets the batch with every item's
// last answer, the still-failed ones included, whatever stopped the loop.
// Only the end of the request's context still ends in an error.
func (b *batchRun) finish(resp *http.Response, err error) (*http.Response, error) {
	if b.stopped || b.answered == nil || resp != nil && resp == b.final {
		return resp, err
	}
	if err != nil && b.ctx.Err() != nil {
		return resp, err
	}
	discard(resp)
	return b.merged(), nil
}

// answeredByItems reports whether the latest attempt's response stands in
// for throttled items rather than being the server's answer to the batch.
func (b *batchRun) answeredByItems() bool {
	return b != nil && b.standIn
}

// readBounded reads resp's body up to limit bytes and replaces it with one
// that yields the same bytes, so that the caller can still get the body as
// it came. whole is false when the body is longer; the new body then
// yields what was read followed by the rest, as it does after a read
// error, which readBounded returns.
func readBounded(resp *http.Response, limit int64) (raw []byte, whole bool, err error) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil, true, nil
	}
	raw, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil || int64(len(raw)) > limit {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(raw), resp.Body), resp.Body}
		return nil, false, err
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return raw, true, nil
}

// peek returns the request body's bytes without taking it from the first
// attempt, when the body can be sent again and holds at most limit bytes;
// length is the request's ContentLength. A body that cannot be read again,
// or is longer, is left untouched beyond what was read and ok is false.
func (r *replayer) peek(limit, length int64) (body []byte, ok bool) {
	if length > limit {
		return nil, false
	}
	switch {
	case r.orig == nil || r.orig == http.NoBody:
		return nil, false
	case r.getBody != nil:
		rc, err := r.getBody()
		if err != nil {
			return nil, false
		}
		defer rc.Close()
		body, err = io.ReadAll(io.LimitReader(rc, limit+1))
		return body, err == nil && int64(len(body)) <= limit
	case r.seek != nil:
		s := r.seek
		s.mu.Lock()
		defer s.mu.Unlock()
		// The seeker has moved: every attempt, the first included, must
		// now rewind it.
		s.gen = max(s.gen, 1)
		body, err := io.ReadAll(io.LimitReader(s.rs, limit+1))
		return body, err == nil && int64(len(body)) <= limit
	}
	return nil, false
}

// reportResent reports the items a resend holds, one span event and one
// metric point per status that made items resent.
func (b *batchRun) reportResent(ctx context.Context, retry int) {
	counts := make(map[int]int, 4)
	order := make([]int, 0, 4)
	for _, it := range b.resent {
		if counts[it.Status] == 0 {
			order = append(order, it.Status)
		}
		counts[it.Status]++
	}
	for _, status := range order {
		b.inst.BatchItemsResent(ctx, status, counts[status])
		if b.span != nil && b.span.IsRecording() {
			b.span.AddEvent(observability.EventBatchItemsResent, trace.WithAttributes(
				observability.HTTPResponseStatusCodeKey.Int(status),
				observability.BatchItemsKey.Int(counts[status]),
				observability.HTTPRequestResendCountKey.Int(retry)))
		}
	}
}
