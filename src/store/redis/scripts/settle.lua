-- Settles a lease fetch whose answer never came (see fence.rs).
--
-- KEYS[1]  the fetch's fence
-- ARGV[1]  how long the fence is kept, ms
--
-- Reply: what the fetch took (its reply's integers), when it ran; else an
-- empty array. Either way the fence is left empty: a fetch that has not
-- run never takes anything, and settling again finds nothing (a block is
-- given back once).
local took = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '', 'PX', ARGV[1])
local reply = {}
if took then
  for n in string.gmatch(took, '[^,]+') do
    reply[#reply + 1] = tonumber(n)
  end
end
return reply
