package throttle

import (
	"context"
	"slices"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
)

// The evidence a learned concurrency cap is read from; doc.go gives the
// model.
const (
	// maxLearnedCap is the largest cap a budget learns: its requests are
	// tallied by how many others were out, up to this many. A server that
	// serves more at once from one budget limits it, for any client, at a
	// rate a pacer finds (32 requests of 50 ms at once are 640 a second).
	maxLearnedCap = 32
	// minLearnedCap is the smallest: a throttle of a request sent with one
	// other out is as likely a rate's, on a fast server, as a cap's, and a
	// cap of one taken for a rate would serve one request a round trip.
	minLearnedCap = 2
	// beyondCap tallies the requests sent with more than maxLearnedCap
	// out.
	beyondCap = maxLearnedCap + 1
	// capChance is the chance below which the throttles falling on
	// requests sent with a cap's count out are not a rate's luck: a
	// rate's throttles fall on a request whatever was out with it, so
	// that those of a budget that seldom has as many out fall there
	// seldom. Few throttles come once a pace is below the cap (the
	// search's first fit reads a cap's throttles as a rate's, at about
	// half of it; Outlook's 4 per mailbox, 10 mailboxes, on loopback: the
	// next came a second later), and the first of them is the only one of
	// some 40 requests counted by then that went with 4 out to its
	// mailbox: a chance of 1 in 40. Learned at the first, scenario (n)
	// took 1.11x-1.17x of the physical limit; at the second, 1.32x-1.37x.
	// A cap read by chance falls at the next throttle it cannot explain.
	capChance = 0.05
	// capServeRatio is how many times longer than a refusal a budget's
	// served requests must take, on average, for it to be a cap: a cap
	// binds only where serving takes time (Outlook's 50 ms a request
	// against a refusal's round trip), while requests out together only
	// because they went together, as a burst after a hold does, show the
	// same step at a rate's limit when the server serves at once (HAProxy's
	// window, refusing such bursts, read as caps of 7 to 31 on loopback).
	capServeRatio = 2
	// minCapServed is the fewest requests served with fewer out than the
	// cap: a budget whose requests all went with many out says nothing of
	// what fewer would meet.
	minCapServed = 8
	// capMisfits is the share of that evidence, in parts, that may
	// contradict the cap: throttles of requests sent with fewer out, and
	// successes of requests sent with as many or more. Out counts lag the
	// server's by an answer on its way, so a cap's evidence is not
	// perfectly clean; a rate's contradicts it at every count.
	capMisfits = 8
	// capShare is the least share of the requests sent with a cap's count
	// out that its server refuses: all of them, but for counts that lag
	// the server's by an answer on its way back (a 50 ms trip home from a
	// 50 ms one left a third of them served in virtual time).
	capShare = 0.25
)

// window is what a budget learned of a concurrency cap: a server that
// refuses a request only while a number of its budget's others are being
// served (Outlook's 4 per mailbox) throttles whatever the pace, and a
// pacer taking its throttles for a rate's paces the budget at about half
// of what the cap lets through. The budget's releases are tallied by how
// many others it had out when each went and by answer; when the throttled
// ones all went with at least limit out and the served ones with fewer,
// the budget is that cap: it releases a request whenever fewer than limit
// are out, and paces nothing.
type window struct {
	// served is when a request the budget released was first served:
	// requests sent before it may have been out beside others it did not
	// release (the host's first wave), which its counts miss.
	served time.Time
	// throttled and ok tally the budget's releases since served by how
	// many others were out when each went, more than maxLearnedCap
	// together.
	throttled, ok [beyondCap + 1]int32
	// throttledFor and okFor sum how long those answers took.
	throttledFor, okFor time.Duration
	// sentWith tallies the releases since served by how many others were
	// out when each went, answered or not: a rate's throttle falls on
	// any request sent, and a cap's on those sent with its count out,
	// which the server refuses at once while it serves the rest slowly,
	// so that the answers alone, early on, overstate their share.
	sentWith [beyondCap + 1]int32
	// limit is the learned cap; zero while there is none.
	limit int
}

// counts reports whether the count of others out of a request sent at
// sent missed none.
func (w *window) counts(sent time.Time) bool {
	return !w.served.IsZero() && !sent.Before(w.served)
}

// full reports whether a budget with inflight requests out may release no
// more until one is answered.
func (w *window) full(inflight int) bool { return w.limit > 0 && inflight >= w.limit }

// sent records a release of the budget at now with out others out.
func (w *window) sent(out int, now time.Time) {
	if w.counts(now) {
		w.sentWith[min(out, beyondCap)]++
	}
}

// tally records the answer, at now, to a release of the budget sent at
// sent with out others out.
func (w *window) tally(out int, sent time.Time, throttled bool, now time.Time) {
	if !w.counts(sent) {
		if w.served.IsZero() && !throttled {
			w.served = now
		}
		return
	}
	k := min(out, beyondCap)
	if throttled {
		w.throttled[k]++
		w.throttledFor += now.Sub(sent)
	} else {
		w.ok[k]++
		w.okFor += now.Sub(sent)
	}
}

// learn reads the tallies after a throttle: it sets limit to the cap they
// show, if they show one, and reports whether it did. They show a cap c
// when nearly all throttles (all but one in capMisfits) went with at
// least c others out, beyond the chance that a rate's would (capChance),
// enough requests were served with fewer, and the share throttled jumps
// at c, capMisfits times what it is below it, to at least capShare: a
// rate's throttles fall on a request whatever was out with it.
func (w *window) learn() bool {
	// A throttle with more than maxLearnedCap out says nothing of a cap; a
	// success, that the server served as many.
	var thr, ok int32
	for k := range beyondCap {
		thr += w.throttled[k]
	}
	for _, n := range w.ok {
		ok += n
	}
	if thr == 0 || !w.servesSlowly() {
		return false
	}
	// The largest c below which at most one throttle in capMisfits went:
	// a cap is no larger than what any throttle went with, and one read
	// too high falls at its next throttle (throttledWhileCapped), while
	// one read too low would idle what the server serves.
	c, below := maxLearnedCap, thr-w.throttled[maxLearnedCap]
	for ; c >= minLearnedCap && below*capMisfits > thr; c-- {
		below -= w.throttled[c-1]
	}
	if c < minLearnedCap {
		return false
	}
	var okBelow int32
	for _, n := range w.ok[:c] {
		okBelow += n
	}
	thrAbove, okAbove := thr-below, ok-okBelow
	// The share of the releases that went with c or more out, each count
	// tallied as sent or as answered, whichever is more (a cap dropped
	// meanwhile restarted the tallies of the releases sent).
	var above, all int32
	for k, n := range w.sentWith {
		n = max(n, w.throttled[k]+w.ok[k])
		all += n
		if k >= c {
			above += n
		}
	}
	sentAbove := float64(above) / float64(all)
	if okBelow < minCapServed ||
		atLeastChance(int(thr), int(thrAbove), sentAbove) >= capChance ||
		float64(thrAbove) < capShare*float64(thrAbove+okAbove) ||
		int64(thrAbove)*int64(below+okBelow) < capMisfits*int64(below)*int64(thrAbove+okAbove) {
		return false
	}
	w.limit = c
	return true
}

// servesSlowly reports whether the budget's served requests took
// capServeRatio times as long as its refused ones, on average.
func (w *window) servesSlowly() bool {
	var thr, ok int32
	for k := range w.throttled {
		thr += w.throttled[k]
		ok += w.ok[k]
	}
	return thr > 0 && ok > 0 &&
		float64(w.okFor)/float64(ok) >= capServeRatio*float64(w.throttledFor)/float64(thr)
}

// throttledWhileCapped takes a throttle of a request the capped budget
// released with out others out, and reports whether the cap still stands.
// One sent with as many out as the cap allows is its throttle. One sent
// with fewer contradicts it, and the tallies, which count it already, are
// read again: the cap becomes what they show now. A cap read too high
// from few throttles (the 9 a burst released past the cap showed, where
// the server serves 4) falls to what the throttles since show, and one
// throttle of a request whose count lagged the server's by an answer on
// its way leaves a cap the tallies still show standing; lowering the cap
// to each such throttle's count read 3 for Outlook's 4 now and then, and
// kept it there. Tallies that show no cap (a rate's throttles, which fall
// whatever was out, or another client's share of a cap this one cannot
// count) drop the cap and its evidence.
func (w *window) throttledWhileCapped(out int) bool {
	if out >= w.limit {
		return true
	}
	w.limit = 0
	if w.learn() {
		return true
	}
	*w = window{served: w.served}
	return false
}

// capped reports whether a throttle of p, which counts against budget n,
// is a concurrency cap's, which teaches its pacer nothing: n learned a
// cap, or learns one from it. A capped budget's throttle of a request it
// released tests the cap (throttledWhileCapped); one of a request it did
// not release (sent before it formed) is the cap's. Tallies that show a
// cap of each child are read so before those of the budget as a whole
// (doc.go, item 12), and a budget capped as a whole takes its children's
// cap once their tallies show one.
func (q *Queue) capped(n *node, p Pass) bool {
	switch {
	case p.budget != n:
		// Sent beside the counts of its cap, if it has one.
		return n.window.limit > 0 || n.kidWindow.limit > 0
	case n.window.limit > 0:
		if p.kid != "" && q.caps == nil && n.kidWindow.learn() {
			n.window = window{served: n.window.served}
			return true
		}
		return n.window.throttledWhileCapped(p.out)
	case p.kid != "" && n.kidWindow.limit > 0:
		if n.kidWindow.throttledWhileCapped(p.kidOut) {
			return true
		}
		// No cap: the requests waiting for one go.
		for kid := range n.kidWait {
			n.wakeGated(kid)
		}
		return false
	}
	// A cap the options name is the server's word: none is learned beside it.
	return q.caps == nil && (p.kid != "" && n.kidWindow.learn() || n.window.learn())
}

// holds reports whether a request waits at n or is out.
func (n *node) holds() bool { return len(n.waiters) > 0 || n.inflight > 0 || len(n.kidWait) > 0 }

// kidOf returns the child of n on the path of keys, "" when n is its item.
func (n *node) kidOf(keys []string) string {
	if n.depth+1 >= len(keys) {
		return ""
	}
	return keys[n.depth+1]
}

// kidFull reports whether kid's learned cap lets no more of n's requests
// go to it.
func (n *node) kidFull(kid string) bool { return kid != "" && n.kidWindow.full(n.kidsOut[kid]) }

// release counts p, a request to keys, out as n's release at now.
func (n *node) release(p *Pass, keys []string, now time.Time) {
	p.budget, p.out = n, n.inflight
	n.inflight++
	n.window.sent(p.out, now)
	if p.kid = n.kidOf(keys); p.kid == "" {
		return
	}
	if n.kidsOut == nil {
		n.kidsOut = map[string]int{}
	}
	p.kidOut = n.kidsOut[p.kid]
	n.kidsOut[p.kid]++
	n.kidWindow.sent(p.kidOut, now)
}

// back counts p, n's release, in flight no more.
func (n *node) back(p Pass) {
	n.inflight = max(n.inflight-1, 0)
	if p.kid == "" {
		return
	}
	if c := n.kidsOut[p.kid]; c > 1 {
		n.kidsOut[p.kid] = c - 1
	} else {
		delete(n.kidsOut, p.kid)
	}
	n.wakeGated(p.kid)
}

// wakeGated wakes the first request waiting for kid when kid has room.
func (n *node) wakeGated(kid string) {
	if ws := n.kidWait[kid]; len(ws) > 0 && !n.kidFull(kid) {
		signal(ws[0])
	}
}

// ungate takes w out of kid's waiters, waking the next when w was first.
func (n *node) ungate(kid string, w *waiter) {
	ws := n.kidWait[kid]
	first := len(ws) > 0 && ws[0] == w
	ws = slices.DeleteFunc(ws, func(o *waiter) bool { return o == w })
	if len(ws) == 0 {
		delete(n.kidWait, kid)
		return
	}
	n.kidWait[kid] = ws
	if first {
		n.wakeGated(kid)
	}
}

// gated waits, out of n's queue, until fewer requests of n to kid are
// out than the cap n learned of kid, behind the others waiting for kid.
// A wait that would pass deadline (zero: none) ends at it with a
// *HoldError. The caller holds s.mu; gated releases it.
func (q *Queue) gated(ctx context.Context, s *hostState, n *node, w *waiter, kid string, keys []string, deadline time.Time, held func(now, at time.Time)) (Pass, error) {
	if n.kidWait == nil {
		n.kidWait = map[string][]*waiter{}
	}
	n.kidWait[kid] = append(n.kidWait[kid], w)
	for {
		now := q.clock.Now()
		if !n.kidFull(kid) && n.kidWait[kid][0] == w {
			n.ungate(kid, w)
			var p Pass
			if n.live(now, q.recovery) {
				n.release(&p, keys, now)
			}
			// A cap dropped or raised meanwhile may let the next go too.
			n.wakeGated(kid)
			s.mu.Unlock()
			return p, nil
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			n.ungate(kid, w)
			s.mu.Unlock()
			return Pass{}, &HoldError{Until: deadline}
		}
		d := time.Duration(-1)
		if !deadline.IsZero() {
			d = deadline.Sub(now)
		}
		s.mu.Unlock()
		held(now, now.Add(time.Nanosecond))
		err := wait.Woken(ctx, q.clock, d, w.wake)
		s.mu.Lock()
		if err != nil {
			n.ungate(kid, w)
			s.mu.Unlock()
			return Pass{}, err
		}
	}
}

// awaitAnswer waits, at the head of n's queue, for an answer to one of
// n's requests out, or until deadline (zero: none), when it gives up
// its place with a *HoldError; it does so too when ctx ends, with its
// error, and then releases s.mu. The caller holds s.mu; held hears the
// wait.
func (q *Queue) awaitAnswer(ctx context.Context, s *hostState, n *node, w *waiter, deadline time.Time, held func(now, at time.Time)) error {
	now := q.clock.Now()
	if deadline.IsZero() {
		return q.idleHead(ctx, s, n, w, -1, held)
	}
	if !now.Before(deadline) {
		n.waiters.remove(w)
		q.dropIdle(s, n, now)
		s.mu.Unlock()
		return &HoldError{Until: deadline}
	}
	return q.idleHead(ctx, s, n, w, deadline.Sub(now), held)
}

// idleHead waits, at the head of n's queue, until w is woken or d has
// passed (negative: no limit). When ctx ends first it gives up its place,
// releases s.mu and returns ctx's error. The caller holds s.mu; held
// hears the wait.
func (q *Queue) idleHead(ctx context.Context, s *hostState, n *node, w *waiter, d time.Duration, held func(now, at time.Time)) error {
	now := q.clock.Now()
	s.mu.Unlock()
	held(now, now.Add(time.Nanosecond))
	err := wait.Woken(ctx, q.clock, d, w.wake)
	s.mu.Lock()
	if err != nil {
		n.waiters.remove(w)
		q.dropIdle(s, n, q.clock.Now())
		s.mu.Unlock()
	}
	return err
}

// tally records the answer to p, n's release, at now.
func (n *node) tally(p Pass, throttled bool, now time.Time) {
	n.window.tally(p.out, p.Sent, throttled, now)
	if p.kid != "" {
		n.kidWindow.tally(p.kidOut, p.Sent, throttled, now)
	}
}
