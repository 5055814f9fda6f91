package throttletest

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transport is the Server's throttling without the network: an
// http.RoundTripper that answers each request in memory from the budgets
// of a Config, at time.Now(). Inside a testing/synctest bubble that time
// is virtual, so a client's pacing can be run against any limiter shape
// for minutes of simulated traffic exactly, in milliseconds, and with no
// sleep in the test. Create it with NewTransport.
type Transport struct {
	latency  time.Duration
	serve    time.Duration // Config.ServeTime
	start    time.Time     // for Flapping
	flapping Flapping

	mu        sync.Mutex
	rules     []*ruleState
	stats     Stats
	seen      map[string]bool
	notBefore map[string]time.Time // Retry-After times named, by request
	done      []time.Time          // of every 2xx answer
}

// NewTransport returns a Transport that throttles like a Server with the
// budgets of cfg (Bucket, HostBuckets, PathBuckets, Rules) and its
// Flapping, counted from now, and answers after latency, half of it on the
// way in and half on the way out, and for a request it serves after
// Config.ServeTime more, as the Server does. Config's Hosts, Outage, FailureRate and
// Rand are the network server's and are rejected here, as are invalid
// configurations and a negative latency.
func NewTransport(cfg Config, latency time.Duration) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case len(cfg.Hosts) > 0 || cfg.Outage != 0 || cfg.FailureRate != 0 || cfg.Rand != nil:
		return nil, errors.New("throttletest: NewTransport: Config.Hosts, Outage, FailureRate and Rand apply only to a Server")
	case latency < 0:
		return nil, fmt.Errorf("throttletest: NewTransport: latency = %v must not be negative", latency)
	}
	return &Transport{latency: latency, serve: cfg.ServeTime, start: time.Now(), flapping: cfg.Flapping,
		rules: rules(cfg), seen: map[string]bool{}, notBefore: map[string]time.Time{}}, nil
}

// RoundTrip answers r as the Server would: the rule's refusal (429 with
// Retry-After by default) when a budget that applies cannot admit it, 200
// (201 for a POST) otherwise, with the headers the rules announce. It reads
// and closes the request body, and returns the context's error when it ends
// during the latency.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	if err := t.travel(r); err != nil {
		return nil, err
	}
	a := t.account(r, time.Now())
	// A request served takes Config.ServeTime; a Concurrent limiter's slot
	// is held until the answer is back, as it always was here.
	err := t.wait(r, t.serve, a.status < 300)
	if err == nil {
		err = t.travel(r)
	}
	if len(a.taken) > 0 {
		t.mu.Lock()
		a.release(time.Now())
		t.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	h := a.header
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	body := "{}"
	if a.refused {
		if a.retryAfter > 0 {
			h.Set("Retry-After", strconv.FormatInt(a.retryAfter, 10))
		}
		body = `{"error":{"code":"TooManyRequests"}}`
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", a.status, http.StatusText(a.status)), StatusCode: a.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)),
		Request: r,
	}, nil
}

// travel waits half the latency, or until the request's context ends.
func (t *Transport) travel(r *http.Request) error { return t.wait(r, t.latency/2, true) }

// wait waits d, when it applies, or until the request's context ends.
func (t *Transport) wait(r *http.Request, d time.Duration, applies bool) error {
	if d <= 0 || !applies {
		return r.Context().Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}

func (t *Transport) account(r *http.Request, now time.Time) answer {
	id := r.Header.Get(HeaderRequestID)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Attempts++
	if id != "" {
		t.seen[id] = true
		if nb, ok := t.notBefore[id]; ok && now.Before(nb.Add(-EarlyTolerance)) {
			t.stats.Early++
		}
		delete(t.notBefore, id)
	}
	a := answer{status: http.StatusOK}
	if r.Method == http.MethodPost {
		a.status = http.StatusCreated
	}
	if t.flapping.isDown(now.Sub(t.start)) {
		t.stats.Unavailable++
		return answer{status: http.StatusServiceUnavailable}
	}
	if takeToken(t.rules, now, r, &a) {
		t.stats.Throttled++
		if t.stats.ThrottledBy == nil {
			t.stats.ThrottledBy = map[string]int{}
		}
		t.stats.ThrottledBy[a.rule]++
		if id != "" && a.retryAfter > 0 {
			t.notBefore[id] = now.Add(time.Duration(a.retryAfter) * time.Second)
		}
		return a
	}
	t.stats.OK++
	t.done = append(t.done, now)
	return a
}

// Stats returns the counts so far; BadBody is always 0.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stats
	st.Requests = len(t.seen)
	st.ThrottledBy = maps.Clone(t.stats.ThrottledBy)
	return st
}

// Completions returns the time of every 2xx answer so far, in order.
func (t *Transport) Completions() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.done...)
}
