-- A lease's block fetch, fenced (see fence.rs): the batch script's loop
-- over this one operation, unless the fetch was settled before it ran.
--
-- KEYS[1]  the operation's key
-- KEYS[2]  the fetch's fence
-- KEYS[3]  (optional) the fence of the lease's previous fetch, answered:
--          removed
-- ARGV[1]  how long the fence is kept, ms
-- ARGV[2 ..] the operation as the batch script takes it: algorithm,
--          argument count, arguments
--
-- Reply: the operation's reply, also kept in the fence (its integers
-- written in full with %d, joined by commas: table.concat would print a
-- microsecond TAT with %.14g, rounded) for a settle that finds no answer
-- came; an empty
-- array, having written nothing, when the fence is already there (the
-- fetch was settled as never run, so it may take nothing).
if KEYS[3] then
  redis.call('DEL', KEYS[3])
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {}
end
local reply = run({KEYS[1]}, 2)
local written = {}
for i = 1, #reply do
  written[i] = string.format('%d', reply[i])
end
redis.call('SET', KEYS[2], table.concat(written, ','), 'PX', ARGV[1])
return reply
