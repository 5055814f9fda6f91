package throttle

import (
	"math"
	"time"
)

// The release pacers the adaptive one was measured against
// (TestPacerAlternatives in sim_test.go). They see what it sees, and the
// queue's rules hold throttled targets the same way for all of them.

// setPacer makes q pace its scopes' releases with the named design:
// "adaptive" (the default), "unpaced", "aimd" or "aws".
func setPacer(q *Queue, name string) {
	switch name {
	case "unpaced":
		q.newPacer = func(time.Time) pacer { return unpaced{} }
	case "aimd":
		q.newPacer = func(time.Time) pacer { return &aimdPacer{} }
	case "aws":
		q.newPacer = func(now time.Time) pacer { return newAWSPacer(now) }
	default:
		q.newPacer = func(now time.Time) pacer { return newAdaptivePacer(now) }
	}
}

// unpaced releases every held request as soon as its throttle ends, as
// a queue without a pacer would.
type unpaced struct{}

func (unpaced) next(now time.Time) time.Time        { return now }
func (unpaced) sent(time.Time)                      {}
func (unpaced) succeeded(time.Time, time.Time)      {}
func (unpaced) settle(int, time.Time)               {}
func (unpaced) throttled(_, _, _ time.Time, _ bool) {}

// aimdPacer is additive increase, multiplicative decrease: it starts where
// the adaptive pacer's search does (the first wave's successes per
// Retry-After period), adds that much again every 100 ms, and halves at a
// throttle, at most once per round trip.
type aimdPacer struct {
	burst       int
	period      float64 // seconds; 0 until the first throttle
	base        float64 // after a decrease; 0: the starting rate
	since, last time.Time
	reacted     time.Time
	rtt         time.Duration
}

func (p *aimdPacer) rateAt(now time.Time) float64 {
	step := float64(max(p.burst, 1)) / p.period
	base := p.base
	if base == 0 {
		base = searchStart * step
	}
	return base + step*math.Floor(max(now.Sub(p.since), 0).Seconds()/0.1)
}

func (p *aimdPacer) next(now time.Time) time.Time {
	if p.period == 0 {
		return now
	}
	return later(p.since, p.last.Add(time.Duration(float64(time.Second)/p.rateAt(now))))
}

func (p *aimdPacer) sent(now time.Time) {
	if p.period > 0 {
		p.last = later(p.next(now), now.Add(-catchUp))
	}
}

func (p *aimdPacer) succeeded(sent, now time.Time) { p.rtt = max(now.Sub(sent), p.rtt*63/64) }
func (p *aimdPacer) settle(n int, _ time.Time)     { p.burst += n }

func (p *aimdPacer) throttled(sent, now, end time.Time, _ bool) {
	p.rtt = max(now.Sub(sent), p.rtt*63/64)
	if !sent.After(p.reacted.Add(2 * p.rtt)) {
		return
	}
	if p.period == 0 {
		p.period = max(end.Sub(now), time.Second).Seconds()
		p.since, p.reacted = end, end
		return
	}
	p.base = max(p.rateAt(now)/2, 1)
	p.since, p.reacted = now, now
}

// awsPacer is the AWS SDKs' adaptive retry mode's client rate limiter: a
// token bucket whose fill rate follows a CUBIC curve around the measured
// send rate (smoothed per half second), cut to 0.7 of it at a throttle.
type awsPacer struct {
	enabled                bool
	fill, capacity, tokens float64
	lastFill               time.Time
	measured, lastMax      float64
	lastThrottle           time.Time
	bucket                 time.Time // half second of count
	count                  int
}

const (
	awsBeta   = 0.7
	awsScale  = 0.4
	awsSmooth = 0.8
)

func newAWSPacer(now time.Time) *awsPacer {
	return &awsPacer{lastFill: now, bucket: now.Truncate(500 * time.Millisecond), lastThrottle: now}
}

func (p *awsPacer) refill(now time.Time) {
	if now.After(p.lastFill) {
		p.tokens = min(p.capacity, p.tokens+now.Sub(p.lastFill).Seconds()*p.fill)
		p.lastFill = now
	}
}

func (p *awsPacer) next(now time.Time) time.Time {
	if !p.enabled {
		return now
	}
	p.refill(now)
	if p.tokens >= 1 {
		return now
	}
	return now.Add(time.Duration((1 - p.tokens) / p.fill * float64(time.Second)))
}

func (p *awsPacer) sent(now time.Time) {
	if p.enabled {
		p.refill(now)
		p.tokens--
	}
}

func (p *awsPacer) settle(int, time.Time) {}

func (p *awsPacer) measure(now time.Time) {
	p.count++
	if b := now.Truncate(500 * time.Millisecond); b.After(p.bucket) {
		rate := float64(p.count) / b.Sub(p.bucket).Seconds()
		p.measured = rate*awsSmooth + p.measured*(1-awsSmooth)
		p.count, p.bucket = 0, b
	}
}

func (p *awsPacer) window() float64 { return math.Cbrt(p.lastMax * (1 - awsBeta) / awsScale) }

func (p *awsPacer) update(now time.Time, rate float64) {
	rate = min(rate, 2*p.measured)
	p.refill(now)
	p.fill = max(rate, 0.5)
	p.capacity = max(rate, 1)
	p.tokens = min(p.tokens, p.capacity)
}

func (p *awsPacer) succeeded(_, now time.Time) {
	p.measure(now)
	if !p.enabled {
		return
	}
	t := now.Sub(p.lastThrottle).Seconds() - p.window()
	p.update(now, awsScale*t*t*t+p.lastMax)
}

func (p *awsPacer) throttled(_, now, _ time.Time, _ bool) {
	p.measure(now)
	use := p.measured
	if p.enabled {
		use = min(use, p.fill)
	}
	p.lastMax, p.lastThrottle = use, now
	p.enabled = true
	p.update(now, use*awsBeta)
}
