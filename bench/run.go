package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// result is what one client did with one scenario and method.
type result struct {
	client   client
	scenario scenario
	method   string
	p        params

	succeeded, failed, errored int
	attempts, throttled        int // server-side, all requests
	wall, limit                time.Duration
	p50, p99                   time.Duration
	leaked                     int64
	goroutines                 int
	badBody                    int // requests with at least one attempt whose body arrived wrong
	early                      int // attempts sent before the Retry-After named for their request
	firstErr                   string

	// For split scenarios, the requests to the API that is not throttled.
	open openAPI
	apis []apiResult // per budget, for scenarios that name them

	// completions are the times, since the run started, at which requests
	// succeeded, in order.
	completions []time.Duration
}

// apiResult is what one budget's requests took.
type apiResult struct {
	name        string
	n, lost     int
	attempts    int
	wall, limit time.Duration // the last completion, and the budget's own limit
}

func (a apiResult) overLimit() float64 { return a.wall.Seconds() / a.limit.Seconds() }

type openAPI struct {
	n         int
	held      int           // first attempt left the client more than p.heldAfter after it was issued
	maxHold   time.Duration // the longest such delay
	p99       time.Duration // client-side latency
	attempts  int
	throttled int
}

func (r result) attemptsPerRequest() float64 { return float64(r.attempts) / float64(r.p.n) }
func (r result) throttledPerRequest() float64 {
	return float64(r.throttled) / float64(r.p.n)
}
func (r result) overLimit() float64 { return r.wall.Seconds() / r.limit.Seconds() }

// outcome is what the workload saw of one request.
type outcome struct {
	status    int
	err       error
	issued    time.Time // when the workload called Do
	latency   time.Duration
	completed time.Duration // since the run started
	throttled bool          // went to the throttled API
}

// rig is what one client's run needs: a fresh server, the client on a
// fresh transport that counts the bodies it hands out, and the number of
// goroutines before the run, once they settled.
type rig struct {
	srv      *throttletest.Server
	base     *http.Transport
	counting *countingTransport
	hc       *http.Client
	before   int
}

// newRig starts sc's server and builds cl's client for a run; the caller
// closes rig.srv.
func newRig(cl client, sc scenario, p params) (*rig, error) {
	srv := throttletest.NewServer(sc.config(p))
	base := newBaseTransport(p.c)
	counting := &countingTransport{base: base}
	hc, err := cl.build(counting)
	if err != nil {
		srv.Close()
		return nil, err
	}
	settle(0)
	return &rig{srv: srv, base: base, counting: counting, hc: hc, before: runtime.NumGoroutine()}, nil
}

// run drives p.n requests from p.c workers through a fresh client against
// a fresh server, and measures.
func run(cl client, sc scenario, method string, p params) (result, error) {
	if sc.batch {
		return runBatch(cl, sc, method, p)
	}
	res := result{client: cl, scenario: sc, method: method, p: p, limit: sc.limit(p)}
	rg, err := newRig(cl, sc, p)
	if err != nil {
		return res, err
	}
	defer rg.srv.Close()
	srv, base, counting, hc, before := rg.srv, rg.base, rg.counting, rg.hc, rg.before

	// The run's own deadline stops a client that would otherwise keep
	// retrying past any reasonable time; its requests then count as errors.
	ctx, cancel := context.WithTimeout(context.Background(), p.runTimeout)
	defer cancel()
	outcomes := make([]outcome, p.n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range p.c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= p.n {
					return
				}
				outcomes[i] = send(ctx, hc, srv, sc, method, i, start, p.reqTimeout)
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)

	// Idle connections are closed so that only what a client left behind
	// (a connection held by an unclosed body, a goroutine of its own) is
	// counted; the server's goroutines for those connections count too.
	base.CloseIdleConnections()
	res.goroutines = settle(before) - before
	res.leaked = counting.leaked()

	var latencies, openLatencies []time.Duration
	for _, o := range outcomes {
		latencies = append(latencies, o.latency)
		if !o.throttled {
			openLatencies = append(openLatencies, o.latency)
		}
		switch {
		case o.err != nil:
			res.errored++
			if res.firstErr == "" {
				res.firstErr = o.err.Error()
			}
		case o.status >= 200 && o.status < 300:
			res.succeeded++
			res.completions = append(res.completions, o.completed)
		default:
			res.failed++
		}
	}
	slices.Sort(res.completions)
	res.p50, res.p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)

	st := srv.Stats()
	res.attempts, res.throttled, res.early = st.Attempts, st.Throttled, st.Early
	for _, rq := range srv.Requests() {
		if rq.BadBody > 0 {
			res.badBody++
		}
		if sc.split && !outcomes[requestIndex(rq.ID)].throttled {
			res.open.attempts += rq.Attempts
			res.open.throttled += rq.Throttled
		}
	}
	if sc.split {
		for i, o := range outcomes {
			if o.throttled {
				continue
			}
			res.open.n++
			// A request that never left the client was held for as long
			// as the workload waited for it.
			hold := o.latency
			if sent, ok := counting.firstSent(requestID(i)); ok {
				hold = sent.Sub(o.issued)
			}
			res.open.maxHold = max(res.open.maxHold, hold)
			if hold > p.heldAfter {
				res.open.held++
			}
		}
	}
	res.open.p99 = percentile(openLatencies, 0.99)
	if sc.apis != nil {
		res.apis = perAPI(sc, p, outcomes, srv.Requests())
	}
	return res, nil
}

// send issues request i once, as an application would: through the
// client's Do, reading and closing whatever body it gets.
func send(ctx context.Context, hc *http.Client, srv *throttletest.Server, sc scenario, method string, i int, start time.Time, timeout time.Duration) outcome {
	url, throttled := sc.target(srv, method, i)
	o := outcome{throttled: throttled}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	var digest string
	if method == http.MethodPost {
		b := fmt.Appendf(nil, `{"displayName":"User %d","mailNickname":"user%d","accountEnabled":true,"passwordProfile":{"forceChangePasswordNextSignIn":true}}`, i, i)
		sum := sha256.Sum256(b)
		digest = hex.EncodeToString(sum[:])
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set(throttletest.HeaderRequestID, requestID(i))
	if digest != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(throttletest.HeaderBodySHA256, digest)
	}
	issued := time.Now()
	resp, err := hc.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		o.status = resp.StatusCode
	}
	done := time.Now()
	o.err, o.issued, o.latency, o.completed = err, issued, done.Sub(issued), done.Sub(start)
	return o
}

func requestID(i int) string { return "req-" + strconv.Itoa(i) }

func requestIndex(id string) int {
	n, _ := strconv.Atoi(id[len("req-"):])
	return n
}

// settle waits, up to 3 s, until the goroutine count reaches want or stops
// falling, and returns it: connections closed a moment ago take a little
// while to wind down their goroutines.
func settle(want int) int {
	n := runtime.NumGoroutine()
	deadline := time.Now().Add(3 * time.Second)
	stable := 0
	for n > want && time.Now().Before(deadline) && stable < 10 {
		time.Sleep(50 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			stable++
		} else {
			stable = 0
		}
		n = m
	}
	return n
}

// percentile returns the q-quantile of ds by the nearest-rank method.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// perAPI sums the outcomes of each budget's requests, in name order.
func perAPI(sc scenario, p params, outcomes []outcome, seen []throttletest.Request) []apiResult {
	apiOf, limits := sc.apis(p)
	by := map[string]*apiResult{}
	for name, limit := range limits {
		by[name] = &apiResult{name: name, limit: limit}
	}
	for i, o := range outcomes {
		a := by[apiOf(i)]
		a.n++
		if o.err != nil || o.status < 200 || o.status >= 300 {
			a.lost++
		}
		a.wall = max(a.wall, o.completed)
	}
	for _, rq := range seen {
		by[apiOf(requestIndex(rq.ID))].attempts += rq.Attempts
	}
	out := make([]apiResult, 0, len(by))
	for _, name := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[name])
	}
	return out
}
