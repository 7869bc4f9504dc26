//! Unit tests of the decision.

use super::*;
use crate::clock::{ManualClock, UnixMillis};
use crate::config::{LoadOptions, Source, load_sources};
use crate::descriptor::{Descriptor, Entry, Unit};
use crate::store::{Batch, MemoryStore, StoreKind};

mod bounds;
mod candidates;
mod explain_predicts;
mod headers;
mod reference_vectors;
mod store_failure;
mod store_timing;
mod tables;

const RULES: &str = r"
domain: d
descriptors:
  - key: k20
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: k8
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: hourly
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_minute}
  - key: five_minutes
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: promo
    value: spring
    rate_limit: {unlimited: true, replaces: [{name: per_minute}]}
  - key: replacer
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_minute}]
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: trial
    rate_limit: {unit: minute, requests_per_unit: 1, shadow_mode: true}
  - key: mixed
    rate_limits:
      - {unit: minute, requests_per_unit: 2, algorithm: gcra, shadow_mode: true}
      - {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: leased
    rate_limit: {unit: minute, requests_per_unit: 3, lease: true}
  - key: burst
    rate_limits:
      - {unit: second, requests_per_unit: 3, algorithm: sliding_window}
      - {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
";

/// 2023-11-14T22:13:20Z, chosen on a minute boundary plus 20 s.
const T0: u64 = 1_700_000_000;

fn limiter_with(options: LimiterOptions) -> (Limiter<StoreKind>, ManualClock) {
    let index = load_sources(
        &[Source {
            name: "d.yaml".into(),
            text: RULES.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap();
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let limiter = Limiter::new(
        Arc::new(arc_swap::ArcSwap::from_pointee(index)),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(clock.clone()),
        options,
    );
    (limiter, clock)
}

fn limiter() -> (Limiter<StoreKind>, ManualClock) {
    limiter_with(LimiterOptions::default())
}

fn one(key: &str, value: &str) -> Descriptor {
    Descriptor::from_pairs([(key, value)])
}

fn request(descriptors: Vec<Descriptor>) -> Request {
    Request {
        domain: "d".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn with_hits(mut d: Descriptor, hits: u64) -> Descriptor {
    d.hits_addend = Some(hits);
    d
}

async fn ask(l: &Limiter<StoreKind>, descriptors: Vec<Descriptor>) -> Response {
    l.should_rate_limit(&request(descriptors)).await.unwrap()
}

#[tokio::test]
async fn first_n_hits_pass_then_over_limit_hits_still_count() {
    let (l, clock) = limiter();
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let r = ask(&l, vec![one("minute", "u")]).await;
        remaining.push((r.statuses[0].code, r.statuses[0].limit_remaining));
    }
    assert_eq!(
        remaining,
        vec![(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)]
    );
    // The over-limit hit counted: a check without consuming is still over.
    let r = ask(&l, vec![with_hits(one("minute", "u"), 0)]).await;
    assert_eq!(r.statuses[0].code, Code::OverLimit);
    // The next epoch-aligned minute starts from zero.
    clock.advance(Duration::from_secs(40));
    let r = ask(&l, vec![one("minute", "u")]).await;
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].limit_remaining),
        (Code::Ok, 1)
    );
}

#[tokio::test]
async fn over_limit_status_carries_limit_and_reset() {
    let (l, _) = limiter();
    let r = ask(&l, vec![one("minute", "u")]).await;
    let status = &r.statuses[0];
    assert_eq!(
        status.current_limit,
        Some(CurrentLimit {
            name: Some(Arc::from("per_minute")),
            requests_per_unit: 2,
            unit: Unit::Minute,
        })
    );
    // T0 is 20 s into its minute.
    assert_eq!(status.duration_until_reset, Some(Duration::from_secs(40)));
}

#[tokio::test]
async fn unit_multiplier_makes_a_longer_window() {
    let (l, clock) = limiter();
    for _ in 0..3 {
        assert_eq!(
            ask(&l, vec![one("five_minutes", "u")]).await.overall_code,
            Code::Ok
        );
    }
    clock.advance(Duration::from_secs(60));
    let r = ask(&l, vec![one("five_minutes", "u")]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    let reset = r.statuses[0].duration_until_reset.unwrap().as_secs();
    assert_eq!(reset, 300 - (T0 + 60) % 300);
}

#[tokio::test]
async fn zero_requests_per_unit_blocks_everything() {
    let (l, _) = limiter();
    let r = ask(&l, vec![one("blocked", "x")]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
}

#[tokio::test]
async fn shadow_mode_answers_ok_but_reports_nothing_left() {
    let (l, _) = limiter();
    ask(&l, vec![one("shadow", "x")]).await;
    let r = ask(&l, vec![one("shadow", "x")]).await;
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(r.statuses[0].code, Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert!(r.statuses[0].current_limit.is_some());
}

#[tokio::test]
async fn global_shadow_mode_keeps_statuses_over_limit() {
    let (l, _) = limiter_with(LimiterOptions {
        global_shadow_mode: true,
        ..LimiterOptions::default()
    });
    let r = ask(&l, vec![one("blocked", "x")]).await;
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(r.statuses[0].code, Code::OverLimit);
}

#[tokio::test]
async fn quota_descriptors_fail_the_request_only_when_all_are_over() {
    let (l, _) = limiter();
    ask(&l, vec![one("quota_a", "x")]).await;
    let r = ask(&l, vec![one("quota_a", "x"), one("quota_b", "x")]).await;
    assert_eq!(r.statuses[0].code, Code::OverLimit);
    assert_eq!(r.statuses[1].code, Code::Ok);
    assert_eq!(r.overall_code, Code::Ok);
    let r = ask(&l, vec![one("quota_a", "x"), one("quota_b", "x")]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    // A non-quota descriptor over its limit fails the request by itself.
    let r = ask(&l, vec![one("quota_a", "y"), one("blocked", "x")]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
}

#[tokio::test]
async fn unlimited_is_ok_with_max_remaining_and_counts_nothing() {
    let (l, _) = limiter();
    let r = ask(&l, vec![one("free", "x")]).await;
    assert_eq!(r.statuses[0], Status::UNLIMITED);
    assert_eq!(r.statuses[0].limit_remaining, 4_294_967_295);
    assert!(
        l.store()
            .execute(Batch::default(), UnixMillis(0))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(l.store().as_memory().unwrap().is_empty());
}

#[tokio::test]
async fn an_unlimited_rule_still_replaces_the_limits_it_names() {
    // The reference collects every matched rule's `replaces` before it
    // drops the unlimited ones: promo=spring (unlimited) lifts per_minute.
    let (l, _) = limiter();
    for _ in 0..5 {
        let r = ask(&l, vec![one("minute", "u"), one("promo", "spring")]).await;
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(r.statuses[0], Status::NO_LIMIT);
        assert_eq!(r.statuses[1], Status::UNLIMITED);
    }
    // per_minute (2 a minute) was never counted while replaced.
    let r = ask(&l, vec![one("minute", "u")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
}

#[tokio::test]
async fn replaced_limits_are_dropped_and_not_counted() {
    let (l, _) = limiter();
    for _ in 0..5 {
        let r = ask(&l, vec![one("minute", "u"), one("replacer", "u")]).await;
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(r.statuses[0], Status::NO_LIMIT);
        assert_eq!(
            r.statuses[1]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            100
        );
    }
    // per_minute was never counted while replaced.
    let r = ask(&l, vec![one("minute", "u")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
}

#[tokio::test]
async fn unknown_domain_and_unmatched_descriptors_are_ok_without_limit() {
    let (l, _) = limiter();
    let mut req = request(vec![one("minute", "u")]);
    req.domain = "other".into();
    let r = l.should_rate_limit(&req).await.unwrap();
    assert_eq!(r.statuses, vec![Status::NO_LIMIT]);
    let r = ask(&l, vec![one("nope", "x"), Descriptor::default()]).await;
    assert_eq!(r.statuses, vec![Status::NO_LIMIT, Status::NO_LIMIT]);
    assert_eq!(r.overall_code, Code::Ok);
}

#[tokio::test]
async fn override_replaces_the_rule_but_needs_a_known_domain() {
    let (l, _) = limiter();
    let mut d = one("anything", "x");
    d.limit = Some(crate::descriptor::RateLimitOverride {
        requests_per_unit: 1,
        unit: Unit::Hour,
    });
    let r = ask(&l, vec![d.clone()]).await;
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().unit,
        Unit::Hour
    );
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(ask(&l, vec![d.clone()]).await.overall_code, Code::OverLimit);
    let mut req = request(vec![d]);
    req.domain = "other".into();
    let r = l.should_rate_limit(&req).await.unwrap();
    assert_eq!(r.statuses, vec![Status::NO_LIMIT]);
}

#[tokio::test]
async fn request_hits_addend_applies_unless_descriptor_sets_its_own() {
    let (l, _) = limiter();
    let mut req = request(vec![one("k20", "a"), with_hits(one("k20", "b"), 1)]);
    req.hits_addend = 5;
    let r = l.should_rate_limit(&req).await.unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 15);
    assert_eq!(r.statuses[1].limit_remaining, 19);
}

#[tokio::test]
async fn share_threshold_values_share_one_counter() {
    let (l, _) = limiter();
    ask(&l, vec![one("path", "/api/a")]).await;
    let r = ask(&l, vec![one("path", "/api/b")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(
        ask(&l, vec![one("path", "/api/c")]).await.overall_code,
        Code::OverLimit
    );
}

#[tokio::test]
async fn metrics_follow_the_reference_accounting() {
    let (l, _) = limiter();
    for _ in 0..25 {
        ask(&l, vec![one("k20", "m")]).await;
    }
    let c = l.metrics().rule_counters("d.k20").unwrap();
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(get(&c.total_hits), 25);
    assert_eq!(get(&c.within_limit), 20);
    assert_eq!(get(&c.over_limit), 5);
    assert_eq!(get(&c.near_limit), 4);
    let mut req = request(vec![one("k20", "m")]);
    req.domain = "nowhere".into();
    l.should_rate_limit(&req).await.unwrap();
    let text = l.metrics().render(None);
    assert!(
        text.contains("ratelimit_service_rate_limit_domain_not_found{domain=\"nowhere\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn several_limits_report_the_violated_one() {
    let (l, _) = limiter();
    // burst: 3 per second and 5 per minute on one descriptor.
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = ask(&l, vec![one("burst", "x")]).await;
        let s = &r.statuses[0];
        seen.push((
            s.code,
            s.limit_remaining,
            s.current_limit.as_ref().unwrap().requests_per_unit,
        ));
    }
    assert_eq!(
        seen,
        vec![
            (Code::Ok, 2, 3),
            (Code::Ok, 1, 3),
            (Code::Ok, 0, 3),
            (Code::OverLimit, 0, 3),
        ]
    );
}

#[tokio::test]
async fn lease_on_the_embedded_store_changes_nothing() {
    // One instance owns its counters: no block to take, and the fixed
    // window counts over-limit hits as the reference does.
    let (l, _) = limiter();
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let r = ask(&l, vec![one("leased", "a")]).await;
        remaining.push((r.statuses[0].code, r.statuses[0].limit_remaining));
    }
    assert_eq!(
        remaining,
        [
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0),
            (Code::OverLimit, 0)
        ]
    );
    assert_eq!(l.lease_step().await, 0);
    let explained = l.explain(&request(vec![one("leased", "a")])).await.unwrap();
    assert_eq!(explained.descriptors[0].windows[0].count, 5);
    assert_eq!(explained.descriptors[0].windows[0].lease, None);
}

/// With `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, a refused request counts
/// nothing, so the hits that fit still pass; the reference adds the refused
/// hits and refuses them too (docs/compatibility.md).
#[tokio::test]
async fn stop_increment_counts_nothing_for_a_refused_request() {
    let (l, _clock) = limiter_with(LimiterOptions {
        stop_when_over: true,
        ..LimiterOptions::default()
    });
    let refused = ask(&l, vec![with_hits(one("minute", "a"), 3)]).await;
    assert_eq!(refused.overall_code, Code::OverLimit);
    let after = ask(&l, vec![with_hits(one("minute", "a"), 2)]).await;
    assert_eq!(after.overall_code, Code::Ok);
    assert_eq!(after.statuses[0].limit_remaining, 0);
}
