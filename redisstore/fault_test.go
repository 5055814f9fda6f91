package redisstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/options"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// faultTimeout is the store's bound in the fault tests: DefaultTimeout's
// order of magnitude, with room for a healthy call on a shared machine
// under -race once Redis is back.
const faultTimeout = 100 * time.Millisecond

// failBound is what a call may take when Redis is away: the store's bound
// and a busy machine's scheduling, far below go-redis's own 3 s read timeout
// and 5 s dial timeout that a call would wait without it.
const failBound = 500 * time.Millisecond

// faultProbe is short so that the tests see recovery quickly.
const faultProbe = 20 * time.Millisecond

// logBuffer collects a store's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// observed is a store with its log and metrics at hand.
type observed struct {
	*Store
	log    *logBuffer
	reader *sdkmetric.ManualReader
}

func newObserved(t *testing.T, rdb redis.UniversalClient, opts ...Option) observed {
	t.Helper()
	o := observed{log: &logBuffer{}, reader: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o.Store = newStoreOn(t, rdb, append([]Option{
		WithLogger(slog.New(slog.NewTextHandler(o.log, nil))),
		WithMeterProvider(mp),
		WithProbeInterval(faultProbe),
	}, opts...)...)
	return o
}

// sum adds up counter name's points whose attribute key has value want
// ("" for all).
func (o observed) sum(t *testing.T, name, key, want string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := dp.Attributes.Value(attributeKey(key)); want == "" || v.AsString() == want {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// ops calls every operation of the store once.
func ops(s *Store) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"hold":     func(ctx context.Context) error { return s.SetHold(ctx, "h", "k", time.Now().Add(time.Second)) },
		"mark":     func(ctx context.Context) error { return s.MarkActive(ctx, "h") },
		"state":    func(ctx context.Context) error { _, err := s.State(ctx, "h"); return err },
		"pace":     func(ctx context.Context) error { return s.SetPace(ctx, "h", "b", Pace{Rate: 1, Burst: 1}) },
		"announce": func(ctx context.Context) error { return s.Announce(ctx, "h", "b", 1, time.Now().Add(time.Second)) },
		"reserve": func(ctx context.Context) error {
			_, err := s.Reserve(ctx, "h", "b", Pace{Rate: 1000, Burst: 1000}, time.Second)
			return err
		},
		"acquire": func(ctx context.Context) error {
			sl, _, err := s.Acquire(ctx, "h", "m", 1000)
			if sl != nil {
				return sl.Release(ctx)
			}
			return err
		},
	}
}

// Redis killed or paused: every call returns within the bound with
// ErrUnavailable, the host stays known locally, the fallback is counted and
// logged once; when Redis answers again, so does the store, logged once.
func TestFailOpen(t *testing.T) {
	faults := []struct {
		name   string
		inject func(*server) error
		heal   func(*server) error
	}{
		{"killed", func(s *server) error { s.kill(); return nil }, (*server).restart},
		{"paused", (*server).pause, (*server).resume},
	}
	clients := []struct {
		name    string
		options func(addr string) *redis.Options
	}{
		{"default client", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
		{"context-bound client", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
		}},
	}
	for _, f := range faults {
		for _, c := range clients {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				srv := newServer(t)
				rdb := redis.NewClient(c.options(srv.addr()))
				t.Cleanup(func() { _ = rdb.Close() })
				s := newObserved(t, rdb, WithTimeout(faultTimeout))
				ctx := context.Background()
				require.NoError(t, s.MarkActive(ctx, "graph.microsoft.com"))

				require.NoError(t, f.inject(srv))
				for name, op := range ops(s.Store) {
					start := time.Now()
					err := op(ctx)
					elapsed := time.Since(start)
					require.ErrorIs(t, err, ErrUnavailable, name)
					assert.Less(t, elapsed, failBound, "%s returned after %v", name, elapsed)
				}
				assert.True(t, s.Active("graph.microsoft.com"), "local state stays")
				assert.GreaterOrEqual(t, s.sum(t, MetricFallbacks, "", ""), int64(len(ops(s.Store))))
				assert.Equal(t, 1, s.log.count("level=WARN"), "said once")

				require.NoError(t, f.heal(srv))
				// A loaded machine can make a call right after the restart
				// outlast the bound and take Redis down again: what must hold
				// is that every call answers once Redis is steady, and that
				// the log says each change of state once, not each call.
				require.Eventually(t, func() bool {
					for _, op := range ops(s.Store) {
						if op(ctx) != nil {
							return false
						}
					}
					return true
				}, 10*time.Second, faultProbe)
				recovered, lost := s.log.count("level=INFO"), s.log.count("level=WARN")
				assert.GreaterOrEqual(t, recovered, 1, "recovery said")
				assert.Equal(t, lost, recovered, "each outage and each recovery said once")
			})
		}
	}
}

// A caller's own context bounds the call, even below the store's timeout,
// and a caller giving up is counted as canceled, not as Redis failing.
func TestCallerContextBoundsCall(t *testing.T) {
	srv := newServer(t)
	s := newObserved(t, newClient(t, srv), WithTimeout(time.Second))
	require.NoError(t, srv.pause())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.MarkActive(ctx, "h")
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), failBound)
	assert.Equal(t, int64(1), s.sum(t, MetricFallbacks, AttrReason, reasonCanceled))
	assert.Zero(t, s.log.count("level=WARN"), "the caller's deadline says nothing of Redis")

	done, stop := context.WithCancel(context.Background())
	stop()
	require.ErrorIs(t, s.MarkActive(done, "h"), ErrUnavailable)
	require.NoError(t, srv.resume())
}

// Redis restarted empty mid-run: the store reconnects, reloads its
// scripts, its listener subscribes again, and the fleet's state rebuilds
// from what the processes learn next, while each keeps its local state.
func TestRestartedEmptyRebuilds(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	const lease = 90 * time.Millisecond
	a := newObserved(t, newClient(t, srv), WithSlotLease(lease))
	b := newObserved(t, newClient(t, srv))
	waitSubscribed(t, b.Store)
	slot, _, err := a.Acquire(ctx, "graph.microsoft.com", "users/a@contoso.com", mailboxLimit)
	require.NoError(t, err)
	require.NotNil(t, slot)
	require.NoError(t, a.SetHold(ctx, "graph.microsoft.com", "users", time.Now().Add(time.Minute)))
	require.NoError(t, a.SetPace(ctx, "graph.microsoft.com", "users", Pace{Rate: 400, Burst: 40}))
	require.Eventually(t, func() bool { return b.Active("graph.microsoft.com") }, noticeWithin, time.Millisecond)

	require.NoError(t, srv.restart())
	require.Eventually(t, func() bool {
		_, err := a.State(ctx, "graph.microsoft.com")
		return err == nil
	}, 10*time.Second, faultProbe)

	st, err := a.State(ctx, "graph.microsoft.com")
	require.NoError(t, err)
	assert.Empty(t, st.Holds, "the restarted Redis is empty")
	require.Eventually(t, func() bool {
		a.slots.mu.Lock()
		defer a.slots.mu.Unlock()
		return len(a.slots.held) == 0
	}, 10*time.Second, faultProbe, "a slot the empty Redis lost is no longer renewed")
	assert.True(t, a.Active("graph.microsoft.com"), "each process keeps its local state")
	assert.True(t, b.Active("graph.microsoft.com"))

	require.NoError(t, a.SetHold(ctx, "graph.microsoft.com", "users", time.Now().Add(time.Minute)))
	require.NoError(t, a.SetPace(ctx, "graph.microsoft.com", "users", Pace{Rate: 400, Burst: 40}))
	require.Eventually(t, func() bool {
		st, err := b.State(ctx, "graph.microsoft.com")
		return err == nil && len(st.Holds) == 1 && st.Paces["users"].Rate == 400
	}, 10*time.Second, faultProbe, "rebuilt from the next throttle")

	res, err := a.Reserve(ctx, "graph.microsoft.com", "users", Pace{Rate: 400, Burst: 40}, time.Second)
	w, ok := res.Wait, res.OK
	require.NoError(t, err, "the schedule's script is loaded again")
	assert.True(t, ok)
	assert.InDelta(t, time.Second/400, w, float64(time.Millisecond), "a fresh schedule's first slot is a token's time away")

	waitSubscribed(t, b.Store)
	require.NoError(t, a.MarkActive(ctx, "contoso.sharepoint.com"))
	require.Eventually(t, func() bool { return b.Active("contoso.sharepoint.com") }, noticeWithin, time.Millisecond,
		"notices flow again once the listener has subscribed anew")
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }

// An Acquire whose answer did not come within the store's bound may still
// take its slot once Redis runs again: the store gives it back as soon as
// Redis answers, not at the end of its lease.
func TestAcquirePastItsBoundGivesTheSlotBack(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv, WithTimeout(50*time.Millisecond), WithProbeInterval(50*time.Millisecond))
	ctx := context.Background()
	key := s.keys.slots("h", "mailbox")
	require.NoError(t, srv.pause())
	sl, _, err := s.Acquire(ctx, "h", "mailbox", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Nil(t, sl)
	orphans := func() int {
		s.slots.mu.Lock()
		defer s.slots.mu.Unlock()
		return len(s.slots.orphans)
	}
	require.Equal(t, 1, orphans(), "kept to be given back")
	require.NoError(t, srv.resume())
	require.Eventually(t, func() bool { return orphans() == 0 }, 5*time.Second, 10*time.Millisecond,
		"given back once Redis answers, well within its %v lease", DefaultSlotLease)
	assert.Zero(t, s.rdb.ZCard(ctx, key).Val(), "no slot held for no one")
	var got options.Slot
	require.Eventually(t, func() bool {
		got, _, err = s.Acquire(ctx, "h", "mailbox", 1)
		return err == nil && got != nil
	}, 5*time.Second, 10*time.Millisecond, "free for the next")
	require.NoError(t, got.Release(ctx))
}
