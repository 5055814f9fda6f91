package throttle

import "time"

// Carved siblings: one budget seen item by item.
//
// Requests to one item throttled together make the item a budget of its
// own (a mailbox, a locked item). But one budget over many items looks
// the same in the first wave: 50 mailboxes behind one limiter each get
// four requests of 200, and each is refused three of them together. Left
// alone, each mailbox's pacer searches for its own rate from nothing;
// ending 50 searches takes 50 throttles, each costing a worker its
// Retry-After (or, without one, its policy's delay), and the 50 fits,
// each made from one or two releases, add up far above the one budget.
//
// So the 5-n rule that widens a budget over throttled children (doc.go,
// 2.) also counts the items throttled together below each ancestor: once
// need(n) of them were, within spreadWindow, below an ancestor n segments
// below the root, the ancestor is their budget, as it would be had each
// been throttled once, and under the same share of throttles among its
// answers (minThrottleShare): it gathers them (their own budgets end in
// it, and its pacer paces every request below it, as for 2000 ids), and a
// throttle of requests to one item sent together below it is its own from
// then on, not the item's. The share tells a budget from locked items: 50
// mailboxes behind one limiter are refused most of what they are sent,
// while a drive's locked items, requested twice at once now and then
// among thousands of their served siblings, are a few of its answers
// (gathered, two of them paced the whole drive at a hundredth of what the
// server served, in one schedule in a few hundred of the locked-items
// simulation). That holds only while nothing else below the ancestor
// tells the other story: an item throttled on its own below it, and not
// as deep as the carved ones (a user of the users API, beside its
// mailboxes; a user beside carved users is one of them, sent alone),
// shows that the ancestor's own
// traffic has a budget of its own, as Microsoft Graph's users API has
// beside each mailbox's, and the items stay budgets of their own, as
// before. When that item is throttled only after the ancestor gathered
// them (the mailboxes' small buckets ran dry first, the users API's own a
// few milliseconds later), the ancestor gives them back: they are budgets
// of their own again, and it keeps its own traffic. Throttles of prefixes
// whose items were not carved yet (a mailbox refused once so far) say
// nothing either way.
//
// The gathered budget is a hypothesis like any: its tallies count each
// child, and a child that met throttles the others escaped is split out
// with a pace of its own (doc.go, 3.: a mailbox with a smaller budget of
// its own), and stays out.

// siblingsOf returns the ancestor of the item of keys, whose requests were
// throttled together at now, that is the budget of its carved siblings:
// one that gathered them, or one the evidence makes so now; nil when the
// item is to be a budget of its own. The caller holds s.mu.
func (q *Queue) siblingsOf(s *hostState, keys []string, now time.Time) *node {
	d := len(keys) - 1
	for a := 1; a < d; a++ {
		if anc := s.nodes[keys[a]]; anc != nil && anc.gathers {
			if anc.paces(now, q.recovery) {
				return anc
			}
			anc.gathers = false // a budget that ended gathers nothing
		}
	}
	until := now.Add(spreadWindow)
	for a := 1; a < d; a++ {
		anc := s.node(keys[a], a)
		anc.seq = s.seq
		anc.carvedMarks = addMark(anc.carvedMarks, mark{child: keys[d], until: until}, now)
		if len(anc.carvedMarks) < need(a) || !anc.overrun(&s.wave) || !s.onlyCarvedItems(anc, now) {
			continue
		}
		anc.gathers = true
		q.share(s, anc, now)
		for _, c := range s.nodes {
			if c.together && below(c.key, anc.key) {
				c.shared, c.pacer, c.carved, c.together = false, nil, false, false
				c.waiters.wakeAll()
			}
		}
		return anc
	}
	return nil
}

// ungather undoes the gathering of n, told otherwise by an item throttled
// on its own below it (a user of the users API, beside its mailboxes)
// once n gathered: the mailboxes that throttled first, while the users
// API's own bucket still served, are budgets of their own again, and n is
// its own traffic's, learning its pace afresh. Left gathered, Identity's
// budget was paced by its mailboxes' throttles for the whole run, at a
// third of its rate (bench scenario (e), 2.5x-3.9x in about half the runs
// on loopback, where the mailboxes' small buckets run dry first).
func (q *Queue) ungather(s *hostState, n *node, now time.Time) {
	n.gathers = false
	for _, m := range n.carvedMarks {
		if !now.Before(m.until) {
			continue
		}
		c := s.node(m.child, budgetDepth(m.child))
		c.share(now, q.newPacer)
		c.carved, c.together, c.named = true, true, n.named
		c.lastEnd, c.seq = n.lastEnd, s.seq
	}
	// Its pace was the mailboxes' as much as its own; the first wave it
	// counted was its own traffic's too, and stays its start.
	old := n.pacer
	n.pacer, n.since = q.newPacer(now), now
	if ap, ok := old.(*adaptivePacer); ok && ap.burst > 0 {
		n.pacer.settle(ap.burst, ap.waveStart)
	}
	n.even = evenness{}
	n.waiters.wakeAll()
}

// onlyCarvedItems reports whether every item throttled on its own below
// n lately was carved, or is a sibling of carved items: no request below
// n outside the carved items' kind met a throttle. A throttled prefix (a
// mailbox refused once so far) is not an item and says nothing either
// way. An item as deep as carved ones is one of them that happened to
// be sent alone (50 users behind one limiter, four requests each, some
// of them refused one at a time): it shows no budget of n's own, and
// taken for one it left each user paced by its own throttles, at about
// 10/s, 2.2x-3.5x the limit in virtual time.
func (s *hostState) onlyCarvedItems(n *node, now time.Time) bool {
	for _, m := range n.marks {
		if !m.item || !now.Before(m.until) {
			continue
		}
		if c := s.nodes[m.child]; c != nil && c.carved || carvedAtDepth(n, budgetDepth(m.child), now) {
			continue
		}
		return false
	}
	return true
}

// carvedAtDepth reports whether an item carved below n lately lies at
// depth.
func carvedAtDepth(n *node, depth int, now time.Time) bool {
	for _, m := range n.carvedMarks {
		if now.Before(m.until) && budgetDepth(m.child) == depth {
			return true
		}
	}
	return false
}
