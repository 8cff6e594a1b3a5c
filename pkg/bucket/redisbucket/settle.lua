-- Spillway bucket settles: settle a decision's cost at the actual cost its
-- handler reported (bucket.Store.Settle), the settles of
-- pkg/bucket/settle.go line for line. A refund (bucket.Store.Refund) is the
-- settle at 0: it gives back the whole cost. See doc.go ("Refunds",
-- "Settles").
--
-- KEYS: one per tier to settle (the decision's consumed tiers), in order.
-- ARGV[1]: little-endian doubles:
--   header:    ntiers, clock (0: read TIME; 1: the settle carries its time), ttl extra (ms),
--              cost, decision seconds, decision nanoseconds,
--              settle seconds, settle nanoseconds (ignored without clock)
--   each tier: algorithm, p1, p2, p3, p4, as decide.lua takes them
--   then:      actual cost (0 for a refund)
-- Reply: status: 0 settled; k > 0: tier k's key holds data this script did
-- not write, nothing was changed.
--
-- lib.lua (the shared helpers) is prepended to this file.

-- Each settle reads a key's state at (s, ns) for a job of cost n decided at
-- (as, an), settled at actual units (d = actual − n ≠ 0), and fills r[1..2]
-- = the state to store (false: nothing to change) and its reset-after (ns;
-- ≤ 0: the state is empty, delete the key). A refund (d < 0) changes only a
-- key with state; a charge (d > 0) takes a key without state as a key never
-- seen. It returns false if the key holds foreign data.

local function leaky(key, s, ns, n, d, a, p, burst, _, _, _, r)
  local u, known
  u, known, s, ns = loadLeaky(key, s, ns, p, a)
  if u == false then
    return false
  end
  if not known and d < 0 then
    return true
  end
  local q = burst + 1
  if d < 0 then
    u = math.max(0, u - math.min(-d, q) * p)
  else
    u = math.min(math.min(2 * q * p, 9007199254740992 - q * p), u + math.min(d, 2 * q) * p)
  end
  r[1], r[2] = pack('<ddd', u - p, s, ns), cdiv(u, a)
  return true
end

local function token(key, s, ns, n, d, a, p, burst, _, _, _, r)
  local full = burst * p
  local k, known
  k, known, s, ns = loadTokens(key, s, ns, full, a)
  if k == false then
    return false
  end
  if not known and d < 0 then
    return true
  end
  if d < 0 then
    k = math.min(full, k + math.min(-d, burst) * p)
  else
    k = math.max(-full, k - math.min(d, 2 * burst) * p)
  end
  r[1], r[2] = pack('<ddd', k, s, ns), cdiv(full - k, a)
  return true
end

local function fixed(key, s, ns, n, d, lim, w, _, _, as, an, r)
  local v = load(key, 24)
  if v == false then
    return false
  end
  if not v and d < 0 then
    return true
  end
  local aws, awn = windowStart(as, an, w)
  local ws, wn = windowStart(s, ns, w)
  if since(ws, wn, aws, awn) > 0 then
    return true -- the job's window has passed: its units count no more
  end
  local c = 0
  if v then
    local sc, ts, tn = unpack('<ddd', v)
    local dt = since(ts, tn, aws, awn)
    if dt > 0 or (dt < 0 and d < 0) then
      return true -- the key's state is of another window
    end
    if dt == 0 then
      c = sc
    end
  end
  if since(s, ns, aws, awn) < 0 then
    s, ns = aws, awn
  end
  if d < 0 then
    c = math.max(0, c + d)
  else
    c = math.min(lim, c + d)
  end
  r[1], r[2] = pack('<ddd', c, aws, awn), 0
  if c > 0 then
    r[2] = w - since(s, ns, aws, awn)
  end
  return true
end

local function sliding(key, s, ns, n, d, lim, w, _, _, as, an, r)
  local v = load(key, 32)
  if v == false then
    return false
  end
  if not v and d < 0 then
    return true
  end
  local ws, wn, c, p
  ws, wn, c, p, s, ns = slidingState(v, s, ns, w)
  local aws, awn = windowStart(as, an, w)
  local da = since(aws, awn, ws, wn)
  local function move(x)
    if d < 0 then
      return math.max(0, x + d)
    end
    return math.min(lim, x + d)
  end
  if da == 0 then
    c = move(c)
  elseif da == -w then
    p = move(p)
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

-- slog finds the job's entry — stamped (as, an), of cost n, the newest such —
-- if it can still be in the window, and fills r[1] = its index in the list,
-- r[2] = the settle's time (never before the log's newest entry), r[5] = the
-- entry's new cost. For a larger actual cost the entry grows until the
-- window's live entries sum to the limit. For 0 (a refund) r[1] is the
-- entry itself: commit removes the newest such with LREM from the tail, so
-- a refund needs no LPOS (Redis 6.0.6).
local function slog(key, s, ns, n, d, lim, w, _, _, as, an, r)
  local len, sum, ls, ln
  len, sum, ls, ln, s, ns = loadLog(key, s, ns)
  if not len then
    return false
  end
  if len == 0 then
    return true
  end
  if since(s, ns, as, an) >= w then
    return true -- the entry has left the window
  end
  local actual = n + d
  if actual == 0 then
    r[1], r[2], r[5] = pack('<ddd', as, an, n), {s, ns}, 0
    return true
  end
  local idx = rcall('LPOS', key, pack('<ddd', as, an, n), 'RANK', -1)
  if not idx or idx == 0 then
    return true -- not in the log
  end
  if d > 0 then
    -- The live entries' sum: the header's less the expired prefix's.
    local expired, gone = expiredPrefix(key, len, s, ns, w)
    if not expired then
      return false
    end
    local live = sum - gone
    local grow = math.min(d, math.max(0, lim - live))
    if grow == 0 then
      return true
    end
    actual = n + grow
  end
  r[1], r[2], r[5] = idx, {s, ns}, actual
  return true
end

local SETTLES = {[0] = leaky, [1] = token, [2] = fixed, [3] = slog, [4] = sliding}

-- commit stores a settled state with a TTL of its reset-after (as
-- decide.lua does) or deletes a key whose state is empty again. A sliding
-- log's entry is replaced in place, or removed, and the header's sum moved.
local function commit(key, r, n, as, an, w, extra)
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
  local actual = r[5]
  local sum = unpack('<d', rcall('LINDEX', key, 0))
  if actual == 0 then
    if rcall('LREM', key, -1, val) == 0 then
      return -- not in the log
    end
    if rcall('LLEN', key) < 2 then
      rcall('DEL', key)
      return
    end
  else
    rcall('LSET', key, val, pack('<ddd', as, an, actual))
  end
  local s, ns = r[2][1], r[2][2]
  local ls, ln = unpack('<ddd', rcall('LINDEX', key, -1))
  local reset = w - since(s, ns, ls, ln)
  if reset <= 0 then
    rcall('DEL', key) -- only expired entries are left
    return
  end
  rcall('LSET', key, 0, pack('<d', sum - n + actual))
  rcall('PEXPIRE', key, cdiv(reset, 1000000) + extra)
end

local blob = ARGV[1]
local nt, clock, extra, cost, as, an, s, ns, pos = unpack('<dddddddd', blob)
if clock == 0 then
  s, ns = redisTime()
end
local tiers = {}
for t = 1, nt do
  local alg, p1, p2, p3, p4
  alg, p1, p2, p3, p4, pos = unpack('<ddddd', blob, pos)
  tiers[t] = {alg, p1, p2, p3, p4}
end
local actual = unpack('<d', blob, pos)
local d = actual - cost
if d == 0 then
  return 0
end
local res = {}
for t = 1, nt do
  local tr = tiers[t]
  local r = {false, 0, tr[1], tr[3], 0}
  if not SETTLES[tr[1]](KEYS[t], s, ns, cost, d, tr[2], tr[3], tr[4], tr[5], as, an, r) then
    return t
  end
  res[t] = r
end
for t = 1, nt do
  commit(KEYS[t], res[t], cost, as, an, res[t][4], extra)
end
return 0
