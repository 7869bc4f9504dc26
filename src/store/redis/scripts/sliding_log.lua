-- Exact sliding log of admitted hits, atomic inside Redis.
--
-- KEYS[1]  sorted set of hits: score = time in µs, member unique per hit
-- ARGV[1]  hits to add (0 reads without counting)
-- ARGV[2]  now, µs (the score of added hits)
-- ARGV[3]  expiry of the set, ms: the longest window and the clock skew
--          instances may have
-- ARGV[4]  entries at or before this score (µs) are out of every window
-- ARGV[5]  member prefix, unique to this request (members are prefix..k)
-- ARGV[6…] pairs: limit, '(' .. window start µs (exclusive)
--
-- Reply: {counted, count_1, score_1, count_2, score_2, …}: hits inside each
-- window before this call, and the score of the entry whose leaving admits
-- the request (the oldest one when it is within the limit), -1 if none.
local hits = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
local reply = {0}
local admitted = true
local i = 6
while ARGV[i] do
  local limit = tonumber(ARGV[i])
  local count = redis.call('ZCOUNT', KEYS[1], ARGV[i + 1], '+inf')
  local need = hits
  if need < 1 then
    need = 1
  end
  local offset = count + need - limit - 1
  if offset < 0 then
    offset = 0
  end
  local at = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[i + 1], '+inf', 'WITHSCORES', 'LIMIT', offset, 1)
  reply[#reply + 1] = count
  if at[2] then
    reply[#reply + 1] = tonumber(at[2])
  else
    reply[#reply + 1] = -1
  end
  if count + hits > limit then
    admitted = false
  end
  i = i + 2
end
-- Admitted hits never exceed the largest limit (validation caps it at
-- 10 000), so this loop is bounded whatever hits_addend says; members go in
-- chunks to stay under Lua's unpack limit.
if hits > 0 and admitted then
  local k = 1
  while k <= hits do
    local args = {}
    local last = math.min(hits, k + 999)
    for m = k, last do
      args[#args + 1] = ARGV[2]
      args[#args + 1] = ARGV[5] .. m
    end
    redis.call('ZADD', KEYS[1], unpack(args))
    k = last + 1
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  reply[1] = 1
end
return reply
