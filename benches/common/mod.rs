//! What several benchmarks build the same way.

use arc_swap::ArcSwap;
use floodgate::{Limiter, LimiterOptions};
use floodgate::{LoadOptions, Source, load_sources};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemoryStore, StoreKind};
use std::sync::Arc;

/// A limiter on the embedded store serving the rule file `rules`, on a
/// manual clock that never moves.
pub(crate) fn memory_limiter(rules: &str) -> Limiter<StoreKind> {
    let index = load_sources(
        &[Source {
            name: "bench.yaml".into(),
            text: rules.into(),
        }],
        &LoadOptions::default(),
    )
    .expect("bench rules are valid");
    Limiter::new(
        Arc::new(ArcSwap::from_pointee(index)),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_000))),
        LimiterOptions::default(),
    )
}
