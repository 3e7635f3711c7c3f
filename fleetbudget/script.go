package fleetbudget

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff/internal/lease"
)

// renewScript is lease.Ledger.Renew in Lua, step for step, on one hash
// (KEYS[1]) and one sorted set (KEYS[2], in the same hash slot): the same
// integers, the same order, the same roundings, the same repairs, so that
// TestScriptIsLedger finds the same grants to the unit. Redis runs it
// atomically; its clock is the server's TIME, the only one that moves the
// budget's. Redis 5 replicates a script that read TIME only as its effects,
// after redis.replicate_commands() (on by default from Redis 7 and in
// Valkey, where the call is kept as a no-op).
//
// The hash's fields: b (born), l (last credit), p (pool), s (floor paid
// since the last success), c0 o0 d0 g0 c1 o1 d1 g1 (per interval: its
// index, the long-run shares granted in it and not given back, what was
// refused in it, and what was granted as stock), and per tenth j of the
// Window ij (index), ej (successes), aj (paid from their earnings), fj
// (paid from the floor). A field that is missing, or not an integer Lua's
// tonumber reads exactly, reads as 0 (b as missing: the budget is made
// again); the Ledger's Repair then brings every field into its range, and
// the fields it changed are written back (a tenth that reads as 0 and stays
// 0 may keep what it holds). The sorted set holds the processes that
// renewed in the last two intervals, by ID, scored by when (µs): the
// fleet's size.
//
// A key that is not a hash (a SET, a list) is deleted and the budget made
// again, as old as the processes remember, as a lost key is; a set of the
// processes that is not a sorted set is deleted.
//
// ARGV: Params (Ratio, PerSecond, Burst, Reserve, MinReserve, Window,
// Interval), Request (Started, Succeeded, Span, Return.Tenth,
// Return.Earned, Return.Floor, Return.LongRun, AskRetries, AskReserve,
// AskLongRun, Stock (0 or 1), Born), the key's time to live in ms, a time
// in µs that stands for TIME when it is not 0 (tests only), Leave (0 or
// 1), Owed, OwedLongRun, Return.Interval, Return.Shared, Held, and ID (a
// string). The reply is the Grant: Earned, Floor, LongRun, Tenth, Size,
// Reserve, Pool, Born, Now, Parked, Shared, Held.
const renewScript = `
if redis.replicate_commands then redis.replicate_commands() end
local a = {}
for i = 1, 27 do
  a[i] = tonumber(ARGV[i])
  if a[i] == nil or a[i] ~= a[i] or a[i] ~= math.floor(a[i]) or math.abs(a[i]) >= 2^53 then
    return redis.error_reply('fleetbudget: argument ' .. i .. ' is not an integer')
  end
end
local ratio, persec, burst, reserve, minres, window, interval = a[1], a[2], a[3], a[4], a[5], a[6], a[7]
local started, succeeded, span = a[8], a[9], a[10]
local rtenth, rearned, rfloor, rlong = a[11], a[12], a[13], a[14]
local askn, askr, askl, stock, seen, ttl, now, leave = a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22]
local owed, owedl, rint, rshared, held = a[23], a[24], a[25], a[26], a[27]
local id = ARGV[28] or ''
local TOKEN, MAXCOUNT, MAXASK = 1000000, 100000000, 2^50
local function clamp(n, hi) return math.min(math.max(n, 0), hi) end
started, succeeded, rlong = clamp(started, MAXCOUNT), clamp(succeeded, MAXCOUNT), clamp(rlong, MAXASK)
askn, askr, askl = clamp(askn, MAXASK), clamp(askr, MAXASK), clamp(askl, MAXASK)
owed, owedl, rshared, held = clamp(owed, MAXASK), clamp(owedl, MAXASK), clamp(rshared, MAXASK), clamp(held, MAXASK)
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then q = q - 1 elseif (q + 1) * y <= x then q = q + 1 end
  return q
end
local function whole(n) return n - n % TOKEN end
-- int reads a stored field: an integer, or 0 (missing, not a number, not
-- an integer, too large to be exact).
local function int(v)
  local n = tonumber(v)
  if n == nil or n ~= n or n % 1 ~= 0 or n >= 2^53 or n <= -2^53 then return 0 end
  return n
end

local v = redis.pcall('HMGET', KEYS[1], 'b', 'l', 'p', 's', 'c0', 'o0', 'c1', 'o1',
  'i0', 'e0', 'a0', 'f0', 'i1', 'e1', 'a1', 'f1', 'i2', 'e2', 'a2', 'f2', 'i3', 'e3', 'a3', 'f3', 'i4', 'e4', 'a4', 'f4',
  'i5', 'e5', 'a5', 'f5', 'i6', 'e6', 'a6', 'f6', 'i7', 'e7', 'a7', 'f7', 'i8', 'e8', 'a8', 'f8', 'i9', 'e9', 'a9', 'f9', 'd0', 'd1', 'g0', 'g1')
if v.err then
  -- Not a hash (a SET or a list written over it): the budget is made again,
  -- as one Redis lost.
  redis.call('DEL', KEYS[1])
  v = {}
end
local born, last, pool, since = int(v[1]), int(v[2]), int(v[3]), int(v[4])
local ci, co = {[0] = int(v[5]), int(v[7])}, {[0] = int(v[6]), int(v[8])}
local cd, cg = {[0] = int(v[49]), int(v[50])}, {[0] = int(v[51]), int(v[52])}
local ti, te, ta, tf = {}, {}, {}, {}
for j = 0, 9 do
  ti[j], te[j], ta[j], tf[j] = int(v[9 + 4 * j]), int(v[10 + 4 * j]), int(v[11 + 4 * j]), int(v[12 + 4 * j])
end
local w = math.max(idiv(window, 10), 1)

-- Repair: as Ledger.Repair. dirty marks the tenths to write back.
local dirty = {}
if born <= 0 or born > now then
  born, last, pool, since = now, now, burst, 0
  if seen > 0 and seen <= now then born, pool, since = seen, 0, minres end
  for j = 0, 9 do ti[j], te[j], ta[j], tf[j], dirty[j] = 0, 0, 0, 0, true end
  ci, co, cd, cg = {[0] = 0, 0}, {[0] = 0, 0}, {[0] = 0, 0}, {[0] = 0, 0}
else
  if last < born or last > now then last = now end
  pool = math.min(math.max(pool, 0), burst)
  since = math.min(math.max(since, 0), minres)
  local k = idiv(now - born, w)
  for j = 0, 9 do
    local i, e, p, f = ti[j], te[j], ta[j], tf[j]
    if i < 0 or i > k or i % 10 ~= j then
      ti[j], te[j], ta[j], tf[j] = 0, 0, 0, 0
    else
      te[j], ta[j] = clamp(e, MAXCOUNT), clamp(p, MAXCOUNT * TOKEN)
      tf[j] = clamp(f, minres)
    end
    if ti[j] ~= i or te[j] ~= e or ta[j] ~= p or tf[j] ~= f then dirty[j] = true end
  end
  local i = idiv(now, interval)
  for j = 0, 1 do
    if ci[j] < 0 or ci[j] > i or ci[j] % 2 ~= j then
      ci[j], co[j], cd[j], cg[j] = 0, 0, 0, 0
    else
      co[j], cd[j], cg[j] = clamp(co[j], burst), clamp(cd[j], MAXASK), clamp(cg[j], MAXASK)
    end
  end
end

-- The fleet's size: the processes that renewed in the last two intervals
-- (Ledger's members), the ones after now forgotten (a repair).
local pk = KEYS[2]
local function zset(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    redis.call('DEL', pk) -- not a sorted set
    r = redis.call(...)
  end
  return r
end
zset('ZREMRANGEBYSCORE', pk, now + 1, '+inf')
zset('ZREMRANGEBYSCORE', pk, '-inf', now - 2 * interval)
if leave == 0 then zset('ZADD', pk, now, id) else zset('ZREM', pk, id) end
local size = math.max(zset('ZCARD', pk), 1)

-- What was refused (pending) and granted as stock (parked).
local i = idiv(now, interval)
local c = i % 2
if ci[c] ~= i then ci[c], co[c], cd[c], cg[c] = i, 0, 0, 0 end
local pending, parked = cd[c], cg[c]
if ci[1 - c] == i - 1 then
  pending, parked = pending + cd[1 - c], parked + cg[1 - c]
end
pending = math.max(pending - held - (math.max(rearned, 0) + math.max(rfloor, 0) + rlong), 0)
-- The share given back, or spent, out of its interval's.
if rint == i or rint == i - 1 then
  local s = rint % 2
  if ci[s] == rint then co[s] = co[s] - math.min(co[s], rshared) end
end

-- Credit (Account.Add).
local dt = math.min(math.max(now - last, 0), 3600000000)
pool = math.min(pool + math.floor(persec * dt / 1000000), math.max(burst, pool))
pool = pool + ratio * started + math.max(rlong, 0)
last = math.max(last, now)

local function at(j)
  local s = j % 10
  if ti[s] ~= j then ti[s], te[s], ta[s], tf[s] = j, 0, 0, 0 end
  dirty[s] = true
  return s
end

-- Earn (Account.Earn): the successes spread over their span; the floor
-- granted from two intervals before the span's start on stays paid.
if succeeded > 0 then
  if window == 0 then
    since = 0
  else
    local k = idiv(now - born, w)
    local j0 = idiv(math.max(now - math.max(span, 0) - 2 * interval, born) - born, w)
    local from = math.min(math.max(now - math.max(span, 0), born), now)
    if j0 > k - 10 then
      local fl = 0
      for j = j0, k do
        local t = j % 10
        if ti[t] == j then fl = fl + tf[t] end
      end
      since = math.min(since, fl)
    end
    local sp = now - from
    if sp <= 0 then
      local s = at(k); te[s] = te[s] + succeeded
    else
      local function cum(x)
        if x >= now then return succeeded end
        return math.floor(succeeded * (x - from) / sp)
      end
      for j = math.max(idiv(from - born, w), k - 9, 0), k do
        local n = cum(math.min(born + (j + 1) * w, now)) - cum(math.max(born + j * w, from))
        if n > 0 then local s = at(j); te[s] = te[s] + n end
      end
    end
  end
end

-- Reserve (Account.Reserve).
local function res(k)
  local e, paid, fl = 0, 0, 0
  for j = math.max(k - 9, 0), k do
    local t = j % 10
    if ti[t] == j then e, paid, fl = e + te[t], paid + ta[t], fl + tf[t] end
  end
  return math.max(reserve * e - paid, 0), math.max(minres - math.max(fl, since), 0)
end
-- Spend (Account.Spend).
local function spend(k, n, earned)
  local t = at(k)
  local e = math.min(n, math.max(earned, 0))
  ta[t] = ta[t] + e
  tf[t] = tf[t] + n - e
  since = since + n - e
end

local k = 0
if window > 0 then
  k = idiv(now - born, w)
  -- GiveBack.
  local s = rtenth % 10
  if rtenth > k - 10 and rtenth <= k and ti[s] == rtenth then
    dirty[s] = true
    local rf = math.min(math.max(rfloor, 0), tf[s])
    ta[s] = ta[s] - math.min(ta[s], math.max(rearned, 0))
    tf[s] = tf[s] - rf
    since = since - math.min(since, rf)
  end
  -- The charge, from the reserve.
  if owed > 0 then
    local earned, floor = res(k)
    local n = math.min(owed, earned + floor)
    spend(k, n, earned)
    owed = owed - n
  end
end
pool = pool - math.min(owed + owedl, math.max(pool, 0))

local shres, shlong = 0, 0
if stock ~= 0 then shres, shlong = idiv(minres, size), idiv(burst, size) end
local askres, asklong = askr + shres, askl + shlong
local left, refused, stocked = askn, 0, 0
local ge, gf, rest = 0, 0, 0
if window > 0 then
  local earned, floor = res(k)
  -- The grant: the retries, then the stock beyond what is pending; Spend.
  local free = earned + floor
  local pr = whole(math.min(left, free))
  local st = whole(math.min(askres, math.max(free - pr - pending, 0)))
  refused = refused + math.min(askres - st, shres)
  stocked = stocked + st
  local ask = pr + st
  ge = math.min(ask, earned)
  gf = ask - ge
  spend(k, ask, earned)
  rest = free - ask
  left = left - pr
  pending = math.max(pending - (free - pr), 0)
end
local pl = math.max(pool, 0)
local pr = whole(math.min(left, pl))
local st = whole(math.min(asklong, math.max(pl - pr - pending, 0)))
refused = refused + math.min(asklong - st, shlong)
stocked = stocked + st
local gl = pr + st
local gs = math.min(math.max(st - askl, 0), shlong)
co[c] = math.min(co[c] + gs, burst)
local out = co[c]
if ci[1 - c] == i - 1 then out = out + co[1 - c] end
pool = math.min(pool - gl, math.max(burst - out, 0))
if seen ~= 0 then refused = 0 end
local gh = left - pr + refused
cd[c] = math.min(cd[c] + gh, MAXASK)
cg[c] = math.min(cg[c] + stocked, MAXASK)

local hs = {'b', born, 'l', last, 'p', pool, 's', since, 'c0', ci[0], 'o0', co[0], 'd0', cd[0], 'g0', cg[0],
  'c1', ci[1], 'o1', co[1], 'd1', cd[1], 'g1', cg[1]}
for j, _ in pairs(dirty) do
  hs[#hs + 1] = 'i' .. j; hs[#hs + 1] = ti[j]
  hs[#hs + 1] = 'e' .. j; hs[#hs + 1] = te[j]
  hs[#hs + 1] = 'a' .. j; hs[#hs + 1] = ta[j]
  hs[#hs + 1] = 'f' .. j; hs[#hs + 1] = tf[j]
end
redis.call('HSET', KEYS[1], unpack(hs))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', pk, ttl)
return {ge, gf, gl, k, size, rest, pool, born, now, parked, gs, gh}
`

var renew = redis.NewScript(renewScript)

// keysOf returns the script's KEYS for a budget's key: the hash, and the
// sorted set of its processes, in the same hash slot (the key's braces).
func keysOf(key string) []string { return []string{key, key + ":p"} }

// renewArgs returns the script's ARGV for r with p; now is 0 but in tests.
func renewArgs(p lease.Params, r lease.Request, ttlMillis, now int64) []any {
	flag := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	return []any{p.Ratio, p.PerSecond, p.Burst, p.Reserve, p.MinReserve, p.Window, p.Interval,
		r.Started, r.Succeeded, r.Span, r.Return.Tenth, r.Return.Earned, r.Return.Floor, r.Return.LongRun,
		r.AskRetries, r.AskReserve, r.AskLongRun, flag(r.Stock), r.Born, ttlMillis, now, flag(r.Leave),
		r.Owed, r.OwedLongRun, r.Return.Interval, r.Return.Shared, r.Held, r.ID}
}

// errNotGrant is the error of a reply to the script that is not a grant.
var errNotGrant = errors.New("fleetbudget: Redis's answer to the lease script is not a grant")

// parseGrant reads the script's reply to r, refusing anything else: a
// server that answers garbage is a server that cannot be reached.
func parseGrant(reply any, r lease.Request) (lease.Grant, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 12 {
		return lease.Grant{}, fmt.Errorf("%w: %.40q, want 12 integers", errNotGrant, fmt.Sprint(reply))
	}
	var n [12]int64
	for i, v := range vs {
		if n[i], ok = v.(int64); !ok {
			return lease.Grant{}, fmt.Errorf("%w: %.40q, want 12 integers", errNotGrant, fmt.Sprint(reply))
		}
	}
	g := lease.Grant{Earned: n[0], Floor: n[1], LongRun: n[2], Tenth: n[3], Size: n[4], Reserve: n[5], Pool: n[6], Born: n[7], Now: n[8],
		Parked: n[9], Shared: n[10], Held: n[11]}
	asked := max(r.AskRetries, 0) + max(r.AskReserve, 0) + max(r.AskLongRun, 0)
	if g.Earned < 0 || g.Floor < 0 || g.LongRun < 0 || g.Tenth < 0 || g.Size < 1 || g.Born <= 0 || g.Born > g.Now || g.Parked < 0 ||
		g.Shared < 0 || g.Shared > g.LongRun || g.Held < 0 || !r.Stock && g.Earned+g.Floor+g.LongRun > asked {
		return lease.Grant{}, fmt.Errorf("%w: %v is not one for the renewal asked", errNotGrant, n)
	}
	return g, nil
}
