package middleware

import (
	"net/http"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// failure is the answer to one attempt as the retry loop judges it: the
// options.Attempt that a Classifier, the policy and ShouldRetry see, built
// once, and the policy's answer about the retry it would lead to, asked
// once and used both for the queue's hold and for the delay. A stateful
// policy (kiota-http-go's schedule, which adds up the delays it gave) is
// thus asked exactly once per retry. Both are made only when needed: an
// attempt that succeeds builds neither.
//
// It holds what it needs of the request's run rather than the run itself,
// which then stays on its goroutine's stack.
type failure struct {
	n      int // the retry this answer would lead to: 1 after the first attempt
	req    *http.Request
	resp   *http.Response // nil when err is set
	err    error
	back   reading   // when the answer came
	start  time.Time // when the request's first attempt started
	policy options.Policy
	batch  *batchRun // nil unless the request is a JSON batch

	a            options.Attempt
	built, asked bool
	delay        time.Duration
	retry        bool
}

// failure returns the answer to attempt req, resp or err, which leads to
// retry n if any.
func (r *run) failure(n int, req *http.Request, resp *http.Response, err error) failure {
	return failure{n: n, req: req, resp: resp, err: err, back: reading{clock: r.h.clock},
		start: r.start, policy: r.policy, batch: r.batch}
}

// attempt returns the answer as a Classifier, the policy and ShouldRetry
// see it before retry n. It is the one constructor of options.Attempt. Its
// RetryAfter is the wait the answer names; for a batch whose items remain
// to be resent, the longest wait those items name.
func (f *failure) attempt() options.Attempt {
	if f.built {
		return f.a
	}
	now := f.back.now()
	f.a = options.Attempt{Retry: f.n, Elapsed: now.Sub(f.start), Request: f.req, Response: peek(f.resp), Err: f.err}
	switch {
	case f.batch.answeredByItems():
		f.a.RetryAfter, f.a.HasRetryAfter = f.batch.wait, f.batch.named
	case f.resp != nil:
		f.a.RetryAfter, f.a.HasRetryAfter = RetryAfter(f.resp.Header, now)
	}
	f.built = true
	return f.a
}

// next returns the policy's answer about retry n: its delay, and whether
// to make the retry at all.
func (f *failure) next() (time.Duration, bool) {
	if !f.asked {
		f.delay, f.retry = f.policy.Next(f.attempt())
		f.asked = true
	}
	return f.delay, f.retry
}

// policyHold is how long a throttle that names no wait holds its target:
// the delay the policy gives retry n, or none when it would not retry.
func (f *failure) policyHold() time.Duration {
	if d, ok := f.next(); ok {
		return d
	}
	return 0
}
