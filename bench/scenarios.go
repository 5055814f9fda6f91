package main

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/realproxy"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// params are the workload's knobs, from the command line.
type params struct {
	n, c       int
	rate       float64
	burst      int
	outage     time.Duration
	reqTimeout time.Duration
	runTimeout time.Duration
	heldAfter  time.Duration
	// timeline prints each fleet row's answers per quarter second.
	timeline bool
}

// scenario is one server setup and how the workload's requests map onto it.
type scenario struct {
	key   string // flag value
	title string
	about string // for RESULTS.md
	// config builds the server's configuration.
	config func(p params) throttletest.Config
	// target returns the URL of request i and whether it goes to the
	// throttled API.
	target func(srv *throttletest.Server, method string, i int) (url string, throttled bool)
	// limit is the physical limit: the least wall time any client can
	// finish the workload in, whatever it does.
	limit func(p params) time.Duration
	// split reports whether the workload goes to two APIs, of which only
	// one is throttled.
	split bool
	// batch reports that the workload's n requests are the items of JSON
	// batches, sent by runBatch rather than one by one; target is unused.
	batch bool
	// limitAbout says how the physical limit follows from the workload,
	// for the line above each table. nil: the throttled requests at the
	// rate and burst of the command line.
	limitAbout func(p params) string
	// apis, when set, names the budget request i draws from and that
	// budget's own physical limit for the workload, so that each is
	// reported against its own limit.
	apis func(p params) (api func(i int) string, limits map[string]time.Duration)

	// proxy, when set, starts a real limiter in front of the scenario's
	// server (config, nil for one that throttles nothing), and the
	// workload goes through it. Attempts, refusals and early retries are
	// then counted in the client's transport, below its retry logic,
	// since the server sees only what the limiter let through.
	proxy func(p params, origin string) (*realproxy.Proxy, error)
	// workloads reports that the scenario runs the workloads of -shapes
	// and -spreads instead of target: request i goes to route(w, p, i).
	workloads bool
	// route, for a workload scenario, is the path of request i; nil: the
	// workload's own path.
	route func(w workload, p params, i int) string
	// shapeKeys are the workload shapes that mean something to the
	// scenario; nil: all.
	shapeKeys []string
	// scale sizes the workload from the command line's; nil keeps -n and
	// -c. Every other function of the scenario gets the scaled params.
	scale func(p params) params
}

// sized returns the params the scenario runs with.
func (sc scenario) sized(p params) params {
	if sc.scale != nil {
		return sc.scale(p)
	}
	return p
}

// path is the path of workload request i.
func (sc scenario) path(w workload, p params, i int) string {
	if sc.route != nil {
		return sc.route(w, p, i)
	}
	return w.path(i, p.n)
}

// takes reports whether the scenario runs workloads of shape sh.
func (sc scenario) takes(sh shape) bool {
	return sc.shapeKeys == nil || slices.Contains(sc.shapeKeys, sh.key)
}

var scenarios = []scenario{
	{
		key:   "a",
		title: "(a) global token bucket",
		about: "One token bucket for every request (Graph-like: 429 with `Retry-After` in whole seconds, ceil of the time to the next token, at least 1 s). " +
			"GET `/users/{i}`, POST `/users`. Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Bucket: throttletest.Bucket{Rate: p.rate, Burst: p.burst}}
		},
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			return item(srv.URL, method, "users", i), true
		},
		limit: func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
	{
		key:   "b",
		title: "(b) 503 outage without Retry-After",
		about: "Every request in the first `-outage` after the server starts is answered 503 without `Retry-After`; no throttle after it. " +
			"Physical limit: the outage.",
		config: func(p params) throttletest.Config { return throttletest.Config{Outage: p.outage} },
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			return item(srv.URL, method, "users", i), true
		},
		limit: func(p params) time.Duration { return p.outage },
	},
	{
		key:   "c-paths",
		title: "(c) two APIs on one host, paths share no leading segment",
		about: "Even requests go to `/mail/messages…`, throttled by a bucket of their own (rate, burst); odd ones to `/files/items…` on the same host, not throttled. " +
			"Physical limit: (throttled requests) / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{PathBuckets: map[string]throttletest.Bucket{"mail": {Rate: p.rate, Burst: p.burst}}}
		},
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			if i%2 == 0 {
				return item(srv.URL, method, "mail/messages", i), true
			}
			return item(srv.URL, method, "files/items", i), false
		},
		limit: func(p params) time.Duration { return perSecond((p.n+1)/2, p.rate) },
		split: true,
	},
	{
		key:   "c-hosts",
		title: "(c) two APIs on different hosts, same paths",
		about: "Even requests go to 127.0.0.1, throttled by a bucket for that host (rate, burst); odd ones to the same paths on 127.0.0.2, not throttled. " +
			"Physical limit: (throttled requests) / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{
				Hosts:       []string{"127.0.0.1", "127.0.0.2"},
				HostBuckets: map[string]throttletest.Bucket{"127.0.0.1": {Rate: p.rate, Burst: p.burst}},
			}
		},
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			if i%2 == 0 {
				return item(srv.URLs[0], method, "users", i), true
			}
			return item(srv.URLs[1], method, "users", i), false
		},
		limit: func(p params) time.Duration { return perSecond((p.n+1)/2, p.rate) },
		split: true,
	},
	{
		key:   "batch",
		title: "(batch) JSON batches of 20, items throttled per mailbox",
		about: "The n requests are the items of n/20 JSON batches (`POST /v1.0/$batch`), sent by up to c workers. " +
			"Item i reads (GET) or creates (POST) a message in mailbox i mod 10; each mailbox has a token bucket of rate/10 holding one second of it (Outlook limits a mailbox over minutes; -burst is unused), " +
			"and the server answers each item as if it were sent alone: 429 with its own `Retry-After` inside a 200 batch, in an order of its own. " +
			"A request counts as ok when the batch the application got back answers it 2xx; attempts/req and 429s/req are per item; p50 and p99 are per batch. " +
			"Physical limit: n / rate less the second every bucket holds at start.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Rules: []throttletest.Rule{mailboxRule(p)}}
		},
		limit: func(p params) time.Duration { return max(perSecond(p.n, p.rate)-time.Second, time.Millisecond) },
		batch: true,
	},
	{
		key:   "d",
		title: "(d) three APIs on one host, each with its own bucket",
		about: "GET `/v1.0/{api}/{i}`, POST `/v1.0/{api}`, with `users` at 400/s (burst 40), `mail` at 40/s (burst 4) and `files` at 100/s (burst 10), " +
			"requests spread in proportion to the rates. Each API is reported against its own physical limit, (its requests) / (its rate).",
		config: func(p params) throttletest.Config {
			var rules []throttletest.Rule
			for _, a := range threeAPIs {
				rules = append(rules, throttletest.Rule{
					Name:    a.name,
					Match:   func(r *http.Request) (string, bool) { return "", apiBelowVersion(r.URL.Path) == a.name },
					Limiter: throttletest.BucketLimiter(throttletest.Bucket{Rate: a.rate, Burst: int(a.rate / 10)}),
				})
			}
			return throttletest.Config{Rules: rules}
		},
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			return underVersion(srv.URL, method, threeAPIOf(i), i), true
		},
		limit: func(p params) time.Duration { return slices.Max(slices.Collect(maps.Values(threeAPILimits(p)))) },
		apis: func(p params) (func(int) string, map[string]time.Duration) {
			return threeAPIOf, threeAPILimits(p)
		},
	},
	{
		key:   "e",
		title: "(e) a Graph mix on one host",
		about: "Graph-shaped budgets (`throttletest.GraphBudgets`): Identity `/v1.0/users/{i}` at 400/s (burst 40), ten mailboxes `/v1.0/users/mbx{m}/messages` at 20/s each (burst 2), " +
			"`/v1.0/sites/{i}` at 100/s (burst 10), and 5 % of requests to `/v1.0/drives/d1/items/{j}`, unthrottled, where one item in 20 is locked for 2 s (429 on its own). " +
			"GET and POST use the same paths. Each budget is reported against its own physical limit. A locked item's lock starts with its first request, " +
			"which the workers reach only once all but c of the requests before it are done, so the drive's limit is the least time the budgets take to finish that many, plus the 2 s lock; " +
			"the whole workload's is the larger of that and its slowest budget's.",
		config: func(p params) throttletest.Config {
			b := func(rate float64) throttletest.Bucket { return throttletest.Bucket{Rate: rate, Burst: int(rate / 10)} }
			return throttletest.Config{Rules: throttletest.GraphBudgets{
				Identity: b(400), Mailbox: b(20), Sites: b(100),
				Locked:    func(_, item string) bool { n, _ := strconv.Atoi(item); return graphItemLocked(n) },
				LockedFor: graphLocked,
			}.Rules()}
		},
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			_, path := graphMix(i)
			return srv.URL + "/v1.0/" + path, true
		},
		limit: func(p params) time.Duration { return max(graphWhole(p), graphLockFloor(p)) },
		limitAbout: func(p params) string {
			return fmt.Sprintf(" (the slowest budget %.2f s; the last locked item reached at %.2f s at the earliest, answering 2 s later)",
				graphWhole(p).Seconds(), (graphLockFloor(p) - graphLocked).Seconds())
		},
		apis: func(p params) (func(int) string, map[string]time.Duration) {
			return graphAPIOf, graphLimits(p)
		},
	},
	{
		key:   "concurrency",
		title: "(n) ten mailboxes, 4 concurrent requests each",
		about: "Outlook's concurrency cap: request i reads (GET `/v1.0/users/mbx{i mod 10}/messages/{i}`) or creates (POST `/v1.0/users/mbx{i mod 10}/messages`) a message; " +
			"each mailbox serves 4 requests at once, each in 50 ms, and answers a fifth at once 429 with `Retry-After: 1`; no rate budget. " +
			"Physical limit: n / (10 × 4 / 50 ms).",
		config: func(params) throttletest.Config { return concurrencyConfig() },
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			return concurrencyTarget(srv.URL, method, i), true
		},
		limit: func(p params) time.Duration { return concurrencyLimit(p.n) },
		limitAbout: func(p params) string {
			return fmt.Sprintf("%d requests over %d mailboxes serving %d at once in %s each", p.n, concurrencyMailboxes, outlookConcurrency, concurrencyServe)
		},
	},
}

// The concurrency scenario's server: Outlook's cap per mailbox, and a
// serve time that makes the cap, not the network, the bound.
const (
	concurrencyMailboxes = 10
	outlookConcurrency   = 4
	concurrencyServe     = 50 * time.Millisecond
)

func concurrencyConfig() throttletest.Config {
	return throttletest.Config{
		Rules: []throttletest.Rule{{Name: "mailbox", Match: mailboxOf,
			Limiter: throttletest.Concurrent(outlookConcurrency)}},
		ServeTime: concurrencyServe,
	}
}

// concurrencyTarget is the URL of request i of the concurrency scenario.
func concurrencyTarget(base, method string, i int) string {
	return item(base+"/v1.0/users", method, fmt.Sprintf("mbx%d/messages", i%concurrencyMailboxes), i)
}

// concurrencyLimit is the least time the concurrency server serves n
// requests in: every mailbox's slots always busy.
func concurrencyLimit(n int) time.Duration {
	return perSecond(n, concurrencyMailboxes*outlookConcurrency/concurrencyServe.Seconds())
}

// mailboxOf is the mailbox of a /v1.0/users/{id}/messages request.
func mailboxOf(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1.0/users/")
	id, sub, _ := strings.Cut(rest, "/")
	return id, ok && strings.HasPrefix(sub, "messages")
}

// limiterScenarios are servers whose limiter is not a plain token bucket
// with Graph's Retry-After, or that announce their budget in headers.
var limiterScenarios = []scenario{
	{
		key:   "retry-after-3",
		title: "(f) Retry-After 3 s on a token bucket",
		about: "The token bucket of (a), but every 429 names `Retry-After: 3` however soon a token comes, as services with a constant Retry-After do. " +
			"Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Rules: []throttletest.Rule{{
				Name: "bucket", Match: everything,
				Limiter:    throttletest.BucketLimiter(throttletest.Bucket{Rate: p.rate, Burst: p.burst}),
				RetryAfter: orPanic(throttletest.FixedRetryAfter(3)),
			}}}
		},
		target: usersOnURL,
		limit:  func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
	{
		key:   "fixed-window",
		title: "(g) fixed window",
		about: "A quota of n/2 requests per 10 s window (1000 at the default n), the whole quota released the moment the next window opens; " +
			"the first window opens at the first request. Physical limit: the window floor, the start of the window the last request fits in.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Rules: []throttletest.Rule{{
				Name: "window", Match: everything,
				Limiter: orPanic(throttletest.FixedWindowLimiter(windowOf(p))),
			}}}
		},
		target: usersOnURL,
		limit:  func(p params) time.Duration { return windowFloor(p.n, windowOf(p)) },
		limitAbout: func(p params) string {
			return fmt.Sprintf(" (window floor: %d requests at %d per %v)", p.n, windowOf(p).Quota, windowOf(p).Per)
		},
	},
	{
		key:   "rate-change",
		title: "(h) rate halving at 1/3, restored at 2/3",
		about: "The token bucket of (a), whose rate halves a third of the physical limit after the first request and comes back at two thirds. " +
			"Physical limit T with n = burst + rate·T/3 + rate/2·T/3 + rate·T/3, so T = 6 (n − burst) / (5 rate).",
		config: func(p params) throttletest.Config {
			t := rateChangeLimit(p)
			return throttletest.Config{Rules: []throttletest.Rule{{
				Name: "bucket", Match: everything,
				Limiter: orPanic(throttletest.ScheduledBucketLimiter(throttletest.Bucket{Rate: p.rate, Burst: p.burst},
					throttletest.RateStep{After: t / 3, Rate: p.rate / 2}, throttletest.RateStep{After: 2 * t / 3, Rate: p.rate})),
			}}}
		},
		target: usersOnURL,
		limit:  rateChangeLimit,
		limitAbout: func(p params) string {
			return fmt.Sprintf(" (%d requests, %g/s then %g/s then %g/s, burst %d)", p.n, p.rate, p.rate/2, p.rate, p.burst)
		},
	},
	{
		key:   "headers-draft03",
		title: "(i) token bucket announcing draft-03 RateLimit headers",
		about: "The token bucket of (a), announcing `RateLimit-Limit` (the burst), `RateLimit-Remaining` and `RateLimit-Reset` (until full, in seconds with up to 3 decimals) " +
			"once 80 % of the burst is spent, as SharePoint does. Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Rules: []throttletest.Rule{{
				Name: "bucket", Match: everything,
				Limiter:  throttletest.BucketLimiter(throttletest.Bucket{Rate: p.rate, Burst: p.burst}),
				Announce: orPanic(throttletest.Draft03(0.8)),
			}}}
		},
		target: usersOnURL,
		limit:  func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
	{
		key:   "headers-current",
		title: "(j) token bucket announcing the current draft's RateLimit headers",
		about: "The token bucket of (a), announcing `RateLimit-Policy: \"default\";q=<burst>;w=<burst/rate>` and `RateLimit: \"default\";r=<tokens>;t=<until full>` on every answer. " +
			"Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Rules: []throttletest.Rule{{
				Name: "bucket", Match: everything,
				Limiter:  throttletest.BucketLimiter(throttletest.Bucket{Rate: p.rate, Burst: p.burst}),
				Announce: orPanic(throttletest.CurrentDraft("default")),
			}}}
		},
		target: usersOnURL,
		limit:  func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
}

func init() { scenarios = append(scenarios, limiterScenarios...) }

func everything(*http.Request) (string, bool) { return "", true }

func usersOnURL(srv *throttletest.Server, method string, i int) (string, bool) {
	return item(srv.URL, method, "users", i), true
}

// orPanic returns v, or panics with err: the scenarios' limiters are
// built from constants and validated params, so an error is a bug.
func orPanic[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// windowOf is the fixed window of scenario fixed-window: half the workload
// per 10 s, so that it takes two windows whatever n is.
func windowOf(p params) throttletest.Window {
	return throttletest.Window{Quota: max(1, p.n/2), Per: 10 * time.Second}
}

// windowFloor is the start of the window in which the last of n requests
// fits, when every window admits w.Quota: no client can finish earlier.
func windowFloor(n int, w throttletest.Window) time.Duration {
	return time.Duration((n+w.Quota-1)/w.Quota-1) * w.Per
}

// rateChangeLimit is the time a bucket of p.rate that runs at half the
// rate for the middle third of it takes to admit p.n requests.
func rateChangeLimit(p params) time.Duration {
	return time.Duration(6 * float64(max(p.n-p.burst, 1)) / (5 * p.rate) * float64(time.Second))
}

func threeAPIOf(i int) string {
	switch k := i % 54; {
	case k < 40:
		return "users"
	case k < 44:
		return "mail"
	}
	return "files"
}

func threeAPILimits(p params) map[string]time.Duration {
	rate := func(api string) float64 {
		for _, a := range threeAPIs {
			if a.name == api {
				return a.rate
			}
		}
		return 0
	}
	return apiLimits(p.n, threeAPIOf, rate, 0)
}

func graphAPIOf(i int) string { api, _ := graphMix(i); return api }

func graphRate(api string) float64 {
	if strings.HasPrefix(api, "mailbox") {
		return graphRates["mailbox"]
	}
	return graphRates[api]
}

// graphWhole is the least time the whole Graph mix can take: its slowest
// budget's limit.
func graphWhole(p params) time.Duration {
	return slices.Max(slices.Collect(maps.Values(apiLimits(p.n, graphAPIOf, graphRate, 0))))
}

// graphLocked is how long scenario (e)'s locked items stay locked.
const graphLocked = 2 * time.Second

func graphLimits(p params) map[string]time.Duration {
	// The drive has no budget: its last locked item bounds it.
	return apiLimits(p.n, graphAPIOf, graphRate, graphLockFloor(p))
}

// graphItemLocked reports whether scenario (e)'s drive locks its item n.
func graphItemLocked(n int) bool { return n%20 == 0 }

// graphLocksItem reports whether scenario (e) locks request i's item.
func graphLocksItem(i int) bool { return i%20 == 0 && graphItemLocked(i/20) }

// graphLockFloor is the earliest scenario (e)'s last locked item can
// answer. Its lock starts with its first request, and the bench's c
// workers take requests in order, so request L goes out only once L-c+1
// of the requests before it are done. The drive's own requests cost
// nothing; the others finish at best at their budgets' rates, all in
// parallel from the start. The least time in which they can finish
// that many, plus the lock, is the floor: no client can answer sooner.
func graphLockFloor(p params) time.Duration {
	last := -1
	for i := range p.n {
		if graphLocksItem(i) {
			last = i
		}
	}
	if last < 0 {
		return 0
	}
	before := map[string]int{}
	for i := range last {
		before[graphAPIOf(i)]++
	}
	need := float64(last - p.c + 1 - before["drive"])
	done := func(t time.Duration) float64 {
		var sum float64
		for api, count := range before {
			if r := graphRate(api); r > 0 {
				sum += min(float64(count), r*t.Seconds())
			}
		}
		return sum
	}
	// done grows with t: bisect to a microsecond, far below the bench's
	// resolution.
	lo, hi := time.Duration(0), graphWhole(p)
	for hi-lo > time.Microsecond {
		if mid := (lo + hi) / 2; done(mid) >= need {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi + graphLocked
}

// apiBelowVersion returns the first segment of path after /v1.0.
func apiBelowVersion(path string) string {
	seg, _, _ := strings.Cut(strings.TrimPrefix(path, "/v1.0/"), "/")
	return seg
}

// threeAPIs are the budgets of scenario (d): one host, three APIs with
// buckets of their own, each holding a tenth of a second of its rate.
var threeAPIs = []struct {
	name string
	rate float64
}{{"users", 400}, {"mail", 40}, {"files", 100}}

// graphMix is scenario (e)'s mix: of every 20 requests, one goes to a
// drive where one item in 20 is locked, and the others to Identity, ten
// mailboxes and SharePoint sites in proportion to their budgets.
func graphMix(i int) (api, path string) {
	if i%20 == 0 {
		return "drive", fmt.Sprintf("drives/d1/items/%d", i/20)
	}
	seq := i - i/20 - 1 // index among the requests that are not the drive's
	switch k := seq % 7; {
	case k < 4:
		return "identity", fmt.Sprintf("users/%d", seq)
	case k < 6:
		m := (seq / 7) % 10
		return fmt.Sprintf("mailbox %d", m), fmt.Sprintf("users/mbx%d/messages", m)
	default:
		return "sites", fmt.Sprintf("sites/%d", seq)
	}
}

// graphRates are the budgets of scenario (e), requests per second.
var graphRates = map[string]float64{"identity": 400, "mailbox": 20, "sites": 100}

// apiLimits counts the requests of each API among n and returns each
// API's physical limit at its rate; an API without a rate gets the
// workload's whole limit.
func apiLimits(n int, api func(i int) string, rate func(api string) float64, whole time.Duration) map[string]time.Duration {
	count := map[string]int{}
	for i := range n {
		count[api(i)]++
	}
	out := map[string]time.Duration{}
	for a, c := range count {
		if r := rate(a); r > 0 {
			out[a] = perSecond(c, r)
		} else {
			out[a] = whole
		}
	}
	return out
}

// underVersion is the path of a collection below Graph's version segment:
// GET reads item i of it, POST creates one in it.
func underVersion(base, method, collection string, i int) string {
	return item(base+"/v1.0", method, collection, i)
}

// item is the URL of request i: a GET reads one item of the collection,
// a POST creates one in it, as Graph clients do.
func item(base, method, collection string, i int) string {
	if method == "GET" {
		return fmt.Sprintf("%s/%s/%d", base, collection, i)
	}
	return fmt.Sprintf("%s/%s", base, collection)
}

func perSecond(n int, rate float64) time.Duration {
	return time.Duration(float64(n) / rate * float64(time.Second))
}
