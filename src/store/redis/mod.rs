//! The Redis store: standalone, Sentinel or Cluster, shared by every
//! floodgate instance so limits are global.
//!
//! Every check-and-count runs inside Redis as Lua (EVALSHA), never as a read
//! in the service followed by a write, so concurrent callers can never
//! over-admit. All operations of one request go out together: one batch
//! script call on standalone and Sentinel; on a Cluster, one concurrent
//! script call per descriptor (each in its own slot), which the cluster
//! client pipelines per node. Connections are multiplexed and shared by all
//! requests.
//!
//! The store knows counters, windows and limits, never descriptors.

mod keys;
mod scripts;

use super::{Batch, Op, Store, StoreError};
use crate::algorithm::fixed_window::Tally;
use crate::algorithm::sliding_log::WindowProbe;
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use arc_swap::ArcSwapOption;
use keys::Keys;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, ConnectionInfo, IntoConnectionInfo as _, RedisError, RedisResult};
use std::fmt::Write as _;
use std::hash::{BuildHasher as _, RandomState};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How Redis is deployed (`REDIS_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    /// One server (`REDIS_URL` = `host:port`, `redis://…` or a socket path).
    Single,
    /// A master found through Sentinel (`REDIS_URL` = `mastername,host:port,…`).
    Sentinel,
    /// A Redis Cluster (`REDIS_URL` = comma-separated seed nodes).
    Cluster,
}

/// Everything needed to reach Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Deployment kind.
    pub mode: RedisMode,
    /// Address(es), in the reference's `REDIS_URL` forms.
    pub url: String,
    /// `REDIS_AUTH`: `password` or `user:password`.
    pub auth: Option<String>,
    /// `REDIS_SENTINEL_AUTH`: password for the Sentinel nodes themselves.
    pub sentinel_auth: Option<String>,
    /// Multiplexed connections to open (standalone and Sentinel).
    pub pool_size: usize,
    /// Deadline of one request's round trip.
    pub timeout: Duration,
    /// Deadline of one connection attempt.
    pub connect_timeout: Duration,
    /// `CACHE_KEY_PREFIX`, prepended to every key.
    pub key_prefix: String,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: random extra expiry in `[0, N)`, so
    /// keys of one window do not all expire in the same instant.
    pub expiration_jitter_max_secs: u64,
    /// `REDIS_TLS` and its certificates; `None` is plaintext (unless the
    /// URL itself says `rediss://`).
    pub tls: Option<RedisTls>,
}

/// TLS to Redis (`REDIS_TLS`, `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`,
/// `REDIS_TLS_CLIENT_KEY`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM CA bundle to trust instead of the system's roots.
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate, for Redis servers that require one.
    pub client_cert: Option<PathBuf>,
    /// PEM key of the client certificate.
    pub client_key: Option<PathBuf>,
    /// Accept a certificate valid for another host name (e.g. managed Redis
    /// reached by IP). The chain is still verified.
    pub skip_hostname_verification: bool,
}

impl RedisTls {
    /// The certificates to hand the Redis client, read from their files.
    fn certificates(&self) -> Result<redis::TlsCertificates, StoreError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| StoreError::TlsFile {
                path: path.clone(),
                source,
            })
        };
        let client_tls = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert: self.ca_cert.as_ref().map(read).transpose()?,
        })
    }
}

impl RedisConfig {
    /// A standalone config for `url` with default timeouts and no prefix.
    pub fn single(url: impl Into<String>) -> Self {
        Self {
            mode: RedisMode::Single,
            url: url.into(),
            auth: None,
            sentinel_auth: None,
            pool_size: 2,
            timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            key_prefix: String::new(),
            expiration_jitter_max_secs: 0,
            tls: None,
        }
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

/// Replaces the password of every `scheme://user:password@host` in `url`.
fn redact(url: &str) -> String {
    url.split(',')
        .map(|part| match (part.find("://"), part.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                let userinfo = &part[scheme_end + 3..at];
                let user = userinfo.split(':').next().unwrap_or_default();
                format!("{}{user}:***{}", &part[..scheme_end + 3], &part[at..])
            }
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

enum Connection {
    Pool(Pool),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pool(pool) => {
                write!(f, "Pool({} connections to {})", pool.conns.len(), pool.addr)
            }
            Self::Cluster(_) => f.write_str("Cluster"),
        }
    }
}

struct Pool {
    addr: String,
    conns: Vec<ConnectionManager>,
    next: AtomicUsize,
}

impl Pool {
    fn pick(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len().max(1);
        // `conns` is never empty: `connect_pool` opens at least one.
        self.conns[i].clone()
    }
}

/// Redis-backed counters; clones share connections.
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: RedisConfig,
    keys: Keys,
    connection: ArcSwapOption<Connection>,
    /// Wakes requests waiting for the first connection.
    connected: tokio::sync::Notify,
    jitter_seed: RandomState,
    jitter_counter: AtomicU64,
}

/// Backoff bounds for (re)connecting at start.
const CONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often Sentinel is asked where the master is.
const SENTINEL_POLL: Duration = Duration::from_secs(1);

impl RedisStore {
    /// A store for `config`, not yet connected: call [`RedisStore::maintain`]
    /// (the server does) or [`RedisStore::connect`].
    pub fn new(config: RedisConfig) -> Self {
        let keys = Keys::new(config.key_prefix.clone());
        Self {
            inner: Arc::new(Inner {
                config,
                keys,
                connection: ArcSwapOption::empty(),
                connected: tokio::sync::Notify::new(),
                jitter_seed: RandomState::new(),
                jitter_counter: AtomicU64::new(0),
            }),
        }
    }

    /// Whether a connection is established (health reports NOT_SERVING
    /// until it is).
    pub fn is_ready(&self) -> bool {
        self.inner.connection.load().is_some()
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// Connects once.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when Redis (or Sentinel) cannot be reached in time.
    pub async fn connect(&self) -> Result<(), StoreError> {
        let connection = tokio::time::timeout(
            self.inner.config.connect_timeout.saturating_mul(2),
            open(&self.inner.config),
        )
        .await
        .map_err(|_| StoreError::Timeout)??;
        info!(redis.url = %self.inner.config.redacted_url(), redis.connection = ?connection, "redis connected");
        self.inner.connection.store(Some(Arc::new(connection)));
        self.inner.connected.notify_waiters();
        Ok(())
    }

    /// The connection, waiting for the first one when a request arrives
    /// before it (the caller's timeout bounds the wait).
    async fn connection(&self) -> Arc<Connection> {
        loop {
            let notified = self.inner.connected.notified();
            if let Some(connection) = self.inner.connection.load_full() {
                return connection;
            }
            notified.await;
        }
    }

    /// Keeps the store connected until `shutdown`: connects with backoff at
    /// start and, with Sentinel, follows the master when it moves. Once
    /// connected, standalone and Cluster connections reconnect by themselves.
    pub async fn maintain(&self, shutdown: CancellationToken) {
        let mut backoff = CONNECT_BACKOFF_MIN;
        while !self.is_ready() {
            match self.connect().await {
                Ok(()) => break,
                Err(err) => {
                    warn!(error = &err as &dyn std::error::Error, redis.url = %self.inner.config.redacted_url(), retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX), "redis not reachable");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = backoff.saturating_mul(2).min(CONNECT_BACKOFF_MAX);
        }
        if self.inner.config.mode != RedisMode::Sentinel {
            return;
        }
        let mut tick = tokio::time::interval(SENTINEL_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => self.follow_master().await,
            }
        }
    }

    async fn follow_master(&self) {
        let config = &self.inner.config;
        let master =
            match tokio::time::timeout(config.connect_timeout, sentinel_master(config)).await {
                Ok(Ok(master)) => master,
                Ok(Err(err)) => {
                    warn!(
                        error = &err as &dyn std::error::Error,
                        "sentinel query failed"
                    );
                    return;
                }
                Err(_) => {
                    warn!("sentinel query timed out");
                    return;
                }
            };
        let current = self.inner.connection.load();
        if let Some(Connection::Pool(pool)) = current.as_deref()
            && pool.addr == master.addr_text
        {
            return;
        }
        match connect_pool(config, master.info, master.addr_text.clone()).await {
            Ok(pool) => {
                info!(redis.master = %master.addr_text, "redis master changed; reconnected");
                self.inner
                    .connection
                    .store(Some(Arc::new(Connection::Pool(pool))));
            }
            Err(err) => {
                warn!(error = &err as &dyn std::error::Error, redis.master = %master.addr_text, "cannot connect to new redis master")
            }
        }
    }

    fn ttl_secs(&self, window_secs: u64) -> u64 {
        let max = self.inner.config.expiration_jitter_max_secs;
        let jitter = if max == 0 {
            0
        } else {
            let n = self.inner.jitter_counter.fetch_add(1, Ordering::Relaxed);
            self.inner.jitter_seed.hash_one(n) % max
        };
        window_secs.saturating_add(jitter)
    }

    /// A value unique to this call, for sliding-log members.
    fn nonce(&self) -> u64 {
        let n = self.inner.jitter_counter.fetch_add(1, Ordering::Relaxed);
        self.inner.jitter_seed.hash_one((n, "nonce"))
    }

    /// The EVALSHA command for one operation, and (when the batch may have
    /// to be refused as a whole) how to undo it. Arguments are written
    /// straight into the command: no intermediate strings.
    fn call(&self, op: &Op, now: UnixMillis, refuse_over: bool) -> (redis::Cmd, Option<Undo>) {
        let keys = &self.inner.keys;
        let now_us = now.0.saturating_mul(1_000);
        // `base_len`: for a sliding window, the key is its bucket base
        // followed by the bucket start, and the script needs the base too.
        let mut base_len = 0;
        let (script, key, undo_amount) = match op.spec {
            Spec::FixedWindow { window, .. } => (
                &*scripts::FIXED_WINDOW,
                keys.fixed_window(&op.id, window.window_secs(), window.window_start(now)),
                op.hits,
            ),
            Spec::SlidingWindow(sw) => {
                let mut key = keys.sliding_base(&op.id);
                base_len = key.len();
                if let Some(first) = sw.series().as_slice().first() {
                    // Infallible: writing to a String cannot fail.
                    let _ = write!(key, "{}:{}", first.bucket_secs, first.current_start(now));
                }
                (&*scripts::SLIDING_WINDOW, key, op.hits)
            }
            Spec::SlidingLog(_) => (&*scripts::SLIDING_LOG, keys.sliding_log(&op.id), 0),
            Spec::Gcra(gcra) => (
                &*scripts::GCRA,
                keys.gcra(&op.id, gcra.interval_us(), gcra.burst()),
                op.hits.saturating_mul(gcra.interval_us()),
            ),
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(1).arg(key.as_str());
        let mut log_prefix = None;
        match op.spec {
            Spec::FixedWindow { window, limit } => {
                cmd.arg(op.hits)
                    .arg(self.ttl_secs(window.window_secs()))
                    .arg(limit)
                    .arg(u8::from(refuse_over));
            }
            Spec::SlidingWindow(sw) => {
                let series = sw.series();
                cmd.arg(op.hits)
                    .arg(key.get(..base_len).unwrap_or_default())
                    .arg(u8::from(sw.count_rejected() && !refuse_over))
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
            }
            Spec::SlidingLog(sl) => {
                let prefix = format!("{now_us}:{:x}:", self.nonce());
                cmd.arg(op.hits)
                    .arg(now_us)
                    .arg(sl.longest_ms().max(1))
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
            }
        }
        let undo = if refuse_over {
            Some(match log_prefix {
                Some(prefix) => Undo::Members {
                    key,
                    prefix,
                    hits: op.hits,
                },
                None => Undo::Decrement {
                    keys: match op.spec {
                        Spec::SlidingWindow(sw) => {
                            let base = key.get(..base_len).unwrap_or_default();
                            sw.series()
                                .as_slice()
                                .iter()
                                .map(|s| {
                                    format!("{base}{}:{}", s.bucket_secs, s.current_start(now))
                                })
                                .collect()
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

    async fn run(
        &self,
        connection: &Connection,
        batch: Batch,
        now: UnixMillis,
    ) -> RedisResult<Vec<Outcome>> {
        let (cmds, undos): (Vec<redis::Cmd>, Vec<Option<Undo>>) = batch
            .ops
            .iter()
            .map(|op| self.call(op, now, batch.stop_when_over))
            .unzip();
        let replies = match connection {
            Connection::Pool(pool) if cmds.len() > 1 => {
                let algorithms = batch.ops.iter().map(|op| algorithm_number(&op.spec));
                execute_batch(&mut pool.pick(), &batch_cmd(algorithms.zip(&cmds))).await?
            }
            _ => execute(connection, cmds).await?,
        };
        if replies.len() != batch.ops.len() {
            return Err(bad_reply(format!(
                "{} replies for {} operations",
                replies.len(),
                batch.ops.len()
            )));
        }
        let mut outcomes: Vec<Outcome> = batch
            .ops
            .iter()
            .zip(&replies)
            .map(|(op, reply)| outcome(op, reply, now))
            .collect::<RedisResult<_>>()?;
        if batch.stop_when_over && outcomes.iter().any(|o| o.over_limit) {
            take_back(connection, &batch.ops, &undos, &mut outcomes, now).await?;
        }
        Ok(outcomes)
    }
}

/// Undoes the counted operations of a batch refused as a whole.
async fn take_back(
    connection: &Connection,
    ops: &[Op],
    undos: &[Option<Undo>],
    outcomes: &mut [Outcome],
    now: UnixMillis,
) -> RedisResult<()> {
    let undo: Vec<usize> = (0..ops.len())
        .filter(|&i| outcomes[i].counted && ops[i].hits > 0)
        .collect();
    let cmds: Vec<redis::Cmd> = undo
        .iter()
        .filter_map(|&i| undos[i].as_ref())
        .map(|undo| {
            let mut cmd = redis::cmd("EVALSHA");
            match undo {
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
        })
        .collect();
    if cmds.is_empty() {
        return Ok(());
    }
    execute(connection, cmds).await?;
    for &i in &undo {
        outcomes[i] = super::taken_back(&ops[i], outcomes[i], now);
    }
    Ok(())
}

/// Runs EVALSHA commands in one round trip: one pipeline on a standalone or
/// Sentinel connection; concurrent commands on a Cluster (each routed to its
/// key's node, pipelined per node by the client). Commands that meet
/// NOSCRIPT (Redis restarted, failed over or flushed its scripts) are run
/// again, alone, once the scripts are loaded: the others already counted.
async fn execute(connection: &Connection, cmds: Vec<redis::Cmd>) -> RedisResult<Vec<Vec<i64>>> {
    let values = match connection {
        Connection::Pool(pool) => {
            let mut conn = pool.pick();
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            let mut values: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
            let missing = noscript(&values);
            if !missing.is_empty() {
                load_scripts(&mut conn).await?;
                let mut again = redis::pipe();
                again.ignore_errors();
                for (i, cmd) in pipe.cmd_iter().enumerate() {
                    if missing.contains(&i) {
                        again.add_command(cmd.clone());
                    }
                }
                let retried: Vec<redis::Value> = again.query_async(&mut conn).await?;
                for (i, value) in missing.into_iter().zip(retried) {
                    values[i] = value;
                }
            }
            values
        }
        Connection::Cluster(cluster) => {
            let cmds = &cmds;
            let run = |i: usize| {
                let mut conn = cluster.clone();
                async move { cmds[i].query_async::<redis::Value>(&mut conn).await }
            };
            let mut results = futures_util::future::join_all((0..cmds.len()).map(run)).await;
            let missing: Vec<usize> = results
                .iter()
                .enumerate()
                .filter(|(_, r)| matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)))
                .map(|(i, _)| i)
                .collect();
            if !missing.is_empty() {
                load_scripts(&mut cluster.clone()).await?;
                let retried = futures_util::future::join_all(missing.iter().map(|&i| run(i))).await;
                for (i, result) in missing.into_iter().zip(retried) {
                    results[i] = result;
                }
            }
            return results
                .into_iter()
                .map(|r| r.and_then(|value| integers(&value)))
                .collect();
        }
    };
    values
        .into_iter()
        .map(|value| match value {
            redis::Value::ServerError(err) => Err(RedisError::from(err)),
            value => integers(&value),
        })
        .collect()
}

/// The batch script's number of an algorithm.
const fn algorithm_number(spec: &Spec) -> u8 {
    match spec {
        Spec::FixedWindow { .. } => 1,
        Spec::SlidingWindow(_) => 2,
        Spec::SlidingLog(_) => 3,
        Spec::Gcra(_) => 4,
    }
}

/// One batch-script call for per-operation EVALSHA commands
/// (`EVALSHA sha 1 key args…`): their keys as KEYS, their arguments behind
/// the algorithm number and count.
fn batch_cmd<'a>(ops: impl Iterator<Item = (u8, &'a redis::Cmd)> + Clone) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts::BATCH.get_hash()).arg(ops.clone().count());
    // Arguments of an operation's command: EVALSHA, sha, 1, key, then its own.
    for (_, op) in ops.clone() {
        if let Some(redis::Arg::Simple(key)) = op.args_iter().nth(3) {
            cmd.arg(key);
        }
    }
    for (algorithm, op) in ops {
        let args: Vec<&[u8]> = op
            .args_iter()
            .skip(4)
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes),
                // Only SCAN-style commands carry other kinds of argument.
                _ => None,
            })
            .collect();
        cmd.arg(algorithm).arg(args.len());
        for arg in args {
            cmd.arg(arg);
        }
    }
    cmd
}

/// Runs one batch-script call, loading the scripts once on NOSCRIPT (a
/// NOSCRIPT call ran nothing, so running it again counts nothing twice).
async fn execute_batch(
    conn: &mut ConnectionManager,
    cmd: &redis::Cmd,
) -> RedisResult<Vec<Vec<i64>>> {
    let value = match cmd.query_async::<redis::Value>(conn).await {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            load_scripts(conn).await?;
            cmd.query_async::<redis::Value>(conn).await?
        }
        other => other?,
    };
    match value {
        redis::Value::Array(replies) => replies.iter().map(integers).collect(),
        other => Err(bad_reply(format!("batch reply {other:?}"))),
    }
}

/// Positions of the replies that are NOSCRIPT errors.
fn noscript(values: &[redis::Value]) -> Vec<usize> {
    values
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            matches!(v, redis::Value::ServerError(err)
                if err.kind() == Some(redis::ServerErrorKind::NoScript))
        })
        .map(|(i, _)| i)
        .collect()
}

async fn load_scripts<C: redis::aio::ConnectionLike>(conn: &mut C) -> RedisResult<()> {
    for script in scripts::all() {
        script.prepare_invoke().load_async(conn).await?;
    }
    Ok(())
}

/// A script reply as integers: an integer, or an array of integers.
/// Anything else is an unexpected reply, never read as zero.
fn integers(value: &redis::Value) -> RedisResult<Vec<i64>> {
    match value {
        redis::Value::Int(n) => Ok(vec![*n]),
        redis::Value::Array(items) => items
            .iter()
            .map(|item| match item {
                redis::Value::Int(n) => Ok(*n),
                other => Err(bad_reply(format!("array item {other:?}"))),
            })
            .collect(),
        other => Err(bad_reply(format!("{other:?}"))),
    }
}

/// The error of a script reply floodgate cannot read (a script from another
/// version, a proxy in between): a typed store error, answered by the
/// failure policy.
fn bad_reply(detail: String) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        detail,
    ))
}

/// How to undo one counted operation of a refused batch.
#[derive(Debug)]
enum Undo {
    /// DECRBY the keys (counters, the current bucket of each series, TATs).
    Decrement { keys: Vec<String>, amount: u64 },
    /// ZREM the request's members, `prefix` followed by 1..=hits (sliding
    /// log); the script rebuilds them, so the command stays small.
    Members {
        key: String,
        prefix: String,
        hits: u64,
    },
}

/// Reads a script reply: the same pure functions as the memory store turn
/// the state Redis saw into the answer. A reply of the wrong length is an
/// error, never a fresh window.
fn outcome(op: &Op, reply: &[i64], now: UnixMillis) -> RedisResult<Outcome> {
    let expected = match op.spec {
        Spec::FixedWindow { .. } => 3,
        Spec::SlidingWindow(sw) => 1 + sw.buckets(),
        Spec::SlidingLog(sl) => 1 + 2 * sl.limits().len(),
        Spec::Gcra(_) => 2,
    };
    if reply.len() != expected {
        return Err(bad_reply(format!(
            "{} integers where {expected} were expected",
            reply.len()
        )));
    }
    let at = |i: usize| reply.get(i).copied().unwrap_or(0);
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(match op.spec {
        Spec::FixedWindow { window, limit } => {
            let (before, after) = (unsigned(at(0)), unsigned(at(1)));
            if at(2) == 1 {
                window.outcome(Tally { before, after }, limit, now, true)
            } else {
                window.refused(before, op.hits, limit, now)
            }
        }
        Spec::SlidingWindow(sw) => {
            let counts: Vec<u64> = reply.iter().skip(1).map(|&v| unsigned(v)).collect();
            sw.outcome(&counts, op.hits, at(0) == 1, now)
        }
        Spec::SlidingLog(sl) => {
            let probes: Vec<WindowProbe> = reply
                .get(1..)
                .unwrap_or_default()
                .chunks_exact(2)
                .map(|pair| WindowProbe {
                    count: pair.first().map_or(0, |&v| unsigned(v)),
                    at_us: pair.get(1).and_then(|&v| u64::try_from(v).ok()),
                })
                .collect();
            sl.outcome(&probes, op.hits, at(0) == 1, now)
        }
        Spec::Gcra(gcra) => {
            let stored = u64::try_from(at(1)).ok();
            let (_, mut outcome) = gcra.decide(stored, now, op.hits);
            outcome.counted = at(0) == 1;
            outcome
        }
    })
}

impl Store for RedisStore {
    async fn execute(&self, batch: Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        let call = async {
            let connection = self.connection().await;
            self.run(&connection, batch, now).await
        };
        match tokio::time::timeout(self.inner.config.timeout, call).await {
            Ok(result) => result.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout),
        }
    }
}

/// Parses one address in the reference's forms: `host:port`, a URL
/// (`redis://`, `rediss://`, `unix://`), or a unix socket path. With `tls`,
/// a bare `host:port` is reached over TLS.
fn connection_info(
    addr: &str,
    auth: Option<&str>,
    tls: Option<&RedisTls>,
) -> RedisResult<ConnectionInfo> {
    let addr = addr.trim();
    let info = if addr.contains("://") {
        addr.into_connection_info()?
    } else if addr.starts_with('/') {
        format!("unix://{addr}").into_connection_info()?
    } else {
        match tls {
            Some(tls) if tls.skip_hostname_verification => format!("rediss://{addr}/#insecure"),
            Some(_) => format!("rediss://{addr}"),
            None => format!("redis://{addr}"),
        }
        .into_connection_info()?
    };
    Ok(match auth.filter(|a| !a.is_empty()) {
        None => info,
        Some(auth) => {
            let mut settings = info.redis_settings().clone();
            settings = match auth.split_once(':') {
                Some((user, password)) => settings.set_username(user).set_password(password),
                None => settings.set_password(auth),
            };
            info.set_redis_settings(settings)
        }
    })
}

async fn open(config: &RedisConfig) -> Result<Connection, StoreError> {
    match config.mode {
        RedisMode::Single => {
            let info = connection_info(&config.url, config.auth.as_deref(), config.tls.as_ref())?;
            let addr = redact(&config.url);
            Ok(Connection::Pool(connect_pool(config, info, addr).await?))
        }
        RedisMode::Sentinel => {
            let master = sentinel_master(config).await?;
            Ok(Connection::Pool(
                connect_pool(config, master.info, master.addr_text).await?,
            ))
        }
        RedisMode::Cluster => {
            let seeds = config
                .url
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| connection_info(s, None, config.tls.as_ref()))
                .collect::<RedisResult<Vec<_>>>()?;
            let mut builder = ClusterClientBuilder::new(seeds)
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.timeout)
                .retries(2);
            if let Some(tls) = &config.tls {
                builder = builder
                    .certs(tls.certificates()?)
                    .danger_accept_invalid_hostnames(tls.skip_hostname_verification);
            }
            if let Some(auth) = config.auth.as_deref().filter(|a| !a.is_empty()) {
                builder = match auth.split_once(':') {
                    Some((user, password)) => builder.username(user).password(password),
                    None => builder.password(auth),
                };
            }
            let client = builder.build()?;
            Ok(Connection::Cluster(client.get_async_connection().await?))
        }
    }
}

async fn connect_pool(
    config: &RedisConfig,
    info: ConnectionInfo,
    addr: String,
) -> Result<Pool, StoreError> {
    let client = match &config.tls {
        Some(tls) => Client::build_with_tls(info, tls.certificates()?)?,
        None => Client::open(info)?,
    };
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_secs(1));
    let mut conns = Vec::with_capacity(config.pool_size.max(1));
    for _ in 0..config.pool_size.max(1) {
        conns.push(
            ConnectionManager::new_with_config(client.clone(), manager_config.clone()).await?,
        );
    }
    // Load the scripts up front so the first requests do not pay for it.
    if let Some(conn) = conns.first_mut() {
        for script in scripts::all() {
            script.prepare_invoke().load_async(conn).await?;
        }
    }
    Ok(Pool {
        addr,
        conns,
        next: AtomicUsize::new(0),
    })
}

struct Master {
    info: ConnectionInfo,
    addr_text: String,
}

/// Asks the Sentinel nodes, in order, where the master is.
async fn sentinel_master(config: &RedisConfig) -> Result<Master, StoreError> {
    let mut parts = config.url.split(',').map(str::trim);
    let name = parts
        .next()
        .filter(|n| !n.is_empty())
        .ok_or(StoreError::Config {
            reason: "sentinel REDIS_URL must be 'mastername,host:port[,host:port…]'",
        })?;
    let mut last_error = None;
    for node in parts.filter(|p| !p.is_empty()) {
        let attempt = async {
            let info = connection_info(node, config.sentinel_auth.as_deref(), None)?;
            let client = Client::open(info)?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let (host, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query_async(&mut conn)
                .await?;
            Ok::<_, RedisError>((host, port))
        };
        match tokio::time::timeout(config.connect_timeout, attempt).await {
            Ok(Ok((host, port))) => {
                let addr_text = format!("{host}:{port}");
                let info =
                    connection_info(&addr_text, config.auth.as_deref(), config.tls.as_ref())?;
                return Ok(Master { info, addr_text });
            }
            Ok(Err(err)) => last_error = Some(StoreError::from(err)),
            Err(_) => last_error = Some(StoreError::Timeout),
        }
    }
    Err(last_error.unwrap_or(StoreError::Config {
        reason: "sentinel REDIS_URL names no sentinel node",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::FixedWindow;
    use crate::algorithm::fixed_window::is_over_limit;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(
            redact("rediss://:secret@a:1,redis://b:2"),
            "rediss://:***@a:1,redis://b:2"
        );
        assert_eq!(redact("127.0.0.1:6379"), "127.0.0.1:6379");
    }

    #[test]
    fn reference_address_forms_parse() {
        let info = connection_info("127.0.0.1:6379", Some("user:pw"), None).unwrap();
        assert_eq!(info.addr().to_string(), "127.0.0.1:6379");
        assert_eq!(info.redis_settings().username(), Some("user"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        let info = connection_info("redis://h:1", Some("pw"), None).unwrap();
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().username(), None);
        let info = connection_info("/var/run/redis.sock", None, None).unwrap();
        assert!(info.addr().to_string().contains("redis.sock"));
        assert!(connection_info("redis://[bad", None, None).is_err());
    }

    #[test]
    fn jitter_stays_below_the_maximum() {
        let mut config = RedisConfig::single("127.0.0.1:1");
        config.expiration_jitter_max_secs = 5;
        let store = RedisStore::new(config);
        for _ in 0..200 {
            let ttl = store.ttl_secs(60);
            assert!((60..65).contains(&ttl), "{ttl}");
        }
        let none = RedisStore::new(RedisConfig::single("127.0.0.1:1"));
        assert_eq!(none.ttl_secs(60), 60);
    }

    #[test]
    fn fixed_window_outcome_matches_memory_semantics() {
        let now = UnixMillis::from_secs(1_230);
        let op = Op {
            id: crate::store::CounterId::new("d", [("k", "v")]),
            spec: Spec::FixedWindow {
                window: FixedWindow::new(60),
                limit: 5,
            },
            hits: 2,
        };
        let o = outcome(&op, &[3, 5, 1], now).unwrap();
        assert_eq!(
            (o.over_limit, o.remaining, o.reset.as_secs()),
            (false, 0, 30)
        );
        let o = outcome(&op, &[4, 6, 0], now).unwrap();
        assert!(o.over_limit && !o.counted);
        assert!(is_over_limit(o.after, 5));
    }

    #[test]
    fn unexpected_replies_are_typed_errors_never_fresh_windows() {
        let now = UnixMillis::from_secs(1_230);
        let op = |spec| Op {
            id: crate::store::CounterId::new("d", [("k", "v")]),
            spec,
            hits: 1,
        };
        let fixed = op(Spec::FixedWindow {
            window: FixedWindow::new(60),
            limit: 5,
        });
        let log = op(Spec::SlidingLog(crate::algorithm::SlidingLog::new(
            crate::algorithm::Limits::new([(5, 1_000), (9, 60_000)]),
        )));
        let gcra = op(Spec::Gcra(crate::algorithm::Gcra::new(5, 1_000, 5)));
        for (op, reply) in [
            (&fixed, &[][..]),
            (&fixed, &[1, 2][..]),
            (&fixed, &[1, 2, 1, 0][..]),
            (&log, &[1, 0, -1][..]),
            (&gcra, &[1][..]),
        ] {
            let err = StoreError::from(outcome(op, reply, now).unwrap_err());
            assert!(
                matches!(err, StoreError::BadReply { .. }),
                "{reply:?}: {err:?}"
            );
            assert!(!err.is_transient());
        }
        assert!(outcome(&log, &[1, 0, -1, 0, -1], now).is_ok());
        for value in [
            redis::Value::Nil,
            redis::Value::Okay,
            redis::Value::BulkString(b"12".to_vec()),
            redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Nil]),
            redis::Value::Array(vec![redis::Value::Array(vec![])]),
        ] {
            let err = StoreError::from(integers(&value).unwrap_err());
            assert!(matches!(err, StoreError::BadReply { .. }), "{err:?}");
        }
        assert_eq!(
            integers(&redis::Value::Array(vec![
                redis::Value::Int(3),
                redis::Value::Int(-1)
            ]))
            .unwrap(),
            vec![3, -1]
        );
    }
}
