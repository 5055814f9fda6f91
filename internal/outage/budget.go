package outage

import (
	"sync/atomic"
	"time"
)

// The retry budget of a host, in the manner of Finagle's RetryBudget (a
// share of the requests of the last ttl, plus a reserve) with the AWS SDK's
// refund (a retry the host answers gives back what it took): over the last
// budgetWindow, the retries of failures sent to a host, less those it
// answered, may not exceed budgetReserve plus retryRatio times the requests
// sent to it. Requests are counted by the second they started in, so that
// counting one costs an atomic add and no clock reading.
const (
	// retryRatio is the share of the window's requests that may be
	// retried: half, the bound the handler keeps on a host that fails
	// every request.
	retryRatio = 0.5
	// budgetReserve is what the budget allows whatever the traffic, as
	// gRPC's maxTokens (10) and Finagle's minimum do: a lone request still
	// retries as its policy says, 10 times by default.
	budgetReserve = 10
	// budgetWindow is how long a request counts: Finagle's default ttl. It
	// spans the first retries of the default backoff (3 s, then 12 s
	// later), so that the requests of a burst pay for their own retries.
	budgetWindow = 10 * time.Second
	budgetSlots  = int64(budgetWindow / time.Second)
)

// budget counts a host's requests and charged retries per second over the
// last budgetWindow.
type budget struct {
	slots [budgetSlots]budgetSlot
}

type budgetSlot struct {
	second   atomic.Int64 // Unix second the counts are of
	requests atomic.Int64
	retries  atomic.Int64 // retries taken less retries given back
}

// slot returns the slot of second sec, cleared when it held an older one;
// nil when sec is older than the slot's own.
func (b *budget) slot(sec int64) *budgetSlot {
	s := &b.slots[(sec%budgetSlots+budgetSlots)%budgetSlots]
	for {
		cur := s.second.Load()
		switch {
		case cur == sec:
			return s
		case cur > sec:
			return nil
		case s.second.CompareAndSwap(cur, sec):
			// Counts added between the swap and the stores are lost:
			// near enough for a budget.
			s.requests.Store(0)
			s.retries.Store(0)
			return s
		}
	}
}

// request counts a request started at t.
func (b *budget) request(t time.Time) {
	if s := b.slot(t.Unix()); s != nil {
		s.requests.Add(1)
	}
}

// take charges a retry at now, reporting false when the window's budget is
// spent; credit charges it whatever the budget says.
func (b *budget) take(now time.Time, credit bool) bool {
	if !credit && b.left(now) < 1 {
		return false
	}
	if s := b.slot(now.Unix()); s != nil {
		s.retries.Add(1)
	}
	return true
}

// refund gives back the retry of an attempt sent at t that was answered.
func (b *budget) refund(t time.Time) {
	if s := b.slot(t.Unix()); s != nil {
		s.retries.Add(-1)
	}
}

// left returns the retries the window still allows at now.
func (b *budget) left(now time.Time) float64 {
	sec := now.Unix()
	var requests, retries int64
	for i := range b.slots {
		s := &b.slots[i]
		if at := s.second.Load(); at > sec-budgetSlots && at <= sec {
			requests += s.requests.Load()
			retries += s.retries.Load()
		}
	}
	return budgetReserve + retryRatio*float64(requests) - float64(retries)
}
