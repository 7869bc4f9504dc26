//! The limiter over a store that always fails: what each failure mode
//! answers, what it counts, and that requests needing no counter never
//! reach the store. `Limiter` is generic over its store for this.

use super::*;
use crate::algorithm::Outcome;
use crate::store::{Batch, Store, StoreError};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A store that is never reachable, counting the batches it was asked.
#[derive(Debug, Default)]
struct DownStore {
    asked: AtomicUsize,
}

impl Store for DownStore {
    async fn execute_within(
        &self,
        _batch: Batch,
        _now: UnixMillis,
        _deadline: Option<std::time::Duration>,
    ) -> Result<Vec<Outcome>, StoreError> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        Err(StoreError::Timeout)
    }

    async fn peek(&self, _batch: &Batch, _now: UnixMillis) -> Result<Vec<Outcome>, StoreError> {
        Err(StoreError::Timeout)
    }
}

fn down(failure_mode: FailureMode) -> Limiter<DownStore> {
    let index = load_sources(
        &[Source {
            name: "d.yaml".into(),
            text: RULES.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap();
    Limiter::new(
        Arc::new(arc_swap::ArcSwap::from_pointee(index)),
        DownStore::default(),
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions {
            failure_mode,
            ..LimiterOptions::default()
        },
    )
}

fn metric(limiter: &Limiter<DownStore>, name: &str) -> String {
    let text = limiter.metrics().render(None);
    text.lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn error_mode_fails_the_request_with_the_store_error() {
    let limiter = down(FailureMode::Error);
    let err = limiter
        .should_rate_limit(&request(vec![one("k20", "x")]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LimitError::Store(StoreError::Timeout)),
        "{err:?}"
    );
    assert_eq!(limiter.store().asked.load(Ordering::Relaxed), 1);
    assert_eq!(
        metric(
            &limiter,
            "ratelimit_service_call_should_rate_limit_redis_error"
        ),
        "1"
    );
    assert_eq!(
        metric(&limiter, "ratelimit_service_store_failure_mode_answers"),
        "0"
    );
}

#[tokio::test]
async fn allow_mode_answers_a_fresh_window() {
    let limiter = down(FailureMode::Allow);
    let response = limiter
        .should_rate_limit(&request(vec![one("k20", "x"), one("minute", "y")]))
        .await
        .unwrap();
    assert_eq!(response.overall_code, Code::Ok);
    let remaining: Vec<u64> = response
        .statuses
        .iter()
        .map(|s| u64::from(s.limit_remaining))
        .collect();
    assert_eq!(remaining, [20, 2]);
    let limits: Vec<Option<u32>> = response
        .statuses
        .iter()
        .map(|s| s.current_limit.as_ref().map(|l| l.requests_per_unit))
        .collect();
    assert_eq!(limits, [Some(20), Some(2)]);
    assert_eq!(
        metric(&limiter, "ratelimit_service_store_failure_mode_answers"),
        "1"
    );
}

#[tokio::test]
async fn deny_mode_answers_over_limit_with_nothing_left() {
    let limiter = down(FailureMode::Deny);
    let response = limiter
        .should_rate_limit(&request(vec![one("k20", "x")]))
        .await
        .unwrap();
    assert_eq!(response.overall_code, Code::OverLimit);
    let status = response.statuses.first().unwrap();
    assert_eq!(status.code, Code::OverLimit);
    assert_eq!(status.limit_remaining, 0);
    assert_eq!(
        status.duration_until_reset,
        Some(std::time::Duration::from_secs(1))
    );
}

/// Unlimited rules, unknown domains and unmatched descriptors need no
/// counter: they are answered while the store is down, whatever the mode.
#[tokio::test]
async fn requests_that_count_nothing_never_reach_the_store() {
    let limiter = down(FailureMode::Error);
    let response = limiter
        .should_rate_limit(&request(vec![one("free", "x"), one("nomatch", "y")]))
        .await
        .unwrap();
    assert_eq!(response.overall_code, Code::Ok);
    let mut unknown = request(vec![one("k20", "x")]);
    unknown.domain = "elsewhere".into();
    let response = limiter.should_rate_limit(&unknown).await.unwrap();
    assert_eq!(response.overall_code, Code::Ok);
    assert_eq!(limiter.store().asked.load(Ordering::Relaxed), 0);
}
