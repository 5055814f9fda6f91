package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kiota-resilience/kiota-resilience-go/internal/metrics"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// observer reports one request's passage through the handler as spans,
// span events and metrics (see package observability). It lives in the
// request's stack frame, so a request that succeeds at once costs nothing
// beyond a nil check when it carries no ObservabilityOptions, and the
// tracing API's no-op path when it does.
//
// Tracing is on when the request's context holds kiota-http-go's
// ObservabilityOptions (NetHttpRequestAdapter always puts them there);
// metrics are always recorded, through the handler's instruments.
type observer struct {
	inst  *metrics.Instruments
	clock options.Clock

	span    trace.Span // the handler's span; nil when tracing is off
	tracer  trace.Tracer
	url     string     // url.full, set only when EUII attributes are allowed
	attempt trace.Span // span of the retry in flight; nil outside one

	retry   attribute.Set // metric attributes of the retry in flight
	pending bool          // a retry was decided and not yet sent
	heldAt  time.Time     // when the queue began holding the request; zero when not held
	// outageAt is when a host that is down began holding the request.
	outageAt time.Time
}

// observabilityKey is the context key of kiota-http-go's
// ObservabilityOptions, converted to an interface once: the lookup
// nethttplibrary.GetObservabilityOptionsFromRequest makes converts it, and
// allocates, on every call.
var observabilityKey any = (*nethttplibrary.ObservabilityOptions)(nil).GetKey()

// begin starts the handler's span when req carries ObservabilityOptions
// and returns the context the attempts must carry.
func (o *observer) begin(req *http.Request) context.Context {
	ctx := req.Context()
	obs, _ := ctx.Value(observabilityKey).(nethttplibrary.ObservabilityOptionsInt)
	if obs == nil {
		return ctx
	}
	o.tracer = otel.GetTracerProvider().Tracer(obs.GetTracerInstrumentationName())
	ctx, o.span = o.tracer.Start(ctx, observability.SpanIntercept)
	// Attributes are only built for a span that keeps them, so that the
	// no-op path allocates nothing of ours.
	if o.span.IsRecording() {
		o.span.SetAttributes(observability.EnableKey.Bool(true))
		if obs.GetIncludeEUIIAttributes() && req.URL != nil {
			o.url = fullURL(req.URL)
			o.span.SetAttributes(observability.URLFullKey.String(o.url))
		}
	}
	return ctx
}

// retrying reports that retry n will be sent after delay because of resp
// or err, and returns the context the retry must carry: its span's when
// tracing is on.
func (o *observer) retrying(ctx context.Context, n int, resp *http.Response, err error, delay time.Duration) context.Context {
	status := 0
	if resp != nil && err == nil {
		status = resp.StatusCode
	}
	reason := retryReason(err)
	o.retry = metrics.RetryAttributes(status, reason)
	o.pending = true
	o.inst.RetryDelayed(ctx, o.retry, delay)
	if o.span == nil {
		return ctx
	}
	ctx, o.attempt = o.tracer.Start(ctx, observability.AttemptSpanName(n))
	if o.attempt.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs,
			observability.HTTPRequestResendCountKey.Int(n),
			observability.HTTPRequestResendDelayKey.Float64(delay.Seconds()),
			observability.RetryReasonKey.String(reason))
		if status != 0 {
			attrs = append(attrs, observability.HTTPResponseStatusCodeKey.Int(status))
		}
		if o.url != "" {
			attrs = append(attrs, observability.URLFullKey.String(o.url))
		}
		o.attempt.SetAttributes(attrs...)
	}
	return ctx
}

// sent reports that an attempt came back with err (nil when it got a
// response): a retry is counted, and its span ends.
func (o *observer) sent(ctx context.Context, err error) {
	if !o.pending {
		return
	}
	o.pending = false
	o.inst.RetrySent(ctx, o.retry)
	o.endAttempt(err)
}

// gaveUp reports that the handler stopped after retries retries, for the
// reason why (one of the stop constants); resp is the last response, if
// any. Only the reasons that leave a failed attempt unretried are events.
func (o *observer) gaveUp(why string, retries int, resp *http.Response) {
	if o.span == nil || !o.span.IsRecording() {
		return
	}
	reason := stopAttribute(why)
	if reason == "" {
		return
	}
	attrs := []attribute.KeyValue{
		observability.StopReasonKey.String(reason),
		observability.HTTPRequestResendCountKey.Int(retries),
	}
	if resp != nil {
		attrs = append(attrs, observability.HTTPResponseStatusCodeKey.Int(resp.StatusCode))
	}
	o.span.AddEvent(observability.EventGivenUp, trace.WithAttributes(attrs...))
}

// held reports that the throttle queue starts holding the request, which it
// expects to release after about expected. The queue calls it when it
// parks the request and released when it lets it go, whatever the outcome.
func (o *observer) held(ctx context.Context, expected time.Duration) {
	if !o.heldAt.IsZero() {
		return
	}
	o.heldAt = o.clock.Now()
	o.inst.Held(ctx)
	if o.span != nil && o.span.IsRecording() {
		o.span.AddEvent(observability.EventQueueHeld, trace.WithAttributes(
			observability.QueueExpectedDurationKey.Float64(expected.Seconds())))
	}
}

// released reports that the throttle queue stopped holding the request. It
// does nothing when the request is not held, so a deferred call is safe.
func (o *observer) released(ctx context.Context) {
	if o.heldAt.IsZero() {
		return
	}
	d := o.clock.Now().Sub(o.heldAt)
	o.heldAt = time.Time{}
	o.inst.Released(ctx, d)
	if o.span != nil && o.span.IsRecording() {
		o.span.AddEvent(observability.EventQueueReleased, trace.WithAttributes(
			observability.QueueHeldDurationKey.Float64(d.Seconds())))
	}
}

// sentEarly reports that the queue let the retry in flight go to host
// before its backoff ran out (throttle.Queue.AdmitEarly).
func (o *observer) sentEarly(ctx context.Context, host string) {
	o.inst.SentEarly(ctx, host)
	if o.attempt != nil && o.attempt.IsRecording() {
		o.attempt.SetAttributes(observability.QueueSentEarlyKey.Bool(true))
	}
}

// end reports that the handler returns err: it closes whatever is still
// open and records err on the spans with status Error.
func (o *observer) end(ctx context.Context, err error) {
	o.released(ctx)
	o.pending = false
	o.endAttempt(err)
	if o.span == nil {
		return
	}
	if err != nil {
		o.span.RecordError(err)
		o.span.SetStatus(codes.Error, err.Error())
	}
	o.span.End()
	o.span = nil
}

func (o *observer) endAttempt(err error) {
	if o.attempt == nil {
		return
	}
	if err != nil {
		o.attempt.RecordError(err)
		o.attempt.SetStatus(codes.Error, err.Error())
	}
	o.attempt.End()
	o.attempt = nil
}

// retryReason names what made an attempt fail, as a RetryReasonKey value.
func retryReason(err error) string {
	switch {
	case err == nil:
		return observability.RetryReasonResponse
	case errors.Is(err, ErrAttemptTimeout):
		return observability.RetryReasonAttemptTimeout
	}
	return observability.RetryReasonTransportError
}

// stopAttribute maps the handler's stop reasons to their documented
// StopReasonKey values; "" for the outcomes that are not a give-up.
func stopAttribute(why string) string {
	switch why {
	case stopRetries:
		return observability.StopMaxRetries
	case stopElapsed:
		return observability.StopMaxElapsed
	case stopTimeLimit:
		return observability.StopRetriesTimeLimit
	case stopDeadline:
		return observability.StopDeadline
	case stopForwardOnly:
		return observability.StopForwardOnlyBody
	case stopPolicy:
		return observability.StopPolicy
	case stopVetoed:
		return observability.StopShouldRetry
	case stopNotIdempotent:
		return observability.StopNotIdempotent
	case stopPermanent:
		return observability.StopPermanentError
	case stopRewind:
		return observability.StopRewindFailed
	case stopBudget:
		return observability.StopRetryBudget
	}
	return ""
}

// fullURL renders u for url.full with any user info replaced by REDACTED,
// as the OpenTelemetry semantic conventions require.
func fullURL(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.UserPassword("REDACTED", "REDACTED")
	return c.String()
}
