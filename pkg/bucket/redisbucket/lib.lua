-- Helpers shared by decide.lua and settle.lua: each script is this file
-- followed by its own. Exact arithmetic on doubles; see doc.go ("Exactness").

local E9 = 1000000000
local FAR = 9e15 -- "very long ago" in ns: longer than any bucket takes to drain or fill, < 2^53

local floor = math.floor
local pack, unpack = struct.pack, struct.unpack
local rcall, rpcall = redis.call, redis.pcall

-- fdiv is floor(a / b), exact for integers |a|, b < 2^53, b > 0: the quotient
-- of doubles may be one off near an integer, so check it.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    return q - 1
  elseif r >= b then
    return q + 1
  end
  return q
end

-- cdiv is ceil(a / b), Go's ceilDiv for b > 0.
local function cdiv(a, b)
  return -fdiv(-a, b)
end

local function fmod(a, b)
  return a - fdiv(a, b) * b
end

-- since is the time from (bs, bn) to (as, an) in ns; beyond ±FAR it is ±FAR.
local function since(as, an, bs, bn)
  local ds = as - bs
  if ds >= 9000000 then
    return FAR
  elseif ds <= -9000000 then
    return -FAR
  end
  return ds * E9 + (an - bn)
end

-- add is (s, n) + d ns, d ≥ 0.
local function add(s, n, d)
  local q = fdiv(d, E9)
  n = n + (d - q * E9)
  if n >= E9 then
    return s + q + 1, n - E9
  end
  return s + q, n
end

-- windowStart is t − (t mod w) for t = s·1e9 + n and w ≤ 240 h, aligned to
-- the Unix epoch: s mod w, then nine times ·10 mod w, then + n mod w. Each
-- product stays below 10·w < 2^53.
local function windowStart(s, n, w)
  local r = fmod(s, w)
  for _ = 1, 9 do
    r = fmod(r * 10, w)
  end
  r = fmod(r + n, w)
  local q = fdiv(r, E9)
  s, n = s - q, n - (r - q * E9)
  if n < 0 then
    return s - 1, n + E9
  end
  return s, n
end

-- slidingState reads a sliding window's state v (nil: none) as of (s, ns):
-- the current window's start, its count c and the previous window's p, and
-- (s, ns) moved up to that start if the clock stepped back before it.
local function slidingState(v, s, ns, w)
  local ws, wn = windowStart(s, ns, w)
  local c, p = 0, 0
  if v then
    local sc, sp, ts, tn = unpack('<dddd', v)
    local d = since(ts, tn, ws, wn)
    if d >= 0 then
      ws, wn, c, p = ts, tn, sc, sp
      if since(s, ns, ws, wn) < 0 then
        s, ns = ws, wn
      end
    elseif d == -w then
      p = sc
    end
  end
  return ws, wn, c, p, s, ns
end

-- load reads a state string of size bytes: the string, nil for a key never
-- seen, or false when the key holds something else.
local function load(key, size)
  local v = rpcall('GET', key)
  if not v then
    return nil
  end
  if type(v) ~= 'string' or #v ~= size then
    return false
  end
  return v
end

-- loadLevel reads a leaky or token bucket's state (level, last update). It
-- returns false for foreign data; otherwise the stored level (nil for a key
-- never seen), the decision time and the time since the last update — a
-- clock that stepped back counts as no time passing.
local function loadLevel(key, s, ns)
  local v = load(key, 24)
  if v == false then
    return false
  end
  if not v then
    return nil, s, ns, 0
  end
  local level, ls, ln = unpack('<ddd', v)
  local dt = since(s, ns, ls, ln)
  if dt < 0 then
    return level, ls, ln, 0
  end
  return level, s, ns, dt
end

-- loadLeaky reads a leaky bucket's level leaked to (s, ns): u = excess +
-- the unit in service, scaled (0: empty). It returns false for foreign data;
-- otherwise the level, whether the key had state, and the time (as
-- loadLevel).
local function loadLeaky(key, s, ns, p, a)
  local lx, dt
  lx, s, ns, dt = loadLevel(key, s, ns)
  if lx == false then
    return false
  end
  if not lx then
    return 0, false, s, ns
  end
  local u = lx + p -- the first unit, before leaking
  if dt >= cdiv(u, a) then
    return 0, true, s, ns
  end
  return u - dt * a, true, s, ns
end

-- loadTokens reads a token bucket's tokens refilled to (s, ns), scaled (a
-- key never seen is full: full). It returns false for foreign data;
-- otherwise the tokens, whether the key had state, and the time (as
-- loadLevel).
local function loadTokens(key, s, ns, full, a)
  local lk, dt
  lk, s, ns, dt = loadLevel(key, s, ns)
  if lk == false then
    return false
  end
  if not lk then
    return full, false, s, ns
  end
  if dt >= cdiv(full - lk, a) then
    return full, true, s, ns
  end
  return lk + dt * a, true, s, ns
end

-- The sliding log is a list: a header (the sum of the costs of its entries,
-- one double), then one entry per admitted job, oldest first: seconds,
-- nanoseconds, cost (three doubles).
local CHUNK = 128 -- entries read per LRANGE

-- loadLog reads a sliding log's head. It returns false for foreign data;
-- otherwise the list's length (0: a key never seen), the header's sum, the
-- newest entry's stamp, and the time (s, ns) — never before that stamp, as a
-- clock that stepped back counts as no time passing.
local function loadLog(key, s, ns)
  local len = rpcall('LLEN', key)
  if type(len) ~= 'number' then
    return false
  end
  if len == 0 then
    return 0, 0, s, ns, s, ns
  end
  local h, last = rcall('LINDEX', key, 0), rcall('LINDEX', key, -1)
  if len < 2 or #h ~= 8 or #last ~= 24 then
    return false
  end
  local ls, ln = unpack('<ddd', last)
  if since(s, ns, ls, ln) < 0 then
    s, ns = ls, ln
  end
  return len, unpack('<d', h), ls, ln, s, ns
end

-- expiredPrefix counts the entries of a log of len items that have left the
-- window of w ns at (s, ns) — entries at or before (s, ns) − w, a prefix —
-- and sums their costs. It returns false for foreign data.
local function expiredPrefix(key, len, s, ns, w)
  local expired, gone, i = 0, 0, 1
  while i < len do
    local items = rcall('LRANGE', key, i, i + CHUNK - 1)
    for j = 1, #items do
      local e = items[j]
      if #e ~= 24 then
        return false
      end
      local es, en, ec = unpack('<ddd', e)
      if since(s, ns, es, en) < w then
        return expired, gone
      end
      expired, gone = expired + 1, gone + ec
    end
    i = i + CHUNK
  end
  return expired, gone
end

-- redisTime reads Redis TIME as (seconds, nanoseconds): one clock for every
-- admitter.
local function redisTime()
  if redis.replicate_commands then
    redis.replicate_commands() -- Redis < 5: allow writes after TIME (a no-op since)
  end
  local t = rcall('TIME')
  return tonumber(t[1]), tonumber(t[2]) * 1000
end
