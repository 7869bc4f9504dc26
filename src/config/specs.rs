//! What limits ask of a store: the operations (algorithm [`Spec`]s) a rule's
//! limits become, built once when the rule is loaded.

use super::rule::{Algorithm, Limit};
use crate::algorithm::{Concurrency, FixedWindow, Gcra, Limits, SlidingLog, SlidingWindow, Spec};

/// The store operations a descriptor's limits become, each with the index
/// of the first limit it covers: sliding windows and logs decide all their
/// enforced windows in one operation; fixed windows and GCRA have one state
/// per limit. Shadow (candidate) limits come last in a rule and are decided
/// one by one, each on counters of its own (`CounterId::candidate`), so
/// they never change what the enforced limits admit.
pub(crate) fn specs(limits: &[Limit]) -> Vec<(Spec, usize)> {
    let enforced = limits.partition_point(|l| !l.shadow_mode);
    let (group, candidates) = limits.split_at(enforced);
    let candidates = candidates
        .iter()
        .enumerate()
        .map(|(i, limit)| (single_spec(limit), enforced + i));
    let Some(first) = group.first() else {
        return candidates.collect();
    };
    match first.algorithm {
        Algorithm::SlidingWindow => {
            let pairs = group
                .iter()
                .map(|l| (u64::from(l.requests_per_unit), l.window_secs()));
            let count_rejected = group.iter().any(|l| l.count_rejected);
            std::iter::once((
                Spec::SlidingWindow(SlidingWindow::new(Limits::new(pairs), count_rejected)),
                0,
            ))
            .chain(candidates)
            .collect()
        }
        Algorithm::SlidingLog => {
            let pairs = group.iter().map(|l| {
                (
                    u64::from(l.requests_per_unit),
                    l.window_secs().saturating_mul(1_000),
                )
            });
            std::iter::once((Spec::SlidingLog(SlidingLog::new(Limits::new(pairs))), 0))
                .chain(candidates)
                .collect()
        }
        Algorithm::FixedWindow | Algorithm::Gcra | Algorithm::Concurrency => group
            .iter()
            .enumerate()
            .map(|(i, limit)| (single_spec(limit), i))
            .chain(candidates)
            .collect(),
    }
}

/// The operation of one limit on its own.
pub(crate) fn single_spec(limit: &Limit) -> Spec {
    let requests = u64::from(limit.requests_per_unit);
    match limit.algorithm {
        Algorithm::Gcra => Spec::Gcra(Gcra::new(
            requests,
            limit.window_secs().saturating_mul(1_000),
            limit.burst.map_or(requests, u64::from),
        )),
        Algorithm::SlidingWindow => Spec::SlidingWindow(SlidingWindow::new(
            Limits::new([(requests, limit.window_secs())]),
            limit.count_rejected,
        )),
        Algorithm::SlidingLog => Spec::SlidingLog(SlidingLog::new(Limits::new([(
            requests,
            limit.window_secs().saturating_mul(1_000),
        )]))),
        Algorithm::Concurrency => Spec::Concurrency(Concurrency::new(
            requests,
            limit.window_secs().saturating_mul(1_000),
        )),
        Algorithm::FixedWindow => Spec::FixedWindow {
            window: limit.calendar.map_or_else(
                || FixedWindow::new(limit.window_secs()),
                FixedWindow::on_calendar,
            ),
            limit: requests,
        },
    }
}
