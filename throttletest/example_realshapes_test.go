package throttletest_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// nginx's limit_req with `burst=1 nodelay` and its default refusal, a 503
// without Retry-After, answered in memory: the first request and the burst
// pass at once, the third is refused. Inside a testing/synctest bubble the
// same Transport runs in virtual time.
func ExampleLimitReqLimiter() {
	nginx, err := throttletest.LimitReqLimiter(throttletest.LimitReq{Rate: 10, Burst: 1})
	if err != nil {
		panic(err)
	}
	tr, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{{
		Name:           "limit_req",
		Match:          func(*http.Request) (string, bool) { return "127.0.0.1", true }, // $binary_remote_addr
		Limiter:        nginx,
		Status:         http.StatusServiceUnavailable,
		OmitRetryAfter: true,
	}}}, 0)
	if err != nil {
		panic(err)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/v1.0/users/1", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d %q\n", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 ""
	// 200 ""
	// 503 ""
}

// HAProxy's stick-table rate limit of two requests per second counts the
// requests it refuses, so a client that keeps knocking stays refused.
func ExampleStickTableLimiter() {
	haproxy, err := throttletest.StickTableLimiter(throttletest.StickTable{Limit: 2, Period: time.Second})
	if err != nil {
		panic(err)
	}
	tr, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{{
		Name:       "http_req_rate",
		Match:      func(*http.Request) (string, bool) { return "127.0.0.1", true }, // track-sc0 src
		Limiter:    haproxy,
		RetryAfter: func(time.Duration) int64 { return 1 },
	}}}, 0)
	if err != nil {
		panic(err)
	}
	for range 4 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/v1.0/users/1", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, tr.Stats().Throttled)
	}
	// Output:
	// 200 0
	// 200 0
	// 429 1
	// 429 2
}
