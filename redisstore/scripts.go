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
var scripts = []*redis.Script{markScript, hostsScript, stateScript, announceScript, reserveScript, acquireScript, renewScript}

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
//	                            ARGV[4] notice channel  ARGV[5] host
//	                            ARGV[6] max holds per host  ARGV[7] max hosts
//
// The host is published on the notice channel when no process had it active
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
// {budget, remaining, reset in (ms), ...}}.
//
//	KEYS[1] holds   KEYS[2] pace   KEYS[3] announced
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
return {holds, redis.call('HGETALL', KEYS[2]), ann}
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

// reserveScript is one budget's fleet-wide release schedule, a generic cell
// rate algorithm (GCRA) kept as one number, the theoretical arrival time
// (TAT) of the next request. Each reservation moves it one interval on from
// max(TAT, now); a request may go burst intervals before its TAT. A
// reservation that would wait longer than the caller can is not made, so
// that a caller who gives up leaves no hole in the schedule.
//
// The interval is 1/(the sum of the rates of the processes that reserved
// on the budget within ARGV[6]): each reservation records its process's
// rate and burst, with Redis's time, in KEYS[2]; entries older than that
// are dropped. The fleet's rate, the burst summed likewise, is what its
// processes learned together. The pace one process releases at (the sum
// over the number of processes) is published in KEYS[3], field ARGV[7],
// for processes that join later (State).
//
//	KEYS[1] schedule   ARGV[1] rate (per s)     ARGV[2] burst   ARGV[3] max wait (µs)
//	KEYS[2] shares     ARGV[4] process token   ARGV[5] pace expiry (ms)
//	KEYS[3] paces      ARGV[6] share window (µs)  ARGV[7] budget
//
// Returns {reserved (0 or 1), wait (µs), fleet rate (milli-requests per s)}.
var reserveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[6])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[2], math.ceil(window / 1000) + 1)
local rate, burst, n = 0, 0, 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local r, b, at = string.match(all[i + 1], '^(%S+) (%d+) (%d+)$')
  if r and tonumber(at) > now - window then
    rate = rate + tonumber(r)
    burst = burst + tonumber(b)
    n = n + 1
  else
    redis.call('HDEL', KEYS[2], all[i])
  end
end
redis.call('HSET', KEYS[3], ARGV[7], string.format('%.6g %d', rate / n, math.max(1, math.floor(burst / n))))
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[5]))
local interval = math.max(1, math.floor(1000000 / rate))
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
tat = tat + interval
local wait = math.ceil(tat - burst * interval - now)
if wait < 0 then wait = 0 end
local fleet = math.floor(rate * 1000)
if wait > tonumber(ARGV[3]) then return {0, wait, fleet} end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
return {1, wait, fleet}
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
