//! The Lua scripts, each loaded once per process and run with EVALSHA (and
//! loaded into Redis again on NOSCRIPT, e.g. after a restart or failover).

use redis::Script;
use std::sync::LazyLock;

/// `scripts/take_back.lua`: undo counted hits (counters and TATs).
pub(crate) static TAKE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take_back.lua")));

/// `scripts/take_back_tat.lua`: undo a leased GCRA operation's hits, or
/// give back a block, only while the TAT is still the one it left.
pub(crate) static TAKE_BACK_TAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take_back_tat.lua")));

/// `scripts/take_back_log.lua`: undo logged hits.
pub(crate) static TAKE_BACK_LOG: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take_back_log.lua")));

/// The read-only twin of the algorithm scripts, for `/explain`: their
/// own source with every `redis.call` going through [`PEEK_CALL`], which
/// reads as they do but writes nothing, so each replies what it would reply
/// if it ran now. `ARGV[1]` is the algorithm's number (as in the batch
/// script), then the algorithm's own ARGV.
pub(crate) static PEEK: LazyLock<Script> = LazyLock::new(|| {
    let function = |name: &str, body: &str| {
        format!(
            "local function {name}(KEYS, ARGV)\n{}\nend\n",
            body.replace("redis.call(", "peek_call(")
        )
    };
    let source = [
        PEEK_CALL.to_owned(),
        function("count", include_str!("scripts/count.lua")),
        function("fixed_window", include_str!("scripts/fixed_window.lua")),
        function("sliding_window", include_str!("scripts/sliding_window.lua")),
        function("sliding_log", include_str!("scripts/sliding_log.lua")),
        function("gcra", include_str!("scripts/gcra.lua")),
        function("concurrency", include_str!("scripts/concurrency.lua")),
        PEEK_DISPATCH.to_owned(),
    ]
    .concat();
    Script::new(&source)
});

/// `redis.call` for the peek script: reads pass through; `INCRBY` answers
/// the count it would reach without writing it; every other write the
/// scripts make (expiries, trimming, log entries, TATs) does nothing. (The
/// scripts read a log only from each window's start, after anything the
/// trim would remove.)
const PEEK_CALL: &str = r"
local function peek_call(command, key, ...)
  if command == 'INCRBY' then
    return tonumber(redis.call('GET', key) or '0') + tonumber((...))
  end
  if command == 'EXPIRE' or command == 'PEXPIRE' or command == 'SET'
      or command == 'ZADD' or command == 'ZREMRANGEBYSCORE' or command == 'ZREM' then
    return 0
  end
  return redis.call(command, key, ...)
end
";

/// The peek script's call of one algorithm.
const PEEK_DISPATCH: &str = r"
local algorithms = {[0] = count, fixed_window, sliding_window, sliding_log, gcra, concurrency}
local args = {}
for j = 2, #ARGV do
  args[j - 1] = ARGV[j]
end
return algorithms[tonumber(ARGV[1])]({KEYS[1]}, args)
";

/// `scripts/batch.lua` with the algorithm scripts inserted as
/// functions: every operation of a request in one call. Its operations'
/// keys are the call's KEYS, so they share one slot on a Cluster.
pub(crate) static BATCH: LazyLock<Script> =
    LazyLock::new(|| batch_script(include_str!("scripts/batch.lua"), "return run(KEYS, 1)\n"));

/// `scripts/node_batch.lua`: the batch script for the operations of many
/// slots that one Cluster node serves. Their keys are arguments (a call's
/// KEYS must share a slot), and every one is checked to be served here
/// before anything is written.
pub(crate) static NODE_BATCH: LazyLock<Script> = LazyLock::new(|| {
    batch_script(
        include_str!("scripts/batch.lua"),
        include_str!("scripts/node_batch.lua"),
    )
});

/// `scripts/fetch.lua`: a lease's block fetch, fenced: the batch script's
/// loop over one operation, unless the fetch was settled first.
pub(crate) static FETCH: LazyLock<Script> = LazyLock::new(|| {
    batch_script(
        include_str!("scripts/batch.lua"),
        include_str!("scripts/fetch.lua"),
    )
});

/// `scripts/settle.lua`: what a fetch whose answer never came took, its
/// fence left so that it never takes anything later.
pub(crate) static SETTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/settle.lua")));

/// `scripts/give_back.lua`: a lease's unused hits given back at most once
/// per token, with `take_back.lua` and `take_back_tat.lua` as functions.
pub(crate) static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    let source = [
        function("take_back", include_str!("scripts/take_back.lua")),
        function("take_back_tat", include_str!("scripts/take_back_tat.lua")),
        include_str!("scripts/give_back.lua").to_owned(),
    ]
    .concat();
    Script::new(&source)
});

/// A script's source as a local function of `KEYS` and `ARGV`, to call
/// from another script.
fn function(name: &str, body: &str) -> String {
    format!("local function {name}(KEYS, ARGV)\n{body}\nend\n")
}

/// A batch script: `header`, the algorithm scripts as functions, the
/// loop over operations (`run`), then `main`.
fn batch_script(header: &str, main: &str) -> Script {
    let source = [
        header.to_owned(),
        function("fixed_window", include_str!("scripts/fixed_window.lua")),
        function("sliding_window", include_str!("scripts/sliding_window.lua")),
        function("sliding_log", include_str!("scripts/sliding_log.lua")),
        function("gcra", include_str!("scripts/gcra.lua")),
        function("concurrency", include_str!("scripts/concurrency.lua")),
        BATCH_RUN.to_owned(),
        main.to_owned(),
    ]
    .concat();
    Script::new(&source)
}

/// The batch scripts' loop over the operations: operation `i` on
/// `keys[i]`, its algorithm, argument count and arguments read from ARGV
/// from position `at` on.
const BATCH_RUN: &str = r"
local algorithms = {fixed_window, sliding_window, sliding_log, gcra, concurrency}
local function run(keys, at)
  local replies = {}
  local r = 0
  for i = 1, #keys do
    local kind = ARGV[at]
    if kind == '0' then
      -- count.lua's lines, inline: most operations are this one, and each
      -- saves the three tables and the call of the general path.
      -- INCRBY gets the argument's text: a Lua number would be printed
      -- back to text by Redis on each call.
      local hits = tonumber(ARGV[at + 1])
      local after = redis.call('INCRBY', keys[i], ARGV[at + 1])
      if after == hits then
        redis.call('EXPIRE', keys[i], ARGV[at + 2])
      end
      r = r + 1
      replies[r] = after - hits
      at = at + 3
    else
      local n = tonumber(ARGV[at + 1])
      -- unpack copies the operation's arguments in C, not in a Lua loop.
      local args = {unpack(ARGV, at + 2, at + 1 + n)}
      -- One flat reply (each operation's integers, one after the other):
      -- one array for the client to read, not one per operation; no
      -- lengths, as floodgate knows them (fewer values to send and parse).
      local reply = algorithms[tonumber(kind)]({keys[i]}, args)
      for j = 1, #reply do
        replies[r + j] = reply[j]
      end
      r = r + #reply
      at = at + 2 + n
    end
  end
  return replies
end
";

/// Every script, for loading them all after a NOSCRIPT reply.
pub(crate) fn all() -> [&'static Script; 9] {
    [
        &TAKE_BACK,
        &TAKE_BACK_TAT,
        &GIVE_BACK,
        &TAKE_BACK_LOG,
        &BATCH,
        &NODE_BATCH,
        &FETCH,
        &SETTLE,
        &PEEK,
    ]
}
