package throttle

import "time"

// Kin: the next item of a kind already seen to be budgets of their own.
//
// Requests to one item throttled together make it a budget of its own
// (attribute), but an item's first throttle cannot show that: nothing
// else sent to it has come back. Below a budget with traffic of its own,
// that first throttle is charged to the budget. Microsoft Graph's users
// API keeps a budget for its users and one for each mailbox below them:
// once the first wave carved six mailboxes out of Identity's budget, the
// first throttle of each of the other four, met after the wave, slowed
// Identity's pace, twice split it (judge, which searches afresh from
// half), and a search ended by a mailbox's refusal fitted Identity at
// half its rate: every worker of bench scenario (e) then waited on
// Identity, and the run took twice its limit, in about one run in six
// on loopback.
//
// So an item as deep as the items carved together lately below a budget,
// deeper than the budget's own items, which met throttles of their own
// lately (Identity's users beside its mailboxes), is one of the carved
// kind from its first throttle: a budget of its own, whose pace it
// learns from nothing, as a split child does (judge). Both kinds of
// evidence last a recovery window. Where the budget's own items are as
// deep as the carved ones (a drive whose locked items were carved), or
// no item of its own met a throttle (50 mailboxes behind one limiter),
// nothing changes: which is which there is what siblings.go and the
// evenness judge decide.

// markKin records on the ancestors of keys that its item, at depth
// len(keys)-1, was carved because requests to it were throttled together.
func markKin(s *hostState, keys []string, now time.Time) {
	d := len(keys) - 1
	for a := 1; a < d-1; a++ {
		if anc := s.nodes[keys[a]]; anc != nil {
			anc.kinDepth, anc.kinAt = d, now
		}
	}
}

// kin returns the item of keys made a budget of its own because it is of
// the kind carved below a budget with traffic of its own; nil when it is
// not. The caller holds s.mu.
func (q *Queue) kin(s *hostState, keys []string, now time.Time) *node {
	d := len(keys) - 1
	for a := 1; a < d-1; a++ {
		anc := s.nodes[keys[a]]
		if anc == nil || anc.gathers || anc.kinDepth != d || !anc.paces(now, q.recovery) ||
			now.Sub(anc.kinAt) >= q.recovery || now.Sub(anc.ownAt) >= q.recovery {
			continue
		}
		item := s.node(keys[d], d)
		item.share(now, q.newPacer)
		item.carved, item.together, item.named = true, true, anc.named
		item.seq = s.seq
		anc.kinAt = now
		// Its requests waiting in the budget's line go through its own
		// pace from now on.
		anc.waiters.wakeAll()
		return item
	}
	return nil
}
