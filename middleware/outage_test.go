package middleware

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
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

// failingServer answers 503 without Retry-After while down says so of
// the request, its attempt number (from 1), and 200 otherwise, in memory,
// counting attempts.
type failingServer struct {
	attempts atomic.Int64
	down     func(req *http.Request, attempt int64) bool
}

func (s *failingServer) RoundTrip(req *http.Request) (*http.Response, error) {
	n := s.attempts.Add(1)
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	status := http.StatusOK
	if s.down(req, n) {
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
					srv := &failingServer{down: func(_ *http.Request, a int64) bool {
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

					got := driveAll(t, clk, n, func(i int) (*http.Response, error) {
						var body io.Reader
						if method == http.MethodPost {
							body = bytes.NewReader([]byte(`{"i":` + string(rune('0'+i%10)) + `}`))
						}
						req, _ := http.NewRequestWithContext(context.Background(), method, "https://down.example/v1.0/users", body)
						return h.Intercept(transportPipeline{srv}, 0, req)
					})
					failed := 0
					var latest time.Duration
					for _, e := range got {
						require.NoError(t, e.err, "never a synthetic error (R28)")
						if e.status != http.StatusOK {
							assert.Equal(t, http.StatusServiceUnavailable, e.status, "the server's last answer")
							failed++
						}
						latest = max(latest, e.at.Sub(start))
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

// outcome is how one request of driveAll ended.
type outcome struct {
	status int
	err    error
	at     time.Time
}

// driveAll runs send for requests 0..n-1 concurrently inside a synctest
// bubble, advancing clk to its next timer whenever every goroutine is
// blocked, until all have ended. It fails the test if they block with no
// timer to wake them.
func driveAll(t *testing.T, clk *clocktest.Clock, n int, send func(i int) (*http.Response, error)) []outcome {
	t.Helper()
	ends := make(chan outcome, n)
	for i := range n {
		go func() {
			resp, err := send(i)
			e := outcome{err: err, at: clk.Now()}
			if resp != nil {
				e.status = resp.StatusCode
				_ = resp.Body.Close()
			}
			ends <- e
		}()
	}
	var got []outcome
	for {
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
			return got
		}
		p := clk.Pending()
		require.NotEmpty(t, p, "requests blocked with no timer to wake them")
		clk.Advance(p[0])
	}
}

// TestRetryWokenEarlyIsNotABackoffStep: when a probe's success releases
// a held retry before its backoff ran out and that retry fails again, the
// next delay is the backoff's first step again, not its second: the
// backoff did not time the early retry (options.Attempt.Timed).
func TestRetryWokenEarlyIsNotABackoffStep(t *testing.T) {
	const n = 40
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clk := clocktest.New(start)
		// Every attempt in the first half second fails, so the host is
		// taken for down. Request 0's retry is due first, at 1 s; the
		// probe then succeeds, and the first retry it releases early (any
		// other request's, due at 10 s) fails again.
		var failedAgain atomic.Bool
		srv := &failingServer{down: func(req *http.Request, _ int64) bool {
			if clk.Now().Sub(start) < 500*time.Millisecond {
				return true
			}
			early := req.Header.Get(headerRetryAttempt) != "" && req.URL.Query().Get("i") != "0"
			return early && failedAgain.CompareAndSwap(false, true)
		}}
		var mu sync.Mutex
		steps := map[int][]int{} // retry number -> the steps the policy saw
		policy := options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
			mu.Lock()
			defer mu.Unlock()
			steps[a.Retry] = append(steps[a.Retry], a.Step())
			if a.Request.URL.Query().Get("i") == "0" {
				return time.Second, true // the one ready to probe first
			}
			return 10 * time.Second, a.Retry <= 3
		})
		h, err := NewRetryHandler(options.RetryHandlerOptions{Clock: clk, Policy: policy})
		require.NoError(t, err)
		got := driveAll(t, clk, n, func(i int) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://down.example/v1.0/users?i="+strconv.Itoa(i), nil)
			return h.Intercept(transportPipeline{srv}, 0, req)
		})
		early := 0
		for _, e := range got {
			require.NoError(t, e.err)
			assert.Equal(t, http.StatusOK, e.status)
			if e.at.Sub(start) < 10*time.Second {
				early++
			}
		}
		require.Positive(t, early, "a probe released retries before their 10 s")
		require.Len(t, steps[2], 1, "one request failed twice")
		assert.Equal(t, []int{1}, steps[2], "its second delay is the first step again")
		assert.Empty(t, clk.Pending(), "timers left")
	})
}
