package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	abstractions "github.com/microsoft/kiota-abstractions-go"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
)

// HeaderRetryAt is the response header the handler adds to an answer it
// hands back (options.HandBack): when the request may be tried again, as
// an RFC 3339 time with nanoseconds, in UTC. It is the only change made to
// the server's answer, and it survives Kiota's ApiError, which keeps the
// response's headers. Read it with RetryAt.
const HeaderRetryAt = "Kiota-Retry-At"

// ErrHandedBack is wrapped by the error of a request handed back before any
// attempt was sent, because the throttle queue (or, with
// options.HandBackAll, a host that is down) would have held it. Test for
// it with errors.Is; the error is a *HandBackError, which says when.
var ErrHandedBack = errors.New("handed back")

// HandBackError is the error of a request handed back before any attempt
// was sent (see ErrHandedBack).
type HandBackError struct {
	// RetryAt is when the request may be tried again at the earliest.
	RetryAt time.Time
	// Host is the scheme and host of the request, without its path.
	Host string
}

func (e *HandBackError) Error() string {
	return fmt.Sprintf("retry handler: %s: %v: held until %s", e.Host, ErrHandedBack, e.RetryAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrHandedBack.
func (e *HandBackError) Unwrap() error { return ErrHandedBack }

// RetryAt returns when a request the handler handed back may be tried
// again: from the *HandBackError in err's chain, or from the HeaderRetryAt
// of resp, or of the response headers an error in err's chain carries
// (Kiota's ApiError and the errors generated clients derive from it). It
// reports false for a response or error the handler did not hand back.
func RetryAt(resp *http.Response, err error) (time.Time, bool) {
	var hb *HandBackError
	if errors.As(err, &hb) {
		return hb.RetryAt, true
	}
	var v string
	var withHeaders interface {
		GetResponseHeaders() *abstractions.ResponseHeaders
	}
	switch {
	case resp != nil:
		v = resp.Header.Get(HeaderRetryAt)
	case errors.As(err, &withHeaders) && withHeaders.GetResponseHeaders() != nil:
		h := withHeaders.GetResponseHeaders()
		for _, k := range h.ListKeys() {
			if http.CanonicalHeaderKey(k) == HeaderRetryAt {
				if vs := h.Get(k); len(vs) > 0 {
					v = vs[0]
				}
			}
		}
	}
	if v == "" {
		return time.Time{}, false
	}
	t, perr := time.Parse(time.RFC3339Nano, v)
	return t, perr == nil
}

// stampRetryAt marks resp as handed back, to be tried again at at.
func stampRetryAt(resp *http.Response, at time.Time) {
	if resp == nil {
		return
	}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	resp.Header.Set(HeaderRetryAt, at.UTC().Format(time.RFC3339Nano))
}

// standIn answers at now, with no attempt sent, a request the server's own
// Retry-After for its URL or path holds until until: a 429 that says how
// long is left, in whole seconds in Retry-After and exactly in
// HeaderRetryAt, with an empty body. It returns the stop reason.
func (r *run) standIn(now, until time.Time) string {
	left := until.Sub(now)
	r.last = &http.Response{
		Status:     "429 Too Many Requests",
		StatusCode: http.StatusTooManyRequests,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Retry-After": {strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)}},
		Body:    http.NoBody,
		Request: r.req,
	}
	stampRetryAt(r.last, until)
	r.obs.handedBack(r.req.Context(), observability.HandBackStandIn, left)
	return stopHandedBack
}
