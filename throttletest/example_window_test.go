package throttletest_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// A fixed window of two requests per minute that announces its budget in
// the current draft's RateLimit fields, answered in memory. Inside a
// testing/synctest bubble the same Transport runs in virtual time.
func ExampleNewTransport() {
	window, err := throttletest.FixedWindowLimiter(throttletest.Window{Quota: 2, Per: time.Minute})
	if err != nil {
		panic(err)
	}
	announce, err := throttletest.CurrentDraft("minute")
	if err != nil {
		panic(err)
	}
	tr, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{{
		Name:     "minute",
		Match:    func(*http.Request) (string, bool) { return "", true },
		Limiter:  window,
		Announce: announce,
	}}}, 0)
	if err != nil {
		panic(err)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "https://graph.test/v1.0/users/1", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d Retry-After=%q RateLimit-Policy=%q remaining=%q\n", resp.StatusCode, resp.Header.Get("Retry-After"),
			resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")[:len(`"minute";r=1`)])
	}
	// Output:
	// 200 Retry-After="" RateLimit-Policy="\"minute\";q=2;w=60" remaining="\"minute\";r=1"
	// 200 Retry-After="" RateLimit-Policy="\"minute\";q=2;w=60" remaining="\"minute\";r=0"
	// 429 Retry-After="60" RateLimit-Policy="\"minute\";q=2;w=60" remaining="\"minute\";r=0"
}
