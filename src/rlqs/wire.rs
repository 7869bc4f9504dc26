//! RLQS on the wire: strategies and bucket actions as Envoy reads them.

use crate::metrics::rlqs::Pushed;
use crate::proto::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, Strategy as ProtoStrategy,
};
use crate::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket as ProtoTokenBucket};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use crate::proto::envoy::service::rate_limit_quota::v3::BucketId;
use std::time::Duration;
use crate::algorithm::quota_split::Strategy;

/// A strategy's token rate in millionths of a token per second.
pub(super) fn micro_rate(strategy: Strategy) -> i64 {
    match strategy {
        Strategy::TokenBucket(b) => {
            let micro =
                u128::from(b.tokens_per_fill) * 1_000_000 / u128::from(b.fill_interval_secs.max(1));
            i64::try_from(micro).unwrap_or(i64::MAX)
        }
        _ => 0,
    }
}

pub(super) fn proto_strategy(strategy: Strategy) -> RateLimitStrategy {
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

pub(super) fn pushed_kind(strategy: Strategy) -> Pushed {
    match strategy {
        Strategy::AllowAll => Pushed::AllowAll,
        Strategy::DenyAll => Pushed::DenyAll,
        Strategy::TokenBucket(_) => Pushed::TokenBucket,
    }
}

pub(super) fn assignment(bucket_id: BucketId, strategy: Strategy, ttl: Duration) -> BucketAction {
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

pub(super) fn abandon(bucket_id: BucketId) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}
