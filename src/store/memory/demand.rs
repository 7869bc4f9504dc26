//! The embedded store's RLQS demand registry: buckets in an LRU, each
//! member's demand and grant updated under one lock, so grants computed by
//! `algorithm::quota_split` never add up to more than the budget.

use super::MemoryStore;
use crate::algorithm::quota_split as split;
use crate::clock::UnixMillis;
use crate::store::rlqs::{
    DemandRegistry, DemandReport, Grant, MAX_MEMBERS, Member, demand_milli, live, millis,
};
use crate::store::{CounterId, StoreError};
use lru::LruCache;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

/// Most buckets the embedded store tracks; the least recently reported are
/// forgotten past it (their members start again from no demand).
pub(crate) const MAX_MEMORY_BUCKETS: usize = 100_000;

/// Most members the embedded store tracks over all its buckets (about
/// 100 bytes each): past it the least recently reported buckets are
/// forgotten, as past [`MAX_MEMORY_BUCKETS`]. A forgotten bucket's grants
/// are no longer known, so until its assignments expire its Envoys may
/// together hold more than the budget: the price of a bounded memory.
pub(crate) const MAX_MEMORY_MEMBERS: usize = 200_000;

#[derive(Debug, Clone, Copy)]
struct MemberState {
    demand_milli: u64,
    units: u64,
    last_seen: UnixMillis,
}

/// The embedded store's registry: buckets in an LRU of
/// [`MAX_MEMORY_BUCKETS`], each updated under one lock.
#[derive(Debug)]
pub(crate) struct MemoryRegistry {
    buckets: Mutex<Buckets>,
    max_members: usize,
}

#[derive(Debug)]
struct Buckets {
    lru: LruCache<CounterId, HashMap<String, MemberState>>,
    /// Members over all buckets.
    members: usize,
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        Self::with_capacity(MAX_MEMORY_BUCKETS)
    }
}

impl MemoryRegistry {
    /// A registry of at most `buckets` buckets.
    pub(crate) fn with_capacity(buckets: usize) -> Self {
        Self::with_limits(buckets, MAX_MEMORY_MEMBERS)
    }

    /// A registry of at most `buckets` buckets and `members` members.
    pub(crate) fn with_limits(buckets: usize, members: usize) -> Self {
        Self {
            buckets: Mutex::new(Buckets {
                lru: LruCache::new(NonZeroUsize::new(buckets).unwrap_or(NonZeroUsize::MIN)),
                members: 0,
            }),
            max_members: members.max(1),
        }
    }

    /// Number of buckets held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.lock().lru.len()
    }

    /// Number of members held over all buckets.
    #[cfg(test)]
    fn members_held(&self) -> usize {
        self.buckets.lock().members
    }

    fn report(&self, member: &str, report: &DemandReport, now: UnixMillis, stale: u64) -> Grant {
        let mut guard = self.buckets.lock();
        let buckets = &mut *guard;
        // Taken out and put back, so it becomes the most recently used.
        let mut members = buckets.lru.pop(&report.id).unwrap_or_default();
        let before = members.len();
        members.retain(|name, state| {
            name == member || state.last_seen.0.saturating_add(stale) > now.0
        });
        let previous = members.get(member).map(|state| state.last_seen);
        let others = members.len() - usize::from(previous.is_some());
        let grant = if report.leave {
            members.remove(member);
            Grant {
                units: 0,
                members: others as u64,
                admitted: true,
            }
        } else if others >= MAX_MEMBERS {
            Grant {
                units: 0,
                members: others as u64,
                admitted: false,
            }
        } else {
            let mine = demand_milli(report.requests, previous, now);
            let mut held = 0_u64;
            let mut demands = Vec::with_capacity(others + 1);
            demands.push(mine);
            for (name, state) in members.iter() {
                if name != member {
                    held = held.saturating_add(state.units);
                    demands.push(state.demand_milli);
                }
            }
            let target = split::targets(&demands).first().copied().unwrap_or(0);
            let units = split::grant(target, held);
            members.insert(
                member.to_owned(),
                MemberState {
                    demand_milli: mine,
                    units,
                    last_seen: now,
                },
            );
            Grant {
                units,
                members: demands.len() as u64,
                admitted: true,
            }
        };
        buckets.members = buckets.members.saturating_sub(before) + members.len();
        if !members.is_empty()
            && let Some((_, evicted)) = buckets.lru.push(report.id.clone(), members)
        {
            buckets.members = buckets.members.saturating_sub(evicted.len());
        }
        while buckets.members > self.max_members {
            let Some((_, evicted)) = buckets.lru.pop_lru() else {
                break;
            };
            buckets.members = buckets.members.saturating_sub(evicted.len());
        }
        grant
    }

    fn members(&self, id: &CounterId, now: UnixMillis, stale: u64) -> Vec<Member> {
        let buckets = self.buckets.lock();
        let members = buckets
            .lru
            .peek(id)
            .into_iter()
            .flatten()
            .map(|(name, state)| Member {
                name: name.clone(),
                demand_milli: state.demand_milli,
                units: state.units,
                last_seen: state.last_seen,
            });
        live(members, now, stale)
    }
}

impl DemandRegistry for MemoryStore {
    async fn report_demand(
        &self,
        member: &str,
        reports: &[DemandReport],
        now: UnixMillis,
        stale: Duration,
    ) -> Result<Vec<Grant>, StoreError> {
        let registry = self.demand_registry();
        Ok(reports
            .iter()
            .map(|report| registry.report(member, report, now, millis(stale)))
            .collect())
    }

    async fn members(
        &self,
        id: &CounterId,
        now: UnixMillis,
        stale: Duration,
    ) -> Result<Vec<Member>, StoreError> {
        Ok(self.demand_registry().members(id, now, millis(stale)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rlqs::{MAX_REPORTED_REQUESTS, parse_member};

    fn report(user: &str, requests: u64) -> DemandReport {
        DemandReport {
            id: CounterId::new("d", [("user", user)]),
            requests,
            leave: false,
        }
    }

    const STALE: u64 = 20_000;

    #[test]
    fn demand_is_measured_on_floodgates_clock() {
        assert_eq!(demand_milli(5, None, UnixMillis(10_000)), 5_000);
        assert_eq!(
            demand_milli(50, Some(UnixMillis(0)), UnixMillis(10_000)),
            5_000
        );
        // Less than a second counts as one.
        assert_eq!(
            demand_milli(3, Some(UnixMillis(9_900)), UnixMillis(10_000)),
            3_000
        );
        assert_eq!(
            demand_milli(u64::MAX, None, UnixMillis(0)),
            MAX_REPORTED_REQUESTS * 1_000
        );
    }

    #[test]
    fn a_newcomer_gets_the_spare_slot_then_both_converge() {
        let registry = MemoryRegistry::default();
        let now = UnixMillis(1_000_000);
        let a = registry.report("a", &report("u", 10), now, STALE);
        assert_eq!(a.units, split::UNITS - split::FLOOR_UNITS / 2);
        let b = registry.report("b", &report("u", 10), now, STALE);
        // Only the spare slot is free until `a` reports again.
        assert_eq!(b.units, split::FLOOR_UNITS / 2);
        assert_eq!(b.members, 2);
        let later = UnixMillis(now.0 + 5_000);
        let a = registry.report("a", &report("u", 50), later, STALE);
        let b = registry.report("b", &report("u", 50), later, STALE);
        assert_eq!(a.units, b.units);
        assert!(a.units + b.units <= split::UNITS);
        assert_eq!(registry.members(&report("u", 0).id, later, STALE).len(), 2);
    }

    #[test]
    fn stale_members_and_leavers_release_their_share() {
        let registry = MemoryRegistry::default();
        let now = UnixMillis(1_000_000);
        registry.report("a", &report("u", 10), now, STALE);
        let gone = UnixMillis(now.0 + STALE);
        let b = registry.report("b", &report("u", 10), gone, STALE);
        assert_eq!(b.members, 1);
        assert_eq!(b.units, split::UNITS - split::FLOOR_UNITS / 2);
        let left = registry.report(
            "b",
            &DemandReport {
                leave: true,
                ..report("u", 0)
            },
            gone,
            STALE,
        );
        assert_eq!(left.units, 0);
        assert_eq!(registry.len(), 0);
    }

    #[test]
    fn a_full_bucket_admits_no_more_members() {
        let registry = MemoryRegistry::default();
        let now = UnixMillis(1_000_000);
        for i in 0..MAX_MEMBERS {
            assert!(
                registry
                    .report(&i.to_string(), &report("u", 1), now, STALE)
                    .admitted
            );
        }
        let refused = registry.report("late", &report("u", 1), now, STALE);
        assert!(!refused.admitted);
        assert_eq!(refused.units, 0);
        // A known member still reports.
        assert!(registry.report("0", &report("u", 1), now, STALE).admitted);
    }

    #[test]
    fn the_registry_bounds_its_members_over_all_buckets() {
        let registry = MemoryRegistry::with_limits(100, 5);
        let now = UnixMillis(1_000_000);
        for user in ["a", "b", "c"] {
            registry.report("m1", &report(user, 1), now, STALE);
            registry.report("m2", &report(user, 1), now, STALE);
        }
        // Six members asked for, five allowed: the oldest bucket went.
        assert_eq!(registry.members_held(), 4);
        assert_eq!(registry.len(), 2);
        assert!(registry.members(&report("a", 0).id, now, STALE).is_empty());
        assert_eq!(registry.members(&report("c", 0).id, now, STALE).len(), 2);
        // Leaving gives members back.
        let leave = DemandReport {
            leave: true,
            ..report("c", 0)
        };
        registry.report("m1", &leave, now, STALE);
        assert_eq!(registry.members_held(), 3);
    }

    #[test]
    fn the_registry_is_bounded() {
        let registry = MemoryRegistry::with_capacity(3);
        let now = UnixMillis(1_000_000);
        for user in ["a", "b", "c", "d"] {
            registry.report("m", &report(user, 1), now, STALE);
        }
        assert_eq!(registry.len(), 3);
    }

    #[test]
    fn registry_values_parse_strictly() {
        assert_eq!(
            parse_member("m".into(), "5:7:9"),
            Some(Member {
                name: "m".into(),
                demand_milli: 5,
                units: 7,
                last_seen: UnixMillis(9)
            })
        );
        assert_eq!(parse_member("m".into(), "5:7"), None);
        assert_eq!(parse_member("m".into(), "5:7:9:1"), None);
        assert_eq!(parse_member("m".into(), "x:7:9"), None);
    }
}
