package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kiota-resilience/kiota-resilience-go/bench/internal/redisserver"
	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/internal/realproxy"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/redisstore"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// The fleet bench runs the workload of scenario retry-after-3 (one token
// bucket, 429s naming Retry-After: 3) from several OS processes at once,
// each with its own retry handler and an equal share of the requests and
// workers, sharing one redis-server through redisstore or not. The bench
// re-executes itself as each process (-fleet-worker).

// fleetRow is one configuration of the fleet bench.
type fleetRow struct {
	key   string
	title string
	procs int
	store bool
	// join is how long after the previous process each process starts.
	join time.Duration
	// kill, when set, kills Redis that long into the run and restarts it
	// empty restartAfter later.
	kill, restartAfter time.Duration
	// nginx puts the fleet behind a real limiter instead of throttletest's
	// bucket: nginx's limit_req at the same rate and burst, keyed by the
	// client's address, which every process shares on loopback, answering
	// 429 with the same Retry-After: 3.
	nginx bool
	// haproxy puts the fleet behind HAProxy's stick-table sliding window
	// at the same rate, keyed by the client's address, answering 429 with
	// the same Retry-After: 3; refused requests count in its window.
	haproxy bool
	// skew sets process k's clock k·skew ahead of the others' (the
	// handler's and its store's alike), alternately behind: processes
	// whose clocks disagree by seconds, as hosts without NTP do.
	skew time.Duration
	// caps runs the workload against the concurrency scenario's server
	// (ten mailboxes serving 4 requests at once), each process capping
	// them with graph.MailboxConcurrency.
	caps bool
	// announce has the bucket announce its budget on every answer in the
	// current draft's RateLimit-Policy and RateLimit fields, as scenario
	// (j) does.
	announce bool
}

// proxied reports whether a real limiter stands before the server, which
// then sees only what it let through.
func (r fleetRow) proxied() bool { return r.nginx || r.haproxy }

var fleetRows = []fleetRow{
	{key: "1", title: "1 process", procs: 1},
	{key: "1-store", title: "1 process, store", procs: 1, store: true},
	{key: "4", title: "4 processes, store", procs: 4, store: true},
	{key: "8", title: "8 processes, store", procs: 8, store: true},
	{key: "16", title: "16 processes, store", procs: 16, store: true},
	{key: "20", title: "20 processes, store", procs: 20, store: true},
	{key: "8-nostore", title: "8 processes, no store", procs: 8},
	{key: "8-join", title: "8 processes joining 1 s apart, store", procs: 8, store: true, join: time.Second},
	{key: "8-skew", title: "8 processes, store, clocks up to 6.5 s apart", procs: 8, store: true, skew: 500 * time.Millisecond},
	{key: "8-kill", title: "8 processes, store; Redis killed at 2 s, restarted empty at 5 s", procs: 8, store: true,
		kill: 2 * time.Second, restartAfter: 3 * time.Second},
	{key: "1-nginx", title: "1 process, behind nginx", procs: 1, nginx: true},
	{key: "8-nginx", title: "8 processes, store, behind nginx", procs: 8, store: true, nginx: true},
	{key: "20-nginx", title: "20 processes, store, behind nginx", procs: 20, store: true, nginx: true},
	{key: "8-nginx-nostore", title: "8 processes, no store, behind nginx", procs: 8, nginx: true},
	{key: "1-haproxy", title: "1 process, behind HAProxy", procs: 1, haproxy: true},
	{key: "8-haproxy", title: "8 processes, store, behind HAProxy", procs: 8, store: true, haproxy: true},
	{key: "8-haproxy-nostore", title: "8 processes, no store, behind HAProxy", procs: 8, haproxy: true},
	{key: "1-caps", title: "1 process, 4 at once per mailbox, capped", procs: 1, caps: true},
	{key: "8-caps", title: "8 processes, store, 4 at once per mailbox, capped", procs: 8, store: true, caps: true},
	{key: "8-caps-nostore", title: "8 processes, no store, 4 at once per mailbox, capped", procs: 8, caps: true},
	{key: "1-announce", title: "1 process, the bucket announcing RateLimit", procs: 1, announce: true},
	{key: "1-announce-store", title: "1 process, store, the bucket announcing RateLimit", procs: 1, store: true, announce: true},
	{key: "8-announce", title: "8 processes, store, the bucket announcing RateLimit", procs: 8, store: true, announce: true},
	{key: "8-announce-nostore", title: "8 processes, no store, the bucket announcing RateLimit", procs: 8, announce: true},
}

// fleetResult is what one row's fleet did.
type fleetResult struct {
	row                        fleetRow
	n                          int
	succeeded, failed, errored int
	attempts, throttled, early int
	leaked, goroutines         int64
	wall, limit                time.Duration
	firstErr                   string
}

func (r fleetResult) overLimit() float64 { return r.wall.Seconds() / r.limit.Seconds() }
func (r fleetResult) attemptsPerRequest() float64 {
	return float64(r.attempts) / float64(r.n)
}

// workerReport is what a worker process prints when it is done.
type workerReport struct {
	Succeeded, Failed, Errored int
	// Attempts, Refused and Early are counted in the process's transport,
	// below its retry handler: behind nginx, the bench's server sees only
	// what the limiter let through.
	Attempts, Refused, Early int
	Leaked, Goroutines       int64
	FirstErr                 string
}

// runFleet runs the rows named in list (comma-separated keys, or "all")
// and writes their table to w.
func runFleet(w io.Writer, list string, p params) ([]fleetResult, error) {
	rows, err := pick(list, fleetRows, func(r fleetRow) string { return r.key })
	if err != nil {
		return nil, fmt.Errorf("-fleet: %w", err)
	}
	return runFleetRows(w, rows, p)
}

// runFleetRows runs rows and writes their table to w.
func runFleetRows(w io.Writer, rows []fleetRow, p params) ([]fleetResult, error) {
	needRedis := false
	for _, r := range rows {
		needRedis = needRedis || r.store
	}
	var rs *redisserver.Server
	if needRedis {
		dir, err := os.MkdirTemp("", "bench-fleet-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if rs, err = redisserver.Start(dir); err != nil {
			return nil, err
		}
		defer rs.Kill()
	}
	var results []fleetResult
	for i, row := range rows {
		progress.Printf("fleet: %s ...", row.title)
		r, err := runFleetRow(row, p, rs, fmt.Sprintf("bench-%d-%d", os.Getpid(), i))
		if err != nil {
			return results, fmt.Errorf("fleet row %s: %w", row.key, err)
		}
		progress.Printf("fleet: %s: ok=%d failed=%d errors=%d attempts/req=%.3f 429s=%d wall=%s (%.2fx)",
			row.title, r.succeeded, r.failed, r.errored, r.attemptsPerRequest(), r.throttled, secs(r.wall), r.overLimit())
		results = append(results, r)
	}
	writeFleetTable(w, results, p)
	return results, nil
}

// runFleetRow starts row.procs worker processes against a fresh throttling
// server, lets them go (row.join apart), and sums what they did.
func runFleetRow(row fleetRow, p params, rs *redisserver.Server, prefix string) (fleetResult, error) {
	res := fleetResult{row: row, n: p.n, limit: perSecond(p.n, p.rate)}
	cfg := fleetConfig(p)
	switch {
	case row.nginx:
		cfg = throttletest.Config{}
		res.limit = limitReqLimit(p)
	case row.haproxy:
		cfg = throttletest.Config{}
		res.limit = realproxy.StickTableFloor(p.n, int(p.rate), time.Second)
	case row.caps:
		cfg = concurrencyConfig()
		res.limit = concurrencyLimit(p.n)
	case row.announce:
		cfg.Rules[0].Announce = orPanic(throttletest.CurrentDraft("default"))
	}
	srv := throttletest.NewServer(cfg)
	defer srv.Close()
	url := srv.URL
	if row.proxied() {
		var px *realproxy.Proxy
		var err error
		if row.nginx {
			px, err = nginxProxy(http.StatusTooManyRequests, "3")(p, srv.URL)
		} else {
			px, err = realproxy.StartHAProxy(realproxy.HAProxy{Origin: srv.URL, Limit: int(p.rate), RetryAfter: "3"})
		}
		if err != nil {
			return res, err
		}
		defer px.Close()
		url = px.URL
	}
	if rs != nil && row.store {
		if err := rs.Restart(); err != nil { // empty, whatever the last row left
			return res, err
		}
	}
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var procs []proc
	defer func() {
		for _, pr := range procs {
			_ = pr.cmd.Process.Kill()
			_ = pr.cmd.Wait()
		}
	}()
	for k := range row.procs {
		from, to := k*p.n/row.procs, (k+1)*p.n/row.procs
		c := (k+1)*p.c/row.procs - k*p.c/row.procs
		args := []string{"-fleet-worker", "-url", url, "-from", fmt.Sprint(from), "-n", fmt.Sprint(to - from),
			"-c", fmt.Sprint(c), "-timeout", p.reqTimeout.String()}
		if row.store {
			args = append(args, "-redis", rs.Addr(), "-prefix", prefix)
		}
		if row.caps {
			args = append(args, "-caps")
		}
		if row.skew != 0 {
			// 0, +0.5 s, -1 s, +1.5 s, ...: neighbours disagree most.
			off := time.Duration(k) * row.skew
			if k%2 == 0 {
				off = -off
			}
			args = append(args, "-skew", off.String())
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, fmt.Errorf("start worker %d: %w", k, err)
		}
		pr := proc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
		procs = append(procs, pr)
		// A worker says ready once its handler (and store) is built, so
		// that process start-up is not counted as wall time.
		if line, err := pr.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
			return res, fmt.Errorf("worker %d did not get ready: %q %v", k, line, err)
		}
	}
	start := time.Now()
	if p.timeline {
		defer timeline(srv, p.n, start)()
		if row.store {
			defer scheduleTimeline(rs.Addr(), prefix, start)()
		}
	}
	var wg sync.WaitGroup
	reports := make([]workerReport, len(procs))
	errs := make([]error, len(procs))
	var last atomic.Int64
	for k, pr := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(time.Duration(k) * row.join)))
			if _, err := io.WriteString(pr.stdin, "go\n"); err != nil {
				errs[k] = err
				return
			}
			line, err := pr.out.ReadString('\n')
			end := time.Since(start)
			for {
				l := last.Load()
				if int64(end) <= l || last.CompareAndSwap(l, int64(end)) {
					break
				}
			}
			if err != nil {
				errs[k] = fmt.Errorf("worker %d: %w", k, err)
				return
			}
			errs[k] = json.Unmarshal([]byte(line), &reports[k])
		}()
	}
	if row.kill > 0 && rs != nil {
		time.Sleep(time.Until(start.Add(row.kill)))
		rs.Kill()
		progress.Printf("fleet: %s: Redis killed", row.title)
		time.Sleep(row.restartAfter)
		if err := rs.Restart(); err != nil {
			return res, err
		}
		progress.Printf("fleet: %s: Redis restarted empty", row.title)
	}
	wg.Wait()
	res.wall = time.Duration(last.Load())
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for _, r := range reports {
		res.succeeded += r.Succeeded
		res.failed += r.Failed
		res.errored += r.Errored
		res.leaked += r.Leaked
		res.goroutines += r.Goroutines
		if row.proxied() {
			res.attempts += r.Attempts
			res.throttled += r.Refused
			res.early += r.Early
		}
		if res.firstErr == "" {
			res.firstErr = r.FirstErr
		}
	}
	if !row.proxied() {
		st := srv.Stats()
		res.attempts, res.throttled, res.early = st.Attempts, st.Throttled, st.Early
	}
	return res, nil
}

// timeline prints, once the row is done, how many requests srv let through
// and how many it throttled in each quarter second from start, until n
// succeeded: where a slow row lost its time. Behind nginx srv sees only
// what nginx let through, so the 429s read 0. Call what it returns when
// the row is done.
func timeline(srv *throttletest.Server, n int, start time.Time) (done func()) {
	var line strings.Builder
	prev := srv.Stats()
	return poll(250*time.Millisecond, func() bool {
		st := srv.Stats()
		fmt.Fprintf(&line, " %d/%d", st.OK-prev.OK, st.Throttled-prev.Throttled)
		prev = st
		return st.OK < n
	}, func() {
		progress.Printf("timeline from %s, 2xx/429 per 250 ms:%s", start.Format(time.TimeOnly), line.String())
	})
}

// scheduleTimeline prints, once the row is done, each change of the rate
// of the fleet's schedules in Redis at addr under prefix, polled every
// 20 ms from start: what the fleet learned, and when. Call what it
// returns when the row is done.
func scheduleTimeline(addr, prefix string, start time.Time) (done func()) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	var line strings.Builder
	last := map[string]string{}
	return poll(20*time.Millisecond, func() bool {
		iter := rdb.Scan(ctx, 0, "{"+prefix+"}:gcra:*", 100).Iterator()
		for iter.Next(ctx) {
			h, err := rdb.HMGet(ctx, iter.Val(), "rate", "since", "hold").Result()
			if err != nil || h[0] == nil {
				continue
			}
			rate, since, hold := fmt.Sprint(h[0]), fmt.Sprint(h[1]), fmt.Sprint(h[2])
			if last[iter.Val()] == rate+since {
				continue
			}
			last[iter.Val()] = rate + since
			holdUS, _ := strconv.ParseInt(hold, 10, 64)
			fmt.Fprintf(&line, " %.2fs:%s/s(hold %s)", time.Since(start).Seconds(), rate, time.Duration(holdUS)*time.Microsecond)
		}
		return true
	}, func() {
		_ = rdb.Close()
		progress.Printf("the fleet's schedule from %s, its rate at each change:%s", start.Format(time.TimeOnly), line.String())
	})
}

// poll calls sample every interval, on a goroutine of its own, until
// sample returns false or done is called; done then waits for that
// goroutine and calls report.
func poll(every time.Duration, sample func() bool, report func()) (done func()) {
	tick := time.NewTicker(every)
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if !sample() {
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-ended
		tick.Stop()
		report()
	}
}

// fleetConfig is scenario retry-after-3's server.
func fleetConfig(p params) throttletest.Config {
	return throttletest.Config{Rules: []throttletest.Rule{{
		Name: "bucket", Match: everything,
		Limiter:    throttletest.BucketLimiter(throttletest.Bucket{Rate: p.rate, Burst: p.burst}),
		RetryAfter: orPanic(throttletest.FixedRetryAfter(3)),
	}}}
}

// fleetWorker is one process of the fleet: it builds its handler, says
// ready, waits for "go" on stdin, sends requests [from, from+n) from c
// workers and prints a workerReport.
func fleetWorker(args []string) error {
	fs := flag.NewFlagSet("fleet-worker", flag.ContinueOnError)
	url := fs.String("url", "", "the throttling server")
	from := fs.Int("from", 0, "first request index")
	n := fs.Int("n", 0, "requests")
	c := fs.Int("c", 1, "workers")
	addr := fs.String("redis", "", "Redis address; empty: no store")
	prefix := fs.String("prefix", redisstore.DefaultPrefix, "the store's key prefix")
	timeout := fs.Duration("timeout", time.Minute, "cap on one request")
	caps := fs.Bool("caps", false, "send to mailboxes, capped by graph.MailboxConcurrency")
	skew := fs.Duration("skew", 0, "how far this process's clock is off, for its handler and its store")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// go-redis logs each connection a killed Redis breaks.
	redis.SetLogger(quietRedis{})
	// Counted before the store starts, and again once it is closed: what
	// the handler and the store leave behind after the user's Close.
	before := runtime.NumGoroutine()
	base := newBaseTransport(*c)
	counting := &countingTransport{base: base}
	var (
		opts  options.RetryHandlerOptions
		rdb   *redis.Client
		store *redisstore.Store
	)
	if *addr != "" {
		rdb = redis.NewClient(&redis.Options{Addr: *addr})
		var err error
		sopts := []redisstore.Option{redisstore.WithPrefix(*prefix)}
		if *skew != 0 {
			sopts = append(sopts, redisstore.WithClock(func() time.Time { return time.Now().Add(*skew) }))
		}
		if store, err = redisstore.New(rdb, sopts...); err != nil {
			return err
		}
		opts.Queue.Store = store
	}
	if *skew != 0 {
		opts.Clock = skewedClock{options.SystemClock(), *skew}
	}
	target := func(i int) (string, bool) { return item(*url, http.MethodGet, "users", i), true }
	if *caps {
		opts.Queue.Concurrency = graph.MailboxConcurrency
		target = func(i int) (string, bool) { return concurrencyTarget(*url, http.MethodGet, i), true }
	}
	hc, err := ours(counting, opts)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	ctx := context.Background()
	var rep workerReport
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= *n {
					return
				}
				o := send(ctx, hc, target, http.MethodGet, *from+i, start, *timeout)
				mu.Lock()
				switch {
				case o.err != nil:
					rep.Errored++
					if rep.FirstErr == "" {
						rep.FirstErr = o.err.Error()
					}
				case o.status >= 200 && o.status < 300:
					rep.Succeeded++
				default:
					rep.Failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	base.CloseIdleConnections()
	rep.Leaked = counting.leaked()
	for _, c := range counting.counts() {
		rep.Attempts += c.attempts
		rep.Refused += c.refused
		rep.Early += c.early
	}
	if store != nil {
		_ = store.Close()
		_ = rdb.Close()
	}
	rep.Goroutines = int64(max(settle(before)-before, 0))
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// skewedClock is a system clock whose time is off by skew; its timers,
// which count durations, are the system's.
type skewedClock struct {
	options.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return c.Clock.Now().Add(c.skew) }

// quietRedis discards go-redis's log.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...interface{}) {}

// writeFleetTable writes the fleet rows as one markdown table, each row
// against one process alone behind the same limiter in the same run.
func writeFleetTable(w io.Writer, rs []fleetResult, p params) {
	fmt.Fprintf(w, "\n### Fleet: %d GETs from %d workers shared by the processes, one token bucket %g/s burst %d, `Retry-After: 3`\n\n",
		p.n, p.c, p.rate, p.burst)
	// Only the servers the table's rows ran against are described.
	var nginx, haproxy, capped, announced bool
	for _, r := range rs {
		nginx, haproxy, capped = nginx || r.row.nginx, haproxy || r.row.haproxy, capped || r.row.caps
		announced = announced || r.row.announce
	}
	fmt.Fprintf(w, "Physical limit: %s. Each process has its own `middleware.NewRetryHandler` (default options; with the store, `Queue: options.QueueOptions{Store: store}` on `redisstore.New`).",
		secs(perSecond(p.n, p.rate)))
	if nginx {
		fmt.Fprintf(w, " The rows behind nginx put Debian's nginx (`limit_req` at the same rate and burst, `nodelay`, keyed by the client's address, which every process shares on loopback, answering 429 with `Retry-After: 3`) in front of a server that throttles nothing; their attempts and 429s are counted in each process's transport; physical limit %s, since limit_req admits burst + 1 at once.",
			secs(limitReqLimit(p)))
	}
	if haproxy {
		fmt.Fprintf(w, " The rows behind HAProxy do the same with Debian's HAProxy (a stick-table sliding window of the same rate per second, refused requests counted, 429 with `Retry-After: 3`; physical limit %s).",
			secs(realproxy.StickTableFloor(p.n, int(p.rate), time.Second)))
	}
	if capped {
		fmt.Fprintf(w, " The capped rows send the same GETs to scenario (n)'s server instead (ten mailboxes, each serving 4 requests at once in %s, a fifth answered 429 with `Retry-After: 1`; physical limit %s), each process with `Queue.Concurrency: graph.MailboxConcurrency`.",
			concurrencyServe, secs(concurrencyLimit(p.n)))
	}
	if announced {
		fmt.Fprint(w, " In the announcing rows the bucket also sends `RateLimit-Policy: \"default\";q=<burst>;w=<burst/rate>` and `RateLimit: \"default\";r=<tokens>;t=<until full>` on every answer, as scenario (j) does.")
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "| fleet | wall over the physical limit | vs 1 process | attempts/req | vs 1 process | 429s | lost (failed + errors) | leaked bodies | leaked goroutines |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	// Each row is set against one process alone on the same server.
	type server struct{ nginx, haproxy, caps, announce bool }
	alone := map[server]*fleetResult{}
	for i := range rs {
		if r := &rs[i]; r.row.procs == 1 && !r.row.store {
			alone[server{r.row.nginx, r.row.haproxy, r.row.caps, r.row.announce}] = r
		}
	}
	for _, r := range rs {
		vsWall, vsAtt := "", ""
		if one := alone[server{r.row.nginx, r.row.haproxy, r.row.caps, r.row.announce}]; one != nil {
			vsWall = fmt.Sprintf("%.2fx", r.wall.Seconds()/one.wall.Seconds())
			vsAtt = fmt.Sprintf("%+.3f", r.attemptsPerRequest()-one.attemptsPerRequest())
		}
		fmt.Fprintf(w, "| %s | %.2fx | %s | %.3f | %s | %d | %d | %d | %d |\n", r.row.title, r.overLimit(), vsWall,
			r.attemptsPerRequest(), vsAtt, r.throttled, r.failed+r.errored, r.leaked, r.goroutines)
	}
}

// fleetMain runs the fleet bench and, with out, writes RESULTS-fleet.md.
func fleetMain(list, out string, p params, args []string) error {
	if err := redisserver.Installed(); err != nil {
		return err
	}
	if list == "all" {
		list = keys(fleetRows, func(r fleetRow) string { return r.key })
	}
	var buf strings.Builder
	_, err := runFleet(io.MultiWriter(os.Stdout, &buf), list, p)
	if err != nil || out == "" {
		return err
	}
	doc := "# The fleet bench\n\nOS processes, each with its own retry handler, share one throttled budget; " +
		"with the store they share one redis-server through module redisstore (docs/fleet.md).\n\n" +
		"Command: `cd bench && go run . " + strings.Join(args, " ") + "`, " + fmt.Sprint(runtime.NumCPU()) + " CPUs.\n" + buf.String()
	return os.WriteFile(filepath.Join(out, "RESULTS-fleet.md"), []byte(doc), 0o644)
}

// fleetDemo shows procs processes sharing one budget, without and then
// with the store (make demo ARGS=-fleet=4).
func fleetDemo(procs int, p params) error {
	if err := redisserver.Installed(); err != nil {
		return fmt.Errorf("the fleet demo starts a redis-server of its own: %w", err)
	}
	if procs < 1 || procs > p.c {
		return fmt.Errorf("-fleet-demo %d: want 1 to %d processes", procs, p.c)
	}
	fmt.Printf("%d OS processes, each with its own retry handler and %d of the %d workers, send %d GETs to one token bucket "+
		"(%g/s, burst %d, 429 with Retry-After: 3): first each alone, then sharing a redis-server through redisstore.\n",
		procs, p.c/procs, p.c, p.n, p.rate, p.burst)
	_, err := runFleetRows(os.Stdout, []fleetRow{
		{key: "1", title: "1 process", procs: 1},
		{key: "alone", title: fmt.Sprintf("%d processes, no store", procs), procs: procs},
		{key: "store", title: fmt.Sprintf("%d processes, store", procs), procs: procs, store: true},
	}, p)
	return err
}
