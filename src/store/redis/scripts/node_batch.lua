-- The batch script for the operations of many slots that one Cluster node
-- serves (floodgate groups them by node): one call per node, not one per
-- hash tag.
--
-- ARGV[1]                n, the number of operations
-- ARGV[2]                m, the number of probe keys
-- ARGV[3 .. n + 2]       the operations' keys (not KEYS: a call's KEYS must
--                        share a slot; a script without a shebang may touch
--                        any key its node serves)
-- ARGV[n + 3 .. n + m + 2]  one probe key per slot of the operations: a key
--                        of that slot that never exists
-- ARGV[n + m + 3 ..]     for each operation, as in the batch script:
--                        algorithm, argument count, arguments
--
-- Reply: the batch script's flat reply; or, when this node does not serve
-- one of the slots stably, the status 'NOTLOCAL <error>' having written
-- NOTHING. A script keeps the writes it made before an error, so every slot
-- is checked first: reading a missing key fails unless the node serves its
-- slot and is not moving it (a MIGRATING slot redirects missing keys), and
-- nothing can move a slot while the script runs, so every key of every
-- checked slot is then served here. floodgate sends those operations again
-- per hash tag, which the cluster client redirects.
local n = tonumber(ARGV[1])
local m = tonumber(ARGV[2])
for i = n + 3, n + m + 2 do
  local probe = redis.pcall('EXISTS', ARGV[i])
  if type(probe) == 'table' and probe.err then
    return redis.status_reply('NOTLOCAL ' .. probe.err)
  end
end
local keys = {}
for i = 1, n do
  keys[i] = ARGV[i + 2]
end
return run(keys, n + m + 3)
