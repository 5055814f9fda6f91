package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// A server that throttles the first attempt: the handler waits the 10 ms
// it names in retry-after-ms and sends the request again, with its
// Retry-Attempt header.
func ExampleNewRetryHandler() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "10")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Println("server got Retry-Attempt:", r.Header.Get("Retry-Attempt"))
	}))
	defer srv.Close()

	retry, err := middleware.NewRetryHandler(options.RetryHandlerOptions{MaxRetries: 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, retry)}

	resp, err := client.Get(srv.URL + "/v1.0/me")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retry.Stats().Attempts, "attempts")
	// Output:
	// server got Retry-Attempt: 1
	// 200 after 2 attempts
}

// NewRetryHandler rejects a bad option when it is set, naming the field and
// the value.
func ExampleNewRetryHandler_invalid() {
	_, err := middleware.NewRetryHandler(options.RetryHandlerOptions{MaxElapsed: -1})
	fmt.Println(err)
	// Output:
	// middleware.NewRetryHandler: invalid retry option: RetryHandlerOptions.MaxElapsed = -1ns must not be negative
}

// With retries off, the caller does its own retrying: a request the
// server's Retry-After still holds is answered at once with a stand-in 429
// saying when to try again, and nothing is sent.
func ExampleRetryAt_retriesOff() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	retry, err := middleware.NewRetryHandler(options.RetryHandlerOptions{MaxRetries: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, retry)}

	for range 2 {
		resp, err := client.Get(srv.URL + "/v1.0/users/1/messages")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		_, handedBack := middleware.RetryAt(resp, nil)
		fmt.Println(resp.StatusCode, "Retry-After:", resp.Header.Get("Retry-After"), "stand-in:", handedBack)
	}
	fmt.Println("sent to the server:", attempts.Load())
	// Output:
	// 429 Retry-After: 30 stand-in: false
	// 429 Retry-After: 30 stand-in: true
	// sent to the server: 1
}
