//! Candidate limits (`shadow_mode` on a limit) never decide.

use super::*;

#[tokio::test]
async fn a_rule_of_candidates_only_answers_like_a_shadow_rule() {
    let (l, _) = limiter();
    ask(&l, vec![one("trial", "x")]).await;
    let r = ask(&l, vec![one("trial", "x")]).await;
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(r.statuses[0].code, Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        1
    );
    let c = l.metrics().rule_counters("d.trial").unwrap();
    assert_eq!(c.shadow_mode.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(c.over_limit.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test]
async fn candidates_never_decide_next_to_enforced_limits() {
    let (l, _) = limiter();
    for n in 1..=5u32 {
        let r = ask(&l, vec![one("mixed", "x")]).await;
        assert_eq!(r.overall_code, Code::Ok, "call {n}");
        let status = &r.statuses[0];
        assert_eq!(status.limit_remaining, 5 - n, "the sliding window answers");
        assert_eq!(status.current_limit.as_ref().unwrap().requests_per_unit, 5);
    }
    let r = ask(&l, vec![one("mixed", "x")]).await;
    assert_eq!(
        r.overall_code,
        Code::OverLimit,
        "the enforced limit still limits"
    );
    // The GCRA candidate (2 at once) would have denied calls 3 to 6.
    let c = l.metrics().rule_counters("d.mixed").unwrap();
    assert_eq!(c.shadow_mode.load(std::sync::atomic::Ordering::Relaxed), 4);
}
