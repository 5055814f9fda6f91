package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// A Slot is one of a fleet-wide semaphore's slots, held by this process
// until Release. The store renews its lease while it is held; if the
// process dies, the lease ends and the slot is free again.
type Slot struct {
	s     *Store
	key   string // the semaphore's key
	token string
}

// Acquire takes one of limit slots shared by the fleet for target key of
// host (Outlook's 4 concurrent requests per mailbox, say), in one round
// trip, and returns it as a *Slot. When all are taken it returns a nil
// Slot and how long until the first lease ends at the latest: a holder
// that releases frees its slot sooner, so callers try again after a
// shorter wait of their own. It implements options.SlotStore, through
// which the queue keeps QueueOptions.Concurrency's caps fleet-wide.
func (s *Store) Acquire(ctx context.Context, host, key string, limit int) (options.Slot, time.Duration, error) {
	if limit < 1 {
		return nil, 0, fmt.Errorf("redisstore: acquire %s/%s: limit %d: want >= 1", host, key, limit)
	}
	sl := &Slot{s: s, key: s.keys.slots(host, key), token: newToken()}
	r, err := call(ctx, s, "acquire", func(ctx context.Context) ([]int64, error) {
		return acquireScript.Run(ctx, s.rdb, []string{sl.key}, sl.token, limit, s.cfg.slotLease.Milliseconds()).Int64Slice()
	})
	if err == nil && len(r) != 2 {
		err = fmt.Errorf("%w: unexpected reply %v", ErrUnavailable, r)
	}
	if err != nil {
		// The script may have run after the call stopped waiting for it
		// (a call that outlives the store's bound still reaches Redis):
		// the slot is given back as soon as Redis answers, rather than
		// held by no one until its lease ends.
		s.slots.orphan(sl, s)
		return nil, 0, fmt.Errorf("redisstore: acquire %s/%s: %w", host, key, err)
	}
	if r[0] != 1 {
		return nil, time.Duration(r[1]) * time.Millisecond, nil
	}
	s.slots.add(sl, s)
	return sl, 0, nil
}

// Release gives the slot back to the fleet. Releasing twice is harmless; a
// release that fails leaves the slot to end with its lease.
func (sl *Slot) Release(ctx context.Context) error {
	s := sl.s
	s.slots.remove(sl)
	_, err := call(ctx, s, "release", func(ctx context.Context) (int64, error) {
		return s.rdb.ZRem(ctx, sl.key, sl.token).Result()
	})
	if err != nil {
		return fmt.Errorf("redisstore: release slot of %s: %w", sl.key, err)
	}
	return nil
}

// tokenBytes makes slot tokens unique across a fleet without coordination.
const tokenBytes = 12

func newToken() string {
	var b [tokenBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// slotSet is the slots this process holds, renewed every third of the
// lease by one goroutine that runs only while some are held, and the
// slots whose Acquire failed, which that goroutine gives back.
type slotSet struct {
	mu      sync.Mutex
	held    map[*Slot]struct{}
	orphans map[*Slot]struct{}
	running bool
	stopped bool
	quit    chan struct{}
	kick    chan struct{} // orphans to give back
	done    sync.WaitGroup
}

func (ss *slotSet) init() {
	ss.held = map[*Slot]struct{}{}
	ss.orphans = map[*Slot]struct{}{}
	ss.quit = make(chan struct{})
	ss.kick = make(chan struct{}, 1)
}

func (ss *slotSet) add(sl *Slot, s *Store) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.held[sl] = struct{}{}
	ss.start(s)
}

// orphan records a slot that may have been taken for no one, to be
// given back.
func (ss *slotSet) orphan(sl *Slot, s *Store) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.orphans[sl] = struct{}{}
	ss.start(s)
	select {
	case ss.kick <- struct{}{}:
	default:
	}
}

// start runs the renewer unless it runs; the caller holds ss.mu.
func (ss *slotSet) start(s *Store) {
	if ss.running || ss.stopped {
		return
	}
	ss.running = true
	ss.done.Add(1)
	go s.renew()
}

func (ss *slotSet) remove(sl *Slot) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.held, sl)
}

// snapshot returns the held slots and the orphans, or false when the
// renewer should end (neither, or the store closing).
func (ss *slotSet) snapshot() (held, orphans []*Slot, ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.held) == 0 && len(ss.orphans) == 0 || ss.stopped {
		ss.running = false
		return nil, nil, false
	}
	for sl := range ss.held {
		held = append(held, sl)
	}
	for sl := range ss.orphans {
		orphans = append(orphans, sl)
	}
	return held, orphans, true
}

// stop ends the renewer and returns the slots still held.
func (ss *slotSet) stop() []*Slot {
	ss.mu.Lock()
	if !ss.stopped {
		ss.stopped = true
		close(ss.quit)
	}
	out := make([]*Slot, 0, len(ss.held)+len(ss.orphans))
	for sl := range ss.held {
		out = append(out, sl)
	}
	for sl := range ss.orphans {
		out = append(out, sl)
	}
	clear(ss.held)
	clear(ss.orphans)
	ss.mu.Unlock()
	ss.done.Wait()
	return out
}

// renew extends the leases of the held slots every third of the lease, in
// one round trip, until none are held. A slot whose lease already ended
// (Redis was away longer than a lease, or restarted empty) is dropped from
// renewal: its holder finishes its request, failing open, and the fleet
// counts the slot free.
//
// It gives the orphans back as they come, and again every probe interval
// until Redis answers: a slot taken for no one would otherwise keep one
// of the fleet's few slots of its target busy for a whole lease.
func (s *Store) renew() {
	defer s.slots.done.Done()
	every := s.cfg.slotLease / 3
	t := time.NewTicker(min(every, s.cfg.probeInterval))
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-s.slots.quit:
			return
		case <-t.C:
		case <-s.slots.kick:
		}
		held, orphans, ok := s.slots.snapshot()
		if !ok {
			return
		}
		if len(orphans) > 0 {
			s.giveBack("release", orphans)
		}
		if time.Since(renewed) < every || len(held) == 0 {
			continue
		}
		renewed = time.Now()
		keys := make([]string, len(held))
		args := make([]interface{}, 1, len(held)+1)
		args[0] = s.cfg.slotLease.Milliseconds()
		for i, sl := range held {
			keys[i] = sl.key
			args = append(args, sl.token)
		}
		r, err := call(context.Background(), s, "renew", func(ctx context.Context) ([]int64, error) {
			return renewScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
		})
		if err != nil {
			continue // counted; the leases run on and the next tick tries again
		}
		for i, sl := range held {
			if i < len(r) && r[i] == 0 {
				s.slots.remove(sl)
			}
		}
	}
}

// releaseAll gives back the slots held when the store closes, in one round
// trip, so that the fleet need not wait for their leases to end.
func (s *Store) releaseAll() {
	if held := s.slots.stop(); len(held) > 0 {
		s.giveBack("release", held)
	}
}

// giveBack removes slots from the fleet's semaphores in one round trip
// and reports whether Redis answered; orphans it gave back are no longer
// orphans.
func (s *Store) giveBack(op string, slots []*Slot) bool {
	_, err := call(context.Background(), s, op, func(ctx context.Context) (struct{}, error) {
		pipe := s.rdb.Pipeline()
		for _, sl := range slots {
			pipe.ZRem(ctx, sl.key, sl.token)
		}
		_, err := pipe.Exec(ctx)
		return struct{}{}, err
	})
	if err != nil {
		return false
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	for _, sl := range slots {
		delete(s.slots.orphans, sl)
	}
	return true
}
