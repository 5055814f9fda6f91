package redisstore

import "github.com/redis/go-redis/v9"

// The scripts read Redis's clock (TIME) and never a process's: every time
// they store is in Redis's milliseconds (microseconds for the schedule), and
// every time they answer is a duration from Redis's now, which the caller
// adds to its own clock. Redis 7 replicates a script by its effects, so
// reading TIME before a write is safe on replicas and in the AOF.
//
// Numbers go to redis.call as numbers (Redis formats them with %.17g);
// only the short durations are concatenated into strings, where Lua's
// %.14g is exact.

// scripts are loaded into Redis whenever the notice listener (re)subscribes.
var scripts = []*redis.Script{markScript, hostsScript, stateScript, announceScript, paceScript, reserveScript, throttleScript, acquireScript, renewScript}

// nowMS is the preamble of the millisecond scripts.
const nowMS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// trim drops the members of sorted set k that have expired, then its
// lowest-scored members past max, and lets k expire with its last member.
const trim = `
local function trim(k, max)
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  local extra = redis.call('ZCARD', k) - max
  if extra > 0 then redis.call('ZREMRANGEBYRANK', k, 0, extra - 1) end
  local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIRE', k, tonumber(last[2]) - now + 1) end
end
`

// markScript records a throttle of a host and, when ARGV[2] > 0, the hold
// the server named on one of its targets.
//
//	KEYS[1] holds of the host   ARGV[1] target key   ARGV[2] hold (ms)
//	KEYS[2] hosts               ARGV[3] active for (ms) after the hold
//	KEYS[3] since               ARGV[4] notice channel  ARGV[5] host
//	                            ARGV[6] max holds per host  ARGV[7] max hosts
//
// The first throttle of a spell of activity is recorded in KEYS[3], which
// lives as long as the host stays active. The host is published on the notice channel when no process had it active
// (its first throttle) or when this throttle extends its activity by more
// than half of ARGV[3], so that the others' local copies never lapse while
// Redis still holds it. Returns {first (0 or 1), active remaining (ms)}.
var markScript = redis.NewScript(nowMS + trim + `
local hold = tonumber(ARGV[2])
local activeFor = tonumber(ARGV[3])
if hold > 0 then
  local untl = now + hold
  local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  if not cur or cur < untl then redis.call('ZADD', KEYS[1], untl, ARGV[1]) end
  trim(KEYS[1], tonumber(ARGV[6]))
end
local active = now + hold + activeFor
local prev = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[5]))
if not prev or prev < active then redis.call('ZADD', KEYS[2], active, ARGV[5]) end
trim(KEYS[2], tonumber(ARGV[7]))
local first = 0
if not prev or prev <= now then first = 1 end
if first == 1 or active - prev > activeFor / 2 then
  redis.call('PUBLISH', ARGV[4], (active - now) .. ' ' .. ARGV[5])
end
if prev and prev > active then active = prev end
if first == 1 then
  redis.call('SET', KEYS[3], now, 'PX', active - now)
else
  redis.call('PEXPIRE', KEYS[3], active - now)
end
return {first, active - now}
`)

// hostsScript answers the hosts active fleet-wide:
// {host, remaining (ms), host, remaining, ...}.
//
//	KEYS[1] hosts
var hostsScript = redis.NewScript(nowMS + `
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 2, #r, 2 do r[i] = tonumber(r[i]) - now end
return r
`)

// stateScript answers what the fleet knows of one host:
// {{target, remaining (ms), ...}, {budget, "rate burst", ...},
// {budget, remaining, reset in (ms), ...}, since its first throttle of the
// spell (ms; -1 when unknown)}.
//
//	KEYS[1] holds   KEYS[2] pace   KEYS[3] announced   KEYS[4] since
var stateScript = redis.NewScript(nowMS + `
local holds = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 2, #holds, 2 do holds[i] = tonumber(holds[i]) - now end
local ann = {}
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  local r, at = string.match(all[i + 1], '^(%-?%d+) (%d+)$')
  if r and tonumber(at) > now then
    ann[#ann + 1] = all[i]
    ann[#ann + 1] = tonumber(r)
    ann[#ann + 1] = tonumber(at) - now
  end
end
local since = tonumber(redis.call('GET', KEYS[4]))
local age = -1
if since then age = math.max(now - since, 0) end
return {holds, redis.call('HGETALL', KEYS[2]), ann, age}
`)

// paceScript publishes the pace one process releases a budget at: for
// processes that join later (State), and as the process's share of the
// budget's fleet-wide rate, as a reservation records it (reserveScript). A
// process whose every request waits out the first wave's Retry-After
// reserves nothing, yet its part of that wave is what the server let
// through as much as the others': counted, the schedule's search starts
// from the whole wave's successes, as one process's pacer does.
//
//	KEYS[1] pace   KEYS[2] shares   ARGV[1] budget   ARGV[2] "rate burst"
//	ARGV[3] pace TTL (ms)   ARGV[4] process token   ARGV[5] share window (µs)
var paceScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[2] .. ' ' .. string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[2], math.ceil(tonumber(ARGV[5]) / 1000) + 1)
return 1
`)

// announceScript records what the server announced of a budget. Servers
// count a budget down within one window, so a report for the same reset
// (within a second) that leaves more than the stored one is older news and
// is dropped; a report for another window replaces it. Fields past their
// reset are removed.
//
//	KEYS[1] announced   ARGV[1] budget   ARGV[2] remaining   ARGV[3] reset in (ms)
//
// Returns 1 when stored, 0 when dropped.
var announceScript = redis.NewScript(nowMS + `
local rem = tonumber(ARGV[2])
local at = now + tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local last = at
for i = 1, #all, 2 do
  local r, a = string.match(all[i + 1], '^(%-?%d+) (%d+)$')
  r = tonumber(r)
  a = tonumber(a)
  if not a or a <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] == ARGV[1] and math.abs(a - at) < 1000 and r < rem then
    return 0
  elseif a > last then
    last = a
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d %d', rem, at))
redis.call('PEXPIRE', KEYS[1], last - now + 1)
return 1
`)

// The schedule's scripts share one model of a budget's fleet-wide rate,
// kept in its schedule hash (KEYS[1]):
//
//	tat    the theoretical arrival time of the next request (µs)
//	rate   the rate the fleet's throttles fitted (per s); absent until then
//	since  when it was set (µs); it holds until since + hold, then probes
//	       above, doubling every probeDoubling, to follow a server whose
//	       budget grew
//	hold   how long it holds (µs)
//	step   how often a search doubles the rate (µs), from the schedule's
//	       first release until a fit ends the search; absent after
//	born   when the schedule made its first release (µs)
//	empty  the latest time before the birth that a process published its
//	       pace at its first throttle (µs): the server's bucket was empty
//	       then too, not only at the host's first throttle
//	mark   when a throttled request was sent (µs): the server's bucket was
//	       empty then, and what it accepted from then to the next throttle
//	       is its rate
//	idle   the time since it was set (µs) in which the schedule had no
//	       request waiting for its slots, which neither its hold nor its
//	       probe counts: a rate the fleet left unused is no evidence that
//	       the server takes it (RFC 7661's rule for a congestion window),
//	       and a probe that rose while every request waited out a
//	       Retry-After would meet their return with a rate far above the
//	       server's
//	busy   when the schedule last had requests waiting again after such
//	       a time (µs)
//	closed until when the wait named by the throttle whose fit last
//	       lowered the rate, outside such a wait, runs (µs): a server
//	       that named a wait may refuse whatever is sent until it ends (a
//	       fixed window, or a sliding window that counts its refusals),
//	       and a span inside it in which almost nothing was accepted
//	       says it is closed, not slower: it lowers the rate no further
//
// and two sorted sets of send times (µs): KEYS[4] the releases the schedule
// made, KEYS[5] the throttled ones the processes reported; KEYS[6] is when
// the host's spell of activity began (ms; markScript).
//
// ARGV of both scripts: [1] share rate, [2] share burst, [3] max wait (µs),
// [4] process token, [5] pace expiry (ms), [6] share window (µs), [7] budget,
// [8] probe doubling (µs), [9] least burst (s of the rate), [10] kept
// history (µs); the reserve script adds [11] search doubling (µs), [12]
// idle slack (µs); the throttle script adds [11] ago (µs), [12] hold (µs),
// [13] fit share, [14] least span (µs), [15] least releases, [16] most
// span (µs), [17] the span over which the fleet's recent rate is read
// (µs), [18] the least share of the schedule's rate a span's releases
// must reach for the fit to read it, [19] the mark's hold (µs), [20] the
// throttle's Retry-After (µs), [21] the most of a span's releases accepted
// for the span to read as a closed budget.
const fleetRate = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[6])
-- shares returns the sum of the rates and bursts the processes that
-- reserved or published within the window gave, how many they are, and
-- when the latest of them gave it (0: none).
local function shares()
  local rate, burst, n, latest = 0, 0, 0, 0
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local r, b, at = string.match(all[i + 1], '^(%S+) (%d+) (%d+)$')
    if r and tonumber(at) > now - window then
      rate = rate + tonumber(r)
      burst = burst + tonumber(b)
      n = n + 1
      latest = math.max(latest, tonumber(at))
    else
      redis.call('HDEL', KEYS[2], all[i])
    end
  end
  return rate, burst, n, latest
end
-- beyond returns how far past its hold the schedule's rate had risen at
-- time at: the time since it was set, less the hold and the idle time.
local function beyond(at, sched)
  return at - tonumber(sched[3]) - tonumber(sched[4]) - (tonumber(sched[7]) or 0)
end
-- rateAt returns the schedule's rate and burst at time at, and whether the
-- fleet fitted it.
local function rateAt(at, sched, sum, burst)
  local fitted = tonumber(sched[2])
  if not fitted then return sum, burst, false end
  local r = fitted
  local step = tonumber(sched[6])
  local past = beyond(at, sched)
  -- A search starts from the processes' paces, each from its part of the
  -- fleet's first wave: the whole wave's, once they all reserved, until
  -- its first throttle.
  if step and not tonumber(sched[5]) and sum > r then r = sum end
  if past > 0 then
    local from = r
    r = r * 2 ^ math.min(past / (step or tonumber(ARGV[8])), 30)
    if step then
      -- A search grows only while the fleet uses it (RFC 7661): never past
      -- twice what the fleet released over its last step, nor below where
      -- it began. Workers taken one by one into a Retry-After keep the
      -- schedule busy while they dwindle, and a search that doubled on
      -- meanwhile would let their retries out all at once.
      local used = redis.call('ZCOUNT', KEYS[4], at - step, at) * 1000000 / step
      r = math.min(r, math.max(from, 2 * used))
    end
  end
  return r, math.max(1, math.floor(r * tonumber(ARGV[9]))), true
end
local function keep(k)
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now - tonumber(ARGV[10]))
  redis.call('PEXPIRE', k, math.ceil(tonumber(ARGV[10]) / 1000) + 1)
end
-- expire keeps the schedule a share window past its last slot: a budget
-- the fleet left alone that long is paced anew, like the queue's own.
local function expire(tat)
  redis.call('PEXPIRE', KEYS[1], math.ceil((math.max((tat or now) - now, 0) + window) / 1000))
end
`

// reserveScript takes one slot of a budget's fleet-wide release schedule: a
// generic cell rate algorithm (GCRA) on the schedule's theoretical arrival
// time. Each reservation moves it one interval on from max(TAT, now); a
// request may go burst intervals before its TAT. A reservation that would
// wait longer than the caller can is not made, so that a caller who gives up
// leaves no hole in the schedule.
//
// A schedule is born of a throttle, when the server's bucket is empty: its
// first slot is one interval away, and no burst goes at its birth. The
// schedule's rate is the one the fleet's throttles fitted (see
// throttleScript), or until then the sum of the rates the processes that
// reserved within the share window gave: each reservation records its
// process's rate and burst, with Redis's time, in KEYS[2]. The pace one
// process releases at (the rate over the number of processes) is published
// in KEYS[3], field ARGV[7], for processes that join later (State).
//
// Returns {reserved (0 or 1), wait (µs), rate (milli-requests per s),
// fitted (0 or 1)}.
var reserveScript = redis.NewScript(fleetRate + `
local sched = redis.call('HMGET', KEYS[1], 'tat', 'rate', 'since', 'hold', 'mark', 'step', 'idle')
local fresh = not sched[2]
-- Before a schedule's birth the shares are the paces the processes
-- published at their first throttles (SetPace), and the latest says when
-- the server's bucket was last found empty: the processes that start last
-- send their first requests into it after the host's first throttle, and
-- spend what it refilled meanwhile.
local empty = 0
if fresh then
  local _, _, _, latest = shares()
  empty = latest
end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[2], math.ceil(window / 1000) + 1)
local sum, sburst, n = shares()
if fresh then
  -- The schedule's first release begins the fleet's search for the
  -- budget's rate: from the processes' paces, doubling every ARGV[11],
  -- until a throttle stops it. A process whose throttle made the
  -- budget published the pace its search starts from (SetPace); the
  -- first to reserve may be one that only joined, with no wave of its
  -- own, while the others' requests all wait out a Retry-After.
  local published = tonumber(string.match(redis.call('HGET', KEYS[3], ARGV[7]) or '', '^(%S+) '))
  sched[2], sched[3], sched[4], sched[6] = string.format('%.6g', math.max(sum, published or 0, 1)), string.format('%.0f', now), '0', ARGV[11]
  redis.call('HSET', KEYS[1], 'rate', sched[2], 'since', sched[3], 'hold', sched[4], 'step', sched[6])
  if empty > 0 then redis.call('HSET', KEYS[1], 'empty', string.format('%.0f', empty)) end
end
-- A slot due before now that nobody took was time with nothing waiting.
-- Such a reservation always takes its slot at once and moves the TAT on,
-- so no gap is counted twice.
local last = tonumber(sched[1])
if last then
  local gap = now - math.max(last, tonumber(sched[3])) - tonumber(ARGV[12])
  if gap > 0 then
    sched[7] = (tonumber(sched[7]) or 0) + gap
    redis.call('HSET', KEYS[1], 'idle', string.format('%.0f', sched[7]), 'busy', string.format('%.0f', now))
  end
end
local rate, burst, fitted = rateAt(now, sched, sum, sburst)
redis.call('HSET', KEYS[3], ARGV[7], string.format('%.6g %d', rate / n, math.max(1, math.floor(burst / n))))
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[5]))
local interval = math.max(1, math.floor(1000000 / rate))
local tat = tonumber(sched[1])
if not tat or tat < now then tat = now end
-- A schedule is born of a throttle: the server's bucket is empty, and a
-- burst of its first slots would meet it all at once. Its first release
-- waits for a token, as a pacer's does after a throttle.
if fresh then tat = now + burst * interval end
tat = tat + interval
local wait = math.ceil(tat - burst * interval - now)
if wait < 0 then wait = 0 end
local f = 0
if fitted then f = 1 end
if wait > tonumber(ARGV[3]) then return {0, wait, math.floor(rate * 1000), f} end
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat))
redis.call('HSETNX', KEYS[1], 'born', string.format('%.0f', now))
expire(tat)
-- The slot's send time, unique as the TAT only grows: what the fit counts.
redis.call('ZADD', KEYS[4], now + wait, string.format('%.0f', tat))
keep(KEYS[4])
return {1, wait, math.floor(rate * 1000), f}
`)

// throttleScript takes a throttle of a request that a budget's schedule
// released, sent ARGV[11] before now, and fits the budget's rate from what
// the whole fleet sent. A throttle says the server's bucket was empty when
// the request was sent; from one such time (mark) to the next, the bucket
// refilled at the server's rate and every token went to an accepted
// request, so that rate is the releases between the two less the throttled
// ones, over the time between. The schedule runs at ARGV[13] of it, holds
// that for ARGV[12], then probes above.
//
// A throttle of a request sent before the last change, or within twice its
// own round trip after it, is the congestion that change answered, seen
// late; it is counted, and changes nothing. The first throttle after a
// change marks the bucket empty and holds the rate at what the fleet sent
// just before, for ARGV[19], until a later one, at least ARGV[14] and
// ARGV[15] releases on, fits it; a mark older than ARGV[16] is too old to
// say what the bucket did since, and a span over which the fleet released
// at less than ARGV[18] of the schedule's rate left the bucket room to
// fill: either is marked anew, the rate unchanged. A search's first
// throttle fits at once, when the host's first throttle (KEYS[6]) says
// when the server's bucket was last empty, by replaying the releases
// since the schedule's birth. Otherwise a mark pauses the search and only
// a fit ends it: a search whose mark's hold ended with no
// throttle that fitted goes on doubling, and its next throttle marks anew.
//
// Returns {changed (0 or 1), rate (milli-requests per s)}.
var throttleScript = redis.NewScript(fleetRate + `
local ago = tonumber(ARGV[11])
local sent = now - ago
redis.call('ZADD', KEYS[5], sent, string.format('%.0f %s', now, ARGV[4]))
keep(KEYS[5])
local sched = redis.call('HMGET', KEYS[1], 'tat', 'rate', 'since', 'hold', 'mark', 'step', 'idle', 'born', 'busy', 'closed', 'empty')
local sum, sburst = shares()
local rate = rateAt(sent, sched, sum, sburst)
if rate <= 0 then return {0, 0} end
-- Within the wait a lowering fit's throttle named, the server may refuse
-- whatever is sent until it ends.
local closing = sent < (tonumber(sched[10]) or 0)
-- fitted sets the schedule's rate to r, fitted from the throttle sent at
-- sent, which ends a search: held for ARGV[12], the bucket marked empty
-- at sent. A fit that lowers the rate from before, outside such a wait,
-- begins one.
local function fitted(r, before, hold)
  redis.call('HSET', KEYS[1], 'rate', string.format('%.6g', r), 'since', string.format('%.0f', now),
    'hold', hold or ARGV[12], 'mark', string.format('%.0f', sent))
  if not closing and r < before then
    redis.call('HSET', KEYS[1], 'closed', string.format('%.0f', now + tonumber(ARGV[20])))
  end
  redis.call('HDEL', KEYS[1], 'step', 'idle')
  expire(tonumber(sched[1]))
  return {1, math.floor(r * 1000)}
end
local since = tonumber(sched[3])
if since and sent <= since + 2 * ago then return {0, math.floor(rate * 1000)} end
-- The first of the fleet's releases meet what its processes sent before
-- they knew of the throttle, which no schedule counts.
local born = tonumber(sched[8])
if not born or sent <= born then return {0, math.floor(rate * 1000)} end
local mark = tonumber(sched[5])
-- A search that went on past its mark's hold met no throttle that fitted
-- while it held: the server's bucket had room then, and the span from the
-- mark says nothing of its rate.
if mark and sched[6] and beyond(sent, sched) > 0 then mark = nil end
local span = 0
if mark then span = sent - mark end
if mark and span >= tonumber(ARGV[14]) and span <= tonumber(ARGV[16]) then
  local released = redis.call('ZCOUNT', KEYS[4], '(' .. mark, sent)
  -- A fleet that sent well under the schedule's rate left the server's
  -- bucket time to fill, and what got through says only that the rate is
  -- at least that: the span starts anew here, at the same rate.
  local offered = released * 1000000 / span
  if offered < tonumber(ARGV[18]) * rateAt(mark, sched, sum, sburst) then
    redis.call('HSET', KEYS[1], 'mark', string.format('%.0f', sent))
    return {0, math.floor(rate * 1000)}
  end
  if released >= tonumber(ARGV[15]) then
    local refused = redis.call('ZCOUNT', KEYS[5], '(' .. mark, sent)
    local accepted = math.max(released - refused, 0)
    if closing and accepted < tonumber(ARGV[21]) * released then
      -- Closed, not slower: a budget refilling at any rate the fleet's
      -- search reaches would have taken more. The span starts anew here.
      redis.call('HSET', KEYS[1], 'mark', string.format('%.0f', sent))
      return {0, math.floor(rate * 1000)}
    end
    local fit = math.max(accepted, 1) * 1000000 / span * tonumber(ARGV[13])
    -- One fit never more than halves the rate: a noisy span, or other
    -- traffic on the server's budget, slows the fleet by steps.
    return fitted(math.max(fit, rate / 2), rate)
  end
end
if mark and span >= 0 and span <= tonumber(ARGV[16]) then return {0, math.floor(rate * 1000)} end
-- The bucket was empty at sent: what the fleet sends from here is counted
-- against it. Meanwhile the fleet sends at what it sent just before,
-- which ran the bucket dry: a little above the server's rate, and no
-- more, however far the schedule's rate had risen while it probed.
-- Only what it sent since it last had requests waiting: a span that
-- reaches back into idle time reads a rate the fleet never offered.
local busy = tonumber(sched[9]) or born
local recent = math.min(tonumber(ARGV[17]), sent - math.max(born, busy))
if recent >= tonumber(ARGV[14]) then
  local just = redis.call('ZCOUNT', KEYS[4], sent - recent, sent) * 1000000 / recent
  if just >= 1 and just < rate then rate = just end
end
-- A search's first throttle (or its first after a pause that fitted
-- nothing) ends it, as a process's own pacer ends its search: the
-- server's bucket was empty at the host's first throttle (KEYS[6]), when
-- the fleet's first wave ran it dry, and at the latest first throttle of
-- a process published before the birth (empty), refilled until the birth,
-- and was empty again at sent; it holds at least ARGV[9] s of its rate.
-- The refill rate at which such a bucket, replaying the schedule's
-- releases (less those refused) from its birth, first runs dry at sent is
-- the server's. A bucket that held more, or releases the schedule never
-- saw (a process not yet following it), only lower it. A mark and a
-- second throttle, 20 releases on, cost the fleet's few workers not held
-- by the first wave's Retry-After every request sent meanwhile above the
-- server's rate.
-- The bucket holds at least what the server let the fleet's first wave
-- have at once after a quiet spell: the sum of the processes' parts of
-- it, the bursts of their shares. A window that counts by the second (a
-- stick table) lets its whole quota through at once, and a bucket of a
-- tenth of a second read that quota, let through in 60 ms, as four
-- times the server's rate. As a process's pacer does, the fit never
-- ends below that wave per Retry-After, which the server sustained; a fit
-- at that floor read no rate, so it holds only until the throttle's wait
-- ends, and then probes.
-- Without that first throttle (a Redis restarted empty) the bucket's state
-- at the birth is a guess, and the search marks as below.
local first = tonumber(redis.call('GET', KEYS[6]))
if first and sched[6] and not mark and sent - born >= tonumber(ARGV[14]) then
  local at = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. born, sent, 'WITHSCORES')
  local refused = redis.call('ZCOUNT', KEYS[5], '(' .. born, '(' .. sent)
  local refill = math.max(born - math.max(first * 1000, tonumber(sched[11]) or 0), 0) / 1000000
  local least = tonumber(ARGV[9])
  local floor = sburst * 1000000 / math.max(tonumber(ARGV[20]), 1000000)
  local function dry(r)
    local cap = math.max(1, least * r, sburst)
    local tokens, prev, skip = math.min(cap, r * refill), born, refused
    for i = 2, #at, 2 do
      local t = tonumber(at[i])
      tokens = math.min(cap, tokens + r * (t - prev) / 1000000)
      prev = t
      if skip > 0 and i < #at then
        skip = skip - 1
      else
        tokens = tokens - 1
        if tokens < 0 then return true end
      end
    end
    return false
  end
  local most = rateAt(sent, sched, sum, sburst)
  if #at / 2 - refused >= tonumber(ARGV[15]) and not dry(most) then
    local lo, hi = 0, most
    for _ = 1, 30 do
      local mid = (lo + hi) / 2
      if dry(mid) then lo = mid else hi = mid end
    end
    local fit = hi * tonumber(ARGV[13])
    if fit < floor and floor < rate then
      return fitted(floor, rate, ARGV[20])
    end
    return fitted(math.max(1, math.min(rate, fit)), rate)
  end
end
-- A search's mark holds for two of its steps, long enough to hear of the
-- releases made at the held rate: a fit, or none, and the search resumes.
local hold = ARGV[19]
if sched[6] then hold = string.format('%.0f', 2 * tonumber(sched[6])) end
redis.call('HSET', KEYS[1], 'mark', string.format('%.0f', sent), 'rate', string.format('%.6g', rate),
  'since', string.format('%.0f', now), 'hold', hold)
redis.call('HDEL', KEYS[1], 'idle')
expire(tonumber(sched[1]))
return {1, math.floor(rate * 1000)}
`)

// acquireScript takes one of ARGV[2] slots of a fleet-wide semaphore, or
// renews the slot ARGV[1] already holds. Slots whose lease ended (their
// holder died or stopped renewing) are freed first.
//
//	KEYS[1] slots   ARGV[1] token   ARGV[2] limit   ARGV[3] lease (ms)
//
// Returns {1, 0} when taken, {0, ms until the first lease ends} when full.
var acquireScript = redis.NewScript(nowMS + trim + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  trim(KEYS[1], tonumber(ARGV[2]))
  return {1, 0}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
`)

// renewScript extends the leases of the slots this process holds, one key
// and token per slot, in one round trip.
//
//	KEYS[i] slots   ARGV[1] lease (ms)   ARGV[i+1] token
//
// Returns, per slot, 1 when renewed and 0 when its lease had already ended.
var renewScript = redis.NewScript(nowMS + `
local lease = tonumber(ARGV[1])
local r = {}
for i = 1, #KEYS do
  local s = tonumber(redis.call('ZSCORE', KEYS[i], ARGV[i + 1]))
  if s and s > now then
    redis.call('ZADD', KEYS[i], now + lease, ARGV[i + 1])
    if redis.call('PTTL', KEYS[i]) < lease then redis.call('PEXPIRE', KEYS[i], lease + 1) end
    r[i] = 1
  else
    r[i] = 0
  end
end
return r
`)
