//! What the rules say about a bucket: the decision shared by every Envoy,
//! or the budget their token buckets split.

use super::state::BucketKey;
use super::{RlqsOptions, Unmatched, state};
use crate::algorithm::quota_split::{Budget, Strategy};
use crate::config::{Algorithm, Index, Limit, Lookup, Policy, Redactor};
use crate::store::CounterId;

/// What the rules say about a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The same answer for every Envoy.
    Blanket {
        /// ALLOW_ALL or DENY_ALL.
        strategy: Strategy,
        /// Why, for the operator view.
        reason: &'static str,
    },
    /// A limit split across the Envoys reporting the bucket.
    Split {
        /// The bucket's identity in the demand registry (the counter id RLS
        /// would count it under).
        id: CounterId,
        /// What the rule allows.
        budget: Budget,
        /// The rule's config path.
        rule: String,
    },
}

/// What the rules in `index` say about bucket `key` of `domain`; the
/// bucket's identity holds secret values as `redactor` stores them
/// (`REDACT_STORE_KEYS`), as RLS counters do.
pub(crate) fn decide(
    index: &Index,
    domain: &str,
    key: &BucketKey,
    options: &RlqsOptions,
    redactor: &Redactor,
) -> Decision {
    let unmatched = match options.unmatched {
        Unmatched::AllowAll => Strategy::AllowAll,
        Unmatched::DenyAll => Strategy::DenyAll,
    };
    let entries = state::entries(key);
    let found = match index.lookup(domain, &entries) {
        Lookup::UnknownDomain => {
            return Decision::Blanket {
                strategy: unmatched,
                reason: "unknown domain",
            };
        }
        Lookup::NoMatch => {
            return Decision::Blanket {
                strategy: unmatched,
                reason: "no rule matches",
            };
        }
        Lookup::Matched(found) => found,
    };
    let rule = found.rule;
    let limits = match &rule.policy {
        Policy::Unlimited { .. } => {
            return Decision::Blanket {
                strategy: Strategy::AllowAll,
                reason: "unlimited",
            };
        }
        Policy::Limited(limits) => limits,
    };
    // Shadow limits never deny: only the enforced ones make the budget.
    let enforced: Vec<&Limit> = limits.iter().filter(|limit| !limit.shadow_mode).collect();
    if rule.shadow_mode || options.global_shadow_mode || enforced.is_empty() {
        return Decision::Blanket {
            strategy: Strategy::AllowAll,
            reason: "shadow mode",
        };
    }
    let Some(budget) = budget(&enforced) else {
        return Decision::Blanket {
            strategy: Strategy::DenyAll,
            reason: "requests_per_unit is 0",
        };
    };
    let values: Vec<std::borrow::Cow<'_, str>> = entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            found.shared.iter().find(|(at, _)| *at == i).map_or_else(
                || redactor.store_value(found.secret_keys, &entry.key, &entry.value),
                |(_, pattern)| std::borrow::Cow::Borrowed(*pattern),
            )
        })
        .collect();
    let id = CounterId::new(
        domain,
        entries
            .iter()
            .zip(&values)
            .map(|(entry, value)| (entry.key.as_str(), &**value)),
    );
    Decision::Split {
        id,
        budget,
        rule: rule.full_key.clone(),
    }
}

/// The budget of a rule's limits: the slowest rate, the smallest burst;
/// `None` when a limit allows nothing.
pub(super) fn budget(limits: &[&Limit]) -> Option<Budget> {
    let mut best: Option<Budget> = None;
    for limit in limits {
        let requests = u64::from(limit.requests_per_unit);
        let burst = match limit.algorithm {
            Algorithm::Gcra => u64::from(limit.burst.unwrap_or(limit.requests_per_unit)),
            _ => requests,
        };
        if requests == 0 || burst == 0 {
            return None;
        }
        let window_secs = limit.window_secs().max(1);
        best = Some(match best {
            None => Budget {
                requests,
                window_secs,
                burst,
            },
            Some(b) => {
                // Compare requests/window_secs exactly.
                let slower = u128::from(requests) * u128::from(b.window_secs)
                    < u128::from(b.requests) * u128::from(window_secs);
                Budget {
                    requests: if slower { requests } else { b.requests },
                    window_secs: if slower { window_secs } else { b.window_secs },
                    burst: burst.min(b.burst),
                }
            }
        });
    }
    best
}
