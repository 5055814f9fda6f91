// Package outage keeps a retry handler from hammering a host that is down
// and from sleeping through its recovery, and bounds the load retries of
// failures add to a failing host. docs/outages.md tells the why; this is
// the model, which the constants cite.
//
// # A host that is down is probed, not hammered
//
// A failure here is an answer that says the host did not serve the
// request: 502, a 503 or 504 without Retry-After, a transport error. Any
// other answer, a throttle included, says the host is up. After downAfter
// failures in a row with no other answer between them, the host is down:
// its retries of failures and its new requests are held. One held request
// at a time, the first ready in arrival order (its own backoff over), goes
// as a probe. A probe that fails sets the next one the probing request's own
// backoff later, capped at MaxProbeInterval (1 s); a probe that gets any
// other answer brings the host up. Every hold ends within the request's own
// limits: past them a retry returns the answer in hand and a first attempt
// is sent.
//
// # The moment a probe succeeds, the held requests go
//
// Even those whose own backoff has not run out: a backoff exists to spare a
// sick server, and it is not sick any more. They go in arrival order through
// a ramp shaped like TCP's slow start, rampStart releases a second doubling
// every rampStep up to rampEnd, so that the recovering server meets a load
// that grows over about 0.7 s, not the whole backlog at once. New requests
// take their turn in the same ramp while it lasts.
//
// # The retry budget
//
// Each host has a token bucket, gRPC's retry throttling in the terms of the
// AWS SDK's retry quota. It holds up to budgetCap tokens and starts full;
// each request's first attempt puts in retryRatio (half a token); each
// retry of a failure takes a whole one when it is sent, and a retry the
// host answers gives it back. A retry that finds less than a token is not
// made: the caller gets the answer in hand. So a host that fails every
// request is sent at most budgetCap plus half as many retries as there were
// requests, however many are in flight, while a host that fails a share of
// requests at random keeps getting the retries as long as they are answered
// often enough to pay for themselves: at 30 % failing, a request needs 0.43
// retries on average, of which 0.3 fail for good. Retries of throttles are
// not counted: their pace is the throttle queue's. Requests released by a
// successful probe take their token even when the bucket is empty (it goes
// below zero) and give it back when answered, so that a recovery is never
// refused for a debt the outage ran up.
//
// A host no request ever failed on has no state here and costs a map
// lookup; state is kept for at most maxHosts hosts and forgotten once a
// host is up, idle and its bucket full again.
package outage
