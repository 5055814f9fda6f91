package main

import (
	"fmt"
	"net/http"
	"time"

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
}

// limiterScenarios are servers whose limiter is not a plain token bucket
// with Graph's Retry-After, or that announce their budget in headers.
var limiterScenarios = []scenario{
	{
		key:   "retry-after-3",
		title: "(d) Retry-After 3 s on a token bucket",
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
		title: "(e) fixed window",
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
		title: "(f) rate halving at 1/3, restored at 2/3",
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
		title: "(g) token bucket announcing draft-03 RateLimit headers",
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
		title: "(h) token bucket announcing the current draft's RateLimit headers",
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
