package options_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// midpoint stands in for the random source so that the examples' output
// is reproducible; leave Random nil in real use.
func midpoint() float64 { return 0.5 }

// printSchedule prints the delay before each retry p allows.
func printSchedule(p options.Policy) {
	for n := 1; ; n++ {
		d, ok := p.Next(options.Attempt{Retry: n})
		if !ok {
			return
		}
		fmt.Printf("retry %d after %v\n", n, d)
	}
}

// A handler that sends every request once, for callers that retry at a
// higher level.
func ExampleNoRetry() {
	if _, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: options.NoRetry{}}); err != nil {
		panic(err)
	}
	_, retry := options.NoRetry{}.Next(options.Attempt{Retry: 1})
	fmt.Println("retry:", retry)
	// Output: retry: false
}

func ExampleFixed() {
	p := options.Fixed{Retries: 3, Interval: 2 * time.Second}
	if _, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: p}); err != nil {
		panic(err)
	}
	printSchedule(p)
	// Output:
	// retry 1 after 2s
	// retry 2 after 2s
	// retry 3 after 2s
}

func ExampleLinear() {
	p := options.Linear{Retries: 4, Interval: time.Second, Delta: 500 * time.Millisecond}
	printSchedule(p)
	// Output:
	// retry 1 after 1s
	// retry 2 after 1.5s
	// retry 3 after 2s
	// retry 4 after 2.5s
}

// The Graph design's default: no Policy at all gives the same schedule.
func ExampleExponential() {
	p := options.Exponential{Retries: 5, Random: midpoint}
	printSchedule(p)
	// Output:
	// retry 1 after 2.7s
	// retry 2 after 10.8s
	// retry 3 after 24.3s
	// retry 4 after 43.2s
	// retry 5 after 1m7.5s
}

// A request throttled twice with Retry-After: 1 and then failing twice
// without one: the server timed the first two retries, and the backoff
// times the failures from its first step (Attempt.Step), not from the
// retry numbers 3 and 4.
func ExampleAttempt_Step() {
	p := options.Exponential{Random: midpoint}
	answers := []struct {
		retryAfter time.Duration
		named      bool
	}{{time.Second, true}, {time.Second, true}, {0, false}, {0, false}}
	timed := 0
	for i, ans := range answers {
		if ans.named {
			timed++
		}
		a := options.Attempt{Retry: i + 1, Timed: timed, RetryAfter: ans.retryAfter, HasRetryAfter: ans.named}
		d, _ := p.Next(a)
		fmt.Printf("retry %d (step %d) after %v\n", a.Retry, a.Step(), d)
	}
	// Output:
	// retry 1 (step 1) after 1s
	// retry 2 (step 1) after 1s
	// retry 3 (step 1) after 2.7s
	// retry 4 (step 2) after 10.8s
}

// The storage client's defaults: about 3 s, then about 30 s, then 90 s.
func ExampleAzureStorageExponential() {
	printSchedule(options.AzureStorageExponential{Random: midpoint})
	// Output:
	// retry 1 after 3s
	// retry 2 after 33s
	// retry 3 after 1m30s
}

// The APIM page's exponential example:
//
//	<retry count="6" interval="10" delta="10" max-interval="100" first-fast-retry="false" ...>
func ExampleAPIManagement() {
	p := options.APIManagement{
		Count:       6,
		Interval:    10 * time.Second,
		Delta:       10 * time.Second,
		MaxInterval: 100 * time.Second,
		Random:      midpoint,
	}
	printSchedule(p)
	// Output:
	// retry 1 after 10s
	// retry 2 after 20s
	// retry 3 after 40s
	// retry 4 after 1m20s
	// retry 5 after 1m40s
	// retry 6 after 1m40s
}

// The APIM page's second example, against a server that fails once with
// a 500: the condition makes the 500 (or a dropped connection) retryable,
// and the first retry is immediate.
//
//	<retry condition="@(response == null || response.StatusCode >= 500)"
//	       count="3" interval="1" first-fast-retry="true">
func ExampleAPIManagement_condition() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()

	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: options.APIManagement{
		Count:          3,
		Interval:       time.Second,
		FirstFastRetry: true,
		Condition: func(a options.Attempt) bool {
			return a.Response == nil || a.Response.StatusCode >= 500
		},
	}})
	if err != nil {
		panic(err)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", hits.Load(), "attempts")
	// Output: 200 after 2 attempts
}

// The Azure Storage blog's first custom policy ("linear", which in fact
// waits the same interval every time) as a user-written Policy. The
// storage client counts retries from 0, Attempt.Retry from 1.
func ExamplePolicyFunc() {
	linearRetry := func(retryCount int, interval time.Duration) options.Policy {
		return options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			return interval, a.Retry <= retryCount
		})
	}

	p := linearRetry(2, 5*time.Second)
	if _, err := middleware.NewRetryHandler(options.RetryHandlerOptions{Policy: p}); err != nil {
		panic(err)
	}
	printSchedule(p)
	// Output:
	// retry 1 after 5s
	// retry 2 after 5s
}

// The Azure Storage blog's second custom policy: a fixed interval that
// gives up at once on the status codes it is told to fail on, here 502.
// StatusCodes makes 502 a retryable failure for the handler, and the
// policy then declines it, so the 502 reaches the caller after one attempt.
func ExamplePolicyFunc_doNotRetry502() {
	customRetryPolicy := func(retryCount int, interval time.Duration, statusCodesToFail ...int) options.Policy {
		return options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			if a.Response != nil && slices.Contains(statusCodesToFail, a.Response.StatusCode) {
				return 0, false
			}
			return interval, a.Retry <= retryCount
		})
	}

	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()

	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{
		Policy:      customRetryPolicy(3, time.Second, http.StatusBadGateway),
		StatusCodes: []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout},
	})
	if err != nil {
		panic(err)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", hits.Load(), "attempt")
	// Output: 502 after 1 attempt
}

// NewRetryHandler rejects an invalid policy, naming the policy, the field
// and the value.
func ExampleAPIManagement_validate() {
	_, err := middleware.NewRetryHandler(options.RetryHandlerOptions{
		Policy: options.APIManagement{Count: 60, Interval: time.Second},
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, options.ErrInvalidOption))
	// Output:
	// middleware.NewRetryHandler: RetryHandlerOptions.Policy: invalid retry option: APIManagement.Count = 60 must be between 1 and 50
	// true
}
