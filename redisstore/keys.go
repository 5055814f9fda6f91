package redisstore

// keys names every key and the channel of one store. The layout, with what
// each key holds and costs, is in docs/fleet.md; every key begins with the
// hash tag {prefix}, so that one store's keys share a Redis Cluster slot and
// a script may touch several of them. A host never holds '/' or a space, so
// "host/budget" cannot be read two ways.
type keys struct {
	hosts  string // sorted set: host -> active until (ms, Redis clock)
	notice string // channel: "<remaining ms> <host>" on a host's first throttle
	base   string // "{prefix}:"
}

func newKeys(prefix string) keys {
	base := "{" + prefix + "}:"
	return keys{hosts: base + "hosts", notice: base + "notice", base: base}
}

// holds is a sorted set: target key -> held until (ms, Redis clock).
func (k keys) holds(host string) string { return k.base + "holds:" + host }

// since is a string: when the fleet first saw host throttled in its
// current spell of activity (ms, Redis clock).
func (k keys) since(host string) string { return k.base + "since:" + host }

// pace is a hash: budget -> "rate burst".
func (k keys) pace(host string) string { return k.base + "pace:" + host }

// announced is a hash: budget -> "remaining resetAt" (resetAt in ms, Redis clock).
func (k keys) announced(host string) string { return k.base + "ann:" + host }

// schedule is a hash: the budget's theoretical arrival time and the rate the
// fleet's throttles fitted, with when and for how long (scripts.go).
func (k keys) schedule(host, budget string) string { return k.base + "gcra:" + host + "/" + budget }

// released is a sorted set: the send times (µs, Redis clock) of the
// budget's releases of the last keepHistory.
func (k keys) released(host, budget string) string { return k.base + "sent:" + host + "/" + budget }

// refused is a sorted set: the send times (µs, Redis clock) of the
// budget's throttled releases of the last keepHistory.
func (k keys) refused(host, budget string) string { return k.base + "refused:" + host + "/" + budget }

// shares is a hash: process token -> "rate burst at" (at in µs, Redis clock),
// the paces the processes reserving on a budget gave.
func (k keys) shares(host, budget string) string { return k.base + "share:" + host + "/" + budget }

// slots is a sorted set: slot token -> lease until (ms, Redis clock).
func (k keys) slots(host, key string) string { return k.base + "sem:" + host + "/" + key }
