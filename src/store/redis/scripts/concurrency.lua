-- Concurrency: slots held by requests in flight, atomic inside Redis.
--
-- KEYS[1]  sorted set of slots: member = the request's id (hashed, hex)
--          followed by '.1', score = the slot's expiry, ms
-- ARGV[1]  now, ms
-- ARGV[2]  lifetime of a slot without a release, ms
-- ARGV[3]  slots
-- ARGV[4]  the request's member
-- ARGV[5]  0 read, 1 acquire, 2 release
--
-- Slots expired at or before now are free: every read below counts only
-- those still live (so the read-only twin, whose trimming writes nothing,
-- answers the same).
--
-- Reply: {slots held before, earliest expiry among them or -1, acted}:
-- acted 0 nothing, 1 took a slot, 2 renewed the member's slot, 3 freed it.
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local live = '(' .. now
local held = redis.call('ZCOUNT', KEYS[1], live, '+inf')
local earliest = -1
local first = redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if first[2] then
  earliest = tonumber(first[2])
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[4])
local mine = score and tonumber(score) > now
local action = tonumber(ARGV[5])
local acted = 0
if action == 2 then
  if mine then
    redis.call('ZREM', KEYS[1], ARGV[4])
    acted = 3
  end
elseif action == 1 then
  if mine then
    acted = 2
  elseif held < tonumber(ARGV[3]) then
    acted = 1
  end
  if acted > 0 then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[4])
    -- The newest slot expires last: the set lives as long as it.
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end
return {held, earliest, acted}
