package throttle

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// simServer is an in-memory Graph-like server: one token bucket answering
// 429 with Retry-After in whole seconds (at least 1) when empty. It runs in
// a synctest bubble, so its time is virtual and the simulation exact.
type simServer struct {
	mu        sync.Mutex
	rate      float64
	burst     float64
	tokens    float64
	last      time.Time
	latency   time.Duration
	jitter    func() time.Duration
	dial      func() time.Duration // of a worker's first request
	attempts  int
	throttled int
	early     int
	notBefore map[string]time.Time
	// retryAfter, when set, is the Retry-After of every 429 in seconds,
	// however soon a token comes.
	retryAfter int
}

func newSimServer(rate float64, burst int, latency time.Duration) *simServer {
	return &simServer{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now(),
		latency: latency, notBefore: map[string]time.Time{}}
}

func (s *simServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	out := s.latency/2 + s.delay()
	if req.Header.Get("X-First") != "" && req.Header.Get("Retry-Attempt") == "" && s.dial != nil {
		s.mu.Lock()
		out += s.dial()
		s.mu.Unlock()
	}
	time.Sleep(out)
	id := req.Header.Get("X-Request-Id")
	s.mu.Lock()
	now := time.Now()
	s.attempts++
	if nb, ok := s.notBefore[id]; ok && now.Before(nb) {
		s.early++
	}
	s.tokens = math.Min(s.burst, s.tokens+now.Sub(s.last).Seconds()*s.rate)
	s.last = now
	status, header := http.StatusOK, http.Header{}
	if s.tokens >= 1 {
		s.tokens--
	} else {
		wait := (1 - s.tokens) / s.rate
		ra := max(int(math.Ceil(wait)), 1)
		if s.retryAfter > 0 {
			ra = s.retryAfter
		}
		s.throttled++
		s.notBefore[id] = now.Add(time.Duration(ra) * time.Second)
		status = http.StatusTooManyRequests
		header.Set("Retry-After", strconv.Itoa(ra))
	}
	s.mu.Unlock()
	time.Sleep(s.latency/2 + s.delay())
	return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// delay draws the jitter of one leg of an attempt.
func (s *simServer) delay() time.Duration {
	if s.jitter == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jitter()
}

type simResult struct {
	attemptsPerRequest, timeOverLimit float64
	failed, early                     int
}

// simWorkload is the throttle benchmark's workload, 2000 requests from 200
// workers to a 400/s bucket of 40, with the timing of its first wave.
type simWorkload struct {
	path    func(i int) (method, url string)
	jitter  time.Duration // 0 to jitter added to each leg of each attempt
	stagger time.Duration // between the starts of successive workers
	dial    time.Duration // 0 to dial added to a worker's first request
	pacer   string        // the release design (SetPacer); "" for the default
	// retryAfter, when set, is the server's fixed Retry-After in seconds.
	retryAfter int
}

// simulate sends the workload through one queue, in virtual time, as a
// retry handler with the default options would: admit, send, report, and
// retry a throttled request after its Retry-After, up to 10 retries.
func simulate(t *testing.T, opts options.QueueOptions, w simWorkload) simResult {
	const (
		n, c       = 2000, 200
		rate       = 400.0
		burst      = 40
		maxRetries = 10
	)
	path, stagger := w.path, w.stagger
	var res simResult
	synctest.Test(t, func(t *testing.T) {
		srv := newSimServer(rate, burst, 2*time.Millisecond)
		srv.retryAfter = w.retryAfter
		if w.jitter > 0 {
			rng := rand.New(rand.NewPCG(1, 2))
			srv.jitter = func() time.Duration { return time.Duration(rng.Int64N(int64(w.jitter))) }
		}
		if w.dial > 0 {
			rng := rand.New(rand.NewPCG(3, 4))
			srv.dial = func() time.Duration { return time.Duration(rng.Int64N(int64(w.dial))) }
		}
		q := New(options.SystemClock(), opts)
		if w.pacer != "" {
			setPacer(q, w.pacer)
		}
		send := func(req *http.Request) bool {
			notBefore := time.Now()
			for retry := 0; ; retry++ {
				var pass Pass
				if !opts.Disabled {
					pass, _ = q.Admit(context.Background(), req, notBefore, time.Time{}, nil)
				} else {
					time.Sleep(time.Until(notBefore))
					pass.Sent = time.Now()
				}
				if retry > 0 {
					req.Header.Set("Retry-Attempt", strconv.Itoa(retry))
				}
				resp, _ := srv.RoundTrip(req)
				back := time.Now()
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					q.Report(req, pass, Succeeded, 0, nil, time.Now)
					return true
				}
				ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				q.Report(req, pass, Throttled, time.Duration(ra)*time.Second, nil, time.Now)
				if retry == maxRetries {
					return false
				}
				notBefore = back.Add(time.Duration(ra) * time.Second)
			}
		}
		start := time.Now()
		jobs := make(chan int)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for w := range c {
			wg.Go(func() {
				time.Sleep(time.Duration(w) * stagger)
				first := true
				for i := range jobs {
					method, url := path(i)
					req, _ := http.NewRequest(method, url, nil)
					req.Header.Set("X-Request-Id", strconv.Itoa(i))
					if first {
						req.Header.Set("X-First", "1")
						first = false
					}
					if !send(req) {
						mu.Lock()
						res.failed++
						mu.Unlock()
					}
				}
			})
		}
		for i := range n {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		elapsed := time.Since(start)
		res.attemptsPerRequest = float64(srv.attempts) / float64(n)
		res.timeOverLimit = elapsed.Seconds() / (float64(n) / rate)
		res.early = srv.early
	})
	return res
}

func simGET(i int) (string, string) {
	return http.MethodGet, fmt.Sprintf("https://graph.test/v1.0/users/%d", i)
}

func simPOST(int) (string, string) { return http.MethodPost, "https://graph.test/v1.0/users" }

func TestQueueSimulation(t *testing.T) {
	get, post := simGET, simPOST
	const ms = time.Millisecond
	// limit is the most time over the physical limit each may take: the
	// issue's floor of 1.5x where the client sees the server's timing, a
	// little more where connection set-up hides how the first wave reached
	// it, and with 0-40 ms of jitter on each leg only a regression to the
	// unpaced behaviour is caught.
	tests := []struct {
		name                  string
		path                  func(int) (string, string)
		queue                 bool
		jitter, stagger, dial time.Duration
		limit                 float64
		retryAfter            int
	}{
		{"GET distinct URLs, queue on", get, true, 0, 0, 0, 1.5, 0},
		{"POST one path, queue on", post, true, 0, 0, 0, 1.5, 0},
		{"GET distinct URLs, queue on, 0-40 ms jitter", get, true, 40 * ms, 0, 0, 2, 0},
		{"POST one path, queue on, 0-40 ms jitter", post, true, 40 * ms, 0, 0, 2, 0},
		{"GET, workers starting 0.1 ms apart", get, true, 0, ms / 10, 0, 1.5, 0},
		{"POST, workers starting 0.1 ms apart", post, true, 0, ms / 10, 0, 1.5, 0},
		{"GET, first requests connecting for 0-15 ms", get, true, 0, ms / 20, 15 * ms, 1.6, 0},
		{"POST, first requests connecting for 0-15 ms", post, true, 0, ms / 20, 15 * ms, 1.6, 0},
		// The server's word holds only the URLs it throttled: the rest of
		// the scope is paced through the 3 s, not held for them.
		{"GET, Retry-After 3 s however soon a token comes", get, true, 0, 0, 0, 1.2, 3},
		{"GET distinct URLs, queue off", get, false, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := simulate(t, options.QueueOptions{Disabled: !tt.queue},
				simWorkload{path: tt.path, jitter: tt.jitter, stagger: tt.stagger, dial: tt.dial, retryAfter: tt.retryAfter})
			t.Logf("attempts/request %.3f, time %.2fx the limit, failed %d, early %d", res.attemptsPerRequest, res.timeOverLimit, res.failed, res.early)
			assert.Zero(t, res.failed)
			assert.Zero(t, res.early, "no retry before the server's Retry-After")
			if tt.queue {
				assert.LessOrEqual(t, res.attemptsPerRequest, 1.25)
				assert.LessOrEqual(t, res.timeOverLimit, tt.limit)
			}

		})
	}
}

// TestPacerAlternatives measures the release designs the issue names
// against each other on the benchmark's workload: no pacing (every held
// request leaves when its throttle ends), AIMD, the AWS SDKs' adaptive
// retry rate limiter (CUBIC around a measured rate), and the adaptive
// pacer. The adaptive pacer must take the least time on each.
func TestPacerAlternatives(t *testing.T) {
	const ms = time.Millisecond
	workloads := []struct {
		name string
		simWorkload
	}{
		{"GET", simWorkload{path: simGET}},
		{"POST", simWorkload{path: simPOST}},
		{"GET, connecting 0-15 ms", simWorkload{path: simGET, stagger: ms / 20, dial: 15 * ms}},
		{"POST, connecting 0-15 ms", simWorkload{path: simPOST, stagger: ms / 20, dial: 15 * ms}},
	}
	pacers := []string{"unpaced", "aimd", "aws", "adaptive"}
	for _, wl := range workloads {
		t.Run(wl.name, func(t *testing.T) {
			times := map[string]float64{}
			for _, p := range pacers {
				w := wl.simWorkload
				w.pacer = p
				res := simulate(t, options.QueueOptions{}, w)
				t.Logf("%-8s attempts/request %.3f, time %.2fx the limit, failed %d, early %d", p, res.attemptsPerRequest, res.timeOverLimit, res.failed, res.early)
				assert.Zero(t, res.early, p)
				times[p] = res.timeOverLimit
			}
			for _, p := range pacers[:len(pacers)-1] {
				assert.LessOrEqual(t, times["adaptive"], times[p], "adaptive against %s", p)
			}
		})
	}
}
