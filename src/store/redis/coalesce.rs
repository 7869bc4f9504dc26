//! Coalescing: the operations of every request that arrives while a
//! connection's script call is in flight go out together in its next call.
//!
//! Each pooled connection has one lane: a queue and a task that takes
//! everything queued, sends it as ONE batch-script call, hands each request
//! its own replies, and repeats. A request alone on an idle server is sent
//! at once (no timer ever waits for company); under load, one call carries
//! many requests, so Redis runs one script and floodgate writes one command
//! and reads one reply for all of them. Each request is still one round
//! trip, and its operations still run atomically inside one script.
//!
//! On a Cluster a script may only touch keys of one slot, so a lane's call
//! becomes one batch-script call per hash tag (every operation on one
//! counter shares its tag), sent concurrently and pipelined per node by the
//! cluster client: requests on a hot key share one call, as on standalone.
//!
//! A request whose caller gave up (deadline passed) before its turn is
//! dropped from the queue and counts nothing.

use super::command::batch_cmd;
use super::execute::{bad_reply, execute_batch};
use redis::RedisResult;
use redis::aio::ConnectionLike;
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// Most requests one script call carries; what queues beyond waits for the
/// next call. Bounds the size of a call and how long one script holds Redis.
const MAX_REQUESTS_PER_CALL: usize = 128;

/// Requests a lane queues before senders wait (back-pressure; the callers'
/// deadlines bound the wait).
const QUEUE_DEPTH: usize = 4_096;

/// One operation: its batch-script algorithm number and its EVALSHA command.
pub(super) type LaneOp = (u8, redis::Cmd);

/// Replies of one request: one list of integers per operation.
type Replies = RedisResult<Vec<Vec<i64>>>;

struct Job {
    ops: Vec<LaneOp>,
    reply: oneshot::Sender<Replies>,
}

/// The queue in front of one connection.
#[derive(Debug, Clone)]
pub(super) struct Lane {
    queue: mpsc::Sender<Job>,
}

impl Lane {
    /// A lane over a standalone (or Sentinel-named) connection, with its
    /// task spawned on the current runtime. The task ends when the last
    /// clone of the lane is dropped.
    pub(super) fn spawn<C>(conn: C) -> Self
    where
        C: ConnectionLike + Send + 'static,
    {
        let (queue, jobs) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(drive(conn, jobs));
        Self { queue }
    }

    /// A lane over a Cluster connection: one call per hash tag.
    pub(super) fn spawn_cluster<C>(conn: C) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let (queue, jobs) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(drive_cluster(conn, jobs));
        Self { queue }
    }

    /// Runs one request's operations (in one call, possibly shared with
    /// other requests') and returns their replies, in order.
    pub(super) async fn run(&self, ops: Vec<LaneOp>) -> Replies {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { ops, reply })
            .await
            .map_err(|_| lane_closed())?;
        answer.await.map_err(|_| lane_closed())?
    }
}

fn lane_closed() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "redis connection lane closed"))
}

/// The lane's task: one script call at a time, each carrying everything
/// that queued meanwhile.
async fn drive<C: ConnectionLike>(mut conn: C, mut jobs: mpsc::Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while jobs.recv_many(&mut batch, MAX_REQUESTS_PER_CALL).await > 0 {
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let cmd = batch_cmd(
            batch
                .iter()
                .flat_map(|job| job.ops.iter().map(|(algorithm, cmd)| (*algorithm, cmd))),
        );
        let result = execute_batch(&mut conn, &cmd).await;
        deliver(&mut batch, result);
    }
}

/// Hands each job its share of the call's replies (or the call's error).
fn deliver(batch: &mut Vec<Job>, result: Replies) {
    match result {
        Ok(replies) => {
            let expected: usize = batch.iter().map(|job| job.ops.len()).sum();
            if replies.len() != expected {
                let err = bad_reply(format!(
                    "{} replies for {expected} operations",
                    replies.len()
                ));
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(err.clone()));
                }
                return;
            }
            let mut replies = replies.into_iter();
            for job in batch.drain(..) {
                let own = replies.by_ref().take(job.ops.len()).collect();
                // A caller that gave up meanwhile no longer listens.
                let _ = job.reply.send(Ok(own));
            }
        }
        Err(err) => {
            for job in batch.drain(..) {
                let _ = job.reply.send(Err(err.clone()));
            }
        }
    }
}

/// The Cluster lane's task: everything queued, grouped by hash tag, one
/// concurrent call per tag.
async fn drive_cluster<C>(conn: C, mut jobs: mpsc::Receiver<Job>)
where
    C: ConnectionLike + Clone + Send + Sync,
{
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while jobs.recv_many(&mut batch, MAX_REQUESTS_PER_CALL).await > 0 {
        batch.retain(|job| !job.reply.is_closed());
        // (job, operation) positions per hash tag, in arrival order.
        let mut groups: HashMap<&[u8], Vec<(usize, usize)>> = HashMap::new();
        for (j, job) in batch.iter().enumerate() {
            for (o, (_, cmd)) in job.ops.iter().enumerate() {
                groups.entry(hash_tag(cmd)).or_default().push((j, o));
            }
        }
        let calls = groups.into_values().map(|members| {
            let cmd = batch_cmd(members.iter().filter_map(|&(j, o)| {
                let (algorithm, cmd) = batch.get(j)?.ops.get(o)?;
                Some((*algorithm, cmd))
            }));
            let mut conn = conn.clone();
            async move { (members, execute_batch(&mut conn, &cmd).await) }
        });
        let results = futures_util::future::join_all(calls).await;
        let mut replies: Vec<Vec<Option<Vec<i64>>>> =
            batch.iter().map(|job| vec![None; job.ops.len()]).collect();
        let mut failed: Vec<Option<redis::RedisError>> = vec![None; batch.len()];
        for (members, result) in results {
            match result {
                Ok(values) if values.len() == members.len() => {
                    for ((j, o), value) in members.into_iter().zip(values) {
                        if let Some(slot) = replies.get_mut(j).and_then(|r| r.get_mut(o)) {
                            *slot = Some(value);
                        }
                    }
                }
                other => {
                    let err = other.err().unwrap_or_else(|| {
                        bad_reply(format!(
                            "wrong reply count for {} operations",
                            members.len()
                        ))
                    });
                    for (j, _) in members {
                        if let Some(slot) = failed.get_mut(j) {
                            *slot = Some(err.clone());
                        }
                    }
                }
            }
        }
        for ((job, own), err) in batch.drain(..).zip(replies).zip(failed) {
            let answer = match err {
                Some(err) => Err(err),
                None => own
                    .into_iter()
                    .map(|r| r.ok_or_else(|| bad_reply("operation without reply".to_owned())))
                    .collect(),
            };
            let _ = job.reply.send(answer);
        }
    }
}

/// The bytes Redis hashes to place an operation's key: between its first
/// `{` and the next `}` when non-empty, else the whole key. Equal tags,
/// equal slots.
fn hash_tag(cmd: &redis::Cmd) -> &[u8] {
    // EVALSHA sha 1 key …
    let Some(redis::Arg::Simple(key)) = cmd.args_iter().nth(3) else {
        return &[];
    };
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
    use super::hash_tag;

    fn op(key: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg("sha").arg(1).arg(key).arg(5);
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
}
