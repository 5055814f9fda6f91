// Package throttle holds requests back while what they target is
// throttled, and releases them at a pace learned from the server's answers.
//
// A Queue keeps, per host, the URLs, paths and path prefixes the server
// throttled, and per throttle scope (the collection a throttled target is
// in) a pacer and the requests waiting for it. A retry loop calls Admit
// before each attempt and Report with each answer; a request to a host that
// was never throttled costs a map lookup and no lock.
//
// This comment is the queue's model, written once; docs/throttling.md in
// the repository summarises it.
//
// # What a throttle holds
//
// When a request is throttled (429, or 503/504 with Retry-After), the queue
// remembers, per host (the request's Host header when set, else its URL's
// host, compared as RFC 9110 compares authorities: in any case, the
// scheme's default port the same as none), its URL, its path and its
// leading path segments. Segments are
// counted below the service root: a leading version segment (v1.0, beta,
// v1, v2.1 …) is the root, not a shared segment, and QueueOptions.Roots
// names roots of the user's own (/api/data/v9.2). Before every attempt,
// first attempts included, a request is held:
//
//   - until the time the server named, when its exact URL or its path was
//     throttled: that is the server's own word;
//   - when it shares its first n segments below the root with 5−n or more
//     throttled requests (the Kiota design's open issue), by inference. On
//     Microsoft Graph, four throttled /v1.0/users/{id} infer a hold on
//     /v1.0/users/{other}, two throttled /v1.0/users/{id}/messages/{m} one
//     on that mailbox's messages; /v1.0/sites/root and /v1.0/groups/{id}
//     share nothing with them, and three throttled mailboxes do not hold a
//     fourth.
//
// An inferred hold is tested rather than waited out: one matching request
// at a time goes as a probe (at its scope's pace). A probe that succeeds
// lifts the hold at once; one that is throttled confirms it until the time
// the server names. On Graph one host carries dozens of independent
// budgets (Identity per tenant, Outlook per mailbox, SharePoint, single
// locked items), so shared segments are a guess, and a wrong guess should
// cost one round trip, not a Retry-After that can be minutes.
//
// A 429 without a usable Retry-After holds its target for the delay the
// request's policy gives its retry (none when the policy would not retry).
// Once a scope is paced, a throttle of a request its pacer released holds
// that request only, for its own Retry-After: it says the pace went past
// the server's rate, so the pace slows and the rest of the scope goes on.
// Only the throttles that start a scope's pacing hold URLs, paths and
// prefixes.
//
// # Within the request's limits
//
// No hold outlasts the request's context deadline, MaxElapsed or
// RetriesTimeLimit (a first attempt's hold counts as waiting too): Admit
// returns ErrHoldTooLong instead of making a hold past the deadline it is
// given. When only the scope's pace would pass them, a request held by the
// server's own word for its URL or path waits out that hold, which fits,
// and goes: it is never sent into the throttle the server named. Otherwise
// the retry loop sends a first attempt at once, so the server answers it,
// and returns the answer in hand instead of a retry.
//
// # A pace per throttle scope
//
// A throttle's scope is the collection its target is in: its segments below
// the root but the last (/v1.0/users/{id} is in users,
// /v1.0/users/{id}/messages in users/{id}, POST /v1.0/users in users). Each
// scope has its own pacer and its own FIFO of held requests, learned from
// that scope's answers only. A request whose scope had no throttle within
// QueueOptions.Recovery is never queued or paced, and no scope waits behind
// another's queue. Each pacer works as follows:
//
//  1. Before its first throttle nothing is paced. The successes of the
//     wave that throttle ends (requests to the same scope sent in the second
//     before) show the server's burst plus what its bucket refilled while
//     the wave lasted.
//  2. The search for the server's rate starts two round trips after the
//     first throttle (requests sent sooner meet the same congestion), not
//     when its Retry-After ends: the server's word holds only the URLs and
//     paths it throttled, and the rest of the scope uses what the bucket
//     refills meanwhile. Release starts at four times that count per
//     Retry-After period, or per second when the Retry-After is longer (it
//     says when the server takes the throttled requests back, not that it
//     refills that slowly), and doubles once per round trip (at least
//     100 ms), like TCP's slow start, until the server throttles again.
//     When a hold of the throttled path keeps the scope back for half a
//     Retry-After (every POST to one collection), the search starts again
//     from its first rate when the hold ends.
//  3. That throttle is fitted: the pacer replays its own releases against a
//     token bucket, empty at the first throttle and refilled until the
//     search began, and finds the refill rate at which it would have run
//     dry exactly when the throttled request was sent. The bucket's size is
//     the wave's count less that rate over the wave's span, at least a tenth
//     of a second of that rate when the count allows; the two are solved
//     together. A throttle of fewer releases than that bucket (one locked
//     item among many) does not end the search: it is a plain 10 % decrease.
//  4. Release goes on at once at 97 % of the fitted rate, back at it in
//     about 2 s. Then, after 2 s or two of the first throttle's Retry-After
//     periods, whichever is longer, the pace probes above it by doubling
//     every 0.5 s, so that a server whose rate came back up is followed
//     within a second or two. Each later throttle is fitted the same way,
//     against a bucket of at least a tenth of a second of the fitted rate;
//     one throttle never more than halves the pace.
//
// The source design holds what matches a throttle until the throttle ends;
// on a server that names a long Retry-After however soon a token comes,
// holding a whole collection for it leaves the server idle. Its intent
// (nothing is sent into a throttle the server named) is kept: throttled
// URLs and paths wait out their own Retry-After, and an inferred hold of a
// prefix is tested with one probe before the collection goes on at the
// learned pace. Releases keep to their slots, so timer slack does not lower
// the rate.
//
// # Budgets the server announces
//
// Many servers say how much of a budget is left: SharePoint's draft-03
// RateLimit-Limit, -Remaining and -Reset, the current IETF draft's
// RateLimit-Policy and RateLimit, Graph's x-ms-throttle-limit-percentage,
// ARM's x-ms-ratelimit-remaining-* (a malformed value is ignored, and so is
// a field longer than 4 KiB or listing more than 32 policies, read before
// the host's lock is taken). An answer without any of them costs a few map
// lookups. Once an answer says a
// scope's budget is nearly spent (80 % used, or a remainder of nothing),
// the queue follows it for that scope, and its host's requests go through
// the queue:
//
//   - it sends no more than the server said is left, less the scope's
//     requests in flight and those sent since that answer; every answer
//     refreshes it, and an answer to a request sent before the latest one
//     can only lower what is left and delay the reset;
//   - a spent budget is closed until the reset the server named, like a
//     Retry-After, and then opened with its whole limit at once; without a
//     reset, the scope waits for the answers in flight, or lets one request
//     go to ask;
//   - while the server counts, its count decides: the learned pace and the
//     inferred holds step aside, and a throttled request still waits out
//     its own Retry-After;
//   - the budget is followed until its reset or QueueOptions.Recovery after
//     its last answer, whichever is later.
//
// A host's first wave is never held before any answer: a request that
// matches nothing is never queued. Graph's percentage alone gives no count:
// a budget it calls nearly spent is paced by the pacer, and one past 100 %
// is treated as spent without a reset.
//
// # Bounded state
//
// Per host, at most QueueOptions.MaxTracked URLs, paths, prefixes and
// scopes each; past it exactly the most recently throttled are kept, so any
// MaxTracked of 1 or more keeps the newest throttle. A host with no
// throttle and no answer for QueueOptions.Recovery is forgotten when
// another host is first seen.
//
// # Known limits
//
// Where the client sees the whole first wave, the fit of the server's rate
// reads 1 to 6 % high, which releasing at 97 % of it absorbs; a bucket
// smaller than a tenth of a second of its rate reads up to a fifth low. A
// POST to one collection waits out the first wave's Retry-After, as the
// server named that path. The first wave (every worker at once, before any
// answer) is never held, so announced budgets still see its 429s. Windows
// that return no rate-limit headers are not learned as windows: their 429s
// are fitted as a bucket. A budget shared by several collections
// (Identity's /users and /groups) is learned by each collection's pacer on
// its own, and a budget narrower than a collection (one locked item) still
// slows its collection's pace while the collection recovers.
package throttle
