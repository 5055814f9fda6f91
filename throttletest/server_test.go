package throttletest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	type step struct {
		at       time.Duration // since the bucket was made
		wantWait time.Duration // 0: a token is taken
	}
	tests := []struct {
		name   string
		bucket Bucket
		steps  []step
	}{
		{"burst then wait for the refill", Bucket{Rate: 1, Burst: 2}, []step{
			{0, 0}, {0, 0}, {0, time.Second}, {500 * time.Millisecond, 500 * time.Millisecond}, {time.Second, 0},
		}},
		{"refill is capped at burst", Bucket{Rate: 10, Burst: 1}, []step{
			{time.Hour, 0}, {time.Hour, 100 * time.Millisecond},
		}},
		{"zero burst means one", Bucket{Rate: 2}, []step{
			{0, 0}, {0, 500 * time.Millisecond}, {500 * time.Millisecond, 0},
		}},
		{"Graph-like 400/s burst 40", Bucket{Rate: 400, Burst: 40}, append(clocktest.Repeat(step{0, 0}, 40),
			step{0, 2500 * time.Microsecond}, step{2500 * time.Microsecond, 0}, step{2500 * time.Microsecond, 2500 * time.Microsecond})},
		{"a clock that steps back earns nothing", Bucket{Rate: 1, Burst: 1}, []step{
			{time.Second, 0}, {0, time.Second}, {time.Second, time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTokenBucket(tt.bucket, t0)
			for i, s := range tt.steps {
				got := b.Wait(t0.Add(s.at), 1)
				assert.Equal(t, s.wantWait, got, "step %d at %v", i, s.at)
				if got == 0 {
					b.Take(t0.Add(s.at), 1)
				}
			}
		})
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		wait time.Duration
		want int64
	}{
		{time.Nanosecond, 1},
		{2500 * time.Microsecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{2500 * time.Millisecond, 3},
		{100 * time.Second, 100},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, retryAfterSeconds(tt.wait), "wait %v", tt.wait)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"zero value", Config{}, ""},
		{"full", Config{Bucket: Bucket{400, 40}, HostBuckets: map[string]Bucket{"127.0.0.2": {1, 1}},
			PathBuckets: map[string]Bucket{"mail": {1, 1}}, Hosts: []string{"127.0.0.1", "127.0.0.2", "::1"},
			Outage: time.Second, FailureRate: 1}, ""},
		{"negative rate", Config{Bucket: Bucket{Rate: -1}}, "Config.Bucket.Rate = -1"},
		{"NaN rate", Config{Bucket: Bucket{Rate: math.NaN()}}, "Config.Bucket.Rate = NaN"},
		{"infinite rate", Config{Bucket: Bucket{Rate: math.Inf(1)}}, "Config.Bucket.Rate = +Inf"},
		{"negative burst", Config{Bucket: Bucket{Rate: 1, Burst: -2}}, "Config.Bucket.Burst = -2"},
		{"bad host bucket", Config{HostBuckets: map[string]Bucket{"a": {Rate: -1}}}, `Config.HostBuckets["a"].Rate = -1`},
		{"bad path bucket", Config{PathBuckets: map[string]Bucket{"mail": {Burst: -1}}}, `Config.PathBuckets["mail"].Burst = -1`},
		{"path key with slash", Config{PathBuckets: map[string]Bucket{"a/b": {1, 1}}}, `key "a/b" must be one path segment`},
		{"host not loopback", Config{Hosts: []string{"10.0.0.1"}}, `Hosts entry "10.0.0.1" is not a loopback`},
		{"host name", Config{Hosts: []string{"localhost"}}, `Hosts entry "localhost"`},
		{"negative outage", Config{Outage: -time.Second}, "Config.Outage = -1s"},
		{"negative serve time", Config{ServeTime: -time.Millisecond}, "Config.ServeTime = -1ms"},
		{"failure rate above 1", Config{FailureRate: 1.5}, "Config.FailureRate = 1.5"},
		{"failure rate NaN", Config{FailureRate: math.NaN()}, "Config.FailureRate = NaN"},
		{"flapping", Config{Flapping: Flapping{Down: 5 * time.Second, Up: 5 * time.Second}}, ""},
		{"flapping never up", Config{Flapping: Flapping{Down: 5 * time.Second}}, "Config.Flapping"},
		{"flapping negative", Config{Flapping: Flapping{Down: -1, Up: 1}}, "Config.Flapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestNewServerPanicsOnInvalidConfig(t *testing.T) {
	assert.PanicsWithError(t, "throttletest: Config.Outage = -1ns must not be negative", func() {
		NewServer(Config{Outage: -1})
	})
}

// harness is a server on a fake clock and a client for it.
type harness struct {
	t      *testing.T
	now    *clocktest.Clock
	srv    *Server
	client *http.Client
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	now := clocktest.New(time.Unix(1_700_000_000, 0))
	srv, err := newServer(cfg, now.Now)
	require.NoError(t, err)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	h := &harness{t: t, now: now, srv: srv, client: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return h
}

type reply struct {
	status     int
	retryAfter string
	body       string
}

// do sends one attempt; headers alternate names and values.
func (h *harness) do(method, url, body string, headers ...string) reply {
	h.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(h.t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.client.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	assert.Equal(h.t, "application/json", resp.Header.Get("Content-Type"))
	return reply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
}

func TestServerThrottlesLikeGraph(t *testing.T) {
	h := newHarness(t, Config{Bucket: Bucket{Rate: 0.4, Burst: 2}})
	type step struct {
		advance    time.Duration
		wantStatus int
		wantRA     string
	}
	steps := []step{
		{0, 200, ""},
		{0, 200, ""},
		{0, 429, "3"}, // 1 token at 0.4/s: 2.5 s, rounded up
		{2 * time.Second, 429, "1"},
		{499 * time.Millisecond, 429, "1"}, // 1 ms short: still at least 1 s
		{time.Millisecond, 200, ""},
	}
	for i, s := range steps {
		h.now.Advance(s.advance)
		got := h.do(http.MethodGet, h.srv.URL+"/users/u1", "")
		assert.Equal(t, s.wantStatus, got.status, "step %d", i)
		assert.Equal(t, s.wantRA, got.retryAfter, "step %d", i)
		if got.status == 429 {
			assert.JSONEq(t, fmt.Sprintf(`{"error":{"code":"TooManyRequests","message":"Too many requests. Retry after %s s."}}`, s.wantRA), got.body)
		}
	}
	assert.Equal(t, Stats{Attempts: 6, OK: 3, Throttled: 3, ThrottledBy: map[string]int{"bucket": 3}}, h.srv.Stats())
}

func TestServerGETBody(t *testing.T) {
	h := newHarness(t, Config{})
	got := h.do(http.MethodGet, h.srv.URL+"/users/48d31887", "")
	assert.Equal(t, 200, got.status)
	assert.JSONEq(t, `{"id":"48d31887","displayName":"User 48d31887"}`, got.body)
}

func TestServerPOSTBody(t *testing.T) {
	const body = `{"displayName":"Adele Vance"}`
	sum := sha256.Sum256([]byte(body))
	digest := hex.EncodeToString(sum[:])
	tests := []struct {
		name        string
		declared    string
		wantStatus  int
		wantBadBody int
	}{
		{"declared and matching", digest, 201, 0},
		{"declared in upper case", strings.ToUpper(digest), 201, 0},
		{"not declared", "", 201, 0},
		{"declared and different", strings.Repeat("0", 64), 400, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			got := h.do(http.MethodPost, h.srv.URL+"/users", body, HeaderRequestID, "r1", HeaderBodySHA256, tt.declared)
			assert.Equal(t, tt.wantStatus, got.status)
			if tt.wantStatus == 201 {
				assert.JSONEq(t, fmt.Sprintf(`{"id":"r1","sha256":%q,"bytes":%d}`, digest, len(body)), got.body)
			} else {
				assert.Contains(t, got.body, `"code":"invalidRequest"`)
			}
			assert.Equal(t, tt.wantBadBody, h.srv.Stats().BadBody)
			reqs := h.srv.Requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, tt.wantBadBody, reqs[0].BadBody)
		})
	}
}

func TestServerBadBodyIsCountedOnThrottledAttempts(t *testing.T) {
	h := newHarness(t, Config{Bucket: Bucket{Rate: 1, Burst: 1}})
	h.do(http.MethodGet, h.srv.URL+"/x", "")
	got := h.do(http.MethodPost, h.srv.URL+"/users", "{}", HeaderRequestID, "r1", HeaderBodySHA256, "00")
	assert.Equal(t, 429, got.status, "the throttle answers before the body is judged")
	assert.Equal(t, 1, h.srv.Stats().BadBody)
}

func TestServerEarlyRetries(t *testing.T) {
	tests := []struct {
		name       string
		retryAt    time.Duration // after the 429, which names 1 s
		wantEarly  int
		wantStatus int
	}{
		{"half way", 500 * time.Millisecond, 1, 429},
		{"just outside the tolerance", time.Second - EarlyTolerance - time.Nanosecond, 1, 429},
		{"within the tolerance", time.Second - EarlyTolerance, 0, 429},
		{"on time", time.Second, 0, 200},
		{"late", 3 * time.Second, 0, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Bucket: Bucket{Rate: 1, Burst: 1}})
			h.do(http.MethodGet, h.srv.URL+"/x", "") // empties the bucket
			got := h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1")
			require.Equal(t, 429, got.status)
			require.Equal(t, "1", got.retryAfter)
			h.now.Advance(tt.retryAt)
			assert.Equal(t, tt.wantStatus, h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1").status)
			assert.Equal(t, tt.wantEarly, h.srv.Stats().Early)
			reqs := h.srv.Requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, tt.wantEarly, reqs[0].Early)
			assert.Equal(t, 2, reqs[0].Attempts)
		})
	}
}

func TestServerEarlyOnlyCountsAgainstTheLastAnswer(t *testing.T) {
	h := newHarness(t, Config{Bucket: Bucket{Rate: 1, Burst: 1}, Outage: 0})
	h.do(http.MethodGet, h.srv.URL+"/x", "") // empties the bucket
	require.Equal(t, 429, h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1").status)
	h.now.Advance(time.Second)
	require.Equal(t, 200, h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1").status)
	// After a 200 no Retry-After is pending: another attempt at once is not early.
	h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1")
	// Requests without an id are never early: they cannot be told apart.
	h.do(http.MethodGet, h.srv.URL+"/x", "")
	assert.Equal(t, 0, h.srv.Stats().Early)
}

func TestServerOutage(t *testing.T) {
	h := newHarness(t, Config{Outage: 2 * time.Second, Bucket: Bucket{Rate: 1, Burst: 1}})
	steps := []struct {
		advance time.Duration
		want    int
	}{
		{0, 503},
		{1999 * time.Millisecond, 503},
		{time.Millisecond, 200}, // the outage took no token
		{0, 429},
	}
	for i, s := range steps {
		h.now.Advance(s.advance)
		got := h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1")
		assert.Equal(t, s.want, got.status, "step %d", i)
		if got.status == 503 {
			assert.Empty(t, got.retryAfter, "an outage names no Retry-After")
			assert.Contains(t, got.body, "serviceNotAvailable")
		}
	}
	assert.Equal(t, Stats{Attempts: 4, Requests: 1, OK: 1, Throttled: 1, Unavailable: 2, ThrottledBy: map[string]int{"bucket": 1}}, h.srv.Stats())
	assert.Equal(t, []time.Duration{2 * time.Second}, h.srv.Completions())
}

func TestServerFlapping(t *testing.T) {
	h := newHarness(t, Config{Flapping: Flapping{Down: 5 * time.Second, Up: 5 * time.Second}})
	steps := []struct {
		advance time.Duration
		want    int
	}{
		{0, 503},
		{4999 * time.Millisecond, 503},
		{time.Millisecond, 200},
		{4999 * time.Millisecond, 200},
		{time.Millisecond, 503},
		{5 * time.Second, 200},
	}
	for i, s := range steps {
		h.now.Advance(s.advance)
		got := h.do(http.MethodGet, h.srv.URL+"/x", "", HeaderRequestID, "r1")
		assert.Equal(t, s.want, got.status, "step %d", i)
		if got.status == 503 {
			assert.Empty(t, got.retryAfter, "a flap names no Retry-After")
		}
	}
}

func TestServerRandomFailures(t *testing.T) {
	draws := []float64{0.05, 0.5, 0.0999, 0.1}
	var i int
	h := newHarness(t, Config{FailureRate: 0.1, Rand: func() float64 { i++; return draws[i-1] }})
	var got []int
	for range draws {
		got = append(got, h.do(http.MethodGet, h.srv.URL+"/x", "").status)
	}
	assert.Equal(t, []int{503, 200, 503, 200}, got)
	assert.Equal(t, 2, h.srv.Stats().Unavailable)
}

func TestServerSeparateBuckets(t *testing.T) {
	// Slow rates keep the buckets from refilling during the test.
	slow := Bucket{Rate: 0.001, Burst: 1}
	tests := []struct {
		name  string
		cfg   Config
		reqs  []string // "host path"; host is an index into Server.URLs
		wants []int
	}{
		{"path buckets", Config{PathBuckets: map[string]Bucket{"mail": slow}},
			[]string{"0 /mail/1", "0 /mail/2", "0 /files/1", "0 /files/2", "0 /mailbox/1"},
			[]int{200, 429, 200, 200, 200}},
		{"host buckets", Config{Hosts: []string{"127.0.0.1", "127.0.0.2"}, HostBuckets: map[string]Bucket{"127.0.0.1": slow}},
			[]string{"0 /users/1", "0 /users/2", "1 /users/1", "1 /users/2"},
			[]int{200, 429, 200, 200}},
		{"a rule's budget per key, with a cost and its own Retry-After", Config{Rules: []Rule{{
			Name: "mailbox",
			Match: func(r *http.Request) (string, bool) {
				seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
				return seg[len(seg)-2], len(seg) == 3 && seg[2] == "messages"
			},
			Limiter:    BucketLimiter(Bucket{Rate: 0.001, Burst: 2}),
			Cost:       func(r *http.Request) float64 { return float64(len(r.URL.Query().Get("cost"))) },
			RetryAfter: func(time.Duration) int64 { return 7 },
		}}},
			[]string{"0 /users/a/messages?cost=x", "0 /users/a/messages?cost=x", "0 /users/a/messages?cost=x", "0 /users/b/messages?cost=xx", "0 /users/b/messages?cost=x", "0 /users/a"},
			[]int{200, 200, 429, 200, 429, 200}},
		{"a throttled path takes no global token", Config{Bucket: Bucket{Rate: 0.001, Burst: 2}, PathBuckets: map[string]Bucket{"mail": slow}},
			[]string{"0 /mail/1", "0 /mail/2", "0 /files/1", "0 /files/2"},
			[]int{200, 429, 200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, h := range tt.cfg.Hosts {
				if l, err := net.Listen("tcp", h+":0"); err != nil {
					t.Skipf("loopback address %s is not available here: %v", h, err)
				} else {
					l.Close()
				}
			}
			h := newHarness(t, tt.cfg)
			var got []int
			for _, r := range tt.reqs {
				host, path, _ := strings.Cut(r, " ")
				n, _ := strconv.Atoi(host)
				got = append(got, h.do(http.MethodGet, h.srv.URLs[n]+path, "").status)
			}
			assert.Equal(t, tt.wants, got)
		})
	}
}

func TestServerURLsDifferInHost(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 is not available here: %v", err)
	} else {
		l.Close()
	}
	h := newHarness(t, Config{Hosts: []string{"127.0.0.1", "127.0.0.2"}})
	require.Len(t, h.srv.URLs, 2)
	assert.Equal(t, h.srv.URLs[0], h.srv.URL)
	assert.True(t, strings.HasPrefix(h.srv.URLs[0], "http://127.0.0.1:"), h.srv.URLs[0])
	assert.True(t, strings.HasPrefix(h.srv.URLs[1], "http://127.0.0.2:"), h.srv.URLs[1])
	h.do(http.MethodGet, h.srv.URLs[1]+"/a/b", "", HeaderRequestID, "r1")
	reqs := h.srv.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "127.0.0.2", reqs[0].Host)
	assert.Equal(t, "/a/b", reqs[0].Path)
}

func TestServerRecordsLagAndCompletion(t *testing.T) {
	h := newHarness(t, Config{Bucket: Bucket{Rate: 1, Burst: 1}})
	issued := h.now.Now().Add(-300 * time.Millisecond)
	hdr := []string{HeaderRequestID, "r1", HeaderIssuedAt, strconv.FormatInt(issued.UnixNano(), 10)}
	h.do(http.MethodGet, h.srv.URL+"/x", "") // empties the bucket
	first := h.now.Now()
	require.Equal(t, 429, h.do(http.MethodGet, h.srv.URL+"/x", "", hdr...).status)
	h.now.Advance(time.Second)
	require.Equal(t, 200, h.do(http.MethodGet, h.srv.URL+"/x", "", hdr...).status)
	h.now.Advance(time.Second)
	h.do(http.MethodGet, h.srv.URL+"/y", "", HeaderRequestID, "r2", HeaderIssuedAt, "not a number")

	reqs := h.srv.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, Request{ID: "r1", Method: "GET", Host: "127.0.0.1", Path: "/x", Attempts: 2, Throttled: 1,
		Issued: time.Unix(0, issued.UnixNano()), First: first, Lag: 300 * time.Millisecond, Done: first.Add(time.Second)}, reqs[0])
	assert.Equal(t, "r2", reqs[1].ID)
	assert.Zero(t, reqs[1].Lag)
	assert.True(t, reqs[1].Issued.IsZero())
	assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, h.srv.Completions())
}

func TestServerConcurrentAccounting(t *testing.T) {
	// On a frozen clock the bucket never refills: exactly Burst requests
	// pass, whatever the interleaving.
	const workers, perWorker, burst = 20, 10, 50
	h := newHarness(t, Config{Bucket: Bucket{Rate: 1, Burst: burst}})
	var wg sync.WaitGroup
	statuses := make(chan int, workers*perWorker)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/users/%d", h.srv.URL, i), nil)
				if !assert.NoError(t, err) {
					return
				}
				req.Header.Set(HeaderRequestID, fmt.Sprintf("w%d-%d", w, i))
				resp, err := h.client.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				var u user
				if resp.StatusCode == 200 {
					assert.NoError(t, json.NewDecoder(resp.Body).Decode(&u))
					assert.Equal(t, strconv.Itoa(i), u.ID)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses <- resp.StatusCode
			}
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	assert.Equal(t, map[int]int{200: burst, 429: workers*perWorker - burst}, count)
	assert.Equal(t, Stats{Attempts: workers * perWorker, Requests: workers * perWorker, OK: burst, Throttled: workers*perWorker - burst, ThrottledBy: map[string]int{"bucket": workers*perWorker - burst}}, h.srv.Stats())
	assert.Len(t, h.srv.Requests(), workers*perWorker)
	assert.Len(t, h.srv.Completions(), burst)
}
