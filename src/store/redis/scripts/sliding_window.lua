-- Sliding windows over per-bucket counters, atomic inside Redis.
--
-- KEYS[1]  counter of the current bucket
-- ARGV[1]  hits to add (0 reads without counting)
-- ARGV[2]  key base: a bucket's key is this base followed by its start
--          (same hash tag as KEYS[1], so every bucket is in one slot)
-- ARGV[3]  start of the current bucket, seconds
-- ARGV[4]  bucket length, seconds
-- ARGV[5]  buckets to read, newest first
-- ARGV[6]  expiry of a new bucket, seconds (longest window + one bucket)
-- ARGV[7]  '1' to count denied hits too (count_rejected), else '0'
-- ARGV[8…] pairs: limit, buckets covered by that window
--
-- Reply: {counted, count of bucket 0 (current), count of bucket 1, …} with
-- the counts read before this call; counted is 1 when the hits were added.
local hits = tonumber(ARGV[1])
local start = tonumber(ARGV[3])
local len = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local keys = {}
for j = 0, n - 1 do
  keys[j + 1] = ARGV[2] .. string.format('%d', start - j * len)
end
local raw = redis.call('MGET', unpack(keys))
local counts = {}
for j = 1, n do
  counts[j] = tonumber(raw[j] or '0')
end
local admitted = true
local i = 8
while ARGV[i] do
  local limit = tonumber(ARGV[i])
  local sum = 0
  for j = 1, tonumber(ARGV[i + 1]) do
    sum = sum + counts[j]
  end
  if sum + hits > limit then
    admitted = false
  end
  i = i + 2
end
local reply = {0}
if hits > 0 and (admitted or ARGV[7] == '1') then
  local after = redis.call('INCRBY', KEYS[1], hits)
  if after == hits then
    redis.call('EXPIRE', KEYS[1], ARGV[6])
  end
  reply[1] = 1
end
for j = 1, n do
  reply[j + 1] = counts[j]
end
return reply
