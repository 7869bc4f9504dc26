-- Settles a lease fetch whose answer never came (see fence.rs).
--
-- KEYS[1]  the fetch's fence
-- ARGV[1]  how long the fence is kept, ms
--
-- Reply: what the fetch took (its reply's integers), when it ran; else an
-- empty array. A fence not there yet is set empty, so a fetch that has not
-- run never takes anything. A fence already there is left as it is: a
-- settle whose answer was lost is sent again and finds the same (the block
-- it names is given back under the fetch's token, once).
local took = redis.call('GET', KEYS[1])
if not took then
  redis.call('SET', KEYS[1], '', 'PX', ARGV[1])
  return {}
end
local reply = {}
for n in string.gmatch(took, '[^,]+') do
  reply[#reply + 1] = tonumber(n)
end
return reply
