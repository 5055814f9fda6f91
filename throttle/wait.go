package throttle

import (
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
)

// room returns where a request with keys waits at now: its budget, or
// without one its item's node, nil when it needs no room (no budget and
// nothing holds it).
func (q *Queue) room(s *hostState, keys []string, eligible, now time.Time) *node {
	if n := q.budgetOf(s, keys, now); n != nil {
		return n
	}
	if !eligible.After(now) {
		return nil
	}
	d := len(keys) - 1
	return s.node(keys[d], d)
}

// next returns the earliest time n lets its next request go at now: its
// learned pace, when it paces.
func (q *Queue) next(n *node, now time.Time) time.Time {
	if n.paces(now, q.recovery) && n.window.limit == 0 && n.kidWindow.limit == 0 {
		return n.pacer.next(now)
	}
	return now
}

// acquire blocks the calling request until it may be sent. It returns
// a *HoldError (ErrHoldTooLong) when release would come after deadline.
// refused, when set, is when a bare 429 to the attempt before came back:
// notBefore ends once the host serves a request sent after it
// (AdmitEarly).
func (q *Queue) acquire(ctx context.Context, s *hostState, t *target, refused, notBefore, deadline time.Time, obs Observer) (Pass, error) {
	keys := t.keys()
	s.mu.Lock()
	now := q.clock.Now()
	eligible := later(notBefore, s.held(t))
	if !deadline.IsZero() && eligible.After(deadline) {
		s.mu.Unlock()
		return Pass{}, &HoldError{Until: eligible}
	}
	n := q.room(s, keys, eligible, now)
	if n == nil {
		// Neither paced nor held: it waits for its own time only.
		s.mu.Unlock()
		return Pass{}, wait.Until(ctx, q.clock, notBefore)
	}
	// named is set once the server's own word (a throttle of this URL or
	// path) holds the request: the pace never cuts that hold short.
	named := eligible.After(later(now, notBefore))
	s.seq++
	w := &waiter{notBefore: notBefore, refused: refused, eligible: eligible, seq: s.seq, wake: make(chan struct{}, 1)}
	n.waiters.push(w)
	if !refused.IsZero() {
		s.early = append(s.early, w)
		defer func() {
			s.mu.Lock()
			s.early = slices.DeleteFunc(s.early, func(e *waiter) bool { return e == w })
			s.mu.Unlock()
		}()
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
	var err error
	for {
		now = q.clock.Now()
		if !w.refused.IsZero() && (s.servedSent.After(w.refused) || n.idleFor(w)) {
			// The server serves requests sent since the refusal: the
			// policy's delay has nothing left to wait for, and the pace
			// of the request's budget times it; or idleFor says so.
			if w.notBefore.After(now) {
				w.notBefore = now
			}
			w.refused = time.Time{}
		}
		e := later(w.notBefore, s.held(t))
		named = named || e.After(later(now, w.notBefore))
		if m := q.room(s, keys, e, now); m != n {
			// The evidence moved its budget: it queues there.
			n.waiters.remove(w)
			q.dropIdle(s, n, now)
			if m == nil {
				s.mu.Unlock()
				return Pass{}, wait.Until(ctx, q.clock, w.notBefore)
			}
			n = m
			w.eligible = e
			n.waiters.push(w)
			continue
		}
		if n.waiters[0] == w {
			if !e.Equal(w.eligible) {
				w.eligible = e
				heap.Fix(&n.waiters, w.index)
				if n.waiters[0] != w {
					n.waiters.kick()
					continue
				}
			}
			// A schedule the fleet fitted spaces the budget's releases
			// alone; its own pacer only learns.
			fitted := n.fitted.After(now)
			next := now
			if !fitted {
				next = q.next(n, now)
			}
			ahead := n.slotsUntil.Sub(now.Add(maxSlotsAhead))
			if fitted && (n.reserving >= maxReserving || ahead > 0) && !w.eligible.After(now) {
				// Its turn comes when a reservation under way returns, or
				// when the slots this process holds run low.
				d := time.Duration(-1)
				if n.reserving < maxReserving {
					d = ahead
				}
				if err := q.idleHead(ctx, s, n, w, d, held); err != nil {
					return Pass{}, err
				}
				continue
			}
			if n.window.full(n.inflight) && !w.eligible.After(now) {
				// A concurrency cap the budget learned: its turn comes
				// with an answer.
				if err := q.awaitAnswer(ctx, s, n, w, deadline, held); err != nil {
					return Pass{}, err
				}
				continue
			}
			if kid := n.kidOf(keys); n.kidFull(kid) && !w.eligible.After(now) {
				// Its child's learned cap is full: it waits for an answer
				// from the child out of the budget's queue, so that the
				// requests behind it to other children go meanwhile.
				n.waiters.remove(w)
				return q.gated(ctx, s, n, w, kid, keys, deadline, held)
			}
			at := later(w.eligible, next)
			if !deadline.IsZero() && at.After(deadline) && named && !w.eligible.After(deadline) {
				// The pace would start past the deadline, but the time the
				// server named fits: the request waits that and no more,
				// rather than being refused and then sent at once into
				// the throttle the server named.
				at = w.eligible
			}
			if !deadline.IsZero() && at.After(deadline) {
				n.waiters.remove(w)
				q.dropIdle(s, n, now)
				s.mu.Unlock()
				return Pass{}, &HoldError{Until: at}
			}
			if !at.After(now) {
				n.waiters.remove(w)
				var p Pass
				share, follows := q.fleetShare(n, now)
				if n.live(now, q.recovery) {
					n.release(&p, keys, now)
				}
				if n.paces(now, q.recovery) {
					p.paced = !n.lone
					// While the fleet's schedule spaces the releases, the
					// pacer keeps what it knew for when the store fails:
					// releases at the fleet's rate would run its slots
					// far ahead of its own.
					if !fitted {
						n.pacer.sent(now)
					} else if st, ok := n.pacer.(stander); ok {
						st.stood(now)
					}
				}
				if follows {
					n.reserving++
				}
				q.dropIdle(s, n, now)
				s.mu.Unlock()
				if !follows {
					return p, nil
				}
				// Its slot in the fleet's schedule, so that the processes'
				// releases interleave.
				took, err := q.follow(ctx, t.host, s, n, share, now, deadline, fitted)
				switch {
				case err != nil:
					return Pass{}, err
				case took || !fitted:
					p.fleet = took && p.budget != nil
					return p, nil
				}
				// The store did not answer, and nothing spaced the release:
				// the budget's own pacer does, from now on.
				s.mu.Lock()
				if p.budget != nil {
					n.back(p)
				}
				if m := q.room(s, keys, e, q.clock.Now()); m != nil {
					n = m
					s.seq++
					w.seq = s.seq
					n.waiters.push(w)
					continue
				}
				s.mu.Unlock()
				return Pass{}, wait.Until(ctx, q.clock, w.notBefore)
			}
			s.mu.Unlock()
			held(now, at)
			err = wait.Woken(ctx, q.clock, at.Sub(now), w.wake)
		} else {
			// Behind others it leaves no earlier than it becomes eligible,
			// and not at all once its deadline has come: refuse it then
			// rather than when its turn comes, maybe long after.
			if !deadline.IsZero() && (w.eligible.After(deadline) || !now.Before(deadline)) {
				// Behind others: no sooner than its own time and the
				// budget's next release.
				until := later(later(w.eligible, now), q.next(n, now))
				n.waiters.remove(w)
				q.dropIdle(s, n, now)
				s.mu.Unlock()
				return Pass{}, &HoldError{Until: until}
			}
			if !e.Equal(w.eligible) {
				// Its hold moved (handOver): its place in the queue too.
				w.eligible = e
				heap.Fix(&n.waiters, w.index)
				if n.waiters[0] == w {
					continue
				}
			}
			s.mu.Unlock()
			held(now, now.Add(time.Nanosecond))
			d := time.Duration(-1)
			if !deadline.IsZero() {
				d = deadline.Sub(now)
			}
			err = wait.Woken(ctx, q.clock, d, w.wake)
		}
		s.mu.Lock()
		if err != nil {
			n.waiters.remove(w)
			q.dropIdle(s, n, q.clock.Now())
			s.mu.Unlock()
			return Pass{}, err
		}
	}
}

// dropIdle forgets n when it was made only to hold requests and holds none
// now: no budget, no evidence, it knows nothing worth keeping, and kept it
// would cost every later answer of the host.
func (q *Queue) dropIdle(s *hostState, n *node, now time.Time) {
	if !n.holds() && !n.shared && len(n.marks) == 0 &&
		!n.budget.live(now, q.recovery) && s.nodes[n.key] == n {
		delete(s.nodes, n.key)
	}
}

// idleFor reports whether w, the retry of a bare 429 (AdmitEarly), may go
// at the pace of its budget n with no request sent after its refusal served:
// n is a budget its server served before (not lone: an item whose own
// refusal made it one, the only evidence of it, waits the retry policy's
// delay, as R6 sets), and has nothing out and nothing to send before w.
// A request arriving then would go at the pace, and no answer is on its
// way to tell more. Waiting for one, the last requests of one of nginx's
// zones, refused together by a probe above the pace's fit, waited the
// policy's delay past the run's end (in virtual time, 1.9x of the zone's
// limit). The caller holds the host's lock.
func (n *node) idleFor(w *waiter) bool {
	return !n.lone && n.inflight == 0 && n.waiters[0] == w
}
