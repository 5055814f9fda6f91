package redisstore

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// DefaultTimeout bounds every call to Redis. A Redis in the same region
// answers these scripts in well under a millisecond, and a few milliseconds at
// its 99.9th percentile; but a fleet's first wave of throttles reaches it all
// at once, a report of each throttle from every process, and in the fleet
// bench those answers took 25-36 ms. A bound of 25 ms failed them, left half
// of 20 processes pacing alone for the second they most needed the fleet, and
// let the schedule hold a fraction of the server's rate for up to 12 s. A
// Graph request takes 100 ms or more: 50 ms is past the burst yet half of the
// fastest request it guards, so a slow or paused Redis costs a request little
// before the store gives up and the queue goes on with its local state.
const DefaultTimeout = 50 * time.Millisecond

// DefaultProbeInterval is how long the store leaves Redis alone after a call
// failed or timed out: calls made meanwhile return ErrUnavailable at once,
// without a round trip, and the first call after it probes Redis again. A
// second is short next to a failover (several seconds) and long enough that
// a fleet of processes does not hammer a Redis that is coming back.
const DefaultProbeInterval = time.Second

// DefaultActiveFor is how long a host stays known as throttled, fleet-wide,
// after its last throttle or hold ends: as long as the throttle queue keeps a
// quiet host's state before it forgets it (ten minutes), so that the fleet
// forgets a host when each process would.
const DefaultActiveFor = 10 * time.Minute

// DefaultPaceFor is how long a budget's published pace outlives its last
// update. A pace is learned again within seconds of a new throttle; one not
// confirmed for DefaultActiveFor is stale, so the two are equal.
const DefaultPaceFor = DefaultActiveFor

// DefaultSlotLease is how long a fleet-wide concurrency slot lives without
// being renewed; the store renews the slots it holds every third of it. A
// process that dies gives its slots back after at most this long. Fifteen
// seconds outlasts a stalled renewal or two (a GC pause, a failover) and is
// short next to the minutes a mailbox's budget is counted over.
const DefaultSlotLease = 15 * time.Second

// DefaultPrefix begins every key and the notice channel. It is a Redis
// Cluster hash tag ({...}), so that every key of one store lives in one slot
// and a script may touch several of them.
const DefaultPrefix = "kiota-throttle"

// maxPrefix keeps keys short: the prefix is repeated in every key.
const maxPrefix = 64

// An Option configures a Store. Options are checked by New, which reports
// the first bad one.
type Option func(*config) error

type config struct {
	prefix        string
	timeout       time.Duration
	probeInterval time.Duration
	activeFor     time.Duration
	paceFor       time.Duration
	slotLease     time.Duration
	meterProvider metric.MeterProvider
	logger        *slog.Logger
	now           func() time.Time
}

func defaultConfig() config {
	return config{
		prefix:        DefaultPrefix,
		timeout:       DefaultTimeout,
		probeInterval: DefaultProbeInterval,
		activeFor:     DefaultActiveFor,
		paceFor:       DefaultPaceFor,
		slotLease:     DefaultSlotLease,
		logger:        slog.Default(),
		now:           time.Now,
	}
}

// WithPrefix names the keys and the notice channel (default DefaultPrefix).
// Processes share state only when they use the same prefix; distinct fleets
// on one Redis use distinct prefixes. It may not be empty, hold braces (it
// becomes a Cluster hash tag) or be longer than 64 bytes.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if p == "" || len(p) > maxPrefix || strings.ContainsAny(p, "{}") {
			return fmt.Errorf("redisstore: prefix %q: want 1 to %d bytes without braces", p, maxPrefix)
		}
		c.prefix = p
		return nil
	}
}

// WithTimeout bounds each call to Redis (default DefaultTimeout). Past it the
// call returns ErrUnavailable and the caller goes on with its local state.
func WithTimeout(d time.Duration) Option {
	return positive("timeout", d, func(c *config) { c.timeout = d })
}

// WithProbeInterval sets how long the store skips Redis after a failure
// before it tries again (default DefaultProbeInterval).
func WithProbeInterval(d time.Duration) Option {
	return positive("probe interval", d, func(c *config) { c.probeInterval = d })
}

// WithActiveFor sets how long a host stays known as throttled after its last
// throttle or hold (default DefaultActiveFor).
func WithActiveFor(d time.Duration) Option {
	return positive("active duration", d, func(c *config) { c.activeFor = d })
}

// WithPaceFor sets how long a published pace outlives its last update
// (default DefaultPaceFor).
func WithPaceFor(d time.Duration) Option {
	return positive("pace duration", d, func(c *config) { c.paceFor = d })
}

// WithSlotLease sets how long a concurrency slot lives unless renewed
// (default DefaultSlotLease); it must be at least 30 ms, since it is renewed
// every third of it.
func WithSlotLease(d time.Duration) Option {
	return func(c *config) error {
		if d < 30*time.Millisecond {
			return fmt.Errorf("redisstore: slot lease %v: want at least 30ms", d)
		}
		c.slotLease = d
		return nil
	}
}

// WithMeterProvider sets where the store's metrics go (default nil: the
// global provider, otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		c.meterProvider = mp
		return nil
	}
}

// WithLogger sets the logger that hears, once each, that Redis became
// unavailable and that it is back (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("redisstore: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithClock sets the process's clock (default time.Now). The store turns the
// times it is given into durations with it, and the durations Redis answers
// back into times: Redis's own clock decides every schedule and expiry, so
// processes whose clocks disagree still agree on them.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("redisstore: nil clock")
		}
		c.now = now
		return nil
	}
}

func positive(name string, d time.Duration, set func(*config)) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redisstore: %s %v: want > 0", name, d)
		}
		set(c)
		return nil
	}
}
