-- GCRA: one theoretical arrival time (TAT) per limit, atomic inside Redis.
--
-- KEYS[1]  TAT, µs since the epoch
-- ARGV[1]  now, µs
-- ARGV[2]  emission interval, µs
-- ARGV[3]  burst capacity, µs (burst * interval)
-- ARGV[4]  hits to add (0 reads without counting)
-- ARGV[5]  limit; 0 denies everything
-- ARGV[6]  (a lease only) hits to take beyond ARGV[4] for the instance to
--          admit locally: at most half of the burst left after ARGV[4]
--
-- Reply: {counted, TAT read before this call or -1}; a lease adds the hits
-- it took beyond ARGV[4]: {counted, before, leased}.
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
local interval = tonumber(ARGV[2])
local refused = {0, before}
if ARGV[6] then
  refused[3] = 0
end
if tonumber(ARGV[5]) == 0 or (hits == 0 and not ARGV[6]) then
  return refused
end
local new_tat = tat + hits * interval
if new_tat - now > tonumber(ARGV[3]) then
  return refused
end
local leased = 0
if ARGV[6] then
  local room = math.floor((tonumber(ARGV[3]) - (new_tat - now)) / interval)
  leased = math.min(tonumber(ARGV[6]), math.floor(room / 2))
  new_tat = new_tat + leased * interval
  if hits + leased == 0 then
    return {0, before, 0}
  end
end
-- The key outlives its TAT by the clock skew instances may have (2 s, as
-- sliding windows read ahead): Redis expires it by its own clock, and an
-- instance behind the writer must still find the TAT ahead of it.
local ttl_ms = math.ceil((new_tat - now) / 1000) + 2000
if ttl_ms < 1 then
  ttl_ms = 1
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', string.format('%d', ttl_ms))
if ARGV[6] then
  return {1, before, leased}
end
return {1, before}
