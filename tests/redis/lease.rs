//! Leased quotas as users run them: three `floodgate serve` processes on
//! one Redis, 300 concurrent callers each on one descriptor with a limit
//! of 1,000 per minute (`lease: true`). At most 1,000 are admitted and at
//! least 1,000 less the stated bound; after SIGTERM of all three (their
//! blocks given back) the store counts exactly the hits admitted.

use crate::support::floodgate::Floodgate;
use crate::support::grpc::request;
use crate::support::redis::RedisServer;
use floodgate::UnixMillis;
use floodgate::{Clock as _, SystemClock};

const INSTANCES: u64 = 3;
const CALLERS: usize = 300;
const CALLS_EACH: usize = 4;
const LIMIT: u64 = 1_000;
/// The stated bound of what leases may leave unadmitted: per instance a
/// block held, one being fetched and one lapsed being given back, each at
/// most `LIMIT / 16`, plus the request that found its block short.
const BOUND: u64 = INSTANCES * (3 * (LIMIT / 16) + 1);

fn minute() -> u64 {
    let UnixMillis(ms) = SystemClock.now();
    ms / 60_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_leased_instances_admit_the_limit_and_give_back_the_rest() {
    let redis = RedisServer::start();
    let env = [
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_URL", redis.addr()),
        // A debug build serving 900 callers on two cores: time enough.
        ("REDIS_TIMEOUT", "5s".to_owned()),
    ];
    let servers = [
        Floodgate::start(&env).await,
        Floodgate::start(&env).await,
        Floodgate::start(&env).await,
    ];
    // A load that straddles a minute is counted in two windows: run it
    // again on a fresh descriptor (two straddles in a row cannot happen).
    let mut attempt = 0;
    let (value, admitted) = loop {
        let value = format!("a{attempt}");
        let started = minute();
        let mut tasks = Vec::new();
        for server in &servers {
            let client = server.client().await;
            for caller in 0..CALLERS {
                let (mut client, value) = (client.clone(), value.clone());
                // Callers join over 300 ms, as traffic ramps up: instances
                // measure its rate and take blocks before the limit is
                // reached (a herd all at once spends the limit in the
                // store's first round trips, before any block).
                let joins = std::time::Duration::from_millis(u64::try_from(caller).unwrap());
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep(joins).await;
                    let mut admitted = 0u64;
                    for _ in 0..CALLS_EACH {
                        let answer = client
                            .should_rate_limit(request("edge", &[&[("leased", &value)]]))
                            .await
                            .unwrap()
                            .into_inner();
                        admitted += u64::from(answer.overall_code == 1);
                    }
                    admitted
                }));
            }
        }
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        attempt += 1;
        if minute() == started || attempt == 3 {
            break (value, admitted);
        }
    };
    assert!(
        admitted <= LIMIT,
        "{admitted} admitted over a limit of {LIMIT}"
    );
    assert!(
        admitted >= LIMIT - BOUND,
        "{admitted} admitted: short of {LIMIT} by more than the bound {BOUND}"
    );
    // The instances did admit from blocks.
    let mut taken = 0u64;
    for server in &servers {
        let text = crate::support::http::get(server.http, "/metrics")
            .await
            .body;
        taken += text
            .lines()
            .find_map(|l| l.strip_prefix("ratelimit_lease_blocks_total{outcome=\"taken\"} "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    assert!(taken > 0, "no block was taken");
    for server in servers {
        server.stop().await;
    }
    let keys = redis
        // The window's counter, not the fetches' fences beside it.
        .cli(&["--raw", "KEYS", &format!("*leased={value}}}f*")])
        .unwrap_or_default();
    let key = keys.lines().next().expect("the window's counter");
    let counted: u64 = redis
        .cli(&["--raw", "GET", key])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        counted, admitted,
        "the store counts {counted} once every block is given back; {admitted} were admitted"
    );
}

/// A GCRA block comes back only while nothing was counted on its bucket
/// after it: lowering the TAT under cells counted later (another
/// instance's block) would move them below where their holder checks
/// them. A block with anything on top stays counted, and the give-back
/// says so; the top block comes back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gcra_block_comes_back_only_while_it_is_the_top_of_its_bucket() {
    use floodgate::algorithm::{FixedWindow, Gcra, Spec};
    use floodgate::{Batch, CounterId, Op, RedisConfig, RedisStore, Store as _, Unused};

    let redis = RedisServer::start();
    let store = RedisStore::new(RedisConfig::single(redis.addr()));
    store.connect().await.expect("redis reachable");
    // 600 a minute: one cell every 100 ms, a burst of 600.
    let spec = Spec::Gcra(Gcra::new(600, 60_000, 600));
    let id = CounterId::new("d", [("k", "v")]);
    let now = UnixMillis(SystemClock.now().0);
    let now_us = now.0 * 1_000;
    let run = |hits: u64, lease: Option<u64>| {
        let batch = Batch {
            ops: vec![Op {
                id: id.clone(),
                spec,
                hits,
                lease,
            }],
            stop_when_over: false,
        };
        let store = store.clone();
        async move { store.execute_within(batch, now, None).await.unwrap()[0] }
    };
    let tat = || -> u64 {
        redis
            .cli(&["GET", "{d|k=v}g100000:600"])
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let unused = |hits: u64, tat_us: u64, token: u64| Unused {
        id: id.clone(),
        spec,
        hits,
        taken_at: now,
        tat_us,
        token,
    };

    // A block of 10 with the request's own hit: the TAT is 11 cells ahead.
    let first = run(1, Some(10)).await;
    assert_eq!((first.leased, first.tat_us), (10, now_us + 11 * 100_000));
    assert_eq!(tat(), first.tat_us);
    // One hit counted on top: the block stays, the TAT with it.
    run(1, None).await;
    let given = store.give_back(vec![unused(10, first.tat_us, 1)]).await;
    assert_eq!(given.kept, vec![unused(10, first.tat_us, 1)]);
    assert_eq!(tat(), now_us + 12 * 100_000);
    // A block on top of everything comes back, exactly.
    let second = run(0, Some(10)).await;
    assert_eq!((second.leased, second.tat_us), (10, now_us + 22 * 100_000));
    let given = store.give_back(vec![unused(10, second.tat_us, 2)]).await;
    assert_eq!(given.back, vec![unused(10, second.tat_us, 2)]);
    assert_eq!(tat(), now_us + 12 * 100_000);
    // Sent again under its token (its answer lost, say), it changes
    // nothing and answers as the first time did.
    let again = store.give_back(vec![unused(10, second.tat_us, 2)]).await;
    assert_eq!(again.back, vec![unused(10, second.tat_us, 2)]);
    assert_eq!(tat(), now_us + 12 * 100_000);

    // A request refused as a whole (another limit of it at 0): its own 2
    // hits come back from under the block it took, which stays; the block
    // now ends where they began.
    let refused = Batch {
        ops: vec![
            Op {
                id: id.clone(),
                spec,
                hits: 2,
                lease: Some(5),
            },
            Op {
                id: CounterId::new("d", [("other", "v")]),
                spec: Spec::FixedWindow {
                    window: FixedWindow::new(60),
                    limit: 0,
                },
                hits: 1,
                lease: None,
            },
        ],
        stop_when_over: true,
    };
    let outcomes = store.execute_within(refused, now, None).await.unwrap();
    assert_eq!(outcomes[0].leased, 5);
    assert_eq!(outcomes[0].tat_us, now_us + 17 * 100_000);
    assert_eq!(tat(), now_us + 17 * 100_000);
    let given = store
        .give_back(vec![unused(5, outcomes[0].tat_us, 3)])
        .await;
    assert_eq!((given.kept.len(), given.unanswered.len()), (0, 0));
    assert_eq!(tat(), now_us + 12 * 100_000);
}

/// When the limiter tests below start: in the window of
/// `{d|k=v}f60:1700000040`.
const START_MS: u64 = 1_700_000_040_000;

/// A limiter on `redis` with one leased rule (`k`, 100,000 a minute) and a
/// manual clock at [`START_MS`].
async fn leased_limiter(
    redis: &RedisServer,
    options: floodgate::LimiterOptions,
) -> (
    floodgate::Limiter<floodgate::StoreKind>,
    floodgate::ManualClock,
) {
    use crate::support::grpc::index;
    use floodgate::{Limiter, ManualClock, RedisConfig, RedisStore, StoreKind};
    use std::sync::Arc;

    let store = RedisStore::new(RedisConfig::single(redis.addr()));
    store.connect().await.expect("redis reachable");
    let rules = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100000, lease: true}\n";
    let clock = ManualClock::new(UnixMillis(START_MS));
    let limiter = Limiter::new(
        Arc::new(arc_swap::ArcSwap::from_pointee(index(&[("d.yaml", rules)]))),
        StoreKind::Redis {
            main: store,
            per_second: None,
        },
        Arc::new(clock.clone()),
        options,
    );
    (limiter, clock)
}

/// A caller that gives up while its request's store call is in flight
/// (Envoy's filter does at its timeout), and a request whose deadline
/// passes while Redis is frozen, leave no block behind: requests never
/// take blocks (the background fetch does, whatever callers do), and the
/// descriptor keeps leasing. Once blocks are given back, Redis counts the
/// hits admitted and at most the given-up calls' own hits. (When a request
/// took the next block with its own hits, each such call left a block
/// counted in Redis and held by no one until the window ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_given_up_in_flight_strands_no_block() {
    use crate::lease_model::metric;
    use floodgate::{Code, Descriptor, LimiterOptions, Request};
    use std::time::Duration;

    let redis = RedisServer::start();
    let (limiter, clock) = leased_limiter(&redis, LimiterOptions::default()).await;
    let start = START_MS;
    let request = Request {
        domain: "d".into(),
        descriptors: vec![Descriptor::from_pairs([("k", "v")])],
        hits_addend: 0,
    };
    let taken = || metric(&limiter, "ratelimit_lease_blocks_total{outcome=\"taken\"}");
    let mut admitted = 0u64;
    // A rate to size a block by: 100 hits at once, 10 ms before the next.
    for _ in 0..100 {
        let answer = limiter.should_rate_limit(&request).await.unwrap();
        admitted += u64::from(answer.overall_code == Code::Ok);
    }
    assert_eq!(taken(), 0);
    clock.set(UnixMillis(start + 10));
    // Redis frozen: the next hit finds no block and asks the store; its
    // caller gives up before the store's own deadline.
    redis.pause();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(30),
        limiter.should_rate_limit(&request),
    )
    .await;
    assert!(gave_up.is_err(), "the call was to wait on the frozen Redis");
    // And one whose own deadline passes first.
    let late = limiter
        .should_rate_limit_within(&request, Some(Duration::from_millis(20)))
        .await;
    assert!(late.is_err(), "answered past its deadline: {late:?}");
    redis.resume();
    // The background fetch takes the block the two asked for.
    limiter.lease_step().await;
    assert!(taken() > 0, "no block taken after the given-up requests");
    for _ in 0..20 {
        let answer = limiter.should_rate_limit(&request).await.unwrap();
        admitted += u64::from(answer.overall_code == Code::Ok);
    }
    assert_eq!(admitted, 120);
    limiter.give_back_leases().await;
    assert_eq!(
        metric(
            &limiter,
            "ratelimit_lease_blocks_total{outcome=\"stranded\"}"
        ),
        0
    );
    let counted: u64 = redis
        .cli(&["GET", "{d|k=v}f60:1700000040"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        (admitted..=admitted + 2).contains(&counted),
        "Redis counts {counted} for {admitted} hits admitted and 2 given up"
    );
}

/// The background fetch itself meets a frozen Redis: it misses
/// `REDIS_TIMEOUT`, and Redis runs it once it resumes, taking a block no
/// one listens for. The next step settles it: the block is found under the
/// fetch's fence and given back, so Redis counts exactly the hits admitted.
/// (Before fetches were fenced, that block stayed counted until its window
/// ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_answered_too_late_is_settled_and_its_block_given_back() {
    use crate::lease_model::metric;
    use floodgate::{Code, Descriptor, LimiterOptions, Request};
    use std::time::Duration;

    let redis = RedisServer::start();
    let (limiter, clock) = leased_limiter(&redis, LimiterOptions::default()).await;
    let request = Request {
        domain: "d".into(),
        descriptors: vec![Descriptor::from_pairs([("k", "v")])],
        hits_addend: 0,
    };
    let key = "{d|k=v}f60:1700000040";
    let count = || -> u64 { redis.cli(&["GET", key]).unwrap().trim().parse().unwrap() };
    let blocks = |outcome: &str| {
        metric(
            &limiter,
            &format!("ratelimit_lease_blocks_total{{outcome=\"{outcome}\"}}"),
        )
    };
    // A rate to size a block by, and a hit that finds no block: a fetch is
    // asked for.
    let mut admitted = 0u64;
    for at in [START_MS, START_MS + 10] {
        clock.set(UnixMillis(at));
        for _ in 0..100 {
            let answer = limiter.should_rate_limit(&request).await.unwrap();
            admitted += u64::from(answer.overall_code == Code::Ok);
        }
    }
    assert_eq!(count(), admitted);

    // The fetch is sent to the frozen Redis and misses its deadline.
    redis.pause();
    limiter.lease_step().await;
    assert_eq!(blocks("taken"), 0, "a block landed from a frozen Redis");
    redis.resume();
    // Redis runs the fetch now: a block counted that no one holds.
    let mut with_block = count();
    for _ in 0..200 {
        if with_block > admitted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        with_block = count();
    }
    assert!(with_block > admitted, "the late fetch never ran");

    // The next step finds it under the fence and gives it back.
    limiter.lease_step().await;
    assert_eq!(count(), admitted, "the late block was not given back");
    assert_eq!(blocks("taken"), 1);
    assert_eq!(blocks("given_back"), 1);
    assert_eq!(blocks("stranded"), 0);
    // Settled once: the fence is left empty, so it is not given back twice.
    // Blocks are taken again: each fetch answered, its fence removed by the
    // next; the settled fence and the last fetch's remain.
    for round in 0..5 {
        limiter.lease_step().await;
        clock.set(UnixMillis(START_MS + 20 + round * 10));
        for _ in 0..100 {
            let answer = limiter.should_rate_limit(&request).await.unwrap();
            admitted += u64::from(answer.overall_code == Code::Ok);
        }
    }
    let fences = redis.cli(&["--raw", "KEYS", "{d|k=v}F*"]).unwrap();
    assert!(blocks("taken") >= 3, "blocks taken: {}", blocks("taken"));
    assert!(fences.lines().count() <= 2, "fences left: {fences}");
    limiter.give_back_leases().await;
    assert_eq!(count(), admitted);
    assert_eq!(blocks("stranded"), 0);
}

/// A fetch settled before Redis ran it never takes a block: its fence is
/// there first, and the fetch, when Redis runs it at last, writes nothing.
/// A block a fetch took is found once, and a lease's next fetch removes
/// the previous one's fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_settled_before_it_ran_takes_nothing() {
    use floodgate::algorithm::{FixedWindow, Spec};
    use floodgate::{CounterId, Fetch, Op, RedisConfig, RedisStore, Store};

    let redis = RedisServer::start();
    let store = RedisStore::new(RedisConfig::single(redis.addr()));
    store.connect().await.expect("redis reachable");
    let spec = Spec::FixedWindow {
        window: FixedWindow::new(60),
        limit: 1_000,
    };
    let fetch = |token| Fetch {
        op: Op {
            id: CounterId::new("d", [("k", "v")]),
            spec,
            hits: 0,
            lease: Some(50),
        },
        token,
        forget: None,
        at: UnixMillis(START_MS),
    };
    // Settled first: nothing to find, and the fence is set.
    let settled = store.settle(vec![fetch(1)]).await;
    assert!(settled.found.is_empty() && settled.unanswered.is_empty());
    // The fetch runs later and takes nothing.
    assert!(store.fetch(&[fetch(1)]).await.is_err());
    assert_eq!(
        redis
            .cli(&["--raw", "EXISTS", "{d|k=v}f60:1700000040"])
            .unwrap()
            .trim(),
        "0"
    );
    // Another fetch takes its block; settling it finds the block, and so
    // does settling it again (a settle whose answer was lost is sent
    // again): the block is given back under the fetch's token, once.
    let took = store.fetch(&[fetch(2)]).await.unwrap();
    assert_eq!(took[0].leased, 50);
    for _ in 0..2 {
        let found = store.settle(vec![fetch(2)]).await.found;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1.leased, 50);
    }
    // The next fetch of a lease removes the fence of the one before it,
    // answered: a lease keeps one fence, not one per fetch.
    let exists = |token: u64| {
        let key = format!("{{d|k=v}}F{token:016x}");
        redis.cli(&["--raw", "EXISTS", &key]).unwrap().trim() == "1"
    };
    assert!(exists(2));
    let next = Fetch {
        forget: Some(2),
        ..fetch(3)
    };
    assert_eq!(store.fetch(&[next]).await.unwrap()[0].leased, 50);
    assert!(!exists(2) && exists(3));
}

/// A leased descriptor the local cache answers over its limit (its counter
/// went past the limit by instances counting without a lease, or under a
/// higher limit before a reload) asks its lease nothing: once the window
/// turns, it takes blocks again. (Each cached answer used to claim the
/// next block and drop the claim, and the lease never took one again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_the_local_cache_answers_keeps_leasing_after_its_window() {
    use crate::lease_model::metric;
    use floodgate::{Descriptor, LimiterOptions, Request};

    let redis = RedisServer::start();
    let options = LimiterOptions {
        local_cache_bytes: 1 << 20,
        ..LimiterOptions::default()
    };
    let (limiter, clock) = leased_limiter(&redis, options).await;
    let start = START_MS;
    let request = |hits: Option<u64>| {
        let mut descriptor = Descriptor::from_pairs([("k", "v")]);
        descriptor.hits_addend = hits;
        Request {
            domain: "d".into(),
            descriptors: vec![descriptor],
            hits_addend: 0,
        }
    };
    let taken = || metric(&limiter, "ratelimit_lease_blocks_total{outcome=\"taken\"}");
    // Counted past the limit elsewhere; a check-only call finds it over and
    // the local cache keeps that until the window ends.
    redis
        .cli(&["SET", "{d|k=v}f60:1700000040", "200000", "EX", "600"])
        .unwrap();
    let read = limiter.should_rate_limit(&request(Some(0))).await.unwrap();
    assert_eq!(read.overall_code, floodgate::Code::OverLimit);
    // Hits at a rate that sizes blocks, every one answered from the cache.
    for at in [start, start + 10, start + 20] {
        clock.set(UnixMillis(at));
        for _ in 0..100 {
            let answer = limiter.should_rate_limit(&request(None)).await.unwrap();
            assert_eq!(answer.overall_code, floodgate::Code::OverLimit);
        }
    }
    // The next window: the same traffic takes blocks.
    let next = start + 60_000;
    for at in [next, next + 10, next + 20] {
        clock.set(UnixMillis(at));
        for _ in 0..100 {
            let answer = limiter.should_rate_limit(&request(None)).await.unwrap();
            assert_eq!(answer.overall_code, floodgate::Code::Ok);
        }
    }
    limiter.lease_step().await;
    assert!(
        taken() > 0,
        "no block taken in the window after the cached one"
    );
}
