//! Unit tests of `metrics`.

use super::*;
use render::escape;

#[test]
fn series_from_request_data_are_bounded_in_count_and_length() {
    let m = Metrics::default();
    for i in 0..1_000 {
        m.record_domain_not_found(&format!("caller-chosen-{i}"));
    }
    let long = "é".repeat(1_000);
    m.record_rule(&format!("d.user_{long}"), hit(0, 1, 10));
    m.record_rule(&format!("d.user_{long}x"), hit(0, 1, 10));
    let text = m.render(None);
    let unknown = text
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_domain_not_found{"))
        .count();
    assert_eq!(unknown, MAX_UNKNOWN_DOMAINS);
    assert!(
        text.lines().all(|l| l.len() < 2 * MAX_LABEL_BYTES + 200),
        "a label longer than the bound"
    );
    // The two long keys share their cut series.
    assert_eq!(m.rules.load().len(), 1);
    assert_eq!(
        m.series_dropped.load(Ordering::Relaxed),
        1_000 - MAX_UNKNOWN_DOMAINS as u64
    );
}

fn hit(before: u64, hits: u64, limit: u64) -> RuleHit {
    let after = before + hits;
    RuleHit {
        hits,
        limit,
        before,
        after,
        over_limit: after > limit,
        local_cache: false,
        shadow_mode: false,
    }
}

#[test]
fn reference_near_limit_vector() {
    // Limit 15, ratio 0.8: threshold 12.
    let m = Metrics::default();
    m.record_rule("d.k", hit(10, 1, 15)); // after 11: OK, near 0
    m.record_rule("d.k", hit(11, 2, 15)); // after 13: OK, near 1
    m.record_rule("d.k", hit(13, 3, 15)); // after 16: over 1
    let c = m.rule_counters("d.k").unwrap();
    assert_eq!(c.within_limit.load(Ordering::Relaxed), 3);
    assert_eq!(c.near_limit.load(Ordering::Relaxed), 1 + 2);
    assert_eq!(c.over_limit.load(Ordering::Relaxed), 1);
    m.record_rule(
        "d.k",
        RuleHit {
            local_cache: true,
            ..hit(16, 1, 15)
        },
    );
    // A snapshot: read them again.
    let c = m.rule_counters("d.k").unwrap();
    assert_eq!(c.over_limit.load(Ordering::Relaxed), 2);
    assert_eq!(c.over_limit_with_local_cache.load(Ordering::Relaxed), 1);
}

#[test]
fn twenty_five_requests_on_twenty() {
    let m = Metrics::default();
    for before in 0..25 {
        m.record_rule("edge.user", hit(before, 1, 20));
    }
    let c = m.rule_counters("edge.user").unwrap();
    assert_eq!(c.total_hits.load(Ordering::Relaxed), 25);
    assert_eq!(c.within_limit.load(Ordering::Relaxed), 20);
    assert_eq!(c.over_limit.load(Ordering::Relaxed), 5);
    assert_eq!(c.near_limit.load(Ordering::Relaxed), 4);
    let text = m.render(None);
    assert!(
        text.contains("ratelimit_service_rate_limit_within_limit{domain=\"edge\",key=\"user\"} 20"),
        "{text}"
    );
}

#[test]
fn series_are_capped_and_drops_counted() {
    let m = Metrics::new(0.8, 2);
    for i in 0..5 {
        m.record_rule(&format!("d.k_{i}"), hit(0, 1, 10));
    }
    assert!(m.rule_counters("d.k_1").is_some());
    assert!(m.rule_counters("d.k_2").is_none());
    assert!(
        m.render(None)
            .contains("ratelimit_metrics_series_dropped_total 3")
    );
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn histogram_renders_cumulative_buckets_from_one_increment_per_observation() {
    let h = histogram::Histogram::default();
    for micros in [50, 80, 2_000, 700_000, 2_000_000] {
        h.observe(Duration::from_micros(micros));
    }
    let mut out = String::new();
    h.render(&mut out, "t", "test");
    let bucket = |le: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("t_bucket{{le=\"{le}\"}} ")))
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(bucket("0.0001"), Some(2));
    assert_eq!(bucket("0.001"), Some(2));
    assert_eq!(bucket("0.0025"), Some(3));
    assert_eq!(bucket("0.5"), Some(3));
    assert_eq!(bucket("1"), Some(4));
    assert_eq!(bucket("+Inf"), Some(5));
    assert!(out.contains("t_count 5\n"), "{out}");
}
