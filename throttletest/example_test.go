package throttletest_test

import (
	"fmt"
	"io"
	"net/http"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// A server whose bucket holds two tokens and refills far too slowly to
// matter answers the third request 429 with the Retry-After Graph would
// send, and counts every attempt.
func ExampleNewServer() {
	srv := throttletest.NewServer(throttletest.Config{
		Bucket: throttletest.Bucket{Rate: 0.01, Burst: 2},
	})
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	for i := range 3 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/users/%d", srv.URL, i), nil)
		req.Header.Set(throttletest.HeaderRequestID, fmt.Sprint("req-", i))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	st := srv.Stats()
	fmt.Printf("attempts=%d ok=%d throttled=%d\n", st.Attempts, st.OK, st.Throttled)
	// Output:
	// 200 Retry-After="" {"id":"0","displayName":"User 0"}
	// 200 Retry-After="" {"id":"1","displayName":"User 1"}
	// 429 Retry-After="100" {"error":{"code":"TooManyRequests","message":"Too many requests. Retry after 100 s."}}
	// attempts=3 ok=2 throttled=1
}
