-- Fixed window check-and-count, atomic inside Redis.
--
-- KEYS[1]  counter key of the current window
-- ARGV[1]  hits to add (0 reads without counting)
-- ARGV[2]  expiry in seconds, set only when the key is created
-- ARGV[3]  limit (hits allowed per window)
-- ARGV[4]  '1' to refuse without counting when the hits would exceed the
--          limit (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), '0' to always count
--
-- ARGV[5]  (a lease only) hits to take beyond ARGV[1] for the instance to
--          admit locally: at most half of what remains after ARGV[1]; a
--          refused lease counts nothing
--
-- Reply: {before, counted} where counted is 1 when the hits were added (the
-- count after is always before + hits: floodgate knows the hits); a lease
-- adds the hits it took beyond ARGV[1]: {before, counted, leased}.
local hits = tonumber(ARGV[1])
if ARGV[5] then
  local before = tonumber(redis.call('GET', KEYS[1]) or '0')
  local left = tonumber(ARGV[3]) - before
  if hits > left then
    return {before, 0, 0}
  end
  local leased = math.min(tonumber(ARGV[5]), math.floor((left - hits) / 2))
  local take = hits + leased
  if take > 0 and redis.call('INCRBY', KEYS[1], take) == take then
    redis.call('EXPIRE', KEYS[1], ARGV[2])
  end
  return {before, 1, leased}
end
if hits == 0 or ARGV[4] == '1' then
  local before = tonumber(redis.call('GET', KEYS[1]) or '0')
  if hits == 0 then
    return {before, 1}
  end
  if before + hits > tonumber(ARGV[3]) then
    return {before, 0}
  end
end
-- Counting always (floodgate sends this case as count.lua's smaller form;
-- this path stays for a caller that does not): INCRBY alone tells the
-- count before.
local after = redis.call('INCRBY', KEYS[1], ARGV[1])
if after == hits then
  -- The key is new: give it its one expiry, so no key lives forever and the
  -- expiry never drifts on later hits.
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return {after - hits, 1}
