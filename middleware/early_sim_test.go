package middleware_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// TestRefusalWithoutWaitRetriedAtThePace checks, in virtual time, that the
// retries of 429s that name no wait go at their budget's pace once the
// server serves again, not after the policy's 3 s: 400 requests from 200
// workers into a bucket of 40 at 400/s, whose first wave is refused 160
// times, the ids spread over every request or over 50 users.
func TestRefusalWithoutWaitRetriedAtThePace(t *testing.T) {
	const n, c = 400, 200
	// R6's initial interval, which the default policy's jitter shortens
	// by up to a fifth.
	shortestDelay := 3 * time.Second * 8 / 10
	for _, users := range []int{n, 50} {
		t.Run(strconv.Itoa(users)+" users", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := shapeRule(throttletest.BucketLimiter(throttletest.Bucket{Rate: 400, Burst: 40}), nil)
				r.OmitRetryAfter = true
				srv, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{r}}, 2*time.Millisecond)
				require.NoError(t, err)
				h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
				require.NoError(t, err)
				client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(srv, h)}
				start := time.Now()
				var mu sync.Mutex
				var late int // requests answered after the policy's shortest delay
				failed := sendAll(client, n, c, http.MethodGet, func(i int) string {
					return "https://graph.test/v1.0/users/" + strconv.Itoa(i%users)
				}, func(int) {
					mu.Lock()
					defer mu.Unlock()
					if time.Since(start) >= shortestDelay {
						late++
					}
				})
				require.Zero(t, failed)
				refused := srv.Stats().Attempts - n
				require.Greater(t, refused, n/4, "the first wave was refused")
				// A retry that went early and was refused again waits the
				// policy's delay.
				assert.Less(t, late, refused/10, "retried at the pace")
			})
		})
	}
}
