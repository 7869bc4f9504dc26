//! Unit tests of `rlqs`.

use super::decide::budget;
use super::state::StreamBounds;
use super::*;
use crate::config::{Algorithm, Index, Limit, LoadOptions, Source, load_sources};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use crate::store::CounterId;

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
    let redactor = crate::config::Redactor::random();
    let decide = |domain: &str, pairs: &[(&str, &str)]| {
        decide(&index, domain, &key(pairs), &options, &redactor)
    };
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
    // REDACT_STORE_KEYS: the registry's key holds a secret value's tag.
    let tagging = crate::config::Redactor::new(None, vec!["user".into()], true).unwrap();
    let Decision::Split { id, .. } = super::decide::decide(
        &index,
        "edge",
        &key(&[("user", "alice")]),
        &options,
        &tagging,
    ) else {
        panic!("user is limited");
    };
    let tag = tagging.tag("alice");
    assert_eq!(id, CounterId::new("edge", [("user", tag.as_str())]));
    // Pairs in key order: {user, plan} is the descriptor plan, user.
    let Decision::Split { budget, rule, .. } = decide("edge", &[("user", "bob"), ("plan", "free")])
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
    let redactor = crate::config::Redactor::random();
    let strategy = |domain: &str, pairs: &[(&str, &str)], options: &RlqsOptions| match decide(
        &index,
        domain,
        &key(pairs),
        options,
        &redactor,
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
        calendar: None,
        slot: None,
        lease: false,
        store: 0,
        partition_allowance: 0,
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
