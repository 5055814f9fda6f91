package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name string
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of four is the second", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(make100()...), 0.99, 99 * time.Millisecond},
		{"p99 of 1000 is the 990th", msRange(1000), 0.99, 990 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, percentile(tt.ds, tt.q))
		})
	}
}

func make100() []int {
	v := make([]int, 100)
	for i := range v {
		v[i] = 100 - i
	}
	return v
}

func msRange(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(n-i) * time.Millisecond
	}
	return out
}

func TestPick(t *testing.T) {
	all := []string{"a", "b", "c-paths", "c-hosts"}
	id := func(s string) string { return s }
	got, err := pick("c-hosts, a", all, id)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c-hosts"}, got, "in the order of all")
	_, err = pick("a,x", all, id)
	assert.ErrorContains(t, err, `unknown ["x"]`)
	_, err = pick(" , ", all, id)
	assert.ErrorContains(t, err, "none chosen")
}

func TestCountingTransportFindsUnclosedBodies(t *testing.T) {
	srv := throttletest.NewServer(throttletest.Config{})
	defer srv.Close()
	base := newBaseTransport(4)
	defer base.CloseIdleConnections()
	ct := &countingTransport{base: base}
	hc := &http.Client{Transport: ct}
	var open []io.Closer
	for i := range 3 {
		resp, err := hc.Get(srv.URL + "/users/1")
		require.NoError(t, err)
		if i == 0 {
			resp.Body.Close()
			resp.Body.Close() // a second Close is not counted twice
		} else {
			open = append(open, resp.Body)
		}
	}
	assert.Equal(t, int64(2), ct.leaked())
	_, ok := ct.firstSent("r1")
	assert.False(t, ok, "requests without an id are not tracked")
	for _, b := range open {
		b.Close()
	}
	assert.Equal(t, int64(0), ct.leaked())
}

func TestCountingTransportNotesTheFirstAttempt(t *testing.T) {
	srv := throttletest.NewServer(throttletest.Config{})
	defer srv.Close()
	base := newBaseTransport(4)
	defer base.CloseIdleConnections()
	ct := &countingTransport{base: base}
	send := func() {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/users/1", nil)
		require.NoError(t, err)
		req.Header.Set(throttletest.HeaderRequestID, "r1")
		resp, err := ct.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	before := time.Now()
	send()
	after := time.Now()
	send() // a retry of the same request
	sent, ok := ct.firstSent("r1")
	require.True(t, ok)
	assert.False(t, sent.Before(before) || sent.After(after), "first sent at %v, want within [%v, %v]", sent, before, after)
}

func TestScenarioTargets(t *testing.T) {
	if err := canListen("127.0.0.2"); err != nil {
		t.Skipf("127.0.0.2 is not available here: %v", err)
	}
	srv := throttletest.NewServer(throttletest.Config{Hosts: []string{"127.0.0.1", "127.0.0.2"}})
	defer srv.Close()
	byKey := map[string]scenario{}
	for _, s := range scenarios {
		byKey[s.key] = s
	}
	tests := []struct {
		scenario, method string
		i                int
		wantURL          string
		wantThrottled    bool
	}{
		{"a", "GET", 7, srv.URL + "/users/7", true},
		{"a", "POST", 7, srv.URL + "/users", true},
		{"c-paths", "GET", 2, srv.URL + "/mail/messages/2", true},
		{"c-paths", "GET", 3, srv.URL + "/files/items/3", false},
		{"c-paths", "POST", 3, srv.URL + "/files/items", false},
		{"c-hosts", "GET", 4, srv.URLs[0] + "/users/4", true},
		{"c-hosts", "GET", 5, srv.URLs[1] + "/users/5", false},
	}
	for _, tt := range tests {
		url, throttled := byKey[tt.scenario].target(srv, tt.method, tt.i)
		assert.Equal(t, tt.wantURL, url, "%s %s %d", tt.scenario, tt.method, tt.i)
		assert.Equal(t, tt.wantThrottled, throttled, "%s %s %d", tt.scenario, tt.method, tt.i)
	}
	assert.True(t, strings.HasPrefix(srv.URLs[1], "http://127.0.0.2:"))
}

// Without a throttle every client must send each request exactly once,
// get it through with its body intact and leave nothing behind: the
// harness measures the clients, not itself.
func TestRunWithoutThrottleIsClean(t *testing.T) {
	open := scenario{
		key:    "open",
		config: func(params) throttletest.Config { return throttletest.Config{} },
		target: func(srv *throttletest.Server, method string, i int) (string, bool) {
			return item(srv.URL, method, "users", i), true
		},
		limit: func(params) time.Duration { return time.Second },
	}
	p := params{n: 20, c: 4, rate: 1, burst: 1, outage: time.Second, reqTimeout: 10 * time.Second,
		runTimeout: 20 * time.Second, heldAfter: time.Second}
	for _, cl := range clients {
		for _, m := range []string{"GET", "POST"} {
			r, err := run(cl, open, workload{}, m, p)
			require.NoError(t, err)
			assert.Equal(t, p.n, r.succeeded, "%s %s: %s", cl.key, m, r.firstErr)
			assert.Equal(t, p.n, r.attempts, "%s %s", cl.key, m)
			assert.Len(t, r.completions, p.n)
			assert.Zero(t, r.leaked, "%s %s", cl.key, m)
			assert.Zero(t, r.badBody, "%s %s", cl.key, m)
		}
	}
}

func TestReportsAreWritten(t *testing.T) {
	p := params{n: 4, c: 2, rate: 2, burst: 1, outage: time.Second, reqTimeout: time.Second, runTimeout: time.Second, heldAfter: time.Second}
	var groups []group
	plain := 0
	for _, sc := range scenarios {
		if sc.workloads {
			continue // in RESULTS-real.md
		}
		plain++
		g := group{scenario: sc, method: "GET"}
		for _, cl := range clients {
			g.results = append(g.results, result{client: cl, scenario: sc, method: "GET", p: p, limit: sc.limit(p),
				succeeded: 3, errored: 1, attempts: 6, throttled: 2, wall: 3 * time.Second, firstErr: "boom\nbang",
				open:        openAPI{n: 2, held: 1, maxHold: 700 * time.Millisecond},
				completions: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}})
		}
		groups = append(groups, g)
	}
	var b strings.Builder
	writeTable(&b, groups[2], p)
	table := b.String()
	assert.Contains(t, table, "### (c) two APIs on one host, paths share no leading segment, GET")
	assert.Contains(t, table, "physical limit 1.00 s (2 throttled requests at 2/s, burst 1)")
	assert.Contains(t, table, "| ours (default) | 3 | 0 | 1 | 1.50 | 0.50 | 3.00 s | 3.00x |")
	assert.Contains(t, table, "| 1 of 2 | 0.70 s |")
	assert.Contains(t, table, "- failsafe-go, first of 1 errors: `boom bang`")

	dir := t.TempDir()
	require.NoError(t, writeChart(dir+"/chart.png", p, groups, []string{"GET"}))
	require.NoError(t, writeResults(dir+"/RESULTS.md", "chart.png", "go run .", "load average 1.00 before", p, groups))
	png, err := os.ReadFile(dir + "/chart.png")
	require.NoError(t, err)
	assert.Equal(t, "\x89PNG", string(png[:4]))
	md, err := os.ReadFile(dir + "/RESULTS.md")
	require.NoError(t, err)
	assert.Contains(t, string(md), "![completed requests over time](chart.png)")
	assert.Contains(t, string(md), ", load average 1.00 before.")
	assert.Contains(t, string(md), "| ours (default) | 1.50 | 1.50x | 1 |")
	assert.Equal(t, plain, strings.Count(string(md), "\n### "))
	assert.NotContains(t, string(md), "nginx")
}

// Without a throttle every client gets every item of every batch through
// in one attempt: the batch runner counts items, not batches.
func TestRunBatchWithoutThrottleIsClean(t *testing.T) {
	open := scenario{
		key:    "open-batch",
		config: func(params) throttletest.Config { return throttletest.Config{} },
		limit:  func(params) time.Duration { return time.Second },
		batch:  true,
	}
	p := params{n: 45, c: 2, rate: 1, burst: 1, outage: time.Second, reqTimeout: 10 * time.Second,
		runTimeout: 20 * time.Second, heldAfter: time.Second}
	for _, cl := range clients {
		for _, m := range []string{"GET", "POST"} {
			r, err := run(cl, open, workload{}, m, p)
			require.NoError(t, err)
			assert.Equal(t, p.n, r.succeeded, "%s %s: %s", cl.key, m, r.firstErr)
			assert.Equal(t, p.n, r.attempts, "%s %s: one attempt per item", cl.key, m)
			assert.Len(t, r.completions, p.n)
			assert.Zero(t, r.leaked, "%s %s", cl.key, m)
		}
	}
}

// The batch scenario's budgets are per mailbox: item i of the workload
// draws from mailbox i mod 10 only.
func TestBatchItemsMailboxes(t *testing.T) {
	items := batchItems("GET", 18, 22)
	require.Len(t, items, 4)
	assert.Equal(t, batchItem{ID: "18", Method: "GET", URL: "/users/mbx8/messages/18"}, items[0])
	assert.Equal(t, "/users/mbx1/messages/21", items[3].URL)
	rule := mailboxRule(params{rate: 400})
	for path, want := range map[string]string{"/v1.0/users/mbx8/messages/18": "mbx8", "/v1.0/users/mbx1": "mbx1"} {
		key, ok := rule.Match(&http.Request{URL: &url.URL{Path: path}})
		assert.True(t, ok, path)
		assert.Equal(t, want, key, path)
	}
	_, ok := rule.Match(&http.Request{URL: &url.URL{Path: "/v1.0/me"}})
	assert.False(t, ok)
}

// Behind a real limiter the client's transport counts what the server
// cannot see: attempts, refusals and attempts sent before Retry-After.
func TestCountingTransportCountsRefusals(t *testing.T) {
	srv := throttletest.NewServer(throttletest.Config{Bucket: throttletest.Bucket{Rate: 0.001, Burst: 1}})
	defer srv.Close()
	base := newBaseTransport(4)
	defer base.CloseIdleConnections()
	ct := &countingTransport{base: base}
	for range 3 {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/users/1", nil)
		require.NoError(t, err)
		req.Header.Set(throttletest.HeaderRequestID, "r1")
		resp, err := ct.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	c := ct.counts()["r1"]
	assert.Equal(t, 3, c.attempts)
	assert.Equal(t, 2, c.refused)
	assert.Equal(t, 1, c.early, "the third attempt came at once after a Retry-After of whole seconds")
	assert.Equal(t, srv.Stats().Early, c.early, "the server agrees")
}

func TestRealResultsAreWritten(t *testing.T) {
	p := params{n: 2000, c: 200, rate: 400, burst: 40}
	w, err := parseWorkload("mailbox/50")
	require.NoError(t, err)
	var groups []group
	for _, sc := range realScenarios {
		q := sc.sized(p)
		g := group{scenario: sc, workload: w, method: "POST"}
		g.results = append(g.results, result{client: clients[5], scenario: sc, workload: w, method: "POST", p: q, limit: sc.limit(q),
			succeeded: q.n, attempts: q.n * 11 / 10, throttled: q.n / 10, wall: 2 * sc.limit(q), early: 1, leaked: 2})
		groups = append(groups, g)
	}
	path := t.TempDir() + "/RESULTS-real.md"
	require.NoError(t, writeRealResults(path, "go run . -x", "load average 1.00 before", p, groups))
	md, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(md), "| nginx-ra | mailbox/50 | POST | ours (default) | 2.00x | 1.10 | 0.10 | 0 | 0 | 2 | 1 | 9.79 s | 4.90 s |")
	assert.Contains(t, string(md), "- **haproxy** (HAProxy stick-table sliding window, 429 with Retry-After: 1):")
	assert.Contains(t, string(md), "Each zone against its own physical limit")
}
