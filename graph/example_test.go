package graph_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// A Graph client against a Graph-like server on loopback whose first answer
// is a 503: the request msgraph-sdk-go builds for Me() has its URL replaced
// with /me by the Graph handlers, once, and the retry handler sends it
// again after the policy's delay.
func ExampleNewClient() {
	unavailable := []bool{true} // the server's answers: a 503 first, then successes
	srv := throttletest.NewServer(throttletest.Config{
		FailureRate: 0.5,
		Rand: func() float64 {
			if len(unavailable) > 0 {
				unavailable = unavailable[1:]
				return 0 // below FailureRate: a 503
			}
			return 1
		},
	})
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	client, err := graph.NewClient(
		pipeline.WithTransport(base),
		pipeline.WithRetryOptions(options.RetryHandlerOptions{
			Policy: options.Fixed{Retries: 3, Interval: 10 * time.Millisecond},
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1.0/users/me-token-to-replace", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set(throttletest.HeaderRequestID, "me-1")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	for _, r := range srv.Requests() {
		fmt.Printf("%s %s: %d attempts, %d answered 503\n", r.Method, r.Path, r.Attempts, r.Unavailable)
	}
	// Output:
	// 200 {"id":"me","displayName":"User me"}
	// GET /v1.0/me: 2 attempts, 1 answered 503
}
