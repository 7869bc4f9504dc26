//! Envoy's Rate Limit Quota Service (RLQS):
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`,
//! served on the gRPC port next to RLS, from the same rules and store.
//!
//! Each Envoy keeps one stream per domain, reports its usage per bucket
//! (every 5 s with Envoy 1.40, and at once for a new bucket), and enforces
//! the assignments pushed back. A bucket id `{k1: v1, k2: v2}` is matched as
//! the descriptor of its pairs in key order, exactly as RLS matches
//! descriptors. What a bucket gets:
//!
//! - no rule, or an unknown domain: ALLOW_ALL (or DENY_ALL, by
//!   `RLQS_UNMATCHED_BEHAVIOR`);
//! - `unlimited`, a shadow rule, or `SHADOW_MODE`: ALLOW_ALL;
//! - `requests_per_unit: 0`: DENY_ALL;
//! - a limit: a token bucket, the reporting Envoy's share of the rule's
//!   budget (`split`), from the demand registry in the store
//!   (`store::rlqs`), so every instance on one store splits one budget.
//!
//! Assignments are pushed after the first report of a bucket, whenever the
//! split changes, and again before half their TTL has run out; a bucket
//! that reports no request for `idle_timeout` is abandoned.
//!
//! Owns the proto conversion of RLQS (as `server/grpc.rs` does for RLS);
//! `state` is a stream's memory, `split` the pure math.

pub mod split;
pub mod state;

use crate::clock::UnixMillis;
use crate::config::{Algorithm, Index, Limit, Lookup, Policy};
use crate::limiter::Limiter;
use crate::metrics::rlqs::{Pushed, Refusal};
use crate::proto::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, Strategy as ProtoStrategy,
};
use crate::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket as ProtoTokenBucket};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::store::rlqs::{DemandRegistry, DemandReport, Member};
use crate::store::{CounterId, StoreError, StoreKind};
use futures_util::Stream;
use split::{Budget, Strategy};
use state::{BucketKey, InputError, Step, StreamBounds, StreamState};
use std::hash::{BuildHasher as _, RandomState};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How often Envoy 1.40 reports every bucket it knows, whatever
/// `reporting_interval` says.
pub const ENVOY_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The gRPC metadata an Envoy may name itself with
/// (`grpc_service.initial_metadata`), so a reconnecting Envoy keeps its
/// place in every bucket's split instead of joining as a newcomer.
pub const CLIENT_ID_HEADER: &str = "rlqs-client-id";

/// Longest client id taken from [`CLIENT_ID_HEADER`]; a longer one is
/// ignored (the stream gets a name of its own).
pub const MAX_CLIENT_ID_BYTES: usize = 128;

/// The shortest TTL sent: Envoy 1.40 expires anything under a second at
/// once.
pub const MIN_ASSIGNMENT_TTL: Duration = Duration::from_secs(1);

/// What a bucket that matches no rule (or a domain without rules) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// ALLOW_ALL, as RLS answers OK for an unmatched descriptor.
    #[default]
    AllowAll,
    /// DENY_ALL.
    DenyAll,
}

/// RLQS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsOptions {
    /// `RLQS_UNMATCHED_BEHAVIOR`.
    pub unmatched: Unmatched,
    /// `RLQS_ASSIGNMENT_TTL`: how long an Envoy keeps an assignment without
    /// hearing from floodgate (at least [`MIN_ASSIGNMENT_TTL`]).
    pub assignment_ttl: Duration,
    /// `RLQS_IDLE_TIMEOUT`: a bucket reporting no request for this long is
    /// abandoned.
    pub idle_timeout: Duration,
    /// Bounds on bucket ids, the domain and buckets per stream.
    pub bounds: StreamBounds,
    /// `SHADOW_MODE`: nothing is ever denied.
    pub global_shadow_mode: bool,
}

impl Default for RlqsOptions {
    fn default() -> Self {
        Self {
            unmatched: Unmatched::AllowAll,
            assignment_ttl: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
            bounds: StreamBounds::default(),
            global_shadow_mode: false,
        }
    }
}

impl RlqsOptions {
    /// The TTL sent, never under [`MIN_ASSIGNMENT_TTL`].
    pub fn ttl(&self) -> Duration {
        self.assignment_ttl.max(MIN_ASSIGNMENT_TTL)
    }

    /// How long a member stays in a bucket's split without reporting: its
    /// assignment's TTL, plus one report interval for the message in flight.
    pub fn stale_after(&self) -> Duration {
        self.ttl().saturating_add(ENVOY_REPORT_INTERVAL)
    }
}

/// What the rules say about a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
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

/// What the rules in `index` say about bucket `key` of `domain`.
pub fn decide(index: &Index, domain: &str, key: &BucketKey, options: &RlqsOptions) -> Decision {
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
        Policy::Unlimited => {
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
    let id = CounterId::new(
        domain,
        entries.iter().enumerate().map(|(i, entry)| {
            let value = found
                .shared
                .iter()
                .find(|(at, _)| *at == i)
                .map_or(entry.value.as_str(), |(_, pattern)| *pattern);
            (entry.key.as_str(), value)
        }),
    );
    Decision::Split {
        id,
        budget,
        rule: rule.full_key.clone(),
    }
}

/// The budget of a rule's limits: the slowest rate, the smallest burst;
/// `None` when a limit allows nothing.
fn budget(limits: &[&Limit]) -> Option<Budget> {
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

/// One member's part of a bucket's split, for the operator view.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemberView {
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
pub enum StrategyView {
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
pub struct SplitView {
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
pub async fn explain(
    limiter: &Limiter<StoreKind>,
    options: &RlqsOptions,
    domain: &str,
    key: &BucketKey,
) -> Result<SplitView, StoreError> {
    let index = limiter.rules().load_full();
    let now = limiter.clock().now();
    let mut view = SplitView {
        domain: domain.to_owned(),
        bucket: key.clone(),
        rule: None,
        reason: None,
        blanket: None,
        rate_per_sec: None,
        burst: None,
        members: Vec::new(),
    };
    match decide(&index, domain, key, options) {
        Decision::Blanket { strategy, reason } => {
            view.reason = Some(reason);
            view.blanket = Some(strategy.into());
        }
        Decision::Split { id, budget, rule } => {
            view.rule = Some(rule);
            view.rate_per_sec = Some(budget.rate_per_sec());
            view.burst = Some(budget.burst);
            let members = limiter
                .store()
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

/// The RLQS service handed to tonic.
#[derive(Debug, Clone)]
pub struct RlqsService {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limiter: Arc<Limiter<StoreKind>>,
    options: RlqsOptions,
    names: RandomState,
    streams: AtomicU64,
    /// Cancelled when the server starts draining: every stream ends.
    draining: CancellationToken,
    /// Last second a store failure was logged (failures are logged at most
    /// once a second).
    logged_at: AtomicU64,
}

impl RlqsService {
    /// A service over `limiter`'s rules, store, clock and metrics. Every
    /// stream ends (OK status, so Envoys reconnect, to this instance or
    /// another) once `draining` is cancelled: streams live as long as their
    /// Envoy, and shutdown must not wait for them.
    pub fn new(
        limiter: Arc<Limiter<StoreKind>>,
        options: RlqsOptions,
        draining: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Shared {
                limiter,
                options,
                names: RandomState::new(),
                streams: AtomicU64::new(0),
                draining,
                logged_at: AtomicU64::new(0),
            }),
        }
    }
}

/// One stream's state; gauges are given back when the stream ends.
struct OpenStream {
    shared: Arc<Shared>,
    member: String,
    state: StreamState,
    done: bool,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let metrics = &self.shared.limiter.metrics().rlqs;
        metrics.add_streams(-1);
        metrics.add_buckets(-i64::try_from(self.state.len()).unwrap_or(0));
        let granted: i64 = self.state.pushed().map(micro_rate).sum();
        metrics.add_granted(-granted);
    }
}

/// A strategy's token rate in millionths of a token per second.
fn micro_rate(strategy: Strategy) -> i64 {
    match strategy {
        Strategy::TokenBucket(b) => {
            let micro =
                u128::from(b.tokens_per_fill) * 1_000_000 / u128::from(b.fill_interval_secs.max(1));
            i64::try_from(micro).unwrap_or(i64::MAX)
        }
        _ => 0,
    }
}

fn proto_strategy(strategy: Strategy) -> RateLimitStrategy {
    let strategy = match strategy {
        Strategy::AllowAll => ProtoStrategy::BlanketRule(BlanketRule::AllowAll as i32),
        Strategy::DenyAll => ProtoStrategy::BlanketRule(BlanketRule::DenyAll as i32),
        Strategy::TokenBucket(b) => ProtoStrategy::TokenBucket(ProtoTokenBucket {
            max_tokens: b.max_tokens,
            tokens_per_fill: Some(b.tokens_per_fill),
            fill_interval: Some(prost_types::Duration {
                seconds: i64::try_from(b.fill_interval_secs).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            name: String::new(),
        }),
    };
    RateLimitStrategy {
        strategy: Some(strategy),
    }
}

fn pushed_kind(strategy: Strategy) -> Pushed {
    match strategy {
        Strategy::AllowAll => Pushed::AllowAll,
        Strategy::DenyAll => Pushed::DenyAll,
        Strategy::TokenBucket(_) => Pushed::TokenBucket,
    }
}

fn assignment(bucket_id: BucketId, strategy: Strategy, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(prost_types::Duration {
                seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(ttl.subsec_nanos()).unwrap_or(0),
            }),
            rate_limit_strategy: Some(proto_strategy(strategy)),
        })),
    }
}

fn abandon(bucket_id: BucketId) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}

impl Shared {
    /// Handles one report: the actions to send back (none when nothing
    /// changed).
    ///
    /// # Errors
    ///
    /// INVALID_ARGUMENT for a bad domain; the stream ends, others go on.
    async fn report(
        &self,
        stream: &mut OpenStream,
        report: RateLimitQuotaUsageReports,
    ) -> Result<Vec<BucketAction>, tonic::Status> {
        let metrics = &self.limiter.metrics().rlqs;
        let options = &self.options;
        let domain = match stream
            .state
            .check_domain(&report.domain, options.bounds.max_domain_bytes)
        {
            Ok(domain) => domain.to_owned(),
            Err(err) => {
                metrics.record_refused(Refusal::BadDomain);
                return Err(tonic::Status::invalid_argument(err.to_string()));
            }
        };
        let index = self.limiter.rules().load_full();
        let now = self.limiter.clock().now();
        let ttl = options.ttl();
        metrics.record_reports(report.bucket_quota_usages.len() as u64);

        let mut actions = Vec::new();
        // Split buckets wait for one store round trip for all of them.
        // `None` for a bucket that only gives its grant back (abandoned).
        let mut pending: Vec<Option<(BucketKey, BucketId, Budget)>> = Vec::new();
        let mut reports: Vec<DemandReport> = Vec::new();
        // Answers come in the order of the report's buckets.
        for usage in report.bucket_quota_usages {
            let bucket_id = usage.bucket_id.unwrap_or_default();
            let key = match state::bucket_key(bucket_id.bucket.clone().into_iter(), &options.bounds)
            {
                Ok(key) => key,
                Err(err) => {
                    refuse(metrics, Refusal::BadBucket, &err, &domain);
                    actions.push(assignment(bucket_id, Strategy::DenyAll, ttl));
                    continue;
                }
            };
            let requests = usage
                .num_requests_allowed
                .saturating_add(usage.num_requests_denied);
            let decision = decide(&index, &domain, &key, options);
            let (step, new) = stream.state.observe(
                &key,
                requests,
                now,
                options.idle_timeout,
                options.bounds.max_buckets,
            );
            match step {
                Step::Refuse => {
                    metrics.record_refused(Refusal::TooManyBuckets);
                    debug!(rl.domain = %domain, "rlqs stream has too many buckets; bucket denied");
                    metrics.record_pushed(Pushed::DenyAll);
                    actions.push(assignment(bucket_id, Strategy::DenyAll, ttl));
                    continue;
                }
                Step::Abandon(withdrawn) => {
                    metrics.add_buckets(-1);
                    metrics.add_granted(-withdrawn.map_or(0, micro_rate));
                    metrics.record_abandoned();
                    if let Decision::Split { id, .. } = decision {
                        reports.push(DemandReport {
                            id,
                            requests: 0,
                            leave: true,
                        });
                        pending.push(None);
                    }
                    actions.push(abandon(bucket_id));
                    continue;
                }
                Step::Track => {
                    if new {
                        metrics.add_buckets(1);
                    }
                }
            }
            match decision {
                Decision::Blanket { strategy, .. } => {
                    push(
                        stream,
                        metrics,
                        &mut actions,
                        &key,
                        bucket_id,
                        strategy,
                        now,
                        ttl,
                    );
                }
                Decision::Split { id, budget, .. } => {
                    reports.push(DemandReport {
                        id,
                        requests,
                        leave: false,
                    });
                    pending.push(Some((key, bucket_id, budget)));
                }
            }
        }
        if reports.is_empty() {
            return Ok(actions);
        }
        let grants = match self
            .limiter
            .store()
            .report_demand(&stream.member, &reports, now, options.stale_after())
            .await
        {
            Ok(grants) => grants,
            Err(err) => {
                // Assignments already pushed stay in force until their TTL;
                // then the Envoys fall back as configured.
                metrics.record_store_error();
                let second = now.as_secs();
                if self.logged_at.swap(second, Ordering::Relaxed) != second {
                    warn!(error = &err as &dyn std::error::Error, rl.domain = %domain, "rlqs demand registry unavailable; no new assignments");
                }
                return Ok(actions);
            }
        };
        for (pending, grant) in pending.into_iter().zip(grants) {
            let Some((key, bucket_id, budget)) = pending else {
                continue;
            };
            let strategy = if grant.admitted {
                split::bucket(&budget, grant.units)
            } else {
                metrics.record_refused(Refusal::RegistryFull);
                Strategy::DenyAll
            };
            push(
                stream,
                metrics,
                &mut actions,
                &key,
                bucket_id,
                strategy,
                now,
                ttl,
            );
        }
        Ok(actions)
    }
}

fn refuse(
    metrics: &crate::metrics::rlqs::RlqsMetrics,
    refusal: Refusal,
    err: &InputError,
    domain: &str,
) {
    metrics.record_refused(refusal);
    metrics.record_pushed(Pushed::DenyAll);
    debug!(rl.domain = %domain, error = err as &dyn std::error::Error, "rlqs bucket refused; denied");
}

/// Adds the assignment for `key` to `actions` when it is due.
#[allow(clippy::too_many_arguments)]
fn push(
    stream: &mut OpenStream,
    metrics: &crate::metrics::rlqs::RlqsMetrics,
    actions: &mut Vec<BucketAction>,
    key: &BucketKey,
    bucket_id: BucketId,
    strategy: Strategy,
    now: UnixMillis,
    ttl: Duration,
) {
    if let Some(previous) = stream.state.should_push(key, strategy, now, ttl) {
        metrics.record_pushed(pushed_kind(strategy));
        metrics.add_granted(micro_rate(strategy) - previous.map_or(0, micro_rate));
        actions.push(assignment(bucket_id, strategy, ttl));
    }
}

type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = ResponseStream;

    async fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<Self::StreamRateLimitQuotasStream>, tonic::Status> {
        let shared = self.inner.clone();
        let member = match request
            .metadata()
            .get(CLIENT_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|id| !id.is_empty() && id.len() <= MAX_CLIENT_ID_BYTES)
        {
            Some(id) => format!("client:{id}"),
            None => {
                let n = shared.streams.fetch_add(1, Ordering::Relaxed);
                format!("stream:{:016x}", shared.names.hash_one(n))
            }
        };
        shared.limiter.metrics().rlqs.add_streams(1);
        let stream = OpenStream {
            shared,
            member,
            state: StreamState::default(),
            done: false,
        };
        let inbound = request.into_inner();
        let responses = futures_util::stream::unfold(
            (inbound, stream),
            |(mut inbound, mut stream)| async move {
                if stream.done {
                    return None;
                }
                loop {
                    let draining = stream.shared.draining.clone();
                    let message = tokio::select! {
                        () = draining.cancelled() => return None,
                        message = inbound.message() => message,
                    };
                    let report = match message {
                        Ok(Some(report)) => report,
                        // The Envoy closed the stream.
                        Ok(None) => return None,
                        // It broke, or sent what cannot be decoded: say so
                        // (the status reaches a client still listening).
                        Err(status) => {
                            debug!(
                                error = &status as &dyn std::error::Error,
                                "rlqs stream failed"
                            );
                            stream.done = true;
                            return Some((Err(status), (inbound, stream)));
                        }
                    };
                    let shared = stream.shared.clone();
                    match shared.report(&mut stream, report).await {
                        Ok(actions) if actions.is_empty() => {}
                        Ok(actions) => {
                            let response = RateLimitQuotaResponse {
                                bucket_action: actions,
                            };
                            return Some((Ok(response), (inbound, stream)));
                        }
                        Err(status) => {
                            stream.done = true;
                            return Some((Err(status), (inbound, stream)));
                        }
                    }
                }
            },
        );
        Ok(tonic::Response::new(Box::pin(responses)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadOptions, Source, load_sources};

    fn index(yaml: &str) -> Index {
        load_sources(
            &[Source {
                name: "rules.yaml".into(),
                text: yaml.into(),
            }],
            &LoadOptions::default(),
        )
        .unwrap()
    }

    fn key(pairs: &[(&str, &str)]) -> BucketKey {
        state::bucket_key(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            &StreamBounds::default(),
        )
        .unwrap()
    }

    const RULES: &str = include_str!("../../tests/fixtures/rlqs/edge.yaml");

    #[test]
    fn buckets_match_like_descriptors() {
        let index = index(RULES);
        let options = RlqsOptions::default();
        let decide =
            |domain: &str, pairs: &[(&str, &str)]| decide(&index, domain, &key(pairs), &options);
        let Decision::Split { budget, id, rule } = decide("edge", &[("user", "alice")]) else {
            panic!("user is limited");
        };
        assert_eq!(
            budget,
            Budget {
                requests: 60,
                window_secs: 60,
                burst: 60
            }
        );
        assert_eq!(id, CounterId::new("edge", [("user", "alice")]));
        assert_eq!(rule, "edge.user");
        // Pairs in key order: {user, plan} is the descriptor plan, user.
        let Decision::Split { budget, rule, .. } =
            decide("edge", &[("user", "bob"), ("plan", "free")])
        else {
            panic!("plan/user is limited");
        };
        assert_eq!(budget.window_secs, 3_600);
        assert_eq!(rule, "edge.plan_free.user");
        let Decision::Split { budget, .. } = decide("edge", &[("api", "k")]) else {
            panic!("gcra is limited");
        };
        assert_eq!(budget.burst, 30);
        // Candidate (shadow) limits never deny: only the enforced one counts.
        let Decision::Split { budget, .. } = decide("edge", &[("team", "t")]) else {
            panic!("team is limited");
        };
        assert_eq!(budget.requests, 100);
        // share_threshold: every matching value shares one budget.
        let Decision::Split { id, .. } = decide("edge", &[("path", "/api/a")]) else {
            panic!("path is limited");
        };
        assert_eq!(id, CounterId::new("edge", [("path", "/api/*")]));
    }

    #[test]
    fn blanket_answers() {
        let index = index(RULES);
        let options = RlqsOptions::default();
        let strategy = |domain: &str, pairs: &[(&str, &str)], options: &RlqsOptions| match decide(
            &index,
            domain,
            &key(pairs),
            options,
        ) {
            Decision::Blanket { strategy, .. } => Some(strategy),
            Decision::Split { .. } => None,
        };
        let cases: [(&str, (&str, &str), Strategy); 6] = [
            ("edge", ("vip", "x"), Strategy::AllowAll),
            ("edge", ("banned", "x"), Strategy::DenyAll),
            ("edge", ("trial", "x"), Strategy::AllowAll),
            ("edge", ("trial_team", "x"), Strategy::AllowAll),
            ("edge", ("nothing", "x"), Strategy::AllowAll),
            ("nowhere", ("user", "x"), Strategy::AllowAll),
        ];
        for (domain, pair, expected) in cases {
            assert_eq!(
                strategy(domain, &[pair], &options),
                Some(expected),
                "{pair:?}"
            );
        }
        let deny = RlqsOptions {
            unmatched: Unmatched::DenyAll,
            ..RlqsOptions::default()
        };
        assert_eq!(
            strategy("edge", &[("nothing", "x")], &deny),
            Some(Strategy::DenyAll)
        );
        assert_eq!(
            strategy("nowhere", &[("user", "x")], &deny),
            Some(Strategy::DenyAll)
        );
        let shadow = RlqsOptions {
            global_shadow_mode: true,
            ..RlqsOptions::default()
        };
        assert_eq!(
            strategy("edge", &[("user", "x")], &shadow),
            Some(Strategy::AllowAll)
        );
        // The limited rule still limits without shadow mode.
        assert_eq!(strategy("edge", &[("user", "x")], &options), None);
    }

    #[test]
    fn several_limits_give_the_slowest_rate_and_smallest_burst() {
        let limit = |requests: u32, unit| Limit {
            name: None,
            requests_per_unit: requests,
            unit,
            unit_multiplier: std::num::NonZeroU32::MIN,
            algorithm: Algorithm::SlidingWindow,
            burst: None,
            count_rejected: false,
            shadow_mode: false,
        };
        use crate::descriptor::Unit;
        assert_eq!(
            budget(&[&limit(10, Unit::Second), &limit(300, Unit::Minute)]),
            Some(Budget {
                requests: 300,
                window_secs: 60,
                burst: 10
            })
        );
        assert_eq!(
            budget(&[&limit(10, Unit::Second), &limit(0, Unit::Minute)]),
            None
        );
    }

    #[test]
    fn members_leave_the_split_once_their_assignments_expired() {
        let options = RlqsOptions::default();
        assert_eq!(options.stale_after(), options.ttl() + ENVOY_REPORT_INTERVAL);
        assert_eq!(options.stale_after(), Duration::from_secs(20));
    }

    #[test]
    fn ttls_are_never_under_a_second() {
        let options = RlqsOptions {
            assignment_ttl: Duration::from_millis(10),
            ..RlqsOptions::default()
        };
        assert_eq!(options.ttl(), MIN_ASSIGNMENT_TTL);
        let action = assignment(BucketId::default(), Strategy::AllowAll, options.ttl());
        let Some(Action::QuotaAssignmentAction(a)) = action.bucket_action else {
            panic!("an assignment");
        };
        assert_eq!(a.assignment_time_to_live.unwrap().seconds, 1);
    }
}
