-- Spillway bucket refunds: give back the units a decision took from its
-- tiers (bucket.Store.Refund), the refunds of pkg/bucket/algorithm.go line
-- for line. See doc.go ("Refunds").
--
-- KEYS: one per tier to refund (the decision's consumed tiers), in order.
-- ARGV[1]: little-endian doubles:
--   header:    ntiers, clock (0: read TIME; 1: the refund carries its time), ttl extra (ms),
--              cost, decision seconds, decision nanoseconds,
--              refund seconds, refund nanoseconds (ignored without clock)
--   each tier: algorithm, p1, p2, p3, p4, as decide.lua takes them
-- Reply: status: 0 refunded; k > 0: tier k's key holds data this script did
-- not write, nothing was changed.
--
-- lib.lua (the shared helpers) is prepended to this file.

-- Each refund reads a key's state at (s, ns) for a job of cost n decided at
-- (as, an) and fills r[1..2] = the state to store (false: nothing to change)
-- and its reset-after (ns; ≤ 0: the state is empty, delete the key). A key
-- without state has nothing to give back. It returns false if the key holds
-- foreign data.

-- leaky: in terms of the level u = excess + 1 unit (the one in service),
-- u ← max(0, u_now − n). The stored excess u − p may be −p: the empty level.
local function leaky(key, s, ns, n, a, p, burst, _, _, _, r)
  local lx, dt
  lx, s, ns, dt = loadLevel(key, s, ns)
  if lx == false then
    return false
  end
  if not lx then
    return true
  end
  local u = lx + p
  if dt >= cdiv(u, a) then
    u = 0
  else
    u = u - dt * a
  end
  u = math.max(0, u - math.min(n, burst + 1) * p)
  r[1], r[2] = pack('<ddd', u - p, s, ns), cdiv(u, a)
  return true
end

local function token(key, s, ns, n, a, p, burst, _, _, _, r)
  local lk, dt
  lk, s, ns, dt = loadLevel(key, s, ns)
  if lk == false then
    return false
  end
  if not lk then
    return true
  end
  local full = burst * p
  local k = lk
  if dt >= cdiv(full - k, a) then
    k = full
  else
    k = k + dt * a
  end
  k = math.min(full, k + math.min(n, burst) * p)
  r[1], r[2] = pack('<ddd', k, s, ns), cdiv(full - k, a)
  return true
end

local function fixed(key, s, ns, n, _, w, _, _, as, an, r)
  local v = load(key, 24)
  if v == false then
    return false
  end
  if not v then
    return true
  end
  local c, ts, tn = unpack('<ddd', v)
  local aws, awn = windowStart(as, an, w)
  local ws, wn = windowStart(s, ns, w)
  if aws ~= ts or awn ~= tn or since(ws, wn, ts, tn) > 0 then
    return true -- the job's window has passed: its units count no more
  end
  if since(s, ns, ts, tn) < 0 then
    s, ns = ts, tn
  end
  c = math.max(0, c - n)
  r[1], r[2] = pack('<ddd', c, ts, tn), 0
  if c > 0 then
    r[2] = w - since(s, ns, ts, tn)
  end
  return true
end

local function sliding(key, s, ns, n, _, w, _, _, as, an, r)
  local v = load(key, 32)
  if v == false then
    return false
  end
  if not v then
    return true
  end
  local ws, wn, c, p
  ws, wn, c, p, s, ns = slidingState(v, s, ns, w)
  local aws, awn = windowStart(as, an, w)
  local da = since(aws, awn, ws, wn)
  if da == 0 then
    c = math.max(0, c - n)
  elseif da == -w then
    p = math.max(0, p - n)
  else
    return true -- older: the job's units weigh nothing any more
  end
  local el = since(s, ns, ws, wn)
  r[1], r[2] = pack('<dddd', c, p, ws, wn), 0
  if c > 0 then
    r[2] = 2 * w - el
  elseif p > 0 then
    r[2] = w - el
  end
  return true
end

-- slog checks that the job's entry — stamped (as, an), of cost n — can still
-- be in the window; commit removes the newest such entry with LREM, if there
-- is one. r[1] is the entry, r[2] the refund's time, never before the log's
-- newest entry.
local function slog(key, s, ns, n, _, w, _, _, as, an, r)
  local len = rpcall('LLEN', key)
  if type(len) ~= 'number' then
    return false
  end
  if len == 0 then
    return true
  end
  local h, last = rcall('LINDEX', key, 0), rcall('LINDEX', key, -1)
  if len < 2 or #h ~= 8 or #last ~= 24 then
    return false
  end
  local ls, ln = unpack('<ddd', last)
  if since(s, ns, ls, ln) < 0 then
    s, ns = ls, ln
  end
  if since(s, ns, as, an) >= w then
    return true -- the entry has left the window
  end
  r[1], r[2] = pack('<ddd', as, an, n), {s, ns}
  return true
end

local REFUNDS = {[0] = leaky, [1] = token, [2] = fixed, [3] = slog, [4] = sliding}

-- commit stores a refunded state with a TTL of its reset-after (as decide.lua
-- does) or deletes a key whose state is empty again.
local function commit(key, r, n, w, extra)
  local val = r[1]
  if not val then
    return
  end
  if r[3] ~= 3 then
    if r[2] <= 0 then
      rcall('DEL', key)
    else
      rcall('PSETEX', key, cdiv(r[2], 1000000) + extra, val)
    end
    return
  end
  if rcall('LREM', key, -1, val) == 0 then
    return -- not in the log
  end
  if rcall('LLEN', key) < 2 then
    rcall('DEL', key)
    return
  end
  local s, ns = r[2][1], r[2][2]
  local ls, ln = unpack('<ddd', rcall('LINDEX', key, -1))
  local reset = w - since(s, ns, ls, ln)
  if reset <= 0 then
    rcall('DEL', key) -- only expired entries are left
    return
  end
  local sum = unpack('<d', rcall('LINDEX', key, 0))
  rcall('LSET', key, 0, pack('<d', sum - n))
  rcall('PEXPIRE', key, cdiv(reset, 1000000) + extra)
end

local blob = ARGV[1]
local nt, clock, extra, cost, as, an, s, ns, pos = unpack('<dddddddd', blob)
if clock == 0 then
  s, ns = redisTime()
end
local res = {}
for t = 1, nt do
  local alg, p1, p2, p3, p4
  alg, p1, p2, p3, p4, pos = unpack('<ddddd', blob, pos)
  local r = {false, 0, alg, p2}
  if not REFUNDS[alg](KEYS[t], s, ns, cost, p1, p2, p3, p4, as, an, r) then
    return t
  end
  res[t] = r
end
for t = 1, nt do
  commit(KEYS[t], res[t], cost, res[t][4], extra)
end
return 0
