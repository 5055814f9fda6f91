package throttle

import (
	"maps"
	"math"
	"slices"
	"time"
)

// The evidence the budget tree is built from; doc.go gives the model.
const (
	// segmentRuleBase is the 5 of the seed's 5-n rule: a node n segments
	// below the service root (the host is n = 0) becomes the hypothesis
	// of its requests' budget once segmentRuleBase-n of its children (the
	// host's are its APIs) had a throttle within spreadWindow.
	segmentRuleBase = 5
	// minSpread is the fewest distinct throttled targets that make any
	// prefix a shared budget: one throttled target says nothing of its
	// neighbours.
	minSpread = 2
	// spreadWindow is how long a throttle counts towards the spread of
	// its ancestors: throttles within a second of each other on one budget
	// are the same congestion, a round trip or two of a client that overran
	// it, whatever wait each names; throttles further apart are news of
	// their own.
	spreadWindow = time.Second
	// lockedStrikes is how many times in a row an item must be throttled
	// again after waiting out its own Retry-After, while its neighbours
	// succeed, to be a locked item: a budget of its own.
	lockedStrikes = 2
	// evenExpected is the throttles a child of a shared budget must have
	// escaped, at the budget's throttle ratio, for the budget to be
	// split: a shared budget throttles its requests alike, and the
	// chance of escaping 5 expected throttles is e^-5 < 1 %.
	evenExpected = 5
	// minThrottleShare is the least share of a node's recent answers
	// that must be throttles for their spread to make it a budget: a
	// budget its clients overran throttles most of what they send, while
	// a few locked items among many served ones (5 % of a drive's) throttle
	// a few whatever the pace, and slowing everyone would not help them.
	minThrottleShare = 0.2
	// overrunChance is the chance below which a node's share of throttles
	// is taken to be at least minThrottleShare: a drive whose locked items
	// (5 %) throttle its requests shows two throttles among its first ten
	// answers one time in twelve, and that draw must not make every
	// request below it wait for a pace; two throttles with no success
	// (0.2² = 0.04 by chance) still make a budget, as the seed's 5-n rule
	// has it for the items of a folder.
	overrunChance = 0.05
	// hotThrottles is how many of a child's first attempts must be
	// throttled for it to be cut out of its budget as one of its own: a
	// single throttle is any child's luck under a shared budget, and with
	// one id per request every throttled id would be "hot".
	hotThrottles = 2
	// littleTraffic is the most requests a child may have sent and still
	// count as one with little traffic: folded together when the tallies
	// are full, and needing hotThrottles to be cut out. A child with more,
	// throttled at all while its budget's throttles fall unevenly, is cut
	// out: ten mailboxes throttled once each under Identity's budget,
	// whose own users were never throttled, are the mailboxes' budgets.
	littleTraffic = 2
	// maxKids bounds the children whose traffic a budget tallies one by
	// one; children with little traffic are folded into one tally.
	maxKids = 32
	// evenHalfLife is how often a budget's tallies halve, so that they
	// speak of its pace now rather than of the first wave: a pace that
	// changed shifts which children meet its throttles within a second or
	// two.
	evenHalfLife = 2 * time.Second
)

// node is a budget candidate of a host's tree: the host itself (key ""),
// an API (the first segment below the service root), a deeper prefix, or
// an item (a whole path). Nodes exist only while they hold evidence.
type node struct {
	key   string
	depth int // segments below the root; the host's is 0
	// marks are the distinct children of the node throttled lately,
	// newest first, at most segmentRuleBase.
	marks []mark
	// carvedMarks are the distinct items below the node whose requests
	// were throttled together lately, kept as marks are (siblings.go).
	carvedMarks []mark
	// together is set on an item carved because requests to it were
	// throttled together, and gathers on a node that is the budget of
	// such items below it, as many as the 5-n rule asks (siblings.go).
	together, gathers bool
	// kinDepth is the depth of the items last carved below the node
	// because requests to each were throttled together, and kinAt when;
	// ownAt is when an item directly below it last met a throttle of its
	// own (kin.go).
	kinDepth int
	kinAt    time.Time
	ownAt    time.Time
	// shared is set while the node is the hypothesis of its requests'
	// budget: its pacer paces every request below it.
	shared bool
	// carved is set when the evidence cut it out of a wider budget: it
	// paces its requests whatever the nodes above it do.
	carved bool
	// lone is set on an item made a budget by a throttle of its own that
	// named no wait (Queue.unnamed), until a request it let go succeeds:
	// till then its pace is a guess, and a retry it lets go is no
	// budget's overshoot ([Pass.Paced] is false), so that the policy's
	// backoff steps for an item that refuses everything.
	lone bool
	// named is set once the server throttled the budget by name (a 429,
	// or a Retry-After): its limiter says so when it throttles, and a 503
	// naming no wait is a failure, not a capacity limit (Queue.Refused).
	named   bool
	pacer   pacer
	waiters waiterHeap
	since   time.Time // when it became a budget
	lastEnd time.Time // the latest end of a throttle attributed to it
	seq     uint64
	// budget is what the server last announced of the node's budget in
	// rate-limit headers: a hint, which its pacer learns from when it says
	// the budget is spent.
	budget   announced
	inflight int
	// window is what its releases showed of a concurrency cap, and
	// kidWindow of a cap of each of its children alike (window.go);
	// kidsOut counts its releases out by child.
	window, kidWindow window
	kidsOut           map[string]int
	// kidWait are the requests it released that wait for an answer from
	// their child, whose learned cap is full, in arrival order.
	kidWait map[string][]*waiter
	// fitted is until when the fleet's schedule of the node, with a
	// store, runs at a rate the fleet fitted: it alone spaces the node's
	// releases, and the node's own pacer only learns.
	fitted time.Time
	// reserving counts this process's round trips for slots of the
	// fleet's schedule of the node under way.
	reserving int
	// slotsUntil is the latest slot of that schedule this process took.
	slotsUntil time.Time
	// paceTold is set once this process published the pace its pacer's
	// search starts from (options.PaceStore).
	paceTold  bool
	successes waveCount // successes below it since it exists
	throttles waveCount // throttles below it, counted the same way
	even      evenness
}

// mark is a throttled child counting towards its parent's spread until
// until.
type mark struct {
	child string
	// item is set when child is a whole path: an item throttled on its
	// own, not a prefix of deeper ones.
	item  bool
	until time.Time
}

// overrun reports whether throttles are at least minThrottleShare of the
// answers below n in the current and the previous second; where two
// throttled children make n a budget (deep nodes, the 5-n rule's
// minSpread), beyond chance (overrunChance), counting too before, the
// host's successes from before its first throttle, which no node was
// there to count.
func (n *node) overrun(before *waveCount) bool {
	thr := n.throttles.cur.Load() + n.throttles.prev.Load()
	ok := n.successes.cur.Load() + n.successes.prev.Load()
	if need(n.depth) > minSpread {
		// Three or more distinct throttled children are evidence enough
		// of their number; the share guards against locked items alone,
		// which throttle a few of the answers after the first throttle
		// as they did before it. The wave before it is left out: every
		// budget serves its burst before it throttles, and counted, a
		// burst of 400 (HAProxy's window) let the workers send 100
		// refusals before anything was held.
		return float64(thr) >= minThrottleShare*float64(thr+ok)
	}
	// Two children are thin evidence: the answers before them count
	// too, as the draw two locked items among a drive's first ten
	// answers would be.
	ok += before.cur.Load() + before.prev.Load()
	return atLeastChance(int(thr+ok), int(thr), minThrottleShare) < overrunChance
}

// need is how many distinct throttled children make a node at depth the
// budget: the 5-n rule, with at least minSpread.
func need(depth int) int { return max(segmentRuleBase-depth, minSpread) }

// spread records a throttle below child counting until until, and returns
// how many distinct children of n count at now.
func (n *node) spread(child string, item bool, now, until time.Time) int {
	n.marks = addMark(n.marks, mark{child, item, until}, now)
	return len(n.marks)
}

// addMark puts m first in marks, in place of an older mark of its child,
// drops the marks over at now, and keeps at most segmentRuleBase.
func addMark(marks []mark, m mark, now time.Time) []mark {
	kept := marks[:0]
	for _, k := range marks {
		if k.child != m.child && now.Before(k.until) {
			kept = append(kept, k)
		}
	}
	marks = append(kept, mark{})
	copy(marks[1:], marks)
	marks[0] = m
	if len(marks) > segmentRuleBase {
		marks = marks[:segmentRuleBase]
	}
	return marks
}

// live reports whether n paces its requests at now: a budget whose last
// throttle ended less than recovery ago, or whose announced budget
// speaks for it.
func (n *node) live(now time.Time, recovery time.Duration) bool {
	if n.shared && now.Before(n.lastEnd.Add(recovery)) {
		return true
	}
	return n.budget.live(now, recovery)
}

// paces reports whether n's learned pacer paces its releases at now.
func (n *node) paces(now time.Time, recovery time.Duration) bool {
	return n.shared && now.Before(n.lastEnd.Add(recovery))
}

// share makes n the budget of its requests from now on.
func (n *node) share(now time.Time, newPacer func(time.Time) pacer) {
	if n.shared && n.pacer != nil {
		return
	}
	n.shared, n.since = true, now
	n.pacer = newPacer(now)
	if w := n.successes.take(now); w.n > 0 {
		settleWave(n.pacer, w)
	}
	n.even = evenness{}
}

// tally is a child's traffic under a budget.
type tally struct{ sent, throttled int }

// evenness tallies the answers to the requests a shared budget released,
// per child, to tell whether its throttles fall alike on all of them.
type evenness struct {
	kids  map[string]*tally
	other tally // the children with little traffic, together
	all   tally
	since time.Time // the last halving
}

// add counts an answer, at now, to a request below the child kid.
func (e *evenness) add(kid string, throttled bool, now time.Time) {
	if e.kids == nil {
		e.kids = map[string]*tally{}
		e.since = now
	}
	if now.Sub(e.since) >= evenHalfLife {
		e.since = now
		for _, t := range append([]*tally{&e.other, &e.all}, slices.Collect(maps.Values(e.kids))...) {
			t.sent, t.throttled = t.sent/2, t.throttled/2
		}
	}
	k := e.kids[kid]
	if k == nil {
		if len(e.kids) >= maxKids {
			// Fold the children with little traffic, throttled or not:
			// which fold is decided by traffic alone, so the folded tally
			// stays a fair sample.
			for key, t := range e.kids {
				if t.sent <= littleTraffic {
					e.other.sent += t.sent
					e.other.throttled += t.throttled
					delete(e.kids, key)
				}
			}
		}
		if len(e.kids) >= maxKids {
			k = &e.other
		} else {
			k = &tally{}
			e.kids[kid] = k
		}
	}
	k.sent++
	e.all.sent++
	if throttled {
		k.throttled++
		e.all.throttled++
	}
}

// uneven reports whether a child's throttles differ from what one shared
// budget would have dealt it, beside its siblings: far fewer (it escaped
// them) or far more. It returns the throttled children when so.
//
// Each child is compared with the rest of the budget, not with a ratio
// that counts its own answers: Identity's users API, 1000 requests never
// throttled beside six mailboxes throttled once in 20 each, makes a
// budget-wide ratio of 0.5 %, against which the users escaped only 5 of
// their share, where beside the mailboxes' 5 % they escaped 50. The
// rest's ratio counts one throttle and one success more than it saw
// (Laplace's rule), so that a rest of three answers, none throttled, does
// not read as a budget that never throttles.
//
// Each child is a test of its own: at e^-evenExpected apiece, one of 30
// children under one shared budget reads uneven by chance a fifth of the
// time, and a sliding window's burst of throttles at its boundary, three
// of three requests to a child, split such a budget in most runs, its
// pace then learned again from nothing. The bound holds for the budget
// as a whole (Bonferroni's correction): a child's chance must be under
// e^-evenExpected over the number of tallies tested.
func (e *evenness) uneven() ([]string, bool) {
	if e.all.throttled == 0 || len(e.kids) < 2 && e.other.sent == 0 {
		return nil, false
	}
	tests := len(e.kids)
	if e.other.sent > 0 {
		tests++
	}
	chance := math.Exp(-evenExpected) / float64(tests)
	rest := func(t tally) float64 {
		return float64(e.all.throttled-t.throttled+1) / float64(e.all.sent-t.sent+2)
	}
	escaped := func(t tally) bool {
		// Chernoff's bound on seeing so few throttles: the chance that a
		// shared budget dealt this child only t.throttled of them.
		return t.sent > 0 && binomialTail(t.sent, t.throttled, rest(t)) < chance
	}
	found := escaped(e.other)
	var hot []string
	for k, t := range e.kids {
		// Either way: a child that escaped its share of the throttles, or
		// one that met many more than its share (a mailbox under
		// Identity's budget, throttled again and again at a pace its
		// siblings never were), by the same bound.
		if escaped(*t) || t.throttled >= hotThrottles && atLeastChance(t.sent, t.throttled, rest(*t)) < chance {
			found = true
		}
		if t.throttled >= hotThrottles || t.throttled > 0 && t.sent > littleTraffic {
			hot = append(hot, k)
		}
	}
	return hot, found
}

// atLeastChance bounds the chance of at least k throttles among n answers
// at ratio p (Chernoff), 1 when k is not above the mean.
func atLeastChance(n, k int, p float64) float64 {
	if n == 0 {
		return 1
	}
	q := float64(k) / float64(n)
	if q <= p {
		return 1
	}
	if q >= 1 {
		return math.Pow(p, float64(n))
	}
	return math.Exp(-float64(n) * (q*math.Log(q/p) + (1-q)*math.Log((1-q)/(1-p))))
}

// binomialTail bounds the chance of at most k throttles among n answers
// at ratio p (Chernoff), 1 when k is not below the mean.
func binomialTail(n, k int, p float64) float64 {
	q := float64(k) / float64(n)
	if q >= p || p >= 1 {
		return 1
	}
	kl := q*math.Log(q/p) + (1-q)*math.Log((1-q)/(1-p))
	if q == 0 {
		kl = -math.Log(1 - p)
	}
	return math.Exp(-float64(n) * kl)
}
