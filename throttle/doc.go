// Package throttle holds requests back while the server's word holds what
// they target, and paces them per budget at a rate learned from the
// server's answers.
//
// A retry loop calls [Queue.Admit] before each attempt and hands the
// [Pass] it returns back to [Queue.Report] with the attempt's answer. A
// request to a host that was never throttled costs an atomic load: no
// lock, no allocation.
//
// # The model
//
// This comment is the queue's model, written once; docs/throttling.md in
// the repository summarises it.
//
// No URL tells which requests share a budget: most servers keep one per
// client across every path (nginx's limit_req, HAProxy's stick tables,
// most SaaS APIs per key), Microsoft Graph keeps many per host (per
// tenant, per mailbox, per item). The answers tell, and the queue learns
// from them.
//
// Budgets form a tree per host: the host, its APIs (the first path segment
// below the service root: a leading version segment such as v1.0 or beta,
// or a root named in options.QueueOptions.Roots), deeper prefixes, and the
// items (whole paths). A budget is a node of that tree with a pacer and
// the requests waiting for it. Only nodes with evidence exist.
//
//  1. The server's word. A throttle holds exactly what it named (its URL
//     and path) for the whole time it named: its Retry-After. Nothing
//     else is held for it. A throttle that names no wait ([ThrottledNoWait],
//     or a 503 read as a capacity limit, 6.) names no time to hold
//     anything for: its own request waits the policy's delay, which does
//     not step up when a budget's pace let the attempt go ([Pass.Paced]:
//     the throttle is the pace's overshoot, and the pace slows for it),
//     and its target's other requests go at the pace of the budget the
//     evidence places it in, its item's own when none wider (unnamed).
//     Held for the policy's delay instead, the one URL of nginx's 40/s
//     zone, refused once in the first wave, was sent nothing for 3 s and
//     then everything at once. An item that refuses every request is
//     locked (3.) and held by its throttles, as any.
//     [Queue.HeldUntil] tells a caller that would rather not wait it out
//     (one with no retries to spend) until when it runs.
//  2. The first guess is the seed's 5-n rule, counted in children: a
//     throttle goes to the widest node n segments below the root whose
//     distinct children had a throttle within spreadWindow reach 5-n (at
//     least minSpread) while throttles are at least minThrottleShare of
//     its answers since its first throttle (a few locked items among
//     many served ones are not an overrun budget; the wave served before
//     is the burst every budget serves before it throttles, and counted
//     it let 200 workers send a hundred refusals into HAProxy's window of
//     400); where two children are enough, that share, counted with the
//     answers before, must be beyond chance (overrunChance: two locked
//     items among a drive's first ten answers are a draw, not evidence).
//     The host is n = 0 and its children are its APIs: five throttled
//     APIs make the host one budget; four throttled users make the users
//     API one.
//     Requests to one item throttled together (sent before its last
//     throttle came back) make the item a budget of its own (a mailbox,
//     one collection's POSTs), cut out of its parent: its throttles count
//     for no node above it. The rule counts such items too: need(n) of
//     them within spreadWindow below a node n segments below the root make
//     the node their budget, under the same share of throttles, which
//     gathers them (siblings.go: 50 mailboxes behind one limiter are one
//     budget seen item by item; two locked items each requested twice at
//     once, among thousands of served siblings, are not), unless an item
//     throttled on its own below that node shows its traffic a budget of
//     its own (Graph's users API beside its mailboxes). Then an item as
//     deep as those carved lately is one of their kind from its first
//     throttle, which cannot show requests throttled together (kin.go:
//     charged to Identity's budget, the first refusal of each mailbox
//     left over from the first wave slowed Identity's pace). Otherwise the
//     throttle is the item's own: it holds its target and paces nothing (a
//     throttle naming 1 ms costs 1 ms).
//  3. Evidence narrows. An item throttled again each time it waited out
//     its Retry-After, while others succeed, is locked (lockedStrikes): a
//     budget of its own, whose throttles count for no node above it. A
//     shared budget throttles its requests alike: when a child with enough
//     traffic escaped the throttles its budget would have dealt it, at the
//     throttle ratio of its siblings, or met far more than its share
//     (twice at least), by Chernoff's bound a chance under 1 % for the
//     budget as a whole (each child is a test: the bound is shared among
//     them), it is split: its throttled children (twice, or once with more
//     than littleTraffic requests) become budgets of their own, cut out of
//     it, and it searches for its pace afresh for the rest, from half the
//     pace it had: a split that raised the rest's rate is found within a
//     few round trips, and one that was wrong costs a throttle, not the
//     rate. The tallies count only the requests the budget released and
//     halve every evenHalfLife. One lucky success decides nothing.
//  4. Evidence widens. Throttles spread over more children make the parent
//     the budget (2.), and it keeps the pace its children learned, with
//     the whole first wave they counted between them (the host's wave
//     goes to the budget that formed first, or to each budget below the
//     host the part of it sent to its API, counted apart for apiSlots
//     APIs: nginx's zones on one host each let their own through), but for
//     items throttled together when an item throttled on its own below it
//     shows its own traffic a budget (a user of the users API beside its
//     mailboxes): those stay budgets of their own, and a parent that
//     gathered them gives them back (siblings.go). A budget whose last
//     throttle is a recovery window old ends.
//  5. Pace is learned and applied per budget (the adaptive pacer, pacer.go:
//     a search from the first wave's successes, which begins once the
//     wave's last requests are answered (two round trips after the first
//     throttle, or as long as the server took to serve the wave, if that
//     is longer) and fits nothing while no success has come back (the
//     server may still be serving the wave: a concurrency limit refuses
//     at once what it serves slowly), and never passes twice the rate
//     of its last four releases (RFC 7661's rule for a window the
//     application leaves unused: one of nginx's zones, offered about its
//     40/s, searched to 711/s without a refusal, and the next burst of
//     its callers went out at once, its refusal costing the policy's 3 s
//     past the run's end), a fit of the server's
//     token bucket at the first throttle (the middle of the rates at which
//     the bucket holds the last release before the throttled one and the
//     throttled one: the server's lies between; after a decrease, the
//     bucket that refused held anywhere from none to a token, and the
//     bracket spans both, or a round of a few releases a slot apart reads
//     the pace's own rate whatever the server's; so it does at a search's
//     throttle that names no wait, whose refusal costs its request the
//     retry policy's delay (over leanAfter): the fit errs low, not over
//     the server's rate, where the next refusal, as costly, would come
//     within the run), then a CUBIC-like curve that
//     probes above it; the curve counts only time with something to
//     release, so a pace idle through an outage resumes where it was; a
//     probe whose throttle fits no more than the rate it set out from
//     doubles the wait before the next, maxQuietProbes times at most,
//     since each costs its request a Retry-After; a probe waits at
//     least two Retry-After periods, but where the budget's throttles
//     are bare 429s, whose retries go at the pace, only the curve's
//     span).
//     Requests under a paced budget wait FIFO at its
//     pace: a budget cut out of a wider one decides for its requests,
//     else the widest budget of their path. A throttle of a
//     request its budget released slows the pace and holds only that
//     request, which waits out its own Retry-After; an item's hold ends
//     through its pace once the item turns out to be a budget, and so do
//     the holds of the throttles a budget formed from (2.), which were its
//     own before the evidence placed them: behind nginx's zones, whose bare
//     429s hold a target for the policy's 3 s, the first wave's holds on 50
//     ids kept every worker of a run waiting on them for a second.
//     A budget carved in the first wave out of a wider one formed in the
//     same wave takes the wave the wider one counted. A throttle met while
//     the wait named by the throttle of the pacer's last decrease still
//     runs is the same closure of the server's budget (a fixed window
//     throttles whatever is sent until it opens); only a wait the server
//     named closes: a bare 429's is the retry policy's delay, and the
//     limiter that names none (nginx's limit_req) is a leaky bucket whose
//     every refusal after a decrease says the pace is still above its
//     rate. Within a closure the pace falls
//     once, to half, not once per throttle, so that it is there when the
//     window opens (after a search whose fit read nothing, to the first
//     wave's successes a second, when its budget counted them, fitShare
//     of that when a refusal costs more than a second: half a
//     search's overshoot is no rate
//     the server showed, and HAProxy's window, held at half of 1450/s for
//     its 400/s, refused the pace through the closure and past it), and
//     climbs back from there along the curve to the
//     rate the decrease fitted, as CUBIC's window climbs back to where it
//     was lost. Likewise a decrease outside a closure whose fit reads
//     under what the server served over the last second (servedSpan)
//     starts the curve at the fit, which climbs back to fitShare of what
//     was served, never above the pace throttled: a sliding window still
//     counting the last round's overshoot runs a round dry under its
//     rate, and the round alone, fitted as a bucket's, reads it low; a
//     server whose rate fell throttles the climb. The first refusal after
//     a decrease whose fit read the rate, come before the releases since
//     can tell one, is that decrease's round seen late (a leaky bucket
//     still draining), whether or not the server named a wait: the pace
//     drops, and the curve climbs back to the fit; a second one lowers
//     the fit. When the decrease's
//     fit read the server's rate, a refusal within its wait is the overshoot the server still counts (a sliding
//     window for its period, a leaky bucket until it drains), not a rate
//     the fit missed: the pace falls a tenth, which drains it, not to
//     half. When the server refuses every release since that
//     decrease (shutAfter in a row), the pace stops until the wait ends,
//     but for a probe an eighth of the wait apart, which a refusal does
//     not slow: a closed window serves nothing, and one that counts its
//     refusals (HAProxy's stick table) stays closed while they come, past
//     the wait it named: refused again once the wait is over, with
//     nothing served since, the pace stays shut, the closure extended to
//     the new wait. Probes a second or more apart fall at whole seconds
//     before the closure's end, so that a server naming its opening in
//     whole seconds holds a refused probe to that end, not up to a
//     second past it. A success reopens the pace. A window whose refused
//     probe was told to wait to the closure's end, a wait shorter than
//     the closure's by the time since, names its opening (a fixed
//     window) and opens whole: reopened once a release is served (one
//     sent before the wait is over, too: the window names its opening
//     in whole seconds, rounded up), the pace doubles from where its
//     curve stood every two round trips
//     (reopenDoubling at least) until the server refuses a release of
//     the reopening, or it released the first wave's successes, and so
//     takes the window's quota at once; the curve then goes on where it
//     stood, the reopening's refusals no decrease. A bucket, a sliding
//     window or a proxy names the same wait at every refusal, and
//     reopens on the curve. A pace that had nothing to release for half
//     the wait its last decrease named, and for as long as a bucket of
//     the first wave's successes takes to refill at its fit, until that
//     wait ended, reopens the same way once the release after that gap
//     is served: its requests waited out their own Retry-After while
//     the server refilled (a fixed window whose first wave left every
//     caller held otherwise opened onto the curve's rate). A gap that
//     outlasts the wait has another cause (an outage) and ends on the
//     curve: a token bucket's first wave counts what it refilled as the
//     wave went, more than it holds. A server that serves
//     some releases while it refuses others within the wait is not
//     closed but slower than the pace: once it served minServed of
//     them over minServedSpan at least (over less, a fast server's
//     eight successes are one round's burst: HAProxy's window of 400/s
//     read 270/s from 20 ms), the pace falls to the rate
//     it served them at (empty at the decrease, its bucket gave no more
//     than it refilled), where the floor would hold it above that rate,
//     a refusal after another, until the wait ends. That reading holds
//     only while the pace stood idle (nothing to release at its slots)
//     for less than a tenth of its span: a budget whose callers are busy
//     elsewhere is served what it sends, and a small bucket loses what
//     it would have refilled meanwhile.
//  6. A throttle may name no wait: a bare 429 is a throttle. A 503 without
//     Retry-After is read once, by [Queue.Refused]: a capacity limit, a
//     throttle, when the host answers other requests (capacityWindow) and
//     either a budget paced the request, or refusals are most of its recent
//     answers (at least minRefusals): a client that overran a budget sees
//     most of what it sends refused, or, on a host that never throttled,
//     minRefusals came in a row with no success answered between them: a
//     limiter refuses a wave's overflow together, answered before what it
//     let through comes back from the server behind it, while a server
//     failing 30 % at random fails 16 in a row once in 2·10^8 answers;
//     or, in refusals that began on such a host within the last second
//     (none a second apart), minRefusals of them are two thirds of the
//     answers since the first (overflowShare), the wave's own refill
//     served among them, the host's first throttle meanwhile or not.
//     Most alone misses a first wave sent over a few hundred milliseconds,
//     which the limiter half serves; its refusals, read as failures,
//     taught no pace, and the host never became one the queue paces. Once
//     the host has throttled, its budgets read its refusals. Otherwise it is an outage or a server
//     failing some requests at random, which teaches no pace; the outage
//     gate counts it as a failure. A budget the server once throttled by
//     name (a 429, or a Retry-After) takes its bare 503s for failures
//     whatever the host's answers say: its limiter names its throttles,
//     and failures at random come whatever the pace, so that taken for
//     throttles they would lower it at every one.
//     The retry of a bare 429 may go before the retry policy's delay, a
//     guess at a wait the server did not name ([Queue.AdmitEarly]): once
//     the host has served a request sent after the 429 came back, what it
//     refused was a rate, and the retry leaves at its budget's pace; so
//     too when the budget, one the server served before (not an item its
//     own refusal made a budget), has nothing out and nothing to send
//     before it, as a request arriving then would. Never before a hold
//     the server named; the retry loop asks it three times a request at
//     most, so that an item refusing everything while others are served
//     then waits out the policy's delays.
//  7. Announced budgets (RateLimit, RateLimit-Policy, x-ms-throttle-*) are
//     hints checked against what happens: a budget announced as spent is
//     the news a throttle brings, before it costs one, and the pacer learns
//     from it while it searches or probes above its fitted rate. The
//     announced count never gates releases, so a reset never lets every
//     waiter go at once and a window announced coarser than the server's
//     refill does not slow the pace.
//  8. Within the request's limits: no hold outlasts the request's context
//     deadline, MaxElapsed or RetriesTimeLimit (a first attempt's hold
//     counts as waiting): Admit returns ErrHoldTooLong instead. When only
//     the pace would pass them, a request the server's own word holds
//     waits out that hold, which fits, and goes.
//  9. State is bounded: per host at most options.QueueOptions.MaxTracked
//     held URLs, paths and nodes, the newest kept (aged by the order of
//     their throttles, so that many ending at one instant are told apart);
//     a host idle for the recovery window is forgotten.
//  10. A fleet (options.QueueOptions.Store, store.go): processes that share
//     budgets share what they learn. A throttle of a host is told to the
//     store (the server's own hold of a path with SetHold, else MarkActive
//     once a minute), which tells every process within a round trip; so is
//     a budget an answer announces as spent (MarkActive, and Announce with
//     its reset at most once a second). A process with no throttle of its
//     own for a host the fleet holds reads the fleet's state once (State,
//     at most once a second; requests that come during that round trip
//     wait for its answer): the holds become its held paths and URLs, each
//     budget's pace (one process's) a budget paced at it, and each budget
//     announced spent a budget, which its own answers tune from then on;
//     joining the fleet's first wave (within firstWave of the host's first
//     throttle, no pace yet), it counts the holds as its own throttles, and
//     the budget they make searches through the fleet's schedule. With an
//     options.PaceStore, a budget's first throttle publishes the pace its
//     search starts from, which a process joining while the fleet's
//     requests all wait out a Retry-After (and so reserve nothing) follows.
//     A
//     request a budget's pacer releases (unless the server announces that
//     budget: each process paces it from its own answers, which all carry
//     it) takes its slot in the budget's fleet-wide
//     schedule (Reserve, one round trip), which sees every release of the
//     fleet. From its first release it searches for the budget's rate as one
//     process's pacer does, for the whole fleet: from the sum of where the
//     processes' own searches started, each from its part of the first wave
//     (a process whose requests all wait, and so reserve nothing, counts
//     by the pace it published), or the pace one published, when higher;
//     each throttle of a release it made is told to it (Throttled): the
//     first ends the search with the rate a replay of the schedule's
//     releases since its birth fits, as a pacer's does (the bucket empty at
//     the host's first throttle, refilled until the birth); when that
//     cannot be read, it pauses the search at what the fleet sent just
//     before, the search resumes if no throttle fits while it pauses, and
//     from two
//     throttles it fits the budget's one rate (what the fleet sent between
//     them, less what was throttled, over the time between, when the fleet
//     kept the schedule busy meanwhile), which ends the search; its hold
//     and probe, like a pacer's, count only the time the fleet kept it
//     busy. The schedule alone spaces the releases: the process adds no
//     spacing of its own, keeps at most maxReserving reservations under way
//     and its slots at most maxSlotsAhead ahead per budget, and its pacer
//     only learns, standing still meanwhile, for
//     when the store fails; the share it gives the fleet is what it
//     fitted or followed. One rate, not a share per process, so that a process
//     whose work ends first leaves nothing unused. The store fails open: an
//     error leaves every decision local, and its calls are bounded by the
//     store's own timeout, never a hold past the request's limits. A host no
//     process saw throttled costs one lookup in the store's memory: no round
//     trip, no lock, no allocation.
//  11. Concurrency caps (options.QueueOptions.Concurrency, caps.go): a
//     server that limits concurrent requests per target (Outlook's 4 per
//     mailbox) throttles the fifth whatever the pace. A request the queue
//     let go that falls under a cap then takes one of its slots, first
//     come first served, and gives it back with its answer (Report); a
//     wait for a slot ends with the request's limits as a hold does. With a
//     Store that implements options.SlotStore the slot is also taken in
//     the fleet's semaphore (one round trip each way), whose slots a dead
//     process gives back when their lease ends; a full one is asked again
//     every fleetSlotRetry, or sooner when a slot of this process frees.
//     The store failing leaves each process its own cap. Like every hold,
//     a cap holds nothing on a host that never throttled. So the host's
//     first wave goes uncapped, and until a request that held a slot is
//     served the cap's counts may miss requests out beside it: a throttle
//     of a capped request then is the cap's, not a rate's. It teaches no
//     pacer and holds no URL for others (the cap holds them now, which is
//     R14's intent); the request waits out its own Retry-After.
//  12. Caps learned (window.go), when options.QueueOptions.Concurrency
//     names none. A server that limits how many of a budget's requests
//     it serves at once refuses a request only while that many others are
//     being served; a rate refuses whatever was out. Each release of a
//     budget is tallied by how many others the budget had out when it
//     went, and by how many it had out to the same child (a mailbox of
//     the users API), and by its answer, from the budget's first request
//     served on (the host's first wave, which the counts miss, is over by
//     then). The tallies show a cap c when nearly all throttles went with
//     at least c out (all but one in capMisfits), more often than a rate's
//     would fall there by chance (capChance: the share of the releases,
//     answered or not, sent with c out), while requests sent with
//     fewer were served (minCapServed), the share refused jumps at c
//     (capMisfits times what it is below, at least capShare), and served
//     requests take longer than refused ones (capServeRatio: a cap binds
//     only where serving takes time, and a burst after a hold into a
//     server that serves at once shows the same step). Tallies that show
//     both are read as each child's cap: a budget whose waiters all wait
//     at full children has about as many out at each throttle, and read
//     as one cap of its own, ten mailboxes of 4 fell from 31 to 14. The
//     budget, or each of its children alike, then releases a request whenever
//     fewer than c are out and paces nothing: its pacer, which took the
//     cap's throttles for a rate's, paced at about half of what the cap
//     serves. A request whose child is full waits out of the budget's
//     queue, in arrival order per child, so that those to other children
//     go meanwhile. Its throttles teach nothing: one sent with fewer than
//     c out has the tallies read again, and the cap becomes what they
//     show (a cap read too high from a burst's few throttles falls to the
//     server's; one count that lagged by an answer on its way leaves it
//     standing); tallies that show none (a rate's throttles, or another
//     client's requests the counts miss) drop it, its pacer learning from
//     that throttle on.
package throttle
