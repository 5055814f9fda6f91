package throttletest

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// obey sends GET url until it is not answered 429, waiting each
// Retry-After, and returns the attempts and the last answer's headers.
func obey(t *testing.T, c *http.Client, url, id string) (int, http.Header) {
	t.Helper()
	for attempts := 1; ; attempts++ {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Header.Set(HeaderRequestID, id)
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		if resp.StatusCode != http.StatusTooManyRequests {
			return attempts, resp.Header
		}
		s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err)
		time.Sleep(time.Duration(s) * time.Second) // virtual: inside a synctest bubble
	}
}

func TestTransportSimulatesAWindowInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		window := must(FixedWindowLimiter(Window{Quota: 3, Per: 10 * time.Second}))
		tr, err := NewTransport(Config{Rules: []Rule{{Name: "w", Match: everything, Limiter: window, Announce: must(CurrentDraft("w"))}}}, 10*time.Millisecond)
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		start := time.Now()
		var attempts []int
		var last http.Header
		for i := range 7 {
			n, h := obey(t, c, "https://graph.test/v1.0/users/1", strconv.Itoa(i))
			attempts, last = append(attempts, n), h
		}
		// The window opens at the first arrival, 5 ms in; the 4th and 7th
		// requests wait a 10 s Retry-After each, and every attempt takes
		// 10 ms.
		assert.Equal(t, 20*time.Second+90*time.Millisecond, time.Since(start))
		assert.Equal(t, []int{1, 1, 1, 2, 1, 1, 2}, attempts)
		assert.Equal(t, Stats{Attempts: 9, Requests: 7, OK: 7, Throttled: 2, ThrottledBy: map[string]int{"w": 2}}, tr.Stats())
		// The last arrived at 20.085 s, in the window that opened at 20.005 s.
		assert.Equal(t, []string{`"w";r=2;t=9.92`}, last.Values("RateLimit"))
		assert.Len(t, tr.Completions(), 7)
	})
}

func TestTransportCountsEarlyRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, err := NewTransport(Config{Bucket: Bucket{Rate: 1, Burst: 1}}, 0)
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		for range 3 { // the second and third come before the named second
			req, err := http.NewRequest(http.MethodPost, "https://graph.test/v1.0/users", nil)
			require.NoError(t, err)
			req.Header.Set(HeaderRequestID, "r")
			resp, err := c.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
		}
		assert.Equal(t, Stats{Attempts: 3, Requests: 1, OK: 1, Throttled: 2, Early: 1, ThrottledBy: map[string]int{"bucket": 2}}, tr.Stats())
	})
}

// A flapping Transport answers 503 without Retry-After while it is down,
// counted from its creation, and serves while it is up.
func TestTransportFlapsInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, err := NewTransport(Config{Flapping: Flapping{Down: 2 * time.Second, Up: time.Second}}, 0)
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		var got []int
		for range 4 { // at 0, 1, 2 (up) and 3 s (down again)
			resp, err := c.Get("https://graph.test/v1.0/users/1")
			require.NoError(t, err)
			assert.Empty(t, resp.Header.Get("Retry-After"))
			require.NoError(t, resp.Body.Close())
			got = append(got, resp.StatusCode)
			time.Sleep(time.Second)
		}
		assert.Equal(t, []int{503, 503, 200, 503}, got)
		assert.Equal(t, Stats{Attempts: 4, OK: 1, Unavailable: 3}, tr.Stats())
	})
}

func TestTransportEndsOnContextCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, err := NewTransport(Config{}, time.Hour)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://graph.test/v1.0/users/1", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = tr.RoundTrip(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))
	})
}

func TestNewTransportRejects(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		latency time.Duration
		want    string
	}{
		{"an invalid config", Config{Bucket: Bucket{Rate: -1}}, 0, "Config.Bucket.Rate = -1"},
		{"hosts", Config{Hosts: []string{"127.0.0.1"}}, 0, "apply only to a Server"},
		{"an outage", Config{Outage: time.Second}, 0, "apply only to a Server"},
		{"failures", Config{FailureRate: 0.5}, 0, "apply only to a Server"},
		{"a negative latency", Config{}, -time.Second, "latency = -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTransport(tt.cfg, tt.latency)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The real limiters' shapes run in virtual time like any other. A client
// that retries each refusal after 1 ms gets n requests through nginx's
// limit_req in (n − burst − 1)/rate, its physical limit. Through HAProxy's
// stick table, which counts refusals, knocking every millisecond would
// never get through again; knocking once a period takes 20 periods for
// what could take 10.
func TestTransportRealShapesInVirtualTime(t *testing.T) {
	limitReq, err := LimitReqLimiter(LimitReq{Rate: 10, Burst: 4})
	require.NoError(t, err)
	stick, err := StickTableLimiter(StickTable{Limit: 10, Period: time.Second})
	require.NoError(t, err)
	tests := []struct {
		name    string
		limiter func(string, time.Time) Limiter
		retry   time.Duration
		want    time.Duration
	}{
		{"nginx limit_req", limitReq, time.Millisecond, 9500 * time.Millisecond}, // (100 − 5) / 10
		{"HAProxy stick table", stick, time.Second, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr, err := NewTransport(Config{Rules: []Rule{{Name: "r", Match: everyRequest, Limiter: tt.limiter, OmitRetryAfter: true}}}, 0)
				require.NoError(t, err)
				start := time.Now()
				for range 100 {
					for {
						req, err := http.NewRequest(http.MethodGet, "http://api.test/v1.0/users/1", nil)
						require.NoError(t, err)
						resp, err := tr.RoundTrip(req)
						require.NoError(t, err)
						require.NoError(t, resp.Body.Close())
						if resp.StatusCode == http.StatusOK {
							break
						}
						time.Sleep(tt.retry)
					}
				}
				assert.Equal(t, tt.want, time.Since(start))
			})
		})
	}
}

// TestTransportServeTime checks that the Transport takes Config.ServeTime
// to serve a request, as the Server does, holding its Concurrent slot
// meanwhile, and answers a refusal after the latency alone.
func TestTransportServeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency, serve = 2 * time.Millisecond, 50 * time.Millisecond
		tr, err := NewTransport(Config{
			Rules:     []Rule{{Name: "all", Match: func(*http.Request) (string, bool) { return "", true }, Limiter: Concurrent(1)}},
			ServeTime: serve,
		}, latency)
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		start := time.Now()
		type answer struct {
			status int
			took   time.Duration
		}
		answers := make(chan answer, 2)
		for range 2 {
			go func() {
				resp, err := c.Get("https://graph.test/v1.0/me")
				if !assert.NoError(t, err) {
					answers <- answer{}
					return
				}
				_ = resp.Body.Close()
				answers <- answer{resp.StatusCode, time.Since(start)}
			}()
		}
		first, second := <-answers, <-answers
		assert.Equal(t, answer{http.StatusTooManyRequests, latency}, first, "refused at once while the other is served")
		assert.Equal(t, answer{http.StatusOK, latency + serve}, second)
	})
}
