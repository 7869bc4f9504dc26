//! One conformance suite, run against every store: the embedded store, a
//! real standalone Redis and a real 3-master Redis Cluster must give the same
//! answers for the same requests at the same (manual) time.

use crate::support::backends::{Backend, cluster, memory, standalone};
use crate::support::grpc::index;
use arc_swap::ArcSwap;
use floodgate::StoreKind;
use floodgate::{Code, Limiter, LimiterOptions, Response};
use floodgate::{Descriptor, Request};
use floodgate::{ManualClock, UnixMillis};
use std::sync::Arc;
use std::time::Duration;

const RULES: &str = r"
domain: conf
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
  - key: k20
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: hourly
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: fifty
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: fifty_sliding_window
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: sliding_window}
  - key: fifty_sliding_log
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: sliding_log}
  - key: fifty_gcra
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: gcra}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: replacer
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_user}]
  - key: tiles
    rate_limit: {unit: hour, requests_per_unit: 100000}
  - key: key4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    rate_limit: {unit: hour, requests_per_unit: 14}
  - key: burst_sustained
    rate_limits:
      - {unit: second, requests_per_unit: 1000, algorithm: sliding_window}
      - {unit: second, unit_multiplier: 10, requests_per_unit: 5000, algorithm: sliding_window}
      - {unit: second, unit_multiplier: 15, requests_per_unit: 7000, algorithm: sliding_window}
  - key: edge_fixed_window
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: edge_sliding_window
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: edge_sliding_log
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}
  - key: edge_gcra
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra}
  - key: gcra_burst
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 3}
  - key: second_and_hour
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 25, algorithm: sliding_window}
  - key: tenant
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2, algorithm: concurrency, slot_key: request_id, release_key: done}
  - key: log_exact
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: sliding_log}
      - {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
";

/// 40 s into a minute.
const T0: u64 = 1_700_000_080;

fn limiter(
    backend: &Backend,
    clock: &ManualClock,
    options: LimiterOptions,
) -> Arc<Limiter<StoreKind>> {
    Arc::new(Limiter::new(
        Arc::new(ArcSwap::from_pointee(index(&[("conf.yaml", RULES)]))),
        backend.store.clone(),
        Arc::new(clock.clone()),
        options,
    ))
}

fn req(descriptors: &[(&str, &str, Option<u64>)]) -> Request {
    Request {
        domain: "conf".into(),
        descriptors: descriptors
            .iter()
            .map(|(k, v, hits)| Descriptor {
                hits_addend: *hits,
                ..Descriptor::from_pairs([(*k, *v)])
            })
            .collect(),
        hits_addend: 0,
    }
}

/// A concurrency call for `tenant`: the request `id` takes a slot, or with
/// `release` frees it.
async fn slot(l: &Limiter<StoreKind>, tenant: &str, id: &str, release: bool) -> (Code, u32) {
    let mut entries = vec![("tenant", tenant), ("request_id", id)];
    if release {
        entries.push(("done", "1"));
    }
    let request = Request {
        domain: "conf".into(),
        descriptors: vec![Descriptor::from_pairs(entries)],
        hits_addend: 0,
    };
    let r = l.should_rate_limit(&request).await.unwrap();
    (r.overall_code, r.statuses[0].limit_remaining)
}

/// Concurrency: two instances share 2 slots; a release frees the slot of
/// its request only, a stray or repeated one nothing; a retried acquire is
/// not a second request; a slot never released comes back 30 s after its
/// acquire; a request refused as a whole gives its slot back.
pub(crate) async fn concurrency_slots(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let a = limiter(&backend, &clock, LimiterOptions::default());
    let b = limiter(&backend, &clock, LimiterOptions::default());
    assert_eq!(slot(&a, "t", "r1", false).await, (Code::Ok, 1));
    assert_eq!(
        slot(&a, "t", "r1", false).await,
        (Code::Ok, 1),
        "a retry is not a second request"
    );
    assert_eq!(slot(&b, "t", "r2", false).await, (Code::Ok, 0));
    assert_eq!(slot(&a, "t", "r3", false).await, (Code::OverLimit, 0));
    assert_eq!(
        slot(&b, "other", "r3", false).await,
        (Code::Ok, 1),
        "tenants apart"
    );
    // `/explain` names the rule and shows the slots held, taking none.
    let explained = a
        .explain(&Request {
            domain: "conf".into(),
            descriptors: vec![Descriptor::from_pairs([
                ("tenant", "t"),
                ("request_id", "r7"),
            ])],
            hits_addend: 0,
        })
        .await
        .unwrap();
    let d = &explained.descriptors[0];
    assert_eq!(d.rule.as_deref(), Some("conf.tenant"));
    assert_eq!((d.windows[0].count, d.windows[0].remaining), (2, 0));
    // Stray and repeated releases make no room.
    assert_eq!(slot(&a, "t", "r9", true).await, (Code::Ok, 0));
    assert_eq!(slot(&a, "t", "r3", false).await, (Code::OverLimit, 0));
    assert_eq!(slot(&b, "t", "r1", true).await, (Code::Ok, 1));
    assert_eq!(slot(&b, "t", "r1", true).await, (Code::Ok, 1));
    assert_eq!(slot(&a, "t", "r3", false).await, (Code::Ok, 0));
    assert_eq!(slot(&a, "t", "r4", false).await, (Code::OverLimit, 0));
    // r2 and r3 are never released (their proxy died): free 30 s after
    // their acquire, not before.
    clock.advance(Duration::from_secs(29));
    let r = ask(&a, &[("tenant", "t", None)]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    clock.advance(Duration::from_secs(1));
    assert_eq!(slot(&a, "t", "r4", false).await, (Code::Ok, 1));
    // Stop-increment: a request refused by another descriptor takes no slot.
    let stop = limiter(
        &backend,
        &clock,
        LimiterOptions {
            stop_when_over: true,
            ..LimiterOptions::default()
        },
    );
    let request = Request {
        domain: "conf".into(),
        descriptors: vec![
            Descriptor::from_pairs([("tenant", "t"), ("request_id", "r5")]),
            Descriptor {
                hits_addend: Some(100),
                ..Descriptor::from_pairs([("user", "u")])
            },
        ],
        hits_addend: 0,
    };
    assert_eq!(
        stop.should_rate_limit(&request).await.unwrap().overall_code,
        Code::OverLimit
    );
    assert_eq!(
        slot(&a, "t", "r6", false).await,
        (Code::Ok, 0),
        "r5 holds no slot"
    );
}

async fn ask(l: &Limiter<StoreKind>, descriptors: &[(&str, &str, Option<u64>)]) -> Response {
    l.should_rate_limit(&req(descriptors)).await.unwrap()
}

fn codes(r: &Response) -> Vec<(Code, u32)> {
    r.statuses
        .iter()
        .map(|s| (s.code, s.limit_remaining))
        .collect()
}

pub(crate) async fn fixed_window_counts_and_resets(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.extend(codes(&ask(&l, &[("user", "alice", None)]).await));
    }
    assert_eq!(
        seen,
        vec![
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0)
        ]
    );
    let r = ask(&l, &[("user", "alice", None)]).await;
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(20))
    );
    assert_eq!(
        ask(&l, &[("user", "bob", None)]).await.overall_code,
        Code::Ok
    );
    clock.advance(Duration::from_secs(19));
    assert_eq!(
        ask(&l, &[("user", "alice", None)]).await.overall_code,
        Code::OverLimit
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        codes(&ask(&l, &[("user", "alice", None)]).await),
        vec![(Code::Ok, 2)]
    );
}

pub(crate) async fn hits_addend_reference_vectors(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    ask(&l, &[("k20", "x", Some(2))]).await;
    assert_eq!(
        codes(&ask(&l, &[("k20", "x", Some(3))]).await),
        vec![(Code::Ok, 15)]
    );
    ask(&l, &[("hourly", "x", Some(11))]).await;
    for _ in 0..3 {
        assert_eq!(
            codes(&ask(&l, &[("hourly", "x", Some(0))]).await),
            vec![(Code::OverLimit, 0)]
        );
    }
    // Over-limit hits still count; a check at the limit is OK with 0 left.
    ask(&l, &[("hourly", "y", Some(10))]).await;
    assert_eq!(
        codes(&ask(&l, &[("hourly", "y", Some(0))]).await),
        vec![(Code::Ok, 0)]
    );
    ask(&l, &[("hourly", "y", None)]).await;
    assert_eq!(
        codes(&ask(&l, &[("hourly", "y", Some(0))]).await),
        vec![(Code::OverLimit, 0)]
    );
}

pub(crate) async fn shadow_and_replaces(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    ask(&l, &[("shadow", "x", None)]).await;
    let r = ask(&l, &[("shadow", "x", None)]).await;
    assert_eq!((r.overall_code, codes(&r)), (Code::Ok, vec![(Code::Ok, 0)]));
    for _ in 0..5 {
        let r = ask(&l, &[("user", "carol", None), ("replacer", "carol", None)]).await;
        assert!(r.statuses[0].current_limit.is_none());
        assert_eq!(r.overall_code, Code::Ok);
    }
    assert_eq!(
        codes(&ask(&l, &[("user", "carol", None)]).await),
        vec![(Code::Ok, 2)]
    );
}

pub(crate) async fn stop_increment_reference_vector(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(
        &backend,
        &clock,
        LimiterOptions {
            stop_when_over: true,
            ..LimiterOptions::default()
        },
    );
    ask(&l, &[("key4", "v", Some(13)), ("key5", "v", Some(13))]).await;
    let r = ask(&l, &[("key4", "v", Some(2)), ("key5", "v", Some(2))]).await;
    assert_eq!(codes(&r), vec![(Code::Ok, 2), (Code::OverLimit, 0)]);
    assert_eq!(r.overall_code, Code::OverLimit);
    // Nothing was counted on either: both still at 13.
    let r = ask(&l, &[("key4", "v", Some(1)), ("key5", "v", Some(1))]).await;
    assert_eq!(codes(&r), vec![(Code::Ok, 1), (Code::Ok, 0)]);
}

/// Stop-increment with the local cache: a refusal that counted nothing is
/// not cached, and a descriptor answered from the cache makes the others
/// count nothing.
pub(crate) async fn stop_increment_with_local_cache(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let options = LimiterOptions {
        stop_when_over: true,
        local_cache_bytes: 1 << 20,
        ..LimiterOptions::default()
    };
    let l = limiter(&backend, &clock, options);
    ask(&l, &[("key4", "v", Some(13)), ("key5", "v", Some(13))]).await;
    let r = ask(&l, &[("key4", "v", Some(2)), ("key5", "v", Some(2))]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    // key5 still holds 13 of 14: a request of one fits, not the cache.
    assert_eq!(
        codes(&ask(&l, &[("key5", "v", Some(1))]).await),
        vec![(Code::Ok, 0)]
    );
    // Another instance (no stop-increment) pushes `user d` over its limit.
    let other = limiter(&backend, &clock, LimiterOptions::default());
    for _ in 0..4 {
        ask(&other, &[("user", "d", None)]).await;
    }
    // Read over the limit: cached; then the request's other descriptor
    // counts nothing.
    assert_eq!(
        codes(&ask(&l, &[("user", "d", Some(0))]).await),
        vec![(Code::OverLimit, 0)]
    );
    let r = ask(&l, &[("user", "d", None), ("key4", "w", Some(5))]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        codes(&ask(&l, &[("key4", "w", Some(0))]).await),
        vec![(Code::Ok, 15)],
        "key4 counted nothing beside a cached descriptor"
    );
}

/// Every algorithm: 200 concurrent calls through two limiter instances
/// sharing the store (two floodgate processes on one Redis) admit exactly
/// the limit of 50, with and without stop-increment.
pub(crate) async fn concurrent_calls_admit_exactly_the_limit(backend: Backend) {
    admit_exactly_the_limit(
        &backend,
        &[
            "fifty",
            "fifty_sliding_window",
            "fifty_sliding_log",
            "fifty_gcra",
        ],
    )
    .await;
}

/// 200 concurrent calls on each of `keys` (limits of 50 an hour), value
/// `count` without stop-increment and `stop` with it, through two limiter
/// instances on `backend`: exactly 50 admitted each time.
pub(crate) async fn admit_exactly_the_limit(backend: &Backend, keys: &[&'static str]) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    for stop_when_over in [false, true] {
        let options = LimiterOptions {
            stop_when_over,
            ..LimiterOptions::default()
        };
        let instances = [
            limiter(backend, &clock, options.clone()),
            limiter(backend, &clock, options),
        ];
        for &key in keys {
            let value = if stop_when_over { "stop" } else { "count" };
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..200 {
                let l = instances[i % 2].clone();
                calls.spawn(async move { ask(&l, &[(key, value, None)]).await.overall_code });
            }
            let mut ok = 0;
            while let Some(code) = calls.join_next().await {
                ok += usize::from(code.unwrap() == Code::Ok);
            }
            assert_eq!(ok, 50, "{key}, stop_when_over {stop_when_over}");
        }
    }
}

/// Concurrent fixed-window hits on one counter (through two instances, so
/// Redis lanes carry many of them in one call, where the store may send
/// them as one increment): the counts each hit was answered with tile the
/// counter exactly, as if the hits had been counted one by one: every
/// hit's `[before, after)` is its own, no gap, no overlap, and the store's
/// count is their sum. Requests vary their hits, some carry the
/// descriptor twice, and in the second round check-only reads of the same
/// counter run among them (which must see a count some order gives).
pub(crate) async fn concurrent_hits_tile_the_count(backend: Backend) {
    const LIMIT: u64 = 100_000;
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let instances = [
        limiter(&backend, &clock, LimiterOptions::default()),
        limiter(&backend, &clock, LimiterOptions::default()),
    ];
    for (value, with_reads) in [("a", false), ("b", true)] {
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..400u64 {
            let l = instances[usize::try_from(i % 2).unwrap()].clone();
            let hits = i % 3 + 1;
            let descriptors: Vec<(&str, &str, Option<u64>)> = if with_reads && i % 7 == 0 {
                vec![("tiles", value, Some(0))]
            } else if i % 11 == 0 {
                vec![("tiles", value, Some(hits)), ("tiles", value, Some(1))]
            } else {
                vec![("tiles", value, Some(hits))]
            };
            calls.spawn(async move {
                let r = ask(&l, &descriptors).await;
                descriptors
                    .iter()
                    .zip(&r.statuses)
                    .map(|(&(_, _, hits), s)| {
                        assert_eq!(s.code, Code::Ok);
                        (hits.unwrap_or(1), LIMIT - u64::from(s.limit_remaining))
                    })
                    .collect::<Vec<_>>()
            });
        }
        let mut spans = Vec::new();
        let mut reads = Vec::new();
        while let Some(answers) = calls.join_next().await {
            for (hits, after) in answers.unwrap() {
                if hits == 0 {
                    reads.push(after);
                } else {
                    spans.push((after - hits, after));
                }
            }
        }
        spans.sort_unstable();
        let mut next = 0;
        for &(before, after) in &spans {
            assert_eq!(before, next, "{value}: hits answered {spans:?}");
            next = after;
        }
        // A read sees the count between two hits: some hit's before, or all.
        assert!(
            reads
                .iter()
                .all(|&read| read == next || spans.binary_search_by_key(&read, |s| s.0).is_ok()),
            "{value}: reads {reads:?} of {spans:?}"
        );
        let r = ask(&instances[0], &[("tiles", value, Some(0))]).await;
        assert_eq!(
            LIMIT - u64::from(r.statuses[0].limit_remaining),
            next,
            "{value}: the store counted every hit once"
        );
    }
}

pub(crate) async fn hostile_values_never_collide(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    let long = "v".repeat(1_024);
    let values = [
        "a_b",
        "a",
        "b_c",
        "{",
        "}",
        "{x}",
        "|",
        "=",
        "k=v|k2=v2",
        ":",
        "\n",
        "%7B",
        "%",
        "",
        &long,
    ];
    for value in values {
        let r = ask(&l, &[("user", value, Some(3))]).await;
        assert_eq!(codes(&r), vec![(Code::Ok, 0)], "value {value:?} collided");
    }
}

pub(crate) async fn burst_then_sustained_sliding_windows(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    // A burst of 1000 in one second passes; the 1001st is denied by 1000/1 s.
    for _ in 0..10 {
        assert_eq!(
            ask(&l, &[("burst_sustained", "a", Some(100))])
                .await
                .overall_code,
            Code::Ok
        );
    }
    let r = ask(&l, &[("burst_sustained", "a", Some(1))]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        1_000
    );
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(1))
    );
    // Sustained 600/s: the 10 s window (5000) cuts in before 10 s pass.
    let mut cut = None;
    for second in 0..10u64 {
        clock.set(UnixMillis::from_secs(T0 + 100 + second));
        for _ in 0..6 {
            let r = ask(&l, &[("burst_sustained", "b", Some(100))]).await;
            if r.overall_code == Code::OverLimit && cut.is_none() {
                let limit = r.statuses[0]
                    .current_limit
                    .as_ref()
                    .unwrap()
                    .requests_per_unit;
                cut = Some((second, limit));
            }
        }
    }
    assert_eq!(cut, Some((8, 5_000)));
}

/// A one-second window beside an hour is exact to the second (not to the
/// hour's one-minute buckets); a request refused as a whole takes back its
/// hits from every bucket series; a huge `hits_addend` on a sliding log is
/// refused without work that grows with it.
pub(crate) async fn per_window_buckets_and_whole_refusals(backend: Backend) {
    let clock = ManualClock::new(UnixMillis(T0 * 1_000 + 200));
    let options = LimiterOptions {
        stop_when_over: true,
        ..LimiterOptions::default()
    };
    let l = limiter(&backend, &clock, options);
    let once = [("second_and_hour", "a", None)];
    for _ in 0..10 {
        assert_eq!(ask(&l, &once).await.overall_code, Code::Ok);
    }
    assert_eq!(ask(&l, &once).await.overall_code, Code::OverLimit);
    clock.advance(Duration::from_millis(1_500));
    for i in 0..10 {
        assert_eq!(ask(&l, &once).await.overall_code, Code::Ok, "call {i}");
    }
    let r = ask(&l, &once).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        10
    );
    // Refused as a whole by `user`: nothing counted in either series.
    clock.advance(Duration::from_secs(2));
    let r = ask(
        &l,
        &[("second_and_hour", "a", Some(5)), ("user", "y", Some(5))],
    )
    .await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        codes(&ask(&l, &[("second_and_hour", "a", Some(5))]).await),
        vec![(Code::Ok, 0)],
        "the hour holds 20 + 5, so the refused 5 were taken back"
    );
    // A huge hits_addend on a log of 2/s: refused, nothing counted.
    let r = ask(
        &l,
        &[("log_exact", "big", Some(900_000_000)), ("user", "z", None)],
    )
    .await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        codes(&ask(&l, &[("user", "z", None)]).await),
        vec![(Code::Ok, 2)]
    );
    assert_eq!(
        codes(&ask(&l, &[("log_exact", "big", Some(2))]).await),
        vec![(Code::Ok, 0)]
    );
}

/// A fixed window admits twice its limit across a window edge; the sliding
/// algorithms and GCRA do not.
pub(crate) async fn boundary_burst(backend: Backend) {
    let minute_end = T0 - T0 % 60 + 60;
    let clock = ManualClock::new(UnixMillis::from_secs(minute_end - 1));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    let mut admitted = Vec::new();
    for key in [
        "edge_fixed_window",
        "edge_sliding_window",
        "edge_sliding_log",
        "edge_gcra",
    ] {
        clock.set(UnixMillis::from_secs(minute_end - 1));
        let mut ok = 0;
        for _ in 0..20 {
            ok += usize::from(ask(&l, &[(key, "x", None)]).await.overall_code == Code::Ok);
        }
        clock.set(UnixMillis::from_secs(minute_end));
        for _ in 0..20 {
            ok += usize::from(ask(&l, &[(key, "x", None)]).await.overall_code == Code::Ok);
        }
        admitted.push((key, ok));
    }
    assert_eq!(
        admitted,
        vec![
            ("edge_fixed_window", 20),
            ("edge_sliding_window", 10),
            ("edge_sliding_log", 10),
            ("edge_gcra", 10),
        ]
    );
}

pub(crate) async fn gcra_burst_then_rate(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    // 10/s with burst 3: 3 at once, then one every 100 ms.
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.extend(codes(&ask(&l, &[("gcra_burst", "x", None)]).await));
    }
    assert_eq!(
        seen,
        vec![
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0)
        ]
    );
    let r = ask(&l, &[("gcra_burst", "x", None)]).await;
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_millis(100))
    );
    clock.advance(Duration::from_millis(99));
    assert_eq!(
        ask(&l, &[("gcra_burst", "x", None)]).await.overall_code,
        Code::OverLimit
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        codes(&ask(&l, &[("gcra_burst", "x", None)]).await),
        vec![(Code::Ok, 0)]
    );
}

pub(crate) async fn sliding_log_is_exact(backend: Backend) {
    let clock = ManualClock::new(UnixMillis(T0 * 1_000 + 250));
    let l = limiter(&backend, &clock, LimiterOptions::default());
    assert_eq!(
        codes(&ask(&l, &[("log_exact", "x", None)]).await),
        vec![(Code::Ok, 1)]
    );
    clock.advance(Duration::from_millis(400));
    assert_eq!(
        codes(&ask(&l, &[("log_exact", "x", None)]).await),
        vec![(Code::Ok, 0)]
    );
    let r = ask(&l, &[("log_exact", "x", None)]).await;
    assert_eq!(codes(&r), vec![(Code::OverLimit, 0)]);
    // The first hit leaves the 1 s window 600 ms from now.
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_millis(600))
    );
    clock.advance(Duration::from_millis(599));
    assert_eq!(
        ask(&l, &[("log_exact", "x", None)]).await.overall_code,
        Code::OverLimit
    );
    clock.advance(Duration::from_millis(1));
    let r = ask(&l, &[("log_exact", "x", None)]).await;
    assert_eq!(r.overall_code, Code::Ok);
    // The 1 s window (2 of 2 used) has less left than the minute (3 of 5).
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        2
    );
    // Minute limit: two more seconds, two more hits, then the 5/min cuts.
    clock.advance(Duration::from_secs(2));
    ask(&l, &[("log_exact", "x", None)]).await;
    clock.advance(Duration::from_secs(2));
    let r = ask(&l, &[("log_exact", "x", None)]).await;
    assert_eq!(r.overall_code, Code::Ok);
    clock.advance(Duration::from_secs(2));
    let r = ask(&l, &[("log_exact", "x", None)]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        5
    );
}

/// Random sequences of (advance, hits) on every algorithm give identical
/// statuses from the embedded store and from `backend`.
pub(crate) async fn same_answers_as_the_embedded_store(backend: Backend) {
    let clock = ManualClock::new(UnixMillis::from_secs(T0));
    let reference = memory().await;
    let redis = limiter(&backend, &clock, LimiterOptions::default());
    let embedded = limiter(&reference, &clock, LimiterOptions::default());
    let keys = [
        "user",
        "edge_sliding_window",
        "edge_sliding_log",
        "edge_gcra",
        "gcra_burst",
        "log_exact",
        "burst_sustained",
    ];
    // A fixed-seed xorshift: the same sequence every run.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    for step in 0..300 {
        clock.advance(Duration::from_millis(next(1_500)));
        let key = keys[usize::try_from(next(7)).unwrap()];
        let hits = next(4);
        let value = format!("v{}", next(3));
        let descriptors = [(key, value.as_str(), Some(hits))];
        let a = ask(&embedded, &descriptors).await;
        let b = ask(&redis, &descriptors).await;
        assert_eq!(a, b, "step {step}: {key}={value} hits {hits}");
    }
}

macro_rules! conformance {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::$scenario(super::memory().await).await;
            })*
        }
        mod redis_standalone {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::$scenario(super::standalone().await).await;
            })*
        }
        mod redis_cluster {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::$scenario(super::cluster().await).await;
            })*
        }
    };
}

conformance!(
    fixed_window_counts_and_resets,
    hits_addend_reference_vectors,
    shadow_and_replaces,
    stop_increment_reference_vector,
    stop_increment_with_local_cache,
    concurrent_calls_admit_exactly_the_limit,
    concurrent_hits_tile_the_count,
    hostile_values_never_collide,
    burst_then_sustained_sliding_windows,
    boundary_burst,
    gcra_burst_then_rate,
    sliding_log_is_exact,
    per_window_buckets_and_whole_refusals,
    concurrency_slots,
);

mod differential {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_standalone() {
        super::same_answers_as_the_embedded_store(super::standalone().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_cluster() {
        super::same_answers_as_the_embedded_store(super::cluster().await).await;
    }
}
