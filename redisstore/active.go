package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxHosts bounds the hosts known active, in Redis and in each process
// (R25): a fleet talks to a handful of hosts; past this many the ones
// closest to expiry are forgotten first.
const maxHosts = 4096

// noticeBuffer is how many notices may wait for the listener. A notice is
// sent once per host per half of ActiveFor, so even a burst of first
// throttles over many hosts fits; a full buffer drops notices, which the
// next resync (on reconnect) or the host's next throttle repairs.
const noticeBuffer = 256

// activeSet is this process's copy of the hosts throttled somewhere in the
// fleet, each with the time (on the process's clock) until which it stays
// active. It is read on every request without a lock: writers copy the map,
// which changes only on a host's first throttle or a notice.
type activeSet struct {
	max int        // hosts kept; 0 means maxHosts
	mu  sync.Mutex // serialises writers
	m   atomic.Pointer[map[string]time.Time]
}

// until reports until when host is active, and whether it is at all.
func (a *activeSet) until(host string, now time.Time) (time.Time, bool) {
	m := a.m.Load()
	if m == nil {
		return time.Time{}, false
	}
	t, ok := (*m)[host]
	if !ok || !now.Before(t) {
		return time.Time{}, false
	}
	return t, true
}

// extend makes host active until until, unless it already is until at
// least until-slack: a copy of the map per throttle would cost more than
// the few seconds of activity it adds.
func (a *activeSet) extend(host string, until, now time.Time, slack time.Duration) {
	if t, ok := a.until(host, now); ok && !t.Before(until.Add(-slack)) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	next := make(map[string]time.Time)
	if m := a.m.Load(); m != nil {
		for h, t := range *m {
			if now.Before(t) {
				next[h] = t
			}
		}
	}
	if until.After(next[host]) {
		next[host] = until
	}
	limit := a.max
	if limit == 0 {
		limit = maxHosts
	}
	for len(next) > limit {
		delete(next, soonest(next))
	}
	a.m.Store(&next)
}

func soonest(m map[string]time.Time) string {
	var host string
	var first time.Time
	for h, t := range m {
		if host == "" || t.Before(first) {
			host, first = h, t
		}
	}
	return host
}

// Active reports whether some process of the fleet saw host throttled
// within the ActiveFor duration (this process included). It is answered
// from memory, without a round trip or a lock: a host no process saw
// throttled costs nothing. Other processes' first throttles reach it
// through the notice channel within a round trip's time.
func (s *Store) Active(host string) bool {
	m := s.active.m.Load()
	if m == nil {
		return false
	}
	t, ok := (*m)[host]
	// The clock is read only for a host some process throttled.
	return ok && s.cfg.now().Before(t)
}

// MarkActive records that host answered a throttle that named no hold (a
// bare 429, a 503 while the host's other requests succeed). On the host's
// first throttle in the fleet every other process learns it is active.
func (s *Store) MarkActive(ctx context.Context, host string) error {
	return s.mark(ctx, "mark", host, "", 0)
}

// mark runs markScript and makes the host active locally too, whether or
// not Redis answered: this process saw the throttle.
func (s *Store) mark(ctx context.Context, op, host, key string, hold time.Duration) error {
	now := s.cfg.now()
	s.active.extend(host, now.Add(hold+s.cfg.activeFor), now, s.cfg.activeFor/2)
	r, err := call(ctx, s, op, func(ctx context.Context) ([]int64, error) {
		return markScript.Run(ctx, s.rdb, []string{s.keys.holds(host), s.keys.hosts, s.keys.since(host)},
			key, hold.Milliseconds(), s.cfg.activeFor.Milliseconds(), s.keys.notice, host,
			maxHoldsPerHost, maxHosts).Int64Slice()
	})
	if err != nil {
		return fmt.Errorf("redisstore: %s host %q: %w", op, host, err)
	}
	if len(r) == 2 {
		s.active.extend(host, now.Add(time.Duration(r[1])*time.Millisecond), now, s.cfg.activeFor/2)
	}
	return nil
}

// listen applies the fleet's notices until the subscription is closed. On
// every (re)subscription it reads the hosts already active, since notices
// sent while it was not subscribed are lost.
func (s *Store) listen(ch <-chan interface{}) {
	defer close(s.listening)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.resync()
			}
		case *redis.Message:
			s.notice(m.Payload)
		}
	}
}

// notice applies one "<remaining ms> <host>" notice.
func (s *Store) notice(payload string) {
	ms, host, ok := strings.Cut(payload, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n <= 0 || host == "" {
		return // not ours; a notice is only ever a hint
	}
	now := s.cfg.now()
	s.active.extend(host, now.Add(time.Duration(n)*time.Millisecond), now, s.cfg.activeFor/2)
}

// resync loads the scripts into Redis, so that callers do not each find
// them missing after a restart, and reads the hosts active in the fleet
// into the local set; one round trip.
func (s *Store) resync() {
	r, err := call(context.Background(), s, "hosts", func(ctx context.Context) ([]interface{}, error) {
		pipe := s.rdb.Pipeline()
		for _, sc := range scripts {
			sc.Load(ctx, pipe)
		}
		hosts := hostsScript.EvalSha(ctx, pipe, []string{s.keys.hosts})
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		return hosts.Slice()
	})
	if err != nil {
		return // counted as a fallback; the next notice or reconnect tries again
	}
	now := s.cfg.now()
	for i := 0; i+1 < len(r); i += 2 {
		host, _ := r[i].(string)
		ms, _ := r[i+1].(int64)
		if host != "" && ms > 0 {
			s.active.extend(host, now.Add(time.Duration(ms)*time.Millisecond), now, s.cfg.activeFor/2)
		}
	}
}
