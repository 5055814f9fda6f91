package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// maxHoldsPerHost bounds the holds kept for one host (R25). Graph names a
// hold per throttled URL or path; past this many, the ones ending first are
// dropped first.
const maxHoldsPerHost = 1024

// A Pace is a budget's learned pace: requests per second, and how many may
// go at once after a quiet spell. It is the throttle queue's own type, so
// that a Store is an options.Store.
type Pace = options.Pace

func validatePace(p Pace) error {
	if !(p.Rate > 0) || math.IsInf(p.Rate, 1) {
		return fmt.Errorf("rate %v: want a finite rate > 0", p.Rate)
	}
	if p.Burst < 1 {
		return fmt.Errorf("burst %d: want >= 1", p.Burst)
	}
	return nil
}

// An Announcement is what a server said is left of a budget in its
// rate-limit headers, and when the budget resets.
type Announcement = options.Announcement

// HostState is what the fleet knows of one host, on the reader's clock:
// target key -> held until, budget -> pace, budget -> what the server
// announced.
type HostState = options.FleetState

// The store is the throttle queue's fleet store.
var (
	_ options.SlotStore = (*Store)(nil)
	_ options.PaceStore = (*Store)(nil)
)

// SetHold records that the server holds target key of host until until
// (on this process's clock: Redis keeps the duration from its own now) and
// that host is throttled. A later until for the same key wins; the hold
// expires from Redis when it ends. Other processes learn of the host's first
// throttle through the notice channel.
func (s *Store) SetHold(ctx context.Context, host, key string, until time.Time) error {
	d := until.Sub(s.cfg.now())
	if d < time.Millisecond {
		return nil // over already; nothing to share
	}
	return s.mark(ctx, "hold", host, key, d)
}

// State reads what the fleet knows of host in one round trip: the holds
// not yet over, the published paces and the announced budgets not yet
// reset. A process calls it when it learns the host is active.
func (s *Store) State(ctx context.Context, host string) (HostState, error) {
	r, err := call(ctx, s, "state", func(ctx context.Context) ([]interface{}, error) {
		return stateScript.Run(ctx, s.rdb,
			[]string{s.keys.holds(host), s.keys.pace(host), s.keys.announced(host), s.keys.since(host)}).Slice()
	})
	if err != nil {
		return HostState{}, fmt.Errorf("redisstore: state of host %q: %w", host, err)
	}
	st, err := s.parseState(host, r)
	if err != nil {
		return HostState{}, fmt.Errorf("redisstore: state of host %q: %w", host, err)
	}
	return st, nil
}

func (s *Store) parseState(host string, r []interface{}) (HostState, error) {
	if len(r) != 4 {
		return HostState{}, fmt.Errorf("%w: unexpected reply of %d parts", ErrUnavailable, len(r))
	}
	now := s.cfg.now()
	st := HostState{Holds: map[string]time.Time{}, Paces: map[string]Pace{}, Announced: map[string]Announcement{}}
	holds, _ := r[0].([]interface{})
	for i := 0; i+1 < len(holds); i += 2 {
		key, _ := holds[i].(string)
		ms, _ := holds[i+1].(int64)
		st.Holds[key] = now.Add(time.Duration(ms) * time.Millisecond)
	}
	paces, _ := r[1].([]interface{})
	for i := 0; i+1 < len(paces); i += 2 {
		budget, _ := paces[i].(string)
		v, _ := paces[i+1].(string)
		if p, ok := parsePace(v); ok {
			st.Paces[budget] = p
			s.in.recordPace(host, budget, p.Rate)
		}
	}
	ann, _ := r[2].([]interface{})
	for i := 0; i+2 < len(ann); i += 3 {
		budget, _ := ann[i].(string)
		rem, _ := ann[i+1].(int64)
		ms, _ := ann[i+2].(int64)
		st.Announced[budget] = Announcement{Remaining: int(rem), Reset: now.Add(time.Duration(ms) * time.Millisecond)}
	}
	if age, _ := r[3].(int64); age >= 0 {
		st.Throttled = now.Add(-time.Duration(age) * time.Millisecond)
	}
	return st, nil
}

// SetPace publishes the pace this process learned for a budget of host, so
// that the others, and processes joining later, pace by it. The last
// writer wins; the pace expires PaceFor after its last update. It also
// counts as this process's share of the budget's fleet-wide rate for
// ShareWindow, as a reservation's pace does (Reserve): a process whose
// requests all wait out a Retry-After reserves nothing, yet what the
// server let it through is part of what the fleet's search starts from.
func (s *Store) SetPace(ctx context.Context, host, budget string, p Pace) error {
	if err := validatePace(p); err != nil {
		return fmt.Errorf("redisstore: pace of %s/%s: %w", host, budget, err)
	}
	_, err := call(ctx, s, "pace", func(ctx context.Context) (int64, error) {
		return paceScript.Run(ctx, s.rdb, []string{s.keys.pace(host), s.keys.shares(host, budget)},
			budget, formatPace(p), s.cfg.paceFor.Milliseconds(), s.token, ShareWindow.Microseconds()).Int64()
	})
	if err != nil {
		return fmt.Errorf("redisstore: pace of %s/%s: %w", host, budget, err)
	}
	s.in.recordPace(host, budget, p.Rate)
	return nil
}

func formatPace(p Pace) string {
	return strconv.FormatFloat(p.Rate, 'g', -1, 64) + " " + strconv.Itoa(p.Burst)
}

func parsePace(v string) (Pace, bool) {
	r, b, ok := strings.Cut(v, " ")
	if !ok {
		return Pace{}, false
	}
	rate, err1 := strconv.ParseFloat(r, 64)
	burst, err2 := strconv.Atoi(b)
	p := Pace{Rate: rate, Burst: burst}
	return p, err1 == nil && err2 == nil && validatePace(p) == nil
}

// Announce shares what the server announced of a budget of host: how many
// requests remain until reset (on this process's clock). Within one window
// the lowest remaining count wins, since servers count down; the
// announcement expires at its reset.
func (s *Store) Announce(ctx context.Context, host, budget string, remaining int, reset time.Time) error {
	d := reset.Sub(s.cfg.now())
	if d < time.Millisecond {
		return nil // reset already: nothing left to share
	}
	_, err := call(ctx, s, "announce", func(ctx context.Context) (int64, error) {
		return announceScript.Run(ctx, s.rdb, []string{s.keys.announced(host)},
			budget, remaining, d.Milliseconds()).Int64()
	})
	if err != nil {
		return fmt.Errorf("redisstore: announce %s/%s: %w", host, budget, err)
	}
	return nil
}
