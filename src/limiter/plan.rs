//! The plan of a request: what each descriptor's matched rule (or override)
//! becomes after `replaces`, and the counter operations it needs (specs,
//! counter identities, the reference's stats keys).

use super::Limiter;
use crate::algorithm::{Outcome, Spec};
use crate::config::{
    Algorithm, Index, Limit, Lookup, Match, Metadata, Policy, Redactor, TableUse, specs,
};
use crate::descriptor::{Descriptor, Entry};
use crate::store::{CounterId, Store};
use std::borrow::Cow;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// What one descriptor needs after lookup and `replaces`.
#[derive(Debug)]
pub(super) enum Plan<'a> {
    NoLimit,
    Unlimited {
        /// Names of limits this rule drops from the same request: an
        /// unlimited rule's `replaces` count too (the reference collects
        /// every matched rule's before it drops the unlimited ones).
        replaces: &'a [Arc<str>],
    },
    Limited {
        /// The limits to enforce (borrowed from the rules, or one built from
        /// a request override); never empty.
        limits: Cow<'a, [Limit]>,
        /// Their store operations: the rule's, built at load, unless an
        /// override or `replaces` changed the limits.
        specs: Cow<'a, [(Spec, usize)]>,
        shadow_mode: bool,
        quota_mode: bool,
        /// Names of limits this one drops from the same request.
        replaces: &'a [Arc<str>],
        /// `share_threshold` substitutions: (entry index, wildcard pattern).
        shared: Vec<(usize, &'a str)>,
        /// The reference's stats key of this descriptor.
        stats_key: Cow<'a, str>,
        /// The rule's `metadata` (never for an override).
        metadata: Option<&'a Arc<Metadata>>,
        /// How many of the descriptor's entries name its counter: all, but
        /// for a concurrency limit's slot entries.
        entries: usize,
        /// Concurrency: the request's member (its slot id, hashed) and
        /// whether this frees its slot.
        slot: Option<(u64, bool)>,
        /// The limit table the rule reads (`table`): its entry for the
        /// request replaces `limits` ([`apply_tables`](super::stage)).
        table: Option<&'a Arc<TableUse>>,
    },
}

/// Whether the operation covering `limits[base]` is a shadow (candidate)
/// limit's, counted under [`CounterId::candidate`].
pub(super) fn is_candidate(limits: &[Limit], base: usize) -> bool {
    limits.get(base).is_some_and(|l| l.shadow_mode)
}

/// The answer given without the store: a fresh window (`over` false) or an
/// exhausted one (`over` true).
pub(super) fn failure_outcome(limit: &Limit, over: bool) -> Outcome {
    let requests = u64::from(limit.requests_per_unit);
    Outcome {
        over_limit: over,
        remaining: if over { 0 } else { requests },
        reset: Duration::from_secs(limit.window_secs()),
        counted: false,
        before: 0,
        after: 0,
        limit_index: 0,
        leased: 0,
        tat_us: 0,
    }
}

/// One store operation of a request, pending or answered: which descriptor
/// it answers for, the first limit it covers, and its outcome once known.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub(super) plan: usize,
    pub(super) base: usize,
    pub(super) outcome: Option<Outcome>,
    /// Answered from the local over-limit cache.
    pub(super) cached: bool,
    /// A shadow (candidate) limit's operation.
    pub(super) candidate: bool,
    pub(super) hits: u64,
    /// Asked the store: the batch's operations are the slots with this
    /// set, in order (no list of positions allocated per request).
    pub(super) sent: bool,
    /// The place of the store counting it (0: the limiter's own).
    pub(super) store: u8,
}

impl<S: Store> Limiter<S> {
    pub(super) fn plan<'a>(
        &self,
        index: &'a Index,
        domain: &str,
        descriptor: &Descriptor,
    ) -> Plan<'a> {
        if let Some(limit_override) = descriptor.limit {
            // As in the reference, an override needs a known domain but not
            // a matching rule, and carries no shadow, quota or name.
            if !index.has_domain(domain) {
                return Plan::NoLimit;
            }
            let limits = vec![Limit {
                name: None,
                requests_per_unit: limit_override.requests_per_unit,
                unit: limit_override.unit,
                unit_multiplier: NonZeroU32::MIN,
                algorithm: Algorithm::FixedWindow,
                burst: None,
                count_rejected: false,
                shadow_mode: false,
                calendar: None,
                slot: None,
                lease: false,
                // The request's own limit counts where the reference's
                // would: the process-wide store.
                store: 0,
                partition_allowance: 0,
            }];
            return Plan::Limited {
                specs: Cow::Owned(specs(&limits)),
                limits: Cow::Owned(limits),
                shadow_mode: false,
                quota_mode: self.options.global_quota_mode,
                replaces: &[],
                shared: Vec::new(),
                stats_key: Cow::Owned(runtime_stats_key(
                    domain,
                    descriptor,
                    &self.redactor,
                    index.secret_keys(domain),
                )),
                metadata: None,
                entries: descriptor.entries.len(),
                slot: None,
                table: None,
            };
        }
        if let Some(plan) = self.slot_plan(index, domain, descriptor) {
            return plan;
        }
        match index.lookup(domain, &descriptor.entries) {
            Lookup::UnknownDomain => {
                self.metrics.record_domain_not_found(domain);
                Plan::NoLimit
            }
            Lookup::NoMatch => Plan::NoLimit,
            Lookup::Matched(matched) => match &matched.rule.policy {
                Policy::Unlimited { .. } => Plan::Unlimited {
                    replaces: &matched.rule.replaces,
                },
                Policy::Limited(limits) if limits.is_empty() => Plan::NoLimit,
                Policy::Limited(limits) => {
                    // A concurrency limit reached without a slot entry: a
                    // slot no release can name, freed when it expires.
                    let slot = limits
                        .iter()
                        .any(|l| l.algorithm == Algorithm::Concurrency)
                        .then(|| (rand::random::<u64>(), false));
                    self.limited(matched, limits, &descriptor.entries, slot)
                }
            },
        }
    }

    /// The plan of a matched rule's `limits` for the request entries `own`
    /// that name its counter (all the descriptor's, but a concurrency
    /// limit's slot entries), with the request's concurrency `slot`.
    fn limited<'a>(
        &self,
        matched: Match<'a>,
        limits: &'a [Limit],
        own: &[Entry],
        slot: Option<(u64, bool)>,
    ) -> Plan<'a> {
        Plan::Limited {
            limits: Cow::Borrowed(limits),
            specs: Cow::Borrowed(&matched.rule.specs),
            shadow_mode: matched.rule.shadow_mode,
            quota_mode: matched.rule.quota_mode || self.options.global_quota_mode,
            replaces: &matched.rule.replaces,
            stats_key: matched.stats_key_cow(own, &self.redactor),
            shared: matched.shared,
            metadata: matched.rule.metadata.as_ref(),
            entries: own.len(),
            slot,
            table: matched.rule.table.as_ref(),
        }
    }

    /// A descriptor ending with a concurrency limit's slot entries: its
    /// rule's entries, then `slot_key` = the request's id (an acquire),
    /// then possibly `release_key` (a release). The plan of the rule those
    /// first entries match, when it is a concurrency limit with those keys;
    /// `None` otherwise (the descriptor is matched as it stands).
    fn slot_plan<'a>(
        &self,
        index: &'a Index,
        domain: &str,
        descriptor: &Descriptor,
    ) -> Option<Plan<'a>> {
        if index.slot_keys().is_empty() {
            return None;
        }
        let entries = &descriptor.entries;
        let n = entries.len();
        let last = entries.last()?;
        let (release, slot_at) = if index
            .slot_keys()
            .iter()
            .any(|k| *k.release_key == *last.key)
        {
            (true, n.checked_sub(2)?)
        } else {
            (false, n.checked_sub(1)?)
        };
        let slot_entry = entries.get(slot_at)?;
        let keys = index.slot_keys().iter().find(|k| {
            *k.slot_key == *slot_entry.key && (!release || *k.release_key == *last.key)
        })?;
        let own = entries.get(..slot_at)?;
        let Lookup::Matched(matched) = index.lookup(domain, own) else {
            return None;
        };
        let Policy::Limited(limits) = &matched.rule.policy else {
            return None;
        };
        if !limits.iter().any(|l| l.slot.as_ref() == Some(keys)) {
            return None;
        }
        let member = xxhash_rust::xxh3::xxh3_64(slot_entry.value.as_bytes());
        Some(self.limited(matched, limits, own, Some((member, release))))
    }
}

/// Drops every limit whose name another matched rule of the same request
/// `replaces`, an unlimited rule included (reference:
/// `constructLimitsToCheck`); a descriptor left with no limit is not
/// limited.
pub(super) fn apply_replaces(plans: &mut [Plan<'_>]) {
    // Most requests carry no `replaces` at all; they allocate nothing here.
    let mut replaced: Vec<Arc<str>> = Vec::new();
    for plan in plans.iter() {
        if let Plan::Limited { replaces, .. } | Plan::Unlimited { replaces } = plan {
            replaced.extend(replaces.iter().cloned());
        }
    }
    if replaced.is_empty() {
        return;
    }
    let is_replaced = |limit: &Limit| limit.name.as_ref().is_some_and(|n| replaced.contains(n));
    for plan in plans.iter_mut() {
        let Plan::Limited {
            limits,
            specs: operations,
            ..
        } = plan
        else {
            continue;
        };
        if !limits.iter().any(is_replaced) {
            continue;
        }
        let kept: Vec<Limit> = limits.iter().filter(|l| !is_replaced(l)).cloned().collect();
        if kept.is_empty() {
            *plan = Plan::NoLimit;
        } else {
            *operations = Cow::Owned(specs(&kept));
            *limits = Cow::Owned(kept);
        }
    }
}

/// The reference's stats key for a request override: the full runtime path
/// `domain.k1_v1.k2_v2` (its cardinality is capped by the metrics), secret
/// values (of `secret_keys` or the redactor's) as their tags.
pub(super) fn runtime_stats_key(
    domain: &str,
    descriptor: &Descriptor,
    redactor: &Redactor,
    secret_keys: &[Box<str>],
) -> String {
    let mut key = domain.to_owned();
    for entry in &descriptor.entries {
        key.push('.');
        key.push_str(&entry.key);
        key.push('_');
        key.push_str(&redactor.show(secret_keys, &entry.key, &entry.value));
    }
    key
}

/// With `REDACT_STORE_KEYS` and a secret key in `domain`: the redactor and
/// the domain's secret keys, for [`operations`] to put tags in the store's
/// keys; otherwise `None` (the common case costs one branch).
pub(super) fn store_tags<'i>(
    redactor: &'i Redactor,
    index: &'i Index,
    domain: &str,
) -> Option<(&'i Redactor, &'i [Box<str>])> {
    if !redactor.stores_tags() {
        return None;
    }
    let keys = index.secret_keys(domain);
    redactor.is_active(keys).then_some((redactor, keys))
}

/// A limited plan's limits, counter identity and operations (each with the
/// index of the first limit it covers).
pub(super) type Operations<'p> = (&'p [Limit], CounterId, Cow<'p, [(Spec, usize)]>);

/// What a limited plan asks of the store for `descriptor`: its limits, its
/// counter identity (of the descriptor's own entries, not a concurrency
/// limit's slot entries) and its operations (each concurrency operation
/// for the request's member); `None` for a plan that counts nothing.
pub(super) fn operations<'p>(
    domain: &str,
    descriptor: &Descriptor,
    plan: &'p Plan<'_>,
    tags: Option<(&Redactor, &[Box<str>])>,
) -> Option<Operations<'p>> {
    let Plan::Limited {
        limits,
        specs,
        shared,
        entries,
        slot,
        ..
    } = plan
    else {
        return None;
    };
    let own = descriptor.entries.get(..*entries).unwrap_or_default();
    let id = match tags {
        None => counter_id(domain, own, shared),
        Some((redactor, keys)) => {
            let tagged: Vec<Entry> = own
                .iter()
                .map(|entry| Entry {
                    key: entry.key.clone(),
                    value: redactor
                        .store_value(keys, &entry.key, &entry.value)
                        .into_owned(),
                })
                .collect();
            counter_id(domain, &tagged, shared)
        }
    };
    // Borrowed from the rule: copied only for a concurrency limit, whose
    // operations carry the request's member.
    let mut specs = Cow::Borrowed(&**specs);
    if let Some((member, release)) = *slot {
        for (spec, _) in specs.to_mut() {
            if let Spec::Concurrency(c) = spec {
                *c = c.for_member(member, release);
            }
        }
    }
    Some((limits, id, specs))
}

/// The counter identity of a descriptor: the request's own entries, with the
/// wildcard pattern in place of the value where a `share_threshold` node
/// matched, so every value under that wildcard shares one counter.
pub(super) fn counter_id(domain: &str, entries: &[Entry], shared: &[(usize, &str)]) -> CounterId {
    let entries = entries.iter().enumerate().map(|(i, entry)| {
        let value = shared
            .iter()
            .find(|(at, _)| *at == i)
            .map_or(entry.value.as_str(), |(_, pattern)| *pattern);
        (entry.key.as_str(), value)
    });
    CounterId::new(domain, entries)
}
