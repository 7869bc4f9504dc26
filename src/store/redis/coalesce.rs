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
//! A request whose caller gave up, or whose deadline passed, before its turn
//! is dropped from the queue and counts nothing.
//!
//! Deadlines are the lane's job, not a timer per request: each job carries
//! its deadline (`REDIS_TIMEOUT`, or the caller's when sooner). While a call
//! runs, the lane keeps taking queued jobs in, and one timer is set to the
//! earliest deadline of every job it holds (on the call or waiting for the
//! next): when it fires, exactly the jobs past their deadline are answered
//! with a timeout, the others wait on (a caller with a short deadline never
//! fails the others), and a call no job waits for any more is abandoned.
//! So every job is answered by its deadline, with one timer per call.

use super::command::{batch_cmd, key_of};
use super::execute::{bad_reply, execute_batch};
use redis::RedisError;
use redis::aio::ConnectionLike;
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, timeout_at};

/// Most requests one script call carries; what queues beyond waits for the
/// next call. Bounds the size of a call and how long one script holds Redis.
const MAX_REQUESTS_PER_CALL: usize = 128;

/// Requests a lane's channel holds before senders wait. The lane drains it
/// into its own list all the time (while a call runs too, so it can keep
/// their deadlines): it fills only when the lane's task cannot run, and a
/// sender then waits for room by its deadline.
const QUEUE_DEPTH: usize = 4_096;

/// One operation as the batch script takes it.
#[derive(Debug)]
pub(super) struct LaneOp {
    /// The batch script's algorithm number.
    pub(super) algorithm: u8,
    /// How many integers the algorithm replies.
    pub(super) reply_len: usize,
    /// `key args…`.
    pub(super) cmd: redis::Cmd,
}

/// Replies of one request: its operations' integers, one after the other.
type Replies = Result<Vec<i64>, LaneError>;

/// The batch command and the reply length of operations.
fn batch_of<'a>(ops: impl Iterator<Item = &'a LaneOp> + Clone) -> (redis::Cmd, usize) {
    let expected = ops.clone().map(|op| op.reply_len).sum();
    (batch_cmd(ops.map(|op| (op.algorithm, &op.cmd))), expected)
}

/// How many integers a request's operations reply, together.
fn replies_len(ops: &[LaneOp]) -> usize {
    ops.iter().map(|op| op.reply_len).sum()
}

/// Why a lane could not answer a request.
#[derive(Debug, Clone)]
pub(super) enum LaneError {
    /// Redis failed the call (or the lane closed).
    Redis(RedisError),
    /// The request's deadline passed before its call answered.
    TimedOut,
}

impl From<RedisError> for LaneError {
    /// The connection's own response timeout (set to `REDIS_TIMEOUT`) is
    /// the same deadline as the lane's: one kind of error for both.
    fn from(err: RedisError) -> Self {
        if err.is_timeout() {
            Self::TimedOut
        } else {
            Self::Redis(err)
        }
    }
}

struct Job {
    ops: Vec<LaneOp>,
    /// Taken when the job is answered early (its deadline passed while its
    /// call ran); the job keeps its place so replies stay aligned.
    reply: Option<oneshot::Sender<Replies>>,
    deadline: Instant,
}

impl Job {
    /// Whether someone still waits for this job's answer.
    fn waited_for(&self) -> bool {
        self.reply.as_ref().is_some_and(|reply| !reply.is_closed())
    }

    fn answer(&mut self, replies: Replies) {
        if let Some(reply) = self.reply.take() {
            // A caller that gave up meanwhile no longer listens.
            let _ = reply.send(replies);
        }
    }
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
    /// other requests') and returns their replies, in order, by `deadline`.
    pub(super) async fn run(&self, ops: Vec<LaneOp>, deadline: Instant) -> Replies {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            ops,
            reply: Some(reply),
            deadline,
        };
        match self.queue.try_send(job) {
            Ok(()) => {}
            // A full queue (thousands waiting): wait for room, by the
            // deadline (the only per-request timer, and only here).
            Err(mpsc::error::TrySendError::Full(job)) => {
                // Boxed: rare, and a timer would triple the size of every
                // request's future.
                Box::pin(timeout_at(deadline, self.queue.send(job)))
                    .await
                    .map_err(|_| LaneError::TimedOut)?
                    .map_err(|_| lane_closed())?;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(lane_closed()),
        }
        // The lane answers every job by its deadline (see the module note).
        answer.await.map_err(|_| lane_closed())?
    }
}

fn lane_closed() -> LaneError {
    LaneError::Redis(RedisError::from((
        redis::ErrorKind::Io,
        "redis connection lane closed",
    )))
}

/// Removes the jobs no longer waited for or past their deadline, answering
/// the late ones; whether any is left.
fn keep_live(jobs: &mut Vec<Job>) -> bool {
    let now = Instant::now();
    for mut late in jobs.extract_if(.., |job| !job.waited_for() || job.deadline <= now) {
        late.answer(Err(LaneError::TimedOut));
    }
    !jobs.is_empty()
}

/// The jobs a lane holds: the next call's, taken from the queue while the
/// current call runs, so their deadlines are kept too.
struct Waiting {
    jobs: mpsc::Receiver<Job>,
    next: Vec<Job>,
    /// Whether the queue may still bring jobs (some lane clone is alive).
    open: bool,
}

impl Waiting {
    fn new(jobs: mpsc::Receiver<Job>) -> Self {
        Self {
            jobs,
            next: Vec::with_capacity(MAX_REQUESTS_PER_CALL),
            open: true,
        }
    }

    /// The next call's jobs (at most [`MAX_REQUESTS_PER_CALL`], still
    /// waited for) into `batch`, waiting for the queue when none is held;
    /// `false` once the queue is closed and drained.
    async fn take(&mut self, batch: &mut Vec<Job>) -> bool {
        loop {
            if self.next.is_empty()
                && (!self.open
                    || self
                        .jobs
                        .recv_many(&mut self.next, MAX_REQUESTS_PER_CALL)
                        .await
                        == 0)
            {
                return false;
            }
            let n = self.next.len().min(MAX_REQUESTS_PER_CALL);
            batch.extend(self.next.drain(..n));
            if keep_live(batch) {
                return true;
            }
        }
    }

    /// Waits for `call` while taking queued jobs in, answering with a
    /// timeout each job (on the call or waiting) whose deadline passes
    /// meanwhile: one timer, at the earliest deadline held. `None` once no
    /// job on the call is waited for any more (the call is abandoned; the
    /// connection discards its reply).
    async fn await_call<F: Future>(&mut self, call: F, batch: &mut [Job]) -> Option<F::Output> {
        let mut call = std::pin::pin!(call);
        let earliest = |batch: &[Job], next: &[Job]| {
            batch
                .iter()
                .filter(|job| job.waited_for())
                .chain(next)
                .map(|job| job.deadline)
                .min()
        };
        let mut deadline = earliest(batch, &self.next)?;
        let timer = tokio::time::sleep_until(deadline);
        let mut timer = std::pin::pin!(timer);
        loop {
            let held = self.next.len();
            tokio::select! {
                biased;
                output = call.as_mut() => return Some(output),
                // No cap: every held job's deadline is kept, and expired
                // jobs leave, so callers' deadlines bound the list.
                n = self.jobs.recv_many(&mut self.next, MAX_REQUESTS_PER_CALL), if self.open => {
                    self.open = n > 0;
                    let arrived = self.next.get(held..).unwrap_or_default();
                    if let Some(soonest) = arrived.iter().map(|job| job.deadline).min()
                        && soonest < deadline
                    {
                        deadline = soonest;
                        timer.as_mut().reset(deadline);
                    }
                }
                () = timer.as_mut() => {
                    let now = Instant::now();
                    for job in batch.iter_mut().filter(|job| job.deadline <= now) {
                        job.answer(Err(LaneError::TimedOut));
                    }
                    keep_live(&mut self.next);
                    if !batch.iter().any(Job::waited_for) {
                        return None;
                    }
                    deadline = earliest(batch, &self.next)?;
                    timer.as_mut().reset(deadline);
                }
            }
        }
    }
}

/// The lane's task: one script call at a time, each carrying everything
/// that queued meanwhile.
async fn drive<C: ConnectionLike>(mut conn: C, jobs: mpsc::Receiver<Job>) {
    let mut waiting = Waiting::new(jobs);
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while waiting.take(&mut batch).await {
        let (cmd, expected) = batch_of(batch.iter().flat_map(|job| job.ops.iter()));
        let call = execute_batch(&mut conn, &cmd, expected);
        match waiting.await_call(call, &mut batch).await {
            Some(result) => deliver(&mut batch, result.map_err(LaneError::from)),
            None => batch.clear(),
        }
    }
}

/// Hands each job its share of the call's replies (or the call's error);
/// `execute_batch` checked the length.
fn deliver(batch: &mut Vec<Job>, result: Replies) {
    match result {
        Ok(replies) => {
            let mut rest = replies.as_slice();
            for mut job in batch.drain(..) {
                let (own, tail) = rest
                    .split_at_checked(replies_len(&job.ops))
                    .unwrap_or((rest, &[]));
                rest = tail;
                if job.waited_for() {
                    job.answer(Ok(own.to_vec()));
                }
            }
        }
        Err(err) => {
            for mut job in batch.drain(..) {
                job.answer(Err(err.clone()));
            }
        }
    }
}

/// The Cluster lane's task: everything queued, grouped by hash tag, one
/// concurrent call per tag.
async fn drive_cluster<C>(conn: C, jobs: mpsc::Receiver<Job>)
where
    C: ConnectionLike + Clone + Send + Sync,
{
    let mut waiting = Waiting::new(jobs);
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while waiting.take(&mut batch).await {
        // (job, operation) positions per hash tag, in arrival order.
        let mut groups: HashMap<&[u8], Vec<(usize, usize)>> = HashMap::new();
        for (j, job) in batch.iter().enumerate() {
            for (o, op) in job.ops.iter().enumerate() {
                groups.entry(hash_tag(&op.cmd)).or_default().push((j, o));
            }
        }
        let calls: Vec<_> = groups
            .into_values()
            .map(|members| {
                let (cmd, expected) = batch_of(members.iter().filter_map(|&at| op_at(&batch, at)));
                (members, cmd, expected)
            })
            .collect();
        let calls = calls.into_iter().map(|(members, cmd, expected)| {
            let mut conn = conn.clone();
            async move { (members, execute_batch(&mut conn, &cmd, expected).await) }
        });
        let Some(results) = waiting
            .await_call(futures_util::future::join_all(calls), &mut batch)
            .await
        else {
            batch.clear();
            continue;
        };
        let mut replies: Vec<Vec<Option<Vec<i64>>>> =
            batch.iter().map(|job| vec![None; job.ops.len()]).collect();
        let mut failed: Vec<Option<RedisError>> = vec![None; batch.len()];
        for (members, result) in results {
            match result {
                Ok(values) => {
                    // `execute_batch` checked the total length.
                    let mut rest = values.as_slice();
                    for (j, o) in members {
                        let n = op_at(&batch, (j, o)).map_or(0, |op| op.reply_len);
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
}

/// Operation `o` of job `j`.
fn op_at(batch: &[Job], (j, o): (usize, usize)) -> Option<&LaneOp> {
    batch.get(j).and_then(|job| job.ops.get(o))
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
    use super::hash_tag;

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
}
