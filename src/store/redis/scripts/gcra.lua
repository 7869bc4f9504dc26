-- GCRA: one theoretical arrival time (TAT) per limit, atomic inside Redis.
--
-- KEYS[1]  TAT, µs since the epoch
-- ARGV[1]  now, µs
-- ARGV[2]  emission interval, µs
-- ARGV[3]  burst capacity, µs (burst * interval)
-- ARGV[4]  hits to add (0 reads without counting)
-- ARGV[5]  limit; 0 denies everything
--
-- Reply: {counted, TAT read before this call or -1}.
local now = tonumber(ARGV[1])
local stored = redis.call('GET', KEYS[1])
local before = -1
local tat = now
if stored then
  before = tonumber(stored)
  if before > now then
    tat = before
  end
end
local hits = tonumber(ARGV[4])
if hits == 0 or tonumber(ARGV[5]) == 0 then
  return {0, before}
end
local new_tat = tat + hits * tonumber(ARGV[2])
if new_tat - now > tonumber(ARGV[3]) then
  return {0, before}
end
local ttl_ms = math.ceil((new_tat - now) / 1000)
if ttl_ms < 1 then
  ttl_ms = 1
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', string.format('%d', ttl_ms))
return {1, before}
