package middleware_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// limiterShape is a server limiter of the benchmark's limiter scenarios,
// for the workload of 2000 requests from 200 workers.
type limiterShape struct {
	name string
	rule func() throttletest.Rule
	// flapping, when set, takes the server down and up again.
	flapping throttletest.Flapping
	// users, when set, spreads the requests over that many users
	// (`/v1.0/users/{i mod users}`), GET and POST alike.
	users int
	limit time.Duration // the physical limit: no client can finish sooner
	// most are the most attempts per request and time over the limit the
	// handler may take: what it achieves with some margin, a guard against
	// regressions. The first wave (200 requests into a burst of 40) costs
	// 0.08 attempts per request on every shape.
	mostAttempts, mostOver float64
}

func shapeRule(l func(string, time.Time) throttletest.Limiter, err error) throttletest.Rule {
	if err != nil {
		panic(err)
	}
	return throttletest.Rule{Name: "limit", Match: func(*http.Request) (string, bool) { return "", true }, Limiter: l}
}

// retryAfterRule returns r answering its throttles with Retry-After: secs.
func retryAfterRule(r throttletest.Rule, secs int64) throttletest.Rule {
	ra, err := throttletest.FixedRetryAfter(secs)
	if err != nil {
		panic(err)
	}
	r.RetryAfter = ra
	return r
}

func limiterShapes() []limiterShape {
	const rate, burst = 400.0, 40
	bucket := throttletest.Bucket{Rate: rate, Burst: burst}
	rateChange := time.Duration(6 * float64(2000-burst) / (5 * rate) * float64(time.Second))
	return []limiterShape{
		{name: "Retry-After 3 s on a 40-token bucket at 400/s", rule: func() throttletest.Rule {
			return retryAfterRule(shapeRule(throttletest.BucketLimiter(bucket), nil), 3)
		}, limit: 5 * time.Second, mostAttempts: 1.1, mostOver: 1.65},
		// HAProxy's sliding window counts the requests it refuses, so a
		// pace that overruns it stays refused until it stops. The first
		// wave spends 400 at once and is refused 200 more, which the next
		// second still counts, and so are the retries that come back one
		// second later. A pace whose releases are all refused stops until
		// the throttle's wait ends, but for a probe: 1.17 and 1.04
		// attempts a request (GET, POST), against 1.30 and 1.19 while it
		// held half its rate and sent into the window. The limit is 5 s
		// (realproxy.StickTableFloor: 400 at once, nothing until the first
		// second ends, then 400 a second); until 2026-11 this case read
		// its figures against 4 s, a quarter high. Since the first wave's
		// successes count once, the GETs read 1.13 attempts and 1.14x;
		// since a refusal soon after a fit lets the curve climb back to
		// it, the POSTs 1.14x (1.18x before).
		{name: "HAProxy's stick table, 400 per 1 s counting refusals, Retry-After 1", rule: func() throttletest.Rule {
			return retryAfterRule(shapeRule(throttletest.StickTableLimiter(throttletest.StickTable{Limit: 400, Period: time.Second})), 1)
		}, limit: 5 * time.Second, mostAttempts: 1.2, mostOver: 1.36},
		// A bare 429 (the policy's delay holds its request) from one
		// bucket behind 50 users, four requests each in the first wave.
		// Their users were carved one by one, and a user refused alone
		// was taken for the users API's own traffic, keeping them apart:
		// each user paced by its own throttles at about 10/s, 2.9x-3.5x.
		// A user as deep as the carved ones is one of them: 1.02x.
		{name: "a bare 429 from a 40-token bucket at 400/s behind 50 users", rule: func() throttletest.Rule {
			r := shapeRule(throttletest.BucketLimiter(bucket), nil)
			r.OmitRetryAfter = true
			return r
		}, users: 50, limit: 4900 * time.Millisecond, mostAttempts: 1.1, mostOver: 1.3},
		// The same window naming Retry-After: 3, as the fleet bench's
		// HAProxy rows do: one process of them, in virtual time. Each
		// refusal of the first wave and of the second (its retries, 3 s
		// on, when the window has forgotten the first) holds its worker
		// 3 s, and the second wave's 400, taken at once, fit a bucket as large
		// as the first wave refilling at almost nothing: the pace runs
		// at its floor, the first wave's 400 per Retry-After (133/s), for
		// the 6 s its curve stands before it probes. GET 2.30x, POST
		// 1.23x. A pace floored so probes at once read GET 2.00x and
		// POST 1.71x (a probe's refusals wait 3 s at the run's end):
		// not in.
		{name: "HAProxy's stick table, 400 per 1 s counting refusals, Retry-After 3", rule: func() throttletest.Rule {
			return retryAfterRule(shapeRule(throttletest.StickTableLimiter(throttletest.StickTable{Limit: 400, Period: time.Second})), 3)
		}, limit: 5 * time.Second, mostAttempts: 1.15, mostOver: 2.5},
		// Bench scenario (m): every request is answered 503 without
		// Retry-After for 5 s, then the bucket serves for 5 s, and so on.
		// The limit is 9.9 s: all 2000 in the first up period, at 400/s
		// after its burst of 40. The pace found in that period is about
		// 330/s, so some 350 requests spill into the next one, 5 s later:
		// 1.70x, 1.14 and 1.12 attempts a request (GET, POST), the 503s
		// counted. Before the pace's curve stopped counting the time it
		// had nothing to release, its probe doubled through each outage
		// and met the server's return with everything at once: POST at
		// 1.91x here, 6.87x on loopback.
		{name: "a server down 5 s and up 5 s, over and over", rule: func() throttletest.Rule {
			return shapeRule(throttletest.BucketLimiter(bucket), nil)
		}, flapping: throttletest.Flapping{Down: 5 * time.Second, Up: 5 * time.Second},
			limit: 9900 * time.Millisecond, mostAttempts: 1.25, mostOver: 2.0},
		// The windows' POSTs: the pace stops while the window is shut
		// rather than send into it (1.04 attempts a request, against 1.10).
		// When it opens, a wait far longer than the curve's rate takes to
		// refill the first wave reopens the pace whole: 1.01x-1.02x. On
		// the curve, it released the second quota at the rate that closed
		// it, and probes sent anywhere in the window were held up to a
		// second past its opening: 1.05x-1.08x.
		{name: "fixed window of 1000 per 10 s", rule: func() throttletest.Rule {
			return shapeRule(throttletest.FixedWindowLimiter(throttletest.Window{Quota: 1000, Per: 10 * time.Second}))
		}, limit: 10 * time.Second, mostAttempts: 1.12, mostOver: 1.05},
		{name: "sliding window of 1000 per 10 s", rule: func() throttletest.Rule {
			return shapeRule(throttletest.SlidingWindowLimiter(throttletest.Window{Quota: 1000, Per: 10 * time.Second}))
		}, limit: 10 * time.Second, mostAttempts: 1.12, mostOver: 1.05},
		{name: "rate halving at 1/3 and restoring at 2/3", rule: func() throttletest.Rule {
			return shapeRule(throttletest.ScheduledBucketLimiter(bucket,
				throttletest.RateStep{After: rateChange / 3, Rate: rate / 2}, throttletest.RateStep{After: 2 * rateChange / 3, Rate: rate}))
		}, limit: rateChange, mostAttempts: 1.1, mostOver: 1.45},
		{name: "token bucket with draft-03 headers", rule: func() throttletest.Rule {
			r := shapeRule(throttletest.BucketLimiter(bucket), nil)
			a, err := throttletest.Draft03(0.8)
			if err != nil {
				panic(err)
			}
			r.Announce = a
			return r
		}, limit: 5 * time.Second, mostAttempts: 1.09, mostOver: 1.06},
		{name: "token bucket with the current draft's headers", rule: func() throttletest.Rule {
			r := shapeRule(throttletest.BucketLimiter(bucket), nil)
			a, err := throttletest.CurrentDraft("default")
			if err != nil {
				panic(err)
			}
			r.Announce = a
			return r
		}, limit: 5 * time.Second, mostAttempts: 1.09, mostOver: 1.06},
		{name: "token bucket announcing 40 per 1 s window in whole seconds", rule: func() throttletest.Rule {
			r := shapeRule(throttletest.BucketLimiter(bucket), nil)
			// A proxy whose bucket refills in 0.1 s must still name its
			// window and reset in whole seconds, as the current draft's
			// fields are integers: the quota looks ten times as slow.
			r.Announce = func(h http.Header, b throttletest.Budget) {
				h.Add("RateLimit-Policy", `"default";q=40;w=1`)
				h.Add("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, int(b.Remaining), int(math.Ceil(b.Reset.Seconds()))))
			}
			return r
		}, limit: 5 * time.Second, mostAttempts: 1.1, mostOver: 1.2},
	}
}

type shapeResult struct {
	attemptsPerRequest, timeOverLimit float64
	failed, early                     int
}

// simulateShape sends 2000 requests from 200 workers through the default
// handler to a server with rule, in virtual time, 2 ms a round trip.
func simulateShape(t *testing.T, sh limiterShape, method string) shapeResult {
	const n, c = 2000, 200
	var res shapeResult
	synctest.Test(t, func(t *testing.T) {
		srv, err := throttletest.NewTransport(throttletest.Config{Rules: []throttletest.Rule{sh.rule()}, Flapping: sh.flapping}, 2*time.Millisecond)
		require.NoError(t, err)
		h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
		require.NoError(t, err)
		client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(srv, h)}
		start := time.Now()
		res.failed = sendAll(client, n, c, method, func(i int) string {
			url := "https://graph.test/v1.0/users"
			switch {
			case sh.users > 0:
				url += "/" + strconv.Itoa(i%sh.users)
			case method == http.MethodGet:
				url += "/" + strconv.Itoa(i)
			}
			return url
		}, nil)
		st := srv.Stats()
		res.attemptsPerRequest = float64(st.Attempts) / n
		res.timeOverLimit = time.Since(start).Seconds() / sh.limit.Seconds()
		res.early = st.Early
	})
	return res
}

// sendAll sends requests 0 to n-1 from c workers through client, request i
// to urlOf(i) with a small JSON body, and returns how many ended with an
// error or a status of 300 or more. answered, when not nil, is called
// with i once request i is answered.
func sendAll(client *http.Client, n, c int, method string, urlOf func(i int) string, answered func(i int)) int {
	return sendDialing(client, n, c, 0, method, urlOf, answered)
}

// sendDialing is sendAll with worker k starting k·dial after the first,
// as callers whose connections are dialed one after another do: on
// loopback the first wave reaches the server over some milliseconds, not
// at one instant.
func sendDialing(client *http.Client, n, c int, dial time.Duration, method string, urlOf func(i int) string, answered func(i int)) int {
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for k := range c {
		wg.Go(func() {
			time.Sleep(time.Duration(k) * dial)
			for i := range jobs {
				req, _ := http.NewRequest(method, urlOf(i), strings.NewReader(`{"displayName":"x"}`))
				req.Header.Set(throttletest.HeaderRequestID, strconv.Itoa(i))
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode >= 300 {
					failed.Add(1)
				}
				if answered != nil {
					answered(i)
				}
				if resp != nil {
					_ = resp.Body.Close()
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return int(failed.Load())
}

// TestLimiterShapesSimulation runs the default handler against each
// limiter shape a server may have, GET and POST.
func TestLimiterShapesSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 2000 requests per case")
	}
	for _, sh := range limiterShapes() {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			t.Run(fmt.Sprintf("%s, %s", sh.name, method), func(t *testing.T) {
				res := simulateShape(t, sh, method)
				t.Logf("attempts/request %.3f, time %.2fx the limit, failed %d, early %d",
					res.attemptsPerRequest, res.timeOverLimit, res.failed, res.early)
				assert.Zero(t, res.failed)
				assert.Zero(t, res.early, "no retry before the server's Retry-After")
				assert.LessOrEqual(t, res.attemptsPerRequest, sh.mostAttempts)
				assert.LessOrEqual(t, res.timeOverLimit, sh.mostOver)
			})
		}
	}
}

// TestConcurrencyCapSimulation runs the default handler against Outlook's
// concurrency cap in virtual time, as bench scenario (n) does on
// loopback: 2000 requests from 200 workers over 10 mailboxes, each
// serving 4 at once in 50 ms and refusing a fifth at once with
// Retry-After: 1. The queue's pacer took the cap's throttles for a rate's
// and paced at about half of what it serves, 1.36x-1.75x the limit; the
// cap the budget learns from its releases (package throttle's window.go)
// serves it at 1.07x-1.09x in most runs, 1.30x-1.36x in about one in
// thirteen (80 runs). Until 87325cc one run in ten read 2.2x-2.5x: a cap
// read for the whole users API fell by one a throttle. The bound guards
// against a cap never learned or a handler that fails requests; the
// mechanism's own tests are in package throttle.
func TestConcurrencyCapSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 2000 requests per case")
	}
	const (
		n, c, mailboxes, perMailbox = 2000, 200, 10, 4
		latency, serve              = 2 * time.Millisecond, 50 * time.Millisecond
	)
	limit := time.Duration(n/(mailboxes*perMailbox))*(serve+latency/2) + latency
	mailbox := func(r *http.Request) (string, bool) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1.0/users/")
		id, sub, _ := strings.Cut(rest, "/")
		return id, ok && strings.HasPrefix(sub, "messages")
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, err := throttletest.NewTransport(throttletest.Config{
					Rules:     []throttletest.Rule{{Name: "mailbox", Match: mailbox, Limiter: throttletest.Concurrent(perMailbox)}},
					ServeTime: serve,
				}, latency)
				require.NoError(t, err)
				h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
				require.NoError(t, err)
				client := &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(srv, h)}
				start := time.Now()
				failed := sendAll(client, n, c, method, func(i int) string {
					url := fmt.Sprintf("https://graph.test/v1.0/users/mbx%d/messages", i%mailboxes)
					if method == http.MethodGet {
						url += "/" + strconv.Itoa(i)
					}
					return url
				}, nil)
				st := srv.Stats()
				attempts, over := float64(st.Attempts)/n, time.Since(start).Seconds()/limit.Seconds()
				t.Logf("attempts/request %.3f, time %.2fx the limit", attempts, over)
				assert.Zero(t, failed)
				assert.Zero(t, st.Early, "no retry before the server's Retry-After")
				assert.LessOrEqual(t, attempts, 1.25)
				assert.LessOrEqual(t, over, 2.5)
			})
		})
	}
}
