//! Unit tests of `redis`.

use super::command::{COUNT, algorithm_number, counts_always};
use super::config::{connection_info, redact};
use super::reply::{integers, outcome, reply_len};
use super::*;
use crate::algorithm::fixed_window::is_over_limit;
use crate::algorithm::{FixedWindow, Spec};
use crate::store::{Op, StoreError};

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact("redis://user:secret@host:6379/0"),
        "redis://user:***@host:6379/0"
    );
    assert_eq!(
        redact("rediss://:secret@a:1,redis://b:2"),
        "rediss://:***@a:1,redis://b:2"
    );
    assert_eq!(redact("127.0.0.1:6379"), "127.0.0.1:6379");
}

#[test]
fn reference_address_forms_parse() {
    let info = connection_info("127.0.0.1:6379", Some("user:pw"), None).unwrap();
    assert_eq!(info.addr().to_string(), "127.0.0.1:6379");
    assert_eq!(info.redis_settings().username(), Some("user"));
    assert_eq!(info.redis_settings().password(), Some("pw"));
    let info = connection_info("redis://h:1", Some("pw"), None).unwrap();
    assert_eq!(info.redis_settings().password(), Some("pw"));
    assert_eq!(info.redis_settings().username(), None);
    let info = connection_info("/var/run/redis.sock", None, None).unwrap();
    assert!(info.addr().to_string().contains("redis.sock"));
    assert!(connection_info("redis://[bad", None, None).is_err());
}

#[test]
fn jitter_stays_below_the_maximum() {
    let mut config = RedisConfig::single("127.0.0.1:1");
    config.expiration_jitter_max_secs = 5;
    let store = RedisStore::new(config);
    for _ in 0..200 {
        let ttl = store.ttl_secs(60);
        assert!((60..65).contains(&ttl), "{ttl}");
    }
    let none = RedisStore::new(RedisConfig::single("127.0.0.1:1"));
    assert_eq!(none.ttl_secs(60), 60);
}

#[test]
fn jitter_stays_below_one_more_window() {
    // The default maximum (300) is more than a second's or a minute's
    // window: their keys live less than two windows, and still spread.
    let mut config = RedisConfig::single("127.0.0.1:1");
    config.expiration_jitter_max_secs = 300;
    let store = RedisStore::new(config);
    let seconds: std::collections::BTreeSet<u64> = (0..200).map(|_| store.ttl_secs(1)).collect();
    assert_eq!(seconds, [1].into());
    let minutes: Vec<u64> = (0..200).map(|_| store.ttl_secs(60)).collect();
    assert!(minutes.iter().all(|t| (60..120).contains(t)), "{minutes:?}");
    assert!(
        minutes.iter().any(|&t| t != minutes[0]),
        "no spread: {minutes:?}"
    );
    let hours: Vec<u64> = (0..200).map(|_| store.ttl_secs(3_600)).collect();
    assert!(
        hours.iter().all(|t| (3_600..3_900).contains(t)),
        "{hours:?}"
    );
    assert!(
        hours.iter().any(|&t| t >= 3_660),
        "capped at the window: {hours:?}"
    );
}

#[test]
fn fixed_window_outcome_matches_memory_semantics() {
    let now = UnixMillis::from_secs(1_230);
    let op = Op {
        id: crate::store::CounterId::new("d", [("k", "v")]),
        spec: Spec::FixedWindow {
            window: FixedWindow::new(60),
            limit: 5,
        },
        hits: 2,
        lease: None,
    };
    // fixed_window.lua's {before, counted}: after is before + hits.
    let o = outcome(&op, 1, &[3, 1], now).unwrap();
    assert_eq!(
        (o.over_limit, o.remaining, o.reset.as_secs()),
        (false, 0, 30)
    );
    let o = outcome(&op, 1, &[4, 0], now).unwrap();
    assert!(o.over_limit && !o.counted);
    assert!(is_over_limit(o.after, 5));
    // count.lua's {before}: always counted, so 4 before and 2 hits is over
    // and counted (the reference's fixed window).
    let o = outcome(&op, COUNT, &[3], now).unwrap();
    assert_eq!((o.over_limit, o.remaining, o.counted), (false, 0, true));
    let o = outcome(&op, COUNT, &[4], now).unwrap();
    assert!(o.over_limit && o.counted);
    assert_eq!(o.after, 6);
}

#[test]
fn only_a_fixed_window_counting_every_hit_is_sent_in_the_counting_form() {
    let op = |spec, hits, lease| Op {
        id: crate::store::CounterId::new("d", [("k", "v")]),
        spec,
        hits,
        lease,
    };
    let fixed = Spec::FixedWindow {
        window: FixedWindow::new(60),
        limit: 5,
    };
    let gcra = Spec::Gcra(crate::algorithm::Gcra::new(5, 1_000, 5));
    assert!(counts_always(&op(fixed, 1, None), false));
    // Refused when over, check-only, leased, another algorithm: the
    // algorithm's own script.
    assert!(!counts_always(&op(fixed, 1, None), true));
    assert!(!counts_always(&op(fixed, 0, None), false));
    assert!(!counts_always(&op(fixed, 1, Some(4)), false));
    assert!(!counts_always(&op(gcra, 1, None), false));
    assert_eq!(algorithm_number(&op(fixed, 1, None), false), COUNT);
    assert_eq!(algorithm_number(&op(fixed, 1, None), true), 1);
    assert_eq!(reply_len(&op(fixed, 1, None), COUNT), 1);
    assert_eq!(reply_len(&op(fixed, 1, None), 1), 2);
    // On the wire: three values for the counting form (no argument count,
    // no limit, no refusal flag), the full form otherwise.
    let store = RedisStore::new(RedisConfig::single("127.0.0.1:1"));
    let now = UnixMillis::from_secs(1_230);
    let (counting, _) = store.call(&op(fixed, 2, None), now, false);
    let (refusing, _) = store.call(&op(fixed, 2, None), now, true);
    let cmd = super::command::batch_cmd(
        [(COUNT, &counting), (1, &refusing)].into_iter(),
        super::command::KeysIn::Keys,
    );
    let args: Vec<String> = super::command::bytes_of(&cmd)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let key = "{d|k=v}f60:1200";
    assert_eq!(
        args.get(2..).unwrap(),
        ["2", key, key, "0", "2", "60", "1", "4", "2", "60", "5", "1"]
    );
}

#[test]
fn unexpected_replies_are_typed_errors_never_fresh_windows() {
    let now = UnixMillis::from_secs(1_230);
    let op = |spec| Op {
        id: crate::store::CounterId::new("d", [("k", "v")]),
        spec,
        hits: 1,
        lease: None,
    };
    let fixed = op(Spec::FixedWindow {
        window: FixedWindow::new(60),
        limit: 5,
    });
    let log = op(Spec::SlidingLog(crate::algorithm::SlidingLog::new(
        crate::algorithm::Limits::new([(5, 1_000), (9, 60_000)]),
    )));
    let gcra = op(Spec::Gcra(crate::algorithm::Gcra::new(5, 1_000, 5)));
    for (op, algorithm, reply) in [
        (&fixed, 1, &[][..]),
        (&fixed, 1, &[1][..]),
        (&fixed, 1, &[1, 2, 1][..]),
        (&fixed, COUNT, &[][..]),
        (&fixed, COUNT, &[1, 1][..]),
        (&log, 3, &[1, 0, -1][..]),
        (&gcra, 4, &[1][..]),
    ] {
        let err = StoreError::from(outcome(op, algorithm, reply, now).unwrap_err());
        assert!(
            matches!(err, StoreError::BadReply { .. }),
            "{reply:?}: {err:?}"
        );
        assert!(!err.is_transient());
    }
    assert!(outcome(&log, 3, &[1, 0, -1, 0, -1], now).is_ok());
    for value in [
        redis::Value::Nil,
        redis::Value::Okay,
        redis::Value::BulkString(b"12".to_vec()),
        redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Nil]),
        redis::Value::Array(vec![redis::Value::Array(vec![])]),
    ] {
        let err = StoreError::from(integers(&value).unwrap_err());
        assert!(matches!(err, StoreError::BadReply { .. }), "{err:?}");
    }
    assert_eq!(
        integers(&redis::Value::Array(vec![
            redis::Value::Int(3),
            redis::Value::Int(-1)
        ]))
        .unwrap(),
        vec![3, -1]
    );
}

#[test]
fn the_flat_batch_reply_has_the_expected_integers_or_is_a_typed_error() {
    use super::reply::flat_integers;
    let ints = |v: &[i64]| redis::Value::Array(v.iter().map(|&n| redis::Value::Int(n)).collect());
    assert_eq!(
        flat_integers(&ints(&[0, 1, 7, -1]), 4).unwrap(),
        vec![0, 1, 7, -1]
    );
    assert_eq!(flat_integers(&ints(&[]), 0).unwrap(), Vec::<i64>::new());
    for (bad, expected) in [
        (ints(&[3, 0, 1]), 4),
        (ints(&[3, 0, 1]), 2),
        (
            redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Nil]),
            2,
        ),
        (redis::Value::Okay, 0),
        (redis::Value::Int(3), 1),
    ] {
        let err = StoreError::from(flat_integers(&bad, expected).unwrap_err());
        assert!(
            matches!(err, StoreError::BadReply { .. }),
            "{bad:?}: {err:?}"
        );
    }
}
