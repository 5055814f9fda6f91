// Package redisstore shares the throttle queue's state among the processes
// of a fleet through Redis (R29): a sync service's replicas, or a migration
// tool on a dozen machines, that all spend one tenant's budgets.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store, err := redisstore.New(rdb)
//
// What the fleet shares, each in one round trip:
//
//   - the holds servers named (SetHold, State): which target, until when;
//   - each budget's learned pace (SetPace, State), so that a process joining
//     later starts from it, and the fleet's search for the budget's rate
//     from every process's part of the first wave;
//   - each budget's fleet-wide release schedule (Reserve): one generic cell
//     rate algorithm per budget, run by a Lua script on Redis's clock, which
//     tells a paced request how long to wait for its slot;
//   - the budgets servers announced in rate-limit headers (Announce, State);
//   - concurrency caps only a fleet can keep (Acquire), such as Outlook's 4
//     concurrent requests per mailbox: a semaphore whose slots expire when
//     the process holding them dies, and are renewed while it lives.
//
// A request to a host that no process saw throttled makes no round trip:
// each process keeps the set of hosts throttled anywhere in the fleet
// (Active), learned from a notice that the first throttle of a host
// publishes on a channel, and read without a lock.
//
// No process's clock is trusted. A process hands Redis durations from its
// own now, the scripts keep times on Redis's clock (TIME), and answers come
// back as durations that the process adds to its own clock (WithClock).
//
// The store fails open: every call is bounded by a timeout of tens of
// milliseconds (DefaultTimeout) and by the caller's context; when Redis is
// unreachable, slow, restarted empty or failing over, calls return an error
// wrapping ErrUnavailable at once, and the caller goes on with its local
// state. After a failure the store leaves Redis alone for a probe interval,
// so a dead Redis costs nothing but one probe a second; it says so once in
// the log, counts each fallback (MetricFallbacks), and the client
// reconnects by itself. A Redis restarted empty is filled again by what the
// processes learn next.
//
// docs/fleet.md describes running a fleet: the key layout, the memory each
// key takes and how keys expire.
package redisstore
