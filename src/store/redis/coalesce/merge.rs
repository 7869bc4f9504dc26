//! One operation per hot counter in a call: the fixed-window hits of every
//! request on one counter go to Redis as one INCRBY of their sum, and each
//! request gets the count before its own hits, as if each had been run
//! alone, in order.
//!
//! Inside one script call the operations run one after the other and
//! nothing else runs in between, so `n` INCRBYs of `h1..hn` on one key
//! answer `c, c+h1, c+h1+h2, …` before each; one INCRBY of the sum
//! answers `c`, and the rest follows from the hits. Only operations whose
//! reply is exactly that are merged: fixed windows that always count
//! (the reference's behaviour; not a refusing
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` call, not a lease, not a
//! check-only read: `count.lua`'s operations), on a key no other operation
//! of the call touches. Only the first one can create the key, so the
//! merged operation carries the first one's expiry (each carries its own
//! jittered one). Under load, requests on one hot
//! descriptor then cost Redis one command per call instead of one per
//! request, and floodgate writes and parses one operation instead of
//! dozens.

use super::super::command::{COUNT, bytes_of, key_of};
use super::{Job, LaneError, LaneOp, Replies, replies_len};
use fnv::FnvHashMap;

/// What one of the call's operations is sent as.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// Sent as it is.
    Alone,
    /// The first of a merged counter's operations: sent as the merged
    /// operation `merged[group]`, its reply the counter's before.
    Leads { group: usize },
    /// A later operation on a merged counter: not sent; its count before
    /// is the counter's before plus `offset` (the hits of the earlier ones).
    Follows { group: usize, offset: i64 },
}

/// A call's operations with the hits of each hot counter merged.
#[derive(Debug, Default)]
pub(super) struct Merged {
    /// One per operation of the call, in order; empty when nothing merged.
    parts: Vec<Part>,
    /// The operations sent for merged counters (their hits summed).
    merged: Vec<LaneOp>,
}

/// An operation that may be merged: `count.lua`'s `key hits ttl`. Its
/// hits and expiry.
fn mergeable(op: &LaneOp) -> Option<(u64, &[u8])> {
    if op.algorithm != COUNT {
        return None;
    }
    // After the key (which `Merged::of` groups by).
    let mut args = bytes_of(&op.cmd).skip(1);
    let (hits, ttl) = (args.next()?, args.next()?);
    if args.next().is_some() {
        return None;
    }
    let hits: u64 = std::str::from_utf8(hits).ok()?.parse().ok()?;
    Some((hits, ttl))
}

/// A counter seen in the call.
struct Counter<'a> {
    /// The first operation's expiry, `None` once an operation on it
    /// cannot be merged.
    ttl: Option<&'a [u8]>,
    /// Its operations.
    count: usize,
    /// Its group, once it has one.
    group: Option<usize>,
    /// Hits of its operations so far (while the plan is built).
    hits: u64,
}

impl Merged {
    /// The plan for a call's operations (in the order they are sent).
    pub(super) fn of<'a>(ops: impl Iterator<Item = &'a LaneOp> + Clone) -> Self {
        // One operation merges with nothing: no map to build.
        if ops.clone().nth(1).is_none() {
            return Self::default();
        }
        let mut counters: FnvHashMap<&[u8], Counter<'_>> = FnvHashMap::default();
        let mut any = false;
        for op in ops.clone() {
            let ttl = mergeable(op).map(|(_, ttl)| ttl);
            let counter = counters.entry(key_of(&op.cmd)).or_insert(Counter {
                ttl,
                count: 0,
                group: None,
                hits: 0,
            });
            counter.count += 1;
            if ttl.is_none() {
                counter.ttl = None;
            }
            any |= counter.count > 1 && counter.ttl.is_some();
        }
        if !any {
            return Self::default();
        }
        let mut plan = Self::default();
        let mut groups: Vec<(&[u8], &[u8])> = Vec::new();
        for op in ops {
            let key = key_of(&op.cmd);
            let part = match (mergeable(op), counters.get_mut(key)) {
                (Some((hits, _)), Some(counter)) if counter.count > 1 => match counter.ttl {
                    Some(ttl) => {
                        let offset = i64::try_from(counter.hits).unwrap_or(i64::MAX);
                        counter.hits = counter.hits.saturating_add(hits);
                        match counter.group {
                            Some(group) => Part::Follows { group, offset },
                            None => {
                                let group = groups.len();
                                counter.group = Some(group);
                                groups.push((key, ttl));
                                Part::Leads { group }
                            }
                        }
                    }
                    None => Part::Alone,
                },
                _ => Part::Alone,
            };
            plan.parts.push(part);
        }
        plan.merged = groups
            .into_iter()
            .map(|(key, ttl)| {
                let hits = counters.get(key).map_or(0, |counter| counter.hits);
                let mut cmd = redis::Cmd::with_capacity(3, key.len() + 32);
                cmd.arg(key).arg(hits).arg(ttl);
                LaneOp {
                    algorithm: COUNT,
                    reply_len: 1,
                    cmd,
                }
            })
            .collect();
        plan
    }

    /// The operations to send: every operation of the call, or (when some
    /// merged) each merged counter's once, where its first one was.
    pub(super) fn sent<'a>(
        &'a self,
        ops: impl Iterator<Item = &'a LaneOp> + Clone + 'a,
    ) -> impl Iterator<Item = &'a LaneOp> + Clone + 'a {
        let all = self.parts.is_empty();
        ops.enumerate().filter_map(move |(i, op)| {
            if all {
                return Some(op);
            }
            match self.parts.get(i)? {
                Part::Alone => Some(op),
                Part::Leads { group } => self.merged.get(*group),
                Part::Follows { .. } => None,
            }
        })
    }

    /// Every operation's replies, in the call's order, from the replies of
    /// the operations sent (as they are when nothing merged: no copy).
    fn expand(&self, ops: impl Iterator<Item = usize>, sent: Vec<i64>) -> Vec<i64> {
        if self.parts.is_empty() {
            return sent;
        }
        let mut all = Vec::with_capacity(sent.len() + self.parts.len());
        // Each merged counter's reply: its count before.
        let mut leads: Vec<i64> = vec![0; self.merged.len()];
        let mut rest = sent.as_slice();
        for (part, len) in self.parts.iter().zip(ops) {
            match *part {
                Part::Alone => {
                    let (own, tail) = rest.split_at_checked(len).unwrap_or((rest, &[]));
                    all.extend_from_slice(own);
                    rest = tail;
                }
                Part::Leads { group } => {
                    if let Some((&before, tail)) = rest.split_first() {
                        rest = tail;
                        all.push(before);
                        if let Some(lead) = leads.get_mut(group) {
                            *lead = before;
                        }
                    }
                }
                Part::Follows { group, offset } => {
                    let before = leads.get(group).copied().unwrap_or_default();
                    all.push(before.saturating_add(offset));
                }
            }
        }
        all
    }

    /// Hands each job its share of the call's replies (or the call's
    /// error); `execute_batch` checked the length of what was sent.
    pub(super) fn deliver(&self, batch: &mut Vec<Job>, result: Result<Vec<i64>, LaneError>) {
        let replies = match result {
            Ok(sent) => {
                let lens = batch
                    .iter()
                    .flat_map(|job| job.ops.iter().map(|op| op.reply_len));
                self.expand(lens, sent)
            }
            Err(err) => {
                for mut job in batch.drain(..) {
                    job.answer(Err(err.clone()));
                }
                return;
            }
        };
        let mut rest = replies.as_slice();
        for mut job in batch.drain(..) {
            let (own, tail) = rest
                .split_at_checked(replies_len(&job.ops))
                .unwrap_or((rest, &[]));
            rest = tail;
            if job.waited_for() {
                let replies: Replies = Ok(own.to_vec());
                job.answer(replies);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LaneOp, Merged};
    use crate::store::redis::command::{COUNT, bytes_of};
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// An operation as `RedisStore::call` builds it: a fixed window
    /// (`algorithm` 1) counting every hit as count.lua's `key hits ttl`,
    /// any other as `key hits ttl limit refuse` (any other number stands
    /// for an operation that reads the key: 3 replies).
    fn op(algorithm: u8, key: &str, hits: u64, limit: u64, refuse: u8) -> LaneOp {
        let mut cmd = redis::Cmd::new();
        // Each its own expiry, as jitter gives them.
        let ttl = 60 + hits * 7 + limit;
        cmd.arg(key).arg(hits).arg(ttl);
        if algorithm == 1 && refuse == 0 && hits > 0 {
            return LaneOp {
                algorithm: COUNT,
                reply_len: 1,
                cmd,
            };
        }
        cmd.arg(limit).arg(refuse);
        LaneOp {
            algorithm,
            reply_len: if algorithm == 1 { 2 } else { 3 },
            cmd,
        }
    }

    fn int(bytes: &[u8]) -> i64 {
        std::str::from_utf8(bytes).unwrap().parse().unwrap()
    }

    /// What the batch script replies to operations run one after the
    /// other (count.lua, fixed_window.lua without leases); `counts` holds
    /// each key's count and the expiry it was given.
    fn run(ops: &[&LaneOp], counts: &mut HashMap<Vec<u8>, (i64, i64)>) -> Vec<i64> {
        let mut replies = Vec::new();
        for op in ops {
            let args: Vec<&[u8]> = bytes_of(&op.cmd).collect();
            let (count, ttl) = counts.entry(args[0].to_vec()).or_insert((0, -1));
            let before = *count;
            if op.algorithm == COUNT {
                let hits = int(args[1]);
                *count += hits;
                if *count == hits {
                    *ttl = int(args[2]);
                }
                replies.push(before);
                continue;
            }
            if op.algorithm != 1 {
                replies.extend([before, 7, 7]);
                continue;
            }
            let (hits, limit, refuse) = (int(args[1]), int(args[3]), args[4] == b"1");
            if hits > 0 && refuse && before + hits > limit {
                replies.extend([before, 0]);
            } else {
                *count += hits;
                if hits > 0 && *count == hits {
                    *ttl = int(args[2]);
                }
                replies.extend([before, 1]);
            }
        }
        replies
    }

    fn ops() -> impl Strategy<Value = Vec<LaneOp>> {
        let one = (0u8..8, 0usize..3, 0u64..4, 0usize..2, 0u8..2).prop_map(
            |(kind, key, hits, limit, refuse)| {
                let algorithm = if kind == 0 { 2 } else { 1 };
                // Mostly the plain counting kind, so counters do merge.
                let refuse = if kind < 6 { 0 } else { refuse };
                let limit = if kind < 7 { 5 } else { [5, 9][limit] };
                op(algorithm, ["a", "b", "c"][key], hits, limit, refuse)
            },
        );
        proptest::collection::vec(one, 0..24)
    }

    proptest! {
        /// Whatever merges, every operation is answered as if all had run
        /// one by one, and the counters end the same.
        #[test]
        fn merged_calls_answer_as_one_by_one(ops in ops()) {
            let mut alone = HashMap::new();
            let expected = run(&ops.iter().collect::<Vec<_>>(), &mut alone);
            let merged = Merged::of(ops.iter());
            let sent: Vec<&LaneOp> = merged.sent(ops.iter()).collect();
            let mut counts = HashMap::new();
            let replies = run(&sent, &mut counts);
            prop_assert_eq!(
                merged.expand(ops.iter().map(|op| op.reply_len), replies),
                expected
            );
            prop_assert_eq!(counts, alone);
        }
    }

    #[test]
    fn only_counters_touched_by_plain_counting_alone_merge() {
        let ops = [
            op(1, "a", 1, 5, 0),
            op(1, "b", 1, 5, 0),
            op(1, "a", 2, 5, 0),
            // b is also read: never merged.
            op(1, "b", 0, 5, 0),
            op(1, "a", 3, 5, 0),
            op(1, "c", 1, 5, 0),
        ];
        let merged = Merged::of(ops.iter());
        let sent: Vec<Vec<&[u8]>> = merged
            .sent(ops.iter())
            .map(|op| bytes_of(&op.cmd).collect())
            .collect();
        let keys_hits: Vec<(&[u8], &[u8])> = sent.iter().map(|a| (a[0], a[1])).collect();
        assert_eq!(
            keys_hits,
            [
                (&b"a"[..], &b"6"[..]),
                (b"b", b"1"),
                (b"b", b"0"),
                (b"c", b"1")
            ]
        );
        // Nothing to merge: nothing planned, everything sent as it is.
        let alone = [op(1, "a", 1, 5, 0), op(1, "a", 1, 5, 1)];
        let merged = Merged::of(alone.iter());
        assert!(merged.parts.is_empty());
        assert_eq!(merged.sent(alone.iter()).count(), 2);
    }
}
