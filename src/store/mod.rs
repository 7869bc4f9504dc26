//! Counter stores. A request becomes one [`Batch`]; a store executes it in one
//! round trip and reports each operation's [`Outcome`].
//!
//! Stores know nothing of descriptors or rules: they see escaped counter
//! identities, algorithm parameters and hit counts.

mod identity;
pub mod memory;

pub use identity::CounterId;
pub use memory::MemoryStore;

use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use std::future::Future;

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

/// Why a store could not execute a batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store is shutting down and takes no more work.
    #[error("store is shut down")]
    Closed,
}

impl StoreError {
    /// Whether retrying later may succeed (the store may come back).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Closed => false,
        }
    }
}

/// A place where counters live.
///
/// Implementations must apply each operation atomically: concurrent batches
/// touching the same counter never lose or double-count hits.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Executes every operation of `batch` at time `now`, returning one
    /// [`Outcome`] per operation in order.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached or refuses the batch;
    /// then nothing is known about which operations were applied.
    fn execute(
        &self,
        batch: Batch,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Vec<Outcome>, StoreError>> + Send;
}

/// The stores floodgate can run on, as one concrete type so the hot path
/// needs no dynamic dispatch.
#[derive(Debug, Clone)]
pub enum StoreKind {
    /// In-process counters: exact for one instance, lost on restart.
    Memory(MemoryStore),
}

impl StoreKind {
    /// The embedded store, if that is what this is.
    pub fn as_memory(&self) -> Option<&MemoryStore> {
        match self {
            Self::Memory(store) => Some(store),
        }
    }
}

impl Store for StoreKind {
    async fn execute(&self, batch: Batch, now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        match self {
            Self::Memory(store) => store.execute(batch, now).await,
        }
    }
}
