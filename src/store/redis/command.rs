//! Command building: one operation becomes its key and arguments (written
//! straight into a command buffer), the operations of a lane's requests one
//! batch-script call; how a refused operation is undone.

use super::keys::Keys;
use super::{RedisStore, scripts};
use crate::algorithm::Spec;
use crate::clock::UnixMillis;
use crate::store::{Op, Unused};

/// How long a GCRA state or sliding log outlives what it holds, ms: the
/// clock skew between instances that leaves them exact (sliding windows
/// read this far ahead). Redis expires keys by its own clock, so without
/// it an instance behind the writer would find a state gone that its own
/// clock still needs. `gcra.lua` adds the same.
pub(super) const SKEW_MS: u64 = crate::algorithm::sliding_window::AHEAD_SECS * 1_000;

impl RedisStore {
    /// One operation as its algorithm script's `key args…` (what the batch
    /// and peek scripts pass to it), and (when the batch may have to be
    /// refused as a whole) how to undo it. Arguments are written straight
    /// into the command buffer: no intermediate strings.
    pub(super) fn call(
        &self,
        op: &Op,
        now: UnixMillis,
        refuse_over: bool,
    ) -> (redis::Cmd, Option<Undo>) {
        let keys = &self.inner.keys;
        let now_us = now.0.saturating_mul(1_000);
        // `base_len`: for a sliding window, the key is its bucket base
        // followed by the bucket start, and the script needs the base too.
        let mut base_len = 0;
        let (key, undo_amount) = match op.spec {
            Spec::FixedWindow { window, .. } => (
                keys.fixed_window(&op.id, window.window_secs(), window.window_start(now)),
                op.hits,
            ),
            Spec::SlidingWindow(sw) => {
                let base = keys.sliding_base(&op.id);
                base_len = base.len();
                let key = match sw.series().as_slice().first() {
                    Some(first) => {
                        Keys::sliding_bucket(&base, first.bucket_secs, first.current_start(now))
                    }
                    None => base,
                };
                (key, op.hits)
            }
            Spec::SlidingLog(_) => (keys.sliding_log(&op.id), 0),
            Spec::Gcra(gcra) => (
                keys.gcra(&op.id, gcra.interval_us(), gcra.burst()),
                op.hits.saturating_mul(gcra.interval_us()),
            ),
            Spec::Concurrency(c) => (keys.concurrency(&op.id, c.ttl_ms()), 0),
        };
        // Room for a typical operation: no regrowth while writing it.
        let mut cmd = redis::Cmd::with_capacity(16, 192);
        cmd.arg(key.as_str());
        let mut log_prefix = None;
        match op.spec {
            // count.lua's form: the limit does not change what it does.
            Spec::FixedWindow { window, .. } if counts_always(op, refuse_over) => {
                cmd.arg(op.hits).arg(self.ttl_secs(window.window_secs()));
            }
            Spec::FixedWindow { window, limit } => {
                // A leased window's block may be fetched up to a second
                // before its window begins (a store far away): its key
                // lives a second longer, so it still outlives its window.
                let early = u64::from(op.lease.is_some());
                cmd.arg(op.hits)
                    .arg(self.ttl_secs(window.window_secs()).saturating_add(early))
                    .arg(limit)
                    .arg(u8::from(refuse_over));
                if let Some(lease) = op.lease {
                    cmd.arg(lease);
                }
            }
            Spec::SlidingWindow(sw) => {
                let series = sw.series();
                cmd.arg(op.hits)
                    .arg(key.get(..base_len).unwrap_or_default())
                    .arg(u8::from(
                        sw.count_rejected() && !refuse_over && op.lease.is_none(),
                    ))
                    .arg(series.as_slice().len());
                for s in series.as_slice() {
                    cmd.arg(s.bucket_secs)
                        .arg(s.newest_start(now))
                        .arg(s.len())
                        .arg(s.ahead)
                        .arg(s.ttl_secs());
                }
                for (limit, offset, covered) in sw.windows() {
                    cmd.arg(limit).arg(offset).arg(covered);
                }
                if let Some(lease) = op.lease {
                    cmd.arg(lease);
                }
            }
            Spec::SlidingLog(sl) => {
                let prefix = format!("{now_us}:{:x}:", self.nonce());
                cmd.arg(op.hits)
                    .arg(now_us)
                    // The set outlives its window by the skew instances
                    // may have: one behind the writer still reads it.
                    .arg(sl.longest_ms().saturating_add(SKEW_MS))
                    .arg(now_us.saturating_sub(sl.longest_ms().saturating_mul(1_000)))
                    .arg(prefix.as_str());
                for &(limit, window_ms) in sl.limits() {
                    cmd.arg(limit).arg(format!(
                        "({}",
                        now_us.saturating_sub(window_ms.saturating_mul(1_000))
                    ));
                }
                if refuse_over {
                    log_prefix = Some(prefix);
                }
            }
            Spec::Gcra(gcra) => {
                cmd.arg(now_us)
                    .arg(gcra.interval_us())
                    .arg(gcra.capacity_us())
                    .arg(op.hits)
                    .arg(u8::from(!gcra.denies_all()));
                if let Some(lease) = op.lease {
                    cmd.arg(lease);
                }
            }
            Spec::Concurrency(c) => {
                let prefix = slot_prefix(c.member());
                let action: u8 = match (op.hits, c.is_release()) {
                    (0, _) => 0,
                    (_, false) => 1,
                    (_, true) => 2,
                };
                cmd.arg(now.0)
                    .arg(c.ttl_ms())
                    .arg(c.slots())
                    .arg(format!("{prefix}1"))
                    .arg(action);
                if refuse_over {
                    log_prefix = Some(prefix);
                }
            }
        }
        let undo = if refuse_over {
            Some(match log_prefix {
                // A leased operation's block sits on top of its hits: they
                // come back only while nothing was counted since.
                None if matches!(op.spec, Spec::Gcra(_)) && op.lease.is_some() => Undo::Tat {
                    key,
                    amount: undo_amount,
                },
                Some(prefix) => Undo::Members {
                    key,
                    prefix,
                    // A slot is one member, whatever the hits.
                    hits: if matches!(op.spec, Spec::Concurrency(_)) {
                        1
                    } else {
                        op.hits
                    },
                },
                None => Undo::Decrement {
                    keys: match op.spec {
                        Spec::SlidingWindow(sw) => {
                            current_buckets(key.get(..base_len).unwrap_or_default(), &sw, now)
                        }
                        _ => vec![key],
                    },
                    amount: undo_amount,
                },
            })
        } else {
            None
        };
        (cmd, undo)
    }
}

impl RedisStore {
    /// How to give back a lease's unused hits: DECRBY of the window's
    /// counter, or of each series' bucket the block was counted in, only
    /// where the key still exists; of a GCRA TAT only while it is still the
    /// one the block left. None for the algorithms that take no blocks.
    pub(super) fn give_back_undo(&self, unused: &Unused) -> Option<Undo> {
        let keys = &self.inner.keys;
        let at = unused.taken_at;
        let undo = match unused.spec {
            Spec::FixedWindow { window, .. } => Undo::Decrement {
                keys: vec![keys.fixed_window(
                    &unused.id,
                    window.window_secs(),
                    window.window_start(at),
                )],
                amount: unused.hits,
            },
            Spec::SlidingWindow(sw) => Undo::Decrement {
                keys: current_buckets(&keys.sliding_base(&unused.id), &sw, at),
                amount: unused.hits,
            },
            Spec::Gcra(gcra) => Undo::Tat {
                key: keys.gcra(&unused.id, gcra.interval_us(), gcra.burst()),
                amount: unused.hits.saturating_mul(gcra.interval_us()),
            },
            Spec::SlidingLog(_) | Spec::Concurrency(_) => return None,
        };
        Some(undo)
    }
}

/// The key of each series' current bucket at `at`, under `base`.
fn current_buckets(
    base: &str,
    sw: &crate::algorithm::sliding_window::SlidingWindow,
    at: UnixMillis,
) -> Vec<String> {
    sw.series()
        .as_slice()
        .iter()
        .map(|s| Keys::sliding_bucket(base, s.bucket_secs, s.current_start(at)))
        .collect()
}

/// The batch and peek scripts' number of `count.lua`: a fixed window
/// counting every hit.
pub(super) const COUNT: u8 = 0;

/// Whether an operation is the reference's fixed window counting every hit
/// (not refused when over, not a lease, not a check-only read): sent as
/// `count.lua`'s smaller form, its reply the count before alone.
pub(super) fn counts_always(op: &Op, refuse_over: bool) -> bool {
    matches!(op.spec, Spec::FixedWindow { .. }) && !refuse_over && op.lease.is_none() && op.hits > 0
}

/// The batch script's number of an operation's algorithm ([`COUNT`] for
/// the fixed window counting every hit); `refuse_over` as for
/// [`RedisStore::call`].
pub(super) fn algorithm_number(op: &Op, refuse_over: bool) -> u8 {
    if counts_always(op, refuse_over) {
        return COUNT;
    }
    match op.spec {
        Spec::FixedWindow { .. } => 1,
        Spec::SlidingWindow(_) => 2,
        Spec::SlidingLog(_) => 3,
        Spec::Gcra(_) => 4,
        Spec::Concurrency(_) => 5,
    }
}

/// A slot's member in the sorted set is this followed by `1` (so that a
/// refused request's slot is taken back as a log's hits are).
fn slot_prefix(member: u64) -> String {
    format!("{member:016x}.")
}

/// The bytes of a command's arguments (each operation's are all plain
/// bytes; only SCAN-style commands carry other kinds).
pub(super) fn bytes_of(cmd: &redis::Cmd) -> impl Iterator<Item = &[u8]> {
    cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    })
}

/// The key of an operation's command (`key args…`).
pub(super) fn key_of(cmd: &redis::Cmd) -> &[u8] {
    bytes_of(cmd).next().unwrap_or_default()
}

/// Where a batch call carries its operations' keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeysIn<'a> {
    /// As the call's KEYS (the batch script): one slot on a Cluster.
    Keys,
    /// As arguments (the node batch script): any slots one node serves,
    /// with one probe key per slot the node must serve stably (see
    /// `node_batch.lua`).
    Args { probes: &'a [Vec<u8>] },
}

/// One batch-script call for operations (`key args…` each): their keys
/// (as KEYS, or as arguments after their count and the probes' count,
/// followed by the probes), then for each its algorithm number, argument
/// count and arguments ([`COUNT`]'s without the count: always two).
pub(super) fn batch_cmd<'a>(
    ops: impl Iterator<Item = (u8, &'a redis::Cmd)> + Clone,
    keys_in: KeysIn<'_>,
) -> redis::Cmd {
    let (count, args, bytes) = ops
        .clone()
        .fold((0, 5, 64), |(count, args, bytes), (_, op)| {
            let len: usize = bytes_of(op).map(<[u8]>::len).sum();
            (count + 1, args + op.args_iter().len() + 2, bytes + len + 8)
        });
    let mut cmd = redis::Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA");
    match keys_in {
        KeysIn::Keys => {
            cmd.arg(scripts::BATCH.get_hash()).arg(count);
        }
        KeysIn::Args { probes } => {
            cmd.arg(scripts::NODE_BATCH.get_hash())
                .arg(0)
                .arg(count)
                .arg(probes.len());
        }
    }
    for (_, op) in ops.clone() {
        cmd.arg(key_of(op));
    }
    if let KeysIn::Args { probes } = keys_in {
        for probe in probes {
            cmd.arg(probe.as_slice());
        }
    }
    for (algorithm, op) in ops {
        write_op(&mut cmd, algorithm, op);
    }
    cmd
}

/// One operation (`key args…`) as the batch script reads it from ARGV:
/// its algorithm number, argument count ([`COUNT`]'s without: always
/// two) and arguments, the key left out.
pub(super) fn write_op(cmd: &mut redis::Cmd, algorithm: u8, op: &redis::Cmd) {
    cmd.arg(algorithm);
    if algorithm != COUNT {
        cmd.arg(op.args_iter().len().saturating_sub(1));
    }
    for arg in bytes_of(op).skip(1) {
        cmd.arg(arg);
    }
}

/// How to undo one counted operation of a refused batch.
#[derive(Debug)]
pub(super) enum Undo {
    /// DECRBY the keys (counters, the current bucket of each series, TATs).
    Decrement { keys: Vec<String>, amount: u64 },
    /// DECRBY a GCRA TAT by `amount` µs only while it is still the one the
    /// operation left (`Outcome::tat_us`).
    Tat { key: String, amount: u64 },
    /// ZREM the request's members, `prefix` followed by 1..=hits (sliding
    /// log); the script rebuilds them, so the command stays small.
    Members {
        key: String,
        prefix: String,
        hits: u64,
    },
}

impl Undo {
    /// Whether the store kept what this undo was to take back, by its
    /// reply: a GCRA TAT counted on since replies -1.
    pub(super) fn kept(&self, reply: &[i64]) -> bool {
        matches!(self, Self::Tat { .. }) && reply.first().is_none_or(|&tat| tat < 0)
    }
}

/// The script call that undoes one operation; `tat_us` is the TAT it
/// left (for [`Undo::Tat`]).
pub(super) fn undo_cmd(undo: &Undo, tat_us: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    match undo {
        Undo::Tat { key, amount } => {
            cmd.arg(scripts::TAKE_BACK_TAT.get_hash())
                .arg(1)
                .arg(key.as_str())
                .arg(*amount)
                .arg(tat_us);
        }
        Undo::Decrement { keys, amount } => {
            cmd.arg(scripts::TAKE_BACK.get_hash()).arg(keys.len());
            for key in keys {
                cmd.arg(key.as_str());
            }
            cmd.arg(*amount);
        }
        Undo::Members { key, prefix, hits } => {
            cmd.arg(scripts::TAKE_BACK_LOG.get_hash())
                .arg(1)
                .arg(key.as_str())
                .arg(prefix.as_str())
                .arg(*hits);
        }
    }
    cmd
}
