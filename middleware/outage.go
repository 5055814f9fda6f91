package middleware

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kiota-resilience/kiota-resilience-go/internal/outage"
	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// This file is the glue between the retry loop and the outage gate
// (package internal/outage, docs/outages.md), and the hand-back of waits
// to the caller (options.HandBack).

// stopBudget and stopHandedBack are the reasons the outage gate and the
// hand-back add to the stop reasons of retry.go.
const (
	stopBudget     = "retry budget"
	stopHandedBack = "handed back"
)

// gate returns the handler's outage gate unless it is off for this request.
func (r *run) gate() *outage.Hosts {
	if r.opts.Outage.Disabled {
		return nil
	}
	return r.h.outages
}

// passGate waits until the outage gate lets attempt retry+1 go and moves
// notBefore to when it did: earlier than the attempt's own time when a
// probe found the host up again. It returns why the attempt is not to be
// made (a limit, the retry budget, a hand-back), or the context's error.
// now is when admit began.
func (r *run) passGate(ctx context.Context, retry int, notBefore *time.Time, now time.Time) (string, error) {
	g := r.gate()
	if g == nil {
		return "", nil
	}
	deadline, limit := r.holdDeadline(ctx, now)
	handBack := r.opts.HandBack == options.HandBackAll
	host := hostKey(r.req)
	a := outage.Attempt{NotBefore: *notBefore, Deadline: deadline, First: retry == 0, AfterFailure: retry > 0 && r.afterFailure, HandBack: handBack}
	if t, ok := g.Pass(host, a); ok {
		// Nothing to hold it for: its own time is waited below.
		t.Sent = now
		r.setTicket(retry, t)
		return "", nil
	}
	// The gate sees a copy of the observer, so that the request's run
	// stays on the stack when the gate is not in the way.
	obs := &outageObserver{r.obs}
	t, err := g.Admit(ctx, host, a, obs)
	r.obs = obs.observer
	r.setTicket(retry, t)
	var hold *outage.HoldError
	switch {
	case errors.As(err, &hold) && handBack:
		return r.handBack(retry, hold.Until), nil
	case errors.As(err, &hold) && retry > 0:
		return limit, nil
	case errors.As(err, &hold):
		return "", nil // no answer in hand: the server answers this one
	case errors.Is(err, outage.ErrBudget):
		return stopBudget, nil
	case err != nil:
		return "", err
	}
	if t.Probe {
		r.obs.probe(ctx, host)
	}
	if t.Early {
		r.h.inst.WokenEarly(ctx, host)
		// The backoff did not time this retry: a probe's success sent it
		// before its delay ended. Should it fail, the next delay is the
		// same step again (options.Attempt.Timed).
		r.timed++
	}
	*notBefore = t.Sent
	return "", nil
}

// setTicket keeps the ticket of attempt retry+1 until its answer is
// reported, and that of the first attempt until the request ends.
func (r *run) setTicket(retry int, t outage.Ticket) {
	r.ticket = t
	if retry == 0 {
		r.first = t
	}
}

// hostDone tells the outage gate that the request has ended.
func (r *run) hostDone() {
	if g := r.h.outages; g != nil {
		g.Done(r.first)
	}
}

// reportHost tells the outage gate what the host answered to the attempt
// it let go; next is the delay before the request's next retry, which
// spaces the next probe when this one failed.
func (r *run) reportHost(o outage.Outcome, next time.Duration) {
	if g := r.h.outages; g != nil {
		g.Report(hostKey(r.req), r.ticket, o, next)
	}
	r.ticket = outage.Ticket{}
}

// hostOutcome is what an answer says of its host: a 502, a 503 or 504
// without Retry-After (o, the throttle queue's reading, is Failed) or a
// transport error says it did not serve the request; anything else, a
// throttle or a broken TLS set-up included, that it is up.
func hostOutcome(resp *http.Response, err error, o throttle.Outcome) outage.Outcome {
	switch {
	case err != nil && permanent(err):
		return outage.Answered
	case err != nil:
		return outage.Failed
	case o != throttle.Failed:
		return outage.Answered
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return outage.Failed
	}
	return outage.Answered
}

// handsBack reports whether an answer the throttle queue read as o is
// handed back rather than retried after its delay.
func (r *run) handsBack(o throttle.Outcome) bool {
	switch r.opts.HandBack {
	case options.HandBackThrottles:
		return throttled(o)
	case options.HandBackAll:
		return true
	}
	return false
}

// handBackAnswer hands back the answer that came at now, to be retried
// after delay, and returns the stop reason. A transport error is handed
// back as an error carrying the time.
func (r *run) handBackAnswer(ctx context.Context, resp *http.Response, now time.Time, delay time.Duration) string {
	stampRetryAt(resp, now.Add(delay))
	if resp == nil {
		r.handedBack = &HandBackError{RetryAt: now.Add(delay), Host: hostOf(r.req)}
	}
	r.obs.handedBack(ctx, observability.HandBackResponse, delay)
	return stopHandedBack
}

// handBack ends a request that a hold would keep until until: a retry
// returns the answer in hand marked with when to try again, a first
// attempt an error carrying it. It returns the stop reason.
func (r *run) handBack(retry int, until time.Time) string {
	if retry > 0 && r.last != nil {
		stampRetryAt(r.last, until)
	} else {
		r.handedBack = &HandBackError{RetryAt: until, Host: hostOf(r.req)}
	}
	r.obs.handedBack(r.req.Context(), observability.HandBackHold, until.Sub(r.h.clock.Now()))
	return stopHandedBack
}

// hostKey returns the host a request names, as the throttle queue keys
// it: its Host header when set, else its URL's host.
func hostKey(req *http.Request) string {
	if req.Host != "" {
		return req.Host
	}
	return req.URL.Host
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// outageObserver reports the outage gate's holds as the request's signals.
type outageObserver struct{ observer }

func (o *outageObserver) Held(ctx context.Context) { o.outageHeld(ctx) }
func (o *outageObserver) Released(ctx context.Context, early bool) {
	o.outageReleased(ctx, early)
}

// outageHeld reports that the request's host is down and the request is
// held behind its probe.
func (o *observer) outageHeld(ctx context.Context) {
	o.outageAt = o.clock.Now()
	if o.span != nil && o.span.IsRecording() {
		o.span.AddEvent(observability.EventOutageHeld)
	}
}

// outageReleased reports the end of an outage hold; early says that a
// probe found the host up before the request's own backoff ran out.
func (o *observer) outageReleased(ctx context.Context, early bool) {
	if o.outageAt.IsZero() {
		return
	}
	d := o.clock.Now().Sub(o.outageAt)
	o.outageAt = time.Time{}
	if o.span != nil && o.span.IsRecording() {
		o.span.AddEvent(observability.EventOutageReleased, trace.WithAttributes(
			observability.QueueHeldDurationKey.Float64(d.Seconds()), observability.OutageWokenEarlyKey.Bool(early)))
	}
}

// probe reports that the request's next attempt probes host.
func (o *observer) probe(ctx context.Context, host string) {
	o.inst.Probe(ctx, host)
	if o.span != nil && o.span.IsRecording() {
		o.span.AddEvent(observability.EventOutageProbe)
	}
}

// handedBack reports that the request is handed back, of kind (a
// HandBackKindKey value), to be tried again after delay.
func (o *observer) handedBack(ctx context.Context, kind string, delay time.Duration) {
	o.inst.HandedBack(ctx, kind)
	if o.span != nil && o.span.IsRecording() {
		o.span.AddEvent(observability.EventHandedBack, trace.WithAttributes(
			observability.HandBackKindKey.String(kind), observability.HandBackDelayKey.Float64(max(delay, 0).Seconds())))
	}
}
