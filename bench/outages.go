package main

import (
	"fmt"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// Scenarios of a server that fails rather than throttles: a long outage,
// a share of requests failing at random, and a server going down and up
// again. The outage's figures in the README come from
//
//	go run . -scenarios outage-30s -n 1000 -c 1000
//
// which puts a thousand requests in flight at once, as the issue that asked
// for it measures.
const (
	// longOutage is scenario outage-30s's outage.
	longOutage = 30 * time.Second
	// partialFailure is the share of requests scenario partial fails.
	partialFailure = 0.3
	// flapDown and flapUp are scenario flapping's periods.
	flapDown, flapUp = 5 * time.Second, 5 * time.Second
)

var outageScenarios = []scenario{
	{
		key:   "outage-30s",
		title: "(k) 503 outage of 30 s",
		about: "Every request in the first 30 s after the server starts is answered 503 without `Retry-After`; none fails after it. " +
			"Run with `-n 1000 -c 1000` to have a thousand requests in flight when it starts. Physical limit: the outage.",
		config:     func(params) throttletest.Config { return throttletest.Config{Outage: longOutage} },
		target:     usersOnURL,
		limit:      func(params) time.Duration { return longOutage },
		limitAbout: func(params) string { return " (the outage)" },
	},
	{
		key:   "partial",
		title: "(l) 30 % of requests failing at random",
		about: "The token bucket of (a), and 30 % of the attempts, at random and for the whole run, answered 503 without `Retry-After` " +
			"(a failed attempt takes no token). Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Bucket: throttletest.Bucket{Rate: p.rate, Burst: p.burst}, FailureRate: partialFailure}
		},
		target: usersOnURL,
		limit:  func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
	{
		key:   "flapping",
		title: "(m) a server down 5 s, up 5 s, over and over",
		about: "The token bucket of (a) on a server that answers every request 503 without `Retry-After` for 5 s, serves for 5 s, and so on from its start. " +
			"Physical limit: the time the up periods take to admit n requests at the bucket's rate, the bucket full again at each (a refused attempt takes no token).",
		config: func(p params) throttletest.Config {
			return throttletest.Config{
				Bucket:   throttletest.Bucket{Rate: p.rate, Burst: p.burst},
				Flapping: throttletest.Flapping{Down: flapDown, Up: flapUp},
			}
		},
		target: usersOnURL,
		limit:  flappingLimit,
		limitAbout: func(p params) string {
			return fmt.Sprintf(" (%d requests at %g/s, burst %d, in 5 s up periods after 5 s down)", p.n, p.rate, p.burst)
		},
	},
}

func init() { scenarios = append(scenarios, outageScenarios...) }

// flappingLimit is when the last of p.n requests can be admitted by a
// bucket of p.rate and p.burst that serves only in the up periods of
// scenario flapping, full again at the start of each.
func flappingLimit(p params) time.Duration {
	perUp := float64(p.burst) + p.rate*flapUp.Seconds()
	left := float64(p.n)
	at := flapDown
	for left > perUp {
		left -= perUp
		at += flapUp + flapDown
	}
	return at + time.Duration(max(left-float64(p.burst), 0)/p.rate*float64(time.Second))
}
