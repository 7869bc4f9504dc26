//! The stores rules name (the stores file's, and `local`), in the places the
//! rules are loaded with and the limiter counts in: the named stores in
//! name order at places 1, 2, …, then `local` (this instance's embedded
//! store), which is the process-wide store itself when that is the
//! embedded store.

use super::{NamedKind, NamedStore};
use crate::config::StoreInfo;
use crate::limiter::StoreEntry;
use crate::store::{MemcacheStore, MemoryStore, RedisStore, StoreError, StoreKind};
use std::sync::Arc;

/// The name of this instance's embedded store.
pub const LOCAL_STORE: &str = "local";

/// The stores rules may name besides `default`, each with its place: what
/// rules are loaded with ([`crate::config::LoadOptions::stores`]).
pub fn store_catalog(named: &[NamedStore], default_is_memory: bool) -> Vec<StoreInfo> {
    let mut catalog: Vec<StoreInfo> = named
        .iter()
        .zip(1u8..)
        .map(|(store, index)| StoreInfo {
            name: store.name.clone(),
            index,
            fixed_windows_only: store.kind.fixed_windows_only(),
        })
        .collect();
    let local = if default_is_memory {
        0
    } else {
        u8::try_from(named.len() + 1).unwrap_or(u8::MAX)
    };
    catalog.push(StoreInfo {
        name: LOCAL_STORE.to_owned(),
        index: local,
        fixed_windows_only: false,
    });
    catalog
}

/// Opens the stores of [`store_catalog`], in its places (1, 2, …): Redis
/// connects in the background as the process-wide one does; memcached is
/// dialled here. `memory_max_bytes` is `local`'s budget.
///
/// # Errors
///
/// [`StoreError`] when a memcached store's servers cannot be found (its
/// SRV record).
pub async fn open_stores(
    named: &[NamedStore],
    default_is_memory: bool,
    memory_max_bytes: usize,
) -> Result<Vec<StoreEntry<StoreKind>>, StoreError> {
    let mut stores = Vec::with_capacity(named.len() + 1);
    for store in named {
        let kind = match &store.kind {
            NamedKind::Redis(config) => StoreKind::Redis {
                main: RedisStore::new(config.clone()),
                per_second: None,
            },
            NamedKind::Memcache(config) => {
                StoreKind::Memcache(MemcacheStore::connect(config.clone()).await?)
            }
            NamedKind::Memory { max_bytes } => {
                StoreKind::Memory(MemoryStore::with_snapshot(*max_bytes, None))
            }
        };
        stores.push(StoreEntry {
            name: Arc::from(store.name.as_str()),
            store: kind,
            failure_mode: store.failure_mode,
        });
    }
    if !default_is_memory {
        stores.push(StoreEntry {
            name: Arc::from(LOCAL_STORE),
            store: StoreKind::Memory(MemoryStore::with_snapshot(memory_max_bytes, None)),
            failure_mode: None,
        });
    }
    Ok(stores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_is_the_process_wide_store_when_that_is_the_embedded_one() {
        let named = crate::settings::parse_stores(
            "b:\n  type: memory\na:\n  type: memcache\n  host_port: 127.0.0.1:1\n",
        )
        .unwrap();
        let places = |memory: bool| -> Vec<(String, u8, bool)> {
            store_catalog(&named, memory)
                .into_iter()
                .map(|s| (s.name, s.index, s.fixed_windows_only))
                .collect()
        };
        assert_eq!(
            places(true),
            [
                ("a".to_owned(), 1, true),
                ("b".to_owned(), 2, false),
                ("local".to_owned(), 0, false)
            ]
        );
        assert_eq!(places(false)[2], ("local".to_owned(), 3, false));
    }
}
