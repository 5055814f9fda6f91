package middleware

import (
	"net/http"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// answer is the answer to one attempt as the retry loop judges it: the
// options.Attempt that a Classifier, the policy and ShouldRetry see, built
// once, and the policy's answer about the retry it would lead to, asked
// once and used both for the queue's hold and for the delay. A stateful
// policy (kiota-http-go's schedule, which adds up the delays it gave) is
// thus asked exactly once per retry. Both are made only when needed: an
// attempt that succeeds builds neither.
//
// It holds what it needs of the request's run rather than the run itself,
// which then stays on its goroutine's stack.
type answer struct {
	n      int // the retry this answer would lead to: 1 after the first attempt
	req    *http.Request
	resp   *http.Response // nil when err is set
	err    error
	back   reading   // when the answer came
	start  time.Time // when the request's first attempt started
	policy options.Policy
	batch  *batchRun // nil unless the request is a JSON batch
	timed  int       // the request's earlier answers that named their wait
	// paced says the answer is a throttle naming no wait of an attempt a
	// budget's pace let go (throttle.Pass.Paced): the pace's overshoot,
	// which counts as timed.
	paced bool

	a            options.Attempt
	built, asked bool
	delay        time.Duration
	retry        bool
	// The wait the answer's Retry-After names, parsed once for both the
	// queue and the policy.
	named            time.Duration
	hasNamed, parsed bool
}

// namedWait returns the wait the answer's Retry-After (or its
// millisecond variants) names, and whether it names one; it is read from
// the header once, when first asked.
func (ans *answer) namedWait() (time.Duration, bool) {
	if !ans.parsed && ans.resp != nil {
		ans.named, ans.hasNamed = RetryAfter(ans.resp.Header, ans.back.now())
		ans.parsed = true
	}
	return ans.named, ans.hasNamed
}

// newAnswer returns the answer to attempt req, resp or err, which leads to
// retry n if any.
func (r *run) newAnswer(n int, req *http.Request, resp *http.Response, err error) answer {
	return answer{n: n, req: req, resp: resp, err: err, back: reading{clock: r.h.clock},
		start: r.start, policy: r.policy, batch: r.batch, timed: r.timed}
}

// attempt returns the answer as a Classifier, the policy and ShouldRetry
// see it before retry n. It is the one constructor of options.Attempt. Its
// RetryAfter is the wait the answer names; for a batch whose items remain
// to be resent, the longest wait those items name.
func (ans *answer) attempt() options.Attempt {
	if ans.built {
		return ans.a
	}
	now := ans.back.now()
	ans.a = options.Attempt{Retry: ans.n, Elapsed: now.Sub(ans.start), Request: ans.req, Response: peek(ans.resp), Err: ans.err}
	switch {
	case ans.batch.answeredByItems():
		ans.a.RetryAfter, ans.a.HasRetryAfter = ans.batch.wait, ans.batch.named
	case ans.resp != nil:
		ans.a.RetryAfter, ans.a.HasRetryAfter = ans.namedWait()
	}
	ans.a.Timed = ans.timed
	if ans.a.HasRetryAfter || ans.paced {
		ans.a.Timed++
	}
	ans.built = true
	return ans.a
}

// next returns the policy's answer about retry n: its delay, and whether
// to make the retry at all.
func (ans *answer) next() (time.Duration, bool) {
	if !ans.asked {
		ans.delay, ans.retry = ans.policy.Next(ans.attempt())
		ans.asked = true
	}
	return ans.delay, ans.retry
}

// policyHold is how long a throttle that names no wait holds its target:
// the delay the policy gives retry n, or none when it would not retry.
//
// paced says a budget's pace let the attempt go: the throttle is the
// pace's overshoot, and the pace slows the whole budget down for it. The
// backoff does not step for it, as for a throttle that names its wait:
// behind nginx's bare 429s a request refused twice by its budget's pace
// waited 3 s and then 12 s, and its run took five times its limit.
func (ans *answer) policyHold(paced bool) time.Duration {
	if !ans.built {
		ans.paced = paced
	}
	if d, ok := ans.next(); ok {
		return d
	}
	return 0
}
