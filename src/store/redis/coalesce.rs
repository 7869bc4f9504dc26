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
//! Within a call, the fixed-window hits of every request on one counter go
//! as one increment of their sum, each request answered with the count
//! before its own hits (see [`merge`]): a hot descriptor costs Redis one
//! command per call, not one per request.
//!
//! On a Cluster each master has lanes of its own, over connections
//! floodgate dials to it directly (see [`cluster`]): requests on a hot key
//! share one call, as on standalone, and so do requests on many keys one
//! node serves; and a node that does not answer holds up only the
//! operations of its own slots.
//!
//! A call that provably never reached Redis (its connection was refused)
//! is sent once more: nothing of it was counted. A call whose bytes may
//! have been written is never sent again (see [`super::fault`]).
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

mod cluster;
mod merge;
mod routed;

pub(super) use cluster::ClusterLanes;

use super::call::{execute_batch, execute_on_node};
use super::command::{KeysIn, batch_cmd};
use super::fault::{Signals, is_unsent};
use merge::Merged;
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, timeout_at};

/// Consecutive requests that go to one lane before the next lane's turn.
/// Requests that arrive together (one connection's read) are decided one
/// after the other; on one lane they share a script call, are answered
/// together and leave in one write. Strict round robin would split them
/// over every lane, and their answers over as many writes.
pub(super) const LANE_RUN: usize = 32;

/// The index `0..n` for the next request: round robin over runs of
/// [`LANE_RUN`] requests.
pub(super) fn in_runs(next: &AtomicUsize, n: usize) -> usize {
    next.fetch_add(1, Ordering::Relaxed) / LANE_RUN % n.max(1)
}

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
fn batch_of<'a>(
    ops: impl Iterator<Item = &'a LaneOp> + Clone,
    keys_in: KeysIn<'_>,
) -> (redis::Cmd, usize) {
    let expected = ops.clone().map(|op| op.reply_len).sum();
    (
        batch_cmd(ops.map(|op| (op.algorithm, &op.cmd)), keys_in),
        expected,
    )
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

/// Where a lane sends its calls: one call per round, carrying every job.
pub(super) enum Target {
    /// A standalone or Sentinel-named server: the batch script, its keys
    /// declared. Boxed: one per lane, and far larger than a node's.
    Server(Box<super::dialled::Dialled>),
    /// One Cluster master dialled directly (see [`cluster`]).
    Node(cluster::Node),
}

impl Lane {
    /// A lane sending to `target`, with its task spawned on the current
    /// runtime. The task ends when the last clone of the lane is dropped.
    pub(super) fn spawn(target: Target, signals: Arc<Signals>) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(drive(target, jobs, signals));
        Self { queue }
    }

    /// A lane over the cluster client: one call per hash tag, routed and
    /// redirected by the client (operations of slots the node lanes cannot
    /// place), see [`routed`].
    pub(super) fn spawn_routed(conn: ClusterConnection, signals: Arc<Signals>) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(routed::drive_routed(conn, jobs, signals));
        Self { queue }
    }

    /// Hands jobs another lane could not serve to this one (a node lane's
    /// jobs of slots its node no longer serves): they keep their deadlines
    /// and callers; a full or closed queue answers them with an error.
    fn forward(&self, jobs: &mut Vec<Job>) {
        for job in jobs.drain(..) {
            if !job.waited_for() {
                continue;
            }
            if let Err(err) = self.queue.try_send(job) {
                let (mpsc::error::TrySendError::Full(mut job)
                | mpsc::error::TrySendError::Closed(mut job)) = err;
                job.answer(Err(lane_closed()));
            }
        }
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
async fn drive(mut target: Target, jobs: mpsc::Receiver<Job>, signals: Arc<Signals>) {
    let mut waiting = Waiting::new(jobs);
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_REQUESTS_PER_CALL);
    while waiting.take(&mut batch).await {
        signals.count_call(batch.len());
        let ops = batch.iter().flat_map(|job| job.ops.iter());
        let merged = Merged::of(ops.clone());
        let sent = merged.sent(ops);
        let (cmd, expected) = match &target {
            Target::Server(_) => batch_of(sent, KeysIn::Keys),
            Target::Node(node) => node.command(sent),
        };
        let result = waiting
            .await_call(send(&mut target, &cmd, expected), &mut batch)
            .await;
        match result {
            Some(Ok(Some(replies))) => merged.deliver(&mut batch, Ok(replies)),
            // Only a node lane answers so: its node no longer serves one
            // of the call's slots, and nothing was written.
            Some(Ok(None)) => match &target {
                Target::Node(node) => node.not_here(&mut batch),
                Target::Server(_) => merged.deliver(
                    &mut batch,
                    Err(LaneError::Redis(super::reply::bad_reply(
                        "NOTLOCAL from a standalone server".to_owned(),
                    ))),
                ),
            },
            Some(Err(err)) => {
                signals.failed(&err);
                if let Target::Node(node) = &target {
                    node.failed();
                }
                merged.deliver(&mut batch, Err(LaneError::from(err)));
            }
            None => batch.clear(),
        }
    }
}

/// Sends one call to `target`, and once more when it failed without
/// reaching Redis (its connection was refused: nothing was counted). The
/// connection started to dial afresh on the first failure, so the second
/// try goes on it. `None`: a node does not serve the call's slots.
async fn send(
    target: &mut Target,
    cmd: &redis::Cmd,
    expected: usize,
) -> RedisResult<Option<Vec<i64>>> {
    let mut tries = 0;
    loop {
        tries += 1;
        let result = match target {
            Target::Server(dialled) => match dialled.ready().await {
                Ok(conn) => {
                    let sent = execute_batch(conn, cmd, expected).await.map(Some);
                    if let Err(err) = &sent {
                        dialled.failed(err);
                    }
                    sent
                }
                // Nothing was sent: the connection could not be made.
                Err(err) => Err(err),
            },
            Target::Node(node) => execute_on_node(&mut node.conn, cmd, expected).await,
        };
        match result {
            Err(err) if tries < 2 && is_unsent(&err) => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LANE_RUN, in_runs};
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn requests_take_the_lanes_in_runs() {
        let next = AtomicUsize::new(0);
        let picks: Vec<usize> = (0..4 * LANE_RUN).map(|_| in_runs(&next, 2)).collect();
        let (first, rest) = picks.split_at(LANE_RUN);
        let (second, rest) = rest.split_at(LANE_RUN);
        assert!(first.iter().all(|&i| i == 0), "{picks:?}");
        assert!(second.iter().all(|&i| i == 1), "{picks:?}");
        assert!(rest.iter().take(LANE_RUN).all(|&i| i == 0), "{picks:?}");
        // One lane (or none): always the first.
        let next = AtomicUsize::new(0);
        assert!((0..100).all(|_| in_runs(&next, 1) == 0 && in_runs(&next, 0) == 0));
    }
}
