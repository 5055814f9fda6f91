package throttle

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// The queue's use of a fleet store (options.QueueOptions.Store); doc.go
// gives the model.
const (
	// joinEvery bounds how often a process reads the fleet's state of a
	// host it has no throttle of its own for: once, when it learns that
	// the fleet holds the host, and again no sooner than this if it is
	// still not throttled itself. A round trip a second per host is
	// nothing next to the requests it paces.
	joinEvery = time.Second
	// markEvery is how often a process tells the fleet that a host it
	// keeps being throttled by is still throttled, when its throttles name
	// no hold it shares: often enough that the fleet's ten minutes of
	// activity never lapse while the host throttles, rarely enough to cost
	// nothing.
	markEvery = time.Minute
	// fleetHeadroom is how much faster than its own pacer's rate a process
	// gives its pace to the fleet's schedule, where the schedule's search
	// for the budget's rate begins (and the pace a joining process starts
	// from): a process's own rate is its share of what the server allows,
	// and beginning the fleet's search a little above it costs a doubling
	// less.
	fleetHeadroom = 1.25
	// maxFollow bounds the wait for a fleet slot of a request that has no
	// limit of its own: no slot of a schedule at a learned pace is that far.
	maxFollow = time.Minute
	// fittedFor is how long a reservation's word that the fleet fitted a
	// budget's rate stands: every release of the budget reserves again and
	// renews it, and a store that stops answering is paced locally again
	// within this time.
	fittedFor = time.Second
	// maxReserving bounds the round trips for slots of one budget's
	// fleet schedule that one process has under way: a schedule the fleet
	// fitted spaces the releases alone, and all of a process's waiters
	// asking at once would queue for the store's connections past its
	// timeout. Two keep a slot always being asked for, while the other's
	// answer travels.
	maxReserving = 2
	// maxSlotsAhead is how far ahead of now a process holds slots of a
	// fitted schedule before it asks for more: slots already given go at
	// the rate they were given at, and a fleet whose every waiting request
	// held one would go on at a probe's rate for as long as they reach
	// (200 waiting requests at 500/s: 0.4 s, some 40 throttles) after the
	// fit that lowered it. Held this far ahead per process, the schedule
	// runs at most this plus one slot per process ahead of now, and a
	// process still asks a store round trip or more before its slots run
	// out.
	maxSlotsAhead = 20 * time.Millisecond
	// firstWave is how long after the fleet's first throttle of a host a
	// process that joins takes the fleet's holds as its own first wave:
	// the notice of that throttle reaches the fleet within a few round
	// trips, so the processes still starting then share the wave. One
	// that joins later meets a server whose bucket had that long to
	// refill, and its own first wave, sent unpaced, tells it more than a
	// search from nothing would: searching from its 5/s, a process joining
	// 1 s after the first (8 joining 1 s apart) sent 4 to 8 requests a
	// quarter second until 3 s (1.33x-1.36x the limit, against 1.16x).
	firstWave = 100 * time.Millisecond
	// announceEvery is how often at most a process tells the fleet that a
	// budget the server announced is spent. A paced budget is announced
	// spent on many of its answers; what a process joining later needs is
	// that it is spent and until when, which changes once a window.
	announceEvery = time.Second
)

// fleetHost is what the queue remembers of its exchanges with the store
// about one host. Its fields are atomics: they are read before the host's
// lock is taken and written around round trips, which never hold it.
type fleetHost struct {
	// reading is closed when the read of the fleet's state under way
	// ends; nil when none is.
	reading atomic.Pointer[chan struct{}]
	joined  atomic.Int64 // when it was last read, in Unix nanoseconds
	marked  atomic.Int64 // when this process last told the fleet, in Unix nanoseconds
}

// fleetActive reports whether the fleet holds host throttled while this
// process does not: answered from the store's memory, no round trip.
func (q *Queue) fleetActive(host string) bool {
	return q.store != nil && q.store.Active(host)
}

// join reads what the fleet knows of host, which some other process saw
// throttled, and takes it as this process's own: its holds as held URLs
// and paths, its paces as budgets paced at them. It returns the host's
// state, active, or nil when it was read less than joinEvery ago and the
// host is not active here (the request goes on unheld). A request that
// comes while another reads it waits for that answer, or for its own
// context: one round trip, bounded by the store's own timeout. Sent
// unheld meanwhile, a joining process's first requests all go at once
// into a budget the fleet paces, and its throttles take its workers into
// a Retry-After. The round trip is made without the host's lock; a store
// that fails leaves the host active with what this process knows.
func (q *Queue) join(ctx context.Context, host string) *hostState {
	now := q.clock.Now()
	s := q.state(host, true, now)
	if s.active.Load() {
		return s
	}
	f := &s.fleet
	if f.reading.Load() == nil && now.UnixNano()-f.joined.Load() >= int64(joinEvery) {
		done := make(chan struct{})
		if f.reading.CompareAndSwap(nil, &done) {
			defer func() {
				f.reading.Store(nil)
				close(done)
			}()
			f.joined.Store(now.UnixNano())
			return q.readFleet(ctx, host, s)
		}
	}
	if ch := f.reading.Load(); ch != nil {
		return awaitJoin(ctx, s, *ch)
	}
	return nil
}

// readFleet reads the fleet's state of host, one round trip without the
// host's lock, and takes it as s's own; nil when s was forgotten
// meanwhile.
func (q *Queue) readFleet(ctx context.Context, host string, s *hostState) *hostState {
	st, err := q.store.State(ctx, host)
	now := q.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forgotten {
		return nil
	}
	s.activate()
	s.seen.Store(now.Unix())
	if err == nil {
		q.adopt(s, host, st, now)
	}
	return s
}

// awaitJoin waits until the read of the fleet's state that closes done
// ends, or ctx does, and returns s when that read left it active.
func awaitJoin(ctx context.Context, s *hostState, done <-chan struct{}) *hostState {
	select {
	case <-done:
	case <-ctx.Done():
		return nil
	}
	if !s.active.Load() {
		return nil
	}
	return s
}

// adopt takes the fleet's state st of s's host at now; the caller holds
// s.mu. A hold becomes this process's hold of its URL or path; a pace
// becomes a budget paced at it, as if this process had learned it (its
// throttles then tune it as its own).
func (q *Queue) adopt(s *hostState, host string, st options.FleetState, now time.Time) {
	for key, until := range st.Holds {
		if !until.After(now) {
			continue
		}
		m, k := s.urls, strings.TrimPrefix(key, options.HoldURLPrefix)
		if p, ok := strings.CutPrefix(key, options.HoldPathPrefix); ok {
			m, k = s.paths, p
		} else if k == key {
			continue // not a key this queue shares
		}
		e := m[k]
		if e == nil {
			e = &entry{}
			m[k] = e
		}
		s.seq++
		e.end, e.named, e.seq = later(e.end, until), later(e.named, until), s.seq
		s.lastEnd = later(s.lastEnd, until)
	}
	for budget, a := range st.Announced {
		if !a.Reset.After(now) {
			continue
		}
		// A budget the fleet saw spent is a budget here too, before this
		// process's own answers say so: they are counted to it and tune
		// its pacer (a pace the fleet shares sets it below). The count
		// itself gates nothing, as for an answer read here.
		n := s.node(budget, budgetDepth(budget))
		s.seq++
		n.seq = s.seq
		n.budget.refresh(ratelimit.Budget{Remaining: float64(a.Remaining), HasRemaining: true, Reset: a.Reset}, now, now, 0)
		if a.Remaining < 1 {
			n.share(now, q.newPacer)
			n.lastEnd = later(n.lastEnd, now)
		}
	}
	for budget, p := range st.Paces {
		if p.Rate <= 0 || math.IsInf(p.Rate, 0) || math.IsNaN(p.Rate) {
			continue
		}
		n := s.node(budget, budgetDepth(budget))
		s.seq++
		n.seq = s.seq
		n.share(now, q.newPacer)
		n.lastEnd = later(n.lastEnd, now)
		if ap, ok := n.pacer.(*adaptivePacer); ok && ap.state == pacerCold {
			ap.follow(p.Rate, now)
		}
	}
	q.searchFleet(s, host, st, now)
	q.prune(s, now)
}

// searchFleet takes the fleet's first wave as this process's own when it
// joins that wave (within firstWave of the fleet's first throttle of the
// host), the fleet paces nothing of the host yet, and this process has no
// budget of it: the holds the server named that still run are throttles it counts
// as its own, by the rule that places its own (the 5-n rule), and the
// budget they make searches for the server's rate through the fleet's
// schedule, as after its own first throttle. Holds of one or two items
// make no budget: nothing else waits for them. The caller holds s.mu.
//
// Processes start a few milliseconds apart, and the first of them empty
// the server's bucket. A later one that sent its first requests at once,
// held by nothing but the items the fleet saw throttled, would see each
// of them throttled and every one of its workers wait out the
// Retry-After: 20 processes started within 35 ms lost 193 of their 200
// workers to a first wave that, sent by one process, costs about 160.
func (q *Queue) searchFleet(s *hostState, host string, st options.FleetState, now time.Time) {
	if len(st.Paces) > 0 || st.Throttled.IsZero() || now.Sub(st.Throttled) > firstWave {
		return
	}
	for _, n := range s.nodes {
		if n.shared {
			return
		}
	}
	var (
		found *node
		until time.Time
	)
	for key, end := range st.Holds {
		path, ok := strings.CutPrefix(key, options.HoldPathPrefix)
		if !ok {
			path, ok = strings.CutPrefix(key, options.HoldURLPrefix)
			path, _, _ = strings.Cut(path, "?")
		}
		if !ok || !end.After(now) {
			continue
		}
		if n := q.attribute(s, q.pathTarget(host, path).keys(), now, false); n != nil && (found == nil || n.depth < found.depth) {
			found = n
		}
		until = later(until, end)
	}
	if found == nil {
		return
	}
	s.seq++
	found.seq = s.seq
	found.lastEnd = later(found.lastEnd, until)
	if ap, ok := found.pacer.(*adaptivePacer); ok && ap.state == pacerCold {
		ap.throttled(now, now, until, true)
	}
}

// budgetDepth is the depth in the host's tree of the node a fleet's
// budget key names: "" is the host's.
func budgetDepth(budget string) int {
	if budget == "" {
		return 0
	}
	return strings.Count(budget, "/") + 1
}

// follow starts a pacer at rate, the pace one process of the fleet
// releases a budget at, as if its own fit had found it: steady, probing
// above it in time, slowed by the throttles it meets.
func (p *adaptivePacer) follow(rate float64, now time.Time) {
	p.state, p.base, p.from, p.period = pacerSteady, rate, 0, 1
	p.start, p.reacted, p.last, p.idle = now, now, now, 0
}

// fleetShare returns the pace n releases at now, which is this process's
// share of the budget's fleet-wide schedule, and whether it has one: a
// budget that paces, with a store, and that no live announcement speaks
// for. The caller holds the host's lock.
//
// While n's pacer searches, the share is where its search started, from
// this process's part of the first wave: the schedule's search starts
// from the sum of them, the whole wave's, as one process sending all of
// the fleet's requests would, and doubles that once for the fleet.
// Current rates would double each process's search into the sum. Once
// steady, it is the rate the pacer fitted or followed, not where its
// probe has risen to: a probe rises while nothing is sent, and a share
// above the server's rate would start the fleet's next search there;
// nor, while the pace climbs back from a closure's floor, the fit it
// climbs to.
func (q *Queue) fleetShare(n *node, now time.Time) (options.Pace, bool) {
	if q.store == nil || !n.paces(now, q.recovery) || n.budget.live(now, q.recovery) {
		// A budget the server announces is paced by each process from
		// its own answers, which all carry it: the schedule's fit learns
		// from 429s only, and a schedule searching past a budget the
		// answers say is spent sent a fleet, or one process, into it
		// every Retry-After (9.97x the limit and 66 requests lost, one
		// process behind an announcing bucket, against 1.20x this way).
		return options.Pace{}, false
	}
	ap, ok := n.pacer.(*adaptivePacer)
	if !ok {
		return options.Pace{}, false
	}
	r := ap.base
	switch {
	case ap.state == pacerSearching:
		r = ap.searchFrom()
	case ap.from != 0:
		// Climbing back from a closure's floor: the fit is where the
		// curve goes, not yet a rate the server took again.
		r = min(r, ap.rateAt(now))
	}
	if !(r > 0) || math.IsInf(r, 0) {
		return options.Pace{}, false
	}
	r *= fleetHeadroom
	// The burst is this process's part of the first wave: what the server
	// let through at once after a quiet spell. The fleet's parts together
	// are the least its bucket (or window) holds.
	return options.Pace{Rate: r, Burst: max(1, ap.burst)}, true
}

// follow waits for the slot the fleet's schedule of budget n of host
// gives a request that n released at now at pace p: one round trip, then
// the wait it names, never past deadline (zero: none). It reports whether
// the request took a slot. A store that fails, or (when this process
// spaced the release itself, not fitted) a slot past the request's limits,
// leaves the release to this process; a slot past the limits of a release
// that only the fleet's schedule spaces is a *HoldError. On the context's
// end the release is undone.
func (q *Queue) follow(ctx context.Context, host string, s *hostState, n *node, p options.Pace, now, deadline time.Time, fitted bool) (bool, error) {
	limit := maxFollow
	if !deadline.IsZero() {
		limit = deadline.Sub(now)
	}
	r, err := q.store.Reserve(ctx, host, n.key, p, limit)
	s.mu.Lock()
	n.reserving--
	n.waiters.kick()
	n.fitted = time.Time{}
	if err == nil && r.Fitted {
		n.fitted = q.clock.Now().Add(fittedFor)
	}
	if err == nil && r.OK {
		n.slotsUntil = later(n.slotsUntil, q.clock.Now().Add(r.Wait))
	}
	s.mu.Unlock()
	switch {
	case err != nil:
		return false, nil
	case !r.OK && fitted:
		s.mu.Lock()
		n.inflight = max(n.inflight-1, 0)
		s.mu.Unlock()
		return false, &HoldError{Until: now.Add(r.Wait)}
	case !r.OK:
		return false, nil
	}
	if err := wait.Until(ctx, q.clock, q.clock.Now().Add(r.Wait)); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		n.inflight = max(n.inflight-1, 0)
		return false, err
	}
	return true, nil
}

// fleetNote is what an answer tells the fleet, gathered under the host's
// lock and sent once it is released.
type fleetNote struct {
	s    *hostState
	host string
	// hold is the path the server's own word holds, until until, when the
	// throttle was the item's own; empty otherwise.
	hold  string
	until time.Time
	// throttled is set for any throttle.
	throttled bool
	// budget is the budget whose fleet-wide schedule released the
	// throttled request, sent ago before the answer, which asked for
	// retryAfter; empty when no schedule did.
	budget          string
	ago, retryAfter time.Duration
	// spent is set when the answer announced budget spentBudget as spent
	// until reset, for the fleet to share, and this process last told it
	// announceEvery ago or more.
	spent       bool
	spentBudget string
	reset       time.Time
	// pace, when paceBudget is set, is the pace the budget's search starts
	// from, for the fleet to follow.
	pace       options.Pace
	paceBudget string
}

// paceNote has note publish the pace budget n's search starts from, once
// per budget, when the store takes paces (options.PaceStore): a process
// that joins while every request of the fleet waits out the first wave's
// Retry-After finds no pace a reservation published (nothing reserves),
// and its own first requests, sent at once, would each meet the bucket
// the first wave emptied. The caller holds the host's lock.
func (q *Queue) paceNote(note *fleetNote, n *node, now time.Time) {
	if _, ok := q.store.(options.PaceStore); !ok || n.paceTold {
		return
	}
	if p, ok := q.fleetShare(n, now); ok {
		n.paceTold = true
		note.pace, note.paceBudget = p, n.key
	}
}

// spentNote has note tell the fleet that the answer announced budget n,
// which b describes, as spent at now: the host is throttled for the fleet
// as after a 429, and the budget spent until its reset. The caller holds
// s's lock.
func (q *Queue) spentNote(note *fleetNote, s *hostState, n *node, b ratelimit.Budget, now time.Time) {
	if q.store == nil {
		return
	}
	note.s, note.throttled = s, true
	if b.Reset.After(now) && now.Sub(n.budget.told) >= announceEvery {
		n.budget.told = now
		note.spent, note.spentBudget, note.reset = true, n.key, b.Reset
	}
}

// tell sends what an answer told the fleet: a hold the server named, or
// that the host is throttled, when the fleet may not know it yet. It runs
// without the host's lock, on the answering request's goroutine, bounded
// by the store's timeout; a failure is the store's to count.
func (q *Queue) tell(n *fleetNote) {
	if q.store == nil || !n.throttled {
		return
	}
	ctx := context.Background()
	now := q.clock.Now()
	if n.budget != "" {
		_ = q.store.Throttled(ctx, n.host, n.budget, n.ago, n.retryAfter)
	}

	if n.spent {
		_ = q.store.Announce(ctx, n.host, n.spentBudget, 0, n.reset)
	}
	if ps, ok := q.store.(options.PaceStore); ok && n.paceBudget != "" {
		_ = ps.SetPace(ctx, n.host, n.paceBudget, n.pace)
	}
	if n.hold != "" && n.until.After(now) {
		n.s.fleet.marked.Store(now.UnixNano())
		_ = q.store.SetHold(ctx, n.host, options.HoldPathPrefix+n.hold, n.until)
		return
	}
	f := &n.s.fleet
	last := f.marked.Load()
	if q.store.Active(n.host) && now.UnixNano()-last < int64(markEvery) || !f.marked.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	_ = q.store.MarkActive(ctx, n.host)
}
