-- Sliding windows over per-bucket counters, atomic inside Redis.
--
-- Each bucket length is one series of counters; a bucket's key is the key
-- base, the bucket length, ':' and the bucket start (all under the same hash
-- tag as KEYS[1], so every bucket is in one slot).
--
-- KEYS[1]  a bucket key of this descriptor (for routing)
-- ARGV[1]  hits to add (0 reads without counting)
-- ARGV[2]  key base
-- ARGV[3]  '1' to count denied hits too (count_rejected), else '0'
-- ARGV[4]  number of series s
-- then per series, 5 values: bucket length (s), start of the newest bucket
--          read (s), buckets read (newest first), buckets read ahead of the
--          current one, expiry of a new bucket (s)
-- then per window, 3 values: limit, offset of its series in the counts
--          (0-based), buckets it covers from there
-- then     (a lease only) hits to take beyond ARGV[1] for the instance to
--          admit locally: at most half of what the fullest window has left
--          after ARGV[1]; a refused lease counts nothing
--
-- Reply: {counted, counts…}: the counts read before this call, per series,
-- newest first; counted is 1 when the hits were added to the current
-- bucket of every series. A lease adds the hits it took beyond ARGV[1].
local hits = tonumber(ARGV[1])
local nseries = tonumber(ARGV[4])
local keys = {}
local at = 5
for s = 1, nseries do
  local len = tonumber(ARGV[at])
  local newest = tonumber(ARGV[at + 1])
  for j = 0, tonumber(ARGV[at + 2]) - 1 do
    keys[#keys + 1] = ARGV[2] .. ARGV[at] .. ':' .. string.format('%d', newest - j * len)
  end
  at = at + 5
end
local raw = redis.call('MGET', unpack(keys))
local counts = {}
for j = 1, #keys do
  counts[j] = tonumber(raw[j] or '0') or 0
end
-- Windows come in threes; one value more is a lease.
local lease = nil
local last = #ARGV
if (last - at + 1) % 3 == 1 then
  lease = tonumber(ARGV[last])
  last = last - 1
end
local admitted = true
local room = nil
while at <= last do
  local limit = tonumber(ARGV[at])
  local from = tonumber(ARGV[at + 1])
  local sum = 0
  for j = from + 1, from + tonumber(ARGV[at + 2]) do
    sum = sum + counts[j]
  end
  if sum + hits > limit then
    admitted = false
  end
  if room == nil or limit - sum - hits < room then
    room = limit - sum - hits
  end
  at = at + 3
end
local leased = 0
if lease and admitted then
  leased = math.min(lease, math.floor(room / 2))
  hits = hits + leased
end
local reply = {0}
if hits > 0 and (admitted or (ARGV[3] == '1' and not lease)) then
  at = 5
  for s = 1, nseries do
    local len = tonumber(ARGV[at])
    local current = tonumber(ARGV[at + 1]) - tonumber(ARGV[at + 3]) * len
    local key = ARGV[2] .. ARGV[at] .. ':' .. string.format('%d', current)
    if redis.call('INCRBY', key, hits) == hits then
      redis.call('EXPIRE', key, ARGV[at + 4])
    end
    at = at + 5
  end
  reply[1] = 1
end
for j = 1, #keys do
  reply[j + 1] = counts[j]
end
if lease then
  reply[#keys + 2] = leased
end
return reply
