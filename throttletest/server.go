// Package throttletest provides an HTTP server on loopback that throttles
// like Microsoft Graph, for tests, demos and benchmarks of retrying clients,
// in the spirit of net/http/httptest.
//
// The server answers 429 Too Many Requests with a Retry-After in whole
// seconds when a token bucket is empty, 503 Service Unavailable without
// Retry-After during an outage at start or at random, and small JSON bodies
// otherwise. It counts, safely under concurrency, what every client did to
// it: attempts, 429s and 503s sent, and per logical request (named by the
// X-Request-Id header, which retries carry over) the attempts it took,
// retries that arrived before the Retry-After the server named, bodies that
// arrived different from what the client declared, and when it completed.
//
// Its budgets (Rule) take the shapes servers have: token buckets, fixed and
// sliding windows, and the limiters most servers sit behind, nginx's
// limit_req (LimitReq) and HAProxy's stick-table rate (StickTable), each
// modelled to the millisecond and checked against the real one (`make
// bench-verify`), with their refusals: nginx's default 503 and bare 429s
// (Rule.Status, Rule.OmitRetryAfter). Transport answers the same way in
// memory, for tests in virtual time.
package throttletest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Headers a client sets so that the server can account for its requests.
// All are optional; without HeaderRequestID an attempt is only counted in
// the server-wide Stats.
const (
	// HeaderRequestID names the logical request an attempt belongs to. A
	// retrying client sends the same value on every attempt (retries copy
	// the caller's headers), so the server can tell retries apart from new
	// requests.
	HeaderRequestID = "X-Request-Id"
	// HeaderBodySHA256 is the hex SHA-256 of the body the client means to
	// send; an attempt whose body hashes differently is answered 400 and
	// counted as a bad body.
	HeaderBodySHA256 = "X-Body-Sha256"
	// HeaderIssuedAt is the time, in Unix nanoseconds, at which the client
	// issued the logical request, before any middleware saw it. The server
	// subtracts it from the first attempt's arrival to measure how long the
	// client held the request back (Request.Lag).
	HeaderIssuedAt = "X-Issued-At"
)

// EarlyTolerance is how much before the Retry-After time an attempt may
// arrive without counting as early. The server stamps the Retry-After time
// before it writes the 429, so a client that waits the named seconds from
// the moment it reads the answer arrives after that time; the tolerance only
// absorbs clock and timer granularity.
const EarlyTolerance = 5 * time.Millisecond

// maxBody bounds the request body the server reads.
const maxBody = 1 << 20

// Config describes how a Server throttles. The zero value serves every
// request at once, on 127.0.0.1.
type Config struct {
	// Bucket throttles every request. Zero: no global throttle.
	Bucket Bucket
	// HostBuckets throttle the requests to one host separately, keyed by
	// the host name of the request's Host header without the port (the
	// URL's host, e.g. "127.0.0.2"). A request takes a token from every
	// bucket that applies to it, or from none when one is empty.
	HostBuckets map[string]Bucket
	// PathBuckets throttle the requests whose path starts with a segment
	// separately, keyed by that first segment without slashes ("mail"
	// for "/mail/users/1").
	PathBuckets map[string]Bucket
	// Rules throttle the requests each matches with budgets of their own
	// (per service, per mailbox, per item), in addition to the buckets
	// above. A request passes only when every budget that applies to it
	// admits it, and then takes from all of them.
	Rules []Rule
	// Hosts are the loopback IP addresses to listen on, each on a port of
	// its own, so that a client sees really different URL hosts. Empty:
	// {"127.0.0.1"}. Linux answers on all of 127.0.0.0/8; other systems may
	// need an alias for addresses other than 127.0.0.1.
	Hosts []string
	// Outage is how long after start every request is answered 503
	// without Retry-After. Zero: no outage.
	Outage time.Duration
	// FailureRate is the probability in [0, 1] that a request outside the
	// outage is answered 503 without Retry-After. Zero: never.
	FailureRate float64
	// Flapping takes the server down and up again for as long as it runs.
	// The zero value: never.
	Flapping Flapping
	// ServeTime is how long the server takes to serve a request its
	// budgets admitted, before it answers: the time a request holds a
	// slot of a Concurrent limiter. Zero: it answers at once.
	ServeTime time.Duration
	// Rand returns numbers in [0, 1) to decide random failures. It is
	// called with the server's lock held, so it need not be safe for
	// concurrent use. nil: math/rand/v2.Float64.
	Rand func() float64
}

// Validate reports the first invalid field of c, naming it and its value.
func (c Config) Validate() error {
	if err := c.Bucket.validate("Config.Bucket"); err != nil {
		return err
	}
	for h, b := range c.HostBuckets {
		if err := b.validate(fmt.Sprintf("Config.HostBuckets[%q]", h)); err != nil {
			return err
		}
	}
	for p, b := range c.PathBuckets {
		if strings.Contains(p, "/") {
			return fmt.Errorf("throttletest: Config.PathBuckets key %q must be one path segment, without slashes", p)
		}
		if err := b.validate(fmt.Sprintf("Config.PathBuckets[%q]", p)); err != nil {
			return err
		}
	}
	for i, r := range c.Rules {
		if err := r.validate(i); err != nil {
			return err
		}
	}
	for _, h := range c.Hosts {
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("throttletest: Config.Hosts entry %q is not a loopback IP address", h)
		}
	}
	switch {
	case c.Outage < 0:
		return fmt.Errorf("throttletest: Config.Outage = %v must not be negative", c.Outage)
	case c.ServeTime < 0:
		return fmt.Errorf("throttletest: Config.ServeTime = %v must not be negative", c.ServeTime)
	case !(c.FailureRate >= 0 && c.FailureRate <= 1):
		return fmt.Errorf("throttletest: Config.FailureRate = %v must be within [0, 1]", c.FailureRate)
	case c.Flapping.Down < 0 || c.Flapping.Up < 0 || (c.Flapping.Down == 0) != (c.Flapping.Up == 0):
		return fmt.Errorf("throttletest: Config.Flapping = %+v: Down and Up must both be positive, or both zero", c.Flapping)
	}
	return nil
}

// Stats are the server-wide counts of what it received and answered.
type Stats struct {
	Attempts    int // requests received, retries included
	Requests    int // distinct X-Request-Id values seen
	OK          int // 2xx answers
	Throttled   int // answers refused by a budget: 429, or the Rule's Status
	Unavailable int // 503 answers of the outage and of FailureRate
	BadBody     int // attempts whose body did not match X-Body-Sha256
	Early       int // attempts that arrived before the Retry-After named for their request
	// ThrottledBy counts the 429 answers by the budget that caused them:
	// a Rule's Name, or "bucket", "host" or "path" for Config's buckets.
	ThrottledBy map[string]int
}

// Request is what the server saw of one logical request, the attempts
// that carried one X-Request-Id value.
type Request struct {
	ID     string
	Method string // of the first attempt
	Host   string // host name of the first attempt, without port
	Path   string // of the first attempt

	Attempts    int
	Throttled   int // refusals by a budget sent to it
	Unavailable int // 503s of the outage and of FailureRate sent to it
	BadBody     int // attempts whose body did not match X-Body-Sha256
	Early       int // attempts that arrived before the Retry-After named for it

	// Issued is the client's HeaderIssuedAt, zero when it sent none.
	Issued time.Time
	// First is when its first attempt arrived.
	First time.Time
	// Lag is First minus Issued: how long the client held the request
	// back before its first attempt reached the server. Zero without
	// HeaderIssuedAt.
	Lag time.Duration
	// Done is when the server sent its first 2xx answer; zero if none.
	Done time.Time
}

// Server is a throttling HTTP server listening on one or more loopback
// addresses. Create it with NewServer and Close it when done.
type Server struct {
	// URL is the base URL of the first host, "http://127.0.0.1:port",
	// without a trailing slash.
	URL string
	// URLs are the base URLs of all hosts, in the order of Config.Hosts.
	URLs []string

	cfg   Config
	now   func() time.Time
	start time.Time
	srv   *http.Server
	wg    sync.WaitGroup

	mu          sync.Mutex
	rand        func() float64
	rules       []*ruleState // Config's buckets first, then Config.Rules
	stats       Stats
	requests    map[string]*record
	completions []time.Duration
}

type record struct {
	Request
	// notBefore is the Retry-After time named in the last answer to the
	// request; zero when the last answer named none.
	notBefore time.Time
}

// NewServer starts a Server configured by cfg. Like httptest.NewServer it
// panics when cfg is invalid or a host cannot be listened on, since it is
// meant for tests and benchmarks; check cfg.Validate first to avoid that.
func NewServer(cfg Config) *Server {
	s, err := newServer(cfg, time.Now)
	if err != nil {
		panic(err)
	}
	return s
}

func newServer(cfg Config, now func() time.Time) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hosts := cfg.Hosts
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	s := &Server{cfg: cfg, now: now, rand: cfg.Rand, requests: map[string]*record{}}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	listeners := make([]net.Listener, 0, len(hosts))
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, "0"))
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, fmt.Errorf("throttletest: listening on host %q: %w", h, err)
		}
		listeners = append(listeners, l)
		s.URLs = append(s.URLs, "http://"+l.Addr().String())
	}
	s.URL = s.URLs[0]

	s.start = now()
	s.rules = rules(cfg)

	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	for _, l := range listeners {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.srv.Serve(l)
		}()
	}
	return s, nil
}

// rules turns Config's buckets into rules, followed by Config.Rules.
func rules(cfg Config) []*ruleState {
	var out []*ruleState
	add := func(r Rule) { out = append(out, &ruleState{Rule: r, limiters: map[string]Limiter{}}) }
	if cfg.Bucket.enabled() {
		add(Rule{Name: "bucket", Limiter: BucketLimiter(cfg.Bucket), Match: func(*http.Request) (string, bool) { return "", true }})
	}
	keyed := func(name string, buckets map[string]Bucket, key func(*http.Request) string) {
		if len(buckets) > 0 {
			add(Rule{
				Name:    name,
				Match:   func(r *http.Request) (string, bool) { k := key(r); return k, buckets[k].enabled() },
				Limiter: func(k string, now time.Time) Limiter { return newTokenBucket(buckets[k], now) },
			})
		}
	}
	keyed("host", cfg.HostBuckets, func(r *http.Request) string { return hostname(r.Host) })
	keyed("path", cfg.PathBuckets, func(r *http.Request) string { return firstSegment(r.URL.Path) })
	for _, r := range cfg.Rules {
		add(r)
	}
	return out
}

// Close closes the listeners and every connection, and waits until the
// server has stopped. Requests in flight get a connection error.
func (s *Server) Close() {
	_ = s.srv.Close()
	s.wg.Wait()
}

// Started returns the time the server started; the outage and the
// completion offsets count from it.
func (s *Server) Started() time.Time { return s.start }

// Stats returns the server-wide counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Requests = len(s.requests)
	st.ThrottledBy = maps.Clone(s.stats.ThrottledBy)
	return st
}

// Requests returns what the server saw of every logical request so far,
// ordered by the arrival of their first attempt.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	out := make([]Request, 0, len(s.requests))
	for _, r := range s.requests {
		out = append(out, r.Request)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].First.Equal(out[j].First) {
			return out[i].First.Before(out[j].First)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Completions returns, for every 2xx answer so far, its time since start,
// in order: the data of a throughput-over-time chart.
func (s *Server) Completions() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.completions...)
}

// ServeHTTP answers one attempt: 503 during the outage or at random, 429
// when a bucket that applies is empty, 400 when the body is not the one
// the client declared, and a JSON body otherwise.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The body is read before anything is decided, so that it is checked
	// on every attempt and the connection stays reusable.
	body, readErr := readBody(w, r)
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	declared := r.Header.Get(HeaderBodySHA256)
	bad := readErr != nil || declared != "" && !strings.EqualFold(declared, digest)
	if isBatch(r) && !bad {
		s.serveBatch(w, r, body)
		return
	}

	host := hostname(r.Host)
	now := s.now()
	a := s.account(r, host, now, bad)
	if s.cfg.ServeTime > 0 && a.status < 300 {
		t := time.NewTimer(s.cfg.ServeTime)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	if len(a.taken) > 0 {
		s.mu.Lock()
		a.release(s.now())
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	if a.requestID != "" {
		w.Header().Set("request-id", a.requestID)
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	switch {
	case a.refused:
		msg := "Too many requests."
		if a.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(a.retryAfter, 10))
			msg = "Too many requests. Retry after " + strconv.FormatInt(a.retryAfter, 10) + " s."
		}
		w.WriteHeader(a.status)
		writeJSON(w, graphError{Error: graphErrorBody{Code: "TooManyRequests", Message: msg}})
	case a.status == http.StatusServiceUnavailable:
		w.WriteHeader(a.status)
		writeJSON(w, graphError{Error: graphErrorBody{Code: "serviceNotAvailable", Message: "The service is temporarily unavailable."}})
	case a.status == http.StatusBadRequest:
		w.WriteHeader(a.status)
		msg := "The request body does not match " + HeaderBodySHA256 + "."
		if readErr != nil {
			msg = "The request body could not be read: " + readErr.Error()
		}
		writeJSON(w, graphError{Error: graphErrorBody{Code: "invalidRequest", Message: msg}})
	default:
		if serveGraph(w, r, a.status, body) {
			return
		}
		w.WriteHeader(a.status)
		id := lastSegment(r.URL.Path)
		if a.requestID != "" && r.Method != http.MethodGet {
			id = a.requestID
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			writeJSON(w, user{ID: id, DisplayName: "User " + id})
			return
		}
		writeJSON(w, echo{ID: id, SHA256: digest, Bytes: len(body)})
	}
}

type answer struct {
	status     int
	refused    bool   // by a budget, with status the rule's refusal
	retryAfter int64  // seconds, for a refusal; 0: none sent
	rule       string // the budget that answered 429
	requestID  string
	header     http.Header // written by the rules' Announce
	// taken are the Releasers that admitted the request, to be told
	// when it is served.
	taken []taken
}

type taken struct {
	l    Releaser
	cost float64
}

// release tells the limiters that admitted the request that it was
// served at now; the caller holds the lock that guards them.
func (a *answer) release(now time.Time) {
	for _, t := range a.taken {
		t.l.Release(now, t.cost)
	}
	a.taken = nil
}

// account decides the answer to one attempt and records it, in one
// critical section so that the counts always agree with the answers.
func (s *Server) account(r *http.Request, host string, now time.Time, bad bool) answer {
	id := r.Header.Get(HeaderRequestID)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Attempts++
	rec := s.record(id, r, host, now)
	if rec != nil {
		rec.Attempts++
		if !rec.notBefore.IsZero() && now.Before(rec.notBefore.Add(-EarlyTolerance)) {
			rec.Early++
			s.stats.Early++
		}
		rec.notBefore = time.Time{}
	}
	if bad {
		s.stats.BadBody++
		if rec != nil {
			rec.BadBody++
		}
	}

	a := answer{requestID: id}
	switch {
	case now.Sub(s.start) < s.cfg.Outage, s.cfg.Flapping.isDown(now.Sub(s.start)),
		s.cfg.FailureRate > 0 && s.rand() < s.cfg.FailureRate:
		a.status = http.StatusServiceUnavailable
		s.stats.Unavailable++
		if rec != nil {
			rec.Unavailable++
		}
	case takeToken(s.rules, now, r, &a):
		s.stats.Throttled++
		if s.stats.ThrottledBy == nil {
			s.stats.ThrottledBy = map[string]int{}
		}
		s.stats.ThrottledBy[a.rule]++
		if rec != nil {
			rec.Throttled++
			if a.retryAfter > 0 {
				rec.notBefore = now.Add(time.Duration(a.retryAfter) * time.Second)
			}
		}
	case bad:
		a.status = http.StatusBadRequest
	default:
		a.status = http.StatusOK
		if r.Method == http.MethodPost {
			a.status = http.StatusCreated
		}
		s.stats.OK++
		s.completions = append(s.completions, now.Sub(s.start))
		if rec != nil && rec.Done.IsZero() {
			rec.Done = now
		}
	}
	return a
}

// record returns the record of the logical request id, creating it on
// its first attempt; nil when the attempt names no request.
func (s *Server) record(id string, r *http.Request, host string, now time.Time) *record {
	if id == "" {
		return nil
	}
	if rec, ok := s.requests[id]; ok {
		return rec
	}
	rec := &record{Request: Request{ID: id, Method: r.Method, Host: host, Path: r.URL.Path, First: now}}
	if v := r.Header.Get(HeaderIssuedAt); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
			rec.Issued = time.Unix(0, ns)
			rec.Lag = now.Sub(rec.Issued)
		}
	}
	s.requests[id] = rec
	return rec
}

// takeToken takes from every budget that applies to the request or, when
// one of them cannot admit it, takes from none (but counts the request in
// the Refusers), sets a's refusal from the budget with the longest wait,
// and reports true.
func takeToken(rules []*ruleState, now time.Time, r *http.Request, a *answer) bool {
	type use struct {
		rs   *ruleState
		l    Limiter
		cost float64
	}
	apply := make([]use, 0, len(rules))
	var wait time.Duration
	var by *ruleState
	for _, rs := range rules {
		l, cost := rs.applying(r, now)
		if l == nil {
			continue
		}
		apply = append(apply, use{rs, l, cost})
		if w := l.Wait(now, cost); w > wait {
			wait, by = w, rs
		}
	}
	refused := wait > 0
	if refused {
		a.refused, a.status, a.rule = true, by.refusal(), by.Name
		if !by.OmitRetryAfter {
			a.retryAfter = by.retryAfter(wait)
		}
		for _, u := range apply {
			if rf, ok := u.l.(Refuser); ok {
				rf.Refuse(now, u.cost)
			}
		}
	} else {
		for _, u := range apply {
			u.l.Take(now, u.cost)
			if rl, ok := u.l.(Releaser); ok {
				a.taken = append(a.taken, taken{rl, u.cost})
			}
		}
	}
	// After the take, so that an answer tells what is left after it.
	for _, u := range apply {
		announce(u.rs, u.l, now, a)
	}
	return refused
}

// announce writes the budget of limiter l under rule rs into a's headers,
// when the rule announces and the limiter can tell its budget.
func announce(rs *ruleState, l Limiter, now time.Time, a *answer) {
	b, ok := l.(Budgeter)
	if rs.Announce == nil || !ok {
		return
	}
	if a.header == nil {
		a.header = http.Header{}
	}
	rs.Announce(a.header, b.Budget(now))
}

func hostname(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func firstSegment(path string) string {
	path = strings.TrimPrefix(path, "/")
	if i := strings.IndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return path
}

func lastSegment(path string) string {
	path = strings.TrimSuffix(path, "/")
	return path[strings.LastIndexByte(path, '/')+1:]
}

// user is the body of a successful GET, shaped like a Graph user.
type user struct {
	ID          string `json:"id"`
	DisplayName string `json:"displayName"`
}

// echo is the body of a successful POST: what the server received.
type echo struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
}

type graphError struct {
	Error graphErrorBody `json:"error"`
}

type graphErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w io.Writer, v any) {
	// A write fails only when the client went away, which is its business.
	_ = json.NewEncoder(w).Encode(v)
}

// readBody reads the request body, decoding it when the client compressed
// it (Kiota's compression handler gzips request bodies), so that the hash
// is of the content the client declared.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil || !strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		return raw, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("throttletest: gzip body: %w", err)
	}
	return io.ReadAll(io.LimitReader(zr, maxBody))
}

// Flapping is a server that goes down and comes back over and over: from
// its start, every request in a Down period is answered 503 without
// Retry-After, and requests in the Up period that follows are served, and
// so on.
type Flapping struct {
	Down, Up time.Duration
}

// isDown reports whether the server is down at elapsed since its start.
func (f Flapping) isDown(elapsed time.Duration) bool {
	if f.Down <= 0 || f.Up <= 0 {
		return false
	}
	return elapsed%(f.Down+f.Up) < f.Down
}
