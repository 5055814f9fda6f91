package throttle

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// itemAnswer is one item of a batch as the server answered it.
type itemAnswer struct {
	path    string // below graph
	outcome Outcome
	hold    time.Duration
}

// throttledPacer releases one request every `every` once its scope was
// throttled, and paces nothing before: a scope made only to hold a request
// is not paced.
type throttledPacer struct {
	fixedPacer
	on bool
}

func (p *throttledPacer) next(now time.Time) time.Time {
	if !p.on {
		return now
	}
	return p.fixedPacer.next(now)
}
func (p *throttledPacer) throttled(time.Time, time.Time, time.Time) { p.on = true }

// reportItems reports the items of a batch sent at sent and answered now.
func reportItems(t *testing.T, q *Queue, clk *clocktest.Clock, sent time.Time, items ...itemAnswer) {
	t.Helper()
	for _, it := range items {
		req, err := http.NewRequest(http.MethodGet, graph+it.path, nil)
		require.NoError(t, err)
		q.ReportItem(req, sent, it.outcome, it.hold, nil, clk.Now)
	}
}

// releases advances clk from timer to timer until every admit is done,
// and returns when each went, after t0.
func releases(t *testing.T, clk *clocktest.Clock, admits []<-chan admitted) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(admits))
	for i, c := range admits {
		for {
			synctest.Wait()
			if a, ok := ready(t, c); ok {
				require.NoError(t, a.err)
				out[i] = a.at
				break
			}
			p := clk.Pending()
			require.NotEmpty(t, p, "admit %d blocked with no timer to wake it", i)
			clk.Advance(p[0])
		}
	}
	return out
}

// TestReportItemHolds checks that the throttled items of a batch hold
// single requests as throttled requests do: their own URL for the
// Retry-After, their scope paced at its rate, a hold inferred from shared
// segments tested by one probe; and that nothing else is held.
func TestReportItemHolds(t *testing.T) {
	const (
		s       = time.Second
		mailbox = "/v1.0/users/u1/messages/"
	)
	tests := []struct {
		name   string
		items  []itemAnswer
		admits []string // sent in this order at t0
		want   []time.Duration
	}{
		{
			name:   "its own URL until its Retry-After",
			items:  []itemAnswer{{mailbox + "1", Throttled, 5 * s}, {mailbox + "2", Succeeded, 0}},
			admits: []string{mailbox + "1"},
			want:   []time.Duration{5 * s},
		},
		{
			name:   "another URL of its scope paced, not held",
			items:  []itemAnswer{{mailbox + "1", Throttled, 5 * s}},
			admits: []string{mailbox + "2", mailbox + "3", mailbox + "4"},
			want:   []time.Duration{0, s, 2 * s},
		},
		{
			name:   "another scope neither held nor paced",
			items:  []itemAnswer{{mailbox + "1", Throttled, 5 * s}},
			admits: []string{"/v1.0/users/u2/messages/1", "/v1.0/users/u2/messages/2"},
			want:   []time.Duration{0, 0},
		},
		{
			name:   "two throttled siblings: one probe goes, the next waits for their end",
			items:  []itemAnswer{{mailbox + "1", Throttled, 5 * s}, {mailbox + "2", Throttled, 5 * s}},
			admits: []string{mailbox + "3", mailbox + "4"},
			want:   []time.Duration{0, 5 * s},
		},
		{
			name:   "a successful item holds nothing",
			items:  []itemAnswer{{mailbox + "1", Succeeded, 0}, {mailbox + "2", Succeeded, 0}},
			admits: []string{mailbox + "1", mailbox + "2"},
			want:   []time.Duration{0, 0},
		},
		{
			name:   "a failed item holds nothing",
			items:  []itemAnswer{{mailbox + "1", Failed, 5 * s}},
			admits: []string{mailbox + "1"},
			want:   []time.Duration{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.New(t0)
				q := New(clk, options.QueueOptions{})
				q.newPacer = func(time.Time) pacer { return &throttledPacer{fixedPacer: fixedPacer{every: s}} }
				// A throttled single request elsewhere on the host, so that
				// the host is active whatever the items say.
				q.throttled(targetOf(t, graph+"/v1.0/sites/x"), t0, t0, t0.Add(time.Hour))
				reportItems(t, q, clk, t0, tt.items...)
				var admits []<-chan admitted
				for _, p := range tt.admits {
					admits = append(admits, admit(q, clk, graph+p, t0, time.Time{}))
				}
				assert.Equal(t, tt.want, releases(t, clk, admits))
			})
		})
	}
}

// TestReportItemNeverProbes checks that items, which the queue never
// admitted, leave the probe of an inferred hold alone: a successful item
// does not lift the hold, only the probe's own success does.
func TestReportItemNeverProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mailbox = graph + "/v1.0/users/u1/messages/"
		clk := clocktest.New(t0)
		q := New(clk, options.QueueOptions{})
		q.newPacer = func(time.Time) pacer { return &fixedPacer{} }
		reportItems(t, q, clk, t0,
			itemAnswer{"/v1.0/users/u1/messages/1", Throttled, 10 * time.Second},
			itemAnswer{"/v1.0/users/u1/messages/2", Throttled, 10 * time.Second})

		probe, ok := ready(t, admit(q, clk, mailbox+"3", t0, time.Time{}))
		require.True(t, ok, "the first sibling goes at once")
		require.NoError(t, probe.err)
		require.NotNil(t, probe.pass.probe, "as the probe")
		held := admit(q, clk, mailbox+"4", t0, time.Time{})

		clk.Advance(time.Second)
		reportItems(t, q, clk, t0.Add(500*time.Millisecond), itemAnswer{"/v1.0/users/u1/messages/5", Succeeded, 0})
		synctest.Wait()
		_, ok = ready(t, held)
		require.False(t, ok, "a successful item lifts nothing")

		clk.Advance(time.Second)
		req, err := http.NewRequest(http.MethodGet, mailbox+"3", nil)
		require.NoError(t, err)
		q.Report(req, probe.pass, Succeeded, 0, nil, clk.Now)
		assert.Equal(t, []time.Duration{2 * time.Second}, releases(t, clk, []<-chan admitted{held}), "the probe's success does")
	})
}

// TestReportItemPacing checks that successful items count for the pace of
// their scope as successful requests do: those of the wave before its
// first throttle as its burst, the later ones one by one.
func TestReportItemPacing(t *testing.T) {
	tests := []struct {
		name          string
		before, after int // successful items before and after the throttled one
	}{
		{"a batch's wave", 19, 0},
		{"successes after the throttle", 4, 15},
		{"none before", 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			q := New(clk, options.QueueOptions{})
			rec := &countingPacer{}
			q.newPacer = func(time.Time) pacer { return rec }
			ok := func(i int) itemAnswer {
				return itemAnswer{"/v1.0/users/u1/messages/" + string(rune('a'+i)), Succeeded, 0}
			}
			// One batch answered at t0, the next sent after it.
			sent := t0.Add(-20 * time.Millisecond)
			for i := range tt.before {
				reportItems(t, q, clk, sent, ok(i))
			}
			reportItems(t, q, clk, sent, itemAnswer{"/v1.0/users/u1/messages/z", Throttled, time.Second})
			clk.Advance(30 * time.Millisecond)
			for i := range tt.after {
				reportItems(t, q, clk, t0.Add(10*time.Millisecond), ok(tt.before+i))
			}
			require.Equal(t, 1, rec.throttles)
			assert.Equal(t, tt.before, rec.beforeThrottle, "the wave's successes, as the first throttle's burst")
			assert.Equal(t, tt.after, rec.oneByOne, "later successes, one by one")
			assert.Equal(t, tt.before+tt.after, rec.successes)
		})
	}
}
