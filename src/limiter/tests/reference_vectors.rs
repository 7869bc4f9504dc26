//! The reference's worked `hits_addend` vectors, with the numbers written
//! out (`test/redis/fixed_cache_impl_test.go`).

use super::*;

#[tokio::test]
async fn reference_vector_limit_20_hits_3_after_5_leaves_15() {
    let (l, _) = limiter();
    ask(&l, vec![with_hits(one("k20", "x"), 2)]).await;
    let r = ask(&l, vec![with_hits(one("k20", "x"), 3)]).await;
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 15);
}

#[tokio::test]
async fn reference_vector_limit_8_hits_2_after_7_leaves_1() {
    let (l, _) = limiter();
    ask(&l, vec![with_hits(one("k8", "x"), 5)]).await;
    let r = ask(&l, vec![with_hits(one("k8", "x"), 2)]).await;
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].limit_remaining),
        (Code::Ok, 1)
    );
}

#[tokio::test]
async fn reference_vector_hits_0_on_count_11_of_10_is_over_and_consumes_nothing() {
    let (l, _) = limiter();
    ask(&l, vec![with_hits(one("hourly", "x"), 11)]).await;
    for _ in 0..3 {
        let r = ask(&l, vec![with_hits(one("hourly", "x"), 0)]).await;
        assert_eq!(r.overall_code, Code::OverLimit);
        assert_eq!(r.statuses[0].limit_remaining, 0);
    }
    // Nothing was consumed: the counter is still 11.
    let memory = l.store().as_memory().unwrap();
    assert_eq!(memory.len(), 1);
}

#[tokio::test]
async fn hits_0_at_exactly_the_limit_is_ok_with_nothing_left() {
    let (l, _) = limiter();
    ask(&l, vec![with_hits(one("hourly", "x"), 10)]).await;
    let r = ask(&l, vec![with_hits(one("hourly", "x"), 0)]).await;
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].limit_remaining),
        (Code::Ok, 0)
    );
}
