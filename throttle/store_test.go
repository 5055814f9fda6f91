package throttle

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// memStore is an options.Store in memory, shared by the queues of one
// test as Redis is by the processes of a fleet. Its schedule runs, as
// redisstore's does, at the sum of the paces its callers gave.
type memStore struct {
	now  func() time.Time
	fail bool // every call that would reach Redis fails

	mu     sync.Mutex
	active map[string]bool
	// throttled is when each host was first marked.
	throttled map[string]time.Time
	holds     map[string]map[string]time.Time
	paces     map[string]options.Pace
	// announced maps a host and a budget to what was announced of it.
	announced map[string]map[string]options.Announcement
	shares    map[string]map[*Queue]float64
	tat       map[string]time.Time
	calls     map[string]int
	reserved  []time.Duration // the waits Reserve answered
	// fitted names the budgets whose schedule runs at a fitted rate,
	// and its interval.
	fitted    map[string]time.Duration
	throttles []fleetThrottle // what Throttled was told
}

type fleetThrottle struct {
	budget          string
	ago, retryAfter time.Duration
}

func newMemStore(now func() time.Time) *memStore {
	return &memStore{now: now, active: map[string]bool{}, throttled: map[string]time.Time{}, holds: map[string]map[string]time.Time{},
		paces: map[string]options.Pace{}, shares: map[string]map[*Queue]float64{}, tat: map[string]time.Time{}, calls: map[string]int{},
		fitted: map[string]time.Duration{}, announced: map[string]map[string]options.Announcement{}}
}

var errStoreDown = errors.New("store down")

// call counts a round trip and reports whether it fails.
func (m *memStore) call(op string) error {
	m.calls[op]++
	if m.fail {
		return errStoreDown
	}
	return nil
}

func (m *memStore) Active(host string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active[host]
}

func (m *memStore) MarkActive(_ context.Context, host string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("mark"); err != nil {
		return err
	}
	m.markLocked(host)
	return nil
}

func (m *memStore) markLocked(host string) {
	if !m.active[host] {
		m.throttled[host] = m.now()
	}
	m.active[host] = true
}

func (m *memStore) SetHold(_ context.Context, host, key string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("hold"); err != nil {
		return err
	}
	m.markLocked(host)
	if m.holds[host] == nil {
		m.holds[host] = map[string]time.Time{}
	}
	m.holds[host][key] = later(m.holds[host][key], until)
	return nil
}

func (m *memStore) State(_ context.Context, host string) (options.FleetState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("state"); err != nil {
		return options.FleetState{}, err
	}
	st := options.FleetState{Holds: map[string]time.Time{}, Paces: map[string]options.Pace{}, Announced: map[string]options.Announcement{},
		Throttled: m.throttled[host]}
	for k, v := range m.holds[host] {
		st.Holds[k] = v
	}
	for k, v := range m.announced[host] {
		st.Announced[k] = v
	}
	for k, v := range m.paces {
		st.Paces[k] = v
	}
	return st, nil
}

// Reserve keeps one share per caller, by the queue that holds ctx's key.
func (m *memStore) Reserve(ctx context.Context, host, budget string, p options.Pace, limit time.Duration) (options.Reservation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("reserve"); err != nil {
		return options.Reservation{}, err
	}
	key := host + "/" + budget
	if m.shares[key] == nil {
		m.shares[key] = map[*Queue]float64{}
	}
	q, _ := ctx.Value(queueKey{}).(*Queue)
	m.shares[key][q] = p.Rate
	var sum float64
	for _, r := range m.shares[key] {
		sum += r
	}
	m.paces[budget] = options.Pace{Rate: sum / float64(len(m.shares[key])), Burst: 1}
	now := m.now()
	interval, fitted := m.fitted[budget]
	if !fitted {
		interval = time.Duration(float64(time.Second) / sum)
	}
	tat := later(m.tat[key], now).Add(interval)
	wait := max(tat.Sub(now)-interval, 0)
	if wait > limit {
		return options.Reservation{Wait: wait, Fitted: fitted}, nil
	}
	m.tat[key] = tat
	m.reserved = append(m.reserved, wait)
	return options.Reservation{Wait: wait, OK: true, Fitted: fitted}, nil
}

func (m *memStore) Announce(_ context.Context, host, budget string, remaining int, reset time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("announce"); err != nil {
		return err
	}
	if m.announced[host] == nil {
		m.announced[host] = map[string]options.Announcement{}
	}
	m.announced[host][budget] = options.Announcement{Remaining: remaining, Reset: reset}
	return nil
}

func (m *memStore) Throttled(_ context.Context, _, budget string, ago, retryAfter time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("throttled"); err != nil {
		return err
	}
	m.throttles = append(m.throttles, fleetThrottle{budget, ago, retryAfter})
	return nil
}

type queueKey struct{}

func (m *memStore) count(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

// Two queues sharing one store are two processes of a fleet.
func TestStoreSharesWithTheFleet(t *testing.T) {
	tests := []struct {
		name string
		fail bool
	}{
		{"store answers", false},
		{"store fails: each process goes on alone", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewJumping(t0)
			st := newMemStore(clk.Now)
			st.fail = tt.fail
			a := New(clk, options.QueueOptions{Store: st})
			b := New(clk, options.QueueOptions{Store: st})
			ctx := context.Background()
			item := get(t, graph+"/v1.0/users/1", "")
			other := get(t, graph+"/v1.0/groups/2", "")

			// Neither process saw the host throttled: no round trip.
			p, err := b.Admit(ctx, other, t0, time.Time{}, nil)
			require.NoError(t, err)
			b.Report(other, p, Succeeded, 0, nil, clk.Now)
			assert.Zero(t, st.count("state")+st.count("hold")+st.count("mark"))
			assert.False(t, b.Active(item))

			// Process a is told to leave users/1 alone for 5 s.
			p, err = a.Admit(ctx, item, t0, time.Time{}, nil)
			require.NoError(t, err)
			a.Report(item, p, Throttled, 5*time.Second, nil, clk.Now)
			assert.Equal(t, 1, st.count("hold"))

			// Process b's request to users/1, which may wait 1 s at most.
			_, err = b.Admit(ctx, item, t0, t0.Add(time.Second), nil)
			var held *HoldError
			if tt.fail {
				// Nothing reached the fleet: b sends it, and learns alone.
				assert.NoError(t, err)
				assert.False(t, b.Active(item))
				return
			}
			require.ErrorAs(t, err, &held, "b holds what the server told a to leave alone")
			assert.Equal(t, t0.Add(5*time.Second), held.Until)
			assert.Equal(t, 1, st.count("state"), "b read the fleet's state once")
			// Another target of the host goes at once, after one look.
			_, err = b.Admit(ctx, other, t0, t0.Add(time.Second), nil)
			assert.NoError(t, err)
			assert.Equal(t, 1, st.count("state"))
		})
	}
}

// A process that joins a paced budget paces at the fleet's pace per
// process, and its releases take slots of the fleet's schedule.
func TestStoreJoinerFollowsTheFleetsPace(t *testing.T) {
	clk := clocktest.NewJumping(t0)
	st := newMemStore(clk.Now)
	st.active["graph.test"] = true
	st.paces["users"] = options.Pace{Rate: 50, Burst: 1}
	q := New(clk, options.QueueOptions{Store: st})
	ctx := context.WithValue(context.Background(), queueKey{}, q)
	require.True(t, q.Active(get(t, graph+"/v1.0/users/1", "")))
	var sent []time.Time
	for i := range 5 {
		req := get(t, graph+"/v1.0/users/"+string(rune('a'+i)), "")
		p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
		require.NoError(t, err)
		sent = append(sent, p.Sent)
		q.Report(req, p, Succeeded, 0, nil, clk.Now)
	}
	assert.Equal(t, 1, st.count("state"))
	assert.Equal(t, 5, st.count("reserve"), "one round trip per paced request")
	for i := 1; i < len(sent); i++ {
		// 50/s, after the CUBIC dip of the fitted rate: 20 to 21 ms apart.
		gap := sent[i].Sub(sent[i-1])
		assert.InDelta(t, 20*time.Millisecond, gap, float64(2*time.Millisecond), "release %d", i)
	}
	s := q.state("graph.test", false, time.Time{})
	require.NotNil(t, s)
	n := s.nodes["users"]
	require.NotNil(t, n)
	assert.True(t, n.shared)
}

// A process that joins while the fleet's first wave is under way (within
// firstWave of the fleet's first throttle, holds the server named still
// run, no pace yet) takes the fleet's holds as its own throttles: when
// they make a budget by the rule its own would, its requests wait for the
// fleet's schedule rather than go at once into a bucket the others
// emptied. Holds of an item or two make none, and a process joining later
// sends its own first wave.
func TestStoreJoinerTakesTheFleetsFirstWave(t *testing.T) {
	tests := []struct {
		name    string
		held    []string      // items held
		heldFor time.Duration // from now
		ago     time.Duration // since the fleet's first throttle
		budget  bool          // a budget searches through the fleet's schedule
	}{
		{"a wave over many items", []string{"a", "b", "c", "d", "e"}, 3 * time.Second, 10 * time.Millisecond, true},
		{"one item", []string{"a"}, 3 * time.Second, 10 * time.Millisecond, false},
		{"two items", []string{"a", "b"}, 3 * time.Second, 10 * time.Millisecond, false},
		{"holds already over", []string{"a", "b", "c", "d", "e"}, 0, 10 * time.Millisecond, false},
		{"a wave long past", []string{"a", "b", "c", "d", "e"}, 2 * time.Second, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewJumping(t0)
			st := newMemStore(clk.Now)
			st.active["graph.test"] = true
			st.throttled["graph.test"] = t0.Add(-tt.ago)
			st.holds["graph.test"] = map[string]time.Time{}
			for _, id := range tt.held {
				st.holds["graph.test"][options.HoldPathPrefix+"/v1.0/users/"+id] = t0.Add(tt.heldFor)
			}
			q := New(clk, options.QueueOptions{Store: st})
			ctx := context.WithValue(context.Background(), queueKey{}, q)
			req := get(t, graph+"/v1.0/users/z", "")
			p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
			require.NoError(t, err)
			q.Report(req, p, Succeeded, 0, nil, clk.Now)

			s := q.state("graph.test", false, time.Time{})
			require.NotNil(t, s)
			n := s.nodes["users"]
			if !tt.budget {
				assert.Zero(t, st.count("reserve"), "the request went unpaced")
				assert.False(t, n != nil && n.shared, "no budget")
				return
			}
			assert.Equal(t, 1, st.count("reserve"), "the request took a slot of the fleet's schedule")
			require.NotNil(t, n)
			assert.True(t, n.shared, "the held items' API is a budget")
			ap, ok := n.pacer.(*adaptivePacer)
			require.True(t, ok)
			assert.Equal(t, pacerSearching, ap.state, "that searches for the server's rate")
			assert.Contains(t, st.shares, "graph.test/users")
		})
	}
}

// A budget an answer announces as spent is the news a throttle brings: the
// fleet learns the host is throttled and, once a second at most, until when
// the budget is spent; a process that joins later takes it as its budget.
func TestStoreSharesASpentBudget(t *testing.T) {
	clk := clocktest.NewJumping(t0)
	st := newMemStore(clk.Now)
	a := New(clk, options.QueueOptions{Store: st})
	b := New(clk, options.QueueOptions{Store: st})
	ctx := context.Background()
	answer := func(q *Queue, remaining int) {
		t.Helper()
		req := get(t, graph+"/v1.0/users/1", "")
		p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
		require.NoError(t, err)
		h := http.Header{}
		h.Set("RateLimit-Policy", `"default";q=40;w=1`)
		h.Set("RateLimit", `"default";r=`+strconv.Itoa(remaining)+`;t=1`)
		q.Report(req, p, Succeeded, 0, h, clk.Now)
	}

	answer(a, 30)
	assert.Zero(t, st.count("announce")+st.count("mark"), "room left: nothing to tell")
	answer(a, 0)
	assert.Equal(t, 1, st.count("announce"))
	assert.Equal(t, 1, st.count("mark"), "the host is throttled for the fleet")
	assert.Equal(t, options.Announcement{Remaining: 0, Reset: t0.Add(time.Second)}, st.announced["graph.test"][""])
	answer(a, 0)
	assert.Equal(t, 1, st.count("announce"), "told once a second at most")
	clk.Advance(announceEvery)
	answer(a, 0)
	assert.Equal(t, 2, st.count("announce"))

	require.True(t, b.Active(get(t, graph+"/v1.0/users/2", "")), "b learns the host is throttled")
	_, err := b.Admit(ctx, get(t, graph+"/v1.0/users/2", ""), time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, st.count("state"), "b joins")
	s := b.state("graph.test", false, time.Time{})
	require.NotNil(t, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[""]
	require.NotNil(t, n, "the budget the fleet saw spent")
	assert.True(t, n.shared)
	assert.True(t, n.budget.live(clk.Now(), b.recovery))
	assert.True(t, n.budget.budget.Spent())
}

// A budget the server announces is paced by each process from its own
// answers, never by the fleet's schedule: no reservation is made for it.
func TestStoreLeavesAnnouncedBudgetsToEachProcess(t *testing.T) {
	clk := clocktest.NewJumping(t0)
	st := newMemStore(clk.Now)
	q := New(clk, options.QueueOptions{Store: st})
	ctx := context.WithValue(context.Background(), queueKey{}, q)
	for i := range 20 {
		req := get(t, graph+"/v1.0/users/"+strconv.Itoa(i), "")
		p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
		require.NoError(t, err)
		h := http.Header{}
		h.Set("RateLimit-Policy", `"default";q=40;w=1`)
		h.Set("RateLimit", `"default";r=0;t=1`)
		q.Report(req, p, Succeeded, 0, h, clk.Now)
	}
	s := q.state("graph.test", false, time.Time{})
	require.NotNil(t, s)
	s.mu.Lock()
	n := s.nodes[""]
	require.NotNil(t, n)
	assert.True(t, n.paces(clk.Now(), q.recovery), "the announced budget paces")
	s.mu.Unlock()
	assert.Zero(t, st.count("reserve"))
}

// A failing store costs a request no hold: the queue paces by its own state.
func TestStoreFailingFallsBackToLocalPace(t *testing.T) {
	clk := clocktest.NewJumping(t0)
	st := newMemStore(clk.Now)
	st.active["graph.test"] = true
	st.fail = true
	q := New(clk, options.QueueOptions{Store: st})
	req := get(t, graph+"/v1.0/users/1", "")
	p, err := q.Admit(context.Background(), req, time.Time{}, t0.Add(time.Millisecond), nil)
	require.NoError(t, err)
	assert.Equal(t, t0, p.Sent, "nothing held it")
	assert.Equal(t, 1, st.count("state"))
}

// A host no process saw throttled costs no allocation with a store either.
func TestStoreNeverThrottledHostAllocatesNothing(t *testing.T) {
	clk := clocktest.NewJumping(t0)
	q := New(clk, options.QueueOptions{Store: newMemStore(clk.Now)})
	req := get(t, graph+"/v1.0/users/1", "")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		p, _ := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
		q.Report(req, p, Succeeded, 0, nil, clk.Now)
	})
	assert.Zero(t, allocs)
}

// Once the fleet's throttles fitted a budget's rate, the fleet's schedule
// alone spaces its releases, and a throttle of one of them goes to the
// fleet to fit.
func TestStoreFittedScheduleSpacesAlone(t *testing.T) {
	tests := []struct {
		name   string
		fitted bool
		gap    time.Duration // between releases after the first
	}{
		{"fitted: the schedule's 5 ms", true, 5 * time.Millisecond},
		{"not fitted: the process's own 20 ms", false, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewJumping(t0)
			st := newMemStore(clk.Now)
			st.active["graph.test"] = true
			st.paces["users"] = options.Pace{Rate: 50, Burst: 1}
			if tt.fitted {
				st.fitted["users"] = 5 * time.Millisecond
			}
			q := New(clk, options.QueueOptions{Store: st})
			ctx := context.WithValue(context.Background(), queueKey{}, q)
			var sent []time.Time
			var last *http.Request
			var pass Pass
			for i := range 5 {
				last = get(t, graph+"/v1.0/users/"+string(rune('a'+i)), "")
				p, err := q.Admit(ctx, last, time.Time{}, time.Time{}, nil)
				require.NoError(t, err)
				sent = append(sent, p.Sent)
				pass = p
				if i < 4 {
					q.Report(last, p, Succeeded, 0, nil, clk.Now)
				}
			}
			for i := 2; i < len(sent); i++ {
				assert.InDelta(t, tt.gap, sent[i].Sub(sent[i-1]), float64(2*time.Millisecond), "release %d", i)
			}
			clk.Advance(3 * time.Millisecond)
			q.Report(last, pass, Throttled, time.Second, nil, clk.Now)
			require.Len(t, st.throttles, 1, "the fleet hears of a throttle of its schedule's release")
			assert.Equal(t, fleetThrottle{"users", 3 * time.Millisecond, time.Second}, st.throttles[0])
		})
	}
}

// While the fleet's schedule spaces a budget's releases, the process's own
// pacer stands still: a throttle after a long fitted spell decreases it
// from where the process left it, not from a probe that rose all along,
// and the share it gives the fleet stays the pace it joined at.
func TestStoreFittedPacerStandsStill(t *testing.T) {
	clk := clocktest.NewJumping(t0)
	st := newMemStore(clk.Now)
	st.active["graph.test"] = true
	st.paces["users"] = options.Pace{Rate: 50, Burst: 1}
	st.fitted["users"] = 5 * time.Millisecond
	q := New(clk, options.QueueOptions{Store: st})
	ctx := context.WithValue(context.Background(), queueKey{}, q)
	admit := func(i int, o Outcome) {
		req := get(t, graph+"/v1.0/users/"+strconv.Itoa(i), "")
		p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		q.Report(req, p, o, time.Second, nil, clk.Now)
	}
	// 3 s of releases 5 ms apart, spaced by the fleet alone: a probe of
	// 50/s would run at about 160/s by then.
	i := 0
	for ; clk.Now().Before(t0.Add(3 * time.Second)); i++ {
		admit(i, Succeeded)
	}
	admit(i, Throttled)
	admit(i+1, Succeeded)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, share := range st.shares["graph.test/users"] {
		assert.LessOrEqual(t, share, 50*fleetHeadroom, "a decrease from the pace it joined at")
	}
}

// A process gives the fleet's schedule, while its pacer searches, where its
// search started (its part of the first wave), not the rate its search
// doubled to: the schedule sums the processes' paces and doubles the sum
// once for the whole fleet. Its burst is its part of the first wave, what
// the server let through at once, whatever its rate: the schedule's fit
// sums them into the least the server's bucket holds.
func TestFleetShare(t *testing.T) {
	later := t0.Add(5 * doubling)
	tests := []struct {
		name  string
		pacer *adaptivePacer
		want  float64 // before the headroom
		burst int
	}{
		// 40/s, where a search that doubled five times runs at 1280/s.
		{"searching: where it started", &adaptivePacer{state: pacerSearching, start: t0, reacted: t0, period: 1, burst: 10},
			searchStart * 10, 10},
		// On its CUBIC curve, 0.5 s after the fit of 400/s.
		{"steady: what it fitted", &adaptivePacer{state: pacerSteady, start: t0, reacted: t0, last: t0, base: 400, burst: 50}, 400, 50},
		// Probing, a minute after the fit, with nothing sent since.
		{"probing: what it fitted", &adaptivePacer{state: pacerSteady, start: t0.Add(-time.Minute), reacted: t0, last: t0, base: 400}, 400, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(clocktest.NewJumping(later), options.QueueOptions{Store: newMemStore(nil)})
			n := &node{shared: true, lastEnd: later, pacer: tt.pacer}
			p, ok := q.fleetShare(n, later)
			require.True(t, ok)
			assert.InDelta(t, tt.want*fleetHeadroom, p.Rate, tt.want/100)
			assert.Equal(t, tt.burst, p.Burst)
		})
	}
}

// gatedStore is a memStore whose State waits until gate is closed: a
// round trip under way.
type gatedStore struct {
	*memStore
	gate chan struct{}
}

func (g gatedStore) State(ctx context.Context, host string) (options.FleetState, error) {
	<-g.gate
	return g.memStore.State(ctx, host)
}

// A request that comes while another reads the fleet's state waits for
// that answer and goes at the fleet's pace, rather than unheld into a
// budget the fleet throttles; one whose context ends first stops waiting.
func TestStoreJoinWaitsForTheFleetsState(t *testing.T) {
	tests := []struct {
		name     string
		cancel   bool // the second request's context ends during the read
		reserves int  // round trips for fleet slots, both requests
		err      error
	}{
		{"waits for the answer", false, 2, nil},
		{"until its context ends", true, 1, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.NewJumping(t0)
				st := gatedStore{newMemStore(clk.Now), make(chan struct{})}
				st.active["graph.test"] = true
				st.paces["users"] = options.Pace{Rate: 50, Burst: 1}
				q := New(clk, options.QueueOptions{Store: st})
				ctx := context.WithValue(context.Background(), queueKey{}, q)
				admit := func(ctx context.Context, id string) <-chan error {
					done := make(chan error, 1)
					go func() {
						req := get(t, graph+"/v1.0/users/"+id, "")
						p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
						if err == nil {
							q.Report(req, p, Succeeded, 0, nil, clk.Now)
						}
						done <- err
					}()
					return done
				}
				first := admit(ctx, "a")
				synctest.Wait() // the first request is reading the fleet's state
				ctx2, cancel := context.WithCancel(ctx)
				defer cancel()
				second := admit(ctx2, "b")
				synctest.Wait()
				select {
				case err := <-second:
					t.Fatalf("the second request went on during the read: %v", err)
				default:
				}
				if tt.cancel {
					cancel()
					require.ErrorIs(t, <-second, tt.err)
				}
				close(st.gate)
				require.NoError(t, <-first)
				if !tt.cancel {
					require.NoError(t, <-second)
				}
				assert.Equal(t, 1, st.count("state"), "one read for both")
				assert.Equal(t, tt.reserves, st.count("reserve"))
			})
		})
	}
}

// A process holds slots of a fitted schedule at most maxSlotsAhead ahead:
// slots given go at the rate they were given at, and a fleet whose every
// waiting request held one would go on at a probe's rate long after the
// fit that lowered it.
func TestStoreHoldsFewSlotsAhead(t *testing.T) {
	const (
		waiting  = 40
		interval = time.Millisecond
	)
	// In a bubble, the system clock's time moves only when every
	// goroutine waits: requests that ask for slots at once ask at one
	// instant.
	synctest.Test(t, func(t *testing.T) {
		clk := options.SystemClock()
		st := newMemStore(clk.Now)
		st.active["graph.test"] = true
		st.paces["users"] = options.Pace{Rate: 1000, Burst: 1}
		st.fitted["users"] = interval
		q := New(clk, options.QueueOptions{Store: st})
		ctx := context.WithValue(context.Background(), queueKey{}, q)
		var wg sync.WaitGroup
		for i := range waiting {
			wg.Go(func() {
				req := get(t, graph+"/v1.0/users/"+strconv.Itoa(i), "")
				p, err := q.Admit(ctx, req, time.Time{}, time.Time{}, nil)
				if assert.NoError(t, err) {
					q.Report(req, p, Succeeded, 0, nil, clk.Now)
				}
			})
		}
		wg.Wait()
		st.mu.Lock()
		defer st.mu.Unlock()
		require.Len(t, st.reserved, waiting, "every request took a slot")
		assert.LessOrEqual(t, slices.Max(st.reserved), maxSlotsAhead+maxReserving*interval,
			"no slot was taken further ahead than the process holds them")
	})
}

// pacingStore is a memStore that also takes paces published outside a
// reservation (options.PaceStore).
type pacingStore struct {
	*memStore
	published []string // budgets SetPace was given
}

func (p *pacingStore) SetPace(_ context.Context, _, budget string, pace options.Pace) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.call("pace"); err != nil {
		return err
	}
	p.paces[budget] = pace
	p.published = append(p.published, budget)
	return nil
}

// A budget's first throttle publishes the pace its search starts from,
// once, to a store that takes paces: a process that joins while every
// request of the fleet waits out the first wave's Retry-After (so that
// nothing reserves, and no reservation publishes a pace) follows it from
// its first request, rather than send them all at once.
func TestStorePublishesTheSearchsPace(t *testing.T) {
	tests := []struct {
		name   string
		pacing bool
	}{
		{"a store that takes paces", true},
		{"a store that does not", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewJumping(t0)
			mem := newMemStore(clk.Now)
			ps := &pacingStore{memStore: mem}
			var st options.Store = mem
			if tt.pacing {
				st = ps
			}
			a := New(clk, options.QueueOptions{Store: st})
			ctx := context.WithValue(context.Background(), queueKey{}, a)
			// Process a's first wave: six users throttled at once make
			// users a budget, which starts searching.
			for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
				req := get(t, graph+"/v1.0/users/"+id, "")
				p, err := a.Admit(ctx, req, time.Time{}, time.Time{}, nil)
				require.NoError(t, err)
				a.Report(req, p, Throttled, 3*time.Second, nil, clk.Now)
			}
			s := a.state("graph.test", false, time.Time{})
			require.NotNil(t, s)
			n := s.nodes["users"]
			require.NotNil(t, n)
			require.True(t, n.shared, "the first wave made users a budget")
			if !tt.pacing {
				assert.Zero(t, mem.count("pace"))
				return
			}
			assert.Equal(t, []string{"users"}, ps.published, "published once, for the budget")
			assert.Positive(t, mem.paces["users"].Rate, "the pace the search starts from")
			reserved := mem.count("reserve")

			// Process b joins with every request of a's waiting: it
			// follows that pace through the fleet's schedule.
			b := New(clk, options.QueueOptions{Store: st})
			bctx := context.WithValue(context.Background(), queueKey{}, b)
			req := get(t, graph+"/v1.0/users/z", "")
			p, err := b.Admit(bctx, req, time.Time{}, time.Time{}, nil)
			require.NoError(t, err)
			b.Report(req, p, Succeeded, 0, nil, clk.Now)
			assert.Equal(t, reserved+1, mem.count("reserve"), "b's first request took a slot")
		})
	}
}
