package outage

import "sync/atomic"

// The retry budget of a host: gRPC's retry throttling and the AWS SDK's
// retry quota (tokens put in by requests, taken by retries, given back by a
// retry the host answers), with Envoy's measure of its size (a share of the
// requests active now). Each request puts retryRatio of a token in when it
// starts; each retry of a failure takes a whole one when it is sent, and
// gives it back when the host answers it. The bucket holds at most
// budgetReserve plus retryRatio times the host's active requests: what it
// holds beyond that (a burst that ended, an hour of quiet traffic) is
// dropped, so that an outage meets no stock of retries saved up before it,
// while a request still in its backoff keeps its share for its own retries
// however long the backoff. Tokens are kept in thousandths so that the
// ratio is exact in an atomic integer.
const (
	// retryRatio is what each request puts in: half a retry, the bound the
	// handler keeps on a host that fails every request.
	retryRatio = 0.5
	// budgetReserve is what the bucket holds whatever the traffic, and at
	// start, as gRPC's maxTokens (10): a lone request retries as its policy
	// says, 10 times by default.
	budgetReserve = 10
	milliToken    = 1000
)

// budget is a host's retry bucket and its active requests.
type budget struct {
	tokens atomic.Int64 // milli-tokens, possibly above the cap until the next look
	active atomic.Int64
}

func newBudget() *budget {
	b := &budget{}
	b.tokens.Store(budgetReserve * milliToken)
	return b
}

// capacity is what the bucket may hold now.
func (b *budget) capacity() int64 {
	return budgetReserve*milliToken + int64(retryRatio*milliToken)*max(b.active.Load(), 0)
}

// start counts a request that starts, and puts its share in.
func (b *budget) start() {
	b.active.Add(1)
	b.add(int64(retryRatio * milliToken))
}

// end counts a request that ended; its share stays until spent or capped.
func (b *budget) end() { b.active.Add(-1) }

// add puts n milli-tokens in, up to the capacity.
func (b *budget) add(n int64) {
	for {
		t, c := b.tokens.Load(), b.capacity()
		if t >= c {
			return
		}
		if b.tokens.CompareAndSwap(t, min(t+n, c)) {
			return
		}
	}
}

// take takes a token for a retry, reporting false when less than one is
// left; with credit it takes one whatever is left, the bucket going below
// zero.
func (b *budget) take(credit bool) bool {
	for {
		t := b.tokens.Load()
		have := min(t, b.capacity())
		if have < milliToken && !credit {
			return false
		}
		if b.tokens.CompareAndSwap(t, have-milliToken) {
			return true
		}
	}
}

// refund gives back the token of a retry the host answered.
func (b *budget) refund() { b.add(milliToken) }
