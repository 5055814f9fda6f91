package middleware

import (
	"math"
	"time"
)

// pacer spaces the release of a host's held requests. Its methods are
// called with the host's lock held.
type pacer interface {
	// next returns the earliest time the next request may be released.
	next(now time.Time) time.Time
	// sent records a release at now.
	sent(now time.Time)
	// succeeded records a response that was not throttled.
	succeeded(sent, now time.Time)
	// throttled records a throttled response that holds its target until end.
	throttled(sent, now, end time.Time)
}

// Tuning of adaptivePacer, measured with the throttle benchmark (bench/).
const (
	// doubling is how often the rate doubles while it searches for the
	// server's rate after the first throttle.
	doubling = 100 * time.Millisecond
	// backoff is the share of the measured server rate kept after a
	// throttle, so that the release stays just under the server's limit.
	backoff = 0.9
	// growth is how fast, per second, the rate creeps up again after a
	// backoff, to follow a server whose limit rises.
	growth = 0.02
	// maxRate bounds the rate, releases per second.
	maxRate = 1e6
)

// adaptivePacer learns the server's sustainable rate from its answers.
//
// Before any throttle it does not pace. The first throttle shows how many
// requests the server let through at once (its burst); release then
// starts at that burst per Retry-After period and doubles every 100 ms,
// like TCP's slow start, until the server throttles again. That throttle
// measures the server's rate: the successes since the release began, less
// the burst the server had stored, over the time since. Release then goes
// on at 90 % of it, creeping up by 2 % a second. A throttle of a request
// sent before the last decrease is the same congestion seen late and is
// not counted twice.
type adaptivePacer struct {
	state    pacerState
	base     float64   // rate at start, releases per second
	start    time.Time // when the current release began
	reacted  time.Time // last decrease; older sends are ignored
	tat      time.Time // theoretical arrival time of the next release (GCRA)
	burst    int       // successes the server allowed before throttling
	coldOK   int       // successes before the first throttle
	sinceOK  int       // successes of requests sent since start
	lastRate float64
}

type pacerState int

const (
	pacerCold pacerState = iota
	pacerSearching
	pacerSteady
)

func newAdaptivePacer(time.Time) *adaptivePacer { return &adaptivePacer{} }

func (p *adaptivePacer) rate(now time.Time) float64 {
	elapsed := max(now.Sub(p.start), 0).Seconds()
	var r float64
	switch p.state {
	case pacerCold:
		return 0
	case pacerSearching:
		r = p.base * math.Exp2(elapsed/doubling.Seconds())
	default:
		r = p.base * (1 + growth*elapsed)
	}
	return min(r, maxRate)
}

func (p *adaptivePacer) next(now time.Time) time.Time {
	if p.state == pacerCold || now.Before(p.start) {
		return later(now, p.start)
	}
	return p.tat
}

func (p *adaptivePacer) sent(now time.Time) {
	r := p.rate(now)
	if r == 0 {
		return
	}
	p.lastRate = r
	p.tat = later(p.tat, now).Add(time.Duration(float64(time.Second) / r))
}

func (p *adaptivePacer) succeeded(sent, now time.Time) {
	switch {
	case p.state == pacerCold:
		p.coldOK++
	case !sent.Before(p.start):
		p.sinceOK++
	}
}

func (p *adaptivePacer) throttled(sent, now, end time.Time) {
	if sent.Before(p.reacted) {
		return
	}
	switch p.state {
	case pacerCold:
		p.burst = max(p.coldOK, 1)
		period := max(end.Sub(now), time.Second).Seconds()
		p.base = float64(p.burst) / period
		p.state = pacerSearching
	default:
		elapsed := now.Sub(p.start).Seconds()
		measured := p.lastRate / 2
		if elapsed > 0 {
			measured = max(measured, float64(p.sinceOK-p.burst)/elapsed)
		}
		p.base = max(backoff*measured, 1)
		p.state = pacerSteady
	}
	p.reacted = now
	p.start = end
	p.tat = end
	p.sinceOK = 0
}
