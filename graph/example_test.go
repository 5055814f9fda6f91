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

// The caps of Outlook's 4 concurrent requests per mailbox that a Graph
// client keeps once Graph has throttled it (graph.NewClient sets
// MailboxConcurrency unless the retry options name a cap; with a
// redisstore.Store as Queue.Store it is kept across the fleet), read from
// three requests' URLs.
func ExampleMailboxConcurrency() {
	client, err := graph.NewClient(pipeline.WithRetryOptions(options.RetryHandlerOptions{
		Queue: options.QueueOptions{Concurrency: graph.MailboxConcurrency}, // NewClient's default
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client // used as any Graph client
	for _, path := range []string{"/v1.0/users/Adele@contoso.com/messages", "/v1.0/me/events", "/v1.0/users/Adele@contoso.com"} {
		req, err := http.NewRequest(http.MethodGet, "https://graph.microsoft.com"+path, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		key, limit := graph.MailboxConcurrency(req)
		fmt.Printf("%s: %q, %d at once\n", path, key, limit)
	}
	// Output:
	// /v1.0/users/Adele@contoso.com/messages: "mailbox:adele@contoso.com", 4 at once
	// /v1.0/me/events: "mailbox:me", 4 at once
	// /v1.0/users/Adele@contoso.com: "", 0 at once
}
