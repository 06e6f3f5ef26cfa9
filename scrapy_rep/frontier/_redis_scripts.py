"""The server-side scripts of :class:`~scrapy_rep.frontier.redis_queue.RedisPoliteQueue`.

Each runs atomically in Redis, on Redis's clock (``TIME``, microseconds): a
push, a pop that takes a slot's turn as it hands out a request, a place given
back, a slot's robots.txt made known. Keys and arguments are listed above each.
"""

from scrapy_rep.cluster.pacing import ARRIVED

# KEYS: the slot's queue, the slots, the count, the slot's meta.
# ARGV: score, request, slot, spacing (us; -1: unknown), concurrency, robots
# known (1/0), how long to wait for them (us). -> 1 if added.
PUSH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local added = redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
if added == 1 then redis.call('INCR', KEYS[3]) end
local spacing = tonumber(ARGV[4])
if spacing >= 0 then
  redis.call('HSET', KEYS[4], 'spacing', ARGV[4], 'limit', ARGV[5])
else
  redis.call('HSETNX', KEYS[4], 'limit', ARGV[5])
end
if ARGV[6] == '1' then
  redis.call('ZADD', KEYS[2], 'LT', string.format('%.0f', now), ARGV[3])
else
  redis.call('ZADD', KEYS[2], 'NX', string.format('%.0f', now + tonumber(ARGV[7])), ARGV[3])
end
return added
"""

# KEYS: the slots, the count, the worker's last hand-out (K:given:<worker>).
# ARGV: queue key K, scrapy-rep's prefix, slots to look at, lease (us), token,
# hold (ms).
# -> {slot, request, spacing (-1: unknown), count, replayed (1/0)} or
# {'', now, first due or -1, count} (count: requests still queued, for len()).
# A slot with a Crawl-delay (spacing > 0) is held (K:hold:<slot>: the token)
# until SENT. The request handed out is kept under the worker's key with its
# token (overwritten by the next): a worker that lost the reply calls again
# with that token and gets it back ("replayed"); if the slot's hold is no
# longer that token's, spacing is -1 and the robots middleware waits for the
# slot's turn itself.
POP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local K, P = ARGV[1], ARGV[2]
local function fmt(x) return string.format('%.0f', x) end
local mark = ARGV[5] .. ' '
if redis.call('GETRANGE', KEYS[3], 0, #mark - 1) == mark then
  local given = redis.call('GET', KEYS[3])
  -- given: token spacing #slot slot request
  local a = string.find(given, ' ', #mark + 1, true)
  local b = string.find(given, ' ', a + 1, true)
  local size = tonumber(string.sub(given, a + 1, b - 1))
  local slot = string.sub(given, b + 1, b + size)
  local spacing = string.sub(given, #mark + 1, a - 1)
  if tonumber(spacing) > 0 and redis.call('GET', K .. ':hold:' .. slot) ~= ARGV[5] then
    spacing = '-1'
  end
  return {slot, string.sub(given, b + size + 1), spacing, redis.call('GET', KEYS[2]) or '0', '1'}
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[3]))
for _, slot in ipairs(due) do
  local q = K .. ':q:' .. slot
  if redis.call('ZCARD', q) == 0 then
    redis.call('ZREM', KEYS[1], slot)
    redis.call('DEL', K .. ':meta:' .. slot)
  else
    local meta = redis.call('HMGET', K .. ':meta:' .. slot, 'spacing', 'limit')
    local spacing = tonumber(meta[1] or '-1')
    local limit = tonumber(meta[2] or '1')
    local turn = P .. 'delay:' .. slot
    local ready = math.max(tonumber(redis.call('GET', turn) or '0'),
      tonumber(redis.call('HGET', P .. 'slowdown:' .. slot, 'until') or '0'))
    local hold = K .. ':hold:' .. slot
    if ready > now then
      redis.call('ZADD', KEYS[1], fmt(ready), slot)
    elseif spacing > 0 and redis.call('EXISTS', hold) == 1 then
      redis.call('ZADD', KEYS[1], fmt(now + math.max(redis.call('PTTL', hold), 1) * 1000), slot)
    else
      local out = K .. ':out:' .. slot
      redis.call('ZREMRANGEBYSCORE', out, '-inf', fmt(now))
      if redis.call('ZCARD', out) >= limit then
        local first = redis.call('ZRANGE', out, 0, 0, 'WITHSCORES')
        redis.call('ZADD', KEYS[1], first[2], slot)
      else
        local item = redis.call('ZPOPMIN', q)
        redis.call('DECR', KEYS[2])
        local lease = tonumber(ARGV[4])
        redis.call('ZADD', out, fmt(now + lease), ARGV[5])
        redis.call('PEXPIRE', out, math.ceil(lease / 1000))
        if spacing > 0 then
          redis.call('SET', turn, fmt(now + spacing), 'PX', math.ceil(spacing / 1000) + 1000)
          redis.call('SET', hold, ARGV[5], 'PX', ARGV[6])
          redis.call('ZADD', KEYS[1], fmt(now + tonumber(ARGV[6]) * 1000), slot)
        end
        redis.call('SET', KEYS[3], mark .. fmt(spacing) .. ' ' .. #slot .. ' ' .. slot .. item[1],
          'PX', math.ceil(lease / 1000))
        if redis.call('ZCARD', q) == 0 then
          redis.call('ZREM', KEYS[1], slot)
          redis.call('DEL', K .. ':meta:' .. slot)
        end
        return {slot, item[1], fmt(spacing), redis.call('GET', KEYS[2]) or '0', '0'}
      end
    end
  end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {'', fmt(now), first[2] or '-1', redis.call('GET', KEYS[2]) or '0'}
"""

# KEYS: the slot's leases, the slot's queue, the slots. ARGV: token, slot.
RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[2]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('ZADD', KEYS[3], 'LT', string.format('%.0f', now), ARGV[2])
end
return 1
"""

# KEYS: the slots, the slot's meta. ARGV: slot, spacing (us), concurrency.
# The slot's robots.txt is known now: it is ready (its turn is checked by POP).
KNOWN = """
redis.call('HSET', KEYS[2], 'spacing', ARGV[2], 'limit', ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], 'XX', 'LT', string.format('%.0f', now), ARGV[1])
return 1
"""

# KEYS: the slot's turn (scrapy-rep's delay key), its hold, the slots, the
# slot's queue. ARGV: the token that holds it, spacing (us), slot.
# The request handed out with that token reached the site, or left without an
# answer: cluster/pacing.py's ARRIVED, and the slot is due at its next turn.
SENT = (
    ARRIVED
    + """
if redis.call('ZCARD', KEYS[4]) > 0 then
  redis.call('ZADD', KEYS[3], 'XX', 'LT', string.format('%.0f', turn), ARGV[3])
end
"""
)
