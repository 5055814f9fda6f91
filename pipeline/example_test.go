package pipeline_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	abs "github.com/microsoft/kiota-abstractions-go"
	"github.com/microsoft/kiota-abstractions-go/authentication"

	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
)

// A Kiota request adapter on the pipeline; one request opts out of retries
// with a per-request option, the other is retried.
func ExampleNewRequestAdapter() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		if r.Header.Get("Retry-Attempt") == "" {
			w.Header().Set("Retry-After-Ms", "10")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	adapter, err := pipeline.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{},
		pipeline.WithTransport(base),
		pipeline.WithRetryOptions(options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: true}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	adapter.SetBaseUrl(srv.URL + "/v1.0")

	get := func(opts ...abs.RequestOption) error {
		info := abs.NewRequestInformation()
		info.Method = abs.GET
		info.UrlTemplate = "{+baseurl}/me"
		info.AddRequestOptions(opts)
		return adapter.SendNoContent(context.Background(), info, nil)
	}
	fmt.Println("retried:", get() == nil, "attempts:", attempts.Swap(0))
	fmt.Println("not retried:", get(&options.RetryHandlerOptions{MaxRetries: -1}) == nil, "attempts:", attempts.Load())
	// Output:
	// retried: true attempts: 2
	// not retried: false attempts: 1
}

// A library built on this package sets a retry default of its own, 5
// retries, which its users' retry options keep unless they set MaxRetries.
func ExampleWithRetryDefaults() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Retry-After-Ms", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	newLibraryClient := func(opts ...pipeline.Option) (*http.Client, error) {
		return pipeline.NewClient(append([]pipeline.Option{
			pipeline.WithTransport(base),
			pipeline.WithRetryDefaults(func(o *options.RetryHandlerOptions) {
				if o.MaxRetries == 0 {
					o.MaxRetries = 5
				}
			}),
		}, opts...)...)
	}
	// The user's options turn the throttle queue off and keep the 5 retries.
	client, err := newLibraryClient(pipeline.WithRetryOptions(options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: true}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := client.Get(srv.URL + "/v1.0/me")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", attempts.Load(), "attempts")
	// Output:
	// 503 after 6 attempts
}
