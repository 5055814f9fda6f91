package throttle

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hostState is everything the queue knows about one host.
type hostState struct {
	// active turns true at the host's first throttle or announced budget;
	// until then its requests skip the queue without taking the lock.
	active atomic.Bool
	// seen is the Unix second of the last answer, so that an idle host
	// can be forgotten.
	seen atomic.Int64
	// wave counts, without the lock, the successes of the host before its
	// first throttle: what the server let through, should the host turn
	// out to be one budget.
	wave waveCount
	// apis counts the same successes by the API they went to (made by the
	// host's first success): a host may keep a budget per API (nginx's
	// zones, Graph's services), and each API's first budget takes what
	// the server let through to that API.
	apis atomic.Pointer[apiWaves]
	// succeeded is when the latest success was sent, in Unix nanoseconds.
	succeeded atomic.Int64
	// served and refused count, by the second, the successes and the 503s
	// without Retry-After, for Refused to tell a capacity limit.
	served, refused waveCount
	// refusedRun counts the 503s without Retry-After answered since the
	// host's latest success was: a limiter refuses a wave's overflow in a
	// row (Refused).
	refusedRun atomic.Int64
	// refusals counts the same 503s, and the successes, since the first
	// of the latest of them (Refused).
	refusals refusalEpisode
	// fleet is what the queue exchanged with its store about the host.
	fleet fleetHost
	// capServed is when a request that held a concurrency cap's slot was
	// first sent and then served, in Unix nanoseconds; 0 until one was
	// (caps.go).
	capServed atomic.Int64

	mu sync.Mutex
	// forgotten is set, under mu, when sweep drops the host: an answer to
	// a request admitted before then goes to the host's new state, so that
	// a late 429 is not lost with the old one.
	forgotten   bool
	lastEnd     time.Time // the latest end of any throttle of the host
	lastSuccess time.Time // when the latest success came back
	servedSent  time.Time // when the latest request it served was sent
	// early are the waiters whose policy's delay ends once it serves a
	// request sent after their refusal (Queue.AdmitEarly).
	early []*waiter
	urls  map[string]*entry
	paths map[string]*entry
	nodes map[string]*node
	seq   uint64 // orders throttles and waiters
}

// entry is an exact URL or path the server throttled until end: its own
// word, which holds it and nothing else.
type entry struct {
	end time.Time
	at  time.Time // when its last throttle came back
	// named is the end of the latest wait the server named for it, held
	// or not.
	named time.Time
	seq   uint64
	// strikes counts its throttles in a row after waiting out its own
	// Retry-After while others succeeded; locked at lockedStrikes.
	strikes int
}

// state returns the state of host, nil when it has none and create is
// false. Creating one sweeps, at most once a recovery window, the hosts
// idle at now.
func (q *Queue) state(host string, create bool, now time.Time) *hostState {
	if create {
		q.sweep(now)
	}
	if s, ok := q.hosts.Load(host); ok {
		return s.(*hostState)
	}
	if !create {
		return nil
	}
	s, _ := q.hosts.LoadOrStore(host, &hostState{})
	return s.(*hostState)
}

// lockedState returns the current state of host, made when there is
// none, with its lock held.
func (q *Queue) lockedState(host string, now time.Time) *hostState {
	for {
		s := q.state(host, true, now)
		s.mu.Lock()
		if !s.forgotten {
			return s
		}
		s.mu.Unlock()
	}
}

// activate turns on the queue for s; the caller holds s.mu.
func (s *hostState) activate() {
	if s.nodes == nil {
		s.urls, s.paths, s.nodes = map[string]*entry{}, map[string]*entry{}, map[string]*node{}
	}
	s.active.Store(true)
}

// node returns the node of key at depth, made when there is none.
func (s *hostState) node(key string, depth int) *node {
	n := s.nodes[key]
	if n == nil {
		n = &node{key: key, depth: depth}
		s.nodes[key] = n
	}
	return n
}

// sweep forgets the hosts that had no throttle for the recovery window and
// no answer in it either. It runs as answers come, at most once a recovery
// window, so that state grows only with the hosts in use.
func (q *Queue) sweep(now time.Time) {
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
		if now.After(s.lastEnd.Add(q.recovery)) && !s.busy(now, q.recovery) {
			s.forgotten = true
			q.hosts.CompareAndDelete(k, s)
		}
		return true
	})
}

// busy reports whether a request waits at s or a budget still speaks.
func (s *hostState) busy(now time.Time, recovery time.Duration) bool {
	for _, n := range s.nodes {
		if n.holds() || n.budget.live(now, recovery) {
			return true
		}
	}
	return false
}

// prune drops entries and nodes whose recovery window has passed and,
// past maxTracked of a kind, the oldest ones, so that exactly the newest
// maxTracked remain: the newest throttle is always kept.
func (q *Queue) prune(s *hostState, now time.Time) {
	if len(s.urls) <= q.maxTracked && len(s.paths) <= q.maxTracked && len(s.nodes) <= q.maxTracked {
		return
	}
	expired := func(end time.Time) bool { return !now.Before(end.Add(q.recovery)) }
	for _, m := range []map[string]*entry{s.urls, s.paths} {
		for k, e := range m {
			if expired(e.end) {
				delete(m, k)
			}
		}
		keepNewest(m, q.maxTracked, func(e *entry) uint64 { return e.seq })
	}
	for k, n := range s.nodes {
		if !n.holds() && !n.live(now, q.recovery) &&
			(len(n.marks) == 0 || !now.Before(n.marks[0].until)) {
			delete(s.nodes, k)
		}
	}
	// A node with waiters is never dropped: they would wait for no one.
	keepNewest(s.nodes, q.maxTracked, func(n *node) uint64 {
		if n.holds() {
			return ^uint64(0)
		}
		return n.seq
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
	// The nodes of one throttle share its number: the longer key, the
	// narrower node, goes first.
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

// apiSlots bounds the APIs of a host whose first wave is counted apart;
// the successes to an API past them count in the host's wave alone. A
// first wave overruns a few APIs at once (nginx's three zones; Graph's
// users and mailboxes, which are one API, sites and drives), and each
// slot costs every host that answered 48 bytes until it is forgotten.
const apiSlots = 4

// apiWaves counts a host's first wave by API: the first path segment
// below the service root (the first of segments). The slots are claimed
// without a lock, each by the first success to its API.
type apiWaves [apiSlots]struct {
	name  atomic.Pointer[string]
	count waveCount
}

// addWave counts a success to api, sent at sent, in the host's wave and
// in that of its API.
func (s *hostState) addWave(api string, sent time.Time, took time.Duration) {
	s.wave.addTook(sent, took)
	s.addAPIWave(api, sent, took)
}

// addAPIWave counts a success to api, sent at sent, in the wave of its
// API alone.
func (s *hostState) addAPIWave(api string, sent time.Time, took time.Duration) {
	if api == "" {
		return
	}
	w := s.apis.Load()
	if w == nil {
		s.apis.CompareAndSwap(nil, new(apiWaves))
		w = s.apis.Load()
	}
	if c := w.find(api, true); c != nil {
		c.addTook(sent, took)
	}
}

// takeAPI returns and clears the successes to api of the second of now
// and the one before, as waveCount.take, and whether api was counted
// apart.
func (s *hostState) takeAPI(api string, now time.Time) (waveTally, bool) {
	w := s.apis.Load()
	if w == nil {
		return waveTally{}, false
	}
	c := w.find(api, false)
	if c == nil {
		return waveTally{}, false
	}
	return c.take(now), true
}

// find returns the count of api, claiming a free slot for it when claim
// is set, or nil when it has none.
func (w *apiWaves) find(api string, claim bool) *waveCount {
	for i := range w {
		name := w[i].name.Load()
		if name == nil {
			if !claim {
				return nil
			}
			kept := strings.Clone(api) // not the request's whole path
			if w[i].name.CompareAndSwap(nil, &kept) {
				return &w[i].count
			}
			name = w[i].name.Load()
		}
		if *name == api {
			return &w[i].count
		}
	}
	return nil
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
	// The longest a success counted in each took to be answered, in
	// nanoseconds: how long the server holds a request it serves, and so
	// how long the wave's last requests may still be out after its first
	// throttle.
	curTook, prevTook atomic.Int64
}

// add counts an answer to a request sent at sent.
func (c *waveCount) add(sent time.Time) { c.addTook(sent, 0) }

// addTook counts a success sent at sent and answered took later.
func (c *waveCount) addTook(sent time.Time, took time.Duration) {
	at := sent.Unix()
	for {
		s := c.second.Load()
		if at <= s {
			switch at {
			case s:
				c.cur.Add(1)
				c.curStart.CompareAndSwap(0, sent.UnixNano())
				atomicMax(&c.curTook, int64(took))
			case s - 1:
				c.prev.Add(1)
				c.prevStart.CompareAndSwap(0, sent.UnixNano())
				atomicMax(&c.prevTook, int64(took))
			}
			return
		}
		if c.second.CompareAndSwap(s, at) {
			// Successes counted between the swap and the moves land in the
			// second before: still counted, at worst a second early.
			n, start, took := c.cur.Swap(0), c.curStart.Swap(0), c.curTook.Swap(0)
			if at != s+1 {
				n, start, took = 0, 0, 0
			}
			c.prev.Store(n)
			c.prevStart.Store(start)
			c.prevTook.Store(took)
		}
	}
}

// atomicMax raises v to at least x.
func atomicMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if old >= x || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// waveTally is what a waveCount counted: n successes, the earliest sent
// at start, the slowest answered took after it was sent.
type waveTally struct {
	n     int
	start time.Time
	took  time.Duration
}

// take returns and clears the successes of the second of now and the one
// before.
func (c *waveCount) take(now time.Time) waveTally {
	n := c.cur.Swap(0) + c.prev.Swap(0)
	start := c.prevStart.Swap(0)
	if cur := c.curStart.Swap(0); start == 0 {
		start = cur
	}
	took := max(c.curTook.Swap(0), c.prevTook.Swap(0))
	if n == 0 || c.second.Load() < now.Unix()-1 {
		return waveTally{} // counted too long ago
	}
	return waveTally{int(n), time.Unix(0, start), time.Duration(took)}
}

// recent returns the count of the second of now and the one before.
func (c *waveCount) recent(now time.Time) int {
	switch c.second.Load() {
	case now.Unix():
		return int(c.cur.Load() + c.prev.Load())
	case now.Unix() - 1:
		return int(c.cur.Load())
	}
	return 0
}

// countServed counts a success sent at sent: in the host's recent
// answers, in its refusals' episode, and as the end of a run of them. It
// writes only what counts refusals while some are recent, so that a host
// never refused, or not lately, costs no more stores.
func (s *hostState) countServed(sent time.Time) {
	s.served.add(sent)
	if s.refusedRun.Load() != 0 {
		s.refusedRun.Store(0)
	}
	s.refusals.serve(sent)
}

// refusalEpisode counts the 503s without Retry-After of a host from the
// first of an episode on, and the successes sent since: an episode ends
// once capacityWindow passed without a refusal. A limiter serves a wave's
// burst before it refuses the overflow, and the burst says nothing of the
// refusals after it (Refused). Its lock is taken by refusals alone; a
// success adds to served without it, at worst to an episode just ending.
type refusalEpisode struct {
	mu      sync.Mutex
	first   int64 // when the episode began, in Unix nanoseconds
	refused int64
	// fresh is set when the episode began on a host that had never
	// throttled: the first wave's overflow.
	fresh  bool
	last   atomic.Int64 // the latest refusal, in Unix nanoseconds
	served atomic.Int64
}

// refuse counts a refusal answered at now, opening an episode when the
// last one's latest refusal is capacityWindow old (fresh: on a host that
// never throttled), and returns the episode's refusals, the successes
// sent since its first, and whether it began fresh within capacityWindow
// of now: a first wave's overflow is refused within a second of its
// first refusal, and an episode that goes on past it is another server's
// behaviour (failures at random after the wave, say).
func (e *refusalEpisode) refuse(now time.Time, fresh bool) (refused, served int64, firstWave bool) {
	at := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if at-e.last.Load() >= int64(capacityWindow) {
		e.first, e.refused, e.fresh = at, 0, fresh
		e.served.Store(0)
	}
	e.last.Store(max(e.last.Load(), at))
	e.refused++
	return e.refused, e.served.Load(), e.fresh && at-e.first < int64(capacityWindow)
}

// serve counts a success sent at sent in the episode, when a refusal came
// within capacityWindow of it.
func (e *refusalEpisode) serve(sent time.Time) {
	if last := e.last.Load(); last != 0 && sent.UnixNano()-last < int64(capacityWindow) {
		e.served.Add(1)
	}
}

// serving reports whether a success of the host was sent within
// capacityWindow before now.
func (s *hostState) serving(now time.Time) bool {
	return now.UnixNano()-s.succeeded.Load() < int64(capacityWindow)
}
