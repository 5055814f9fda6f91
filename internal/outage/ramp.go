package outage

import (
	"math"
	"time"
)

// The ramp a recovered host's requests go through, shaped like TCP's slow
// start: rampStart releases a second, doubling every rampStep, until
// rampEnd, where pacing no longer matters. From rampStart to rampEnd takes
// rampStep·log2(rampEnd/rampStart) ≈ 0.66 s and lets about 1,400 requests
// go; a backlog beyond that leaves at rampEnd.
const (
	// rampStart is what a server that just came back is sent first: a
	// hundred requests a second, a load any server that serves at all
	// takes, and ten in the first step.
	rampStart = 100.0
	// rampStep is how often the rate doubles: a round trip to a distant
	// server, the pace at which slow start would learn that it went too
	// far.
	rampStep = 100 * time.Millisecond
	// rampEnd is where the ramp stops: ten thousand requests a second,
	// one every 0.1 ms, finer than a timer's resolution.
	rampEnd = 10000.0
)

// ramp hands out the release times of a recovered host's requests. The
// k-th release is due when the releases the ramp allows since start,
// A(e) = rampStart·s/ln 2·(2^(e/s) − 1) with s = rampStep, reach k.
// The zero value is off.
type ramp struct {
	start   time.Time
	claimed int
}

var (
	rampSteps = math.Log2(rampEnd / rampStart) // doublings from start to end
	// rampReleases is A at the ramp's end.
	rampReleases = rampStart * rampStep.Seconds() / math.Ln2 * (rampEnd/rampStart - 1)
	rampLength   = time.Duration(rampSteps * float64(rampStep))
)

// at returns when release k (from 0) is due, as an offset from start.
func (r *ramp) at(k int) time.Duration {
	if x := float64(k); x < rampReleases {
		e := rampStep.Seconds() * math.Log2(1+x*math.Ln2/(rampStart*rampStep.Seconds()))
		return time.Duration(e * float64(time.Second))
	}
	return rampLength + time.Duration((float64(k)-rampReleases)/rampEnd*float64(time.Second))
}

// on reports whether the ramp still paces at now: it has not reached its
// end, or turns it handed out are still to come.
func (r *ramp) on(now time.Time) bool {
	if r.start.IsZero() {
		return false
	}
	return now.Before(r.start.Add(max(rampLength, r.at(r.claimed))))
}

// claim hands out the next release time, no earlier than now.
func (r *ramp) claim(now time.Time) time.Time {
	t := r.start.Add(r.at(r.claimed))
	r.claimed++
	return later(t, now)
}
