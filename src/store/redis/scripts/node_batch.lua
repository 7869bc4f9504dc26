-- The batch script for the operations of many slots that one Cluster node
-- serves (floodgate groups them by node): one call per node, not one per
-- hash tag.
--
-- ARGV[1]            n, the number of operations
-- ARGV[2 .. n + 1]   their keys (not KEYS: a call's KEYS must share a slot;
--                    a script without a shebang may touch any key its node
--                    serves)
-- ARGV[n + 2 ..]     for each operation, as in the batch script: algorithm,
--                    argument count, arguments
--
-- Reply: the batch script's flat reply; or, when this node does not serve
-- one of the keys (its slot moved, or is moving and the key is elsewhere),
-- the status 'NOTLOCAL <error>' having written NOTHING. A script keeps the
-- writes it made before an error, so every key is checked first, with the
-- same check Redis makes of a call's declared keys; floodgate then sends
-- those operations per hash tag, which the cluster client redirects.
local n = tonumber(ARGV[1])
local keys = {}
local seen = {}
for i = 1, n do
  local key = ARGV[i + 1]
  keys[i] = key
  if not seen[key] then
    seen[key] = true
    local probe = redis.pcall('EXISTS', key)
    if type(probe) == 'table' and probe.err then
      return redis.status_reply('NOTLOCAL ' .. probe.err)
    end
  end
end
return run(keys, n + 2)
