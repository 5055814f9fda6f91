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
// 2.) also counts the items carved below each ancestor: once need(n) of
// them were carved within spreadWindow below an ancestor n segments below
// the root, they are one budget, with one pacer, and the items carved
// there later join it. That holds only while nothing else below the
// ancestor tells the other story: an item throttled on its own below it
// (a user of the users API, beside its mailboxes) shows that the
// ancestor's own traffic has a budget of its own, as Microsoft Graph's
// users API has beside each mailbox's, and its carved items stay budgets
// of their own, as before. Throttles of prefixes whose items were not
// carved yet (a mailbox refused once so far) say nothing either way.
//
// The group is a hypothesis like any budget: its tallies count each item
// (evenness), and an item that met throttles the others escaped is split
// out with a pace of its own (a locked item, a mailbox with a smaller
// budget of its own).

// siblingsOf returns the budget of the carved siblings that the item of
// keys, carved at now, belongs to, making it when the evidence is there;
// nil when the item keeps a budget of its own. The caller holds s.mu.
func (q *Queue) siblingsOf(s *hostState, keys []string, now time.Time) *node {
	d := len(keys) - 1
	item := s.nodes[keys[d]]
	until := now.Add(spreadWindow)
	for a := 1; a < d; a++ {
		anc := s.node(keys[a], a)
		anc.seq = s.seq
		anc.carvedMarks = addMark(anc.carvedMarks, mark{child: keys[d], item: true, until: until}, now)
		if len(anc.carvedMarks) < need(a) || !q.onlyCarvedItems(s, anc, now) {
			continue
		}
		g := s.nodes[groupKey(keys[a])]
		if g == nil || !g.paces(now, q.recovery) {
			g = q.group(s, keys[a], a, now)
		}
		item.siblings, item.shared, item.pacer = g, false, nil
		g.seq = s.seq
		return g
	}
	return nil
}

// group makes the budget of the items carved below the node key at
// depth: the items carved so far give it their pacers' counts of the
// first wave and wait for it from now on.
func (q *Queue) group(s *hostState, key string, depth int, now time.Time) *node {
	g := s.node(groupKey(key), depth+1)
	g.carved, g.group, g.seq = true, true, s.seq
	g.shared, g.pacer = false, nil
	g.share(now, q.newPacer)
	for _, c := range s.nodes {
		if c == g || !c.carved || c.group || !c.shared || !below(c.key, key) {
			continue
		}
		if ap, ok := c.pacer.(*adaptivePacer); ok {
			g.pacer.settle(ap.burst, ap.waveStart)
		}
		g.named = g.named || c.named
		g.lastEnd = later(g.lastEnd, c.lastEnd)
		c.siblings, c.shared, c.pacer = g, false, nil
		c.waiters.wakeAll()
	}
	return g
}

// onlyCarvedItems reports whether every item throttled on its own below
// n lately was carved: no request below n outside the carved items met a
// throttle. A throttled prefix (a mailbox refused once so far) is not an
// item and says nothing either way.
func (q *Queue) onlyCarvedItems(s *hostState, n *node, now time.Time) bool {
	for _, m := range n.marks {
		if !m.item || !now.Before(m.until) {
			continue
		}
		if c := s.nodes[m.child]; c == nil || !c.carved {
			return false
		}
	}
	return true
}

// groupKey returns the key of the budget of the carved items below the
// node key: no node's key ends in a slash, since paths' empty segments
// are dropped.
func groupKey(key string) string { return key + "/" }

// kid returns the key of the child of n that keys lead to, which n's
// tallies count by: its item, for a group of carved siblings; false when
// keys end at n.
func (n *node) kid(keys []string) (string, bool) {
	if n.group {
		return keys[len(keys)-1], true
	}
	if n.depth+1 < len(keys) {
		return keys[n.depth+1], true
	}
	return "", false
}
