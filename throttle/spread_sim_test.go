package throttle

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// mailboxes spreads the workload over k mailbox-like URLs behind one
// bucket: nothing in the URL says they share it.
func mailboxes(k int) func(int) (string, string) {
	return func(i int) (string, string) {
		return http.MethodGet, fmt.Sprintf("https://graph.test/v1.0/users/u%d/messages", i%k)
	}
}

func TestSpreadSimulation(t *testing.T) {
	tests := []struct {
		name  string
		path  func(int) (string, string)
		runs  int
		limit float64 // the most time over the physical limit, the median of runs
	}{
		{"one bucket behind 2000 mailboxes", mailboxes(2000), 1, 1.5},
		// A known miss (docs/benchmarks.md): each mailbox is carved as a
		// budget of its own, and their pacers' sum overruns the bucket
		// until they converge. Over 32 runs: 1.33x-1.78x, median 1.52x; one
		// run in ten past 1.7x, so the case runs five times and bounds
		// their median.
		{"one bucket behind 50 mailboxes", mailboxes(50), 5, 1.7},
		{"one bucket behind 1 mailbox", mailboxes(1), 1, 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var times []float64
			for range tt.runs {
				res := simulate(t, options.QueueOptions{}, simWorkload{path: tt.path})
				t.Logf("attempts/request %.3f, time %.2fx the limit, failed %d, early %d", res.attemptsPerRequest, res.timeOverLimit, res.failed, res.early)
				assert.Zero(t, res.failed)
				assert.Zero(t, res.early)
				assert.LessOrEqual(t, res.attemptsPerRequest, 1.25)
				times = append(times, res.timeOverLimit)
			}
			slices.Sort(times)
			assert.LessOrEqual(t, times[len(times)/2], tt.limit)
		})
	}
}
