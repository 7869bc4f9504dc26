-- One change of one limit table, whole or not at all (a script runs
-- alone): the change appended to the capped log every instance follows,
-- the table's version and the change counter raised, and the entries set
-- or deleted in the table's hash, in that order: a script that fails
-- half-way (out of memory) has changed no entry. Keys are read and written
-- in runs of CHUNK (one HMGET and one HSET each), which keeps a large
-- import's time inside Redis to a few microseconds an entry.
-- KEYS: 1 change counter, 2 versions (hash: table -> version),
--       3 the table's entries (hash: key -> entry JSON), 4 the log (stream)
-- ARGV: 1 table, 2 action, 3 who, 4 time, 5 log cap, 6 items JSON,
--       then key, entry pairs (an empty entry deletes the key)
-- Reply: {0} when a deleted key is missing (nothing changed), else
--        {1, seq, version, previous entries joined by newlines ('' none)}
local first = 7
local n = (#ARGV - first + 1) / 2
-- Below Lua's limit on values unpacked into one call.
local CHUNK = 2000
local previous = {}
for from = 0, n - 1, CHUNK do
  local to = math.min(from + CHUNK, n) - 1
  local keys = {}
  for i = from, to do
    keys[#keys + 1] = ARGV[first + 2 * i]
  end
  local was = redis.call('HMGET', KEYS[3], unpack(keys))
  for j = 1, #keys do
    if was[j] then
      previous[#previous + 1] = was[j]
    elseif ARGV[2] == 'delete' then
      return {0}
    else
      previous[#previous + 1] = ''
    end
  end
end
local was = table.concat(previous, '\n')
local seq = redis.call('INCR', KEYS[1])
local version = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'seq', seq,
  'table', ARGV[1], 'action', ARGV[2], 'who', ARGV[3], 'time', ARGV[4],
  'version', version, 'items', ARGV[6], 'previous', was)
for from = 0, n - 1, CHUNK do
  local to = math.min(from + CHUNK, n) - 1
  local set, gone = {}, {}
  for i = from, to do
    local key, entry = ARGV[first + 2 * i], ARGV[first + 2 * i + 1]
    if entry == '' then
      gone[#gone + 1] = key
    else
      set[#set + 1] = key
      set[#set + 1] = entry
    end
  end
  if #set > 0 then redis.call('HSET', KEYS[3], unpack(set)) end
  if #gone > 0 then redis.call('HDEL', KEYS[3], unpack(gone)) end
end
return {1, seq, version, was}
