//! The operator view of a bucket's split (`GET /rlqs`).

use super::state::BucketKey;
use super::{
    RlqsOptions,
    decide::{Decision, decide},
};
use crate::algorithm::quota_split::{self as split, Budget, Strategy};
use crate::clock::UnixMillis;
use crate::store::StoreError;
use crate::store::rlqs::{DemandRegistry, Member};

/// One member's part of a bucket's split, for the operator view.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct MemberView {
    /// The member (client id or stream name).
    pub member: String,
    /// Measured demand, requests per second.
    pub demand_per_sec: f64,
    /// Its share of the budget, 0..=1.
    pub share: f64,
    /// The assignment its share gives.
    pub assignment: StrategyView,
    /// Milliseconds since it last reported.
    pub last_report_ms_ago: u64,
}

/// An assignment as JSON.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub(crate) enum StrategyView {
    /// ALLOW_ALL.
    AllowAll,
    /// DENY_ALL.
    DenyAll,
    /// A token bucket.
    TokenBucket {
        /// Size.
        max_tokens: u32,
        /// Tokens per fill.
        tokens_per_fill: u32,
        /// Fill interval, seconds.
        fill_interval_secs: u64,
        /// Tokens per second.
        rate_per_sec: f64,
    },
}

impl From<Strategy> for StrategyView {
    fn from(strategy: Strategy) -> Self {
        match strategy {
            Strategy::AllowAll => Self::AllowAll,
            Strategy::DenyAll => Self::DenyAll,
            Strategy::TokenBucket(b) => Self::TokenBucket {
                max_tokens: b.max_tokens,
                tokens_per_fill: b.tokens_per_fill,
                fill_interval_secs: b.fill_interval_secs,
                rate_per_sec: b.rate_per_sec(),
            },
        }
    }
}

/// How a bucket is split now (`GET /rlqs`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct SplitView {
    /// The domain asked for.
    pub domain: String,
    /// The bucket id, pairs in key order.
    pub bucket: Vec<(String, String)>,
    /// The matched rule's config path, if any.
    pub rule: Option<String>,
    /// Why every Envoy gets the same answer, for a blanket decision.
    pub reason: Option<&'static str>,
    /// The blanket answer, if the bucket is not split.
    pub blanket: Option<StrategyView>,
    /// The rule's rate, requests per second (split buckets).
    pub rate_per_sec: Option<f64>,
    /// The rule's burst (split buckets).
    pub burst: Option<u64>,
    /// The Envoys reporting the bucket, by member name.
    pub members: Vec<MemberView>,
}

/// The split of bucket `key` of `domain` now, read from the store.
///
/// # Errors
///
/// [`StoreError`] when the store cannot be read.
pub(crate) async fn explain(
    sources: &super::Sources,
    options: &RlqsOptions,
    domain: &str,
    key: &BucketKey,
) -> Result<SplitView, StoreError> {
    let index = sources.rules.load_full();
    let now = sources.clock.now();
    let mut view = SplitView {
        domain: domain.to_owned(),
        bucket: key
            .iter()
            .map(|(k, v)| {
                let shown = sources.redactor.show(index.secret_keys(domain), k, v);
                (k.clone(), shown.into_owned())
            })
            .collect(),
        rule: None,
        reason: None,
        blanket: None,
        rate_per_sec: None,
        burst: None,
        members: Vec::new(),
    };
    match decide(&index, domain, key, options, &sources.redactor) {
        Decision::Blanket { strategy, reason } => {
            view.reason = Some(reason);
            view.blanket = Some(strategy.into());
        }
        Decision::Split { id, budget, rule } => {
            view.rule = Some(rule);
            view.rate_per_sec = Some(budget.rate_per_sec());
            view.burst = Some(budget.burst);
            let members = sources
                .store
                .members(&id, now, options.stale_after())
                .await?;
            view.members = members
                .into_iter()
                .map(|member| member_view(&budget, member, now))
                .collect();
        }
    }
    Ok(view)
}

#[allow(clippy::cast_precision_loss)] // operator view
fn member_view(budget: &Budget, member: Member, now: UnixMillis) -> MemberView {
    MemberView {
        demand_per_sec: member.demand_milli as f64 / 1_000.0,
        share: member.units as f64 / split::UNITS as f64,
        assignment: split::bucket(budget, member.units).into(),
        last_report_ms_ago: now.0.saturating_sub(member.last_seen.0),
        member: member.name,
    }
}
