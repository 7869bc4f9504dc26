//! The routed lane of a Cluster: each round, one call per hash tag through
//! the cluster client, which routes each call by its keys and follows MOVED
//! and ASK. It carries the operations the per-master lanes cannot place
//! (a slot the table does not know, a master that could not be dialled,
//! a call its master refused as not its own).

use super::cluster::hash_tag;
use super::{Job, LaneError, LaneOp, MAX_REQUESTS_PER_CALL, Waiting, batch_of};
use crate::store::redis::call::execute_batch;
use crate::store::redis::command::KeysIn;
use crate::store::redis::fault::Signals;
use crate::store::redis::reply::bad_reply;
use futures_util::future::join_all;
use redis::RedisResult;
use redis::cluster_async::ClusterConnection;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where one operation sits in a routed lane's round: (job, operation).
type At = (usize, usize);

/// One routed call: its operations, in arrival order.
type Call = Vec<At>;

/// A call's operations and its result: their flat replies, or the error.
type Done = (Vec<At>, RedisResult<Vec<i64>>);

/// The routed lane's task: each round, one call per hash tag through the
/// cluster client.
pub(super) async fn drive_routed(
    conn: ClusterConnection,
    jobs: mpsc::Receiver<Job>,
    signals: Arc<Signals>,
) {
    let mut waiting = Waiting::new(jobs);
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while waiting.take(&mut batch).await {
        // The operations, out of their jobs for the round: the calls read
        // them while the lane keeps the jobs' deadlines.
        let ops: Vec<Vec<LaneOp>> = batch
            .iter_mut()
            .map(|job| std::mem::take(&mut job.ops))
            .collect();
        let calls = per_tag(&ops);
        for call in &calls {
            signals.count_call(
                call.iter()
                    .map(|&(j, _)| j)
                    .fold(Vec::new(), |mut jobs, j| {
                        if !jobs.contains(&j) {
                            jobs.push(j);
                        }
                        jobs
                    })
                    .len(),
            );
        }
        let round = join_all(calls.into_iter().map(|call| send(&conn, &ops, call)));
        match waiting.await_call(round, &mut batch).await {
            Some(results) => {
                for (_, result) in &results {
                    if let Err(err) = result {
                        signals.failed(err);
                    }
                }
                deliver(&mut batch, &ops, results);
            }
            None => batch.clear(),
        }
    }
}

/// One call per hash tag, in arrival order within each.
pub(super) fn per_tag(ops: &[Vec<LaneOp>]) -> Vec<Call> {
    let mut tags: HashMap<&[u8], Call> = HashMap::new();
    for (j, job) in ops.iter().enumerate() {
        for (o, op) in job.iter().enumerate() {
            tags.entry(hash_tag(&op.cmd)).or_default().push((j, o));
        }
    }
    tags.into_values().collect()
}

/// Sends one routed call (keys declared: the client routes it by them).
async fn send(conn: &ClusterConnection, ops: &[Vec<LaneOp>], call: Call) -> Done {
    let members = call.iter().filter_map(|&at| op_at(ops, at));
    let mut conn = conn.clone();
    let (cmd, expected) = batch_of(members, KeysIn::Keys);
    let result = execute_batch(&mut conn, &cmd, expected).await;
    (call, result)
}

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
