package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable is wrapped by every error a call returns because Redis did
// not answer in time or failed: the caller goes on with its local state. The
// cause (a timeout, a refused connection, a Redis error) is wrapped beside
// it. Errors that do not wrap it report a bad argument.
var ErrUnavailable = errors.New("redis unavailable, use local state")

// Store shares one throttle state among the processes of a fleet through
// Redis: the holds servers named, each budget's pace and fleet-wide release
// schedule, the budgets servers announced, and concurrency caps only a fleet
// can keep. Every call is bounded by the store's timeout and fails open
// with ErrUnavailable; a host no process saw throttled is known locally
// (Active) and costs no round trip. A Store is safe for concurrent use;
// Close releases what it started.
type Store struct {
	rdb  redis.UniversalClient
	cfg  config
	keys keys
	in   instruments
	// token names this process's entry in each budget's shares.
	token string

	// direct is true when the client ends a command at its context's
	// deadline (ContextTimeoutEnabled); otherwise each call runs detached
	// and the caller stops waiting at the deadline.
	direct bool
	health health
	active activeSet
	slots  slotSet

	sub       *redis.PubSub
	listening chan struct{} // closed when the notice listener ends
	closeOnce sync.Once

	mu     sync.Mutex // guards closed against calls.Add
	closed bool
	calls  sync.WaitGroup // detached calls still running
}

// New returns a store on rdb, which it does not own: Close leaves rdb open.
// New neither pings Redis nor fails when it is down; it subscribes to the
// fleet's notices and learns the hosts already throttled as soon as Redis
// answers. Commands are bounded by the store's timeout, but a client built
// with ContextTimeoutEnabled also frees its connection at that bound instead
// of at its own ReadTimeout.
func New(rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("redisstore: nil redis client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Store{
		rdb:       rdb,
		cfg:       cfg,
		keys:      newKeys(cfg.prefix),
		token:     newToken(),
		in:        newInstruments(cfg.meterProvider),
		direct:    honoursContext(rdb),
		listening: make(chan struct{}),
	}
	s.health.log = cfg.logger
	s.slots.init()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	// A failed subscription is remembered by the client, which subscribes
	// again when it reconnects; the listener then resynchronises.
	s.sub = rdb.Subscribe(ctx, s.keys.notice)
	go s.listen(s.sub.ChannelWithSubscriptions(redis.WithChannelSize(noticeBuffer)))
	return s, nil
}

// honoursContext reports whether rdb's commands end at their context's
// deadline.
func honoursContext(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// Close stops the notice listener and the slot renewal, gives back the
// slots still held (best effort, within the timeout) and waits for calls
// still running in the background, which the client's own timeouts end.
// It does not close the Redis client.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.releaseAll()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		err = s.sub.Close()
		<-s.listening
		s.calls.Wait()
	})
	if err != nil {
		return fmt.Errorf("redisstore: close notice subscription: %w", err)
	}
	return nil
}

// result carries a detached call's answer back to its caller.
type result[T any] struct {
	v   T
	err error
}

// call runs f against Redis for operation op, bounded by the store's
// timeout and the caller's context, and turns every failure into an error
// wrapping ErrUnavailable. After a failure it skips Redis for the probe
// interval, so that a dead or paused Redis costs nothing but one probe per
// interval.
func call[T any](ctx context.Context, s *Store, op string, f func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		s.in.fallback(op, reasonCanceled)
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !s.health.admit(time.Now()) {
		s.in.fallback(op, reasonSkipped)
		return zero, fmt.Errorf("%w: not tried, it failed less than %v ago", ErrUnavailable, s.cfg.probeInterval)
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	start := time.Now()
	var r result[T]
	if s.direct {
		r.v, r.err = f(tctx)
	} else {
		r = detached(tctx, s, f)
	}
	elapsed := time.Since(start)
	switch {
	case r.err == nil:
		s.in.roundTrip(op, elapsed, nil)
		s.health.succeeded()
		return r.v, nil
	case ctx.Err() != nil:
		// The caller gave up; that says nothing of Redis.
		s.health.abandoned()
		s.in.fallback(op, reasonCanceled)
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case errors.Is(r.err, errClosed):
		s.in.fallback(op, reasonClosed)
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, r.err)
	}
	reason := reasonError
	if errors.Is(r.err, context.DeadlineExceeded) || isTimeout(r.err) {
		reason = reasonTimeout
	}
	s.in.roundTrip(op, elapsed, r.err)
	s.in.fallback(op, reason)
	s.health.failed(time.Now(), s.cfg.probeInterval, r.err)
	return zero, fmt.Errorf("%w: %w", ErrUnavailable, r.err)
}

// detached runs f in a goroutine of its own and waits for it until ctx
// ends. A client that ignores contexts returns at its own ReadTimeout; the
// goroutine then ends alone, and Close waits for it.
func detached[T any](ctx context.Context, s *Store, f func(context.Context) (T, error)) result[T] {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return result[T]{err: errClosed}
	}
	s.calls.Add(1)
	s.mu.Unlock()
	done := make(chan result[T], 1)
	go func() {
		defer s.calls.Done()
		v, err := f(ctx)
		done <- result[T]{v, err}
	}()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		return result[T]{err: ctx.Err()}
	}
}

// errClosed answers the calls made after Close on a client that needs a
// goroutine per call: Close has waited for those it knew of.
var errClosed = errors.New("store closed")

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
