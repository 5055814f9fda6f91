package throttle

import (
	"slices"
	"strings"
	"time"
)

// budgetOf returns the budget that paces a request with keys at now: the
// widest node of its tree the evidence made a budget (or that follows a
// budget the server announced), nil when none.
func (q *Queue) budgetOf(s *hostState, keys []string, now time.Time) *node {
	if n := q.carvedOf(s, keys, now); n != nil {
		return n
	}
	for _, k := range keys {
		if n := s.nodes[k]; n != nil && n.live(now, q.recovery) {
			return n
		}
	}
	return nil
}

// carvedOf returns the deepest budget on keys' path that the evidence cut
// out of a wider one, nil when none.
func (q *Queue) carvedOf(s *hostState, keys []string, now time.Time) *node {
	for i := len(keys) - 1; i > 0; i-- {
		if n := s.nodes[keys[i]]; n != nil && n.carved && n.paces(now, q.recovery) {
			return n
		}
	}
	return nil
}

// held returns until when the server's own word holds t: a throttle of
// its exact URL or path.
func (s *hostState) held(t *target) time.Time {
	var until time.Time
	if e := s.urls[t.url]; e != nil {
		until = e.end
	}
	if e := s.paths[t.path]; e != nil {
		until = later(until, e.end)
	}
	return until
}

// throttled records that the server throttled t, sent as p, until end, and
// returns the budget it counts against, nil when it is the item's own.
// The throttle goes to the budget the evidence places it in, whose pacer
// slows down; it then holds only its own request, which waits out its
// Retry-After. Without a budget it is the item's own: the server's word
// holds its URL and path until end, and nothing else is held or paced.
func (q *Queue) throttled(s *hostState, t *target, p Pass, now, end time.Time) *node {
	s.seq++
	s.lastEnd = later(s.lastEnd, end)
	item := s.paths[t.path]
	if item == nil {
		item = &entry{}
		s.paths[t.path] = item
	}
	// Sent before its own last throttle came back: requests to it were
	// out together and throttled together, and it may be a budget of its
	// own.
	concurrent := p.Sent.Before(item.at)
	if !item.at.IsZero() && !p.Sent.Before(item.named) && s.lastSuccess.After(item.at) {
		// Throttled again after waiting out its wait, while others
		// succeed. A request its budget's pace released within that wait
		// is no strike: behind a bare 429, whose wait is the policy's
		// 3 s, two paced releases refused in a row locked one of nginx's
		// zones, whose own word then held every request to it.
		item.strikes++
	}
	item.named, item.at, item.seq = later(item.named, end), now, s.seq
	keys := t.keys()
	var n *node
	if item.strikes < lockedStrikes && !p.overran {
		n = q.attribute(s, keys, now, concurrent)
		if n == nil && p.noWait {
			n = q.unnamed(s, keys, now)
		}
	}
	if n == nil {
		// Locked, or throttled on its own: its own word holds it. Sent
		// past its concurrency cap, it is the cap's: the request waits
		// out its own Retry-After, and the cap, in force from now on,
		// holds the others (caps.go).
		if !p.overran {
			item.end = later(item.end, end)
			u := s.urls[t.url]
			if u == nil {
				u = &entry{}
				s.urls[t.url] = u
			}
			u.end, u.seq = later(u.end, end), s.seq
		}
		q.prune(s, now)
		if b := q.budgetOf(s, keys, now); b != nil {
			b.waiters.kick()
		}
		if w := s.nodes[keys[len(keys)-1]]; w != nil {
			w.waiters.kick()
		}
		return nil
	}
	// Its budget's pacer governs it now: what held the item alone ends
	// through that pace.
	item.end = time.Time{}
	if u := s.urls[t.url]; u != nil {
		u.end = time.Time{}
	}
	n.lastEnd = later(n.lastEnd, end)
	n.seq = s.seq
	n.named = n.named || !p.refused
	if !q.capped(n, p) {
		if ap, ok := n.pacer.(*adaptivePacer); ok {
			// A 503 read as a capacity limit (refused) names no wait
			// either, but its request waits the retry policy's delay (R6).
			ap.atPace = p.noWait && !p.refused
		}
		n.pacer.throttled(p.Sent, now, end, !p.noWait)
	}
	if p.budget == n && n.depth+1 < len(keys) && !p.retry {
		n.even.add(keys[n.depth+1], true, now)
	}
	q.judge(s, n, keys, now)
	q.prune(s, now)
	n.waiters.kick()
	return n
}

// unnamed makes the item of keys, throttled on its own by an answer
// that named no wait, a budget of its own and returns it. The server
// named no time to hold the item for, and the retry policy's delay,
// held, is a wait it never asked for: nginx's zone of 40/s, its one
// collection URL refused once in the first wave, sent nothing for the
// policy's 3 s, then everything at once. A budget's pace governs the
// item's requests instead, from a search; a locked item (lockedStrikes)
// is held by its own throttles as before.
func (q *Queue) unnamed(s *hostState, keys []string, now time.Time) *node {
	item := s.nodes[keys[len(keys)-1]]
	fresh := item == nil || !item.shared || item.pacer == nil
	item = q.carveItem(s, keys, now)
	item.lone = item.lone || fresh
	return item
}

// carveItem makes the item of keys a budget of its own, cut out of any
// wider one, and returns it.
func (q *Queue) carveItem(s *hostState, keys []string, now time.Time) *node {
	d := len(keys) - 1
	item := s.node(keys[d], d)
	item.seq = s.seq
	q.share(s, item, now)
	item.carved = true
	return item
}

// attribute returns the budget a throttle of t counts against: the widest node whose distinct throttled targets within
// spreadWindow reach the 5-n rule, a node already a budget, or t's own
// item when requests to it were throttled together; nil when the throttle
// is t's alone. concurrent says the throttled request was out while t's
// previous throttle's wait ran.
func (q *Queue) attribute(s *hostState, keys []string, now time.Time, concurrent bool) *node {
	if c := q.carvedOf(s, keys, now); c != nil {
		// A budget of its own: its throttles say nothing of its parent.
		return c
	}
	if d := len(keys) - 1; d > 0 && concurrent {
		// Requests to one item throttled together: a budget of its own
		// (a mailbox, a locked item, one collection's POSTs), whose
		// throttles count for no node above it, unless enough of its
		// siblings were too (siblings.go).
		if a := q.siblingsOf(s, keys, now); a != nil {
			return a
		}
		item := q.carveItem(s, keys, now)
		item.together = true
		markKin(s, keys, now)
		return item
	}
	if k := q.kin(s, keys, now); k != nil {
		return k
	}
	until := now.Add(spreadWindow)
	var found *node
	for d := range len(keys) - 1 {
		n := s.node(keys[d], d)
		n.seq = s.seq
		n.throttles.add(now)
		isItem := d+1 == len(keys)-1
		if isItem {
			n.ownAt = now
		}
		c := n.spread(keys[d+1], isItem, now, until)
		if found == nil && (n.paces(now, q.recovery) || c >= need(d) && n.overrun(&s.wave)) {
			found = n
		}
	}
	if found == nil {
		d := len(keys) - 1
		item := s.nodes[keys[d]]
		if item == nil && concurrent {
			item = s.node(keys[d], d)
		}
		if item != nil && (item.paces(now, q.recovery) || concurrent) {
			item.seq = s.seq
			found = item
		}
	}
	if found == nil {
		return nil
	}
	if found.gathers && !s.onlyCarvedItems(found, now) {
		q.ungather(s, found, now)
	}
	q.share(s, found, now)
	return found
}

// succeeded records a success of t, sent as p, at now. waved says the
// fast path already counted it in the host's wave (its first throttle
// came while the success was reported).
//
// A success of the first wave counts once: in the nodes on its path that
// are not budgets yet, else in the host's wave, which the host's first
// budget takes beside its own count. Counted in both, the first wave's
// successes read up to half again what the server let through, and the
// search starts, and the fit reads, as if its bucket were that much
// larger. Counted in the host's node alone, before its API has one, it
// counts in its API's wave too, which that API's first budget takes:
// behind nginx's zones the first throttle, in one zone, made the host's
// node, and another zone's budget, formed a few milliseconds later, took
// the 5 of its 11 successes answered before; its search read the other
// 6 as a refill that was not there and fitted 151/s for 100/s, and its
// next refusal halved the pace for the run (1.33x of the zone's limit,
// in virtual time).
func (q *Queue) succeeded(s *hostState, t *target, p Pass, now time.Time, waved bool) {
	s.lastSuccess = now
	if p.Sent.After(s.servedSent) {
		s.servedSent = p.Sent
		for _, w := range s.early {
			if !w.refused.IsZero() && p.Sent.After(w.refused) {
				signal(w)
			}
		}
	}
	if e := s.paths[t.path]; e != nil {
		e.strikes = 0
	}
	keys := t.keys()
	counted, apiCounted := waved, waved
	for d, k := range keys {
		if n := s.nodes[k]; n != nil && !n.shared && !waved {
			n.successes.addTook(p.Sent, now.Sub(p.Sent))
			counted, apiCounted = true, apiCounted || d > 0
		}
	}
	n := p.budget
	if n == nil || !n.shared {
		n = q.budgetOf(s, keys, now)
	}
	if n == nil || n.pacer == nil {
		// No budget yet: what the server let through counts for the
		// first one, as on the fast path (answers that announce a budget
		// come this way).
		switch {
		case !counted:
			s.addWave(t.api(), p.Sent, now.Sub(p.Sent))
		case !apiCounted:
			s.addAPIWave(t.api(), p.Sent, now.Sub(p.Sent))
		}
		return
	}
	if p.Sent.Before(n.since) && !waved {
		// Sent before its first throttle came back: part of the same wave.
		n.pacer.settle(1, p.Sent)
	}
	n.pacer.succeeded(p.Sent, now)
	if p.budget == n {
		n.lone = false
	}
	if p.budget == n && n.depth+1 < len(keys) && !p.retry {
		n.even.add(keys[n.depth+1], false, now)
		q.judge(s, n, keys, now)
	}
}

// judge splits budget n when its throttles do not fall alike on its
// children: each throttled child becomes a budget of its own, cut out of
// n, and n searches for its pace afresh for the rest, from the pace it had
// (searchOn).
func (q *Queue) judge(s *hostState, n *node, keys []string, now time.Time) {
	hot, uneven := n.even.uneven()
	if !uneven || len(hot) == 0 {
		// Nothing to cut out: n's pace stands.
		return
	}
	for _, k := range hot {
		c := s.node(k, n.depth+1)
		c.share(now, q.newPacer)
		c.carved, c.named = true, c.named || n.named
		c.lastEnd, c.seq = later(c.lastEnd, n.lastEnd), s.seq
	}
	n.pacer, n.since = q.relearn(n.pacer, now), now
	n.even = evenness{}
	n.waiters.wakeAll()
}

// relearn returns the pacer a budget split by judge learns its pace with
// for the rest of its children: a search from the pace old had (searchOn,
// from half of it). Its pace was the cut-out children's as much as the
// rest's, so it may be low; but a search from nothing, at 4 a second, met
// the throttles of the server's
// budget still counting the last overshoot and fitted 8 a second, where a
// sliding window behind 50 users served 400, and its curve took five
// seconds to climb back. From the pace it had, the search finds a rate the
// split raised within a few round trips, and a split that was wrong costs a
// throttle, not the budget's rate.
func (q *Queue) relearn(old pacer, now time.Time) pacer {
	p := q.newPacer(now)
	if op, ok := old.(*adaptivePacer); ok {
		if np, ok := p.(*adaptivePacer); ok {
			np.searchOn(op, now)
		}
	}
	return p
}

// share makes n the budget of its requests, when it is not yet, and
// hands it the holds of the throttles it formed from (handOver).
func (q *Queue) share(s *hostState, n *node, now time.Time) {
	if q.form(s, n, now) {
		q.handOver(s, n, now)
	}
}

// form makes n the budget of its requests and reports whether it was
// not one yet.
func (q *Queue) form(s *hostState, n *node, now time.Time) bool {
	if n.shared && n.pacer != nil {
		return false
	}
	n.share(now, q.newPacer)
	// Widening: budgets below it were the same budget seen through fewer
	// targets. The pace learned by the latest of them, from the same
	// server, carries over; they end in it.
	var (
		learned pacer
		latest  uint64
		// The first wave's successes, counted by whichever of the budgets
		// below formed first: the wider budget let them all through.
		wave      int
		waveStart time.Time
	)
	// Items throttled together are budgets of their own, cut out of n,
	// when an item throttled on its own below n shows n's own traffic a
	// budget (a user of the users API beside its mailboxes, siblings.go):
	// taken in, a mailbox's pace became Identity's.
	apart := !s.onlyCarvedItems(n, now)
	for _, c := range s.nodes {
		if c.together && apart {
			continue
		}
		if c != n && c.shared && c.pacer != nil && c.depth > n.depth && below(c.key, n.key) {
			if ap, ok := c.pacer.(*adaptivePacer); ok && ap.burst > 0 {
				wave += ap.burst
				if !ap.waveStart.IsZero() && (waveStart.IsZero() || ap.waveStart.Before(waveStart)) {
					waveStart = ap.waveStart
				}
			}
			if learned == nil || c.seq > latest {
				learned, latest, n.since = c.pacer, c.seq, c.since
			}
			n.named = n.named || c.named
			c.shared, c.pacer, c.carved = false, nil, false
			c.waiters.wakeAll()
		}
	}
	if learned != nil {
		if ap, ok := learned.(*adaptivePacer); ok && wave > ap.burst {
			// POSTs to 50 mailboxes behind one window: the first
			// mailbox's budget took the wave's 224 successes, the latest
			// none, and the users API's budget, taking the latest's pace,
			// searched from 4/s and fitted 8/s for five seconds (2.35x
			// the limit in virtual time).
			ap.settle(wave-ap.burst, waveStart)
		}
		n.pacer = learned
		return true
	}
	// The host's successes before its first throttle were counted
	// without the lock: the first budget of the host takes them as what
	// the server let through (most hosts are one budget), or those to
	// its API when it is below the host: nginx's zones on one host each
	// let their own through, and one taking them all left the others a
	// search from none, whose fit, assuming a bucket of one, read more
	// than twice their rate (in virtual time).
	api, _, _ := strings.Cut(n.key, "/")
	w := s.wave.take(now)
	if api != "" && w.n > 0 {
		if aw, ok := s.takeAPI(api, now); ok {
			w = aw
		}
	}
	if w.n > 0 {
		settleWave(n.pacer, w)
		return true
	}
	// A wider budget formed in the same wave took them: the wave was this
	// budget's as much as its, and cut out of it now, this one takes what
	// it learned, the wider one starting afresh for the rest.
	for k := n.key; k != ""; {
		k = parentKey(k)
		if a := s.nodes[k]; a != nil && a.shared && a.pacer != nil && a.budget.live(now, q.recovery) && now.Sub(a.since) < spreadWindow {
			n.pacer, n.since, n.named = a.pacer, a.since, n.named || a.named
			a.pacer = q.newPacer(now)
			return true
		}
	}
	// The host's first budget formed in another API: this one takes what
	// the server let through to its own.
	if api == "" {
		return true
	}
	if w, _ := s.takeAPI(api, now); w.n > 0 {
		settleWave(n.pacer, w)
	}
	return true
}

// handOver ends the holds of the targets below n, a budget from now on,
// that throttles of the spread it formed from set: those throttles were
// its own, counted before the evidence placed them, and what they held
// goes through its pace, as a throttle placed at once holds only its
// own request. Behind nginx's zones, whose bare 429s hold a target for
// the retry policy's 3 s, the first wave's holds on 50 ids kept every
// later request to them waiting as long, and with them every worker
// of the run: nothing was sent for a second, and the run took 2.3x its
// limit. A target locked by its own throttles (strikes) stays held.
func (q *Queue) handOver(s *hostState, n *node, now time.Time) {
	var ended []string
	for path, e := range s.paths {
		if e.end.After(now) && e.strikes == 0 && now.Sub(e.at) < spreadWindow && q.under(path, n.key) {
			e.end = time.Time{}
			ended = append(ended, path)
		}
	}
	if len(ended) == 0 {
		return
	}
	for url, e := range s.urls {
		if path, _, _ := strings.Cut(url, "?"); slices.Contains(ended, path) {
			e.end = time.Time{}
		}
	}
	// Their requests wait in n's queue, or in their items' own.
	for _, m := range s.nodes {
		if m == n || below(m.key, n.key) {
			m.waiters.wakeAll()
		}
	}
}

// under reports whether path's node is key's or below it.
func (q *Queue) under(path, key string) bool {
	k := strings.Join(q.segments(path), "/")
	return k == key || below(k, key)
}

// settleWave gives p the successes of the wave w counted.
func settleWave(p pacer, w waveTally) {
	p.settle(w.n, w.start)
	if ap, ok := p.(*adaptivePacer); ok {
		ap.waveServed(w.took)
	}
}

// parentKey returns the key of the node above key's.
func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}

// below reports whether the node key is below the node of prefix.
func below(key, prefix string) bool {
	return prefix == "" || strings.HasPrefix(key, prefix) && len(key) > len(prefix) && key[len(prefix)] == '/'
}
