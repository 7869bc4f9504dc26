-- Takes cells back from a GCRA bucket (a leased operation's hits of a
-- refused request, or a lease's unused block), only while the TAT is still
-- the one that operation or block left: nothing was counted on the bucket
-- since. Lowering the TAT under a block taken later would move that block
-- below the place its holder checks it against, and the holder could then
-- admit cells the bucket has already let drain.
--
-- KEYS[1]  TAT, µs since the epoch
-- ARGV[1]  µs to take back (cells x emission interval)
-- ARGV[2]  the TAT the operation or block left, µs
--
-- Reply: the TAT after, or -1 when it is not ARGV[2] (counted on since, or
-- expired): nothing is taken back, the cells stay counted.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return -1
end
return redis.call('DECRBY', KEYS[1], ARGV[1])
