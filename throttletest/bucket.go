package throttletest

import (
	"fmt"
	"math"
	"time"
)

// Bucket is a token bucket: it holds up to Burst tokens, refills at Rate
// tokens per second, and every request that passes takes one token. The
// zero value (Rate 0) is no bucket at all: nothing is throttled.
type Bucket struct {
	// Rate is the refill rate in tokens per second; 0 turns the bucket off.
	Rate float64
	// Burst is the bucket's capacity, and its content at start.
	// 0 with a positive Rate means 1.
	Burst int
}

func (b Bucket) enabled() bool { return b.Rate > 0 }

func (b Bucket) validate(name string) error {
	switch {
	case b.Rate < 0 || math.IsNaN(b.Rate) || math.IsInf(b.Rate, 0):
		return fmt.Errorf("throttletest: %s.Rate = %v must be a finite number >= 0", name, b.Rate)
	case b.Burst < 0:
		return fmt.Errorf("throttletest: %s.Burst = %d must not be negative", name, b.Burst)
	}
	return nil
}

// tokenBucket is the state of one Bucket. It is not safe for concurrent
// use; the server guards all its buckets with one mutex so that a request
// checked against several buckets takes from all of them or from none.
type tokenBucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(b Bucket, now time.Time) *tokenBucket {
	burst := float64(max(b.Burst, 1))
	return &tokenBucket{rate: b.Rate, burst: burst, tokens: burst, last: now}
}

// refill adds the tokens earned since the last call. A clock that steps
// back earns nothing rather than draining the bucket.
func (t *tokenBucket) refill(now time.Time) {
	if d := now.Sub(t.last); d > 0 {
		t.tokens = min(t.burst, t.tokens+d.Seconds()*t.rate)
		t.last = now
	}
}

// Wait returns how long until cost tokens are available; 0 when they are
// now. A cost above the burst waits for a full bucket.
func (t *tokenBucket) Wait(now time.Time, cost float64) time.Duration {
	t.refill(now)
	need := min(cost, t.burst)
	if t.tokens >= need {
		return 0
	}
	return time.Duration(math.Ceil((need - t.tokens) / t.rate * float64(time.Second)))
}

// Take takes cost tokens.
func (t *tokenBucket) Take(now time.Time, cost float64) {
	t.refill(now)
	t.tokens -= min(cost, t.burst)
}

// retryAfterSeconds turns the time until a token is available into a
// Retry-After value the way Graph sends it: whole seconds, rounded up, and
// never less than 1 so that a client never reads "retry now" from a 429.
func retryAfterSeconds(wait time.Duration) int64 {
	s := int64(math.Ceil(wait.Seconds()))
	return max(s, 1)
}
