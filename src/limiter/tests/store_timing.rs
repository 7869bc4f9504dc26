//! What the store round-trip histogram records for the embedded store.

use super::*;

#[tokio::test]
async fn embedded_store_calls_are_counted_with_no_time() {
    let (l, _) = limiter();
    ask(&l, vec![one("k20", "x")]).await;
    ask(&l, vec![one("k8", "y")]).await;
    let text = l.metrics().render(None);
    assert!(
        text.contains("ratelimit_store_round_trip_seconds_count 2\n"),
        "{text}"
    );
    assert!(
        text.contains("ratelimit_store_round_trip_seconds_sum 0\n"),
        "{text}"
    );
}
