-- The reference's fixed window, counting every hit (no refusal, no lease,
-- not a check-only read): the operation most requests carry, so it has
-- the smallest form. fixed_window.lua does the same for the other cases.
--
-- KEYS[1]  counter key of the current window
-- ARGV[1]  hits to add (more than 0)
-- ARGV[2]  expiry in seconds, set only when the key is created
--
-- Reply: {before}, the count before the hits (the count after is
-- before + hits, and whether it is over the limit floodgate works out: it
-- knows both).
local hits = tonumber(ARGV[1])
-- INCRBY alone tells the count before (one command, not a GET and an
-- INCRBY). It is given ARGV[1]'s own text: a Lua number would be printed
-- back to text (with "%.17g") by Redis on every call.
local after = redis.call('INCRBY', KEYS[1], ARGV[1])
if after == hits then
  -- The key is new: give it its one expiry, so no key lives forever and the
  -- expiry never drifts on later hits.
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return {after - hits}
