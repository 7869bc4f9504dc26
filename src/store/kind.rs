//! The stores floodgate can run on, as one type: the embedded store,
//! Redis (with its per-second twin) or memcached.

use super::rlqs::{DemandRegistry, DemandReport, Grant, Member};
use super::{
    Batch, CounterId, Fetch, GivenBack, MemcacheStore, MemoryStore, Op, RedisStore, Settled, Store,
    StoreError, Unused,
};
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use std::future::Future;
use std::time::Duration;

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
    /// memcached, shared by every instance (fixed windows only).
    Memcache(MemcacheStore),
}

impl StoreKind {
    /// The embedded store, if that is what this is.
    pub fn as_memory(&self) -> Option<&MemoryStore> {
        match self {
            Self::Memory(store) => Some(store),
            Self::Redis { .. } | Self::Memcache(_) => None,
        }
    }

    /// What the embedded store holds (for `/metrics`); `None` for Redis.
    pub fn memory_stats(&self) -> Option<crate::metrics::store::MemoryStats> {
        self.as_memory().map(MemoryStore::stats)
    }

    /// Redis script calls sent and the requests they carried (both stores
    /// of `REDIS_PERSECOND` together); `None` for the other stores.
    pub fn call_stats(&self) -> Option<crate::metrics::store::CallStats> {
        match self {
            Self::Memory(_) | Self::Memcache(_) => None,
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

    /// Whether the store can take requests now (Redis: connected;
    /// memcached is dialled on demand, as the reference's client does).
    pub fn is_ready(&self) -> bool {
        match self {
            Self::Memory(_) | Self::Memcache(_) => true,
            Self::Redis { main, per_second } => {
                main.is_ready() && per_second.as_ref().is_none_or(RedisStore::is_ready)
            }
        }
    }

    /// Whether the store answers now (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`):
    /// Redis answers a PING within its call timeout, on every Redis; the
    /// embedded store always does; memcached: every server answers
    /// `version`.
    pub async fn answers(&self) -> bool {
        match self {
            Self::Memory(_) => true,
            Self::Memcache(store) => store.ping().await,
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
    /// stores keep their connections up and follow Sentinel; memcached
    /// asks its SRV record again (`MEMCACHE_SRV_REFRESH`).
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
            Self::Memcache(store) => store.maintain(shutdown).await,
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
            // The network stores' futures are boxed: unboxed, every
            // request's future (and so every hit answered in process: the
            // embedded store, a lease's block) would carry their size,
            // allocated and copied per request. They allocate per call
            // anyway.
            Self::Memcache(store) => Box::pin(store.execute_within(batch, now, deadline)).await,
            Self::Redis {
                main,
                per_second: None,
            } => Box::pin(main.execute_within(batch, now, deadline)).await,
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
            Self::Memcache(store) => store.peek(batch, now).await,
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

    fn leases(&self) -> bool {
        matches!(self, Self::Redis { .. })
    }

    fn in_process(&self) -> bool {
        matches!(self, Self::Memory(_))
    }

    async fn fetch(&self, fetches: &[Fetch]) -> Result<Vec<Outcome>, StoreError> {
        match self {
            Self::Memory(store) => store.fetch(fetches).await,
            // Boxed, as `execute_within` says.
            Self::Memcache(store) => Box::pin(store.fetch(fetches)).await,
            Self::Redis {
                main,
                per_second: None,
            } => main.fetch(fetches).await,
            Self::Redis {
                main,
                per_second: Some(second),
            } => {
                // Each fetch to its limit's store, the outcomes put back in
                // order.
                let order: Vec<bool> = fetches.iter().map(|f| is_one_second(&f.op.spec)).collect();
                let (fast, slow): (Vec<Fetch>, Vec<Fetch>) = fetches
                    .iter()
                    .cloned()
                    .partition(|f| is_one_second(&f.op.spec));
                let (fast, slow) = tokio::try_join!(second.fetch(&fast), main.fetch(&slow))?;
                Ok(in_order(order, fast, slow))
            }
        }
    }

    async fn settle(&self, fetches: Vec<Fetch>) -> Settled {
        match self {
            Self::Memory(_) | Self::Memcache(_) => Settled::default(),
            Self::Redis {
                main,
                per_second: None,
            } => main.settle(fetches).await,
            Self::Redis {
                main,
                per_second: Some(second),
            } => {
                // Each side settled on its own: one side unreachable leaves
                // only its fetches unsettled, and what the other found is
                // given back.
                let (fast, slow): (Vec<Fetch>, Vec<Fetch>) =
                    fetches.into_iter().partition(|f| is_one_second(&f.op.spec));
                let (mut settled, slow) = tokio::join!(second.settle(fast), main.settle(slow));
                settled.found.extend(slow.found);
                settled.unanswered.extend(slow.unanswered);
                settled
            }
        }
    }

    async fn give_back(&self, unused: Vec<Unused>) -> GivenBack {
        match self {
            Self::Memory(_) | Self::Memcache(_) => GivenBack::all(unused),
            Self::Redis {
                main,
                per_second: None,
            } => main.give_back(unused).await,
            Self::Redis {
                main,
                per_second: Some(second),
            } => {
                let (fast, slow): (Vec<Unused>, Vec<Unused>) =
                    unused.into_iter().partition(|u| is_one_second(&u.spec));
                let (mut given, slow) = tokio::join!(second.give_back(fast), main.give_back(slow));
                given.extend(slow);
                given
            }
        }
    }
}

impl DemandRegistry for StoreKind {
    async fn report_demand(
        &self,
        member: &str,
        reports: &[DemandReport],
        now: UnixMillis,
        stale: Duration,
    ) -> Result<Vec<Grant>, StoreError> {
        match self {
            Self::Memory(store) => store.report_demand(member, reports, now, stale).await,
            // The registry lives with the main counters.
            Self::Redis { main, .. } => main.report_demand(member, reports, now, stale).await,
            Self::Memcache(_) => Err(registry_needs_scripts()),
        }
    }

    async fn members(
        &self,
        id: &CounterId,
        now: UnixMillis,
        stale: Duration,
    ) -> Result<Vec<Member>, StoreError> {
        match self {
            Self::Memory(store) => store.members(id, now, stale).await,
            Self::Redis { main, .. } => main.members(id, now, stale).await,
            Self::Memcache(_) => Err(registry_needs_scripts()),
        }
    }
}

/// memcached has no scripts to update a bucket's members atomically: the
/// registry is not kept there (RLQS answers its no-assignment fallback).
const fn registry_needs_scripts() -> StoreError {
    StoreError::Config {
        reason: "the RLQS demand registry needs Redis or the embedded store, not memcached",
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

/// Whether `REDIS_PERSECOND` counts this operation: a one-second fixed
/// window.
fn is_one_second(spec: &Spec) -> bool {
    matches!(spec, Spec::FixedWindow { window, .. } if window.window_secs() == 1)
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
    let is_second = |op: &Op| is_one_second(&op.spec);
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
    Ok(in_order(order, fast, slow))
}

/// The answers of the one-second store (`fast`) and the main one (`slow`)
/// back in the order of the operations they answer (`order`: whether each
/// went to the one-second store).
fn in_order(order: Vec<bool>, fast: Vec<Outcome>, slow: Vec<Outcome>) -> Vec<Outcome> {
    let (mut fast, mut slow) = (fast.into_iter(), slow.into_iter());
    order
        .into_iter()
        .filter_map(|is_second| if is_second { fast.next() } else { slow.next() })
        .collect()
}
