// Package observability names the OpenTelemetry signals of the retry
// handler and holds its metric instruments.
//
// The trace names (span names, the enable attribute, the resend attributes)
// are the ones the Kiota observability design and kiota-http-go use, so that
// dashboards built for Kiota's own RetryHandler keep working. Everything the
// Kiota design does not define (span events, their attributes and every
// metric) lives in the same com.microsoft.kiota.handler.retry namespace: one
// prefix finds every signal of the handler, a reverse-domain prefix is what
// the OpenTelemetry naming rules ask of names outside the semantic
// conventions, and it cannot collide with a namespace OpenTelemetry may
// define later. docs/observability.md lists every signal in one table.
package observability

import (
	"strconv"

	"go.opentelemetry.io/otel/attribute"
)

// ScopeName is the instrumentation scope of the handler's meter. Spans use
// the tracer kiota-http-go's ObservabilityOptions names instead, as the
// Kiota design asks.
const ScopeName = "github.com/kiota-resilience/kiota-resilience-go"

// Namespace prefixes every name this package defines that is not part of the
// Kiota design or the OpenTelemetry semantic conventions.
const Namespace = "com.microsoft.kiota.handler.retry."

// Span names.
const (
	// SpanIntercept is the name of the span covering one request's whole
	// passage through the handler, retries and waits included.
	SpanIntercept = "RetryHandler_Intercept"
	// SpanAttemptPrefix followed by the retry number (1 for the first
	// retry) names the span of one retry; see AttemptSpanName.
	SpanAttemptPrefix = "RetryHandler_Intercept - attempt "
)

// AttemptSpanName returns the name of the span of retry n (1 for the first
// retry): "RetryHandler_Intercept - attempt n".
func AttemptSpanName(n int) string { return SpanAttemptPrefix + strconv.Itoa(n) }

// Span attribute keys.
const (
	// EnableKey (bool, always true) marks the SpanIntercept span, as
	// kiota-http-go's handler does.
	EnableKey = attribute.Key(Namespace + "enable")
	// HTTPRequestResendCountKey (int) is the retry number of an attempt
	// span: 1 for the first retry, as the OpenTelemetry HTTP semantic
	// conventions define http.request.resend_count. The given-up event
	// carries it too, as the number of retries made.
	HTTPRequestResendCountKey = attribute.Key("http.request.resend_count")
	// HTTPResponseStatusCodeKey (int) is the status code of the response
	// that caused a retry (on an attempt span and in metrics) or of the
	// last response (on the given-up event). Absent when a transport error
	// caused it.
	HTTPResponseStatusCodeKey = attribute.Key("http.response.status_code")
	// HTTPRequestResendDelayKey (double, seconds) is the delay decided
	// before the retry of an attempt span: the policy's, or the server's
	// Retry-After when longer. The outage gate, or the queue after a 429
	// that named no wait, may let the retry go sooner.
	HTTPRequestResendDelayKey = attribute.Key("http.request.resend_delay")
	// URLFullKey (string) is the request's URL, user info redacted. It is
	// set only when ObservabilityOptions.GetIncludeEUIIAttributes() is true,
	// since a URL may carry personal data.
	URLFullKey = attribute.Key("url.full")
	// RetryReasonKey (string) says why an attempt was retried: one of the
	// RetryReason values. On attempt spans and on the retry metrics.
	RetryReasonKey = attribute.Key(Namespace + "reason")
	// StopReasonKey (string) says why the handler stopped retrying a failed
	// attempt: one of the Stop values. On the EventGivenUp event.
	StopReasonKey = attribute.Key(Namespace + "stop_reason")
	// QueueExpectedDurationKey (double, seconds) is how long the throttle
	// queue expects to hold a request, on EventQueueHeld.
	QueueExpectedDurationKey = attribute.Key(Namespace + "queue.expected_duration")
	// QueueHeldDurationKey (double, seconds) is how long the throttle queue
	// actually held a request, on EventQueueReleased.
	QueueHeldDurationKey = attribute.Key(Namespace + "queue.held_duration")
	// BatchItemsKey (int) is a number of items of a JSON batch, on
	// EventBatchItemsResent.
	BatchItemsKey = attribute.Key(Namespace + "batch.items")
	// ServerAddressKey (string) is the host a throttle scope belongs to, on
	// the queue's gauges, as the OpenTelemetry conventions name it.
	ServerAddressKey = attribute.Key("server.address")
	// QueueScopeKey (string) is a budget the queue learned, on the
	// queue's gauges: "/" for the host's own, else the path below the
	// service root its requests share ("users" for an API whose requests
	// share a budget, "users/{id}" with the id for one mailbox's).
	QueueScopeKey = attribute.Key(Namespace + "queue.scope")
	// HostStateKey (string) is what the handler believes of a host, one
	// of "up", "down" or "probing" (options.HostState), on MetricHostState.
	HostStateKey = attribute.Key(Namespace + "host.state")
	// OutageWokenEarlyKey (bool) says, on EventOutageReleased, that the
	// request went before its own backoff ran out because a probe found
	// its host up again.
	OutageWokenEarlyKey = attribute.Key(Namespace + "outage.woken_early")
	// QueueSentEarlyKey (bool, only ever true) says, on an attempt span,
	// that the retry went before the delay its resend_delay names: its
	// 429 named no wait, and once the host served a request sent after
	// that 429 (or its budget had nothing else out or waiting), the queue
	// let the retry go at its budget's pace.
	QueueSentEarlyKey = attribute.Key(Namespace + "queue.sent_early")
	// HandBackKindKey (string) says what was handed back, one of the
	// HandBackKind values, on EventHandedBack and MetricHandBacks.
	HandBackKindKey = attribute.Key(Namespace + "hand_back.kind")
	// HandBackDelayKey (double, seconds) is how long after the hand-back
	// the request may be tried again, on EventHandedBack.
	HandBackDelayKey = attribute.Key(Namespace + "hand_back.delay")
)

// Values of HandBackKindKey.
const (
	// HandBackResponse: a throttled (or, with options.HandBackAll, failed)
	// answer was returned at once instead of retried after its delay.
	HandBackResponse = "response"
	// HandBackHold: a request the throttle queue (or, with
	// options.HandBackAll, a host that is down) would hold was returned
	// at once with an error, no attempt sent.
	HandBackHold = "hold"
	// HandBackStandIn: a request with retries off that the server's own
	// Retry-After for its URL or path still held was answered at once
	// with a stand-in 429, no attempt sent.
	HandBackStandIn = "stand_in"
)

// Values of RetryReasonKey.
const (
	// RetryReasonResponse: the response was a failure worth retrying (its
	// status code is in RetryHandlerOptions.StatusCodes, or a policy that
	// classifies responses itself said so).
	RetryReasonResponse = "response"
	// RetryReasonTransportError: the attempt got no response.
	RetryReasonTransportError = "transport_error"
	// RetryReasonAttemptTimeout: the attempt exceeded
	// RetryHandlerOptions.AttemptTimeout.
	RetryReasonAttemptTimeout = "attempt_timeout"
)

// Values of StopReasonKey: what stopped the handler from retrying a failed
// attempt. A request that succeeds, or whose response is not a failure the
// handler retries, is not given up and gets no EventGivenUp.
const (
	// StopMaxRetries: RetryHandlerOptions.MaxRetries was reached.
	StopMaxRetries = "max_retries"
	// StopMaxElapsed: the next retry would start after MaxElapsed.
	StopMaxElapsed = "max_elapsed"
	// StopRetriesTimeLimit: the time waited plus the next delay would
	// exceed RetriesTimeLimit.
	StopRetriesTimeLimit = "retries_time_limit"
	// StopDeadline: the next retry would start after the request context's
	// deadline (an http.Client's Timeout included), so the last response
	// is returned at once instead of a deadline error.
	StopDeadline = "deadline"
	// StopForwardOnlyBody: the request body cannot be sent again.
	StopForwardOnlyBody = "forward_only_body"
	// StopPolicy: the retry policy declined another retry.
	StopPolicy = "policy"
	// StopShouldRetry: RetryHandlerOptions.ShouldRetry vetoed the retry.
	StopShouldRetry = "should_retry"
	// StopNotIdempotent: the outcome of a request that is not safe to
	// execute twice is unknown (a 504, or a connection broken once the
	// request had one).
	StopNotIdempotent = "not_idempotent"
	// StopPermanentError: a transport error another attempt cannot mend,
	// such as a TLS verification failure.
	StopPermanentError = "permanent_error"
	// StopRewindFailed: the request body could not be rewound for the next
	// attempt.
	StopRewindFailed = "rewind_failed"
	// StopRetryBudget: the host's retry budget was spent: it was sent as
	// many retries of failures as half its requests allow (see
	// docs/outages.md).
	StopRetryBudget = "retry_budget"
)

// Span event names. The events are added to the SpanIntercept span.
const (
	// EventQueueHeld: the throttle queue holds the request back, for about
	// QueueExpectedDurationKey seconds.
	EventQueueHeld = Namespace + "queue.held"
	// EventQueueReleased: the throttle queue let the request go after
	// QueueHeldDurationKey seconds.
	EventQueueReleased = Namespace + "queue.released"
	// EventGivenUp: the last attempt failed and the handler stopped
	// retrying, for the reason in StopReasonKey.
	EventGivenUp = Namespace + "given_up"
	// EventBatchItemsResent: a JSON batch was resent holding BatchItemsKey
	// of its items that were answered HTTPResponseStatusCodeKey (429, 503,
	// 504, or 424 for the items depending on them), as retry
	// HTTPRequestResendCountKey. One event per status code and resend.
	EventBatchItemsResent = Namespace + "batch.items_resent"
	// EventOutageHeld: the request's host is down and the request is held
	// behind the probe that tests it.
	EventOutageHeld = Namespace + "outage.held"
	// EventOutageReleased: the host let the held request go (as a probe,
	// or because a probe found the host up, OutageWokenEarlyKey true when
	// before its own backoff ran out) or its limits ended the hold.
	EventOutageReleased = Namespace + "outage.released"
	// EventOutageProbe: the request's next attempt is the probe of its
	// host, which is down.
	EventOutageProbe = Namespace + "outage.probe"
	// EventHandedBack: the request was handed back to the caller
	// (options.HandBack), of HandBackKindKey, to be tried again after
	// HandBackDelayKey seconds.
	EventHandedBack = Namespace + "handed_back"
)

// Metric names and units. Units follow UCUM as the OpenTelemetry
// conventions ask: seconds for durations, a {annotation} for counts.
const (
	// MetricRetries counts the retries sent, by HTTPResponseStatusCodeKey
	// and RetryReasonKey.
	MetricRetries = Namespace + "retries"
	UnitRetries   = "{retry}"
	// MetricDelay records the delay before each retry, by
	// HTTPResponseStatusCodeKey and RetryReasonKey.
	MetricDelay = Namespace + "delay"
	UnitDelay   = "s"
	// MetricQueueDuration records how long the throttle queue held a
	// request.
	MetricQueueDuration = Namespace + "queue.duration"
	UnitQueueDuration   = "s"
	// MetricQueueHeldRequests is the number of requests the throttle queue
	// holds right now.
	MetricQueueHeldRequests = Namespace + "queue.held_requests"
	UnitQueueHeldRequests   = "{request}"
	// MetricBatchItemsResent counts the items of JSON batches resent, by
	// HTTPResponseStatusCodeKey: the status that made each one resent.
	MetricBatchItemsResent = Namespace + "batch.items_resent"
	UnitBatchItemsResent   = "{item}"
	// MetricQueuePace is the rate at which the throttle queue releases the
	// requests of a scope it paces after a throttle, by ServerAddressKey
	// and QueueScopeKey: what it learned the server sustains. A scope that
	// is not paced is not reported.
	MetricQueuePace = Namespace + "queue.pace"
	UnitQueuePace   = "{request}/s"
	// MetricQueueBudgetRemaining is what the server last said is left of a
	// scope's budget in its rate-limit headers, in the server's units, by
	// ServerAddressKey and QueueScopeKey, while the queue follows that
	// budget (from when the server says it is nearly spent).
	MetricQueueBudgetRemaining = Namespace + "queue.budget.remaining"
	UnitQueueBudgetRemaining   = "{request}"
	// MetricQueueBudgetLimit is the quota per window of the budget
	// MetricQueueBudgetRemaining reports, when the server named it.
	MetricQueueBudgetLimit = Namespace + "queue.budget.limit"
	UnitQueueBudgetLimit   = "{request}"
	// MetricHostState is, for each host the handler keeps outage state
	// for, 1 for the state it is in and 0 for the others, by
	// ServerAddressKey and HostStateKey: a host seen down, probed, and up
	// again. Hosts that never failed are not reported.
	MetricHostState = Namespace + "host.state"
	UnitHostState   = "1"
	// MetricOutageProbes counts the probes sent to hosts that were down,
	// by ServerAddressKey.
	MetricOutageProbes = Namespace + "outage.probes"
	UnitOutageProbes   = "{probe}"
	// MetricOutageWokenEarly counts the retries that went before their own
	// backoff ran out because a probe found their host up again, by
	// ServerAddressKey.
	MetricOutageWokenEarly = Namespace + "outage.woken_early"
	UnitOutageWokenEarly   = "{request}"
	// MetricQueueSentEarly counts the retries of 429s that named no wait
	// that the throttle queue let go at their budget's pace before their
	// policy's delay ran out (throttle.Queue.AdmitEarly), by
	// ServerAddressKey.
	MetricQueueSentEarly = Namespace + "queue.sent_early"
	UnitQueueSentEarly   = "{request}"
	// MetricHandBacks counts the requests handed back to their callers, by
	// HandBackKindKey.
	MetricHandBacks = Namespace + "hand_backs"
	UnitHandBacks   = "{request}"
)

// Names of the fleet store's signals (options.QueueOptions.Store), which
// module redisstore reports through its own meter and exports under the
// same names (redisstore.MetricRoundTrips and the rest).
const (
	// MetricStoreRoundTrips counts the store's calls that reached it, by
	// AttrStoreOperation and AttrStoreOutcome: a host no process saw
	// throttled costs none.
	MetricStoreRoundTrips = Namespace + "store.round_trips"
	// MetricStoreDuration is the latency of those calls, in seconds.
	MetricStoreDuration = Namespace + "store.duration"
	// MetricStoreFallbacks counts calls the store could not answer, by
	// AttrStoreOperation and AttrStoreReason: the queue went on with its
	// local state.
	MetricStoreFallbacks = Namespace + "store.fallbacks"
	// MetricStorePace is a budget's fleet-wide pace, in requests per second:
	// the sum of its processes' paces at this process's last reservation.
	MetricStorePace = Namespace + "store.pace"
	// AttrStoreOperation names the store operation.
	AttrStoreOperation = Namespace + "store.operation"
	// AttrStoreOutcome is ok or error.
	AttrStoreOutcome = Namespace + "store.outcome"
	// AttrStoreReason says why a call fell back.
	AttrStoreReason = Namespace + "store.reason"
	// AttrStoreBudget names the budget of MetricStorePace.
	AttrStoreBudget = Namespace + "store.budget"
)
