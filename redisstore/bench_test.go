package redisstore

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// counted returns a store whose client counts its round trips.
func counted(b *testing.B) (*Store, *roundTrips) {
	rdb := newClient(b, shared)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	return newStoreOn(b, rdb), rt
}

// BenchmarkPing is one bare round trip through go-redis on loopback: the
// floor under any store call.
func BenchmarkPing(b *testing.B) {
	rdb := newClient(b, shared)
	ctx := context.Background()
	for b.Loop() {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserve is a paced request's whole cost in the store: one
// reservation of its budget's fleet-wide schedule. "script" is the bare
// EVALSHA of the schedule's script, the floor under the store's call;
// "detached" is the store on a client that ignores contexts (redis.NewClient's
// default), whose calls run in a goroutine of their own; "direct" is the
// store on a client with ContextTimeoutEnabled.
func BenchmarkReserve(b *testing.B) {
	p := Pace{Rate: 1e6, Burst: 1e6} // never waits: the cost, not the pace, is measured
	b.Run("script", func(b *testing.B) {
		rdb := newClient(b, shared)
		ctx := context.Background()
		keys := []string{"{bench}:gcra:script"}
		for b.Loop() {
			if err := reserveScript.Run(ctx, rdb, keys, 1, p.Burst, int64(time.Second/time.Microsecond)).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name    string
		context bool
	}{{"detached", false}, {"direct", true}} {
		b.Run(tc.name, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: tc.context})
			b.Cleanup(func() { _ = rdb.Close() })
			rt := &roundTrips{}
			rdb.AddHook(rt)
			s := newStoreOn(b, rdb)
			ctx := context.Background()
			start := rt.n.Load()
			for b.Loop() {
				if _, err := s.Reserve(ctx, "graph.microsoft.com", "users", p, time.Second); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.n.Load()-start)/float64(b.N), "round-trips/op")
		})
	}
}

// BenchmarkReserveParallel reserves from many goroutines of one process, as
// a throttled host's requests do.
func BenchmarkReserveParallel(b *testing.B) {
	s, rt := counted(b)
	p := Pace{Rate: 1e6, Burst: 1e6}
	start := rt.n.Load()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := s.Reserve(ctx, "graph.microsoft.com", "users", p, time.Second); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(rt.n.Load()-start)/float64(b.N), "round-trips/op")
}

// BenchmarkActive is the question asked of every request: is its host
// throttled anywhere in the fleet? Answered from memory, with no round trip,
// for a host never throttled and for one that was.
func BenchmarkActive(b *testing.B) {
	for _, tc := range []struct {
		name string
		host string
	}{
		{"unthrottled", "contoso.sharepoint.com"},
		{"throttled", "graph.microsoft.com"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, rt := counted(b)
			if err := s.MarkActive(context.Background(), "graph.microsoft.com"); err != nil {
				b.Fatal(err)
			}
			start := rt.n.Load()
			b.ReportAllocs()
			for b.Loop() {
				s.Active(tc.host)
			}
			b.ReportMetric(float64(rt.n.Load()-start)/float64(b.N), "round-trips/op")
		})
	}
}

// BenchmarkUnreachable is a call while Redis is away: the probe interval
// keeps all but one call per interval from trying.
func BenchmarkUnreachable(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	b.Cleanup(func() { _ = rdb.Close() })
	s := newStoreOn(b, rdb, WithTimeout(DefaultTimeout))
	ctx := context.Background()
	for b.Loop() {
		_ = s.MarkActive(ctx, "graph.microsoft.com")
	}
}
