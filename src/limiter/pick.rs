//! Which limit answers for a descriptor: from the outcomes of its
//! operations, the first violated enforced limit, else the enforced one with
//! the least remaining. Shadow (candidate) limits never answer next to an
//! enforced one; their would-be denials are tallied apart. Shared by the
//! decision (`response`) and `/explain`, so both pick alike.

use super::answer::{Code, Status, current_limit};
use super::plan::{Pending, failure_outcome};
use crate::algorithm::Outcome;
use crate::config::Limit;

/// The answer for one limited descriptor.
#[derive(Debug, Clone, Copy)]
pub(super) struct Picked {
    /// Index of the answering limit in the descriptor's limits.
    pub(super) at: usize,
    /// Its outcome.
    pub(super) outcome: Outcome,
    /// Hits of the descriptor.
    pub(super) hits: u64,
    /// Answered over limit from the local over-limit cache.
    pub(super) cached: bool,
    /// Whether an enforced limit answers; false when every limit of the rule
    /// is a shadow one (then the answer is a shadow answer: never OVER_LIMIT).
    pub(super) enforced: bool,
    /// Hits that shadow limits next to an enforced one would have denied
    /// (the reference's shadow accounting, per limit).
    pub(super) shadow_denied: u64,
}

impl Picked {
    /// Whether the answer is a shadow one: the rule is in shadow mode, or
    /// only shadow limits answer.
    pub(super) fn is_shadow(&self, rule_shadow: bool) -> bool {
        rule_shadow || !self.enforced
    }

    /// The descriptor's status: OVER_LIMIT only when an enforced limit of a
    /// rule not in shadow mode is over.
    pub(super) fn status(&self, limits: &[Limit], rule_shadow: bool) -> Status {
        let code = if self.outcome.over_limit && !self.is_shadow(rule_shadow) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        Status {
            code,
            current_limit: limits.get(self.at).map(current_limit),
            limit_remaining: u32::try_from(self.outcome.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(self.outcome.reset),
        }
    }
}

/// The overall answer, from the descriptors' statuses: over when any
/// descriptor not in quota mode is over, or every quota-mode one is
/// (before global shadow mode).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Overall {
    any_over: bool,
    quota_total: usize,
    quota_over: usize,
}

impl Overall {
    /// Adds a limited descriptor's status.
    pub(super) fn add(&mut self, status: &Status, quota_mode: bool) {
        let over = status.code == Code::OverLimit;
        if quota_mode {
            self.quota_total += 1;
            self.quota_over += usize::from(over);
        } else {
            self.any_over |= over;
        }
    }

    /// Whether the request is over.
    pub(super) fn is_over(&self) -> bool {
        self.any_over || (self.quota_total > 0 && self.quota_over == self.quota_total)
    }
}

/// Picks the answer among `slots` (the descriptor's operations, in order).
pub(super) fn pick<'s>(limits: &[Limit], slots: impl Iterator<Item = &'s Pending>) -> Picked {
    let mut enforced: Option<(usize, Outcome)> = None;
    let mut shadow: Option<(usize, Outcome)> = None;
    let (mut hits, mut cached, mut shadow_denied) = (0, false, 0u64);
    let last = limits.len().saturating_sub(1);
    for slot in slots {
        hits = slot.hits;
        // Every slot gets an outcome; a missing one would be a store bug,
        // answered as a fresh window.
        let at = (slot.base + slot.outcome.map_or(0, |o| o.limit_index)).min(last);
        let Some(limit) = limits.get(at) else {
            continue;
        };
        let outcome = slot
            .outcome
            .unwrap_or_else(|| failure_outcome(limit, false));
        let chosen = if limit.shadow_mode {
            if outcome.over_limit {
                shadow_denied =
                    shadow_denied.saturating_add(denied(limit, &outcome, slot.hits, slot.cached));
            }
            &mut shadow
        } else {
            cached |= slot.cached && outcome.over_limit;
            &mut enforced
        };
        let better = match chosen {
            None => true,
            Some((_, best)) if best.over_limit => false,
            Some((_, best)) => outcome.over_limit || outcome.remaining < best.remaining,
        };
        if better {
            *chosen = Some((at, outcome));
        }
    }
    let is_enforced = enforced.is_some();
    let (at, outcome) = enforced.or(shadow).unwrap_or_else(|| {
        (
            0,
            limits
                .first()
                .map_or(Outcome::NOTHING, |l| failure_outcome(l, false)),
        )
    });
    Picked {
        at,
        outcome,
        hits,
        cached,
        enforced: is_enforced,
        shadow_denied: if is_enforced { shadow_denied } else { 0 },
    }
}

/// Hits an over-limit outcome denies, as the reference counts shadow hits:
/// all of them when the counter was already at the limit (or they were not
/// counted at all), else those past the limit.
fn denied(limit: &Limit, outcome: &Outcome, hits: u64, cached: bool) -> u64 {
    let requests = u64::from(limit.requests_per_unit);
    if cached || !outcome.counted || outcome.before >= requests {
        hits
    } else {
        outcome.after.saturating_sub(requests)
    }
}
