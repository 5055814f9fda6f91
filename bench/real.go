package main

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/realproxy"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// realScenarios run behind limiters nobody here wrote, nginx's limit_req
// and HAProxy's stick table from the system's packages, started on
// loopback in front of a throttletest server that throttles nothing; and
// behind the bench's own token bucket, with the same workloads: every shape
// of -shapes with ids spread as -spreads says.
var realScenarios = []scenario{
	{
		key:   "nginx-ra",
		title: "nginx limit_req, 429 with Retry-After: 1",
		about: "nginx (Debian's nginx-light) `limit_req zone=… burst=<burst> nodelay` on one zone keyed by `$binary_remote_addr` at -rate, " +
			"`limit_req_status 429`, and `Retry-After: 1` added to refusals. " + limitReqAbout,
		proxy:     nginxProxy(429, "1"),
		workloads: true,
		limit:     limitReqLimit,
	},
	{
		key:       "nginx-429",
		title:     "nginx limit_req, bare 429",
		about:     "The nginx of nginx-ra answering 429 without `Retry-After`. " + limitReqAbout,
		proxy:     nginxProxy(429, ""),
		workloads: true,
		limit:     limitReqLimit,
	},
	{
		key:       "nginx-503",
		title:     "nginx limit_req, its default 503",
		about:     "The nginx of nginx-ra with limit_req's default refusal: 503 without `Retry-After`. " + limitReqAbout,
		proxy:     nginxProxy(0, ""),
		workloads: true,
		limit:     limitReqLimit,
	},
	{
		key:   "nginx-zones",
		title: "nginx, three limit_req zones on one host, bare 429",
		about: "nginx with three zones keyed by `$binary_remote_addr`: `/v1.0/users` at -rate (burst -burst), `/v1.0/me/messages` at a tenth of it, " +
			"`/v1.0/sites` at a quarter, each with a tenth of its own burst scaled the same way, answering a bare 429. " +
			"Three quarters of -n requests from three quarters of -c workers, spread over the three in proportion to their rates; " +
			"a shape with ids reads `{zone}/{id}`, the collection shape `{zone}` itself. " +
			"Each zone is reported against its own physical limit, (its requests − burst − 1) / its rate; the whole against the slowest zone's.",
		proxy: func(p params, origin string) (*realproxy.Proxy, error) {
			zs := zones(p)
			cfg := realproxy.Nginx{Origin: origin, Status: http.StatusTooManyRequests}
			for _, z := range zs {
				cfg.Zones = append(cfg.Zones, realproxy.Zone{Location: z.location, Rate: int(z.rate), Burst: z.burst})
			}
			return realproxy.StartNginx(cfg)
		},
		workloads: true,
		shapeKeys: []string{"user", "collection"},
		scale:     func(p params) params { p.n, p.c = max(1, p.n*3/4), max(1, p.c*3/4); return p },
		route: func(w workload, p params, i int) string {
			z := zones(p)[zoneOf(i)]
			if w.shape.oneURL {
				return z.location
			}
			return z.location + "/" + w.id(i, p.n)
		},
		limit: func(p params) time.Duration { return maxLimit(zoneLimits(p)) },
		apis: func(p params) (func(int) string, map[string]time.Duration) {
			zs := zones(p)
			return func(i int) string { return zs[zoneOf(i)].location }, zoneLimits(p)
		},
		limitAbout: func(p params) string { return " (the slowest zone's; each zone's own is below)" },
	},
	{
		key:   "haproxy",
		title: "HAProxy stick-table sliding window, 429 with Retry-After: 1",
		about: "HAProxy (Debian's haproxy) tracking every request of a client address with `http-request track-sc0 src` in a stick table storing `http_req_rate(1s)`, " +
			"and `http-request deny deny_status 429 hdr Retry-After 1 if { sc_http_req_rate(0) gt <rate> }`; refused requests count. " +
			"-burst is unused. Physical limit: n / rate (the rate at once, then nothing until the first second ends, then the rate; " +
			"`realproxy.StickTableFloor`).",
		proxy: func(p params, origin string) (*realproxy.Proxy, error) {
			return realproxy.StartHAProxy(realproxy.HAProxy{Origin: origin, Limit: int(p.rate), RetryAfter: "1"})
		},
		workloads: true,
		limit:     func(p params) time.Duration { return realproxy.StickTableFloor(p.n, int(p.rate), time.Second) },
	},
	{
		key:   "bucket",
		title: "the bench's token bucket",
		about: "The throttletest server's token bucket of scenario (a) (rate, burst; 429 with `Retry-After` in whole seconds, at least 1), one budget for every URL, " +
			"with the workloads of -shapes and -spreads (`mailbox/50` and `mailbox/n` are one bucket behind 50 and behind n mailbox-like URLs). Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Bucket: throttletest.Bucket{Rate: p.rate, Burst: p.burst}}
		},
		workloads: true,
		limit:     func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
	{
		key:   "bucket-announce",
		title: "a token bucket announcing burst per 1 s in the current draft's fields",
		about: "The token bucket of `bucket`, announcing on every answer `RateLimit-Policy: \"default\";q=<burst>;w=1` and `RateLimit: \"default\";r=<tokens>;t=<until full, rounded up>`: " +
			"the draft's fields are Integers, so a bucket that refills within a fraction of a second announces its burst per second, a tenth of what it admits at the defaults. " +
			"Physical limit: n / rate.",
		config: func(p params) throttletest.Config {
			return throttletest.Config{Rules: []throttletest.Rule{{
				Name: "bucket", Match: everything,
				Limiter:  throttletest.BucketLimiter(throttletest.Bucket{Rate: p.rate, Burst: p.burst}),
				Announce: orPanic(throttletest.CurrentDraftWhole("default")),
			}}}
		},
		workloads: true,
		limit:     func(p params) time.Duration { return perSecond(p.n, p.rate) },
	},
}

func init() { scenarios = append(scenarios, realScenarios...) }

// limitReqAbout states the physical limit of one limit_req zone.
const limitReqAbout = "Physical limit: (n − burst − 1) / rate, since nginx admits burst + 1 at once and then one every 1/rate " +
	"(`realproxy.LimitReqFloor`; `throttletest.LimitReq` models it)."

func limitReqLimit(p params) time.Duration { return realproxy.LimitReqFloor(p.n, p.rate, p.burst) }

// nginxProxy starts nginx with one zone for every path at the rate and
// burst of p, refusing with status (0: nginx's 503) and retryAfter.
func nginxProxy(status int, retryAfter string) func(p params, origin string) (*realproxy.Proxy, error) {
	return func(p params, origin string) (*realproxy.Proxy, error) {
		return realproxy.StartNginx(realproxy.Nginx{
			Origin:     origin,
			Zones:      []realproxy.Zone{{Location: "/", Rate: int(p.rate), Burst: p.burst}},
			Status:     status,
			RetryAfter: retryAfter,
		})
	}
}

// zone is one limit_req zone of scenario nginx-zones.
type zone struct {
	location string
	rate     float64
	burst    int
}

// zones are the three zones of nginx-zones: Identity at the full rate,
// mail at a tenth and sites at a quarter, as scenario (d)'s APIs.
func zones(p params) []zone {
	return []zone{
		{"/v1.0/users", p.rate, p.burst},
		{"/v1.0/me/messages", max(1, p.rate/10), max(0, p.burst/10)},
		{"/v1.0/sites", max(1, p.rate/4), max(0, p.burst/4)},
	}
}

// zoneOf spreads requests over the three zones in proportion to their
// rates at the defaults, 400 : 40 : 100.
func zoneOf(i int) int {
	switch k := i % 54; {
	case k < 40:
		return 0
	case k < 44:
		return 1
	}
	return 2
}

// zoneLimits is each zone's physical limit for its share of the workload.
func zoneLimits(p params) map[string]time.Duration {
	zs := zones(p)
	count := make([]int, len(zs))
	for i := range p.n {
		count[zoneOf(i)]++
	}
	out := map[string]time.Duration{}
	for k, z := range zs {
		out[z.location] = realproxy.LimitReqFloor(count[k], z.rate, z.burst)
	}
	return out
}

func maxLimit(m map[string]time.Duration) time.Duration {
	var out time.Duration
	for _, d := range m {
		out = max(out, d)
	}
	return out
}

// checkRealLimiters reports whether the real scenarios among scs can run:
// their rate must be a whole number, as nginx and HAProxy take it, and the
// binaries must be installed.
func checkRealLimiters(scs []scenario, p params) error {
	for _, sc := range scs {
		if sc.proxy == nil {
			continue
		}
		if p.rate != float64(int(p.rate)) {
			return fmt.Errorf("scenario %s: -rate = %v must be a whole number for nginx and HAProxy", sc.key, p.rate)
		}
		if err := realproxy.Installed(); err != nil {
			return fmt.Errorf("scenario %s needs nginx and haproxy (run `make install-deps`): %w", sc.key, err)
		}
	}
	return nil
}

// retryAfterOf reads a Retry-After in seconds, or as an HTTP date, the way
// the client-side count of early retries needs it; false when there is none.
func retryAfterOf(h http.Header, now time.Time) (time.Time, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return time.Time{}, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return now.Add(time.Duration(s * float64(time.Second))), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	return time.Time{}, false
}
