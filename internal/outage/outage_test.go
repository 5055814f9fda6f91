package outage

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const api = "graph.test"

// passed is what one Admit returned, and when.
type passed struct {
	id  int
	err error
	at  time.Duration // after t0
	t   Ticket
}

// gate runs Admit calls in a synctest bubble on a fake clock and records
// when each returns. Arrival order is the order of admit calls.
type gate struct {
	t       *testing.T
	hs      *Hosts
	clk     *clocktest.Clock
	n       int
	cancels []context.CancelFunc
	mu      sync.Mutex
	out     []passed
	states  []string // "state@offset", from OnStateChange
}

func newGate(t *testing.T) *gate {
	g := &gate{t: t, clk: clocktest.New(t0)}
	g.hs = New(g.clk, options.OutageOptions{OnStateChange: func(host string, s options.HostState, at time.Time) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.states = append(g.states, s.String()+"@"+at.Sub(t0).String())
	}}, nil)
	return g
}

// admit starts request id's Admit and waits until it blocks or returns.
func (g *gate) admit(a Attempt) (id int) {
	g.t.Helper()
	id = g.n
	g.n++
	ctx, cancel := context.WithCancel(context.Background())
	g.t.Cleanup(cancel)
	g.cancels = append(g.cancels, cancel)
	go func() {
		tk, err := g.hs.Admit(ctx, api, a, nil)
		g.mu.Lock()
		g.out = append(g.out, passed{id, err, g.clk.Now().Sub(t0), tk})
		g.mu.Unlock()
	}()
	synctest.Wait()
	return id
}

// done returns the Admits that have returned so far, in order.
func (g *gate) done() []passed {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.out)
}

func (g *gate) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.states)
}

// advance moves the clock by d, firing timers on the way in order.
func (g *gate) advance(d time.Duration) {
	end := g.clk.Now().Add(d)
	for {
		synctest.Wait()
		p := g.clk.Pending()
		if len(p) == 0 || g.clk.Now().Add(p[0]).After(end) {
			g.clk.Advance(end.Sub(g.clk.Now()))
			synctest.Wait()
			return
		}
		g.clk.Advance(p[0])
	}
}

// fail reports n failed attempts to the host.
func (g *gate) fail(n int) {
	for range n {
		g.hs.Report(api, Ticket{}, Failed, 0)
	}
}

// warm makes api a host that answered once, past its cold start.
func warm(t *testing.T, hs *Hosts) {
	t.Helper()
	tk, err := hs.Admit(context.Background(), api, Attempt{First: true}, nil)
	require.NoError(t, err)
	hs.Report(api, tk, Answered, 0)
	_, ok := hs.Pass(api, Attempt{})
	require.True(t, ok, "warm")
}

// down brings the host down at the current time: a warm host, then
// downAfter failures.
func (g *gate) down() {
	g.t.Helper()
	warm(g.t, g.hs)
	g.fail(downAfter)
	require.Equal(g.t, options.HostDown, g.hs.State(api))
}

func TestDownAfterFailuresInARow(t *testing.T) {
	tests := []struct {
		name    string
		reports []Outcome
		want    options.HostState
	}{
		{"one short of the streak", slices.Repeat([]Outcome{Failed}, downAfter-1), options.HostUp},
		{"the streak", slices.Repeat([]Outcome{Failed}, downAfter), options.HostDown},
		{"an answer breaks the streak", append(append(slices.Repeat([]Outcome{Failed}, downAfter-1), Answered), slices.Repeat([]Outcome{Failed}, downAfter-1)...), options.HostUp},
		{"no answer says nothing", append(append(slices.Repeat([]Outcome{Failed}, downAfter-1), NoAnswer), Failed), options.HostDown},
		{"an attempt never sent says nothing", append(append(slices.Repeat([]Outcome{Failed}, downAfter-1), Unsent), Failed), options.HostDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			hs := New(clk, options.OutageOptions{}, nil)
			warm(t, hs)
			for _, o := range tt.reports {
				hs.Report(api, Ticket{}, o, 0)
			}
			assert.Equal(t, tt.want, hs.State(api))
		})
	}
}

// TestProbeOneAtATime: a host that is down holds its requests; the first
// ready one probes at once, and a failed probe sets the next one the
// probing request's backoff later, capped at MaxProbeInterval.
func TestProbeOneAtATime(t *testing.T) {
	tests := []struct {
		name    string
		backoff time.Duration // the probing request's own next delay
		next    time.Duration // when the second probe goes
	}{
		{"the backoff", 300 * time.Millisecond, 300 * time.Millisecond},
		{"capped", 3 * time.Second, time.Second},
		{"unknown: the cap", 0, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newGate(t)
				g.down()
				a := g.admit(Attempt{NotBefore: t0, First: true})
				b := g.admit(Attempt{NotBefore: t0, First: true})
				c := g.admit(Attempt{NotBefore: t0.Add(time.Hour), AfterFailure: true}) // in its backoff
				got := g.done()
				require.Len(t, got, 1, "one probe, the others held")
				assert.Equal(t, a, got[0].id)
				assert.True(t, got[0].t.Probe)
				assert.Equal(t, options.HostProbing, g.hs.State(api))

				g.hs.Report(api, got[0].t, Failed, tt.backoff)
				assert.Equal(t, options.HostDown, g.hs.State(api))
				g.advance(tt.next - time.Nanosecond)
				assert.Len(t, g.done(), 1, "no probe before the spacing")
				g.advance(time.Nanosecond)
				got = g.done()
				require.Len(t, got, 2)
				assert.Equal(t, passed{id: b, at: tt.next, t: got[1].t}, got[1], "the next ready request probes")
				assert.True(t, got[1].t.Probe)
				assert.Equal(t, []string{"down@0s", "probing@0s", "down@0s", "probing@" + tt.next.String()}, g.seen())
				_ = c
			})
		})
	}
}

// TestRecoveryReleasesEveryoneThroughTheRamp: when a probe is answered the
// host is up, and every held request goes in arrival order through the
// ramp, even one whose own backoff has not run out; a retry of a throttle
// keeps the server's word.
func TestRecoveryReleasesEveryoneThroughTheRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t)
		g.down()
		probe := g.admit(Attempt{NotBefore: t0, First: true})
		var held []int
		for range 20 {
			held = append(held, g.admit(Attempt{NotBefore: t0, First: true}))
		}
		early := g.admit(Attempt{NotBefore: t0.Add(time.Hour), AfterFailure: true})
		throttled := g.admit(Attempt{NotBefore: t0.Add(time.Hour)})
		got := g.done()
		require.Len(t, got, 1)
		require.Equal(t, probe, got[0].id)

		g.advance(500 * time.Millisecond)
		g.hs.Report(api, got[0].t, Answered, 0)
		assert.Equal(t, options.HostUp, g.hs.State(api))
		g.advance(time.Second)

		got = g.done()[1:]
		require.Len(t, got, 21, "all but the throttled retry went")
		var r ramp
		for i, p := range got {
			want := held
			want = append(want, early)
			assert.Equal(t, want[i], p.id, "arrival order")
			assert.Equal(t, 500*time.Millisecond+r.at(i), p.at, "release %d in the ramp", i)
			assert.Equal(t, p.id == early, p.t.Early, "woken early")
		}
		g.advance(time.Hour)
		last := g.done()[22]
		assert.Equal(t, passed{id: throttled, at: time.Hour, t: last.t}, last, "a throttle's wait is kept")
	})
}

// TestRampShape pins down the slow start: ten releases in the first step,
// the rate doubling each step, and about 1,400 released by its end.
func TestRampShape(t *testing.T) {
	var r ramp
	count := func(e time.Duration) int {
		n := 0
		for r.at(n) < e {
			n++
		}
		return n
	}
	assert.Equal(t, 15, count(rampStep), "ten a step at the start rate, a little more as it climbs")
	assert.InDelta(t, 2*count(rampStep), count(2*rampStep)-count(rampStep), 2, "the second step doubles the first")
	assert.InDelta(t, 1428, count(rampLength), 2)
	assert.Equal(t, 664*time.Millisecond, rampLength.Round(time.Millisecond))
	assert.InDelta(t, rampLength+time.Duration(float64(time.Second)/rampEnd), r.at(int(rampReleases)+1), float64(time.Millisecond/10), "past the end, at rampEnd")
}

// TestDownAgainDuringTheRamp: a host that fails again while its held
// requests are released holds the rest again.
func TestDownAgainDuringTheRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t)
		g.down()
		g.admit(Attempt{NotBefore: t0, First: true}) // the probe
		for range 100 {
			g.admit(Attempt{NotBefore: t0, First: true})
		}
		g.hs.Report(api, g.done()[0].t, Answered, 0)
		g.advance(rampStep)
		released := len(g.done())
		require.Less(t, released, 50, "the ramp paces them")
		g.fail(downAfter)
		synctest.Wait()
		// Down again, and its first held request probes at once. The two
		// are told from two goroutines, each after its own unlock
		// (options.OutageOptions.OnStateChange), in either order.
		at := rampStep.String()
		seen := g.seen()
		require.Len(t, seen, 5)
		assert.Equal(t, []string{"down@0s", "probing@0s", "up@0s"}, seen[:3])
		assert.ElementsMatch(t, []string{"down@" + at, "probing@" + at}, seen[3:])
		g.advance(time.Second - time.Nanosecond)
		assert.Equal(t, released+1, len(g.done()), "held again: one probe only")
	})
}

func TestRetryBudget(t *testing.T) {
	tests := []struct {
		name     string
		requests int     // requests started besides warm's one
		ended    bool    // and ended before the retries
		reported int     // of the first retries made, reported
		outcome  Outcome // as this
		asked    int
		want     int
	}{
		{"the reserve and warm's half", 0, false, 0, Answered, 15, budgetReserve},
		{"each active request adds half a retry", 6, false, 0, Answered, 20, budgetReserve + 3},
		{"an answered retry gives its token back", 0, false, 3, Answered, 15, budgetReserve + 3},
		{"a retry never sent gives its token back", 0, false, 3, Unsent, 15, budgetReserve + 3},
		{"a failed retry keeps it", 0, false, 3, Failed, 15, budgetReserve},
		{"a retry canceled on its way keeps it", 0, false, 3, NoAnswer, 15, budgetReserve},
		{"ended requests no longer count", 6, true, 0, Answered, 20, budgetReserve},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			hs := New(clk, options.OutageOptions{}, nil)
			warm(t, hs)
			var started []Ticket
			for range tt.requests {
				tk, ok := hs.Pass(api, Attempt{NotBefore: clk.Now(), First: true})
				require.True(t, ok)
				started = append(started, tk)
			}
			if tt.ended {
				for _, tk := range started {
					hs.Done(tk)
				}
			}
			made := 0
			for range tt.asked {
				tk, err := hs.Admit(context.Background(), api, Attempt{NotBefore: clk.Now(), AfterFailure: true}, nil)
				if err != nil {
					require.ErrorIs(t, err, ErrBudget)
					continue
				}
				if made < tt.reported {
					hs.Report(api, tk, tt.outcome, 0)
				}
				made++
			}
			assert.Equal(t, tt.want, made)
		})
	}
}

// TestColdStart: a host never heard from gets downAfter first attempts;
// the rest wait for its first answer, at most coldWait.
func TestColdStart(t *testing.T) {
	tests := []struct {
		name   string
		answer bool // the first answer comes at 10 ms
		want   time.Duration
	}{
		{"opened by the first answer", true, 10 * time.Millisecond},
		{"opened after coldWait without one", false, coldWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newGate(t)
				for range downAfter + 1 {
					g.admit(Attempt{NotBefore: t0, First: true})
				}
				got := g.done()
				require.Len(t, got, downAfter)
				g.advance(10 * time.Millisecond)
				if tt.answer {
					g.hs.Report(api, got[0].t, Answered, 0)
				}
				g.advance(time.Second)
				got = g.done()
				require.Len(t, got, downAfter+1)
				assert.Equal(t, tt.want, got[downAfter].at)
			})
		})
	}
}

// TestHoldEndsWithinTheRequestsLimits: a held request is refused when its
// deadline comes (R23), or at once when its own time is past it; the
// error says until when.
func TestHoldEndsWithinTheRequestsLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t)
		g.down()
		g.admit(Attempt{NotBefore: t0, First: true}) // the probe, out until 1 s
		// Next to probe, at 1 s: past its deadline, refused at once.
		soon := g.admit(Attempt{NotBefore: t0, Deadline: t0.Add(300 * time.Millisecond), First: true})
		got := g.done()
		require.Len(t, got, 2)
		assert.Equal(t, soon, got[1].id)
		assert.Zero(t, got[1].at, "no time waited")
		var hold *HoldError
		require.ErrorAs(t, got[1].err, &hold)
		assert.ErrorIs(t, got[1].err, ErrHoldTooLong)
		assert.Equal(t, t0.Add(time.Second), hold.Until, "the next probe")

		// Behind the next prober, with no time to go by: refused when its
		// deadline comes.
		g.admit(Attempt{NotBefore: t0, First: true})
		behind := g.admit(Attempt{NotBefore: t0, Deadline: t0.Add(300 * time.Millisecond), First: true})
		g.advance(300 * time.Millisecond)
		got = g.done()
		require.Len(t, got, 3)
		assert.Equal(t, behind, got[2].id)
		assert.Equal(t, 300*time.Millisecond, got[2].at)
		require.ErrorAs(t, got[2].err, &hold)
		assert.Equal(t, t0.Add(time.Second), hold.Until, "the next probe")

		// Handed back: refused at once, however far its deadline.
		g.admit(Attempt{NotBefore: g.clk.Now(), First: true, HandBack: true})
		got = g.done()
		require.Len(t, got, 4)
		assert.Equal(t, 300*time.Millisecond, got[3].at, "no time waited")
		require.ErrorAs(t, got[3].err, &hold)
		assert.Equal(t, t0.Add(time.Second), hold.Until, "the next probe")
	})
}

// TestColdStartIsNotHandedBack: a first attempt waiting for a new host's
// first answer is not handed back: the host is not known to be down.
func TestColdStartIsNotHandedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t)
		for range downAfter + 1 {
			g.admit(Attempt{NotBefore: t0, First: true, HandBack: true})
		}
		require.Len(t, g.done(), downAfter)
		g.hs.Report(api, g.done()[0].t, Answered, 0)
		synctest.Wait()
		got := g.done()
		require.Len(t, got, downAfter+1)
		assert.NoError(t, got[downAfter].err)
	})
}

// TestCanceledProbeLetsAnotherGo: a probe that gets no answer frees the
// slot at once.
func TestCanceledProbeLetsAnotherGo(t *testing.T) {
	for name, o := range map[string]Outcome{"canceled on its way": NoAnswer, "never sent": Unsent} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newGate(t)
				g.down()
				g.admit(Attempt{NotBefore: t0, First: true})
				next := g.admit(Attempt{NotBefore: t0, First: true})
				g.hs.Report(api, g.done()[0].t, o, 0)
				synctest.Wait()
				got := g.done()
				require.Len(t, got, 2)
				assert.Equal(t, next, got[1].id)
				assert.True(t, got[1].t.Probe)
			})
		})
	}
}

// TestCanceledWaiterLeaves: a held request whose context ends leaves the
// line, and the next ready one becomes the prober.
func TestCanceledWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t)
		g.down()
		g.admit(Attempt{NotBefore: t0, First: true})
		g.hs.Report(api, g.done()[0].t, Failed, time.Second)
		elected := g.admit(Attempt{NotBefore: t0, First: true})
		next := g.admit(Attempt{NotBefore: t0, First: true})
		g.cancels[elected]()
		synctest.Wait()
		g.advance(time.Second)
		got := g.done()
		require.Len(t, got, 3)
		assert.ErrorIs(t, got[1].err, context.Canceled)
		assert.Equal(t, next, got[2].id)
		assert.True(t, got[2].t.Probe)
		assert.Empty(t, g.clk.Pending(), "timers left")
	})
}

// A host is not forgotten by a sweep that runs as it is created: its first
// request's Pass sees it cold, and its Admit finds it still there.
func TestNewHostOutlivesASweep(t *testing.T) {
	clk := clocktest.New(t0.Add(time.Hour))
	hs := New(clk, options.OutageOptions{}, nil)
	_, ok := hs.Pass(api, Attempt{First: true})
	require.False(t, ok, "a new host starts cold")
	// Another host's creation sweeps, as if the last sweep were long ago.
	hs.swept.Store(0)
	_, ok = hs.Pass("other.test", Attempt{First: true})
	require.False(t, ok)
	require.NotNil(t, hs.lookup(api), "seen at its creation")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hs.hosts.Delete(api) // forgotten all the same, between Pass and Admit
	assert.NotPanics(t, func() { _, _ = hs.Admit(ctx, api, Attempt{First: true}, nil) })
}
