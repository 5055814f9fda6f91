package throttletest

import (
	"fmt"
	"sort"
	"time"
)

// StickTable is HAProxy's rate limiting by a stick-table counter:
// `http-request track-sc0 src` counts every request of a key into
// http_req_rate(Period), and `http-request deny if { sc_http_req_rate(0) gt
// Limit }` refuses it when the estimate, this request included, is above
// Limit. It is modelled in milliseconds as HAProxy's freq_ctr keeps it, so
// that virtual-time tests see what a real HAProxy answers.
//
// The counter holds the count of the current period (curr), of the previous
// one (prev) and the start of the current one (tick). A request at ms first
// rotates: when a period has passed since tick, prev takes curr and tick
// moves one period on, and when two have passed, prev is 0 and tick is ms
// (so the first period starts at a key's first request). It then adds its
// cost to curr. The rate read at ms is
//
//	(prev·remain + curr·Period) / Period, remain = tick + Period − ms
//
// in integer division (freq_ctr_total): the previous period's count weighed
// by the share of it still inside the sliding window. Refused requests count
// too, so a client that keeps sending while refused stays refused. A client
// that never sends a refused request gets Limit at once and then Limit per
// Period: n requests take at least (n − Limit)/Limit periods.
type StickTable struct {
	// Limit is the most requests per Period, the estimate at which a
	// request is still admitted.
	Limit int
	// Period is the counter's period, a whole number of milliseconds.
	Period time.Duration
}

func (s StickTable) validate() error {
	switch {
	case s.Limit < 1:
		return fmt.Errorf("throttletest: StickTable.Limit = %d must be at least 1", s.Limit)
	case s.Period < time.Millisecond || s.Period%time.Millisecond != 0:
		return fmt.Errorf("throttletest: StickTable.Period = %v must be a whole number of milliseconds, at least 1", s.Period)
	}
	return nil
}

// StickTableLimiter returns a Rule.Limiter that gives every key HAProxy's
// stick-table counter s; its limiters are Refusers, so refused requests
// count. It returns an error when s is invalid.
func StickTableLimiter(s StickTable) (func(key string, now time.Time) Limiter, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return func(string, time.Time) Limiter {
		return &stickTable{limit: int64(s.Limit), period: s.Period.Milliseconds()}
	}, nil
}

// stickTable is one key's freq_ctr and the limit read against it.
type stickTable struct {
	limit      int64
	period     int64 // ms
	tick       int64 // Unix ms of the current period's start (curr_tick)
	curr, prev int64 // curr_ctr, prev_ctr
}

// add counts inc at ms (update_freq_ctr_period).
func (s *stickTable) add(ms, inc int64) {
	if ms-s.tick < s.period {
		s.curr += inc
		return
	}
	s.prev, s.curr = s.curr, inc
	s.tick += s.period
	if ms-s.tick >= s.period {
		s.prev, s.tick = 0, ms
	}
}

// rate is the estimate at ms (read_freq_ctr_period).
func (s *stickTable) rate(ms int64) int64 {
	past, curr := s.prev, s.curr
	remain := s.tick + s.period - ms
	if remain < 0 {
		remain += s.period
		past, curr = 0, 0
		if remain >= 0 {
			past = s.curr
		}
	}
	if remain < 0 {
		return 0
	}
	return (past*remain + curr*s.period) / s.period
}

// admits reports whether a request of cost at ms, once counted, leaves the
// estimate at or below the limit.
func (s *stickTable) admits(ms int64, cost float64) bool {
	c := *s
	c.add(ms, max(1, int64(cost+0.5)))
	return c.rate(ms) <= s.limit
}

// Wait returns 0 when HAProxy admits the request now, and otherwise the
// time until it would, were nothing else sent meanwhile. The estimate only
// falls while nothing is counted, so the first such millisecond is found by
// bisection; two periods on, the counter has forgotten everything.
func (s *stickTable) Wait(now time.Time, cost float64) time.Duration {
	ms := now.UnixMilli()
	if s.admits(ms, cost) {
		return 0
	}
	horizon := 2*s.period + 1
	d := sort.Search(int(horizon), func(d int) bool { return s.admits(ms+int64(d), cost) })
	return time.UnixMilli(ms + int64(d)).Sub(now)
}

// Take counts an admitted request.
func (s *stickTable) Take(now time.Time, cost float64) {
	s.add(now.UnixMilli(), max(1, int64(cost+0.5)))
}

// Refuse counts a refused request, as track-sc0 does before the deny rule.
func (s *stickTable) Refuse(now time.Time, cost float64) { s.Take(now, cost) }

// Budget reports the limit, what is left of it at the current estimate,
// and the time until the counter has forgotten every request.
func (s *stickTable) Budget(now time.Time) Budget {
	ms := now.UnixMilli()
	return Budget{
		Limit:     float64(s.limit),
		Remaining: float64(max(0, s.limit-s.rate(ms))),
		Reset:     time.Duration(max(0, s.tick+2*s.period-ms)) * time.Millisecond,
		Window:    time.Duration(s.period) * time.Millisecond,
	}
}
