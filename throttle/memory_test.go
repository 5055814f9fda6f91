package throttle

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

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
