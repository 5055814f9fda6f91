package middleware

import (
	"container/heap"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// errHoldTooLong is returned by queue.acquire when the request would be
// released only after the latest time it may be sent.
var errHoldTooLong = errors.New("held past the retry limits")

// Defaults of options.QueueOptions.
const (
	defaultRecovery   = 10 * time.Second
	defaultMaxTracked = 1024
	// segmentRuleBase is the 5 of the design's 5-n rule: a request sharing
	// its first n path segments with 5-n throttled requests is held.
	segmentRuleBase = 5
	// maxPrefixEnds is the most throttled requests the rule ever counts.
	maxPrefixEnds = segmentRuleBase - 1
)

// queue holds requests back while what they target is throttled (R14,
// R15) and then releases them in FIFO order at a pace learned from the
// server's answers. One queue serves every request through a handler.
type queue struct {
	clock      options.Clock
	recovery   time.Duration
	maxTracked int
	newPacer   func(now time.Time) pacer
	hosts      sync.Map // host → *hostState
}

func newQueue(clock options.Clock, o options.QueueOptions) *queue {
	q := &queue{clock: clock, recovery: o.Recovery, maxTracked: o.MaxTracked}
	if q.recovery == 0 {
		q.recovery = defaultRecovery
	}
	if q.maxTracked == 0 {
		q.maxTracked = defaultMaxTracked
	}
	q.newPacer = func(now time.Time) pacer { return newAdaptivePacer(now) }
	return q
}

// target is what the matching rules look at in a request.
type target struct {
	host string
	url  string
	path string
	segs []string
}

func newTarget(req *http.Request) *target {
	u := req.URL
	t := &target{host: u.Host, path: u.Path, url: u.Path}
	if u.RawQuery != "" {
		t.url = u.Path + "?" + u.RawQuery
	}
	for s := range strings.SplitSeq(u.Path, "/") {
		if s != "" {
			t.segs = append(t.segs, s)
		}
	}
	return t
}

// api returns the first path segment, which names the API a request
// calls; "" when the path has none.
func (t *target) api() string { return apiOf(t.path) }

// apiOf returns the first segment of path without splitting the whole of
// it, so that a success need not build a target.
func apiOf(path string) string {
	seg, _, _ := strings.Cut(strings.TrimLeft(path, "/"), "/")
	return seg
}

// prefix returns the key of the first n segments.
func (t *target) prefix(n int) string { return strings.Join(t.segs[:n], "/") }

// hostState is everything the queue knows about one host.
type hostState struct {
	// active turns true at the host's first throttle; until then its
	// requests skip the queue without taking the lock.
	active atomic.Bool
	// cold counts, without the lock, the recent successes of each API of
	// the host (its first path segment) while it was not active; the first
	// throttle moves the count of its own API to the pacer, as the burst
	// the server let through.
	cold     sync.Map // first path segment → *waveCount
	apis     atomic.Int32
	mu       sync.Mutex
	since    time.Time // the first throttle, when the host became active
	api      string    // the first throttled request's first path segment
	urls     map[string]time.Time
	paths    map[string]time.Time
	prefixes map[string][]time.Time // newest first, at most maxPrefixEnds
	pacer    pacer
	waiters  waiterHeap
	seq      uint64
}

func (q *queue) state(host string, create bool) *hostState {
	if s, ok := q.hosts.Load(host); ok {
		return s.(*hostState)
	}
	if !create {
		return nil
	}
	s, _ := q.hosts.LoadOrStore(host, &hostState{
		urls:     map[string]time.Time{},
		paths:    map[string]time.Time{},
		prefixes: map[string][]time.Time{},
		pacer:    q.newPacer(q.clock.Now()),
	})
	return s.(*hostState)
}

// match returns until when t is held by an active throttle (a time not
// after now when it is not), and whether t matches a throttle that ended
// less than the recovery window ago, so that its release is paced.
func (q *queue) match(s *hostState, t *target, now time.Time) (until time.Time, paced bool) {
	consider := func(end time.Time) {
		if end.After(until) {
			until = end
		}
		if now.Before(end.Add(q.recovery)) {
			paced = true
		}
	}
	if end, ok := s.urls[t.url]; ok {
		consider(end)
	}
	if end, ok := s.paths[t.path]; ok {
		consider(end)
	}
	for n := 1; n <= len(t.segs); n++ {
		ends := s.prefixes[t.prefix(n)]
		need := max(segmentRuleBase-n, 1)
		if len(ends) < need {
			continue
		}
		// ends is newest first: the need-th newest is when fewer than
		// need of them are still active.
		consider(ends[need-1])
	}
	return until, paced
}

// throttled records that t was throttled until end (R15's bookkeeping).
func (q *queue) throttled(t *target, sent, now, end time.Time) {
	s := q.state(t.host, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active.Load() {
		s.since, s.api = now, t.api()
		s.active.Store(true)
		s.settleCold()
	}
	s.urls[t.url] = later(s.urls[t.url], end)
	s.paths[t.path] = later(s.paths[t.path], end)
	for n := 1; n <= len(t.segs); n++ {
		k := t.prefix(n)
		ends := append(s.prefixes[k], end)
		slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
		if len(ends) > maxPrefixEnds {
			ends = ends[:maxPrefixEnds]
		}
		s.prefixes[k] = ends
	}
	q.prune(s, now)
	s.pacer.throttled(sent, now, end)
	s.kick()
}

// succeeded feeds a request's success to the host's pacer. The first
// throttle needs to know how many of the requests sent shortly before it
// to its API succeeded; until then a success costs a few atomic
// operations, not the lock.
func (s *hostState) succeeded(sent time.Time, api string, back *reading) {
	if !s.active.Load() {
		if testHookCold != nil {
			testHookCold()
		}
		c := s.count(api)
		if c == nil {
			return
		}
		c.add(sent)
		if !s.active.Load() {
			return
		}
		// The first throttle came meanwhile and may have settled the
		// count before this success was in it.
		s.mu.Lock()
		s.settleCold()
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	if sent.Before(s.since) && api == s.api {
		// Sent before the first throttle came back: part of the same wave.
		s.pacer.settle(1, sent)
	}
	s.pacer.succeeded(sent, back.now())
	s.mu.Unlock()
}

// maxAPIs bounds the APIs of a host whose successes are counted before its
// first throttle.
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

// settleCold hands the successes of the first throttled API counted while
// the host was not active to its pacer. It is called with s.mu held, after
// active is set, so that a success either is in the count it takes or
// sees active and settles itself.
func (s *hostState) settleCold() {
	if c, ok := s.cold.Load(s.api); ok {
		if n, start := c.(*waveCount).take(s.since); n > 0 {
			s.pacer.settle(n, start)
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
// maxTracked, the ones that end first.
func (q *queue) prune(s *hostState, now time.Time) {
	if len(s.urls)+len(s.paths)+len(s.prefixes) <= q.maxTracked {
		return
	}
	expired := func(end time.Time) bool { return !now.Before(end.Add(q.recovery)) }
	for _, m := range []map[string]time.Time{s.urls, s.paths} {
		for k, end := range m {
			if expired(end) {
				delete(m, k)
			}
		}
	}
	for k, ends := range s.prefixes {
		if expired(ends[0]) {
			delete(s.prefixes, k)
		}
	}
	// Each kind keeps a quarter of the cap, so that a quarter stays free
	// and pruning, which sorts, runs once in many throttles, not at each.
	keep := q.maxTracked / 4
	dropEarliest(s.urls, keep, func(end time.Time) time.Time { return end })
	dropEarliest(s.paths, keep, func(end time.Time) time.Time { return end })
	// A prefix's newest end is when it last mattered: a prefix shared by
	// many throttled requests, the one the 5-n rule holds by, is kept.
	dropEarliest(s.prefixes, keep, func(ends []time.Time) time.Time { return ends[0] })
}

// dropEarliest deletes the entries of m that end first, so that at most
// keep remain.
func dropEarliest[V any](m map[string]V, keep int, end func(V) time.Time) {
	excess := len(m) - keep
	if excess <= 0 {
		return
	}
	ends := make([]time.Time, 0, len(m))
	for _, v := range m {
		ends = append(ends, end(v))
	}
	slices.SortFunc(ends, time.Time.Compare)
	cut := ends[excess-1]
	for k, v := range m {
		if !end(v).After(cut) {
			delete(m, k)
		}
	}
}

// idle reports whether the host of s (nil when the queue never heard of
// it) was never throttled, so that its requests need no queue at all.
func idle(s *hostState) bool {
	return s == nil || !s.active.Load()
}

// acquire blocks the calling request until it may be sent: not before
// notBefore, not while a throttle it matches lasts, and, when it matches a
// recent throttle, in FIFO order at its host's pace. It returns nil, or
// errHoldTooLong when release would come after deadline (a zero deadline
// means none), or the context's error. obs hears when the request is held
// and released.
func (q *queue) acquire(ctx context.Context, t *target, notBefore, deadline time.Time, obs *observer) (err error) {
	s := q.state(t.host, false)
	if s == nil {
		return sleepUntil(ctx, q.clock, notBefore)
	}
	s.mu.Lock()
	now := q.clock.Now()
	until, paced := q.match(s, t, now)
	if !paced {
		s.mu.Unlock()
		return sleepUntil(ctx, q.clock, notBefore)
	}
	if !deadline.IsZero() && later(notBefore, until).After(deadline) {
		// Refused before it is held at all: nothing to report as held.
		s.mu.Unlock()
		return errHoldTooLong
	}
	w := &waiter{t: t, notBefore: notBefore, eligible: later(notBefore, until), seq: s.seq, wake: make(chan struct{}, 1)}
	s.seq++
	var prev *waiter
	if len(s.waiters) > 0 {
		prev = s.waiters[0]
	}
	heap.Push(&s.waiters, w)
	if prev != nil && s.waiters[0] == w {
		signal(prev) // it is no longer the head
	}
	// Held means kept past the request's own time by the queue; waiting out
	// its own delay is not.
	held := func(now, at time.Time) {
		if own := later(now, notBefore); at.After(own) {
			obs.held(ctx, at.Sub(own))
		}
	}
	held(now, w.eligible)
	defer obs.released(ctx)
	for {
		if s.waiters[0] == w {
			now = q.clock.Now()
			until, _ = q.match(s, t, now)
			if e := later(w.notBefore, until); !e.Equal(w.eligible) {
				w.eligible = e
				heap.Fix(&s.waiters, w.index)
				if s.waiters[0] != w {
					s.kick()
					continue
				}
			}
			at := later(w.eligible, s.pacer.next(now))
			if !deadline.IsZero() && at.After(deadline) {
				heap.Remove(&s.waiters, w.index)
				s.kick()
				s.mu.Unlock()
				return errHoldTooLong
			}
			if !at.After(now) {
				heap.Remove(&s.waiters, w.index)
				s.pacer.sent(now)
				s.kick()
				s.mu.Unlock()
				return nil
			}
			s.mu.Unlock()
			held(now, at)
			err = waitFor(ctx, q.clock, at.Sub(now), w.wake)
		} else {
			// Behind others it leaves no earlier than it becomes eligible,
			// and not at all once its deadline has come: refuse it then
			// rather than when its turn comes, maybe long after.
			now = q.clock.Now()
			if !deadline.IsZero() && (w.eligible.After(deadline) || !now.Before(deadline)) {
				heap.Remove(&s.waiters, w.index)
				s.mu.Unlock()
				return errHoldTooLong
			}
			s.mu.Unlock()
			held(now, now.Add(time.Nanosecond))
			wait := time.Duration(-1)
			if !deadline.IsZero() {
				wait = deadline.Sub(now)
			}
			err = waitFor(ctx, q.clock, wait, w.wake)
		}
		s.mu.Lock()
		if err != nil {
			top := s.waiters[0] == w
			heap.Remove(&s.waiters, w.index)
			if top {
				s.kick()
			}
			s.mu.Unlock()
			return err
		}
	}
}

// kick wakes the head waiter so that it looks at the state again.
func (s *hostState) kick() {
	if len(s.waiters) > 0 {
		signal(s.waiters[0])
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// waitFor waits for d (none when d < 0), a wake signal, or ctx's end.
func waitFor(ctx context.Context, clock options.Clock, d time.Duration, wake <-chan struct{}) error {
	if d < 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
			return nil
		}
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-t.C():
	}
	return nil
}

// sleepUntil waits until at, or until ctx ends.
func sleepUntil(ctx context.Context, clock options.Clock, at time.Time) error {
	d := at.Sub(clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waiter is one request held in a host's queue.
type waiter struct {
	t         *target
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
