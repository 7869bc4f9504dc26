//! Counter stores. A request becomes one [`Batch`]; a store executes it in one
//! round trip and reports each operation's [`Outcome`].
//!
//! Stores know nothing of descriptors or rules: they see escaped counter
//! identities, algorithm parameters and hit counts.

mod identity;
mod kind;
pub(crate) mod memcache;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod rlqs;

pub use identity::CounterId;
pub use kind::StoreKind;
pub use memcache::{MemcacheConfig, MemcacheServers, MemcacheStore, MemcacheTls};
pub use memory::{MemoryStore, SnapshotError, SnapshotRead};
pub use redis::{RedisConfig, RedisMode, RedisStore, RedisTls};
pub(crate) use redis::{TableLogLine, TableWrite, TableWritten};

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
    /// A leased limit's operation (`lease: true`, on Redis): besides
    /// `hits`, take up to this many more for the caller to admit locally,
    /// never more than half of what remains after `hits` (reported in
    /// [`Outcome::leased`]). A leased operation that is refused counts
    /// nothing, whatever the algorithm. Stores that keep no leases ignore
    /// it. `None`: not leased.
    pub lease: Option<u64>,
}

/// A lease's block fetch (the background fetch's: `hits` 0, `lease` the
/// block wanted), named by a token unique to it. Redis marks what the
/// fetch took under its token, so a fetch whose answer never came (past
/// `REDIS_TIMEOUT`, the connection lost) is settled later: its block given
/// back, or the fetch kept from ever taking one ([`Store::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// The leased operation.
    pub op: Op,
    /// Unique to this fetch (never 0).
    pub token: u64,
    /// An earlier fetch of the same lease that was answered: its fence is
    /// no longer needed and goes (so each lease keeps about one).
    pub forget: Option<u64>,
    /// When it was sent: names the window or bucket of its block.
    pub at: UnixMillis,
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

    /// Whether `op` is refused, counting nothing, when over its limit:
    /// under `stop_when_over`, every operation but a candidate (shadow)
    /// limit's, which neither refuses the request nor is taken back with it.
    pub fn refuses(&self, op: &Op) -> bool {
        self.stop_when_over && !op.id.is_candidate()
    }

    /// Whether the request is refused as a whole by its `outcomes` (one
    /// per operation): an operation that [`Batch::refuses`] went over its
    /// limit, so what the others counted is taken back.
    pub fn refused_by(&self, outcomes: &[Outcome]) -> bool {
        self.ops
            .iter()
            .zip(outcomes)
            .any(|(op, o)| o.over_limit && self.refuses(op))
    }
}

/// Unused hits of a lease's block, given back to the window or bucket they
/// were taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unused {
    /// The counter the block was taken on.
    pub id: CounterId,
    /// Its algorithm and limit.
    pub spec: Spec,
    /// Hits to give back.
    pub hits: u64,
    /// When the block was taken (names its window or bucket).
    pub taken_at: UnixMillis,
    /// GCRA: the TAT the block left (`Outcome::tat_us`); it comes back
    /// only while the bucket's TAT is still this one.
    pub tat_us: u64,
    /// Names this give-back (never 0): the store runs it at most once,
    /// however often it is sent, so one whose answer never came is sent
    /// again with the same token. A settled fetch's block is given back
    /// under the fetch's own token, so settling it twice gives it back
    /// once.
    pub token: u64,
}

/// What [`Store::settle`] learned of fetches that failed.
#[derive(Debug, Default)]
pub struct Settled {
    /// The fetches that ran, with what each took: to give back.
    pub found: Vec<(Fetch, Outcome)>,
    /// The fetches the store did not answer for: still unsettled (each may
    /// yet take its block). The others ran, or never will.
    pub unanswered: Vec<Fetch>,
}

/// What [`Store::give_back`] did with leases' unused hits.
#[derive(Debug, Default)]
pub struct GivenBack {
    /// Given back (or their counter had expired: nothing left to give).
    pub back: Vec<Unused>,
    /// Kept counted: a GCRA bucket counted on since the block was taken.
    pub kept: Vec<Unused>,
    /// Not answered (Redis unreachable, or past `REDIS_TIMEOUT`): each may
    /// or may not have run, and is sent again with its token.
    pub unanswered: Vec<Unused>,
}

impl GivenBack {
    /// Everything given back, as stores that keep no leases say.
    pub fn all(unused: Vec<Unused>) -> Self {
        Self {
            back: unused,
            ..Self::default()
        }
    }

    /// Adds `other`'s blocks to this one's.
    pub fn extend(&mut self, other: Self) {
        self.back.extend(other.back);
        self.kept.extend(other.kept);
        self.unanswered.extend(other.unanswered);
    }
}

/// The answer for an operation whose hits were taken back: as if refused.
/// A lease's block stays taken: only the request's own hits are undone.
pub(crate) fn taken_back(op: &Op, outcome: Outcome, now: UnixMillis) -> Outcome {
    match op.spec {
        Spec::FixedWindow { window, limit } => Outcome {
            leased: outcome.leased,
            ..window.refused(outcome.before, op.hits, limit, now)
        },
        // One slot, whatever the hits.
        Spec::Concurrency(_) => Outcome {
            counted: false,
            remaining: outcome.remaining.saturating_add(1),
            after: outcome.before,
            ..outcome
        },
        _ => Outcome {
            counted: false,
            remaining: outcome.remaining.saturating_add(op.hits),
            after: outcome.before,
            // GCRA: the block (if any) now ends where the request's hits
            // began.
            tat_us: match op.spec {
                Spec::Gcra(gcra) => outcome
                    .tat_us
                    .saturating_sub(op.hits.saturating_mul(gcra.interval_us())),
                _ => outcome.tat_us,
            },
            ..outcome
        },
    }
}

/// The random extra expiry of a fixed window's key (Redis and memcached):
/// `[0, max)` seconds (`EXPIRATION_JITTER_MAX_SECONDS`), and below the
/// window's own length. Jitter spreads the expiries of keys created
/// together (every descriptor's key at each window's start) over the
/// next window; spread over one window length they are already even, and
/// each further second only keeps a dead key (its window is over) in
/// memory: with the default 300, a per-second key would live 150.5 s
/// on average.
pub(crate) fn expiry_jitter_secs(max: u64, window_secs: u64) -> u64 {
    let max = max.min(window_secs);
    if max == 0 {
        0
    } else {
        rand::random_range(0..max)
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
    /// memcached answered with an error or the connection failed.
    #[error("memcached request failed")]
    Memcache {
        /// Whether retrying later may succeed.
        transient: bool,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The DNS SRV record of the memcached servers gave no server.
    #[error("no memcached server from the SRV record {name}: {detail}")]
    Srv {
        /// The record.
        name: String,
        /// What DNS answered.
        detail: String,
    },
    /// Redis answered something floodgate cannot read as a counter state.
    #[error("unexpected reply from redis: {detail}")]
    BadReply {
        /// What came back.
        detail: String,
    },
    /// A TLS certificate or key file cannot be read.
    #[error("cannot read tls file {path}")]
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
            Self::Memcache { .. } => "memcache",
            Self::Srv { .. } => "srv",
            Self::BadReply { .. } => "bad_reply",
            Self::TlsFile { .. } => "tls_file",
            Self::Config { .. } => "config",
        }
    }

    /// Whether retrying later may succeed (the store may come back).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::NotConnected | Self::Timeout | Self::Srv { .. } => true,
            Self::Redis { transient, .. } | Self::Memcache { transient, .. } => *transient,
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

    /// Whether leased operations ([`Op::lease`]) take blocks here: only on
    /// a store other instances share (Redis). Elsewhere `lease: true`
    /// changes nothing.
    fn leases(&self) -> bool {
        false
    }

    /// Whether a batch is answered in this process, with no round trip to
    /// time (the embedded store).
    fn in_process(&self) -> bool {
        false
    }

    /// Runs leases' block fetches, one [`Outcome`] each, in order (its
    /// block in [`Outcome::leased`]); the fetches of one call share their
    /// `at`. Stores that keep no leases run them as one batch.
    ///
    /// # Errors
    ///
    /// As [`Store::execute`]: then each fetch may or may not have taken
    /// its block, until [`Store::settle`] says.
    fn fetch(
        &self,
        fetches: &[Fetch],
    ) -> impl Future<Output = Result<Vec<Outcome>, StoreError>> + Send {
        let now = fetches.first().map_or(UnixMillis(0), |f| f.at);
        let batch = Batch {
            ops: fetches.iter().map(|f| f.op.clone()).collect(),
            stop_when_over: false,
        };
        self.execute(batch, now)
    }

    /// Settles fetches that failed ([`Store::fetch`]): each either took
    /// its block, returned here with the outcome it got (for the caller to
    /// give back under the fetch's token), or is kept from ever taking one.
    /// Settling is idempotent: a settle whose answer was lost (it may have
    /// run) is simply sent again, and finds the same block. Stores without
    /// leases have nothing to settle.
    fn settle(&self, fetches: Vec<Fetch>) -> impl Future<Output = Settled> + Send {
        let _ = fetches;
        std::future::ready(Settled::default())
    }

    /// Gives back the unused hits of leases' blocks, each to the window or
    /// bucket it was taken from (a counter that has expired since is left
    /// alone, never recreated), each at most once whatever number of times
    /// its token is sent. A GCRA block comes back only while its bucket's
    /// TAT is still the one it left. A store that cannot be reached leaves
    /// the blocks unanswered, to send again.
    fn give_back(&self, unused: Vec<Unused>) -> impl Future<Output = GivenBack> + Send {
        std::future::ready(GivenBack::all(unused))
    }
}
