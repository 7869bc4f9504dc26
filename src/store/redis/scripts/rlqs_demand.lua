-- The RLQS demand registry of buckets: each member (one Envoy) reports
-- the requests it saw since its last report; the script measures its
-- demand on floodgate's clock, computes its target share of the budget
-- (rlqs/split.rs `targets`, the same integer math) and grants it what the
-- other members' grants leave (`grant`), all in one atomic step per key.
--
-- KEYS[i]  the registry hash of bucket i: field = member, value =
--          "<demand_milli>:<granted_units>:<last_seen_ms>"
-- ARGV[1]  member name
-- ARGV[2]  now_ms (floodgate's clock)
-- ARGV[3]  stale_ms: members not seen for this long are dropped (their
--          assignments have expired); also the key's expiry
-- ARGV[4]  max_members per bucket
-- ARGV[5]  units (the whole budget)
-- ARGV[6]  floor_units (shared evenly by members + one spare slot)
-- ARGV[5 + 2i]     requests seen by the member on bucket i since its last report
-- ARGV[6 + 2i]     1 when the member leaves bucket i (abandoned), else 0
--
-- Reply: one {granted_units, members, admitted} per key, where members
-- counts the live members including this one and admitted is 0 when the
-- bucket already has max_members others (nothing is written then).
local me = ARGV[1]
local now = tonumber(ARGV[2])
local stale = tonumber(ARGV[3])
local max_members = tonumber(ARGV[4])
local units = tonumber(ARGV[5])
local floor_units = tonumber(ARGV[6])
local replies = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local requests = tonumber(ARGV[5 + 2 * i])
  local leave = ARGV[6 + 2 * i] == '1'
  local raw = redis.call('HGETALL', key)
  local total, others, count = 0, 0, 0
  local prev_seen = nil
  for j = 1, #raw, 2 do
    local name = raw[j]
    local d, g, seen = string.match(raw[j + 1], '^(%d+):(%d+):(%d+)$')
    d, g, seen = tonumber(d), tonumber(g), tonumber(seen)
    if name == me then
      prev_seen = seen
    elseif seen == nil or seen + stale <= now then
      redis.call('HDEL', key, name)
    else
      total = total + d
      others = others + g
      count = count + 1
    end
  end
  if leave then
    redis.call('HDEL', key, me)
    replies[i] = {0, count, 1}
  elseif count >= max_members then
    replies[i] = {0, count, 0}
  else
    local interval = 1000
    if prev_seen ~= nil and now - prev_seen > 1000 then
      interval = now - prev_seen
    end
    local demand = math.min(math.floor(requests * 1000000 / interval), 1000000000000000)
    total = total + demand
    local n = count + 1
    local floor = math.floor(floor_units / (n + 1))
    local rest = units - floor * (n + 1)
    local target
    if total == 0 then
      target = floor + math.floor(rest / n)
    else
      target = floor + math.floor(rest * demand / total)
    end
    local grant = math.min(target, math.max(units - others, 0))
    redis.call('HSET', key, me, string.format('%d:%d:%d', demand, grant, now))
    replies[i] = {grant, n, 1}
  end
  if redis.call('HLEN', key) > 0 then
    redis.call('PEXPIRE', key, stale)
  end
end
return replies
