-- Takes back hits counted by a request that is being refused as a whole
-- (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
--
-- KEYS[…]  counter keys (a sliding window has one per bucket series; all
--          under one hash tag)
-- ARGV[1]  hits to take back from each
--
-- Reply: per key, the count after taking back, or -1 when the key no longer
-- exists (it expired; nothing to undo, and nothing is recreated without an
-- expiry).
local reply = {}
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 0 then
    reply[i] = -1
  else
    reply[i] = redis.call('DECRBY', key, ARGV[1])
  end
end
return reply
