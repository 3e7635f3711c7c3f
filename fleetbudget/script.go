package fleetbudget

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff/internal/lease"
)

// renewScript is lease.Ledger.Renew in Lua, step for step, on one hash
// (KEYS[1]): the same integers, the same order, the same roundings, so that
// TestScriptIsLedger finds the same grants to the unit. Redis runs it
// atomically; its clock is the server's (TIME). Redis 5 replicates a script
// that read TIME only as its effects, after redis.replicate_commands() (on
// by default from Redis 7 and in Valkey, where the call is kept as a no-op).
//
// ARGV: Params (Ratio, PerSecond, Burst, Reserve, MinReserve, Window,
// Interval), Request (Started, Succeeded, Span, Return.Tenth,
// Return.Earned, Return.Floor, Return.LongRun, AskReserve, AskLongRun,
// Born), the key's time to live in ms, and a time in µs that stands for
// TIME when it is not 0 (tests only). The reply is the Grant: Earned,
// Floor, LongRun, Tenth, Size, Reserve, Pool, Born, Now.
const renewScript = `
if redis.replicate_commands then redis.replicate_commands() end
local a = {}
for i = 1, 19 do
  a[i] = tonumber(ARGV[i])
  if a[i] == nil then return redis.error_reply('fleetbudget: argument ' .. i .. ' is not a number') end
end
local ratio, persec, burst, reserve, minres, window, interval = a[1], a[2], a[3], a[4], a[5], a[6], a[7]
local started, succeeded, span = a[8], a[9], a[10]
local rtenth, rearned, rfloor, rlong = a[11], a[12], a[13], a[14]
local askr, askl, seen, ttl, now = a[15], a[16], a[17], a[18], a[19]
local TOKEN = 1000000
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

local names = {'b', 'l', 'p', 'c0', 'n0', 'c1', 'n1', 'i0', 'e0', 'a0', 'f0', 'i1', 'e1', 'a1', 'f1', 'i2', 'e2', 'a2', 'f2', 'i3', 'e3', 'a3', 'f3', 'i4', 'e4', 'a4', 'f4', 'i5', 'e5', 'a5', 'f5', 'i6', 'e6', 'a6', 'f6', 'i7', 'e7', 'a7', 'f7', 'i8', 'e8', 'a8', 'f8', 'i9', 'e9', 'a9', 'f9'}
local v = redis.call('HMGET', KEYS[1], unpack(names))
local born, last, pool = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
local ci, cn = {[0] = tonumber(v[4]) or 0, tonumber(v[6]) or 0}, {[0] = tonumber(v[5]) or 0, tonumber(v[7]) or 0}
local ti, te, ta, tf = {}, {}, {}, {}
for j = 0, 9 do
  ti[j] = tonumber(v[8 + 4 * j]) or 0
  te[j] = tonumber(v[9 + 4 * j]) or 0
  ta[j] = tonumber(v[10 + 4 * j]) or 0
  tf[j] = tonumber(v[11 + 4 * j]) or 0
end
local fresh = false
if born == nil or last == nil or pool == nil then
  fresh = true
  born, last, pool = now, now, burst
  if seen > 0 and seen <= now then born, pool = seen, 0 end
  for j = 0, 9 do ti[j], te[j], ta[j], tf[j] = 0, 0, 0, 0 end
  ci, cn = {[0] = 0, 0}, {[0] = 0, 0}
end
if now < last then now = last end

-- credit
local dt = now - last
if dt > 3600000000 then dt = 3600000000 end
pool = math.min(pool + math.floor(persec * dt / 1000000), math.max(burst, pool))
pool = pool + ratio * started + math.max(rlong, 0)
last = now

local dirty = {}
local function at(j)
  local s = j % 10
  if ti[s] ~= j then ti[s], te[s], ta[s], tf[s] = j, 0, 0, 0 end
  dirty[s] = true
  return s
end
local ge, gf, k, left = 0, 0, 0, 0
if window > 0 then
  local w = math.max(idiv(window, 10), 1)
  k = idiv(now - born, w)
  if succeeded ~= 0 then
    local s = at(math.max(idiv(now - idiv(span, 2) - born, w), k - 9, 0))
    te[s] = te[s] + succeeded
  end
  if rtenth > k - 10 and rtenth <= k and ti[rtenth % 10] == rtenth then
    local s = rtenth % 10
    dirty[s] = true
    ta[s] = ta[s] - math.min(ta[s], math.max(rearned, 0))
    tf[s] = tf[s] - math.min(tf[s], math.max(rfloor, 0))
  end
  local e, paid, fl = 0, 0, 0
  for j = math.max(k - 9, 0), k do
    local s = j % 10
    if ti[s] == j then e, paid, fl = e + te[s], paid + ta[s], fl + tf[s] end
  end
  local earned = math.max(reserve * e - paid, 0)
  local floor = 0
  if e > 0 or k < 10 then floor = math.max(minres - fl, 0) end
  local ask = whole(math.min(math.max(askr, 0), earned + floor))
  ge = math.min(ask, earned)
  gf = ask - ge
  local s = at(k)
  ta[s] = ta[s] + ge
  tf[s] = tf[s] + gf
  left = earned + floor - ge - gf
end
local gl = whole(math.min(math.max(askl, 0), math.max(pool, 0)))
pool = math.min(pool - gl, burst)

local i = idiv(now, interval)
local c = i % 2
if ci[c] ~= i then ci[c], cn[c] = i, 0 end
cn[c] = cn[c] + 1
local size = cn[c]
if ci[1 - c] == i - 1 and cn[1 - c] > size then size = cn[1 - c] end

local out = {'b', born, 'l', last, 'p', pool, 'c' .. c, ci[c], 'n' .. c, cn[c]}
if fresh then
  for j = 0, 9 do dirty[j] = true end
  out[#out + 1] = 'c' .. (1 - c); out[#out + 1] = ci[1 - c]
  out[#out + 1] = 'n' .. (1 - c); out[#out + 1] = cn[1 - c]
end
for j, _ in pairs(dirty) do
  out[#out + 1] = 'i' .. j; out[#out + 1] = ti[j]
  out[#out + 1] = 'e' .. j; out[#out + 1] = te[j]
  out[#out + 1] = 'a' .. j; out[#out + 1] = ta[j]
  out[#out + 1] = 'f' .. j; out[#out + 1] = tf[j]
end
redis.call('HSET', KEYS[1], unpack(out))
redis.call('PEXPIRE', KEYS[1], ttl)
return {ge, gf, gl, k, size, left, pool, born, now}
`

var renew = redis.NewScript(renewScript)

// renewArgs returns the script's ARGV for r with p; now is 0 but in tests.
func renewArgs(p lease.Params, r lease.Request, ttlMillis, now int64) []any {
	return []any{p.Ratio, p.PerSecond, p.Burst, p.Reserve, p.MinReserve, p.Window, p.Interval,
		r.Started, r.Succeeded, r.Span, r.Return.Tenth, r.Return.Earned, r.Return.Floor, r.Return.LongRun,
		r.AskReserve, r.AskLongRun, r.Born, ttlMillis, now}
}

// parseGrant reads the script's reply to r, refusing anything else: a
// server that answers garbage is a server that cannot be reached.
func parseGrant(reply any, r lease.Request) (lease.Grant, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 9 {
		return lease.Grant{}, fmt.Errorf("fleetbudget: Redis answered %.40q to the lease script, want 9 integers", fmt.Sprint(reply))
	}
	var n [9]int64
	for i, v := range vs {
		if n[i], ok = v.(int64); !ok {
			return lease.Grant{}, fmt.Errorf("fleetbudget: Redis answered %.40q to the lease script, want 9 integers", fmt.Sprint(reply))
		}
	}
	g := lease.Grant{Earned: n[0], Floor: n[1], LongRun: n[2], Tenth: n[3], Size: n[4], Reserve: n[5], Pool: n[6], Born: n[7], Now: n[8]}
	if g.Earned < 0 || g.Floor < 0 || g.LongRun < 0 || g.Earned+g.Floor > max(r.AskReserve, 0) || g.LongRun > max(r.AskLongRun, 0) ||
		g.Tenth < 0 || g.Size < 1 || g.Born <= 0 || g.Born > g.Now {
		return lease.Grant{}, fmt.Errorf("fleetbudget: Redis answered %v to the lease script: not a grant for %+v", n, r)
	}
	return g, nil
}
