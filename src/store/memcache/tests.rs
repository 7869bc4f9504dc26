use super::ops::answer;
use super::*;
use crate::algorithm::FixedWindow;
use crate::algorithm::Spec;
use crate::store::CounterId;
use crate::store::Op;

fn op(limit: u64, hits: u64) -> Op {
    Op {
        id: CounterId::new("d", [("k", "v")]),
        spec: Spec::FixedWindow {
            window: FixedWindow::new(60),
            limit,
        },
        hits,
        lease: None,
    }
}

#[tokio::test]
async fn expiry_is_the_window_and_past_30_days_a_point_in_time() {
    let store = MemcacheStore::connect(MemcacheConfig::servers(vec!["127.0.0.1:1".to_owned()]))
        .await
        .unwrap();
    assert_eq!(store.expiry(60), 60);
    // A 30-day month is still a duration to memcached.
    assert_eq!(store.expiry(2_592_000), 2_592_000);
    // A year is past it: sent as the instant it ends, on the wall clock.
    let wall = crate::clock::Clock::now(&crate::clock::SystemClock).as_secs();
    let year = u64::from(store.expiry(31_536_000));
    assert!(
        (wall + 31_536_000..=wall + 31_536_010).contains(&year),
        "{year}"
    );
}

#[tokio::test]
async fn jitter_stays_below_its_maximum() {
    let mut config = MemcacheConfig::servers(vec!["127.0.0.1:1".to_owned()]);
    config.expiration_jitter_max_secs = 5;
    let store = MemcacheStore::connect(config).await.unwrap();
    for _ in 0..200 {
        let expiry = store.expiry(60);
        assert!((60..65).contains(&expiry), "{expiry}");
    }
    // Below one more window: a second's key gets none, a minute's less
    // than a minute of the default 300.
    let mut config = MemcacheConfig::servers(vec!["127.0.0.1:1".to_owned()]);
    config.expiration_jitter_max_secs = 300;
    let store = MemcacheStore::connect(config).await.unwrap();
    for _ in 0..200 {
        assert_eq!(store.expiry(1), 1);
        let expiry = store.expiry(60);
        assert!((60..120).contains(&expiry), "{expiry}");
    }
}

#[test]
fn answers_follow_the_count_memcached_gives() {
    let now = UnixMillis::from_secs(30);
    let within = answer(&op(3, 1), 3, false, now);
    assert!(!within.over_limit && within.counted);
    assert_eq!((within.before, within.after, within.remaining), (2, 3, 0));
    let over = answer(&op(3, 2), 4, false, now);
    assert!(over.over_limit && over.counted);
    let refused = answer(&op(3, 2), 4, true, now);
    assert!(refused.over_limit && !refused.counted);
    assert_eq!(
        (refused.before, refused.after, refused.remaining),
        (2, 4, 0)
    );
    assert_eq!(within.reset, Duration::from_secs(30));
}

#[tokio::test]
async fn a_server_that_is_not_there_is_a_transient_error() {
    // Port 1 on loopback: nothing listens there.
    let store = MemcacheStore::connect(MemcacheConfig::servers(vec!["127.0.0.1:1".to_owned()]))
        .await
        .unwrap();
    let batch = Batch {
        ops: vec![op(3, 1)],
        stop_when_over: false,
    };
    let err = store
        .execute(batch, UnixMillis::from_secs(0))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(!store.ping().await);
}

#[tokio::test]
async fn no_server_is_a_config_error() {
    let err = MemcacheStore::connect(MemcacheConfig::servers(Vec::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "config");
}

#[tokio::test]
async fn memcached_keeps_no_leases() {
    // No script to take a block atomically: with `lease: true` every hit
    // is still counted with `incr` (the rule loads: config/validation).
    let store = MemcacheStore::connect(MemcacheConfig::servers(vec!["127.0.0.1:1".to_owned()]))
        .await
        .unwrap();
    assert!(!crate::store::Store::leases(
        &crate::store::StoreKind::Memcache(store)
    ));
}
