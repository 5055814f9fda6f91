package throttle

import (
	"fmt"
	"net/http"
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
		limit float64
	}{
		{"one bucket behind 2000 mailboxes", mailboxes(2000), 1.5},
		{"one bucket behind 50 mailboxes", mailboxes(50), 1.7},
		{"one bucket behind 1 mailbox", mailboxes(1), 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := simulate(t, options.QueueOptions{}, simWorkload{path: tt.path})
			t.Logf("attempts/request %.3f, time %.2fx the limit, failed %d, early %d", res.attemptsPerRequest, res.timeOverLimit, res.failed, res.early)
			assert.Zero(t, res.failed)
			assert.Zero(t, res.early)
			assert.LessOrEqual(t, res.attemptsPerRequest, 1.25)
			assert.LessOrEqual(t, res.timeOverLimit, tt.limit)
		})
	}
}
