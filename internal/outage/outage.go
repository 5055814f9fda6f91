package outage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/kiota-resilience/kiota-resilience-go/internal/wait"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// Tuning; the package doc gives the model.
const (
	// downAfter is how many failures in a row, with no other answer
	// between them, show that a host is down. At 30 % of answers failing at
	// random, 16 in a row come about once in 2·10^8 answers (0.7·0.3^16),
	// so a partial failure is not taken for an outage; under load the first
	// 16 answers of an outage come within a round trip of each other, so
	// the hold starts at once.
	downAfter = 16
	// maxHosts bounds the hosts whose state is kept; past it a new host
	// fails open, as if it were up and its budget full.
	maxHosts = 4096
	// idleAfter is how long a host must be up, unheld and without an
	// answer before its state is forgotten (its budget full again).
	idleAfter = time.Minute
	// coldWait bounds how long first attempts to a host never heard from
	// wait for its first answer once downAfter of them are out: a server
	// that fails answers within a round trip, and one that is slow to
	// answer keeps the others waiting no longer than this, once.
	coldWait = 500 * time.Millisecond
)

// Errors Admit returns instead of letting an attempt go.
var (
	// ErrHoldTooLong is wrapped by the *HoldError Admit returns when the
	// host would hold the attempt past its deadline.
	ErrHoldTooLong = errors.New("outage: held past the request's limits")
	// ErrBudget is returned for a retry of a failure that finds the host's
	// retry budget spent: the answer in hand is returned instead.
	ErrBudget = errors.New("outage: retry budget spent")
)

// HoldError is returned by Admit, at once, when the host would hold the
// attempt past its deadline. Until is when it may be tried again at the
// earliest: its own time, or the host's next probe.
type HoldError struct {
	Until time.Time
}

func (e *HoldError) Error() string {
	return fmt.Sprintf("%v: until %v", ErrHoldTooLong, e.Until.Format(time.RFC3339Nano))
}

// Unwrap returns ErrHoldTooLong.
func (e *HoldError) Unwrap() error { return ErrHoldTooLong }

// Outcome is what an attempt's answer says about its host.
type Outcome int

const (
	// Answered: the host served the request, whatever the status (a
	// throttle or a 4xx included).
	Answered Outcome = iota
	// Failed: a 502, a 503 or 504 without Retry-After, a transport error.
	Failed
	// NoAnswer: the attempt was canceled on its way; it says nothing of
	// the host.
	NoAnswer
	// Unsent: the attempt the gate let go was never sent (the throttle
	// queue held it past its limits, its context ended while queued, it
	// could not be prepared). It says nothing of the host, and the token
	// it took for a retry comes back: the host bore no load for it.
	Unsent
)

// Attempt describes an attempt asking Admit to go.
type Attempt struct {
	// NotBefore is the attempt's own time: the end of its backoff.
	NotBefore time.Time
	// Deadline is the latest the attempt may be held; zero: none.
	Deadline time.Time
	// First is set for a request's first attempt, which fills the retry
	// budget.
	First bool
	// AfterFailure is set for a retry of a failure: it spends from the
	// retry budget and may go before NotBefore once a probe succeeds.
	AfterFailure bool
	// HandBack asks for a *HoldError at once, rather than a wait, when the
	// host's state (it is down, or releasing through the ramp) would hold
	// the attempt past its own time.
	HandBack bool
}

// Done tells the gate that a request whose first attempt t is has ended,
// whatever its outcome, so that its host's retry budget no longer counts
// it active. t may be the zero Ticket.
func (hs *Hosts) Done(t Ticket) {
	if t.h != nil && t.first {
		t.h.budget.end()
	}
}

// Ticket is an attempt Admit let go. Hand it back to Report with the
// attempt's answer.
type Ticket struct {
	// Probe is set when the attempt tests a host that is down.
	Probe bool
	// Early is set when the attempt went before its own time because a
	// probe succeeded.
	Early bool
	// Sent is when it was let go.
	Sent    time.Time
	h       *host
	charged bool // took a token, given back if the host answers
	first   bool // counted its request active in the budget
}

// Observer hears when a request is held behind a host that is down.
type Observer interface {
	// Held is called once when the host starts holding the request past
	// its own time.
	Held(ctx context.Context)
	// Released is called when a held request goes or gives up; early
	// says it went before its own time because a probe succeeded.
	Released(ctx context.Context, early bool)
}

// Hosts tracks, per host, whether it is down, and gates its attempts. One
// Hosts serves every request of a retry handler; it is safe for concurrent
// use.
type Hosts struct {
	clock    options.Clock
	maxProbe time.Duration
	onChange func(host string, s options.HostState, at time.Time)
	hosts    sync.Map // host → *host
	count    atomic.Int32
	swept    atomic.Int64
}

// New returns a Hosts configured by o, reading time from clock. Its host
// state gauge reports through mp, or the global provider when that is nil.
func New(clock options.Clock, o options.OutageOptions, mp metric.MeterProvider) *Hosts {
	hs := &Hosts{clock: clock, maxProbe: o.MaxProbeInterval, onChange: o.OnStateChange}
	if hs.maxProbe == 0 {
		hs.maxProbe = options.DefaultMaxProbeInterval
	}
	if err := hs.register(mp); err != nil {
		// The gate works without its gauge.
		otel.Handle(fmt.Errorf("outage: registering the host state gauge: %w", err))
	}
	return hs
}

// host is what the gate knows of one host.
type host struct {
	key    string
	budget *budget
	streak atomic.Int32 // failures in a row
	// gated is set while the host is cold, down, probing or ramping up:
	// only then does an attempt that is not a retry of a failure take the
	// lock.
	gated atomic.Bool
	seen  atomic.Int64 // Unix second of the last report
	// failed is set at the host's first failure: only such hosts are
	// reported in telemetry.
	failed atomic.Bool

	mu        sync.Mutex
	state     options.HostState
	nextProbe time.Time // while down: the earliest the next probe may go
	probeSent time.Time // zero when no probe is out
	prober    *waiter   // the waiter elected to probe next
	ramp      ramp
	waiters   waitList
	// cold is set until the host's first answer: no more than downAfter
	// first attempts go before it (coldSent), for at most coldWait
	// (until coldUntil), so that a host down from the start is not sent a
	// whole burst before the evidence can show it.
	cold      bool
	coldSent  int
	coldUntil time.Time
}

// waiter is one attempt in a host's line.
type waiter struct {
	notBefore    time.Time
	first        bool
	afterFailure bool
	// slot is set when a recovery released the waiter: when it goes.
	slot   time.Time
	credit bool // its token may be taken from an empty bucket
	early  bool // released before notBefore
	wake   chan struct{}

	prev, next *waiter
}

// Admit waits until an attempt to host may go. A host that never failed,
// or that is up and not ramping, costs an atomic load for a first attempt;
// a retry of a failure waits in the host's line so that a recovery can
// release it early. Admit returns a *HoldError at once when the attempt
// would be held past a.Deadline, ErrBudget for a retry of a failure the
// budget refuses, or the context's error if it ends first. obs, when not
// nil, hears when the request is held and released.
func (hs *Hosts) Admit(ctx context.Context, host string, a Attempt, obs Observer) (Ticket, error) {
	if t, ok := hs.Pass(host, a); ok {
		return hs.ownTime(ctx, t, a)
	}
	h := hs.lookup(host)
	if h == nil {
		// Forgotten since Pass looked: as a new host, or open past maxHosts.
		if h = hs.create(host); h == nil {
			return hs.ownTime(ctx, Ticket{}, a)
		}
	}
	if a.First {
		h.budget.start()
	}
	return hs.acquire(ctx, h, a, obs)
}

// ownTime lets an attempt the gate does not hold go at its own time, or
// hands it back when that is past its deadline.
func (hs *Hosts) ownTime(ctx context.Context, t Ticket, a Attempt) (Ticket, error) {
	if !a.Deadline.IsZero() && a.NotBefore.After(a.Deadline) {
		return t, &HoldError{Until: a.NotBefore}
	}
	err := wait.Until(ctx, hs.clock, a.NotBefore)
	t.Sent = later(hs.clock.Now(), a.NotBefore)
	return t, err
}

// Pass is Admit's fast path: it reports whether the gate has nothing to
// hold the attempt for (its host never failed, or is up and not ramping,
// and the attempt is no retry of a failure), so that only the attempt's
// own time is to be waited, and then counts a first attempt into the
// budget and returns the ticket. It takes no lock.
func (hs *Hosts) Pass(host string, a Attempt) (Ticket, bool) {
	h := hs.lookup(host)
	if h == nil && a.First {
		h = hs.create(host) // nil past maxHosts: fails open
	}
	if h != nil && (a.AfterFailure || h.gated.Load()) {
		return Ticket{}, false
	}
	if a.First && h != nil {
		h.budget.start()
	}
	return Ticket{h: h, first: a.First && h != nil}, true
}

// decision is what a waiter is to do now.
type decision struct {
	pass, probe bool
	refuse      error
	// at is when to look again; zero: when woken.
	at time.Time
	// held is set when the host's state, not the waiter's own time, keeps
	// it.
	held bool
}

// acquire is Admit's slow path: a waiter in h's line decides, each time it
// wakes, whether to go, wait or give up.
func (hs *Hosts) acquire(ctx context.Context, h *host, a Attempt, obs Observer) (Ticket, error) {
	w := &waiter{notBefore: a.NotBefore, first: a.First, afterFailure: a.AfterFailure, wake: make(chan struct{}, 1)}
	var changes []change
	h.mu.Lock()
	h.waiters.push(w)
	held := false
	defer func() {
		if held && obs != nil {
			obs.Released(ctx, w.early)
		}
	}()
	for {
		now := hs.clock.Now()
		d := hs.decide(h, w, now, &changes)
		if d.pass || d.refuse != nil {
			h.leave(w, now)
			h.mu.Unlock()
			hs.notify(h, changes)
			if d.refuse != nil {
				return Ticket{h: h, first: a.First}, d.refuse
			}
			return Ticket{Probe: d.probe, Early: w.early, Sent: now, h: h, charged: w.afterFailure && !d.probe, first: a.First}, nil
		}
		if a.HandBack && d.held || !a.Deadline.IsZero() && (d.at.After(a.Deadline) || d.at.IsZero() && !now.Before(a.Deadline)) {
			until := d.at
			if until.IsZero() {
				until = later(hs.probeAt(h), now) // held until the next probe tells
			}
			h.leave(w, now)
			h.mu.Unlock()
			hs.notify(h, changes)
			return Ticket{h: h, first: a.First}, &HoldError{Until: until}
		}
		h.mu.Unlock()
		hs.notify(h, changes)
		changes = changes[:0]
		if d.held && !held && obs != nil {
			held = true
			obs.Held(ctx)
		}
		until := d.at
		if until.IsZero() || !a.Deadline.IsZero() && until.After(a.Deadline) {
			until = a.Deadline
		}
		err := sleep(ctx, hs.clock, until, w.wake)
		h.mu.Lock()
		if err != nil {
			h.leave(w, hs.clock.Now())
			h.mu.Unlock()
			hs.notify(h, changes)
			return Ticket{h: h, first: a.First}, err
		}
	}
}

// decide says what w is to do at now. It is called with h.mu held.
func (hs *Hosts) decide(h *host, w *waiter, now time.Time, changes *[]change) decision {
	if !w.slot.IsZero() {
		// Released by a recovery, or given a turn in the ramp.
		if now.Before(w.slot) {
			return decision{at: w.slot, held: w.credit}
		}
		if w.afterFailure {
			if !h.budget.take(w.credit) {
				return decision{refuse: ErrBudget}
			}
		}
		return decision{pass: true}
	}
	if now.Before(w.notBefore) {
		return decision{at: w.notBefore}
	}
	if h.state == options.HostUp {
		if h.cold && w.first {
			switch {
			case !now.Before(h.coldUntil):
				h.warm()
			case h.coldSent < downAfter:
				h.coldSent++
				return decision{pass: true}
			default:
				return decision{at: h.coldUntil}
			}
		}
		if h.ramp.on(now) {
			w.slot = h.ramp.claim(now)
			return hs.decide(h, w, now, changes)
		}
		if !h.cold {
			h.gated.Store(false)
		}
		if w.afterFailure && !h.budget.take(false) {
			return decision{refuse: ErrBudget}
		}
		return decision{pass: true}
	}
	// Down: the first ready waiter probes, the others wait for its answer.
	if h.prober == nil {
		h.prober = w
	}
	if h.prober != w {
		return decision{held: true}
	}
	if next := hs.probeAt(h); now.Before(next) {
		return decision{at: next, held: true}
	}
	// A probe is not charged: one a probe interval at most, it is the
	// budget's reserve, as Finagle's retries per second are.
	h.probeSent = now
	h.setState(options.HostProbing, now, changes)
	return decision{pass: true, probe: true}
}

// probeAt returns when the next probe of h, which is down, may go. A probe
// that is out and has been for a whole interval without an answer does
// not stop the next. Called with h.mu held.
func (hs *Hosts) probeAt(h *host) time.Time {
	if h.probeSent.IsZero() {
		return h.nextProbe
	}
	return later(h.nextProbe, h.probeSent.Add(hs.maxProbe))
}

// leave takes w out of h's line; if it was to probe, the next ready
// waiter is elected. It is called with h.mu held.
func (h *host) leave(w *waiter, now time.Time) {
	h.waiters.remove(w)
	if h.prober == w {
		h.prober = nil
		if h.state != options.HostUp {
			h.elect(now)
		}
	}
}

// Report tells the gate what the host answered to an attempt it let go
// (t from Admit; a zero Ticket for an attempt that did not pass it). next
// is the delay the request's policy gives its next retry, which spaces the
// next probe when a probe failed; 0 when unknown.
func (hs *Hosts) Report(host string, t Ticket, o Outcome, next time.Duration) {
	h := t.h
	if h == nil {
		// An attempt that did not pass the gate (its request opted out)
		// still tells the others.
		if h = hs.lookup(host); h == nil && o == Failed {
			h = hs.create(host)
		}
		if h == nil {
			return
		}
	}
	if sec := t.Sent.Unix(); !t.Sent.IsZero() && h.seen.Load() < sec {
		h.seen.Store(sec)
	}
	switch o {
	case Answered:
		if t.charged {
			h.budget.refund()
		}
		if h.streak.Load() != 0 {
			h.streak.Store(0)
		}
		if !t.Probe && !h.gated.Load() {
			return
		}
		now := hs.clock.Now()
		var changes []change
		h.mu.Lock()
		if h.cold {
			h.warm()
		}
		if h.state != options.HostUp {
			hs.recover(h, now, &changes)
		}
		if h.state == options.HostUp && !h.ramp.on(now) {
			h.gated.Store(false)
		}
		h.mu.Unlock()
		hs.notify(h, changes)
	case Failed:
		now := hs.clock.Now()
		h.seen.Store(now.Unix())
		if !h.failed.Load() {
			h.failed.Store(true)
		}
		n := h.streak.Add(1)
		if !t.Probe && n < downAfter {
			return
		}
		var changes []change
		h.mu.Lock()
		switch {
		case t.Probe && h.state != options.HostUp:
			h.probeSent = time.Time{}
			if next <= 0 || next > hs.maxProbe {
				next = hs.maxProbe
			}
			h.nextProbe = now.Add(next)
			h.setState(options.HostDown, now, &changes)
			h.elect(now)
		case h.state == options.HostUp && n >= downAfter:
			hs.down(h, now, &changes)
		}
		h.mu.Unlock()
		hs.notify(h, changes)
	case NoAnswer, Unsent:
		if o == Unsent && t.charged {
			h.budget.refund()
		}
		if !t.Probe {
			return
		}
		now := hs.clock.Now()
		var changes []change
		h.mu.Lock()
		if h.state == options.HostProbing {
			// No word from the host: another request may probe at once.
			h.probeSent = time.Time{}
			h.setState(options.HostDown, now, &changes)
			h.elect(now)
		}
		h.mu.Unlock()
		hs.notify(h, changes)
	}
}

// down marks h down at now: its waiters are held, the ramp's turns given
// back, and the first ready waiter may probe at once. Called with h.mu held.
func (hs *Hosts) down(h *host, now time.Time, changes *[]change) {
	h.setState(options.HostDown, now, changes)
	h.cold = false
	h.gated.Store(true)
	h.nextProbe, h.probeSent = now, time.Time{}
	h.ramp = ramp{}
	for w := h.waiters.first; w != nil; w = w.next {
		if !w.slot.IsZero() {
			w.slot, w.credit, w.early = time.Time{}, false, false
			signal(w)
		}
	}
	h.elect(now)
}

// recover marks h up at now and releases its waiters through the ramp in
// arrival order, the retries of failures at once whatever their own time
// (a retry of a throttle keeps the server's word). Called with h.mu held.
func (hs *Hosts) recover(h *host, now time.Time, changes *[]change) {
	h.setState(options.HostUp, now, changes)
	h.streak.Store(0)
	h.probeSent, h.prober = time.Time{}, nil
	h.ramp = ramp{start: now}
	for w := h.waiters.first; w != nil; w = w.next {
		if !w.slot.IsZero() || !w.afterFailure && w.notBefore.After(now) {
			continue
		}
		w.slot = h.ramp.claim(now)
		w.credit = w.afterFailure
		w.early = w.notBefore.After(w.slot)
		signal(w)
	}
}

// warm ends h's cold start: its first attempts go freely from now on.
// Called with h.mu held.
func (h *host) warm() {
	h.cold = false
	for w := h.waiters.first; w != nil; w = w.next {
		signal(w)
	}
}

// elect picks the first ready waiter in arrival order to probe next and
// wakes it. Called with h.mu held.
func (h *host) elect(now time.Time) {
	if h.prober == nil {
		for w := h.waiters.first; w != nil; w = w.next {
			if !w.notBefore.After(now) && w.slot.IsZero() {
				h.prober = w
				break
			}
		}
	}
	if h.prober != nil {
		signal(h.prober)
	}
}

// change is a state a host entered, to be told to the listener once the
// lock is released.
type change struct {
	state options.HostState
	at    time.Time
}

func (h *host) setState(s options.HostState, now time.Time, changes *[]change) {
	if h.state == s {
		return
	}
	h.state = s
	*changes = append(*changes, change{s, now})
}

func (hs *Hosts) notify(h *host, changes []change) {
	if hs.onChange == nil {
		return
	}
	for _, c := range changes {
		hs.onChange(h.key, c.state, c.at)
	}
}

// State returns what the gate believes of host: HostUp for a host it keeps
// no state for.
func (hs *Hosts) State(host string) options.HostState {
	h := hs.lookup(host)
	if h == nil {
		return options.HostUp
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

func (hs *Hosts) lookup(key string) *host {
	if v, ok := hs.hosts.Load(key); ok {
		return v.(*host)
	}
	return nil
}

// create returns host's state, made full-budgeted when there is none,
// or nil past maxHosts.
func (hs *Hosts) create(key string) *host {
	if h := hs.lookup(key); h != nil {
		return h
	}
	hs.sweep()
	if hs.count.Load() >= maxHosts {
		return nil
	}
	now := hs.clock.Now()
	h := &host{key: key, cold: true, coldUntil: now.Add(coldWait), budget: newBudget()}
	h.gated.Store(true)
	// Seen now, or a sweep that runs while it is being stored (another
	// host's) takes it for a host long idle and forgets it between its
	// first request's Pass and Admit.
	h.seen.Store(now.Unix())
	v, loaded := hs.hosts.LoadOrStore(key, h)
	if !loaded {
		hs.count.Add(1)
	}
	return v.(*host)
}

// sweep forgets the hosts that are up, hold nobody and had no answer for
// idleAfter (longer than the budget's window). It runs as a host is added, at most once
// per idleAfter, so that state grows only with the hosts failing now.
func (hs *Hosts) sweep() {
	now := hs.clock.Now()
	last := hs.swept.Load()
	if now.UnixNano()-last < int64(idleAfter) || !hs.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	hs.hosts.Range(func(k, v any) bool {
		h := v.(*host)
		if now.Unix()-h.seen.Load() < int64(idleAfter/time.Second) || h.budget.active.Load() > 0 {
			return true
		}
		h.mu.Lock()
		idle := h.state == options.HostUp && h.waiters.first == nil && !h.ramp.on(now)
		h.mu.Unlock()
		if idle && hs.hosts.CompareAndDelete(k, h) {
			hs.count.Add(-1)
		}
		return true
	})
}

// sleep waits until at (zero: with no time limit), a wake signal, or
// ctx's end.
func sleep(ctx context.Context, clock options.Clock, at time.Time, wake <-chan struct{}) error {
	if at.IsZero() {
		return wait.Woken(ctx, clock, -1, wake)
	}
	d := at.Sub(clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	return wait.Woken(ctx, clock, d, wake)
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitList is a host's waiters in arrival order.
type waitList struct{ first, last *waiter }

func (l *waitList) push(w *waiter) {
	w.prev = l.last
	if l.last != nil {
		l.last.next = w
	} else {
		l.first = w
	}
	l.last = w
}

func (l *waitList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else if l.first == w {
		l.first = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else if l.last == w {
		l.last = w.prev
	}
	w.prev, w.next = nil, nil
}
