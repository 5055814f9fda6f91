package throttle

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Defaults of options.QueueOptions.
const (
	defaultRecovery   = 10 * time.Second
	defaultMaxTracked = 1024
	// segmentRuleBase is the 5 of the design's 5-n rule: a request sharing
	// its first n segments below the service root with 5-n throttled
	// requests is held.
	segmentRuleBase = 5
	// maxPrefixEnds is the most throttled requests the rule ever counts.
	maxPrefixEnds = segmentRuleBase - 1
)

// Queue holds requests back while a throttle they match lasts, and paces
// their release per throttle scope. One Queue serves every request of a
// retry handler; it is safe for concurrent use.
type Queue struct {
	clock      options.Clock
	recovery   time.Duration
	maxTracked int
	roots      []string
	newPacer   func(now time.Time) pacer
	hosts      sync.Map // host → *hostState
	swept      atomic.Int64
}

// New returns a Queue configured by o, whose zero fields take their
// defaults, reading time from clock. Its gauges report through
// o.MeterProvider, or the global provider when that is nil.
func New(clock options.Clock, o options.QueueOptions) *Queue {
	q := &Queue{clock: clock, recovery: o.Recovery, maxTracked: o.MaxTracked}
	if q.recovery == 0 {
		q.recovery = defaultRecovery
	}
	if q.maxTracked == 0 {
		q.maxTracked = defaultMaxTracked
	}
	for _, r := range o.Roots {
		q.roots = append(q.roots, strings.TrimSuffix(r, "/"))
	}
	// The longest root wins: /api/data/v9.2 before /api.
	slices.SortFunc(q.roots, func(a, b string) int { return len(b) - len(a) })
	q.newPacer = func(now time.Time) pacer { return newAdaptivePacer(now) }
	if err := q.register(o.MeterProvider); err != nil {
		// The queue works without its gauges.
		otel.Handle(fmt.Errorf("throttle: registering the queue's gauges: %w", err))
	}
	return q
}

// Observer hears when the queue starts and stops holding a request.
type Observer interface {
	// Held is called when the queue holds the request past its own
	// delay, expecting to release it after about expected.
	Held(ctx context.Context, expected time.Duration)
	// Released is called when the queue lets the request go, whatever
	// the outcome; it does nothing when the request was not held.
	Released(ctx context.Context)
}

// Pass is an attempt the queue let go. Hand it back to Report with the
// attempt's answer.
type Pass struct {
	// Sent is when the attempt was let go.
	Sent  time.Time
	probe *prefix // the inferred hold this attempt tests, if any
	host  *hostState
	scope *scope // the scope that released it, counting it in flight
	// paced is set when that scope was pacing after a throttle: a
	// throttle of this attempt then holds only the attempt itself.
	paced bool
}

// Outcome is what an attempt's answer says about throttling.
type Outcome int

const (
	// Failed is no answer, or one that says nothing of throttling (a 5xx
	// without Retry-After).
	Failed Outcome = iota
	// Succeeded is an answer that was not throttled.
	Succeeded
	// Throttled is a 429, or a 503 or 504 naming a Retry-After.
	Throttled
)

// hostState is everything the queue knows about one host.
type hostState struct {
	// active turns true at the host's first throttle; until then its
	// requests skip the queue without taking the lock.
	active atomic.Bool
	// cold counts, without the lock, the recent successes of each API of
	// the host (its first segment below the service root) that has no
	// throttle scope yet; a scope's first throttle takes the count of its
	// API as the burst the server let through.
	cold sync.Map // API → *waveCount
	apis atomic.Int32
	// seen is the Unix second of the last report, so that an idle host
	// can be forgotten.
	seen atomic.Int64

	mu sync.Mutex
	// forgotten is set, under mu, when sweep drops the host: an answer to
	// a request admitted before then goes to the host's new state, so that
	// a late 429 is not lost with the old one.
	forgotten bool
	lastEnd   time.Time // the latest end of any throttle of the host
	urls      map[string]entry
	paths     map[string]entry
	prefixes  map[string]*prefix
	scopes    map[string]*scope
	seq       uint64 // orders throttles and waiters
}

// entry is an exact URL or path the server throttled until end.
type entry struct {
	end time.Time
	seq uint64
}

// prefix is the throttles of requests sharing some first segments.
type prefix struct {
	ends []time.Time // newest first, at most maxPrefixEnds
	seq  uint64
	// probing is when the request that tests the hold the rule infers
	// from the prefix was let go, zero when none is out; confirmed is until when a throttled probe showed
	// the inference right, so that no other probe goes before it.
	probing   time.Time
	confirmed time.Time
}

// scope is a collection that was throttled: its own pacer and waiters.
type scope struct {
	key     string
	pacer   pacer
	waiters waiterHeap
	since   time.Time // its first throttle; zero while it has had none
	lastEnd time.Time
	seq     uint64
	// budget is what the server last announced of the scope's budget in
	// rate-limit headers, and inflight the requests it released that have
	// not been answered.
	budget   announced
	inflight int
}

func (q *Queue) state(host string, create bool) *hostState {
	if s, ok := q.hosts.Load(host); ok {
		return s.(*hostState)
	}
	if !create {
		return nil
	}
	q.sweep()
	s, _ := q.hosts.LoadOrStore(host, &hostState{
		urls:     map[string]entry{},
		paths:    map[string]entry{},
		prefixes: map[string]*prefix{},
		scopes:   map[string]*scope{},
	})
	return s.(*hostState)
}

// lockedState returns the current state of host, made when there is
// none, with its lock held.
func (q *Queue) lockedState(host string) *hostState {
	for {
		s := q.state(host, true)
		s.mu.Lock()
		if !s.forgotten {
			return s
		}
		s.mu.Unlock()
	}
}

// sweep forgets the hosts that had no throttle for the recovery window and
// no answer in it either. It runs as a host is added, at most once a
// recovery window, so that state grows only with the hosts in use.
func (q *Queue) sweep() {
	now := q.clock.Now()
	last := q.swept.Load()
	if now.UnixNano()-last < int64(q.recovery) || !q.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	q.hosts.Range(func(k, v any) bool {
		s := v.(*hostState)
		if now.Unix()-s.seen.Load() <= int64(q.recovery/time.Second) {
			return true
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if now.After(s.lastEnd.Add(q.recovery)) && !s.holding() {
			s.forgotten = true
			q.hosts.CompareAndDelete(k, s)
		}
		return true
	})
}

// holding reports whether any request waits in one of the host's scopes.
func (s *hostState) holding() bool {
	for _, sc := range s.scopes {
		if len(sc.waiters) > 0 {
			return true
		}
	}
	return false
}

// recovering reports whether sc had a throttle that ended less than the
// recovery window ago.
func (q *Queue) recovering(sc *scope, now time.Time) bool {
	return now.Before(sc.lastEnd.Add(q.recovery))
}

// hold is what the throttles of a host say about one request.
type hold struct {
	// until is when the server's own word (a throttle of the exact URL or
	// path) lets it go.
	until time.Time
	// inferred is when the throttles of requests sharing its first
	// segments would, and probe the prefix they come from.
	inferred time.Time
	probe    *prefix
	// scope paces it: its collection's, when that had a throttle within
	// the recovery window; nil otherwise.
	scope *scope
}

// counting reports whether sc's releases follow the count of a budget
// the server announced rather than the pace learned from its throttles.
func (q *Queue) counting(sc *scope, now time.Time) bool {
	return sc.budget.counted() && sc.budget.live(now, q.recovery)
}

// match returns what holds t at now.
func (q *Queue) match(s *hostState, t *target, now time.Time) (h hold) {
	if sc, ok := s.scopes[t.scope()]; ok && (q.recovering(sc, now) || sc.budget.live(now, q.recovery)) {
		h.scope = sc
		if q.counting(sc, now) {
			// The server says how much is left: that supersedes what its
			// throttles of other requests suggest. A throttled request
			// still waits out its own Retry-After.
			return h
		}
	}
	if e, ok := s.urls[t.url]; ok {
		h.until = e.end
	}
	if e, ok := s.paths[t.path]; ok {
		h.until = later(h.until, e.end)
	}
	for n := 1; n <= len(t.segs); n++ {
		k := t.prefix(n)
		p, ok := s.prefixes[k]
		if !ok {
			continue
		}
		need := max(segmentRuleBase-n, 1)
		if len(p.ends) < need {
			continue
		}
		// ends is newest first: the need-th newest is when fewer than
		// need of them are still active.
		if end := p.ends[need-1]; end.After(h.inferred) {
			h.inferred, h.probe = end, p
		}
	}
	if !h.inferred.After(later(now, h.until)) {
		h.inferred, h.probe = time.Time{}, nil
	}
	return h
}

// record records that t was throttled until end. A throttle of a request
// its scope's pacer released (paced) says the pace went past the server's
// rate, not that its target is held: the pacer slows down, the request
// waits out its own Retry-After, and nothing else is held.
func (q *Queue) record(s *hostState, t *target, sent, now, end time.Time, paced bool) {
	s.active.Store(true)
	s.seq++
	s.lastEnd = later(s.lastEnd, end)
	sc := q.scopeFor(s, t.scope(), now)
	if paced {
		sc.lastEnd = later(sc.lastEnd, end)
		sc.seq = s.seq
		sc.pacer.throttled(sent, now, end)
		sc.kick()
		return
	}
	s.urls[t.url] = entry{later(s.urls[t.url].end, end), s.seq}
	s.paths[t.path] = entry{later(s.paths[t.path].end, end), s.seq}
	for n := 1; n <= len(t.segs); n++ {
		k := t.prefix(n)
		p := s.prefixes[k]
		if p == nil {
			p = &prefix{}
			s.prefixes[k] = p
		}
		p.ends = append(p.ends, end)
		slices.SortFunc(p.ends, func(a, b time.Time) int { return b.Compare(a) })
		if len(p.ends) > maxPrefixEnds {
			p.ends = p.ends[:maxPrefixEnds]
		}
		p.seq = s.seq
	}
	if sc.since.IsZero() {
		sc.since = now
		s.settleCold(sc)
	}
	sc.lastEnd = later(sc.lastEnd, end)
	sc.seq = s.seq
	q.prune(s, now)
	sc.pacer.throttled(sent, now, end)
	// Any scope's head may be held by what changed.
	for _, sc := range s.scopes {
		sc.kick()
	}
}

// scopeFor returns the scope of key, made at now when there is none.
func (q *Queue) scopeFor(s *hostState, key string, now time.Time) *scope {
	sc := s.scopes[key]
	if sc == nil {
		sc = &scope{key: key, pacer: q.newPacer(now)}
		s.scopes[key] = sc
	}
	return sc
}

// succeeded feeds a success to the pacer of its scope. Until its host's
// first throttle it costs a few atomic operations, not the lock.
func (q *Queue) succeeded(s *hostState, req *http.Request, sent time.Time, back func() time.Time) {
	if !s.active.Load() {
		if testHookCold != nil {
			testHookCold()
		}
		key := q.scopeOf(req.URL.Path)
		c := s.count(key)
		if c == nil {
			return
		}
		c.add(sent)
		if !s.active.Load() {
			return
		}
		// A first throttle came meanwhile and may have settled the count
		// before this success was in it.
		s.mu.Lock()
		for _, sc := range s.scopes {
			if sc.key == key {
				s.settleCold(sc)
			}
		}
		s.mu.Unlock()
		return
	}
	t := q.newTarget(req)
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := q.match(s, t, back()).scope
	if sc == nil {
		// Counted for the burst of a scope this API may get.
		if c := s.count(t.scope()); c != nil {
			c.add(sent)
		}
		return
	}
	if sent.Before(sc.since) {
		// Sent before the scope's first throttle came back: part of the
		// same wave.
		sc.pacer.settle(1, sent)
	}
	sc.pacer.succeeded(sent, back())
}

// maxAPIs bounds the APIs of a host whose successes are counted before
// their first throttle.
const maxAPIs = 64

// count returns the success count of api, or nil past maxAPIs.
func (s *hostState) count(api string) *waveCount {
	if c, ok := s.cold.Load(api); ok {
		return c.(*waveCount)
	}
	if s.apis.Load() >= maxAPIs {
		return nil
	}
	c, loaded := s.cold.LoadOrStore(api, &waveCount{})
	if !loaded {
		s.apis.Add(1)
	}
	return c.(*waveCount)
}

// testHookCold, when a test sets it, runs as a success is found cold,
// before it is counted.
var testHookCold func()

// settleCold hands the successes of sc's API counted before its first
// throttle to its pacer. It is called with s.mu held, after active is set,
// so that a success either is in the count it takes or sees active and
// settles itself.
func (s *hostState) settleCold(sc *scope) {
	if c, ok := s.cold.Load(sc.key); ok {
		if n, start := c.(*waveCount).take(sc.since); n > 0 {
			sc.pacer.settle(n, start)
		}
	}
}

// waveCount counts successes by the second they were sent in, the current
// and the one before: what a server's bucket let through shortly before
// its first throttle, not the traffic of hours that it absorbed.
type waveCount struct {
	second    atomic.Int64 // Unix second of cur
	cur, prev atomic.Int64
	// The earliest send counted in each, in Unix nanoseconds (0: none),
	// as seen by whichever success came first: near enough, as waves
	// are sent in order.
	curStart, prevStart atomic.Int64
}

func (c *waveCount) add(sent time.Time) {
	at := sent.Unix()
	for {
		s := c.second.Load()
		if at <= s {
			switch at {
			case s:
				c.cur.Add(1)
				c.curStart.CompareAndSwap(0, sent.UnixNano())
			case s - 1:
				c.prev.Add(1)
				c.prevStart.CompareAndSwap(0, sent.UnixNano())
			}
			return
		}
		if c.second.CompareAndSwap(s, at) {
			// Successes counted between the swap and the moves land in the
			// second before: still counted, at worst a second early.
			n, start := c.cur.Swap(0), c.curStart.Swap(0)
			if at != s+1 {
				n, start = 0, 0
			}
			c.prev.Store(n)
			c.prevStart.Store(start)
		}
	}
}

// take returns and clears the successes of the second of now and the one
// before, and the earliest send among them.
func (c *waveCount) take(now time.Time) (int, time.Time) {
	n := c.cur.Swap(0) + c.prev.Swap(0)
	start := c.prevStart.Swap(0)
	if cur := c.curStart.Swap(0); start == 0 {
		start = cur
	}
	if n == 0 || c.second.Load() < now.Unix()-1 {
		return 0, time.Time{} // counted too long ago
	}
	return int(n), time.Unix(0, start)
}

// prune drops entries whose recovery window has passed and, past
// maxTracked of a kind, the oldest ones, so that exactly the newest
// maxTracked remain: the newest throttle is always kept.
func (q *Queue) prune(s *hostState, now time.Time) {
	if len(s.urls) <= q.maxTracked && len(s.paths) <= q.maxTracked &&
		len(s.prefixes) <= q.maxTracked && len(s.scopes) <= q.maxTracked {
		return
	}
	expired := func(end time.Time) bool { return !now.Before(end.Add(q.recovery)) }
	for _, m := range []map[string]entry{s.urls, s.paths} {
		for k, e := range m {
			if expired(e.end) {
				delete(m, k)
			}
		}
		keepNewest(m, q.maxTracked, func(e entry) uint64 { return e.seq })
	}
	for k, p := range s.prefixes {
		if expired(p.ends[0]) && !q.probing(p, now) {
			delete(s.prefixes, k)
		}
	}
	keepNewest(s.prefixes, q.maxTracked, func(p *prefix) uint64 { return p.seq })
	for k, sc := range s.scopes {
		if !q.recovering(sc, now) && !sc.budget.live(now, q.recovery) && len(sc.waiters) == 0 {
			delete(s.scopes, k)
		}
	}
	// A scope with waiters is never dropped: they would wait for no one.
	keepNewest(s.scopes, q.maxTracked, func(sc *scope) uint64 {
		if len(sc.waiters) > 0 {
			return ^uint64(0)
		}
		return sc.seq
	})
}

// keepNewest deletes the entries of m throttled first, so that exactly
// keep remain when there were more. Entries are aged by the sequence
// number of their last throttle, not by when it ends, so throttles that
// end at the same instant are told apart.
func keepNewest[V any](m map[string]V, keep int, seq func(V) uint64) {
	excess := len(m) - keep
	if excess <= 0 {
		return
	}
	type aged struct {
		key string
		seq uint64
	}
	all := make([]aged, 0, len(m))
	for k, v := range m {
		all = append(all, aged{k, seq(v)})
	}
	// The prefixes of one throttle share its number: the longer key, the
	// narrower prefix, goes first.
	slices.SortFunc(all, func(a, b aged) int {
		if a.seq != b.seq {
			return cmp.Compare(a.seq, b.seq)
		}
		return cmp.Compare(len(b.key), len(a.key))
	})
	for _, a := range all[:excess] {
		delete(m, a.key)
	}
}

// Admit waits until an attempt of req may be sent: not before notBefore,
// not while a throttle it matches lasts, and in FIFO order at its scope's
// pace while that scope recovers. A hold inferred only from throttles of
// requests sharing its first segments is tested: one matching request at a
// time goes as a probe. A hold that would pass deadline (zero: none; the
// caller includes the context's deadline, in the queue's clock) is not
// made: Admit returns a *HoldError (ErrHoldTooLong) at once, saying until
// when, and the caller decides; but a request held by the server's own word (a throttle of its URL or path)
// whose hold fits is let go when that hold ends, even if its scope's pace
// would start later. Admit returns the context's error if it
// ends first. obs, when not nil, hears
// when the request is held and released.
func (q *Queue) Admit(ctx context.Context, req *http.Request, notBefore, deadline time.Time, obs Observer) (Pass, error) {
	s := q.state(hostKey(req), false)
	if s == nil || !s.active.Load() {
		err := wait.Until(ctx, q.clock, notBefore)
		return Pass{Sent: later(q.clock.Now(), notBefore), host: s}, err
	}
	p, err := q.acquire(ctx, s, q.newTarget(req), notBefore, deadline, obs)
	p.Sent, p.host = q.clock.Now(), s
	return p, err
}

// Report tells the queue what the server answered to an admitted attempt
// of req: o, for a throttle how long it holds its target, and the answer's
// header (nil for none), whose rate-limit fields, when it has any, say how
// much of its scope's budget is left. back returns when the answer came;
// it is called only when needed.
func (q *Queue) Report(req *http.Request, p Pass, o Outcome, hold time.Duration, header http.Header, back func() time.Time) {
	// Rate-limit fields are parsed before the host's lock is taken: what a
	// server sends costs the request it came with, not the host's others.
	var (
		now       time.Time
		budget    ratelimit.Budget
		announces bool
	)
	if ratelimit.Announced(header) {
		now = back()
		budget, announces = parseBudget(header, now)
	}
	s := p.host
	if s == nil {
		s = q.state(hostKey(req), o == Throttled || o == Succeeded || announces && budget.NearlySpent())
		if s == nil {
			return
		}
	}
	// A budget with room, on a host that follows none, says nothing to act
	// on (announce would drop it): it costs no lock.
	announces = announces && (budget.NearlySpent() || s.active.Load())
	if o != Throttled && p.probe == nil && p.scope == nil && !announces {
		if o == Succeeded {
			s.seen.Store(p.Sent.Unix())
			q.succeeded(s, req, p.Sent, back)
		}
		return
	}
	if now.IsZero() {
		now = back()
	}
	s.seen.Store(now.Unix())
	t := q.newTarget(req)
	s.mu.Lock()
	if s.forgotten {
		// Swept while the attempt was out: what it reports goes to the
		// host's state as it is now, where the scope and probe that let it
		// go are no more.
		s.mu.Unlock()
		s = q.lockedState(t.host)
		s.seen.Store(now.Unix())
		p.scope, p.probe, p.paced = nil, nil, false
	}
	if p.scope != nil {
		p.scope.inflight--
	}
	if announces {
		q.announce(s, t, budget, p.Sent, now)
	}
	switch {
	case o == Throttled:
		end := now.Add(hold)
		if end.Before(now) { // saturated
			end = time.Unix(1<<62, 0)
		}
		if p.probe != nil {
			p.probe.probing = time.Time{}
			p.probe.confirmed = end
		}
		q.record(s, t, p.Sent, now, end, p.paced && p.probe == nil)
		s.mu.Unlock()
		return
	case p.probe == nil:
	case o == Succeeded:
		// The inference was wrong: lift the prefix's hold. Its scope, if it
		// has one, still paces while it recovers.
		p.probe.ends = p.probe.ends[:0]
		p.probe.probing = time.Time{}
		// The waiters it held sank behind the heads held by the server's
		// word, and only a head looks again: each is eligible from its own
		// time again, and looks again when its turn comes.
		for _, sc := range s.scopes {
			sc.waiters.reset()
		}
		if sc := q.match(s, t, now).scope; sc != nil {
			if p.Sent.Before(sc.since) {
				sc.pacer.settle(1, p.Sent)
			}
			sc.pacer.succeeded(p.Sent, now)
		}
	default:
		p.probe.probing = time.Time{}
	}
	for _, sc := range s.scopes {
		sc.kick()
	}
	s.mu.Unlock()
	if o == Succeeded && p.probe == nil {
		q.succeeded(s, req, p.Sent, back)
	}
}

// parseBudget reads the budget an answer's header announces; a variable
// so that tests can see when it runs.
var parseBudget = ratelimit.Parse

// announce takes budget b, announced at now in the answer to t sent at
// sent. A scope starts following a budget once the server says it is
// nearly spent; from then on its host's requests go through the queue, and
// its releases keep within what the server says is left.
func (q *Queue) announce(s *hostState, t *target, b ratelimit.Budget, sent, now time.Time) {
	key := t.scope()
	sc := s.scopes[key]
	if sc == nil || !sc.budget.live(now, q.recovery) {
		if !b.NearlySpent() {
			return // room enough: nothing to follow
		}
		sc = q.scopeFor(s, key, time.Time{})
		s.seq++
		sc.seq = s.seq
		sc.budget.refresh(b, sent, now, sc.inflight)
		s.active.Store(true)
		q.prune(s, now)
		return
	}
	sc.budget.refresh(b, sent, now, sc.inflight)
}

// ErrHoldTooLong is wrapped by the *HoldError Admit returns, at once, when
// the throttles the request matches would hold it past its deadline: a retry is better not
// made, and the answer in hand returned; a first attempt, with no answer in
// hand, is best sent at once for the server to answer.
var ErrHoldTooLong = errors.New("throttle: held past the request's limits")

// acquire blocks the calling request until it may be sent. It returns
// ErrHoldTooLong when release would come after deadline.
func (q *Queue) acquire(ctx context.Context, s *hostState, t *target, notBefore, deadline time.Time, obs Observer) (pass Pass, err error) {
	s.mu.Lock()
	now := q.clock.Now()
	h := q.match(s, t, now)
	eligible := later(notBefore, h.until)
	// named is set once the server's own word (a throttle of this URL or
	// path) holds the request: the pace never cuts that hold short.
	named := h.until.After(now)
	if h.probe != nil && !q.mayProbe(h.probe, now) {
		eligible = later(eligible, h.inferred)
	}
	if !deadline.IsZero() && eligible.After(deadline) {
		s.mu.Unlock()
		return Pass{}, &HoldError{Until: eligible}
	}
	sc := h.scope
	if sc == nil {
		if h.probe == nil && !eligible.After(now) {
			// Nothing holds it and no scope paces it: it goes at once and
			// leaves no state behind, however many collections a host has.
			s.mu.Unlock()
			return Pass{}, nil
		}
		// Held, by inference or by a hold that outlived its scope, in a
		// collection that was not throttled lately: it waits in that
		// collection's queue, so that one probe goes at a time and the
		// rest do not all leave at the hold's end at once. The scope is
		// dropped once it holds no one (dropIdle).
		sc = q.scopeFor(s, t.scope(), time.Time{})
	}
	s.seq++
	w := &waiter{notBefore: notBefore, eligible: eligible, seq: s.seq, wake: make(chan struct{}, 1)}
	var prev *waiter
	if len(sc.waiters) > 0 {
		prev = sc.waiters[0]
	}
	heap.Push(&sc.waiters, w)
	if prev != nil && sc.waiters[0] == w {
		signal(prev) // it is no longer the head
	}
	// Held means kept past the request's own time by the queue; waiting out
	// its own delay is not.
	held := func(now, at time.Time) {
		if own := later(now, notBefore); at.After(own) && obs != nil {
			obs.Held(ctx, at.Sub(own))
		}
	}
	held(now, w.eligible)
	if obs != nil {
		defer obs.Released(ctx)
	}
	for {
		if sc.waiters[0] == w {
			now = q.clock.Now()
			h = q.match(s, t, now)
			e := later(w.notBefore, h.until)
			named = named || h.until.After(now)
			probe := h.probe != nil && q.mayProbe(h.probe, now)
			if h.probe != nil && !probe {
				e = later(e, h.inferred)
			}
			if !e.Equal(w.eligible) {
				w.eligible = e
				heap.Fix(&sc.waiters, w.index)
				if sc.waiters[0] != w {
					sc.kick()
					continue
				}
			}
			pace := sc.pacer.next(now)
			if q.counting(sc, now) {
				pace = sc.budget.next(now, sc.inflight)
			}
			at := later(w.eligible, pace)
			if !deadline.IsZero() && at.After(deadline) && named && !w.eligible.After(deadline) {
				// The pace would start past the deadline, but the time the
				// server named fits: the request waits that and no more,
				// rather than being refused and then sent at once into
				// the throttle the server named.
				at = w.eligible
			}
			if !deadline.IsZero() && at.After(deadline) {
				heap.Remove(&sc.waiters, w.index)
				sc.kick()
				q.dropIdle(s, sc, now)
				s.mu.Unlock()
				return Pass{}, &HoldError{Until: at}
			}
			if !at.After(now) {
				heap.Remove(&sc.waiters, w.index)
				sc.pacer.sent(now)
				sc.budget.sent()
				sc.inflight++
				pass.scope = sc
				pass.paced = h.scope == sc && !sc.since.IsZero()
				if probe {
					h.probe.probing = now
					pass.probe = h.probe
				}
				sc.kick()
				q.dropIdle(s, sc, now)
				s.mu.Unlock()
				return pass, nil
			}
			s.mu.Unlock()
			held(now, at)
			err = wait.Woken(ctx, q.clock, at.Sub(now), w.wake)
		} else {
			// Behind others it leaves no earlier than it becomes eligible,
			// and not at all once its deadline has come: refuse it then
			// rather than when its turn comes, maybe long after.
			now = q.clock.Now()
			if !deadline.IsZero() && (w.eligible.After(deadline) || !now.Before(deadline)) {
				heap.Remove(&sc.waiters, w.index)
				// Behind others: no sooner than its own time and the
				// scope's next release.
				until := later(later(w.eligible, now), sc.pacer.next(now))
				q.dropIdle(s, sc, now)
				s.mu.Unlock()
				return Pass{}, &HoldError{Until: until}
			}
			s.mu.Unlock()
			held(now, now.Add(time.Nanosecond))
			untilDeadline := time.Duration(-1)
			if !deadline.IsZero() {
				untilDeadline = deadline.Sub(now)
			}
			err = wait.Woken(ctx, q.clock, untilDeadline, w.wake)
		}
		s.mu.Lock()
		if err != nil {
			top := sc.waiters[0] == w
			heap.Remove(&sc.waiters, w.index)
			if top {
				sc.kick()
			}
			q.dropIdle(s, sc, q.clock.Now())
			s.mu.Unlock()
			return Pass{}, err
		}
	}
}

// dropIdle forgets sc when it was made only to hold requests and holds
// none now: never throttled and following no budget, it knows nothing
// worth keeping, and kept it would cost every later answer of the host.
func (q *Queue) dropIdle(s *hostState, sc *scope, now time.Time) {
	if sc.since.IsZero() && len(sc.waiters) == 0 && !sc.budget.live(now, q.recovery) && s.scopes[sc.key] == sc {
		delete(s.scopes, sc.key)
	}
}

// probing reports whether a probe of p is out. One whose answer never came
// (its request was canceled) is given up after the recovery window.
func (q *Queue) probing(p *prefix, now time.Time) bool {
	return !p.probing.IsZero() && now.Before(p.probing.Add(q.recovery))
}

// mayProbe reports whether a request held only by p may go to test it: no
// other probe is out and no throttled probe confirmed the hold until later.
func (q *Queue) mayProbe(p *prefix, now time.Time) bool {
	return !q.probing(p, now) && !now.Before(p.confirmed)
}

// Active reports whether the host req names was ever throttled (and not
// since forgotten): only then may Admit hold its attempts.
func (q *Queue) Active(req *http.Request) bool {
	s := q.state(hostKey(req), false)
	return s != nil && s.active.Load()
}

// kick wakes the head waiter so that it looks at the state again.
func (sc *scope) kick() {
	if len(sc.waiters) > 0 {
		signal(sc.waiters[0])
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waiter is one request held in a scope's queue.
type waiter struct {
	notBefore time.Time
	eligible  time.Time
	seq       uint64
	index     int
	wake      chan struct{}
}

// waiterHeap orders waiters by when they become eligible, then by arrival,
// so that requests released by the same throttle's end leave in FIFO order.
type waiterHeap []*waiter

func (h waiterHeap) Len() int { return len(h) }

// reset makes every waiter eligible from its own notBefore again.
func (h *waiterHeap) reset() {
	for _, w := range *h {
		w.eligible = w.notBefore
	}
	heap.Init(h)
}

func (h waiterHeap) Less(i, j int) bool {
	if c := h[i].eligible.Compare(h[j].eligible); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}
