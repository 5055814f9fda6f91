// Package batch completes JSON batch requests ({service root}/$batch, as
// Microsoft Graph serves them) whose items were throttled: it parses the
// batch and its answers, picks the items worth resending, builds the
// resend body and merges every item's final answer back under its original
// id, in the original order.
//
// It knows JSON and HTTP semantics only; when and how often to resend is
// the retry handler's business.
//
// An item's final answer stays final, whatever a server answers later. An
// answer counts only for an item of the round it answers: the whole batch
// in the first round, the items resent in each later one. A response that
// answers one id twice counts the answer that is not worth resending (one
// that is not a throttle) over one that is, and otherwise the first. An
// answer to an id the batch does not hold is kept once, from the first
// round, so that the caller sees what the server said; such answers in
// later rounds, or repeated, are dropped.
package batch

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// MaxBodySize bounds a batch request or response body, decoded, that is
// completed item by item: 4 MiB, the size of the largest request body
// Microsoft Graph accepts. A larger body is never buffered whole; its
// request passes through as an ordinary one.
const MaxBodySize = 4 << 20

// ErrNotBatch is wrapped by every error that says a body is not a batch
// that can be completed: invalid JSON, a missing or malformed field, an
// unknown encoding or a body over MaxBodySize.
var ErrNotBatch = errors.New("not a completable JSON batch")

// Is reports whether a request with this method and URL is a JSON batch
// request: a POST whose last path segment is $batch.
func Is(method string, u *url.URL) bool {
	if method != http.MethodPost || u == nil {
		return false
	}
	return strings.HasSuffix(u.Path, "/$batch")
}

// Item is one request of a batch, as the completer reports it.
type Item struct {
	ID     string
	Method string
	URL    string      // as written in the batch: usually relative to the service root
	Status int         // the item's latest answer; 0 before it has one
	Header http.Header // the latest answer's headers
}

// request is one item of the batch request.
type request struct {
	raw       json.RawMessage
	ID        string         `json:"id"`
	Method    string         `json:"method"`
	URL       string         `json:"url"`
	DependsOn []string       `json:"dependsOn"`
	Headers   map[string]any `json:"headers"`
	answer    *answer        // the latest answer, nil before one came
	// open is set while the item is in the round being answered: the
	// whole batch at first, then only the items resent.
	open bool
}

// answer is one item of a batch response.
type answer struct {
	raw     json.RawMessage
	ID      string         `json:"id"`
	Status  int            `json:"status"`
	Headers map[string]any `json:"headers"`
}

// Completer holds one batch through its rounds: the items of the original
// request and the latest answer to each. It is not safe for concurrent
// use; one request's goroutine owns it.
type Completer struct {
	requests []*request
	byID     map[string]*request
	extra    []*answer // first-round answers to ids the request does not hold, one per id, in arrival order
	resend   []*request
	rounds   int // the responses absorbed
	// Retryable reports whether an item answered with this status is worth
	// resending; it is asked about 429, 503 and 504 only. nil: all three.
	Retryable func(status int) bool
}

// NewCompleter parses a batch request body. It returns an error wrapping
// ErrNotBatch when body is not a batch of uniquely identified items with a
// method and a URL each, or is larger than MaxBodySize.
func NewCompleter(body []byte) (*Completer, error) {
	if len(body) > MaxBodySize {
		return nil, fmt.Errorf("batch request of %d bytes: %w (bound %d)", len(body), ErrNotBatch, MaxBodySize)
	}
	var doc struct {
		Requests []json.RawMessage `json:"requests"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("batch request: %w: %w", ErrNotBatch, err)
	}
	if len(doc.Requests) == 0 {
		return nil, fmt.Errorf("batch request: %w: no requests", ErrNotBatch)
	}
	c := &Completer{byID: make(map[string]*request, len(doc.Requests))}
	for i, raw := range doc.Requests {
		r := &request{raw: raw}
		if err := json.Unmarshal(raw, r); err != nil {
			return nil, fmt.Errorf("batch request item %d: %w: %w", i, ErrNotBatch, err)
		}
		switch {
		case r.ID == "":
			return nil, fmt.Errorf("batch request item %d: %w: no id", i, ErrNotBatch)
		case r.Method == "" || r.URL == "":
			return nil, fmt.Errorf("batch request item %q: %w: no method or url", r.ID, ErrNotBatch)
		case c.byID[r.ID] != nil:
			return nil, fmt.Errorf("batch request item %q: %w: duplicate id", r.ID, ErrNotBatch)
		}
		r.open = true
		c.byID[r.ID] = r
		c.requests = append(c.requests, r)
	}
	return c, nil
}

// Absorb merges a 200 batch response body into the latest answers and
// decides which items to resend. It returns the items the body answered.
// An error, wrapping ErrNotBatch, leaves the completer as it was.
func (c *Completer) Absorb(body []byte) ([]Item, error) {
	if len(body) > MaxBodySize {
		return nil, fmt.Errorf("batch response of %d bytes: %w (bound %d)", len(body), ErrNotBatch, MaxBodySize)
	}
	var doc struct {
		Responses []json.RawMessage `json:"responses"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("batch response: %w: %w", ErrNotBatch, err)
	}
	if doc.Responses == nil {
		return nil, fmt.Errorf("batch response: %w: no responses", ErrNotBatch)
	}
	answers := make([]*answer, 0, len(doc.Responses))
	for i, raw := range doc.Responses {
		a := &answer{raw: raw}
		if err := json.Unmarshal(raw, a); err != nil {
			return nil, fmt.Errorf("batch response item %d: %w: %w", i, ErrNotBatch, err)
		}
		if a.ID == "" || a.Status < 100 || a.Status > 999 {
			return nil, fmt.Errorf("batch response item %d: %w: id %q, status %d", i, ErrNotBatch, a.ID, a.Status)
		}
		answers = append(answers, a)
	}
	// The answer each item of the round takes: one that is final over a
	// throttle, else the first.
	chosen := make(map[*request]*answer, len(answers))
	for _, a := range answers {
		r := c.byID[a.ID]
		if r == nil || !r.open {
			continue
		}
		if prev, ok := chosen[r]; !ok || c.retryable(r, prev.Status) && !c.retryable(r, a.Status) {
			chosen[r] = a
		}
	}
	items := make([]Item, 0, len(chosen))
	for _, a := range answers {
		r := c.byID[a.ID]
		switch {
		case r == nil:
			if c.rounds == 0 && !slices.ContainsFunc(c.extra, func(e *answer) bool { return e.ID == a.ID }) {
				c.extra = append(c.extra, a)
			}
		case chosen[r] == a:
			r.answer = a
			items = append(items, r.item())
		}
	}
	c.rounds++
	c.pick()
	return items, nil
}

// pick decides which items to resend: those answered 429 or 503, those
// answered 504 whose request is safe to repeat, and, transitively, those
// answered 424 because an item they depend on is resent while every other
// one succeeded. Everything else is final: an item whose dependency failed
// for good would fail again.
func (c *Completer) pick() {
	resent := make(map[string]bool)
	for _, r := range c.requests {
		if r.answer != nil && c.retryable(r, r.answer.Status) {
			resent[r.ID] = true
		}
	}
	// Requests may only depend on earlier ones, but a server's answers
	// need not say so: iterate until nothing changes.
	for changed := len(resent) > 0; changed; {
		changed = false
		for _, r := range c.requests {
			if resent[r.ID] || r.answer == nil || r.answer.Status != http.StatusFailedDependency {
				continue
			}
			if c.dependencyResent(r, resent) {
				resent[r.ID], changed = true, true
			}
		}
	}
	c.resend = c.resend[:0]
	for _, r := range c.requests {
		r.open = resent[r.ID]
		if r.open {
			c.resend = append(c.resend, r)
		}
	}
}

// dependencyResent reports whether one of r's dependencies is resent and
// each of the others succeeded.
func (c *Completer) dependencyResent(r *request, resent map[string]bool) bool {
	some := false
	for _, id := range r.DependsOn {
		switch d := c.byID[id]; {
		case resent[id]:
			some = true
		case d == nil || d.answer == nil || d.answer.Status < 200 || d.answer.Status > 299:
			return false
		}
	}
	return some
}

// retryable reports whether an answer of status to r makes r worth
// resending.
func (c *Completer) retryable(r *request, status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
	case http.StatusGatewayTimeout:
		// The item may have been carried out: repeat only what is safe to.
		if !r.idempotent() {
			return false
		}
	default:
		return false
	}
	return c.Retryable == nil || c.Retryable(status)
}

// Pending returns the items to resend, in the original order, with their
// latest answer.
func (c *Completer) Pending() []Item {
	items := make([]Item, len(c.resend))
	for i, r := range c.resend {
		items[i] = r.item()
	}
	return items
}

// ResendBody returns the batch request body that resends the pending items,
// each as the caller wrote it, with dependsOn narrowed to the items resent
// with it: a dependency that already succeeded is met.
func (c *Completer) ResendBody() ([]byte, error) {
	resent := make(map[string]bool, len(c.resend))
	for _, r := range c.resend {
		resent[r.ID] = true
	}
	var buf bytes.Buffer
	buf.WriteString(`{"requests":[`)
	for i, r := range c.resend {
		if i > 0 {
			buf.WriteByte(',')
		}
		raw, err := r.narrowed(resent)
		if err != nil {
			return nil, fmt.Errorf("batch: rewriting item %q: %w", r.ID, err)
		}
		buf.Write(raw)
	}
	buf.WriteString(`]}`)
	return buf.Bytes(), nil
}

// Merged returns the batch response body holding every item's latest
// answer, as the server wrote it, in the order of the original request;
// first-round answers to ids the request did not hold follow, in arrival
// order, once each. An
// item never answered is absent.
func (c *Completer) Merged() []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"responses":[`)
	n := 0
	write := func(raw json.RawMessage) {
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		buf.Write(raw)
	}
	for _, r := range c.requests {
		if r.answer != nil {
			write(r.answer.raw)
		}
	}
	for _, a := range c.extra {
		write(a.raw)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// narrowed returns the item's JSON with dependsOn keeping only the ids in
// keep; unchanged items keep their bytes.
func (r *request) narrowed(keep map[string]bool) (json.RawMessage, error) {
	deps := make([]string, 0, len(r.DependsOn))
	for _, d := range r.DependsOn {
		if keep[d] {
			deps = append(deps, d)
		}
	}
	if len(deps) == len(r.DependsOn) {
		return r.raw, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.raw, &fields); err != nil {
		return nil, err
	}
	if len(deps) == 0 {
		delete(fields, "dependsOn")
	} else {
		b, err := json.Marshal(deps)
		if err != nil {
			return nil, err
		}
		fields["dependsOn"] = b
	}
	return json.Marshal(fields)
}

// idempotent reports whether repeating the item is harmless: its method is
// idempotent (RFC 9110 §9.2.2) or it carries an idempotency key.
func (r *request) idempotent() bool {
	switch strings.ToUpper(r.Method) {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	for k := range r.Headers {
		if strings.EqualFold(k, "Idempotency-Key") || strings.EqualFold(k, "X-Idempotency-Key") {
			return true
		}
	}
	return false
}

func (r *request) item() Item {
	it := Item{ID: r.ID, Method: r.Method, URL: r.URL}
	if r.answer != nil {
		it.Status = r.answer.Status
		it.Header = header(r.answer.Headers)
	}
	return it
}

// header converts an item's JSON headers; a value that is not a string is
// kept in its JSON form.
func header(h map[string]any) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		switch v := v.(type) {
		case string:
			out.Set(k, v)
		default:
			b, _ := json.Marshal(v)
			out.Set(k, string(b))
		}
	}
	return out
}

// Resolve returns the absolute URL of an item of the batch sent to
// batchURL: an item's relative URL is relative to the service root, the
// batch URL without its $batch segment.
func Resolve(batchURL *url.URL, itemURL string) (*url.URL, error) {
	u, err := url.Parse(itemURL)
	if err != nil {
		return nil, fmt.Errorf("batch item url %q: %w", itemURL, err)
	}
	if u.IsAbs() {
		return u, nil
	}
	root := *batchURL
	root.RawQuery, root.Fragment, root.RawPath = "", "", ""
	root.Path = strings.TrimSuffix(root.Path, "$batch")
	return root.ResolveReference(&url.URL{Path: strings.TrimPrefix(u.Path, "/"), RawQuery: u.RawQuery}), nil
}

// Decode returns body decoded from the given Content-Encoding ("" or
// identity: as is; gzip), reading no more than MaxBodySize+1 bytes of it.
func Decode(body []byte, encoding string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("batch: gzip body: %w: %w", ErrNotBatch, err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, MaxBodySize+1))
		if err != nil {
			return nil, fmt.Errorf("batch: gzip body: %w: %w", ErrNotBatch, err)
		}
		if len(out) > MaxBodySize {
			return nil, fmt.Errorf("batch: gzip body decodes past %d bytes: %w", MaxBodySize, ErrNotBatch)
		}
		return out, nil
	}
	return nil, fmt.Errorf("batch: Content-Encoding %q: %w", encoding, ErrNotBatch)
}

// Encode returns body in the Content-Encoding Decode accepted.
func Encode(body []byte, encoding string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(body); err != nil {
			return nil, fmt.Errorf("batch: gzip body: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("batch: gzip body: %w", err)
		}
		return buf.Bytes(), nil
	}
	return nil, fmt.Errorf("batch: Content-Encoding %q: %w", encoding, ErrNotBatch)
}
