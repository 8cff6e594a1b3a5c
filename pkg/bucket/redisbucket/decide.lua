-- Spillway bucket decisions: the five algorithms of pkg/bucket/algorithm.go,
-- line for line, in exact arithmetic on doubles. See doc.go ("Scripts",
-- "Exactness").
--
-- KEYS: one per tier of every decision, in order.
-- ARGV[1]: little-endian doubles:
--   header:           ndecisions, clock (0: read TIME; 1: decisions carry their time), ttl extra (ms)
--   each decision:    cost, ntiers, seconds, nanoseconds (ignored without clock)
--   each tier:        algorithm, p1, p2, p3, p4
--     0 leaky_bucket   amount, period, burst, delay
--     1 token_bucket   amount, period, burst, 0
--     2 fixed_window   limit, window (ns), 0, 0
--     3 sliding_log    limit, window (ns), 0, 0
--     4 sliding_window limit, window (ns), 0, 0
-- Reply: one string of little-endian doubles:
--   each decision:    status (0: decided; k > 0: tier k's key holds data this
--                     script did not write; nothing was changed), seconds, nanoseconds
--   each tier (status 0 only): verdict, not-before seconds, not-before nanoseconds,
--                     remaining, retry-after (ns, -1: never), reset-after (ns)
--
-- Every integer stays below 2^53 (pkg/bucket validates the limits for it), so
-- doubles hold them exactly. A time is a pair (seconds, nanoseconds), never a
-- count of nanoseconds since 1970, which would not be exact.
--
-- lib.lua (the shared helpers) is prepended to this file.

local ADMITTED, QUEUED, EXCESS, REJECTED = 0, 1, 2, 3

-- Each algorithm fills r[1..7] = verdict, not-before (seconds, nanoseconds),
-- remaining, retry-after, reset-after and the state to store unless the
-- decision is rejected (false: nothing to store), for a job of cost n at
-- (s, ns). It returns false if the key holds foreign data.

local function leaky(key, s, ns, n, a, p, burst, delay, r)
  local x, _
  x, _, s, ns = loadLeaky(key, s, ns, p, a)
  if x == false then
    return false
  end
  r[2], r[3], r[4], r[5] = s, ns, 0, 0
  if n - 1 > burst then
    r[1], r[5], r[6] = REJECTED, -1, cdiv(x, a)
    return true
  end
  local before = x
  x = x + (n - 1) * p
  local bp = burst * p
  if x > bp then
    r[1], r[5], r[6] = REJECTED, cdiv(x - bp, a), cdiv(before, a)
    return true
  end
  r[1], r[4], r[6] = ADMITTED, fdiv(bp - x, p), cdiv(x + p, a)
  local dp = delay * p
  if x > dp then
    r[1] = QUEUED
    r[2], r[3] = add(s, ns, cdiv(x - dp, a))
  end
  r[7] = pack('<ddd', x, s, ns)
  return true
end

local function token(key, s, ns, n, a, p, burst, _, r)
  local full = burst * p
  local k, _
  k, _, s, ns = loadTokens(key, s, ns, full, a)
  if k == false then
    return false
  end
  r[1], r[2], r[3], r[5] = ADMITTED, s, ns, 0
  if n > burst then
    r[1], r[5] = EXCESS, -1
  elseif k >= n * p then
    k = k - n * p
  else
    r[1], r[5] = EXCESS, cdiv(n * p - k, a)
  end
  r[4], r[6] = math.max(0, fdiv(k, p)), cdiv(full - k, a) -- a settle may leave a debt (k < 0)
  r[7] = pack('<ddd', k, s, ns)
  return true
end

local function fixed(key, s, ns, n, lim, w, _, _, r)
  local v = load(key, 24)
  if v == false then
    return false
  end
  local ws, wn = windowStart(s, ns, w)
  local count = 0
  if v then
    local c, ts, tn = unpack('<ddd', v)
    if since(ts, tn, ws, wn) >= 0 then
      -- The same window, or a later one if the clock stepped back.
      ws, wn, count = ts, tn, c
      if since(s, ns, ws, wn) < 0 then
        s, ns = ws, wn
      end
    end
  end
  local el = since(s, ns, ws, wn)
  r[1], r[2], r[3], r[5], r[6] = ADMITTED, s, ns, 0, w - el
  if n > lim then
    r[1], r[5] = EXCESS, -1
  elseif count + n <= lim then
    count = count + n
  else
    r[1], r[5] = EXCESS, w - el
  end
  r[4] = lim - count
  r[7] = pack('<ddd', count, ws, wn)
  return true
end

-- slidingWait mirrors bucket.slidingWait.
local function slidingWait(lim, w, el, c, p, n)
  local free = lim - c - n
  if free >= 0 and p > 0 then
    local e = w - fdiv(free * w, p)
    if e < w then
      return e - el
    end
  end
  local e = 0
  if c > 0 then
    e = math.max(0, w - fdiv((lim - n) * w, c))
  end
  return w - el + e
end

local function sliding(key, s, ns, n, lim, w, _, _, r)
  local v = load(key, 32)
  if v == false then
    return false
  end
  local ws, wn, c, p
  ws, wn, c, p, s, ns = slidingState(v, s, ns, w)
  local el = since(s, ns, ws, wn)
  r[1], r[2], r[3], r[5] = ADMITTED, s, ns, 0
  if n > lim then
    r[1], r[5] = EXCESS, -1
  elseif c + n <= lim and p * (w - el) <= (lim - c - n) * w then
    c = c + n
  else
    r[1], r[5] = EXCESS, slidingWait(lim, w, el, c, p, n)
  end
  r[4] = math.max(0, fdiv(lim * w - p * (w - el), w) - c)
  if c > 0 then
    r[6] = 2 * w - el
  elseif p > 0 then
    r[6] = w - el
  else
    r[6] = 0
  end
  r[7] = pack('<dddd', c, p, ws, wn)
  return true
end

-- The sliding log (lib.lua): expired entries are dropped when a job is
-- admitted, as the Go code does.
local function slog(key, s, ns, n, lim, w, _, _, r)
  local len, sum, ls, ln
  len, sum, ls, ln, s, ns = loadLog(key, s, ns)
  if not len then
    return false
  end
  local count, expired, live = 0, 0, 0
  if len > 0 then
    -- Entries at or before now − w have left the window: a prefix.
    local gone
    expired, gone = expiredPrefix(key, len, s, ns, w)
    if not expired then
      return false
    end
    count = sum - gone
    live = len - 1 - expired
  end
  r[1], r[2], r[3], r[5] = ADMITTED, s, ns, 0
  if n > lim then
    r[1], r[5] = EXCESS, -1
  elseif count + n <= lim then
    count = count + n
  else
    r[1] = EXCESS
    -- Wait until enough of the oldest live entries have left.
    local need, i = count + n - lim, 1 + expired
    while need > 0 and i < len do
      local items = rcall('LRANGE', key, i, i + CHUNK - 1)
      for j = 1, #items do
        local e = items[j]
        if #e ~= 24 then
          return false
        end
        local es, en, ec = unpack('<ddd', e)
        need = need - ec
        if need <= 0 then
          r[5] = w - since(s, ns, es, en)
          break
        end
      end
      i = i + CHUNK
    end
  end
  r[4] = lim - count
  if r[1] == ADMITTED then
    r[6] = w
    r[7] = {len, expired, pack('<ddd', s, ns, n), pack('<d', count)}
  elseif live > 0 then
    r[6] = w - since(s, ns, ls, ln)
  else
    r[6] = 0
  end
  return true
end

local ALGORITHMS = {[0] = leaky, [1] = token, [2] = fixed, [3] = slog, [4] = sliding}

-- commit stores a tier's new state with a TTL of its reset-after, rounded up
-- to milliseconds, plus extra; a state that is empty again is deleted.
local function commit(key, r, extra)
  local val, alg = r[7], r[8]
  if r[6] <= 0 then
    rcall('DEL', key) -- nothing to keep: the key decides as a new one
    return
  end
  local ttl = cdiv(r[6], 1000000) + extra
  if alg ~= 3 then
    rcall('PSETEX', key, ttl, val)
    return
  end
  if not val then
    return -- not admitted: the log is unchanged
  end
  local len, expired, entry, header = val[1], val[2], val[3], val[4]
  if len == 0 then
    rcall('RPUSH', key, header, entry)
  elseif expired > 0 then
    rcall('LTRIM', key, expired + 1, -1)
    rcall('RPUSH', key, entry)
    rcall('LPUSH', key, header)
  else
    rcall('RPUSH', key, entry)
    rcall('LSET', key, 0, header)
  end
  rcall('PEXPIRE', key, ttl)
end

local blob = ARGV[1]
local nd, clock, extra, pos = unpack('<ddd', blob)
local now_s, now_n = 0, 0
if clock == 0 then
  now_s, now_n = redisTime()
end

local out = {}
local res = {} -- per tier: {verdict, nbs, nbn, remaining, retry, reset, state, algorithm}, reused
local ki = 0 -- KEYS index before the decision's first tier
for _ = 1, nd do
  local cost, nt, s, ns
  cost, nt, s, ns, pos = unpack('<dddd', blob, pos)
  if clock == 0 then
    s, ns = now_s, now_n
  end
  local status, rejected = 0, false
  for t = 1, nt do
    local alg, p1, p2, p3, p4
    alg, p1, p2, p3, p4, pos = unpack('<ddddd', blob, pos)
    if status == 0 then
      local r = res[t]
      if not r then
        r = {0, 0, 0, 0, 0, 0, false, 0}
        res[t] = r
      end
      r[7], r[8] = false, alg
      if ALGORITHMS[alg](KEYS[ki + t], s, ns, cost, p1, p2, p3, p4, r) then
        rejected = rejected or r[1] == REJECTED
      else
        status = t
      end
    end
  end
  if status ~= 0 then
    out[#out + 1] = pack('<ddd', status, s, ns)
  else
    if not rejected then
      for t = 1, nt do
        commit(KEYS[ki + t], res[t], extra)
      end
    end
    local r = res[1]
    out[#out + 1] = pack('<ddddddddd', 0, s, ns, r[1], r[2], r[3], r[4], r[5], r[6])
    for t = 2, nt do
      r = res[t]
      out[#out + 1] = pack('<dddddd', r[1], r[2], r[3], r[4], r[5], r[6])
    end
  end
  ki = ki + nt
end
return table.concat(out)
