package throttle

import (
	"cmp"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// tallied returns a window that has served, with the throttles and
// successes given by how many others were out when each went: each
// success took serve, each throttle 2 ms.
func tallied(throttled, ok map[int]int32, serve time.Duration) window {
	w := window{served: time.Unix(1, 0)}
	for k, n := range throttled {
		w.throttled[k] = n
		w.throttledFor += time.Duration(n) * 2 * time.Millisecond
	}
	for k, n := range ok {
		w.ok[k] = n
		w.okFor += time.Duration(n) * serve
	}
	return w
}

func TestWindowLearn(t *testing.T) {
	for _, tc := range []struct {
		name          string
		throttled, ok map[int]int32
		// fast serves as quickly as it refuses; a request takes 50 ms
		// otherwise.
		fast bool
		want int // the cap learned, 0 for none
	}{
		{
			// Outlook's 4 per mailbox in virtual time: the served went
			// with 3 out at most but for answers on their way back.
			name:      "a cap of four",
			throttled: map[int]int32{4: 5, 5: 7, 6: 5, 7: 4},
			ok:        map[int]int32{0: 2, 1: 17, 2: 32, 3: 591, 4: 5, 5: 3, 6: 5, 7: 6},
			want:      4,
		},
		{
			name:      "one throttle below the cap is noise",
			throttled: map[int]int32{3: 1, 4: 9},
			ok:        map[int]int32{1: 10, 2: 10, 3: 10},
			want:      4,
		},
		{
			// Outlook's cap on loopback: the search's one throttle, the
			// only request of 400 that went with four out.
			name:      "one throttle where almost no request goes",
			throttled: map[int]int32{4: 1},
			ok:        map[int]int32{1: 100, 2: 200, 3: 99},
			want:      4,
		},
		{
			// Both throttles fell where six requests of 21 went: a rate's
			// would, one time in twelve.
			name:      "throttles where many requests go",
			throttled: map[int]int32{4: 2},
			ok:        map[int]int32{1: 5, 2: 5, 3: 5, 4: 4},
		},
		{
			name:      "too few served below the cap",
			throttled: map[int]int32{4: 20},
			ok:        map[int]int32{2: 3, 3: 4},
		},
		{
			// A rate's throttles on a fast server: whatever was out.
			name:      "a rate on a fast server",
			throttled: map[int]int32{0: 30, 1: 12, 2: 3},
			ok:        map[int]int32{0: 300, 1: 120, 2: 30},
		},
		{
			// A rate's on a slow one: a request is refused as often with
			// many out as with few.
			name:      "a rate on a slow server",
			throttled: map[int]int32{2: 2, 3: 4, 4: 5, 5: 4, 6: 2},
			ok:        map[int]int32{2: 20, 3: 40, 4: 50, 5: 40, 6: 20},
		},
		{
			// Most requests refused above the count, but one in nine
			// below it: no step.
			name:      "throttles below the count too",
			throttled: map[int]int32{2: 2, 4: 30},
			ok:        map[int]int32{1: 10, 2: 2, 3: 4, 4: 10},
		},
		{
			name:      "a refusal of every second request with many out",
			throttled: map[int]int32{8: 10},
			ok:        map[int]int32{1: 10, 7: 10, 8: 40},
		},
		{
			name:      "the largest cap",
			throttled: map[int]int32{maxLearnedCap: 20},
			ok:        map[int]int32{10: 30},
			want:      maxLearnedCap,
		},
		{
			name:      "throttles with more out say nothing of a cap",
			throttled: map[int]int32{beyondCap: 20},
			ok:        map[int]int32{10: 30},
		},
		{
			// A burst after a hold, refused by a window, on a server
			// that serves at once.
			name:      "a server serving at once",
			throttled: map[int]int32{4: 5, 5: 7, 6: 5, 7: 4},
			ok:        map[int]int32{0: 2, 1: 17, 2: 32, 3: 591},
			fast:      true,
		},
		{
			name:      "never below minLearnedCap",
			throttled: map[int]int32{1: 20},
			ok:        map[int]int32{0: 30},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serve := 50 * time.Millisecond
			if tc.fast {
				serve = 3 * time.Millisecond
			}
			w := tallied(tc.throttled, tc.ok, serve)
			assert.Equal(t, tc.want != 0, w.learn())
			assert.Equal(t, tc.want, w.limit)
		})
	}
}

func TestWindowTally(t *testing.T) {
	var w window
	start := time.Unix(100, 0)
	w.tally(5, start, true, start.Add(time.Millisecond))
	assert.Zero(t, w.throttled[5], "counted before a release was served")
	w.tally(1, start, false, start.Add(50*time.Millisecond))
	assert.Equal(t, start.Add(50*time.Millisecond), w.served)
	assert.Zero(t, w.ok[1], "the first served only starts the counts")
	w.tally(6, start.Add(10*time.Millisecond), true, start.Add(60*time.Millisecond))
	assert.Zero(t, w.throttled[6], "sent before the first was served: its counts may miss the host's first wave")
	w.tally(6, start.Add(50*time.Millisecond), true, start.Add(60*time.Millisecond))
	w.tally(maxLearnedCap+7, start.Add(50*time.Millisecond), false, start.Add(100*time.Millisecond))
	assert.Equal(t, int32(1), w.throttled[6])
	assert.Equal(t, 10*time.Millisecond, w.throttledFor)
	assert.Equal(t, 50*time.Millisecond, w.okFor)
	assert.Equal(t, int32(1), w.ok[beyondCap], "counts past the largest cap tally together")
}

func TestWindowThrottledWhileCapped(t *testing.T) {
	for _, tc := range []struct {
		name string
		// learned is the tallies' throttles before; the new one, sent
		// with out others out, is tallied before it is judged.
		learned   map[int]int32
		limit     int // 4 when zero
		out       int
		stands    bool
		wantLimit int
	}{
		{name: "a throttle with the cap's count out is the cap's", learned: map[int]int32{4: 9}, out: 4, stands: true, wantLimit: 4},
		{name: "one with more out too", learned: map[int]int32{4: 9}, out: 6, stands: true, wantLimit: 4},
		{
			// A count that lagged the server's by an answer on its way:
			// the tallies still show the cap.
			name: "one throttle below the cap among many at it", learned: map[int]int32{4: 9}, out: 3,
			stands: true, wantLimit: 4,
		},
		{
			// A burst's throttle read a cap of 9 where the server serves
			// 4: the tallies now show what the throttle went with.
			name: "a cap read too high from one throttle", learned: map[int]int32{9: 1}, limit: 9, out: 4,
			stands: true, wantLimit: 4,
		},
		{name: "throttles whatever was out show no cap", learned: map[int]int32{1: 2, 4: 9}, out: 1},
		{name: "a refusal of a request sent alone", learned: map[int]int32{0: 2, 4: 9}, out: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tallied(tc.learned, map[int]int32{1: 10, 2: 10, 3: 10}, 50*time.Millisecond)
			w.limit = cmp.Or(tc.limit, 4)
			w.tally(tc.out, w.served, true, w.served.Add(2*time.Millisecond))
			assert.Equal(t, tc.stands, w.throttledWhileCapped(tc.out))
			assert.Equal(t, tc.wantLimit, w.limit)
			if !tc.stands {
				assert.Zero(t, w.throttled[4], "its evidence goes with it")
				assert.False(t, w.served.IsZero(), "the budget's counts still miss nothing")
				assert.False(t, w.full(100))
				return
			}
			assert.True(t, w.full(tc.wantLimit))
			assert.False(t, w.full(tc.wantLimit-1))
		})
	}
}

// TestWindowLearnCountsWhatWasSent checks that the chance of a rate's
// throttle falling where a cap's would is read from the releases sent,
// not only those answered: a cap refuses at once what it serves slowly,
// so that early on the answers hold every refusal and few successes.
func TestWindowLearnCountsWhatWasSent(t *testing.T) {
	answered := func() window {
		// One throttle with four out; 18 answered with fewer, as Outlook's
		// cap showed 0.2 s after its wave in virtual time.
		return tallied(map[int]int32{4: 1}, map[int]int32{1: 9, 2: 9}, 50*time.Millisecond)
	}
	w := answered()
	assert.False(t, w.learn(), "one throttle in 19 falls there by chance one time in 19")
	w = answered()
	for range 80 {
		w.sent(2, w.served)
	}
	w.sent(4, w.served)
	assert.True(t, w.learn(), "one in 81 sent")
	assert.Equal(t, 4, w.limit)
}

// cappedUsers returns the users budget of usersBudget, which learned a cap
// of two requests per child (a user, or a mailbox) in flight.
func cappedUsers() (*Queue, *clocktest.Clock, *hostState, *node) {
	q, clk, st, users := usersBudget()
	st.mu.Lock()
	users.kidWindow = window{served: t0, limit: 2}
	st.mu.Unlock()
	return q, clk, st, users
}

// admitAtOnce admits n requests to rawURL, each of which must be let go
// at once, and returns them in order.
func admitAtOnce(t *testing.T, q *Queue, clk *clocktest.Clock, rawURL string, n int) []admitted {
	t.Helper()
	var out []admitted
	for range n {
		a, ok := ready(t, admit(q, clk, rawURL, t0, time.Time{}))
		require.True(t, ok, "let go at once")
		out = append(out, a)
	}
	return out
}

// TestLearnedCapGatesEachChild checks that a budget that learned a cap of
// its children releases no more requests to a child than the cap while
// the requests behind them to other children go, and releases the next
// one to the child, in arrival order, when an answer from it comes or the
// cap is dropped.
func TestLearnedCapGatesEachChild(t *testing.T) {
	const m1, m2 = graph + "/v1.0/users/m1/messages", graph + "/v1.0/users/m2/messages"
	tests := []struct {
		name string
		// free frees m1 for the third request once two are out.
		free func(q *Queue, clk *clocktest.Clock, first Pass)
	}{
		{"an answer frees a slot", func(q *Queue, clk *clocktest.Clock, first Pass) {
			q.Report(get(t, m1, ""), first, Succeeded, 0, nil, clk.Now)
		}},
		{"a failure frees a slot", func(q *Queue, clk *clocktest.Clock, first Pass) {
			q.Report(get(t, m1, ""), first, Failed, 0, nil, clk.Now)
		}},
		{"an attempt not sent frees a slot", func(q *Queue, _ *clocktest.Clock, first Pass) {
			q.giveBack(first.host, first)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q, clk, st, users := cappedUsers()
				m1s := admitAtOnce(t, q, clk, m1, 2)
				for _, a := range m1s {
					require.Same(t, users, a.pass.budget)
				}
				assert.Equal(t, 1, m1s[1].pass.kidOut, "one other out to the child")
				third := admit(q, clk, m1, t0, time.Time{})
				fourth := admit(q, clk, m1, t0, time.Time{})
				_, ok := ready(t, third)
				assert.False(t, ok, "the child's cap is full")
				_, ok = ready(t, admit(q, clk, m2, t0, time.Time{}))
				assert.True(t, ok, "another child's request goes past it")

				tt.free(q, clk, m1s[0].pass)
				synctest.Wait()
				a, ok := ready(t, third)
				require.True(t, ok, "the first waiting goes")
				assert.Equal(t, 1, a.pass.kidOut)
				_, ok = ready(t, fourth)
				assert.False(t, ok, "the cap is full again")
				st.mu.Lock()
				assert.Equal(t, 2, users.kidsOut["users/m1"])
				st.mu.Unlock()
				q.Report(get(t, m1, ""), m1s[1].pass, Succeeded, 0, nil, clk.Now)
				synctest.Wait()
				_, ok = ready(t, fourth)
				assert.True(t, ok, "the next answer frees the next")
			})
		})
	}
}

// TestLearnedCapDropped checks that a throttle of a request sent with
// fewer out than the cap allows lowers the cap to what the tallies show
// then, or drops it when they show none, which lets the requests waiting
// for it go and teaches the budget's pacer; while the cap stands its
// throttles teach nothing.
func TestLearnedCapDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const m1 = graph + "/v1.0/users/m1/messages"
		q, clk, st, users := cappedUsers()
		pc := &countingPacer{}
		st.mu.Lock()
		users.pacer = pc
		// A cap of three read from three throttles, each with three out.
		users.kidWindow = tallied(map[int]int32{3: 3}, map[int]int32{0: 10, 1: 10, 2: 10}, 50*time.Millisecond)
		users.kidWindow.limit = 3
		st.mu.Unlock()
		out := admitAtOnce(t, q, clk, m1, 3)
		waiting := admit(q, clk, m1, t0, time.Time{})
		_, ok := ready(t, waiting)
		require.False(t, ok)

		// Sent with two others out, under a cap of three: the tallies now
		// show a cap of two; the waiting request stays.
		q.Report(get(t, m1, ""), out[2].pass, Throttled, time.Second, nil, clk.Now)
		synctest.Wait()
		st.mu.Lock()
		assert.Equal(t, 2, users.kidWindow.limit)
		assert.Zero(t, pc.throttles, "the cap's throttle")
		st.mu.Unlock()
		_, ok = ready(t, waiting)
		assert.False(t, ok, "two out, under a cap of two")

		// Sent with none out: no cap's.
		q.Report(get(t, m1, ""), out[0].pass, Throttled, time.Second, nil, clk.Now)
		synctest.Wait()
		st.mu.Lock()
		assert.Zero(t, users.kidWindow.limit)
		assert.Equal(t, 1, pc.throttles, "a rate's throttle teaches the pacer")
		st.mu.Unlock()
		_, ok = ready(t, waiting)
		assert.True(t, ok, "released when the cap is dropped")
	})
}

// TestLearnedCapHoldWithinLimits checks that a wait for a child's slot
// ends at the request's deadline with a *HoldError, and gives its place
// up when its context ends.
func TestLearnedCapHoldWithinLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const m1 = graph + "/v1.0/users/m1/messages"
		q, clk, st, users := cappedUsers()
		admitAtOnce(t, q, clk, m1, 2)
		deadline := t0.Add(time.Second)
		late := admit(q, clk, m1, t0, deadline)
		ctx, cancel := context.WithCancel(context.Background())
		cancelled := make(chan error, 1)
		go func() {
			_, err := q.Admit(ctx, get(t, m1, ""), t0, time.Time{}, nil)
			cancelled <- err
		}()
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, <-cancelled, context.Canceled)

		clk.Advance(time.Second)
		synctest.Wait()
		a, ok := ready(t, late)
		require.True(t, ok)
		var hold *HoldError
		require.ErrorAs(t, a.err, &hold)
		assert.Equal(t, deadline, hold.Until)
		st.mu.Lock()
		defer st.mu.Unlock()
		assert.Empty(t, users.kidWait, "no one waits for the child")
		assert.Equal(t, 2, users.kidsOut["users/m1"])
	})
}

// countingPacer paces nothing and counts the throttles it learns from.
type countingPacer struct{ throttles int }

func (p *countingPacer) next(now time.Time) time.Time                    { return now }
func (p *countingPacer) sent(time.Time)                                  {}
func (p *countingPacer) succeeded(time.Time, time.Time)                  {}
func (p *countingPacer) settle(int, time.Time)                           {}
func (p *countingPacer) throttled(time.Time, time.Time, time.Time, bool) { p.throttles++ }

// TestLearnedCapGatesTheBudget checks that a budget that learned a cap of
// its own releases no more than the cap, whichever child a request goes
// to, the next when an answer comes; a wait past the request's deadline
// ends at it.
func TestLearnedCapGatesTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, clk, st, users := usersBudget()
		st.mu.Lock()
		users.window = window{served: t0, limit: 2}
		st.mu.Unlock()
		var out []admitted
		for _, u := range []string{"a", "b"} {
			a, ok := ready(t, admit(q, clk, graph+"/v1.0/users/"+u, t0, time.Time{}))
			require.True(t, ok)
			out = append(out, a)
		}
		assert.Equal(t, 1, out[1].pass.out)
		next := admit(q, clk, graph+"/v1.0/users/c", t0, time.Time{})
		late := admit(q, clk, graph+"/v1.0/users/d", t0, t0.Add(time.Second))
		_, ok := ready(t, next)
		require.False(t, ok, "the budget's cap is full")

		q.Report(get(t, graph+"/v1.0/users/a", ""), out[0].pass, Succeeded, 0, nil, clk.Now)
		synctest.Wait()
		_, ok = ready(t, next)
		assert.True(t, ok, "an answer lets the next go")
		_, ok = ready(t, late)
		assert.False(t, ok)
		clk.Advance(time.Second)
		synctest.Wait()
		a, ok := ready(t, late)
		require.True(t, ok)
		var hold *HoldError
		require.ErrorAs(t, a.err, &hold)
		assert.Equal(t, t0.Add(time.Second), hold.Until)
	})
}

// TestLearnedCapOfEachChildFirst checks that tallies showing both a cap
// of the budget and one of each child are read as each child's, and that
// a budget capped as a whole takes each child's cap once its tallies show
// it: a budget whose requests all wait at full children has as many out
// at each throttle as it had at the first, so that ten mailboxes of 4
// read as a budget of 31 that fell by one a throttle, to 14.
func TestLearnedCapOfEachChildFirst(t *testing.T) {
	for _, tt := range []struct {
		name       string
		wholeLimit int
	}{
		{"both show a cap", 0},
		{"capped as a whole", 31},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q, _, st, users := usersBudget()
			st.mu.Lock()
			defer st.mu.Unlock()
			users.window = tallied(map[int]int32{31: 1}, map[int]int32{10: 20, 20: 20}, 50*time.Millisecond)
			users.window.limit = tt.wholeLimit
			users.kidWindow = tallied(map[int]int32{4: 1}, map[int]int32{1: 20, 2: 20}, 50*time.Millisecond)
			p := Pass{budget: users, out: 31, kid: "users/m1", kidOut: 4}
			assert.True(t, q.capped(users, p), "the cap's throttle")
			assert.Equal(t, 4, users.kidWindow.limit)
			assert.Zero(t, users.window.limit)
		})
	}
}

// TestWaveServeTimeReachesTheBudget checks that how long the server took
// to serve the host's first wave reaches the pacer of the host's first
// budget, whose search waits it out.
func TestWaveServeTimeReachesTheBudget(t *testing.T) {
	clk := clocktest.New(t0)
	q := New(clk, options.QueueOptions{})
	st := q.state("graph.test", true, time.Time{})
	st.addWave("users", t0, 50*time.Millisecond)
	st.addWave("users", t0.Add(time.Millisecond), 20*time.Millisecond)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.activate()
	users := st.node("users", 1)
	q.share(st, users, t0.Add(60*time.Millisecond))
	ap, ok := users.pacer.(*adaptivePacer)
	require.True(t, ok)
	assert.Equal(t, 2, ap.burst)
	assert.Equal(t, 50*time.Millisecond, ap.waveTook, "the slowest success of the wave")
}
