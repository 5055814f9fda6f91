// Command bench drives one workload through several retrying HTTP clients
// against a loopback server that throttles like Microsoft Graph, and
// reports how close each gets to the physical limit: attempts, 429s, wall
// time, latency, leaked bodies and goroutines, corrupted bodies and retries
// sent before Retry-After.
//
// It prints markdown tables on stdout; with -out it also writes
// RESULTS.md and throughput.png into that directory. Clients run one after
// another, never in parallel, so that each has the machine to itself.
//
//	go run . -out .                                  # the full run (make bench)
//	go run . -n 200 -c 20 -scenarios a -methods GET  # a quick look
//	go run . -scenarios nginx-ra -clients ours -shapes mailbox -spreads 50 -methods GET
//
// The scenarios behind real limiters (nginx-ra, nginx-429, nginx-503,
// nginx-zones, haproxy) need nginx and haproxy installed (`make
// install-deps`); they and the bench's own buckets (bucket,
// bucket-announce), the "real" set, run every workload of -workloads, or
// of -shapes and -spreads, for the clients of -full-clients, and
// -peer-workload alone for the others. `make bench` runs the "plain" set
// and then a share of the "real" one that fits the hour (see the Makefile).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/realproxy"
)

func main() {
	// net/http logs through the standard logger each time a RoundTripper
	// returns a response together with an error (failsafe-go does when its
	// retries run out), once per request; the body it drops is counted as
	// leaked instead of flooding the progress lines.
	log.SetOutput(io.Discard)
	if len(os.Args) > 1 && os.Args[1] == "-fleet-worker" {
		// One process of the fleet bench, started by the bench itself.
		if err := fleetWorker(os.Args[2:]); err != nil {
			progress.Fatal(err)
		}
		return
	}
	if err := mainErr(os.Args[1:]); err != nil {
		progress.Fatal(err)
	}
}

// progress reports on stderr what the run is doing.
var progress = log.New(os.Stderr, "bench: ", 0)

func mainErr(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var p params
	fs.IntVar(&p.n, "n", 2000, "requests per run")
	fs.IntVar(&p.c, "c", 200, "concurrent workers")
	fs.Float64Var(&p.rate, "rate", 400, "token bucket rate, requests per second")
	fs.IntVar(&p.burst, "burst", 40, "token bucket burst")
	fs.DurationVar(&p.outage, "outage", 2*time.Second, "length of the 503 outage in scenario b")
	fs.DurationVar(&p.reqTimeout, "timeout", 60*time.Second, "cap on one request, retries included")
	fs.DurationVar(&p.runTimeout, "run-timeout", 3*time.Minute, "cap on one client's run; requests still going then count as errors")
	fs.DurationVar(&p.heldAfter, "held", 100*time.Millisecond, "a request to the API that is not throttled counts as held when its first attempt arrives later than this after it was issued")
	fs.BoolVar(&p.timeline, "timeline", false, "with -fleet, print each row's 2xx and 429 answers per quarter second and, with the store, each change of the fleet schedule's rate: where a slow row lost its time")
	scenarioList := fs.String("scenarios", keys(scenarios, func(s scenario) string { return s.key }),
		"comma-separated scenarios; \"plain\" names those without workloads, \"real\" those with")
	clientList := fs.String("clients", keys(clients, func(c client) string { return c.key }), "comma-separated clients")
	methodList := fs.String("methods", "GET,POST", "comma-separated methods: GET, POST")
	shapeList := fs.String("shapes", keys(shapes, func(s shape) string { return s.key }),
		"comma-separated workload shapes of the scenarios that take workloads ("+keys(realScenarios, func(s scenario) string { return s.key })+")")
	spreadList := fs.String("spreads", "1,50,n", "comma-separated spreads of a workload's ids: a number of distinct ids, or n for one per request")
	workloadList := fs.String("workloads", "", "comma-separated workloads such as user/n,mailbox/50,collection, instead of every combination of -shapes and -spreads")
	fullList := fs.String("full-clients", "ours,kiota", "comma-separated clients that run every workload; the others run only -peer-workload")
	peerWorkload := fs.String("peer-workload", "user/n", "the one workload the clients not in -full-clients run")
	verify := fs.Bool("verify", false, "check throttletest's models of nginx limit_req and HAProxy's stick table against the real ones, and exit")
	fleet := fs.String("fleet", "", "comma-separated rows of the fleet bench (OS processes sharing one Redis), or all: "+
		keys(fleetRows, func(r fleetRow) string { return r.key })+"; runs them instead of the scenarios, with -n 4000 unless -n is given")
	demo := fs.Int("fleet-demo", 0, "show this many processes sharing one budget without and with the store (make demo ARGS=-fleet=4), and exit")
	out := fs.String("out", "", "directory to write RESULTS.md and throughput.png into; empty: stdout only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := p.validate(); err != nil {
		return err
	}
	if *demo > 0 {
		return fleetDemo(*demo, p)
	}
	if *fleet != "" {
		nSet := false
		fs.Visit(func(f *flag.Flag) { nSet = nSet || f.Name == "n" })
		if !nSet {
			p.n = 4000
		}
		return fleetMain(*fleet, *out, p, args)
	}
	if *verify {
		if err := realproxy.Installed(); err != nil {
			return fmt.Errorf("-verify needs nginx and haproxy (run `make install-deps`): %w", err)
		}
		return verifyModels(os.Stdout)
	}
	scs, err := pick(expandScenarioSets(*scenarioList), scenarios, func(s scenario) string { return s.key })
	if err != nil {
		return fmt.Errorf("-scenarios: %w", err)
	}
	cls, err := pick(*clientList, clients, func(c client) string { return c.key })
	if err != nil {
		return fmt.Errorf("-clients: %w", err)
	}
	methods, err := pick(strings.ToUpper(*methodList), []string{"GET", "POST"}, func(m string) string { return m })
	if err != nil {
		return fmt.Errorf("-methods: %w", err)
	}
	shs, err := pick(*shapeList, shapes, func(s shape) string { return s.key })
	if err != nil {
		return fmt.Errorf("-shapes: %w", err)
	}
	var sps []spread
	for _, v := range strings.Split(*spreadList, ",") {
		sp, err := parseSpread(v)
		if err != nil {
			return fmt.Errorf("-spreads: %w", err)
		}
		sps = append(sps, sp)
	}
	var listed []workload
	for _, v := range strings.Split(*workloadList, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		w, err := parseWorkload(v)
		if err != nil {
			return fmt.Errorf("-workloads: %w", err)
		}
		listed = append(listed, w)
	}
	full, err := pick(*fullList, clients, func(c client) string { return c.key })
	if err != nil && strings.TrimSpace(*fullList) != "" {
		return fmt.Errorf("-full-clients: %w", err)
	}
	peer, err := parseWorkload(*peerWorkload)
	if err != nil {
		return fmt.Errorf("-peer-workload: %w", err)
	}
	if err := checkRealLimiters(scs, p); err != nil {
		return err
	}
	for _, s := range scs {
		if s.key == "c-hosts" {
			if err := canListen("127.0.0.2"); err != nil {
				return fmt.Errorf("scenario c-hosts needs a second loopback address: %w", err)
			}
		}
	}

	loadBefore := loadAverage()
	var groups []group
	for _, sc := range scs {
		wls := []workload{{}}
		if sc.workloads {
			wls = nil
			all := listed
			if all == nil {
				all = workloads(shs, sps)
			}
			for _, w := range all {
				if sc.takes(w.shape) {
					wls = append(wls, w)
				}
			}
		}
		for _, w := range wls {
			for _, m := range methods {
				g := group{scenario: sc, workload: w, method: m}
				for _, cl := range cls {
					if !cl.runs(sc) || sc.workloads && !runsWorkload(cl, full, w, peer) {
						continue
					}
					label := sc.key + " " + m
					if sc.workloads {
						label += " " + w.key()
					}
					progress.Printf("%s: %s ...", label, cl.name)
					r, err := run(cl, sc, w, m, p)
					if err != nil {
						return fmt.Errorf("scenario %s, %s, client %s: %w", label, m, cl.key, err)
					}
					progress.Printf("%s: %s: ok=%d failed=%d errors=%d attempts/req=%.2f wall=%s (%.2fx)",
						label, cl.name, r.succeeded, r.failed, r.errored, r.attemptsPerRequest(), secs(r.wall), r.overLimit())
					g.results = append(g.results, r)
				}
				if len(g.results) == 0 {
					continue
				}
				writeTable(os.Stdout, g, p)
				groups = append(groups, g)
			}
		}
	}
	if *out == "" {
		return nil
	}
	command := "go run . " + strings.Join(args, " ")
	load := ""
	if loadBefore != "" {
		load = fmt.Sprintf("load average %s before the run and %s after it", loadBefore, loadAverage())
	}
	// The scenarios with workloads go to a file of their own, as one
	// summary table: a hundred full tables would bury them.
	var plain, real []group
	for _, g := range groups {
		if g.scenario.workloads {
			real = append(real, g)
		} else {
			plain = append(plain, g)
		}
	}
	if len(real) > 0 {
		if err := writeRealResults(filepath.Join(*out, "RESULTS-real.md"), strings.TrimSpace(command), load, p, real); err != nil {
			return err
		}
	}
	if len(plain) == 0 {
		return nil
	}
	const chart = "throughput.png"
	if err := writeChart(filepath.Join(*out, chart), p, plain, methods); err != nil {
		return err
	}
	return writeResults(filepath.Join(*out, "RESULTS.md"), chart, strings.TrimSpace(command), load, p, plain)
}

// expandScenarioSets replaces "plain" and "real" in a -scenarios list by
// the keys of the scenarios without and with workloads.
func expandScenarioSets(list string) string {
	sets := map[string]func(scenario) bool{
		"plain": func(s scenario) bool { return !s.workloads },
		"real":  func(s scenario) bool { return s.workloads },
	}
	var out []string
	for _, k := range strings.Split(list, ",") {
		in, ok := sets[strings.TrimSpace(k)]
		if !ok {
			out = append(out, k)
			continue
		}
		for _, s := range scenarios {
			if in(s) {
				out = append(out, s.key)
			}
		}
	}
	return strings.Join(out, ",")
}

// runsWorkload reports whether client cl runs workload w: every client in
// full does, the others only peer.
func runsWorkload(cl client, full []client, w, peer workload) bool {
	for _, f := range full {
		if f.key == cl.key {
			return true
		}
	}
	return w.key() == peer.key()
}

// loadAverage returns the machine's 1-minute load average where the
// system tells it, so that readers can judge how busy the machine was;
// "" elsewhere.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (p params) validate() error {
	switch {
	case p.n < 1:
		return fmt.Errorf("-n = %d must be at least 1", p.n)
	case p.c < 1:
		return fmt.Errorf("-c = %d must be at least 1", p.c)
	case !(p.rate > 0):
		return fmt.Errorf("-rate = %v must be positive", p.rate)
	case p.burst < 1:
		return fmt.Errorf("-burst = %d must be at least 1", p.burst)
	case p.outage <= 0:
		return fmt.Errorf("-outage = %v must be positive", p.outage)
	case p.reqTimeout <= 0:
		return fmt.Errorf("-timeout = %v must be positive", p.reqTimeout)
	case p.runTimeout <= 0:
		return fmt.Errorf("-run-timeout = %v must be positive", p.runTimeout)
	case p.heldAfter <= 0:
		return fmt.Errorf("-held = %v must be positive", p.heldAfter)
	}
	return nil
}

func keys[T any](all []T, key func(T) string) string {
	ks := make([]string, len(all))
	for i, v := range all {
		ks[i] = key(v)
	}
	return strings.Join(ks, ",")
}

// pick returns the entries of all named in the comma-separated list, in
// the order of all.
func pick[T any](list string, all []T, key func(T) string) ([]T, error) {
	want := map[string]bool{}
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k != "" {
			want[k] = true
		}
	}
	var out []T
	for _, v := range all {
		if want[key(v)] {
			out = append(out, v)
			delete(want, key(v))
		}
	}
	if len(want) > 0 {
		var unknown []string
		for k := range want {
			unknown = append(unknown, k)
		}
		slices.Sort(unknown)
		return nil, fmt.Errorf("unknown %q (known: %s)", unknown, keys(all, key))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none chosen (known: %s)", keys(all, key))
	}
	return out, nil
}

func canListen(host string) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	return l.Close()
}
