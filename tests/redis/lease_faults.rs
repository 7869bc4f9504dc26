//! Leased quotas when Redis stops answering at the worst moment: a fetch,
//! a settle or a give-back in flight while Redis is frozen (SIGSTOP, as
//! `DEBUG SLEEP` does from inside) past `REDIS_TIMEOUT`, and run by Redis
//! once it wakes; a window that turns while a request is in flight. Each
//! asserts what was admitted, what Redis holds once every block is given
//! back, and what the lease metrics say.

use crate::lease_model::metric;
use crate::support::backends::redis_config;
use crate::support::grpc::index;
use crate::support::redis::{RedisCluster, RedisServer};
use floodgate::{Code, Descriptor, Limiter, LimiterOptions, ManualClock, Request};
use floodgate::{RedisConfig, RedisMode, RedisStore, StoreKind, UnixMillis};
use std::sync::Arc;
use std::time::Duration;

/// The start of a minute: the window of `{d|k=v}f60:1700000040`.
const START_MS: u64 = 1_700_000_040_000;

/// The rules: `k` a leased fixed window of 100,000 a minute, `g` a leased
/// GCRA of 70,000 a minute (an emission interval of 857 µs, so a TAT's
/// last digits are not zeros), `o` one a second (not leased), `s` a leased
/// fixed window of 800 a minute.
const RULES: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100000, lease: true}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 70000, algorithm: gcra, lease: true}
  - key: o
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: s
    rate_limit: {unit: minute, requests_per_unit: 800, lease: true}
";

/// Where a test's counters live: a server, or a Cluster of its own (frozen
/// whole).
enum Target {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Target {
    fn single() -> Self {
        Self::Single(RedisServer::start())
    }

    fn cluster() -> Self {
        Self::Cluster(RedisCluster::start(3))
    }

    fn servers(&self) -> &[RedisServer] {
        match self {
            Self::Single(server) => std::slice::from_ref(server),
            Self::Cluster(cluster) => &cluster.nodes,
        }
    }

    fn pause(&self) {
        self.servers().iter().for_each(RedisServer::pause);
    }

    fn resume(&self) {
        self.servers().iter().for_each(RedisServer::resume);
    }

    /// A store's configuration, its `REDIS_TIMEOUT` 100 ms. One connection
    /// (per node): what is sent while Redis is frozen runs in the order it
    /// was sent once it wakes.
    fn config(&self) -> RedisConfig {
        let config = match self {
            Self::Single(server) => RedisConfig::single(server.addr()),
            Self::Cluster(cluster) => redis_config(RedisMode::Cluster, cluster.seeds()),
        };
        RedisConfig {
            pool_size: 1,
            timeout: Duration::from_millis(100),
            ..config
        }
    }

    /// The integer at `key` (0 when there is none).
    fn read(&self, key: &str) -> u64 {
        let [first, ..] = self.servers() else {
            unreachable!("a target has a server")
        };
        first
            .cli(&["-c", "--raw", "GET", key])
            .unwrap()
            .trim()
            .parse()
            .unwrap_or(0)
    }
}

/// A limiter on `main` (and `per_second` for one-second limits, with a
/// timeout of `per_second_timeout`), its clock at [`START_MS`].
async fn limiter(
    main: &Target,
    per_second: Option<(&RedisServer, Duration)>,
    options: LimiterOptions,
) -> (Limiter<StoreKind>, ManualClock) {
    let connect = |config: RedisConfig| async move {
        let store = RedisStore::new(config);
        store.connect().await.expect("redis reachable");
        store
    };
    let main = connect(main.config()).await;
    let per_second = match per_second {
        Some((redis, timeout)) => Some(
            connect(RedisConfig {
                timeout,
                ..RedisConfig::single(redis.addr())
            })
            .await,
        ),
        None => None,
    };
    let clock = ManualClock::new(UnixMillis(START_MS));
    let limiter = Limiter::new(
        Arc::new(arc_swap::ArcSwap::from_pointee(index(&[("d.yaml", RULES)]))),
        StoreKind::Redis { main, per_second },
        Arc::new(clock.clone()),
        options,
    );
    (limiter, clock)
}

fn request(pairs: &[(&str, &str, u64)]) -> Request {
    Request {
        domain: "d".into(),
        descriptors: pairs
            .iter()
            .map(|&(k, v, hits)| Descriptor {
                hits_addend: Some(hits),
                ..Descriptor::from_pairs([(k, v)])
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Hits on `key` at `at`, one a request, `n` of them: the hits admitted.
async fn hit(limiter: &Limiter<StoreKind>, clock: &ManualClock, at: u64, key: &str, n: u64) -> u64 {
    clock.set(UnixMillis(at));
    let mut admitted = 0;
    for _ in 0..n {
        let answer = limiter
            .should_rate_limit(&request(&[(key, "v", 1)]))
            .await
            .unwrap();
        admitted += u64::from(answer.overall_code == Code::Ok);
    }
    admitted
}

fn blocks(limiter: &Limiter<StoreKind>, outcome: &str) -> u64 {
    metric(
        limiter,
        &format!("ratelimit_lease_blocks_total{{outcome=\"{outcome}\"}}"),
    )
}

fn stranded_hits(limiter: &Limiter<StoreKind>) -> u64 {
    metric(limiter, "ratelimit_lease_hits_total{outcome=\"stranded\"}")
}

/// Waits (at most 2 s, in real time: Redis runs what was queued as soon
/// as it wakes) until `done` holds.
async fn until(mut done: impl FnMut() -> bool, what: &str) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 2 s");
}

/// A fetch misses `REDIS_TIMEOUT`, and so does the settle sent for it on
/// the next step; Redis wakes and runs both, the fetch taking its block.
/// The settle's answer was lost, so it is sent again and finds the block:
/// given back, and Redis counts the hits admitted. (A settle that emptied
/// the fence as it read it left the next one nothing to find: the block
/// stayed counted until its window ended, and no metric said so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_answered_too_late_is_sent_again_and_finds_the_block() {
    settle_answered_too_late(&Target::single()).await;
}

/// The same on a Cluster, every node frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_settle_answered_too_late_is_sent_again() {
    settle_answered_too_late(&Target::cluster()).await;
}

async fn settle_answered_too_late(redis: &Target) {
    let (limiter, clock) = limiter(redis, None, LimiterOptions::default()).await;
    let key = "{d|k=v}f60:1700000040";
    // A rate to size a block by; the hits at +10 ms find no block and ask
    // for one.
    let mut admitted = hit(&limiter, &clock, START_MS, "k", 100).await;
    admitted += hit(&limiter, &clock, START_MS + 10, "k", 100).await;
    assert_eq!(redis.read(key), admitted);

    redis.pause();
    // The fetch, then its settle: both past the timeout.
    limiter.lease_step().await;
    limiter.lease_step().await;
    assert_eq!(blocks(&limiter, "taken"), 0);
    redis.resume();
    until(|| redis.read(key) > admitted, "the late fetch ran").await;

    limiter.lease_step().await;
    assert_eq!(redis.read(key), admitted, "the late block is still counted");
    assert_eq!(blocks(&limiter, "taken"), 1);
    assert_eq!(blocks(&limiter, "given_back"), 1);
    limiter.give_back_leases().await;
    assert_eq!(redis.read(key), admitted);
    assert_eq!(stranded_hits(&limiter), 0);
}

/// A give-back misses `REDIS_TIMEOUT` and lands when Redis wakes. It is
/// sent again under its token, which Redis answers from the first run's
/// fence without giving back twice: the metrics say given back, not
/// stranded, and Redis counts exactly the hits admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_that_lands_late_is_counted_given_back_once() {
    give_back_lands_late(&Target::single()).await;
}

/// The same on a Cluster, every node frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_give_back_that_lands_late_is_counted_once() {
    give_back_lands_late(&Target::cluster()).await;
}

async fn give_back_lands_late(redis: &Target) {
    let (limiter, clock) = limiter(redis, None, LimiterOptions::default()).await;
    let key = "{d|k=v}f60:1700000040";
    let mut admitted = hit(&limiter, &clock, START_MS, "k", 100).await;
    admitted += hit(&limiter, &clock, START_MS + 10, "k", 100).await;
    limiter.lease_step().await;
    assert_eq!(blocks(&limiter, "taken"), 1);
    // Some hits from the block, then the descriptor goes quiet.
    admitted += hit(&limiter, &clock, START_MS + 20, "k", 10).await;
    // The next block those asked for, taken while Redis answers.
    limiter.lease_step().await;
    assert!(redis.read(key) > admitted, "no block held");
    clock.set(UnixMillis(START_MS + 2_000));

    redis.pause();
    limiter.lease_step().await;
    redis.resume();
    until(|| redis.read(key) == admitted, "the late give-back ran").await;
    assert_eq!(
        stranded_hits(&limiter),
        0,
        "a give-back that landed is counted stranded"
    );

    // Sent again: answered, and not run twice.
    limiter.lease_step().await;
    assert_eq!(blocks(&limiter, "given_back"), 1);
    assert_eq!(redis.read(key), admitted);
    limiter.give_back_leases().await;
    assert_eq!(redis.read(key), admitted);
    assert_eq!(stranded_hits(&limiter), 0);
    assert_eq!(blocks(&limiter, "stranded"), 0);
}

/// A GCRA fetch runs late, with its bucket's TAT ahead of now (a busy
/// key): the TAT it left, kept in its fence, is read back exactly (16
/// digits of microseconds), so the settle's give-back matches the bucket
/// and the block comes back. (Written with Lua's `%.14g`, the TAT was
/// rounded and the block was kept.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_gcra_block_is_given_back_exactly() {
    let redis = Target::single();
    let (limiter, clock) = limiter(&redis, None, LimiterOptions::default()).await;
    let tat_key = "{d|g=v}g857:70000";
    // 201 cells: the TAT ends in 43 µs, which `%.14g` would round off.
    hit(&limiter, &clock, START_MS, "g", 100).await;
    hit(&limiter, &clock, START_MS + 10, "g", 101).await;
    let before = redis.read(tat_key);
    assert_ne!(before % 100, 0);
    assert!(
        before > (START_MS + 10) * 1_000,
        "the TAT is not ahead of now"
    );

    redis.pause();
    limiter.lease_step().await;
    redis.resume();
    until(|| redis.read(tat_key) > before, "the late fetch ran").await;

    limiter.lease_step().await;
    assert_eq!(blocks(&limiter, "taken"), 1);
    assert_eq!(blocks(&limiter, "given_back"), 1);
    assert_eq!(blocks(&limiter, "stranded"), 0);
    assert_eq!(
        redis.read(tat_key),
        before,
        "the block's cells stay counted"
    );
}

/// A request admitted on a leased descriptor from a block of minute M,
/// whose other descriptor's store call is in flight while the window
/// turns (and a block of M+1 is taken), is refused as a whole
/// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`): its hits go back to M's
/// counter, not into M+1's block. M+1 then admits exactly its limit, and
/// after the give-back Redis counts in each window the hits admitted in
/// it. (Put into M+1's block, they were admitted again in M+1: its limit
/// and those hits.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_of_a_refused_request_go_back_to_their_own_window() {
    const LIMIT: u64 = 800;
    let (redis, second) = (Target::single(), RedisServer::start());
    let options = LimiterOptions {
        stop_when_over: true,
        ..LimiterOptions::default()
    };
    // The one-second store waits long enough for the window to turn.
    let (limiter, clock) = limiter(&redis, Some((&second, Duration::from_secs(10))), options).await;
    let last = START_MS + 59_950;
    let next = START_MS + 60_000;
    // In M: a rate, a block.
    let mut in_m = hit(&limiter, &clock, last, "s", 100).await;
    in_m += hit(&limiter, &clock, last + 10, "s", 100).await;
    limiter.lease_step().await;
    assert_eq!(blocks(&limiter, "taken"), 1);
    // `o` at its limit of one a second.
    assert_eq!(hit(&limiter, &clock, last + 20, "o", 1).await, 1);

    // The request: 20 hits on `s` from M's block, `o` in flight. Its two
    // hits on `o` are over the limit alone: `o`'s one-second key expires
    // by Redis' real-time clock, which a slow run can let pass before
    // the request reaches it.
    second.pause();
    let refused = async {
        let answer = limiter
            .should_rate_limit(&request(&[("s", "v", 20), ("o", "v", 2)]))
            .await
            .unwrap();
        assert_eq!(answer.overall_code, Code::OverLimit);
    };
    let turn = async {
        // The window turns: M's block lapses, a block of M+1 is taken.
        let admitted = hit(&limiter, &clock, next, "s", 100).await;
        limiter.lease_step().await;
        assert_eq!(blocks(&limiter, "taken"), 2, "no block of M+1");
        second.resume();
        admitted
    };
    let ((), mut in_next) = tokio::join!(refused, turn);

    // M+1 spent: every hit until refusals, blocks fetched as it goes.
    for at in next + 1..next + 300 {
        let admitted = hit(&limiter, &clock, at, "s", 10).await;
        in_next += admitted;
        limiter.lease_step().await;
        if admitted == 0 {
            break;
        }
    }
    assert_eq!(
        in_next, LIMIT,
        "minute M+1 admitted {in_next} on a limit of {LIMIT}"
    );
    limiter.give_back_leases().await;
    assert_eq!(redis.read("{d|s=v}f60:1700000040"), in_m);
    assert_eq!(redis.read("{d|s=v}f60:1700000100"), in_next);
}
