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

	"github.com/kiota-resilience/kiota-resilience-go/internal/realproxy"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// result is what one client did with one scenario and method.
type result struct {
	client   client
	scenario scenario
	workload workload // zero for a scenario without workloads
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

// rig is what one client's run needs: a fresh server, behind a fresh real
// limiter when the scenario has one, the client on a fresh transport that
// counts the bodies it hands out, and the number of goroutines before the
// run, once they settled.
type rig struct {
	srv      *throttletest.Server
	proxy    *realproxy.Proxy // nil unless the scenario runs behind one
	url      string           // where requests go: the proxy's URL, or the server's
	base     *http.Transport
	counting *countingTransport
	hc       *http.Client
	before   int
}

// newRig starts sc's server (and limiter) and builds cl's client for a
// run; the caller closes the rig.
func newRig(cl client, sc scenario, p params) (*rig, error) {
	var cfg throttletest.Config
	if sc.config != nil {
		cfg = sc.config(p)
	}
	rg := &rig{srv: throttletest.NewServer(cfg)}
	rg.url = rg.srv.URL
	if sc.proxy != nil {
		px, err := sc.proxy(p, rg.srv.URL)
		if err != nil {
			rg.srv.Close()
			return nil, err
		}
		rg.proxy, rg.url = px, px.URL
	}
	rg.base = newBaseTransport(p.c)
	rg.counting = &countingTransport{base: rg.base}
	hc, err := cl.build(rg.counting)
	if err != nil {
		rg.close()
		return nil, err
	}
	rg.hc = hc
	settle(0)
	rg.before = runtime.NumGoroutine()
	return rg, nil
}

// stopProxy stops the limiter, if any, so that the connections it kept
// to the server end before goroutines are counted.
func (rg *rig) stopProxy() error {
	if rg.proxy == nil {
		return nil
	}
	return rg.proxy.Close()
}

func (rg *rig) close() {
	_ = rg.stopProxy()
	rg.srv.Close()
}

// target returns where request i of a run goes and whether it goes to the
// throttled API.
func (rg *rig) target(sc scenario, w workload, method string, p params) func(i int) (string, bool) {
	if sc.workloads {
		return func(i int) (string, bool) { return rg.url + sc.path(w, p, i), true }
	}
	return func(i int) (string, bool) { return sc.target(rg.srv, method, i) }
}

// run drives p.n requests from p.c workers through a fresh client against
// a fresh server, and measures.
func run(cl client, sc scenario, w workload, method string, p params) (result, error) {
	if sc.batch {
		return runBatch(cl, sc, method, p)
	}
	p = sc.sized(p)
	res := result{client: cl, scenario: sc, workload: w, method: method, p: p, limit: sc.limit(p)}
	rg, err := newRig(cl, sc, p)
	if err != nil {
		return res, err
	}
	defer rg.close()
	srv, base, counting, hc, before := rg.srv, rg.base, rg.counting, rg.hc, rg.before
	target := rg.target(sc, w, method, p)

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
				outcomes[i] = send(ctx, hc, target, method, i, start, p.reqTimeout)
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)

	// Idle connections are closed so that only what a client left behind
	// (a connection held by an unclosed body, a goroutine of its own) is
	// counted; the server's goroutines for those connections count too.
	base.CloseIdleConnections()
	if err := rg.stopProxy(); err != nil {
		return res, err
	}
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

	// Behind a real limiter the server sees only what passed it, so the
	// client's transport counts instead.
	attempts := map[int]int{}
	if sc.proxy != nil {
		for id, c := range counting.counts() {
			res.attempts += c.attempts
			res.throttled += c.refused
			res.early += c.early
			attempts[requestIndex(id)] = c.attempts
		}
	} else {
		st := srv.Stats()
		res.attempts, res.throttled, res.early = st.Attempts, st.Throttled, st.Early
	}
	for _, rq := range srv.Requests() {
		if rq.BadBody > 0 {
			res.badBody++
		}
		if sc.proxy == nil {
			attempts[requestIndex(rq.ID)] = rq.Attempts
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
		res.apis = perAPI(sc, p, outcomes, attempts)
	}
	return res, nil
}

// send issues request i once, as an application would: through the
// client's Do, reading and closing whatever body it gets.
func send(ctx context.Context, hc *http.Client, target func(i int) (string, bool), method string, i int, start time.Time, timeout time.Duration) outcome {
	url, throttled := target(i)
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

// perAPI sums the outcomes of each budget's requests, in name order;
// attempts are by request index.
func perAPI(sc scenario, p params, outcomes []outcome, attempts map[int]int) []apiResult {
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
	for i, n := range attempts {
		by[apiOf(i)].attempts += n
	}
	out := make([]apiResult, 0, len(by))
	for _, name := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[name])
	}
	return out
}
