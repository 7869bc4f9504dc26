-- Removes the hits a refused request added to a sliding log
-- (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). The members are rebuilt here
-- from the request's prefix, so the command stays small whatever the hits;
-- only admitted hits are taken back, and those never exceed the largest
-- limit (10 000).
--
-- KEYS[1]  sorted set of hits
-- ARGV[1]  member prefix of the request (members are prefix..k)
-- ARGV[2]  hits the request added
--
-- Reply: the number removed.
local hits = tonumber(ARGV[2])
local removed = 0
local k = 1
while k <= hits do
  local members = {}
  local last = math.min(hits, k + 999)
  for m = k, last do
    members[#members + 1] = ARGV[1] .. m
  end
  removed = removed + redis.call('ZREM', KEYS[1], unpack(members))
  k = last + 1
end
return removed
