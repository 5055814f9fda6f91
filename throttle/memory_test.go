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
// only answered successes (its wave counts), and one throttled once on a
// Graph URL (its URL, path, prefixes, scope and pacer). Run with
// -benchtime=1x: each run adds hosts.N hosts and reports bytes per host.
func BenchmarkHostMemory(b *testing.B) {
	const hosts = 20000
	for _, tt := range []struct {
		name    string
		outcome Outcome
	}{
		{"idle", Succeeded},
		{"throttled", Throttled},
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
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/hosts, "B/host")
				runtime.KeepAlive(q)
				runtime.KeepAlive(reqs)
			}
		})
	}
}
