package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/kiota-resilience/kiota-resilience-go/internal/ratelimit"
	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Defaults of options.QueueOptions.
const (
	defaultRecovery   = 10 * time.Second
	defaultMaxTracked = 1024
)

// capacityWindow is how recent another request's success must be for a
// 503 without Retry-After to be a capacity limit of its budget rather
// than an outage: the server is answering others at the same time.
const capacityWindow = time.Second

// minRefusals is the fewest 503s without Retry-After within the last
// second or two that, when they are most of the host's answers or come in
// a row, make them a capacity limit: a handful may be chance at any
// failure rate, while a wave that overran a budget brings scores of them.
// In a row, with no success answered between them, 16 come about once in
// 2·10^8 answers of a server failing 30 % at random (0.7·0.3^16, the
// outage gate's arithmetic), while a limiter refuses a wave's overflow
// together, each refusal answered at once, before the requests it let
// through come back from the server behind it.
const minRefusals = 16

// overflowShare is the least share of the answers since the first
// refusal of a first wave's episode (refusalEpisode) that refusals, at
// least minRefusals of them, must be for the episode to be a limiter
// refusing the wave's overflow: such
// a limiter refuses nearly all of what comes back after its first
// refusal (nginx: 40 of 42), as it served all of what came back before,
// while a server failing 30 % of its requests at random reaches it, with
// minRefusals refused, about three times in 10^4 episodes (each begins
// with a failure). Counted among the host's recent answers instead,
// nginx's 42 successes before its 40 refusals had them read as failures,
// which taught no pace: the queue never engaged, and one run in eight
// took 4x the limit (in virtual time).
const overflowShare = 2.0 / 3

// Queue holds requests back while the server's word holds what they
// target, and paces their release per budget. One Queue serves every
// request of a retry handler; it is safe for concurrent use.
type Queue struct {
	clock      options.Clock
	recovery   time.Duration
	maxTracked int
	roots      []string
	newPacer   func(now time.Time) pacer
	hosts      sync.Map // host → *hostState
	swept      atomic.Int64
	// store shares the queue's state with a fleet (store.go); nil: none.
	store options.Store
	// caps keeps the concurrency caps (caps.go); nil: none.
	caps *caps
}

// New returns a Queue configured by o, whose zero fields take their
// defaults, reading time from clock. Its gauges report through
// o.MeterProvider, or the global provider when that is nil.
func New(clock options.Clock, o options.QueueOptions) *Queue {
	q := &Queue{clock: clock, recovery: o.Recovery, maxTracked: o.MaxTracked, store: o.Store, caps: newCaps(clock, o)}
	if q.recovery == 0 {
		q.recovery = defaultRecovery
	}
	if q.maxTracked == 0 {
		q.maxTracked = defaultMaxTracked
	}
	for _, r := range o.Roots {
		q.roots = append(q.roots, strings.TrimSuffix(r, "/"))
	}
	// The longest root wins: /api/data/v9.2 before /api.
	slices.SortFunc(q.roots, func(a, b string) int { return len(b) - len(a) })
	q.newPacer = func(now time.Time) pacer { return newAdaptivePacer(now) }
	if err := q.register(o.MeterProvider); err != nil {
		// The queue works without its gauges.
		otel.Handle(fmt.Errorf("throttle: registering the queue's gauges: %w", err))
	}
	return q
}

// Observer hears when the queue starts and stops holding a request.
type Observer interface {
	// Held is called when the queue holds the request past its own
	// delay, expecting to release it after about expected.
	Held(ctx context.Context, expected time.Duration)
	// Released is called when the queue lets the request go, whatever
	// the outcome; it does nothing when the request was not held.
	Released(ctx context.Context)
}

// Pass is an attempt the queue let go: a reservation of its budget. Hand
// it back to Report with the attempt's answer.
type Pass struct {
	// Sent is when the attempt was let go.
	Sent time.Time
	host *hostState
	// budget released it, counting it in flight.
	budget *node
	// out is how many other requests budget had in flight when it went.
	out int
	// kid is the child of budget on its path, "" when budget is its
	// item, and kidOut how many other requests budget had out to kid when
	// it went (window.go).
	kid    string
	kidOut int
	// fleet is set when it took a slot of its budget's fleet-wide
	// schedule: its throttle is the fleet's to fit.
	fleet bool
	// refused is set by Refused: the answer was a 503 that named no wait,
	// so a throttle read from it is the queue's reading, not the server's
	// word.
	refused bool
	// slot is the concurrency cap's slot it holds until its answer comes;
	// nil when uncapped.
	slot *capSlot
	// retry is set by Retried: the attempt is a retry, which exists
	// because an earlier one was throttled or failed.
	retry bool
	// paced is set when a budget's pace let it go (Paced).
	paced bool
	// noWait is set by Report for a throttle that named no wait
	// (ThrottledNoWait, or a 503 Refused took for a capacity limit).
	noWait bool
	// overran is set by Report for a throttled attempt that falls under
	// a cap whose counts missed requests out with it: its throttle is the
	// cap's (caps.go).
	overran bool
}

// Retried returns p marked as the pass of a retry. Whether a budget's
// throttles fall alike on its children is judged from first attempts
// only: a retry exists because its request was throttled, so counting
// retries would tally most for the children throttled before, and with
// one id per request the fresh ids would look as if they escaped a
// budget they share (behind HAProxy's sliding window, whose refusals
// count, this split a host's one budget six times in one run).
func (p Pass) Retried() Pass {
	p.retry = true
	return p
}

// Paced reports whether a budget's pace let the attempt go: its pacer,
// or with a store the fleet's schedule. A throttle of it is that pace's
// overshoot, for which the pace slows the whole budget down. An item
// made a budget by its own throttle that named no wait paces its
// requests, but until one of them succeeds its releases are not Paced:
// its pace is a guess, and an item that refuses everything is no
// budget's overshoot.
func (p Pass) Paced() bool { return p.paced }

// Outcome is what an attempt's answer says about throttling.
type Outcome int

const (
	// Failed is no answer, or one that says nothing of throttling (a 5xx
	// without Retry-After other than a 503).
	Failed Outcome = iota
	// Succeeded is an answer that was not throttled.
	Succeeded
	// Throttled is a 429, or a 503 or 504 naming a Retry-After.
	Throttled
	// ThrottledNoWait is a 429 that names no wait: a throttle whose hold,
	// the retry policy's delay, is the client's and not the server's
	// word. It holds only its own request: the queue paces its target's
	// budget, its item's own when the evidence places it in none wider,
	// where a Throttled holds its URL and path for the time named.
	ThrottledNoWait
	// Unavailable is a 503 without Retry-After: a capacity limit, and so
	// a throttle, when the host answers other requests at the same time;
	// an outage, which says nothing of its budget, when it does not.
	Unavailable
)

// Admit waits until an attempt of req may be sent: not before notBefore,
// not while the server's word holds its URL or path, in FIFO order at
// its budget's pace while that budget recovers, and, under a concurrency
// cap (options.QueueOptions.Concurrency), once one of the cap's slots is
// free, which the pass holds until Report. A hold that would pass
// deadline (zero: none; the caller includes the context's deadline, in
// the queue's clock) is not made: Admit returns a *HoldError
// (ErrHoldTooLong), saying until when, and the caller decides. Admit
// returns the context's error if it ends first. obs, when not nil, hears
// when the request is held and released.
// A request to a host that was never throttled, here or (with a store)
// anywhere in the fleet, takes no lock and makes no round trip.
func (q *Queue) Admit(ctx context.Context, req *http.Request, notBefore, deadline time.Time, obs Observer) (Pass, error) {
	return q.admit(ctx, req, time.Time{}, notBefore, deadline, obs)
}

// AdmitEarly is Admit for the retry of an attempt of req that the server
// refused without naming a wait (a bare 429), whose answer came back at
// refused: notBefore is the retry policy's guess, not the server's word.
// The retry goes before it, in its budget's queue and at its pace, once
// the host has served a request sent after refused: the server serves
// again, and what it refused was a rate, which the pace of req's budget
// slowed for, not this request. Until then, and where neither a budget
// nor a hold of the host is in its way, it waits for notBefore as Admit
// does.
func (q *Queue) AdmitEarly(ctx context.Context, req *http.Request, refused, notBefore, deadline time.Time, obs Observer) (Pass, error) {
	return q.admit(ctx, req, refused, notBefore, deadline, obs)
}

func (q *Queue) admit(ctx context.Context, req *http.Request, refused, notBefore, deadline time.Time, obs Observer) (Pass, error) {
	host := hostKey(req)
	s := q.state(host, false, time.Time{})
	if s == nil || !s.active.Load() {
		// Another process's throttle of the host: what the fleet knows
		// of it becomes this process's, once.
		if !q.fleetActive(host) {
			err := wait.Until(ctx, q.clock, notBefore)
			return Pass{Sent: later(q.clock.Now(), notBefore), host: s}, err
		}
		if j := q.join(ctx, host); j != nil {
			s = j
		} else {
			err := wait.Until(ctx, q.clock, notBefore)
			return Pass{Sent: later(q.clock.Now(), notBefore), host: s}, err
		}
	}
	p, err := q.acquire(ctx, s, q.newTarget(req), refused, notBefore, deadline, obs)
	if err == nil && q.caps != nil {
		if p.slot, err = q.caps.take(ctx, host, req, deadline, obs); err != nil {
			q.giveBack(s, p)
			p = Pass{}
		}
	}
	p.Sent, p.host = q.clock.Now(), s
	return p, err
}

// giveBack undoes what admitting p counted, for an attempt that will not
// be sent after all.
func (q *Queue) giveBack(s *hostState, p Pass) {
	if p.budget == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p.budget.back(p)
	p.budget.waiters.kick()
}

// Bypass returns the pass of an attempt sent at sent without waiting in
// the queue: its request opted out of the queue, or its host was never
// throttled and Admit was not asked. Hand it to Report all the same: the
// queue learns from every answer, and a first throttle is how a host
// becomes one it holds.
func (q *Queue) Bypass(sent time.Time) Pass { return Pass{Sent: sent} }

// Report tells the queue what the server answered to an admitted attempt
// of req: o, for a throttle how long it holds its target (for a
// ThrottledNoWait, the delay the attempt's own retry waits, which holds
// its target only once the target is locked), and the answer's header
// (nil for none), whose rate-limit fields, when it has any, say how
// much of its budget is left. back returns when the answer came; it is
// called only when needed.
func (q *Queue) Report(req *http.Request, p Pass, o Outcome, hold time.Duration, header http.Header, back func() time.Time) {
	// Every answer may sweep, not only a new host's: hosts idle past the
	// recovery window are then forgotten while the queue serves only
	// hosts it knows. It costs an atomic load, and a pass over the hosts
	// once a window.
	q.sweep(p.Sent)
	if p.slot != nil {
		q.caps.give(p.slot)
	}
	var (
		b         ratelimit.Budget
		announces bool
	)
	if ratelimit.Announced(header) {
		// Parsed before the host's lock is taken: what a server sends
		// costs the request it came with, not the host's others.
		b, announces = parseBudget(header, back())
	}
	s := p.host
	if s == nil {
		s = q.state(hostKey(req), o != Failed || announces, p.Sent)
		if s == nil {
			return
		}
	}
	switch o {
	case Unavailable:
		o = Failed // not taken for a capacity limit by Refused
	case ThrottledNoWait:
		o, p.noWait = Throttled, true
	}
	counted := false
	if !s.active.Load() && !announces {
		// The fast path of a host that was never throttled: no lock.
		switch o {
		case Succeeded:
			s.seen.Store(p.Sent.Unix())
			s.succeeded.Store(p.Sent.UnixNano())
			// When it came back tells how long the server holds what it
			// serves, which the host's first budget waits out (share).
			s.addWave(q.api(req.URL.Path), p.Sent, back().Sub(p.Sent))
			s.countServed(p.Sent)
			counted = true
			if !s.active.Load() {
				return
			}
			// A first throttle came meanwhile: the success counts for the
			// budget it may have started.
		case Failed:
			return
		}
	}
	now := back()
	s.seen.Store(now.Unix())
	if o == Succeeded {
		s.succeeded.Store(now.UnixNano())
		if !counted {
			s.countServed(p.Sent)
		}
	}
	t := q.newTarget(req)
	// What the answer tells the fleet goes once the lock is released: this
	// defer runs after the unlock's.
	note := fleetNote{host: t.host}
	defer q.tell(&note)
	s.mu.Lock()
	if s.forgotten {
		// Swept while the attempt was out: what it reports goes to the
		// host's state as it is now, where the budget that let it go is
		// no more.
		s.mu.Unlock()
		s = q.lockedState(t.host, now)
		s.seen.Store(now.Unix())
		p.budget = nil
	}
	defer s.mu.Unlock()
	if p.budget != nil {
		p.budget.back(p)
		if o == Throttled || o == Succeeded {
			p.budget.tally(p, o == Throttled, now)
		}
	}
	if o == Throttled {
		s.activate()
	}
	if announces {
		if n := q.announce(s, t, b, p, now); n != nil {
			q.spentNote(&note, s, n, b, now)
		}
	}
	if o == Throttled && p.refused {
		if n := q.budgetOf(s, t.keys(), now); n != nil && n.named {
			// Read as a capacity limit from the host's answers, but the
			// server names this budget's throttles: a failure.
			o = Failed
		}
	}
	switch o {
	case Throttled:
		p.noWait = p.noWait || p.refused
		p.overran = q.caps.overran(s, req, p)
		end := now.Add(hold)
		if end.Before(now) { // saturated
			end = time.Unix(1<<62, 0)
		}
		note.s, note.throttled = s, true
		if p.fleet && p.budget != nil {
			note.budget, note.ago, note.retryAfter = p.budget.key, now.Sub(p.Sent), hold
		}
		if n := q.throttled(s, t, p, now, end); n != nil {
			q.paceNote(&note, n, now)
		} else if hold > 0 {
			note.hold, note.until = t.path, end
		}
	case Succeeded:
		if p.slot != nil && s.capServed.Load() == 0 {
			s.capServed.CompareAndSwap(0, now.UnixNano())
		}
		q.succeeded(s, t, p, now, counted)
	}
	// What the answer changed may let the head of its budget go sooner.
	if p.budget != nil {
		p.budget.waiters.kick()
	}
	if n := q.budgetOf(s, t.keys(), now); n != nil && n != p.budget {
		n.waiters.kick()
	}
}

// parseBudget reads the budget an answer's header announces; a variable
// so that tests can see when it runs.
var parseBudget = ratelimit.Parse

// announce takes budget b, announced at now in the answer to t sent as
// p. The host's budget takes it unless the evidence placed t's budget
// lower: most servers announce one budget per client. A budget the server
// says is spent is the news a throttle brings, before it costs one: the
// budget's pacer learns from it as from a throttle, and nothing is held.
// It returns that budget when b is spent, for the fleet to learn; nil
// otherwise.
func (q *Queue) announce(s *hostState, t *target, b ratelimit.Budget, p Pass, now time.Time) *node {
	if s.nodes == nil && !b.NearlySpent() {
		return nil // room enough: nothing to follow
	}
	s.activate()
	keys := t.keys()
	n := q.budgetOf(s, keys, now)
	if n == nil {
		n = s.node("", 0)
	}
	if !n.budget.live(now, q.recovery) && !b.NearlySpent() {
		return nil
	}
	s.seq++
	n.seq = s.seq
	n.budget.refresh(b, p.Sent, now, n.inflight)
	// An announced budget is paced here, never by the fleet's schedule
	// (fleetShare): its word that it spaces the releases alone ends now,
	// not a second later, when nothing would space them meanwhile.
	n.fitted = time.Time{}
	if !b.Spent() {
		return nil
	}
	q.share(s, n, now)
	n.lastEnd = later(n.lastEnd, now)
	if sp, ok := n.pacer.(spender); ok {
		sp.spent(p.Sent, now)
	} else {
		n.pacer.throttled(p.Sent, now, now, true)
	}
	q.prune(s, now)
	return n
}

// ErrHoldTooLong is wrapped by the *HoldError Admit returns, at once, when the throttles the
// request matches would hold it past its deadline: a retry is better not
// made, and the answer in hand returned; a first attempt, with no answer in
// hand, is best sent at once for the server to answer.
var ErrHoldTooLong = errors.New("throttle: held past the request's limits")

// Refused records that the server answered req, sent as *p, at now with a
// 503 that names no Retry-After, and reports what the queue takes it
// for: Throttled, a capacity limit of its budget, when the host answers
// other requests meanwhile, p was not released by a budget the server
// throttled by name, and either a budget paced p, or refusals are most of
// the host's recent answers (a client overrunning a budget sees most of
// what it sends refused), or, on a host that never throttled, minRefusals
// of them came in a row with no success answered between them (a limiter
// refuses the overflow of a first wave together, however much of the wave
// it served), or, in refusals that began on such a host within
// capacityWindow (none a capacityWindow apart), at least minRefusals of
// them are overflowShare of the answers since the first, the host's first
// throttle meanwhile or not; Failed
// otherwise, an outage or a server failing some requests at random,
// which says nothing of a pace. It marks *p as refused; Report then takes
// that pass and outcome. It takes the host's lock only when a budget
// released p.
//
// A budget the server throttled by name (a 429, or a Retry-After) has a
// limiter that says when it throttles: its bare 503s are failures. Taken
// for throttles, failures at random would lower the pace at every one of
// them, whatever the pace, down to nothing; and the 503s of a server going
// down, all at once while the last answers before it still count as
// serving, would hold their retries a throttle's wait, past the server's
// return, instead of behind the outage gate's probe.
func (q *Queue) Refused(req *http.Request, p *Pass, now time.Time) Outcome {
	p.refused = true
	s := p.host
	if s == nil {
		if s = q.state(hostKey(req), false, time.Time{}); s == nil {
			return Failed // it never answered a request
		}
	}
	s.refused.add(now)
	run := s.refusedRun.Add(1)
	episode, servedSince, fresh := s.refusals.refuse(now, !s.active.Load())
	if !s.serving(now) {
		return Failed
	}
	if p.budget != nil {
		s.mu.Lock()
		shared, named := p.budget.shared, p.budget.named
		s.mu.Unlock()
		switch {
		case named:
			// Its limiter names its throttles: a bare 503 is the
			// server failing, however many come at once (a server
			// going down answers every request so), and a retry of it
			// goes when the host is back, not a throttle's wait later.
			return Failed
		case shared:
			return Throttled
		}
	}
	if run >= minRefusals && !s.active.Load() {
		return Throttled
	}
	if r, a := s.refused.recent(now), s.served.recent(now); r >= minRefusals && r >= a {
		return Throttled
	}
	if fresh && episode >= minRefusals && float64(episode) >= overflowShare*float64(episode+servedSince) {
		return Throttled
	}
	return Failed
}

// HeldUntil returns until when the server's own word, a throttle of req's
// URL or path that this process heard, holds req; the zero time when none
// does. A budget's pace and a concurrency cap are not the server's word of
// req: Admit waits those out. A caller with no retries to spend asks it
// to answer such a request at once instead of holding it.
func (q *Queue) HeldUntil(req *http.Request) time.Time {
	s := q.state(hostKey(req), false, time.Time{})
	if s == nil || !s.active.Load() {
		return time.Time{}
	}
	t := q.newTarget(req)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held(t)
}

// Active reports whether the host req names was ever throttled (and not
// since forgotten), here or, with a store, anywhere in the fleet: only then
// may Admit hold its attempts. It makes no round trip.
func (q *Queue) Active(req *http.Request) bool {
	host := hostKey(req)
	s := q.state(host, false, time.Time{})
	return s != nil && s.active.Load() || q.fleetActive(host)
}
