package middleware_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// A JSON batch whose second item is throttled: the handler resends that
// item alone after the 10 ms it names, and returns one batch holding both
// answers in the order of the request.
func ExampleNewRetryHandler_batch() {
	var rounds atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("server got %s\n", body)
		w.Header().Set("Content-Type", "application/json")
		if rounds.Add(1) == 1 {
			io.WriteString(w, `{"responses":[{"id":"2","status":429,"headers":{"Retry-After-Ms":"10"}},{"id":"1","status":200,"body":{"displayName":"Megan"}}]}`)
			return
		}
		io.WriteString(w, `{"responses":[{"id":"2","status":200,"body":{"value":[]}}]}`)
	}))
	defer srv.Close()

	retry, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, retry)}

	batch := `{"requests":[{"id":"1","method":"GET","url":"/me"},{"id":"2","method":"GET","url":"/me/events"}]}`
	resp, err := client.Post(srv.URL+"/v1.0/$batch", "application/json", strings.NewReader(batch))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	merged, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(merged))
	// Output:
	// server got {"requests":[{"id":"1","method":"GET","url":"/me"},{"id":"2","method":"GET","url":"/me/events"}]}
	// server got {"requests":[{"id":"2","method":"GET","url":"/me/events"}]}
	// 200 {"responses":[{"id":"1","status":200,"body":{"displayName":"Megan"}},{"id":"2","status":200,"body":{"value":[]}}]}
}
