//! A test RLQS client: one `StreamRateLimitQuotas` stream to floodgate,
//! reports sent by hand, assignments read with a deadline.

use floodgate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use floodgate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use floodgate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use floodgate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use floodgate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use floodgate::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// Longest wait for an answer floodgate is expected to send.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// One stream, as one Envoy holds it.
pub struct RlqsClient {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    /// Barrier buckets used so far.
    barriers: u64,
}

/// One bucket's usage since the last report.
pub struct Usage<'a> {
    pub bucket: &'a [(&'a str, &'a str)],
    pub allowed: u64,
    pub denied: u64,
}

/// What one assignment says, in a form tests compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned {
    AllowAll,
    DenyAll,
    TokenBucket {
        max_tokens: u32,
        tokens_per_fill: u32,
        fill_interval_secs: i64,
    },
    Abandon,
}

impl Assigned {
    /// Tokens per second of a token bucket (0 otherwise).
    pub fn rate(&self) -> f64 {
        match *self {
            Self::TokenBucket {
                tokens_per_fill,
                fill_interval_secs,
                ..
            } => f64::from(tokens_per_fill) / fill_interval_secs as f64,
            _ => 0.0,
        }
    }

    /// Size of a token bucket (0 otherwise).
    pub fn tokens(&self) -> u32 {
        match *self {
            Self::TokenBucket { max_tokens, .. } => max_tokens,
            _ => 0,
        }
    }
}

/// One action of an answer: the bucket (pairs sorted), what to do, and the
/// TTL in milliseconds (0 for an abandon).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub bucket: Vec<(String, String)>,
    pub assigned: Assigned,
    pub ttl_ms: i64,
}

pub fn bucket_id(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn answer(action: BucketAction) -> Answer {
    let mut bucket: Vec<(String, String)> = action
        .bucket_id
        .map(|id| id.bucket.into_iter().collect())
        .unwrap_or_default();
    bucket.sort();
    match action.bucket_action.expect("an action") {
        Action::AbandonAction(_) => Answer {
            bucket,
            assigned: Assigned::Abandon,
            ttl_ms: 0,
        },
        Action::QuotaAssignmentAction(a) => {
            let ttl = a.assignment_time_to_live.expect("a ttl");
            let strategy = a
                .rate_limit_strategy
                .and_then(|s| s.strategy)
                .expect("a strategy");
            let assigned = match strategy {
                Strategy::BlanketRule(rule) if rule == BlanketRule::AllowAll as i32 => {
                    Assigned::AllowAll
                }
                Strategy::BlanketRule(_) => Assigned::DenyAll,
                Strategy::TokenBucket(b) => {
                    let fill = b.fill_interval.expect("a fill interval");
                    assert_eq!(fill.nanos, 0, "whole-second fill intervals");
                    Assigned::TokenBucket {
                        max_tokens: b.max_tokens,
                        tokens_per_fill: b.tokens_per_fill.expect("tokens per fill"),
                        fill_interval_secs: fill.seconds,
                    }
                }
                Strategy::RequestsPerTimeUnit(_) => {
                    panic!("Envoy 1.40 ignores requests_per_time_unit")
                }
            };
            Answer {
                bucket,
                assigned,
                ttl_ms: ttl.seconds * 1_000 + i64::from(ttl.nanos) / 1_000_000,
            }
        }
    }
}

impl RlqsClient {
    /// Opens a stream to `addr`, naming itself `client_id` when given.
    pub async fn connect(addr: SocketAddr, client_id: Option<&str>) -> Self {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Self::over(channel, client_id).await
    }

    /// Opens a stream over `channel` (e.g. a TLS one).
    pub async fn over(channel: tonic::transport::Channel, client_id: Option<&str>) -> Self {
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, rx) = mpsc::channel(16);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(id) = client_id {
            request
                .metadata_mut()
                .insert("rlqs-client-id", id.parse().unwrap());
        }
        let answers = client
            .stream_rate_limit_quotas(request)
            .await
            .unwrap()
            .into_inner();
        Self {
            reports,
            answers,
            barriers: 0,
        }
    }

    /// Sends one report for `domain`.
    pub async fn report(&self, domain: &str, usages: &[Usage<'_>]) {
        let bucket_quota_usages: Vec<BucketQuotaUsage> = usages
            .iter()
            .map(|usage| BucketQuotaUsage {
                bucket_id: Some(bucket_id(usage.bucket)),
                time_elapsed: Some(prost_types::Duration {
                    seconds: 5,
                    nanos: 0,
                }),
                num_requests_allowed: usage.allowed,
                num_requests_denied: usage.denied,
                last_report: None,
            })
            .collect();
        self.reports
            .send(RateLimitQuotaUsageReports {
                domain: domain.to_owned(),
                bucket_quota_usages,
            })
            .await
            .unwrap();
    }

    /// The next answer, its actions sorted by bucket; panics if none comes
    /// in time or the stream ends.
    pub async fn next(&mut self) -> Vec<Answer> {
        self.try_next()
            .await
            .expect("the stream ended with an error")
            .expect("the stream ended")
    }

    /// The next answer, the stream's end (`None`) or its error status.
    pub async fn try_next(&mut self) -> Result<Option<Vec<Answer>>, tonic::Status> {
        let message = tokio::time::timeout(ANSWER_WITHIN, self.answers.message())
            .await
            .expect("no answer from floodgate in time")?;
        Ok(message.map(|response| {
            let mut answers: Vec<Answer> = response.bucket_action.into_iter().map(answer).collect();
            answers.sort_by(|a, b| a.bucket.cmp(&b.bucket));
            answers
        }))
    }

    /// Reports `usages` and returns the answer.
    pub async fn ask(&mut self, domain: &str, usages: &[Usage<'_>]) -> Vec<Answer> {
        self.report(domain, usages).await;
        self.next().await
    }

    /// Reports `usages` for `domain` and returns what came back for them,
    /// possibly nothing: a report of a new barrier bucket follows (one
    /// stream keeps its order, and a new bucket is always answered), so the
    /// answer to the first report, if any, comes before the barrier's.
    pub async fn ask_or_nothing(&mut self, domain: &str, usages: &[Usage<'_>]) -> Vec<Answer> {
        self.barriers += 1;
        let name = format!("b{}", self.barriers);
        let barrier = vec![("barrier".to_owned(), name.clone())];
        self.report(domain, usages).await;
        self.report(domain, &[usage(&[("barrier", &name)], 1, 0)])
            .await;
        let mut answers = self.next().await;
        if answers.iter().any(|a| a.bucket == barrier) {
            answers.retain(|a| a.bucket != barrier);
            return answers;
        }
        let next = self.next().await;
        assert!(next.iter().all(|a| a.bucket == barrier), "{next:?}");
        answers
    }
}

/// A single-bucket usage.
pub fn usage<'a>(bucket: &'a [(&'a str, &'a str)], allowed: u64, denied: u64) -> Usage<'a> {
    Usage {
        bucket,
        allowed,
        denied,
    }
}
