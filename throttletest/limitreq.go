package throttletest

import (
	"fmt"
	"math"
	"time"
)

// LimitReq is nginx's limit_req with nodelay: a leaky bucket kept in
// milliseconds, as ngx_http_limit_req_module.c keeps it, so that virtual-time
// tests see exactly what a real nginx in front of a server answers.
//
// nginx keeps, per key, an excess in thousandths of a request and the
// millisecond of the last admitted request. A request at ms computes
//
//	excess' = max(0, excess − rate·(ms − last)/1000 + 1000)
//
// with rate in thousandths of a request per second and integer division,
// and is refused when excess' > 1000·Burst; an admitted request stores
// excess' (and ms as last when time moved). A refused request changes
// nothing. A key's first request passes with an excess of 0, so Burst+1
// requests pass at once and then one every 1/Rate: n requests take at least
// (n − Burst − 1)/Rate.
type LimitReq struct {
	// Rate is the zone's rate in requests per second (nginx's rate=Nr/s;
	// N r/m is N/60). It must be positive.
	Rate float64
	// Burst is limit_req's burst: the excess, in requests, the bucket
	// admits.
	Burst int
}

func (l LimitReq) validate() error {
	switch {
	case !(l.Rate > 0) || math.IsInf(l.Rate, 0) || int64(l.Rate*1000) < 1:
		return fmt.Errorf("throttletest: LimitReq.Rate = %v must be a finite number of at least 0.001", l.Rate)
	case l.Burst < 0:
		return fmt.Errorf("throttletest: LimitReq.Burst = %d must not be negative", l.Burst)
	}
	return nil
}

// LimitReqLimiter returns a Rule.Limiter that gives every key nginx's
// limit_req bucket l. A request's cost counts as that many requests. It
// returns an error when l is invalid.
func LimitReqLimiter(l LimitReq) (func(key string, now time.Time) Limiter, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	return func(string, time.Time) Limiter {
		return &limitReq{rate: int64(l.Rate * 1000), burst: int64(l.Burst) * 1000}
	}, nil
}

// limitReq is one key's node of an nginx limit_req zone.
type limitReq struct {
	rate   int64 // thousandths of a request drained per second (ctx->rate)
	burst  int64 // thousandths of a request (limit->burst)
	excess int64 // thousandths of a request (lr->excess)
	last   int64 // Unix milliseconds (lr->last)
	seen   bool  // the node exists
}

// excessAt is nginx's excess' for a request of cost at ms.
func (l *limitReq) excessAt(ms int64, cost float64) int64 {
	if !l.seen {
		return 0
	}
	return max(0, l.excess-l.rate*l.elapsed(ms)/1000+milli(cost))
}

// elapsed is nginx's ms: the time since the last admitted request, never
// negative.
func (l *limitReq) elapsed(ms int64) int64 { return max(0, ms-l.last) }

func milli(cost float64) int64 { return int64(math.Round(cost * 1000)) }

// Wait returns 0 when nginx admits the request now, and otherwise the time
// until the excess has drained enough for it.
func (l *limitReq) Wait(now time.Time, cost float64) time.Duration {
	ms := now.UnixMilli()
	if l.excessAt(ms, cost) <= l.burst {
		return 0
	}
	// The least d with excess − rate·d/1000 + cost ≤ burst.
	need := l.excess + milli(cost) - l.burst
	d := (need*1000 + l.rate - 1) / l.rate
	return time.UnixMilli(l.last + d).Sub(now)
}

// Take admits a request of cost at now.
func (l *limitReq) Take(now time.Time, cost float64) {
	ms := now.UnixMilli()
	l.excess = l.excessAt(ms, cost)
	if !l.seen || l.elapsed(ms) > 0 {
		l.last = ms
	}
	l.seen = true
}

// Budget reports burst+1 as the limit, the requests that would pass now,
// and the time until the excess has drained to nothing.
func (l *limitReq) Budget(now time.Time) Budget {
	ms := now.UnixMilli()
	drained := int64(0)
	if l.seen {
		drained = max(0, l.excess-l.rate*l.elapsed(ms)/1000)
	}
	limit := float64(l.burst/1000 + 1)
	return Budget{
		Limit:     limit,
		Remaining: float64((l.burst-drained)/1000 + 1),
		Reset:     time.Duration(drained * int64(time.Second) / l.rate),
		Window:    time.Duration(float64(l.burst+1000) / float64(l.rate) * float64(time.Second)),
	}
}
