package throttle

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// BenchmarkHostMemory measures what the queue keeps per host: one that
// only answered successes (its wave count), and one throttled once on a
// Graph URL (its URL, path and budget-tree nodes), within and after the
// recovery window. Run with
// -benchtime=1x: each run adds hosts.N hosts and reports bytes per host.
func BenchmarkHostMemory(b *testing.B) {
	const hosts = 20000
	for _, tt := range []struct {
		name      string
		outcome   Outcome
		recovered bool // measured once the recovery window has passed
	}{
		{"idle", Succeeded, false},
		{"throttled", Throttled, false},
		{"idle, after recovery", Succeeded, true},
		{"throttled, after recovery", Throttled, true},
	} {
		b.Run(tt.name, func(b *testing.B) {
			for b.Loop() {
				clk := clocktest.New(t0)
				q := New(clk, options.QueueOptions{})
				reqs := make([]*http.Request, hosts)
				for i := range reqs {
					reqs[i], _ = http.NewRequest(http.MethodGet, fmt.Sprintf("https://h%d.test/v1.0/users/%d/messages", i, i), nil)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for _, r := range reqs {
					q.Report(r, Pass{Sent: t0}, tt.outcome, time.Second, nil, clk.Now)
				}
				if tt.recovered {
					// Past every recovery window, the next host's answer
					// sweeps the idle ones.
					clk.Advance(time.Minute)
					next, _ := http.NewRequest(http.MethodGet, "https://next.test/", nil)
					q.Report(next, Pass{Sent: clk.Now()}, Succeeded, 0, nil, clk.Now)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/hosts, "B/host")
				runtime.KeepAlive(q)
				runtime.KeepAlive(reqs)
			}
		})
	}
}

// maxForgottenBytes is the bound on what a host seen once keeps
// once every recovery window has passed: nothing but noise, as it is
// forgotten.
const maxForgottenBytes = 200

// TestForgottenHostsMemory runs the state probe: 20,000 hosts
// each answer one request (some throttled once), then every recovery
// window passes and one more answer comes, from a host new or known. The
// hosts seen once are then forgotten: at most maxForgottenBytes a host
// stay, and no map entry. Whichever host answers sweeps, so that a queue
// serving only hosts it knows still forgets the idle ones.
func TestForgottenHostsMemory(t *testing.T) {
	const hosts = 20000
	tests := []struct {
		name string
		// outcome is host i's answer.
		outcome func(i int) Outcome
		// next is the host of the answer after the windows.
		next string
	}{
		{"served once, then a new host", func(int) Outcome { return Succeeded }, "https://next.test/v1.0/me"},
		{"served once, then a known host", func(int) Outcome { return Succeeded }, "https://known.test/v1.0/me"},
		{"throttled once, then a known host", func(int) Outcome { return Throttled }, "https://known.test/v1.0/me"},
		{"one in two throttled, then a known host", func(i int) Outcome { return Outcome(1 + i%2) }, "https://known.test/v1.0/me"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{})
			answer := func(req *http.Request, o Outcome) {
				p, err := q.Admit(context.Background(), req, time.Time{}, time.Time{}, nil)
				require.NoError(t, err)
				clk.Advance(time.Millisecond)
				q.Report(req, p, o, time.Second, nil, clk.Now)
			}
			answer(get(t, "https://known.test/v1.0/me", ""), Succeeded)
			reqs := make([]*http.Request, hosts)
			for i := range reqs {
				reqs[i] = get(t, fmt.Sprintf("https://h%d.test/v1.0/users/%d/messages", i, i), "")
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i, r := range reqs {
				answer(r, tt.outcome(i))
				if i%1000 == 0 {
					// Known is still known when the windows have passed.
					answer(get(t, "https://known.test/v1.0/me", ""), Succeeded)
				}
			}
			clk.Advance(time.Minute) // past every recovery window
			answer(get(t, tt.next, ""), Succeeded)
			runtime.GC()
			runtime.ReadMemStats(&after)
			perHost := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / hosts
			kept := 0
			q.hosts.Range(func(any, any) bool { kept++; return true })
			t.Logf("%.1f B a host, %d hosts kept", perHost, kept)
			assert.LessOrEqual(t, perHost, float64(maxForgottenBytes), "bytes a host seen once keeps")
			assert.LessOrEqual(t, kept, 1, "hosts kept: at most the one that answered last")
			runtime.KeepAlive(q)
			runtime.KeepAlive(reqs)
		})
	}
}
