package middleware_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// TestLoad sends 5000 concurrent requests, GETs and POSTs with bodies,
// through one handler to a throttling loopback server: every request must
// succeed with its body intact, and the server must have seen exactly the
// attempts the handler reports sending. Sized to finish in seconds, also
// under -race.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const n = 5000
	srv := throttletest.NewServer(throttletest.Config{Bucket: throttletest.Bucket{Rate: 1500, Burst: 50}})
	defer srv.Close()
	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	base := &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, h)}

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1.0/users/%d", srv.URL, i), nil)
			if i%2 == 0 {
				body := fmt.Appendf(nil, `{"displayName":"user %d"}`, i)
				sum := sha256.Sum256(body)
				req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1.0/users", bytes.NewReader(body))
				req.Header.Set(throttletest.HeaderBodySHA256, hex.EncodeToString(sum[:]))
			}
			req.Header.Set(throttletest.HeaderRequestID, fmt.Sprint(i))
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode >= 300 {
				errs <- fmt.Errorf("request %d: status %d", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	st, hs := srv.Stats(), h.Stats()
	assert.Equal(t, n, st.Requests)
	assert.Equal(t, int64(n), hs.Requests)
	assert.Equal(t, int64(st.Attempts), hs.Attempts, "the server saw exactly the attempts the handler sent")
	assert.Equal(t, hs.Attempts-hs.Requests, hs.Retries)
	assert.Zero(t, st.BadBody, "no body arrived different from the one sent")
	assert.Zero(t, st.Early, "no retry before the server's Retry-After")
	t.Logf("%d requests, %d attempts (%.2f per request), %d throttled", n, st.Attempts, float64(st.Attempts)/n, st.Throttled)
}
