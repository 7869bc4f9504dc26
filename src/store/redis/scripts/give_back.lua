-- A lease's unused hits given back, at most once per token however often
-- the give-back is sent (one whose answer never came is sent again): the
-- first run keeps its reply under the give-back's fence, later runs reply
-- it and change nothing. `take_back` and `take_back_tat` are the scripts
-- of the same names, inserted as functions.
--
-- KEYS[1]  the give-back's fence
-- KEYS[2 ..] the keys of the undo: the window's counter, each series'
--          bucket, or the GCRA TAT
-- ARGV[1]  how long the fence is kept at least, ms; it is kept as long as
--          the longest-lived of the undo's keys, so a give-back sent again
--          finds either the fence or no counter left to give back to
-- ARGV[2]  'tat' (take_back_tat.lua) or 'count' (take_back.lua)
-- ARGV[3 ..] the undo's own ARGV
--
-- Reply: the undo's reply (take_back_tat's as a one-integer array).
local done = redis.call('GET', KEYS[1])
if done then
  local reply = {}
  for n in string.gmatch(done, '[^,]+') do
    reply[#reply + 1] = tonumber(n)
  end
  return reply
end
local keys = {unpack(KEYS, 2)}
local args = {unpack(ARGV, 3)}
local reply
if ARGV[2] == 'tat' then
  reply = {take_back_tat(keys, args)}
else
  reply = take_back(keys, args)
end
local ttl = tonumber(ARGV[1])
local written = {}
for i = 1, #keys do
  local left = redis.call('PTTL', keys[i])
  if left > ttl then
    ttl = left
  end
end
for i = 1, #reply do
  written[i] = string.format('%d', reply[i])
end
redis.call('SET', KEYS[1], table.concat(written, ','), 'PX', ttl)
return reply
