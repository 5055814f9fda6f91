package throttle

import (
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
)

// answerWait bounds how long a scope whose announced budget is spent, with
// no reset named, waits for an answer in flight to say more before it lets
// one request go to ask.
const answerWait = time.Second

// announced mirrors the budget a server last announced for a scope,
// counted down by the requests released since.
type announced struct {
	budget ratelimit.Budget
	at     time.Time // when the answer announcing it came; zero: none
	// left is what the budget leaves for requests not yet sent: the
	// remainder announced, less the requests in flight when it came (the
	// server may not have counted them yet) and those released since.
	left float64
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

// counted reports whether the budget says how many requests it has left,
// so that it, not the pace learned from throttles, decides releases.
func (a *announced) counted() bool {
	return a.budget.HasRemaining || a.budget.Spent()
}

// next returns the earliest time the budget lets another request go, with
// inflight requests of the scope out. A spent budget opens at its reset
// with its whole limit; one without a reset waits for an answer in flight
// to say more, for at most answerWait, or lets one request go when none
// is out.
func (a *announced) next(now time.Time, inflight int) time.Time {
	if a.left >= 1 {
		return now
	}
	if reset := a.budget.Reset; !reset.IsZero() {
		if now.Before(reset) {
			return reset
		}
		a.budget.Reset = time.Time{}
		a.left = max(a.budget.Limit, 1) - float64(inflight)
		if a.left >= 1 {
			return now
		}
	}
	if ask := a.at.Add(answerWait); inflight > 0 && now.Before(ask) {
		return ask
	}
	// Nothing out will answer, or the answers are overdue (their requests
	// may have been abandoned): one request goes to ask.
	a.left, a.at = 1, now
	return now
}

// sent counts a release against the budget.
func (a *announced) sent() { a.left-- }
