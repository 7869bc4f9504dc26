//! Counter stores. A request becomes one [`Batch`]; a store executes it in one
//! round trip and reports each operation's [`Outcome`].
//!
//! Stores know nothing of descriptors or rules: they see escaped counter
//! identities, algorithm parameters and hit counts.

mod identity;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod rlqs;

pub use identity::CounterId;
pub use memory::{MemoryStore, SnapshotError};
pub use redis::{RedisConfig, RedisMode, RedisStore, RedisTls};

use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use std::future::Future;
use std::time::Duration;

/// One counter operation: count `hits` on the counter `id` as `spec` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Escaped identity of the counter (domain and descriptor entries).
    pub id: CounterId,
    /// Algorithm and limit.
    pub spec: Spec,
    /// Hits to add; 0 reads without consuming.
    pub hits: u64,
}

/// All counter operations of one request, executed in one round trip.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Operations, answered in this order.
    pub ops: Vec<Op>,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: when any operation would
    /// go over its limit, count nothing at all for this request. Each
    /// counter's check-and-count stays atomic; operations already counted
    /// are taken back, so a rejected request consumes no quota.
    pub stop_when_over: bool,
}

impl Batch {
    /// A batch with room for `n` operations.
    pub fn with_capacity(n: usize, stop_when_over: bool) -> Self {
        Self {
            ops: Vec::with_capacity(n),
            stop_when_over,
        }
    }

    /// Whether there is nothing to execute.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The answer for an operation whose hits were taken back: as if refused.
pub(crate) fn taken_back(op: &Op, outcome: Outcome, now: UnixMillis) -> Outcome {
    match op.spec {
        Spec::FixedWindow { window, limit } => window.refused(outcome.before, op.hits, limit, now),
        _ => Outcome {
            counted: false,
            remaining: outcome.remaining.saturating_add(op.hits),
            after: outcome.before,
            ..outcome
        },
    }
}

/// Why a store could not execute a batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No connection has been established yet (still connecting at start).
    #[error("store not connected yet")]
    NotConnected,
    /// The round trip did not finish within the deadline.
    #[error("store did not answer in time")]
    Timeout,
    /// Redis answered with an error or the connection failed.
    #[error("redis request failed")]
    Redis {
        /// Whether retrying later may succeed.
        transient: bool,
        /// The cause.
        #[source]
        source: ::redis::RedisError,
    },
    /// Redis answered something floodgate cannot read as a counter state.
    #[error("unexpected reply from redis: {detail}")]
    BadReply {
        /// What came back.
        detail: String,
    },
    /// A TLS certificate or key file cannot be read.
    #[error("cannot read redis tls file {path}")]
    TlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The store settings cannot work.
    #[error("invalid store settings: {reason}")]
    Config {
        /// What is wrong.
        reason: &'static str,
    },
}

impl From<::redis::RedisError> for StoreError {
    /// Decides once whether a Redis failure is transient: timeouts and
    /// dropped, refused or cluster connections are; script or protocol errors
    /// are not.
    fn from(source: ::redis::RedisError) -> Self {
        if source.kind() == ::redis::ErrorKind::UnexpectedReturnType {
            return Self::BadReply {
                detail: source.detail().unwrap_or_default().to_owned(),
            };
        }
        let transient = source.is_timeout()
            || source.is_connection_dropped()
            || source.is_connection_refusal()
            || source.is_io_error()
            || source.is_cluster_error()
            || matches!(
                source.kind(),
                ::redis::ErrorKind::Server(
                    ::redis::ServerErrorKind::ReadOnly
                        | ::redis::ServerErrorKind::MasterDown
                        | ::redis::ServerErrorKind::TryAgain
                        | ::redis::ServerErrorKind::ClusterDown
                )
            );
        Self::Redis { transient, source }
    }
}

impl StoreError {
    /// A short name of the kind of failure (for logs and their limits).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotConnected => "not_connected",
            Self::Timeout => "timeout",
            Self::Redis { .. } => "redis",
            Self::BadReply { .. } => "bad_reply",
            Self::TlsFile { .. } => "tls_file",
            Self::Config { .. } => "config",
        }
    }

    /// Whether retrying later may succeed (the store may come back).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::NotConnected | Self::Timeout => true,
            Self::Redis { transient, .. } => *transient,
            Self::Config { .. } | Self::TlsFile { .. } | Self::BadReply { .. } => false,
        }
    }
}

/// A place where counters live.
///
/// Implementations must apply each operation atomically: concurrent batches
/// touching the same counter never lose or double-count hits.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Executes every operation of `batch` at time `now`, returning one
    /// [`Outcome`] per operation in order, within the store's own deadline
    /// (Redis: `REDIS_TIMEOUT`).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached or refuses the batch;
    /// then nothing is known about which operations were applied.
    fn execute(
        &self,
        batch: Batch,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Vec<Outcome>, StoreError>> + Send {
        self.execute_within(batch, now, None)
    }

    /// As [`Store::execute`], answered within `deadline` (from now) at the
    /// latest: a caller's deadline, when it is sooner than the store's own.
    /// Stores keep it themselves (Redis: one timer per script call, not one
    /// per request); the embedded store answers at once and ignores it.
    ///
    /// # Errors
    ///
    /// As `execute`; [`StoreError::Timeout`] when the deadline passes.
    fn execute_within(
        &self,
        batch: Batch,
        now: UnixMillis,
        deadline: Option<Duration>,
    ) -> impl Future<Output = Result<Vec<Outcome>, StoreError>> + Send;

    /// What every operation of `batch` would answer if executed at `now`,
    /// without changing any counter (for `/explain`). Under
    /// `stop_when_over` each operation refuses as it would, but a batch
    /// that would be refused as a whole is not taken back: the caller
    /// takes back what was counted itself. On Redis, operations on the same
    /// counter in one batch each read the counter as it stands (the
    /// embedded store lets later ones see earlier ones, as a decision does).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached.
    fn peek(
        &self,
        batch: &Batch,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Vec<Outcome>, StoreError>> + Send;
}

/// The stores floodgate can run on, as one concrete type so the hot path
/// needs no dynamic dispatch.
#[derive(Debug, Clone)]
pub enum StoreKind {
    /// In-process counters: exact for one instance; kept across restarts
    /// only with a snapshot file (`MEMORY_STORE_SNAPSHOT_PATH`).
    Memory(MemoryStore),
    /// Redis, shared by every instance.
    Redis {
        /// Where every counter lives, or all but one-second windows when
        /// `per_second` is set.
        main: RedisStore,
        /// `REDIS_PERSECOND`: a separate Redis for one-second windows.
        per_second: Option<RedisStore>,
    },
}

impl StoreKind {
    /// The embedded store, if that is what this is.
    pub fn as_memory(&self) -> Option<&MemoryStore> {
        match self {
            Self::Memory(store) => Some(store),
            Self::Redis { .. } => None,
        }
    }

    /// What the embedded store holds (for `/metrics`); `None` for Redis.
    pub fn memory_stats(&self) -> Option<crate::metrics::store::MemoryStats> {
        self.as_memory().map(MemoryStore::stats)
    }

    /// Redis script calls sent and the requests they carried (both stores
    /// of `REDIS_PERSECOND` together); `None` for the embedded store.
    pub fn call_stats(&self) -> Option<crate::metrics::store::CallStats> {
        match self {
            Self::Memory(_) => None,
            Self::Redis { main, per_second } => {
                let mut stats = main.call_stats();
                if let Some(second) = per_second {
                    let more = second.call_stats();
                    stats.calls = stats.calls.saturating_add(more.calls);
                    stats.requests = stats.requests.saturating_add(more.requests);
                }
                Some(stats)
            }
        }
    }

    /// Whether the store can take requests now (Redis: connected).
    pub fn is_ready(&self) -> bool {
        match self {
            Self::Memory(_) => true,
            Self::Redis { main, per_second } => {
                main.is_ready() && per_second.as_ref().is_none_or(RedisStore::is_ready)
            }
        }
    }

    /// Whether the store answers now (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`):
    /// Redis answers a PING within its call timeout, on every Redis; the
    /// embedded store always does.
    pub async fn answers(&self) -> bool {
        match self {
            Self::Memory(_) => true,
            Self::Redis { main, per_second } => {
                main.ping().await
                    && match per_second {
                        Some(store) => store.ping().await,
                        None => true,
                    }
            }
        }
    }

    /// The store's own background work until `shutdown`: the embedded
    /// store reclaims ended windows every few seconds (by `clock`); Redis
    /// stores keep their connections up and follow Sentinel.
    pub async fn maintain(
        &self,
        clock: std::sync::Arc<dyn crate::clock::Clock>,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        match self {
            Self::Memory(store) => {
                tokio::join!(
                    store.sweep_until(std::sync::Arc::clone(&clock), shutdown.clone()),
                    store.snapshot_until(clock, shutdown)
                );
            }
            Self::Redis {
                main,
                per_second: None,
            } => main.maintain(shutdown).await,
            Self::Redis {
                main,
                per_second: Some(second),
            } => {
                tokio::join!(main.maintain(shutdown.clone()), second.maintain(shutdown));
            }
        }
    }
}

impl Store for StoreKind {
    async fn execute_within(
        &self,
        batch: Batch,
        now: UnixMillis,
        deadline: Option<Duration>,
    ) -> Result<Vec<Outcome>, StoreError> {
        match self {
            // Answers at once: no deadline to keep.
            Self::Memory(store) => store.execute(batch, now).await,
            Self::Redis {
                main,
                per_second: None,
            } => main.execute_within(batch, now, deadline).await,
            // Boxed: two stores' calls at once make a future twice the size
            // of one, and every request's future would carry that size
            // (allocated and copied per request) for a rare setup.
            Self::Redis {
                main,
                per_second: Some(second),
            } => {
                let split = split_per_second(main, second, batch, now, false);
                Box::pin(within(deadline, split)).await
            }
        }
    }

    async fn peek(&self, batch: &Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.peek(batch, now)),
            Self::Redis {
                main,
                per_second: None,
            } => main.peek(batch, now).await,
            Self::Redis {
                main,
                per_second: Some(second),
            } => split_per_second(main, second, batch.clone(), now, true).await,
        }
    }
}

/// `call`, bounded by `deadline` (from now) when there is one.
async fn within<T>(
    deadline: Option<Duration>,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match deadline {
        Some(deadline) => tokio::time::timeout(deadline, call)
            .await
            .unwrap_or(Err(StoreError::Timeout)),
        None => call.await,
    }
}

/// Sends one-second windows to `second` and the rest to `main`, both at
/// once, and puts the outcomes back in request order. With
/// `stop_when_over`, each Redis refuses its own part as a whole. With
/// `peek`, both are only read ([`Store::peek`]).
async fn split_per_second(
    main: &RedisStore,
    second: &RedisStore,
    batch: Batch,
    now: UnixMillis,
    peek: bool,
) -> Result<Vec<Outcome>, StoreError> {
    let is_second =
        |op: &Op| matches!(op.spec, Spec::FixedWindow { window, .. } if window.window_secs() == 1);
    let order: Vec<bool> = batch.ops.iter().map(is_second).collect();
    let (fast, slow): (Vec<Op>, Vec<Op>) = batch.ops.into_iter().partition(is_second);
    let stop_when_over = batch.stop_when_over;
    let run = |store: &RedisStore, ops: Vec<Op>| {
        let store = store.clone();
        async move {
            let batch = Batch {
                ops,
                stop_when_over,
            };
            if batch.is_empty() {
                Ok(Vec::new())
            } else if peek {
                store.peek(&batch, now).await
            } else {
                store.execute(batch, now).await
            }
        }
    };
    let (fast, slow) = tokio::try_join!(run(second, fast), run(main, slow))?;
    let (mut fast, mut slow) = (fast.into_iter(), slow.into_iter());
    Ok(order
        .into_iter()
        .filter_map(|is_second| if is_second { fast.next() } else { slow.next() })
        .collect())
}
