package realproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// The handler with default options behind a real nginx limit_req, one
// short workload with an id per request: nothing lost, few attempts, no
// body left open. Loose bounds only; how close it gets to the physical limit
// is the benchmark's to measure (bench, scenarios nginx-*).
func TestHandlerBehindNginx(t *testing.T) {
	requireInstalled(t)
	const (
		requests = 300
		workers  = 50
		rate     = 200
		burst    = 20
		// maxAttempts is far above what pacing needs and far below
		// what retrying blindly into the limiter costs (kiota-http-go's
		// handler needs over 2 on the benchmark's nginx scenarios).
		maxAttempts = 1.5
	)
	origin := throttletest.NewServer(throttletest.Config{})
	defer origin.Close()
	p := startProxy(t, func() (*Proxy, error) {
		return StartNginx(Nginx{Origin: origin.URL, Zones: []Zone{{Location: "/", Rate: rate, Burst: burst}}, Status: 429, RetryAfter: "1"})
	})
	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	base := &http.Transport{MaxIdleConnsPerHost: workers}
	defer base.CloseIdleConnections()
	counting := &bodyCounter{base: base}
	hc := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(counting, h)}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var next atomic.Int64
	var ok, failed atomic.Int64
	errs := make(chan error, requests)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < requests; i = int(next.Add(1)) - 1 {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1.0/users/%d", p.URL, i), nil)
				if err != nil {
					errs <- err
					continue
				}
				resp, err := hc.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request error: %v", err)
	}
	assert.EqualValues(t, requests, ok.Load(), "%d failed", failed.Load())
	attempts := float64(counting.attempts.Load()) / requests
	assert.Less(t, attempts, maxAttempts, "attempts per request")
	assert.Zero(t, counting.opened.Load()-counting.closed.Load(), "bodies left open")
	st := origin.Stats()
	assert.Equal(t, requests, st.OK, "every request reached the origin once")
	t.Logf("%d requests through nginx at %d/s burst %d: %.2f attempts per request", requests, rate, burst, attempts)
}

// bodyCounter counts the attempts below the handler and the response
// bodies it hands out and gets closed.
type bodyCounter struct {
	base                     http.RoundTripper
	attempts, opened, closed atomic.Int64
}

func (c *bodyCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	resp, err := c.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		c.opened.Add(1)
		resp.Body = &countedBody{ReadCloser: resp.Body, closed: &c.closed}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	closed *atomic.Int64
	once   sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.closed.Add(1) })
	return b.ReadCloser.Close()
}
