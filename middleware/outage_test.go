package middleware

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// failingServer answers 503 without Retry-After while down says so, and
// 200 otherwise, in memory, counting attempts.
type failingServer struct {
	attempts atomic.Int64
	down     func(attempt int64) bool
}

func (s *failingServer) RoundTrip(req *http.Request) (*http.Response, error) {
	n := s.attempts.Add(1)
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	status := http.StatusOK
	if s.down(n) {
		status = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// TestOutageHoldAndProbe runs n concurrent requests, GET and POST, with
// default options against a host that fails as each case says, on the
// injected clock, and checks the attempts they cost and when they end.
func TestOutageHoldAndProbe(t *testing.T) {
	const n = 300
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		opts options.RetryHandlerOptions
		// down says whether attempt number a (from 1), sent at offset at,
		// fails; rng is the case's seeded random source.
		down        func(at time.Duration, a int64, rng *rand.Rand) bool
		maxAttempts float64       // per request
		maxLatency  time.Duration // of any request
		failed      int           // requests that end with the server's 503
	}{
		{
			name:        "down for 30 s, then up: held, probed, released within 3 s of the recovery",
			down:        func(at time.Duration, _ int64, _ *rand.Rand) bool { return at < 30*time.Second },
			maxAttempts: 1.5, maxLatency: 33 * time.Second,
		},
		{
			name: "down for good: at most half a retry per request, and each caller gets the 503",
			opts: options.RetryHandlerOptions{MaxElapsed: 20 * time.Second},
			down: func(time.Duration, int64, *rand.Rand) bool { return true },
			// n first attempts, budgetCap retries, a probe a second.
			maxAttempts: 1.5, maxLatency: 20 * time.Second, failed: n,
		},
		{
			name:        "30 % failing at random: never taken for down, every request served",
			down:        func(_ time.Duration, _ int64, rng *rand.Rand) bool { return rng.Float64() < 0.3 },
			maxAttempts: 1.5, maxLatency: 180 * time.Second,
		},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			t.Run(tt.name+"/"+method, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					clk := clocktest.New(start)
					var mu sync.Mutex
					rng := rand.New(rand.NewPCG(1, 2))
					srv := &failingServer{down: func(a int64) bool {
						mu.Lock()
						defer mu.Unlock()
						return tt.down(clk.Now().Sub(start), a, rng)
					}}
					opts := tt.opts
					opts.Clock = clk
					var states []options.HostState
					opts.Outage.OnStateChange = func(_ string, s options.HostState, _ time.Time) {
						mu.Lock()
						defer mu.Unlock()
						states = append(states, s)
					}
					h, err := NewRetryHandler(opts)
					require.NoError(t, err)

					type end struct {
						status int
						err    error
						at     time.Duration
					}
					ends := make(chan end, n)
					for i := range n {
						go func() {
							var body io.Reader
							if method == http.MethodPost {
								body = bytes.NewReader([]byte(`{"i":` + string(rune('0'+i%10)) + `}`))
							}
							req, _ := http.NewRequestWithContext(context.Background(), method, "https://down.example/v1.0/users", body)
							resp, err := h.Intercept(transportPipeline{srv}, 0, req)
							e := end{err: err, at: clk.Now().Sub(start)}
							if resp != nil {
								e.status = resp.StatusCode
								_ = resp.Body.Close()
							}
							ends <- e
						}()
					}
					var got []end
					for len(got) < n {
						synctest.Wait()
						for drained := false; !drained; {
							select {
							case e := <-ends:
								got = append(got, e)
							default:
								drained = true
							}
						}
						if len(got) == n {
							break
						}
						p := clk.Pending()
						require.NotEmpty(t, p, "requests blocked with no timer to wake them")
						clk.Advance(p[0])
					}
					failed := 0
					var latest time.Duration
					for _, e := range got {
						require.NoError(t, e.err, "never a synthetic error (R28)")
						if e.status != http.StatusOK {
							assert.Equal(t, http.StatusServiceUnavailable, e.status, "the server's last answer")
							failed++
						}
						latest = max(latest, e.at)
					}
					assert.Equal(t, tt.failed, failed)
					attempts := float64(srv.attempts.Load()) / n
					assert.LessOrEqual(t, attempts, tt.maxAttempts, "attempts per request")
					assert.LessOrEqual(t, latest, tt.maxLatency, "the last request's end")
					t.Logf("%.2f attempts per request, the last ended at %v; states seen: %d", attempts, latest, len(states))
					if tt.failed == 0 && tt.maxLatency > 60*time.Second {
						assert.Empty(t, states, "a partial failure is not an outage")
					}
					assert.Empty(t, clk.Pending(), "timers left")
				})
			})
		}
	}
}
