package throttle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttle"
)

// held records whether the queue held a request back.
type held bool

func (h *held) Held(context.Context, time.Duration) { *h = true }
func (h *held) Released(context.Context)            {}

// A retry loop's use of the queue: every attempt, first attempts included,
// is admitted before it is sent and its answer reported after. Once the
// server has throttled a URL, another request to it waits in the queue
// until the throttle ends instead of meeting it.
func Example() {
	const hold = 50 * time.Millisecond // what the server's Retry-After names
	var answered atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answered.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", fmt.Sprint(hold.Milliseconds()))
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	q := throttle.New(options.SystemClock(), options.QueueOptions{})
	// attempt sends one attempt of a request to /v1.0/users/1, not before
	// notBefore, and tells the queue what the server answered.
	attempt := func(notBefore time.Time) (status int, wasHeld bool, sent time.Time) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/1", nil)
		var h held
		pass, err := q.Admit(req.Context(), req, notBefore, time.Time{}, &h)
		if err != nil {
			fmt.Println(err)
			return 0, bool(h), pass.Sent
		}
		resp, err := client.Do(req)
		if err != nil {
			q.Report(req, pass, throttle.Failed, 0, nil, time.Now)
			fmt.Println(err)
			return 0, bool(h), pass.Sent
		}
		resp.Body.Close()
		outcome, d := throttle.Succeeded, time.Duration(0)
		if resp.StatusCode == http.StatusTooManyRequests {
			outcome, d = throttle.Throttled, hold
		}
		q.Report(req, pass, outcome, d, resp.Header, time.Now)
		return resp.StatusCode, bool(h), pass.Sent
	}

	start := time.Now()
	status, wasHeld, _ := attempt(start)
	fmt.Println("first request:", status, "held:", wasHeld)
	status, wasHeld, sent := attempt(start)
	fmt.Println("second request:", status, "held:", wasHeld, "sent after the throttle:", sent.Sub(start) >= hold)
	// Output:
	// first request: 429 held: false
	// second request: 200 held: true sent after the throttle: true
}
