-- Removes the hits a refused request added to a sliding log
-- (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
--
-- KEYS[1]  sorted set of hits
-- ARGV[…]  members to remove
--
-- Reply: the number removed.
return redis.call('ZREM', KEYS[1], unpack(ARGV))
