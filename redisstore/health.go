package redisstore

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// health remembers whether Redis answered lately. While it is down, calls
// skip Redis until the probe interval has passed; then one call at a time
// probes it. The logger hears each change once, not each failed call.
type health struct {
	log  *slog.Logger
	down atomic.Bool // read without the lock on the healthy path

	mu      sync.Mutex
	retryAt time.Time
	probing bool
}

// admit reports whether a call may go to Redis now.
func (h *health) admit(now time.Time) bool {
	if !h.down.Load() {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return true
	}
	if h.probing || now.Before(h.retryAt) {
		return false
	}
	h.probing = true
	return true
}

// succeeded records an answer from Redis.
func (h *health) succeeded() {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probing = false
	if h.down.Swap(false) {
		h.log.Info("redisstore: redis answers again; sharing throttle state with the fleet")
	}
}

// abandoned records a call its caller gave up before Redis answered: it
// frees the probe for the next call.
func (h *health) abandoned() {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probing = false
}

// failed records a failure: Redis is skipped for the next interval.
func (h *health) failed(now time.Time, interval time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probing = false
	h.retryAt = now.Add(interval)
	if !h.down.Swap(true) {
		h.log.Warn("redisstore: redis unavailable; each process goes on with its local throttle state",
			"error", err, "retry_in", interval)
	}
}
