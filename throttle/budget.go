package throttle

import (
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
)

// announced mirrors the budget a server last announced for a node of the
// budget tree: what its gauges report, and how long it speaks for the node.
type announced struct {
	budget ratelimit.Budget
	at     time.Time // when the answer announcing it came; zero: none
	// left is what the budget leaves for requests not yet sent: the
	// remainder announced, less the requests in flight when it came (the
	// server may not have counted them yet) and those released since.
	left float64
	// told is when this process last told the fleet the budget was
	// spent (Store.Announce); zero: never.
	told time.Time
}

// refresh takes b, announced at now in the answer to a request sent at
// sent, while inflight other requests of the scope were out. An answer to
// a request sent before the current budget's answer came may have been
// counted by the server before it: it only ever lowers what is left and
// delays the reset, so that answers arriving out of order never free what
// is spent.
func (a *announced) refresh(b ratelimit.Budget, sent, now time.Time, inflight int) {
	remaining := b.Remaining
	if !b.HasRemaining {
		remaining = 0 // only a spent budget is counted without it
	}
	left := remaining - float64(inflight)
	if !a.at.IsZero() && sent.Before(a.at) {
		// Of a burst answered together, the one the server counted last
		// sees the budget emptiest and furthest from its reset, whatever
		// order the answers come in.
		left = min(left, a.left)
		b.Reset = later(b.Reset, a.budget.Reset)
		now = a.at
	}
	a.budget, a.at, a.left = b, now, left
}

// live reports whether the budget still speaks for the scope at now: until
// its reset, and for the recovery window after its answer.
func (a *announced) live(now time.Time, recovery time.Duration) bool {
	return !a.at.IsZero() && now.Before(later(a.at.Add(recovery), a.budget.Reset))
}
