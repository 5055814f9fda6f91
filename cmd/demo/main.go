// Command demo sends a few hundred concurrent Microsoft Graph-style
// requests through a Kiota request adapter built on this module's pipeline,
// against an embedded loopback server that throttles like Graph (429 with
// Retry-After from a token bucket, and some 503s). It shows progress, then a
// summary, and exits non-zero if any request was lost or corrupted.
//
// Usage:
//
//	go run ./cmd/demo [-n 600] [-c 100] [-rate 200] [-burst 20] [-failures 0.02] [-outage 0] [-queue=true]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	abs "github.com/microsoft/kiota-abstractions-go"
	"github.com/microsoft/kiota-abstractions-go/authentication"
	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

type config struct {
	n, c         int
	rate         float64
	burst        int
	failures     float64
	outage       time.Duration
	queue        bool
	postEvery    int
	timeout      time.Duration
	progressTick time.Duration
	telemetry    bool
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 600, "requests to send")
	flag.IntVar(&cfg.c, "c", 100, "concurrent workers")
	flag.Float64Var(&cfg.rate, "rate", 200, "server capacity, requests per second")
	flag.IntVar(&cfg.burst, "burst", 20, "server burst, requests")
	flag.Float64Var(&cfg.failures, "failures", 0.01, "share of requests the server answers 503 without Retry-After")
	flag.IntVar(&cfg.postEvery, "post-every", 3, "every how many requests one is a POST (1: all, 0: none)")
	flag.DurationVar(&cfg.outage, "outage", 0, "answer every request 503 without Retry-After for this long after the server starts, to see the handler hold and probe it")
	flag.BoolVar(&cfg.queue, "queue", true, "hold requests to throttled targets in the throttle-aware queue")
	flag.DurationVar(&cfg.timeout, "timeout", 0, "give up on the whole run after this long; 0: never, so that a slow run (-queue=false) still finishes")
	flag.DurationVar(&cfg.progressTick, "progress", 500*time.Millisecond, "progress line interval; 0 for none")
	flag.BoolVar(&cfg.telemetry, "telemetry", false, "print the handler's spans and metrics, collected by an in-process OpenTelemetry SDK")
	flag.Parse()
	sum, err := run(cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	if sum.lost() > 0 {
		fmt.Fprintf(os.Stderr, "demo: %d request(s) lost or corrupted\n", sum.lost())
		os.Exit(1)
	}
}

// summary is what a run measured.
type summary struct {
	n, succeeded, failed, errored int
	server                        throttletest.Stats
	handler                       middleware.Stats
	wall, limit                   time.Duration
	p50, p99                      time.Duration
	requests                      []throttletest.Request // as the server saw them
	slowest                       throttletest.Request   // the request that took longest
	slowestTook                   time.Duration
	firstErr                      error
	host                          *hostLog
}

// hostLog records what the handler believed of the server, from
// OutageOptions.OnStateChange.
type hostLog struct {
	mu       sync.Mutex
	start    time.Time
	down, up []time.Duration // since start: each time seen down, and up again
	probes   int
}

func (l *hostLog) changed(_ string, s options.HostState, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case options.HostDown:
		if len(l.down) == len(l.up) {
			l.down = append(l.down, at.Sub(l.start))
		}
	case options.HostProbing:
		l.probes++
	case options.HostUp:
		l.up = append(l.up, at.Sub(l.start))
	}
}

// String says when the server was seen down and up again.
func (l *hostLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.down) == 0 {
		return "never seen down"
	}
	var out []string
	for i, d := range l.down {
		if i < len(l.up) {
			out = append(out, fmt.Sprintf("seen down at %.2f s, up again at %.2f s", d.Seconds(), l.up[i].Seconds()))
		} else {
			out = append(out, fmt.Sprintf("seen down at %.2f s, still down at the end", d.Seconds()))
		}
	}
	return fmt.Sprintf("%s (%d probes)", strings.Join(out, "; "), l.probes)
}

// lost counts the requests that got no answer from the server, or whose
// body arrived corrupted. A request whose retries ran out is not lost: its
// caller got the server's last answer (a 429 or 503), counted as failed.
func (s summary) lost() int { return s.errored + s.server.BadBody }

func run(cfg config, out io.Writer) (summary, error) {
	if cfg.n <= 0 || cfg.c <= 0 || cfg.rate <= 0 || cfg.burst <= 0 {
		return summary{}, fmt.Errorf("n = %d, c = %d, rate = %v and burst = %d must all be positive", cfg.n, cfg.c, cfg.rate, cfg.burst)
	}
	// The demo's users calls draw from Graph's Identity budget, one of the
	// budgets the fake keeps on its one host.
	srv := throttletest.NewServer(throttletest.Config{
		Rules:       throttletest.GraphBudgets{Identity: throttletest.Bucket{Rate: cfg.rate, Burst: cfg.burst}}.Rules(),
		FailureRate: cfg.failures,
		Outage:      cfg.outage,
	})
	defer srv.Close()

	s := summary{host: &hostLog{start: srv.Started()}}
	opts := options.RetryHandlerOptions{Queue: options.QueueOptions{Disabled: !cfg.queue},
		Outage: options.OutageOptions{OnStateChange: s.host.changed}}
	var tel *telemetry
	if cfg.telemetry {
		tel = newTelemetry()
		opts.MeterProvider = tel.mp
	}
	retry, err := middleware.NewRetryHandler(opts)
	if err != nil {
		return summary{}, err
	}
	transport := nethttplibrary.GetDefaultTransport()
	if t, ok := transport.(*http.Transport); ok {
		// Keep a connection per worker: the default of two idle connections
		// per host would open and close one for most requests.
		t.MaxIdleConnsPerHost = cfg.c
	}
	adapter, err := pipeline.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{},
		pipeline.WithRetryHandler(retry), pipeline.WithTransport(transport), pipeline.WithTimeout(cfg.timeout))
	if err != nil {
		return summary{}, err
	}
	adapter.SetBaseUrl(srv.URL + "/v1.0")
	users := newUsersRequestBuilder(adapter)
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), cfg.timeout)
	}
	defer cancel()

	fmt.Fprintf(out, "demo: %d requests (1 in %d a POST with a JSON body), %d workers, server %v req/s (burst %d, %.0f%% random 503s), queue %v\n",
		cfg.n, cfg.postEvery, cfg.c, cfg.rate, cfg.burst, cfg.failures*100, onOff(cfg.queue))
	start := time.Now()
	var done atomic.Int64
	stopProgress := progress(out, cfg, srv, &done, start)

	jobs := make(chan int)
	latencies := make([]time.Duration, cfg.n)
	errs := make([]error, cfg.n)
	var wg sync.WaitGroup
	for range cfg.c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				t0 := time.Now()
				errs[i] = issue(ctx, users, i, cfg.postEvery > 0 && i%cfg.postEvery == 0)
				latencies[i] = time.Since(t0)
				done.Add(1)
			}
		}()
	}
	for i := range cfg.n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	stopProgress()
	if t, ok := transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}

	s.n, s.server, s.handler, s.wall = cfg.n, srv.Stats(), retry.Stats(), time.Since(start)
	s.limit = max(time.Duration(float64(cfg.n)/cfg.rate*float64(time.Second)), cfg.outage)
	for _, err := range errs {
		var apiErr *abs.ApiError
		switch {
		case err == nil:
			s.succeeded++
		case errors.As(err, &apiErr):
			s.failed++
		default:
			s.errored++
		}
		if err != nil && s.firstErr == nil {
			s.firstErr = err
		}
	}
	slowest := 0
	for i, d := range latencies {
		if d > latencies[slowest] {
			slowest = i
		}
	}
	s.slowestTook = latencies[slowest]
	s.requests = srv.Requests()
	for _, r := range s.requests {
		if r.ID == "req-"+strconv.Itoa(slowest) {
			s.slowest = r
		}
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	s.p50, s.p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	report(out, s)
	if tel != nil {
		if err := tel.report(out); err != nil {
			return s, err
		}
	}
	return s, nil
}

// issue sends request i through the generated-style client: a GET of a
// user, or a POST that creates one. The server checks every attempt's body
// against its hash.
func issue(ctx context.Context, users *usersRequestBuilder, i int, post bool) error {
	id := "req-" + strconv.Itoa(i)
	config := &abs.RequestConfiguration[abs.DefaultQueryParameters]{Headers: abs.NewRequestHeaders()}
	config.Headers.Add(throttletest.HeaderRequestID, id)
	if !post {
		_, err := users.ByUserID(strconv.Itoa(i)).Get(ctx, config)
		return err
	}
	body, _ := json.Marshal(map[string]any{
		"displayName": "User " + id, "mailNickname": id, "accountEnabled": true,
		"passwordProfile": map[string]any{"forceChangePasswordNextSignIn": true},
	})
	sum := sha256.Sum256(body)
	config.Headers.Add(throttletest.HeaderBodySHA256, hex.EncodeToString(sum[:]))
	_, err := users.Post(ctx, body, config)
	return err
}

func progress(out io.Writer, cfg config, srv *throttletest.Server, done *atomic.Int64, start time.Time) (stop func()) {
	if cfg.progressTick <= 0 {
		return func() {}
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(cfg.progressTick)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				st := srv.Stats()
				fmt.Fprintf(out, "  %5.1fs  %4d/%d done  %5d attempts  %4d throttled  %3d unavailable\n",
					time.Since(start).Seconds(), done.Load(), cfg.n, st.Attempts, st.Throttled, st.Unavailable)
			}
		}
	}()
	return func() { close(quit); <-finished }
}

func report(out io.Writer, s summary) {
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  succeeded          %d of %d\n", s.succeeded, s.n)
	fmt.Fprintf(out, "  failed / lost      %d / %d (failed: retries ran out, the server's last 429 or 503 returned)\n", s.failed, s.errored)
	fmt.Fprintf(out, "  attempts           %d (%.2f per request; handler counted %d)\n", s.server.Attempts, float64(s.server.Attempts)/float64(s.n), s.handler.Attempts)
	fmt.Fprintf(out, "  429s / 503s        %d / %d\n", s.server.Throttled, s.server.Unavailable)
	fmt.Fprintf(out, "  server             %v (times since the server started)\n", s.host)
	fmt.Fprintf(out, "  wrong bodies       %d\n", s.server.BadBody)
	fmt.Fprintf(out, "  sent before Retry-After %d\n", s.server.Early)
	fmt.Fprintf(out, "  wall time          %v (server capacity allows %v: %.2fx)\n", s.wall.Round(time.Millisecond), s.limit.Round(time.Millisecond), s.wall.Seconds()/s.limit.Seconds())
	fmt.Fprintf(out, "  latency p50 / p99  %v / %v\n", s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond))
	fmt.Fprintf(out, "  slowest request    %v: %d attempts, %d answered 429, %d answered 503\n",
		s.slowestTook.Round(time.Millisecond), s.slowest.Attempts, s.slowest.Throttled, s.slowest.Unavailable)
	if s.slowest.Unavailable > 0 {
		fmt.Fprintf(out, "                     (a 503 has no Retry-After: retry n waits the default backoff, 3·n² s less up to 20%%: 3 s, 12 s, 27 s ...)\n")
	}
	if s.firstErr != nil {
		fmt.Fprintf(out, "  first error        %v\n", s.firstErr)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
