-- Takes back hits counted by a request that is being refused as a whole
-- (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
--
-- KEYS[1]  counter key
-- ARGV[1]  hits to take back
--
-- Reply: the count after taking back, or -1 when the key no longer exists (it
-- expired; nothing to undo, and nothing is recreated without an expiry).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('DECRBY', KEYS[1], ARGV[1])
