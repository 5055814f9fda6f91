package throttletest

import (
	"fmt"
	"math"
	"time"
)

// Window is a quota of requests per window of time (Per), the other common
// shape of a server's limiter besides the token bucket. A fixed window
// grants the whole quota again the moment the next window opens; a sliding
// window admits a request when fewer than Quota were admitted in the
// window of length Per before it.
type Window struct {
	// Quota is what the requests admitted in one window may cost in all.
	Quota int
	// Per is the length of a window; windows are counted from the first
	// request the limiter sees.
	Per time.Duration
}

func (w Window) validate() error {
	switch {
	case w.Quota < 1:
		return fmt.Errorf("throttletest: Window.Quota = %d must be at least 1", w.Quota)
	case w.Per <= 0:
		return fmt.Errorf("throttletest: Window.Per = %v must be positive", w.Per)
	}
	return nil
}

// FixedWindowLimiter returns a Rule.Limiter that gives every key a fixed
// window of its own, its first window opening at the key's first request.
// It returns an error when w is invalid.
func FixedWindowLimiter(w Window) (func(key string, now time.Time) Limiter, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	return func(_ string, now time.Time) Limiter { return &fixedWindow{Window: w, start: now} }, nil
}

// SlidingWindowLimiter returns a Rule.Limiter that gives every key a
// sliding window of its own. It returns an error when w is invalid.
func SlidingWindowLimiter(w Window) (func(key string, now time.Time) Limiter, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	return func(string, time.Time) Limiter { return &slidingWindow{Window: w} }, nil
}

// fixedWindow counts what was admitted since its current window opened.
type fixedWindow struct {
	Window
	start time.Time // of the current window
	used  float64
}

// roll moves to the window that holds now, releasing the quota.
func (f *fixedWindow) roll(now time.Time) {
	if elapsed := now.Sub(f.start); elapsed >= f.Per {
		f.start = f.start.Add(elapsed - elapsed%f.Per)
		f.used = 0
	}
}

// Wait returns 0 while the window has room for cost, and otherwise the
// time until the next window opens. A cost above the quota waits for a
// window of its own.
func (f *fixedWindow) Wait(now time.Time, cost float64) time.Duration {
	f.roll(now)
	if f.used == 0 || f.used+cost <= float64(f.Quota) {
		return 0
	}
	return f.start.Add(f.Per).Sub(now)
}

// Take counts cost in the current window.
func (f *fixedWindow) Take(now time.Time, cost float64) {
	f.roll(now)
	f.used += cost
}

// Budget reports the quota, what is left of it and the time until the
// next window opens.
func (f *fixedWindow) Budget(now time.Time) Budget {
	f.roll(now)
	return Budget{Limit: float64(f.Quota), Remaining: max(0, float64(f.Quota)-f.used),
		Reset: f.start.Add(f.Per).Sub(now), Window: f.Per}
}

// slidingWindow keeps the requests admitted in the last window, oldest
// first, so that one leaves the window exactly a window after it came.
type slidingWindow struct {
	Window
	log  []admitted
	used float64 // the sum of the log's costs
}

type admitted struct {
	at   time.Time
	cost float64
}

// expire drops what left the window by now.
func (s *slidingWindow) expire(now time.Time) {
	i := 0
	for i < len(s.log) && !now.Before(s.log[i].at.Add(s.Per)) {
		s.used -= s.log[i].cost
		i++
	}
	s.log = s.log[i:]
	if len(s.log) == 0 {
		s.used = 0 // no drift from adding and subtracting fractions
	}
}

// Wait returns 0 while the last window has room for cost, and otherwise
// the time until enough admitted requests leave it. A cost above the quota
// waits for an empty window.
func (s *slidingWindow) Wait(now time.Time, cost float64) time.Duration {
	s.expire(now)
	need := min(cost, float64(s.Quota))
	free := float64(s.Quota) - s.used
	if free >= need {
		return 0
	}
	for _, a := range s.log {
		if free += a.cost; free >= need {
			return a.at.Add(s.Per).Sub(now)
		}
	}
	return 0 // not reached: an empty window has room for the quota
}

// Take logs cost at now.
func (s *slidingWindow) Take(now time.Time, cost float64) {
	s.expire(now)
	s.log = append(s.log, admitted{at: now, cost: cost})
	s.used += cost
}

// Budget reports the quota, what is left of it in the last window and the
// time until the oldest admitted request leaves it.
func (s *slidingWindow) Budget(now time.Time) Budget {
	s.expire(now)
	b := Budget{Limit: float64(s.Quota), Remaining: max(0, float64(s.Quota)-s.used), Window: s.Per}
	if len(s.log) > 0 {
		b.Reset = s.log[0].at.Add(s.Per).Sub(now)
	}
	return b
}

// RateStep changes a token bucket's refill rate at a time after the
// bucket's first request.
type RateStep struct {
	After time.Duration
	Rate  float64
}

// ScheduledBucketLimiter returns a Rule.Limiter that gives every key a
// token bucket b whose rate changes as steps say, counted from the key's
// first request: a server whose capacity falls and comes back. Steps must
// be in increasing order of After, with positive finite rates.
func ScheduledBucketLimiter(b Bucket, steps ...RateStep) (func(key string, now time.Time) Limiter, error) {
	if err := b.validate("Bucket"); err != nil {
		return nil, err
	}
	if !b.enabled() {
		return nil, fmt.Errorf("throttletest: Bucket.Rate = %v must be positive for a schedule", b.Rate)
	}
	for i, s := range steps {
		if !(s.Rate > 0) || math.IsInf(s.Rate, 0) {
			return nil, fmt.Errorf("throttletest: RateStep[%d].Rate = %v must be a positive finite number", i, s.Rate)
		}
		if s.After < 0 || i > 0 && s.After <= steps[i-1].After {
			return nil, fmt.Errorf("throttletest: RateStep[%d].After = %v must be after the previous step and not negative", i, s.After)
		}
	}
	steps = append([]RateStep(nil), steps...)
	return func(_ string, now time.Time) Limiter {
		return &scheduledBucket{tokenBucket: newTokenBucket(b, now), start: now, steps: steps}
	}, nil
}

// scheduledBucket is a token bucket that applies each rate step when its
// time comes, refilling at the old rate up to that moment.
type scheduledBucket struct {
	*tokenBucket
	start time.Time
	steps []RateStep // still to come
}

func (s *scheduledBucket) advance(now time.Time) {
	for len(s.steps) > 0 && !now.Before(s.start.Add(s.steps[0].After)) {
		at := s.start.Add(s.steps[0].After)
		s.tokenBucket.refill(at)
		s.tokenBucket.rate = s.steps[0].Rate
		s.steps = s.steps[1:]
	}
}

// Wait is the bucket's wait at the current rate.
func (s *scheduledBucket) Wait(now time.Time, cost float64) time.Duration {
	s.advance(now)
	return s.tokenBucket.Wait(now, cost)
}

// Take takes cost tokens.
func (s *scheduledBucket) Take(now time.Time, cost float64) {
	s.advance(now)
	s.tokenBucket.Take(now, cost)
}

// Budget is the bucket's budget at the current rate.
func (s *scheduledBucket) Budget(now time.Time) Budget {
	s.advance(now)
	return s.tokenBucket.Budget(now)
}

// FixedRetryAfter returns a Rule.RetryAfter that names the same number of
// seconds on every 429, however soon the budget admits the request again,
// as services that send a constant Retry-After do. It returns an error
// when seconds is below 1.
func FixedRetryAfter(seconds int64) (func(time.Duration) int64, error) {
	if seconds < 1 {
		return nil, fmt.Errorf("throttletest: FixedRetryAfter(%d): seconds must be at least 1", seconds)
	}
	return func(time.Duration) int64 { return seconds }, nil
}
