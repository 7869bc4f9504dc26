//! The Cluster lane: everything queued, grouped by the node that serves
//! each operation's slot, one script call per node, all sent at once.
//!
//! A call's declared keys must share a slot, so a node's call carries its
//! keys as arguments (`node_batch.lua`) and checks, before writing
//! anything, that the node serves each of its slots and is not moving it
//! (one probe key per slot). Where floodgate's slot table was wrong (a slot
//! moved, or is moving), that call writes nothing and its operations go
//! again, per hash tag, routed and redirected by the cluster client: a
//! second round trip for them, never a lost or doubled count.
//! Operations of one hash tag only, or of a slot the table does not know,
//! go per hash tag from the start (the plain batch script, keys declared).

use super::{Job, LaneError, MAX_REQUESTS_PER_CALL, Waiting, batch_of};
use crate::store::redis::coalesce::LaneOp;
use crate::store::redis::command::{KeysIn, key_of};
use crate::store::redis::execute::{bad_reply, execute_batch, execute_node_batch};
use crate::store::redis::slots::{Owners, SlotTable, slot_of};
use futures_util::future::join_all;
use redis::RedisResult;
use redis::cluster_async::ClusterConnection;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where one operation sits in a lane's batch: (job, operation).
type At = (usize, usize);

/// One script call of a lane's round.
struct Call {
    /// The operations it carries, in arrival order.
    members: Vec<At>,
    /// The slot of its first key: the call goes to the node serving it.
    slot: u16,
    /// A node call's (`node_batch.lua`) probe keys, one per slot of its
    /// operations (see [`probe_key`]); `None` for a call for one hash tag.
    probes: Option<Vec<Vec<u8>>>,
}

/// A node's call while a round is planned.
struct NodeCall<'a> {
    call: Call,
    /// The slots of its operations so far (one probe each).
    slots: Vec<u16>,
    first_tag: &'a [u8],
    /// Whether all its operations share `first_tag`.
    one_tag: bool,
}

/// A call's operations and its result: their flat replies, or the error.
type Done = (Vec<At>, RedisResult<Vec<i64>>);

/// The Cluster lane's task.
pub(super) async fn drive(
    conn: ClusterConnection,
    slots: Arc<SlotTable>,
    jobs: mpsc::Receiver<Job>,
) {
    let mut waiting = Waiting::new(jobs);
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while waiting.take(&mut batch).await {
        slots.refresh_if_stale(&conn);
        // The operations, out of their jobs for the round: the calls read
        // them while the lane keeps the jobs' deadlines.
        let ops: Vec<Vec<LaneOp>> = batch
            .iter_mut()
            .map(|job| std::mem::take(&mut job.ops))
            .collect();
        let calls = plan(&ops, slots.owners().as_deref());
        let round = run(&conn, &slots, &ops, calls);
        match waiting.await_call(round, &mut batch).await {
            Some(results) => deliver(&mut batch, &ops, results),
            None => batch.clear(),
        }
    }
}

/// The calls of a round: one per node for the operations of slots the
/// table places, when they span more than one hash tag; one per hash tag
/// for the rest.
fn plan(ops: &[Vec<LaneOp>], owners: Option<&Owners>) -> Vec<Call> {
    let mut nodes: HashMap<u16, NodeCall<'_>> = HashMap::new();
    let mut unplaced = Vec::new();
    for (j, job) in ops.iter().enumerate() {
        for (o, op) in job.iter().enumerate() {
            let tag = hash_tag(&op.cmd);
            let slot = slot_of(tag);
            let Some(node) = owners.and_then(|owners| owners.of(slot)) else {
                unplaced.push((j, o));
                continue;
            };
            let node = nodes.entry(node).or_insert_with(|| NodeCall {
                call: Call {
                    members: Vec::new(),
                    slot,
                    probes: Some(Vec::new()),
                },
                slots: Vec::new(),
                first_tag: tag,
                one_tag: true,
            });
            node.one_tag &= node.first_tag == tag;
            node.call.members.push((j, o));
            if !node.slots.contains(&slot) {
                node.slots.push(slot);
                if let Some(probes) = &mut node.call.probes {
                    probes.push(probe_key(key_of(&op.cmd), tag));
                }
            }
        }
    }
    let mut calls = Vec::with_capacity(nodes.len());
    for NodeCall {
        mut call, one_tag, ..
    } in nodes.into_values()
    {
        if one_tag {
            // One slot: the plain batch script, its keys declared.
            call.probes = None;
        }
        calls.push(call);
    }
    calls.extend(per_tag(ops, unplaced));
    calls
}

/// One call per hash tag for `members`, in arrival order within each.
fn per_tag(ops: &[Vec<LaneOp>], members: Vec<At>) -> Vec<Call> {
    let mut tags: HashMap<&[u8], Call> = HashMap::new();
    for at in members {
        let Some(op) = op_at(ops, at) else {
            continue;
        };
        let tag = hash_tag(&op.cmd);
        tags.entry(tag)
            .or_insert_with(|| Call {
                members: Vec::new(),
                slot: slot_of(tag),
                probes: None,
            })
            .members
            .push(at);
    }
    tags.into_values().collect()
}

/// Runs a round's calls at once; the operations of node calls that found
/// the table wrong (they wrote nothing) go again per hash tag. The table is
/// marked for a refresh then, and when a node call fails (a node may have
/// gone away).
async fn run(
    conn: &ClusterConnection,
    slots: &SlotTable,
    ops: &[Vec<LaneOp>],
    calls: Vec<Call>,
) -> Vec<Done> {
    let first = join_all(calls.into_iter().map(|call| send(conn, ops, call))).await;
    let mut done = Vec::with_capacity(first.len());
    let mut again = Vec::new();
    for (members, result) in first {
        match result {
            Ok(Some(replies)) => done.push((members, Ok(replies))),
            Ok(None) => again.extend(members),
            Err(err) => {
                slots.mark_stale();
                done.push((members, Err(err)));
            }
        }
    }
    if !again.is_empty() {
        slots.mark_stale();
        let calls = per_tag(ops, again);
        let retried = join_all(calls.into_iter().map(|call| send(conn, ops, call))).await;
        done.extend(retried.into_iter().map(|(members, result)| {
            // A call per tag is redirected by the client, never refused.
            let result = result.and_then(|replies| {
                replies.ok_or_else(|| bad_reply("node batch reply to a call per tag".to_owned()))
            });
            (members, result)
        }));
    }
    done
}

/// Sends one call: its replies, or `None` when a node call found a slot
/// its node does not serve stably (and wrote nothing).
async fn send(
    conn: &ClusterConnection,
    ops: &[Vec<LaneOp>],
    call: Call,
) -> (Vec<At>, RedisResult<Option<Vec<i64>>>) {
    let members = call.members.iter().filter_map(|&at| op_at(ops, at));
    let mut conn = conn.clone();
    let result = if let Some(probes) = &call.probes {
        let (cmd, expected) = batch_of(members, KeysIn::Args { probes });
        execute_node_batch(&mut conn, &cmd, call.slot, expected).await
    } else {
        let (cmd, expected) = batch_of(members, KeysIn::Keys);
        execute_batch(&mut conn, &cmd, expected).await.map(Some)
    };
    (call.members, result)
}

/// The probe key of the slot of `key` (whose hash tag is `tag`): a key of
/// that slot that never exists (the tag and a suffix no counter key has).
/// A key without a hash tag is its own slot's probe.
fn probe_key(key: &[u8], tag: &[u8]) -> Vec<u8> {
    if tag.len() == key.len() {
        key.to_vec()
    } else {
        [b"{", tag, b"}", PROBE_SUFFIX].concat()
    }
}

/// The suffix of probe keys: no counter key ends its hash tag with it.
const PROBE_SUFFIX: &[u8] = b"floodgate:slot-probe";

/// Hands each job its operations' replies, in order; a job with an
/// operation in a failed call gets that call's error.
fn deliver(batch: &mut Vec<Job>, ops: &[Vec<LaneOp>], results: Vec<Done>) {
    let mut replies: Vec<Vec<Option<Vec<i64>>>> =
        ops.iter().map(|job| vec![None; job.len()]).collect();
    let mut failed: Vec<Option<redis::RedisError>> = vec![None; batch.len()];
    for (members, result) in results {
        match result {
            Ok(values) => {
                // The call checked the total length.
                let mut rest = values.as_slice();
                for (j, o) in members {
                    let n = op_at(ops, (j, o)).map_or(0, |op| op.reply_len);
                    let (value, tail) = rest.split_at_checked(n).unwrap_or((rest, &[]));
                    rest = tail;
                    if let Some(slot) = replies.get_mut(j).and_then(|r| r.get_mut(o)) {
                        *slot = Some(value.to_vec());
                    }
                }
            }
            Err(err) => {
                for (j, _) in members {
                    if let Some(slot) = failed.get_mut(j) {
                        *slot = Some(err.clone());
                    }
                }
            }
        }
    }
    for ((mut job, own), err) in batch.drain(..).zip(replies).zip(failed) {
        if !job.waited_for() {
            continue;
        }
        let answer = match err {
            Some(err) => Err(LaneError::from(err)),
            None => own
                .into_iter()
                .map(|r| r.ok_or_else(|| bad_reply("operation without reply".to_owned())))
                .collect::<Result<Vec<Vec<i64>>, _>>()
                .map(|replies| replies.concat())
                .map_err(LaneError::Redis),
        };
        job.answer(answer);
    }
}

/// Operation `o` of job `j`.
fn op_at(ops: &[Vec<LaneOp>], (j, o): At) -> Option<&LaneOp> {
    ops.get(j).and_then(|job| job.get(o))
}

/// The bytes Redis hashes to place an operation's key: between its first
/// `{` and the next `}` when non-empty, else the whole key. Equal tags,
/// equal slots.
fn hash_tag(cmd: &redis::Cmd) -> &[u8] {
    let key = key_of(cmd);
    key.iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = key.get(open + 1..)?;
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| rest.get(..close)).flatten()
        })
        .unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::{LaneOp, hash_tag, plan};
    use crate::store::redis::slots::{Owners, slot_of};

    fn op(key: &str) -> redis::Cmd {
        let mut cmd = redis::Cmd::new();
        cmd.arg(key).arg(5);
        cmd
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(hash_tag(&op("p:{d|k=v}f60:0")), b"d|k=v");
        assert_eq!(hash_tag(&op("{d|k=v}s1:0")), b"d|k=v");
        // An empty tag or none: the whole key is hashed.
        assert_eq!(hash_tag(&op("{}x")), b"{}x");
        assert_eq!(hash_tag(&op("plain")), b"plain");
        assert_eq!(hash_tag(&op("a{b")), b"a{b");
        // Only the first '{' counts.
        assert_eq!(hash_tag(&op("{a}{b}")), b"a");
    }

    fn job(keys: &[&str]) -> Vec<LaneOp> {
        keys.iter()
            .map(|key| LaneOp {
                algorithm: 1,
                reply_len: 2,
                cmd: op(key),
            })
            .collect()
    }

    /// Two nodes: slots below 8192 on one, the rest on the other.
    fn two_nodes() -> Owners {
        let range = |start: i64, end: i64, id: &str| {
            redis::Value::Array(vec![
                redis::Value::Int(start),
                redis::Value::Int(end),
                redis::Value::Array(vec![
                    redis::Value::BulkString(b"127.0.0.1".to_vec()),
                    redis::Value::Int(7000),
                    redis::Value::BulkString(id.as_bytes().to_vec()),
                ]),
            ])
        };
        Owners::parse(&redis::Value::Array(vec![
            range(0, 8_191, "a"),
            range(8_192, 16_383, "b"),
        ]))
        .unwrap()
    }

    #[test]
    fn a_round_is_one_call_per_node_and_every_operation_is_in_one() {
        // Keys whose tags fall on each side, several per side.
        let tags: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
        let keys: Vec<String> = tags.iter().map(|t| format!("p:{{{t}}}x")).collect();
        let batch: Vec<Vec<LaneOp>> = keys
            .chunks(3)
            .map(|c| job(&c.iter().map(String::as_str).collect::<Vec<_>>()))
            .collect();
        let owners = two_nodes();
        let calls = plan(&batch, Some(&owners));
        assert_eq!(calls.len(), 2, "one call per node");
        let mut seen: Vec<(usize, usize)> = calls.iter().flat_map(|c| c.members.clone()).collect();
        seen.sort_unstable();
        let all: Vec<(usize, usize)> = batch
            .iter()
            .enumerate()
            .flat_map(|(j, job)| (0..job.len()).map(move |o| (j, o)))
            .collect();
        assert_eq!(seen, all, "every operation once");
        for call in &calls {
            assert!(call.probes.is_some());
            let node = owners.of(call.slot);
            for &(j, o) in &call.members {
                let tag = hash_tag(&batch[j][o].cmd);
                assert_eq!(
                    owners.of(slot_of(tag)),
                    node,
                    "each call's keys on its node"
                );
            }
            // Arrival order kept within a call.
            assert!(call.members.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn probes_are_one_missing_key_per_slot_in_that_slot() {
        // One node serving every slot: one node call.
        let one_node = Owners::parse(&redis::Value::Array(vec![redis::Value::Array(vec![
            redis::Value::Int(0),
            redis::Value::Int(16_383),
            redis::Value::Array(vec![
                redis::Value::BulkString(b"127.0.0.1".to_vec()),
                redis::Value::Int(7000),
                redis::Value::BulkString(b"a".to_vec()),
            ]),
        ])]))
        .unwrap();
        let batch = vec![
            job(&["p:{a}f60:1", "p:{a}f3600:0"]),
            job(&["{b}s1:0", "plain"]),
        ];
        let calls = plan(&batch, Some(&one_node));
        assert_eq!(calls.len(), 1);
        let probes = calls[0].probes.as_ref().unwrap();
        let text: Vec<String> = probes
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        assert_eq!(
            text,
            [
                "{a}floodgate:slot-probe",
                "{b}floodgate:slot-probe",
                "plain"
            ]
        );
        for (probe, key) in probes.iter().zip(["{a}x", "{b}x", "plain"]) {
            assert_eq!(
                slot_of(hash_tag(&op(std::str::from_utf8(probe).unwrap()))),
                slot_of(hash_tag(&op(key)))
            );
        }
    }

    #[test]
    fn one_tag_or_no_table_goes_per_tag_with_keys_declared() {
        let batch = vec![job(&["{hot}a", "{hot}b"]), job(&["{hot}a"])];
        let calls = plan(&batch, Some(&two_nodes()));
        assert_eq!(calls.len(), 1);
        assert!(calls[0].probes.is_none());
        assert_eq!(calls[0].slot, slot_of(b"hot"));
        // Without a table: one call per tag.
        let batch = vec![job(&["{a}x", "{b}x"]), job(&["{a}y"])];
        let calls = plan(&batch, None);
        assert_eq!(calls.len(), 2);
        assert!(calls.iter().all(|c| c.probes.is_none()));
        let mut sizes: Vec<usize> = calls.iter().map(|c| c.members.len()).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [1, 2]);
    }
}
