//! The stores a limiter counts in besides its own (`STORES_FILE`, and
//! `local`): each limit's operations go to the store its rule names
//! (`store: NAME`), a request's operations on several stores are sent to
//! all of them at once, and a store that fails answers by its own
//! `failure_mode` for the limits on it alone.

use super::lease::Leases;
use super::{FailureMode, Limiter};
use crate::algorithm::Outcome;
use crate::clock::UnixMillis;
use crate::metrics::store::NamedStoreStats;
use crate::store::{Batch, Store, StoreError};
use std::sync::Arc;

/// The name of the process-wide store.
pub const DEFAULT_STORE: &str = "default";

/// A store rules name, with what the limiter keeps for it.
#[derive(Debug)]
pub(super) struct Named<S> {
    pub(super) name: Arc<str>,
    pub(super) store: S,
    /// Blocks of its leased limits, when it keeps leases.
    pub(super) leases: Option<Leases>,
    /// Its `failure_mode` (else `FAILURE_MODE`'s).
    pub(super) failure_mode: Option<FailureMode>,
}

/// One store of a limiter, as the decision sees it.
#[derive(Debug)]
pub(super) struct StoreRef<'a, S> {
    pub(super) store: &'a S,
    pub(super) leases: Option<&'a Leases>,
    pub(super) failure_mode: FailureMode,
    pub(super) stats: Option<&'a NamedStoreStats>,
}

impl<S> Clone for StoreRef<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for StoreRef<'_, S> {}

/// A store to add to a limiter ([`Limiter::with_stores`]).
#[derive(Debug)]
pub struct StoreEntry<S> {
    /// The name rules give it (`store: NAME`).
    pub name: Arc<str>,
    /// The store.
    pub store: S,
    /// Its `failure_mode`; `None`: `FAILURE_MODE`'s.
    pub failure_mode: Option<FailureMode>,
}

impl<S: Store> Limiter<S> {
    /// Counts the limits whose rules name a store (`store: NAME`) in
    /// `stores`: the `i`-th is the store at place `i + 1` (rules are
    /// loaded with the same places, [`crate::config::StoreInfo`]).
    #[must_use]
    pub fn with_stores(mut self, stores: Vec<StoreEntry<S>>) -> Self {
        self.metrics
            .stores
            .name_all(stores.iter().map(|s| Arc::clone(&s.name)));
        self.others = stores
            .into_iter()
            .map(|entry| Named {
                leases: entry.store.leases().then(Leases::default),
                name: entry.name,
                store: entry.store,
                failure_mode: entry.failure_mode,
            })
            .collect();
        self
    }

    /// The store at place `at` (0: the limiter's own), or `None`.
    pub(super) fn store_at(&self, at: u8) -> Option<StoreRef<'_, S>> {
        if at == 0 {
            return Some(StoreRef {
                store: &self.store,
                leases: self.leases.as_ref(),
                failure_mode: self.options.failure_mode,
                stats: self.metrics.stores.get(0),
            });
        }
        let named = self.others.get(usize::from(at) - 1)?;
        Some(StoreRef {
            store: &named.store,
            leases: named.leases.as_ref(),
            failure_mode: named.failure_mode.unwrap_or(self.options.failure_mode),
            stats: self.metrics.stores.get(at),
        })
    }

    /// The name of the store at place `at`.
    pub(crate) fn store_name(&self, at: u8) -> &str {
        match at {
            0 => DEFAULT_STORE,
            _ => self
                .others
                .get(usize::from(at) - 1)
                .map_or(DEFAULT_STORE, |n| &n.name),
        }
    }

    /// Every store but the limiter's own, with its name and place.
    pub fn named_stores(&self) -> impl Iterator<Item = (u8, &str, &S)> {
        self.others
            .iter()
            .zip(1u8..)
            .map(|(n, at)| (at, &*n.name, &n.store))
    }

    /// Every store's leases, with the store that keeps them.
    pub(super) fn all_leases(&self) -> impl Iterator<Item = (&S, &Leases, u8)> {
        std::iter::once((&self.store, self.leases.as_ref()))
            .chain(self.others.iter().map(|n| (&n.store, n.leases.as_ref())))
            .zip(0u8..)
            .filter_map(|((store, leases), at)| Some((store, leases?, at)))
    }

    /// Reads `batch` without counting ([`Store::peek`]), each operation on
    /// the store at its place in `at` (one per operation), the outcomes
    /// in the batch's order.
    ///
    /// # Errors
    ///
    /// The first store that cannot be read.
    pub(super) async fn peek_routed(
        &self,
        batch: &Batch,
        at: &[u8],
        now: UnixMillis,
    ) -> Result<Vec<Outcome>, StoreError> {
        if at.iter().all(|&a| a == 0) {
            return self.store.peek(batch, now).await;
        }
        let mut places: Vec<u8> = at.to_vec();
        places.sort_unstable();
        places.dedup();
        let mut answers: Vec<(u8, std::vec::IntoIter<Outcome>)> = Vec::new();
        for place in places {
            let part = Batch {
                ops: batch
                    .ops
                    .iter()
                    .zip(at)
                    .filter(|&(_, &a)| a == place)
                    .map(|(op, _)| op.clone())
                    .collect(),
                stop_when_over: batch.stop_when_over,
            };
            let store = self
                .store_at(place)
                .ok_or(StoreError::Config {
                    reason: "a rule names a store this instance does not have",
                })?
                .store;
            answers.push((place, store.peek(&part, now).await?.into_iter()));
        }
        Ok(at
            .iter()
            .filter_map(|a| {
                answers
                    .iter_mut()
                    .find(|(place, _)| place == a)
                    .and_then(|(_, outcomes)| outcomes.next())
            })
            .collect())
    }
}
