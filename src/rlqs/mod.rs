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
//!   budget (`algorithm::quota_split`), from the demand registry in the store
//!   (`store::rlqs`), so every instance on one store splits one budget.
//!
//! Assignments are pushed after the first report of a bucket, whenever the
//! split changes, and again before half their TTL has run out; a bucket
//! that reports no request for `idle_timeout` is abandoned.
//!
//! Owns the proto conversion of RLQS (as `server/grpc.rs` does for RLS);
//! `state` is a stream's memory; the pure math is `algorithm::quota_split`.

mod decide;
mod options;
#[cfg(test)]
use options::ENVOY_REPORT_INTERVAL;
pub(crate) mod state;
mod view;
mod wire;

pub(crate) use decide::Decision;
pub(crate) use decide::decide;
pub(crate) use options::{CLIENT_ID_HEADER, MAX_CLIENT_ID_BYTES, MIN_ASSIGNMENT_TTL};
pub use options::{RlqsOptions, Unmatched};
pub(crate) use view::explain;
use wire::{abandon, assignment, micro_rate, pushed_kind};

use crate::algorithm::quota_split::{self as split, Budget, Strategy};
use crate::clock::Clock;
use crate::clock::UnixMillis;
use crate::config::SharedIndex;
use crate::metrics::Metrics;
use crate::metrics::rlqs::{Pushed, Refusal};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::store::StoreKind;
use crate::store::rlqs::{DemandRegistry, DemandReport};
use futures_util::Stream;
use state::{BucketKey, InputError, Step, StreamState};
use std::hash::{BuildHasher as _, RandomState};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// The RLQS service handed to tonic.
#[derive(Debug, Clone)]
pub(crate) struct RlqsService {
    inner: Arc<Shared>,
}

/// What RLQS reads and counts: the rules in force, the store holding the
/// demand registry, the clock and the metrics. The same ones the RLS
/// limiter uses, handed over one by one so RLQS depends on no service.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    /// The rules in force (swapped on reload).
    pub rules: SharedIndex,
    /// The store: the demand registry lives beside the counters.
    pub store: StoreKind,
    /// The one clock of the process.
    pub clock: Arc<dyn Clock>,
    /// Where the RLQS figures are counted (`Metrics::rlqs`).
    pub metrics: Arc<Metrics>,
    /// How secret bucket values are shown.
    pub redactor: Arc<crate::config::Redactor>,
}

#[derive(Debug)]
struct Shared {
    sources: Sources,
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
    /// A service over `sources`' rules, store, clock and metrics. Every
    /// stream ends (OK status, so Envoys reconnect, to this instance or
    /// another) once `draining` is cancelled: streams live as long as their
    /// Envoy, and shutdown must not wait for them.
    pub(crate) fn new(sources: Sources, options: RlqsOptions, draining: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Shared {
                sources,
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
        let metrics = &self.shared.sources.metrics.rlqs;
        metrics.add_streams(-1);
        metrics.add_buckets(-i64::try_from(self.state.len()).unwrap_or(0));
        let granted: i64 = self.state.pushed().map(micro_rate).sum();
        metrics.add_granted(-granted);
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
        let metrics = &self.sources.metrics.rlqs;
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
        let index = self.sources.rules.load_full();
        let now = self.sources.clock.now();
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
            let decision = decide(&index, &domain, &key, options, &self.sources.redactor);
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
            .sources
            .store
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
        shared.sources.metrics.rlqs.add_streams(1);
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
mod tests;
