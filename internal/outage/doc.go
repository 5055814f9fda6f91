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
// Each host has a token bucket: gRPC's retry throttling and the AWS SDK's
// retry quota, sized as Envoy sizes its budget. Each request puts
// retryRatio (half a token) in as it starts; each retry of a failure takes
// a whole token when it is sent and gives it back when the host answers it
// or when it is not sent after all (Unsent); a retry that finds less than
// a token is not made, and the caller gets the answer in hand. The bucket
// starts with budgetReserve (10) and holds at most that plus half a token
// per request still active: what a burst that ended left is dropped, so
// that an outage meets no stock of retries saved up before it, while a
// request in its backoff keeps its share however long the backoff. So a host that fails every request is sent at most ten plus
// half as many retries as there were requests, however many are in flight;
// a host that fails a share at random keeps getting its retries while they
// are answered often enough to pay for themselves (at 30 % failing, a
// request needs 0.43 retries on average, of which 0.13 fail again). Not
// counted: retries of throttles, whose pace is the throttle queue's; probes,
// at most one a probe interval, which are the reserve's as Finagle's
// retries per second are; and requests released by a successful probe,
// which take their token even from an empty bucket (it goes below zero) and
// give it back when answered, so that a recovery is never refused for what
// the outage spent.
//
// # A host never heard from
//
// Until a host's first answer, no more than downAfter first attempts go to
// it, and the others wait for that answer, at most coldWait (0.5 s): a host
// down from the start is then sent what shows it down, not the whole
// burst of a thousand workers starting at once.
//
// A host that answers costs a map lookup and a few atomic operations per
// request, and no lock; state is kept for at most maxHosts hosts and forgotten once
// a host is up and has been idle for idleAfter.
package outage
