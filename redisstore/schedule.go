package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// A Reservation is a slot of a budget's fleet-wide schedule: the throttle
// queue's own type, so that a Store is an options.Store.
type Reservation = options.Reservation

// ShareWindow is how recently a process must have reserved on a budget for
// its pace to count in the budget's fleet-wide rate before the fleet's
// throttles fitted one. The sum is what the fleet learned of the server's
// budget, which does not shrink when a process's requests all wait out a
// Retry-After or its work runs out first: the processes still sending then
// use the whole of it. It is the throttle queue's recovery window, as long
// as a budget stays paced after its last throttle.
const ShareWindow = 10 * time.Second

// The model of a budget's fleet-wide rate (scripts.go gives it whole). Each
// process's queue learns its own pace from its own releases, which are a
// share of what the server's budget sees; fitted alone, N processes each
// adjust a share where one rate should be adjusted, and a process whose
// work ends first leaves its share unused. The schedule sees every release
// of the fleet, so it fits the one rate from the throttles its processes
// report, as one process's pacer does from its own.
const (
	// fitShare is the share of the fitted rate the schedule runs at: the
	// fit counts what the server accepted, and running just under it
	// leaves the server's bucket room for the sends the fit did not see.
	fitShare = 0.97
	// probeAfter is the least time a fitted rate holds before the schedule
	// probes above it (at least twice the throttle's Retry-After, so that
	// each probe's 429, which costs its request a Retry-After, comes no
	// more often than that), and probeDoubling how fast the probe's rate
	// then doubles. The probe's first throttle holds the rate where it is
	// until the next one fits it, so the probe rises slowly: 3.5 % in its
	// first 0.1 s, which is about what the fit's margin leaves, and the
	// rate it holds while the fit is made is little above the server's.
	// A server whose budget doubled is followed within about 2 s.
	probeAfter    = 500 * time.Millisecond
	probeDoubling = 2 * time.Second
	// searchDoubling is how fast the fleet's search for a budget's rate
	// doubles, from its first release until a throttle stops it: as one
	// process's pacer searches, once per round trip of a nearby server,
	// so that a fleet finds the rate as soon as one process would. The
	// throttle that stops it reaches the schedule a round trip and a
	// report later; doubling faster would overshoot by more meanwhile.
	searchDoubling = 100 * time.Millisecond
	// idleSlack is how late after its slot a reservation may come and the
	// schedule still count the time between as busy: a process's round
	// trip to Redis and its timers' slack, not a fleet with nothing to
	// send.
	idleSlack = 10 * time.Millisecond
	// minBurst is the burst a fitted schedule allows after a quiet spell,
	// in seconds of its rate: the server's bucket refills meanwhile too.
	minBurst = 0.1
	// minSpan and minReleases are the least span between two throttles,
	// and releases within it, that the fit reads a rate from: fewer
	// releases round the rate by more than a few %.
	minSpan     = 50 * time.Millisecond
	minReleases = 20
	// maxSpan is the most: past it, the server's bucket may have filled
	// between the two throttles, and what it accepted says less than its
	// rate. The rate holds at least this long after the first throttle of
	// a fit, waiting for the second.
	maxSpan = 2 * time.Second
	// recentSpan is how far back the rate the fleet sent at is read when a
	// throttle says the server's bucket is dry: long enough to hold
	// dozens of releases, short enough to be the rate that dried it.
	recentSpan = 250 * time.Millisecond
	// minOffered is the least share of the schedule's rate that the fleet
	// must have released at between two throttles for the fit to read the
	// server's rate from them. A fleet whose requests all waited out a
	// Retry-After sends little; the server's bucket, refilling unused,
	// overflows, and what got through is far below its rate. At 0.8 a
	// schedule that releases as it should passes with room for timer slack
	// and the round trips of reservations.
	minOffered = 0.8
	// closedShare is the most of a span's releases the server may have
	// accepted for the span, inside the wait of the throttle that last
	// lowered the rate, to say the budget is closed rather than slower. A
	// token bucket refuses nine in ten only when sent ten times its rate,
	// and a search doubling once per round trip overshoots by two to four
	// times; a window that counts its refusals (HAProxy's stick table)
	// refuses everything until its wait ends, and each fit inside it
	// halved the fleet's rate again (616/s to 77/s in 100 ms).
	closedShare = 0.1
	// keepHistory is how long the send times of releases and throttles are
	// kept for the fit: past maxSpan, with room for a slow report.
	keepHistory = 2 * maxSpan
)

// scheduleArgs are the arguments the two schedule scripts share.
func (s *Store) scheduleArgs(p Pace, max time.Duration, budget string) []interface{} {
	return []interface{}{strconv.FormatFloat(p.Rate, 'g', 8, 64), p.Burst, max.Microseconds(),
		s.token, s.cfg.paceFor.Milliseconds(), ShareWindow.Microseconds(), budget,
		probeDoubling.Microseconds(), minBurst, keepHistory.Microseconds()}
}

func (s *Store) scheduleKeys(host, budget string) []string {
	return []string{s.keys.schedule(host, budget), s.keys.shares(host, budget), s.keys.pace(host),
		s.keys.released(host, budget), s.keys.refused(host, budget), s.keys.since(host)}
}

// Reserve takes the next slot of a budget's fleet-wide release schedule, in
// one round trip, and reports how long the caller must wait before it
// sends. The schedule runs on Redis's clock, so processes whose clocks
// disagree share it exactly.
//
// Until the fleet's throttles fitted the budget's rate (Throttled), the
// schedule runs at the sum of the paces p that the processes reserving on
// the budget within ShareWindow gave, so that their releases interleave
// instead of bunching; from then on it runs at the fitted rate alone, and
// the reservation reports Fitted. A slot further away than max is not
// taken: the reservation reports OK false and the wait it would have had,
// and the caller decides by its own limits (R23) without leaving a hole in
// the schedule. The pace one process of the fleet releases at (the fleet's
// over the number of processes) is published for State, where a process
// that joins later starts from it.
func (s *Store) Reserve(ctx context.Context, host, budget string, p Pace, max time.Duration) (Reservation, error) {
	if err := validatePace(p); err != nil {
		return Reservation{}, fmt.Errorf("redisstore: reserve %s/%s: %w", host, budget, err)
	}
	r, err := call(ctx, s, "reserve", func(ctx context.Context) ([]int64, error) {
		args := append(s.scheduleArgs(p, max, budget), searchDoubling.Microseconds(), idleSlack.Microseconds())
		return reserveScript.Run(ctx, s.rdb, s.scheduleKeys(host, budget), args...).Int64Slice()
	})
	if err == nil && len(r) != 4 {
		err = fmt.Errorf("%w: unexpected reply %v", ErrUnavailable, r)
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("redisstore: reserve %s/%s: %w", host, budget, err)
	}
	s.in.recordPace(host, budget, float64(r[2])/1000)
	return Reservation{Wait: time.Duration(r[1]) * time.Microsecond, OK: r[0] == 1, Fitted: r[3] == 1}, nil
}

// Throttled records that a request of budget that took a slot of its
// schedule was throttled, sent ago before now, the server asking for
// retryAfter, and fits the budget's fleet-wide rate from it: from one
// throttle to the next the server's bucket refilled at its rate and every
// token went to a request the fleet sent, so that rate is what the fleet
// sent between the two, less what was throttled, over the time between.
// The schedule then runs at 97 % of it, holds that for twice retryAfter
// (at least half a second), and probes above it. A throttle of a request
// sent before the last change of the rate, or within two of its round
// trips after, is counted and changes nothing: it met the congestion that
// change answered.
func (s *Store) Throttled(ctx context.Context, host, budget string, ago, retryAfter time.Duration) error {
	if ago < 0 || retryAfter < 0 {
		return fmt.Errorf("redisstore: throttled %s/%s: ago %v, retry after %v: want >= 0", host, budget, ago, retryAfter)
	}
	hold := max(probeAfter, 2*retryAfter)
	args := append(s.scheduleArgs(Pace{Rate: 1, Burst: 1}, 0, budget),
		ago.Microseconds(), hold.Microseconds(), fitShare, minSpan.Microseconds(), minReleases, maxSpan.Microseconds(),
		recentSpan.Microseconds(), minOffered, probeAfter.Microseconds(), retryAfter.Microseconds(), closedShare)
	r, err := call(ctx, s, "throttled", func(ctx context.Context) ([]int64, error) {
		return throttleScript.Run(ctx, s.rdb, s.scheduleKeys(host, budget), args...).Int64Slice()
	})
	if err == nil && len(r) != 2 {
		err = fmt.Errorf("%w: unexpected reply %v", ErrUnavailable, r)
	}
	if err != nil {
		return fmt.Errorf("redisstore: throttled %s/%s: %w", host, budget, err)
	}
	if r[0] == 1 {
		s.in.recordPace(host, budget, float64(r[1])/1000)
	}
	return nil
}
