package options

import (
	"context"
	"time"
)

// Store shares the throttle queue's state among the processes of a fleet
// that spend the same budgets (R29): module redisstore implements it on
// Redis. The queue calls it only for hosts some process saw throttled, and
// never with a lock held. Every method that reaches the store is bounded by
// the store's own timeout and the caller's context; an error means the
// store could not answer, and the queue goes on with its local state (it
// fails open). docs/fleet.md gives the model.
type Store interface {
	// Active reports whether some process of the fleet saw host throttled
	// lately. It is called on every request to a host this process has no
	// throttle state for, so it must answer from memory: no round trip, no
	// lock, no allocation.
	Active(host string) bool
	// MarkActive records that host answered a throttle that named no hold,
	// so that every process learns the host is throttled.
	MarkActive(ctx context.Context, host string) error
	// SetHold records that the server holds target key of host until until
	// (on this process's clock), and that host is throttled.
	SetHold(ctx context.Context, host, key string, until time.Time) error
	// State reads what the fleet knows of host: the holds not yet over and,
	// per budget, the pace one process of the fleet releases at.
	State(ctx context.Context, host string) (FleetState, error)
	// Reserve takes the next slot of budget's fleet-wide release schedule
	// and reports how long the caller waits for it. p is this process's
	// pace. Until the fleet's throttles have fitted the budget's rate (see
	// Throttled), the schedule runs at the sum of the paces of the
	// processes that reserved on the budget lately, so that their releases
	// interleave instead of bunching; once fitted, it runs at that rate and
	// the reservation says so (Reservation.Fitted). A slot further than
	// max is not taken: Reservation.OK is false.
	Reserve(ctx context.Context, host, budget string, p Pace, max time.Duration) (Reservation, error)
	// Announce shares what the server announced of budget: remaining
	// requests until reset (on this process's clock). The queue calls it
	// when an answer announces the budget spent, at most once a second per
	// budget, so that a process that joins later knows the budget is spent
	// until its reset.
	Announce(ctx context.Context, host, budget string, remaining int, reset time.Time) error
	// Throttled records that a request of budget that took a slot of the
	// fleet's schedule was throttled: sent ago before now, with the
	// server asking for retryAfter (zero: none named). The schedule fits
	// the budget's rate from what the whole fleet's releases met.
	Throttled(ctx context.Context, host, budget string, ago, retryAfter time.Duration) error
}

// SlotStore is a Store that also keeps concurrency caps
// (QueueOptions.Concurrency) fleet-wide: a semaphore per capped target
// whose slots the processes of the fleet take and give back, and whose
// slots a process that dies gives back when their lease ends.
type SlotStore interface {
	Store
	// Acquire takes one of limit slots of target key of host. When all
	// are taken it returns a nil Slot and how long until one is freed at
	// the latest (a holder that releases frees it sooner).
	Acquire(ctx context.Context, host, key string, limit int) (Slot, time.Duration, error)
}

// PaceStore is a Store that also takes a pace a process publishes by
// itself, outside any reservation: the queue publishes the pace a budget's
// search starts from at its first throttle, so that a process joining
// while every request of the fleet waits out a Retry-After (and so
// reserves nothing) is paced from its first request.
type PaceStore interface {
	Store
	// SetPace publishes p as the pace one process releases budget of
	// host at; State returns it. A store with a fleet-wide schedule also
	// counts p as this process's share of the budget's rate, as it
	// counts a reservation's pace.
	SetPace(ctx context.Context, host, budget string, p Pace) error
}

// Slot is one slot of a fleet-wide concurrency cap, held until Release.
type Slot interface {
	// Release gives the slot back to the fleet; a release that fails
	// leaves the slot to end with its lease.
	Release(ctx context.Context) error
}

// Reservation is a slot of a budget's fleet-wide release schedule.
type Reservation struct {
	// Wait is how long the caller waits before it sends.
	Wait time.Duration
	// OK is false when the slot was further than the caller could wait
	// and was not taken; Wait is then the wait it would have had.
	OK bool
	// Fitted reports that the schedule runs at the rate the fleet's
	// throttles fitted, not at the sum of its processes' paces: it alone
	// spaces the fleet's releases, and a process adds no spacing of its
	// own.
	Fitted bool
}

// Pace is a budget's pace: requests per second, and how many may go at once
// after a quiet spell. The queue publishes, as a process's Burst, its part
// of the budget's first wave (what the server let through at once before
// it first throttled): the fleet's parts together are the least the
// server's bucket, or window, holds.
type Pace struct {
	Rate  float64
	Burst int
}

// Announcement is what a server said is left of a budget in its rate-limit
// headers, and when the budget resets.
type Announcement struct {
	Remaining int
	Reset     time.Time
}

// FleetState is what the fleet knows of one host, on the reader's clock.
type FleetState struct {
	// Holds maps a target key to the time the server holds it until. A
	// key is "url:" followed by a URL's path and query, or "path:"
	// followed by a path.
	Holds map[string]time.Time
	// Paces maps a budget (the queue's node key: "" for the host, an API,
	// a prefix, a path) to the pace one process releases it at.
	Paces map[string]Pace
	// Announced maps a budget to what the server announced of it.
	Announced map[string]Announcement
	// Throttled is when some process first saw the host throttled in
	// the spell that still holds it active; zero when not known.
	Throttled time.Time
}

// Keys of FleetState.Holds: a hold of an exact URL, or of a path.
const (
	HoldURLPrefix  = "url:"
	HoldPathPrefix = "path:"
)
