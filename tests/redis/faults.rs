//! The faults operators meet, injected into real redis-server processes
//! while callers keep asking: a Cluster master killed or frozen, a master
//! demoted behind an address that is repointed, Redis restarted. Each test
//! asserts what was answered and what was counted.

use crate::support::backends::{connected, redis_config};
use crate::support::grpc::{TestServer, index, request};
use crate::support::proxy::Proxy;
use crate::support::redis::{RedisCluster, RedisServer};
use crate::support::{poll_until, poll_until_async};
use floodgate::LimiterOptions;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::{ManualClock, UnixMillis};
use floodgate::{RedisConfig, RedisMode};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const RULES: &str = r"
domain: edge
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000000}
";

const T0: u64 = 1_700_000_080;

/// The counter key of `k=<value>` in the current hour.
fn key(value: &str) -> String {
    format!("{{edge|k={value}}}f3600:{}", T0 - T0 % 3_600)
}

async fn serve(config: RedisConfig) -> TestServer {
    TestServer::start(
        index(&[("edge.yaml", RULES)]),
        connected(config).await,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
    )
    .await
}

/// A condition on the calls made so far.
type Check = Box<dyn Fn(&[(String, Call)]) -> bool + Send>;

/// One call's fate: the order it started and ended in (one counter for
/// both, shared by every caller), and whether it was answered OK.
#[derive(Debug, Clone, Copy)]
struct Call {
    started: u64,
    ended: u64,
    ok: bool,
}

/// Asks for `k=<value>` once, recording the call in `log`.
async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    value: &str,
    order: &AtomicU64,
) -> (Call, Option<RateLimitResponse>) {
    let started = order.fetch_add(1, Ordering::SeqCst);
    let answer = client
        .should_rate_limit(request("edge", &[&[("k", value)]]))
        .await
        .ok()
        .map(tonic::Response::into_inner);
    let ended = order.fetch_add(1, Ordering::SeqCst);
    let ok = answer
        .as_ref()
        .is_some_and(|r| r.overall_code == Code::Ok as i32);
    (Call { started, ended, ok }, answer)
}

/// Callers asking in a loop, each on its own values, until stopped (or for
/// at most `MAX_LOAD`, a bound on a test that goes wrong).
struct Load {
    stop: Arc<AtomicBool>,
    order: Arc<AtomicU64>,
    calls: Arc<Mutex<Vec<(String, Call)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

const MAX_LOAD: Duration = Duration::from_secs(60);

impl Load {
    fn start(client: &RateLimitServiceClient<Channel>, callers: Vec<Vec<String>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let order = Arc::new(AtomicU64::new(0));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let tasks = callers
            .into_iter()
            .map(|values| {
                let (stop, order, calls) = (stop.clone(), order.clone(), calls.clone());
                let mut client = client.clone();
                tokio::spawn(async move {
                    let until = Instant::now() + MAX_LOAD;
                    for value in values.iter().cycle() {
                        if stop.load(Ordering::SeqCst) || Instant::now() > until {
                            return;
                        }
                        let (done, _) = call(&mut client, value, &order).await;
                        calls.lock().push((value.clone(), done));
                        // About 200 calls a second per caller.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            order,
            calls,
            tasks,
        }
    }

    /// Waits (at most 10 s) until more than `n` calls were answered OK.
    async fn wait_answered(&self, n: usize) {
        let answered = poll_until_async(Duration::from_secs(10), Duration::from_millis(10), || {
            let ok = self.calls.lock().iter().filter(|(_, c)| c.ok).count();
            async move { (ok > n).then_some(true) }
        })
        .await;
        assert!(answered, "fewer than {n} calls answered");
    }

    async fn stop(self) -> Vec<(String, Call)> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.unwrap();
        }
        std::mem::take(&mut *self.calls.lock())
    }
}

/// The stored count of `k=<value>` on node `i` (0 when absent).
fn count_on(node: &RedisServer, value: &str) -> u64 {
    node.cli(&["GET", &key(value)])
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Three masters with `replicas` replicas each, as operators run them to
/// survive a dead master: a node is failed after 1 s, and the other
/// shards go on serving (`cluster-require-full-coverage no`).
async fn failing_cluster(replicas: usize) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start_with(3, replicas, &FAILING_NODE))
        .await
        .unwrap()
}

/// The arguments of each node of [`failing_cluster`].
const FAILING_NODE: [&str; 4] = [
    "--cluster-node-timeout",
    "1000",
    "--cluster-require-full-coverage",
    "no",
];

/// floodgate on `cluster`, with Redis deadlines of `timeout` and two
/// connections per node.
async fn serve_cluster(cluster: &RedisCluster, timeout: Duration) -> TestServer {
    serve(RedisConfig {
        timeout,
        connect_timeout: timeout,
        pool_size: 2,
        ..redis_config(RedisMode::Cluster, cluster.seeds())
    })
    .await
}

/// Whether the server on `port` says `text` in `INFO replication` within
/// 20 s (asked every 5 ms, so the moment is seen closely).
async fn replication_says(port: u16, text: &'static str) -> bool {
    tokio::task::spawn_blocking(move || {
        poll_until(Duration::from_secs(20), Duration::from_millis(5), || {
            crate::support::redis::cli(port, &["INFO", "replication"])
                .is_some_and(|info| info.contains(text))
                .then_some(true)
        })
    })
    .await
    .unwrap()
}

/// Three values whose keys each of the three masters (nodes 0..3) serves,
/// and each value's slot (asked while every master is up).
fn values_on_each_master(
    cluster: &RedisCluster,
) -> (Vec<Vec<String>>, std::collections::HashMap<String, u16>) {
    let mut on: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut slot_of = std::collections::HashMap::new();
    for i in 0..600 {
        let value = format!("v{i}");
        let slot = cluster.slot(&key(&value));
        if let Some(m) = cluster.serving(0, slot).filter(|&m| m < 3)
            && on[m].len() < 3
        {
            on[m].push(value.clone());
            slot_of.insert(value, slot);
        }
        if on.iter().all(|v| v.len() == 3) {
            break;
        }
    }
    assert!(on.iter().all(|v| v.len() == 3), "{on:?}");
    (on, slot_of)
}

/// How a Cluster master is taken down.
#[derive(Debug, Clone, Copy)]
enum Down {
    /// SIGKILL: connections refused.
    Killed,
    /// SIGSTOP: connections open, nothing answered (calls wait for their
    /// deadline).
    Frozen,
}

/// A 3-master Cluster with a replica each; one master goes down under
/// load. Calls for the two live shards never fail (with a Redis timeout of
/// 500 ms, a call that waited for the frozen node would), and each of
/// their hits is stored exactly once; the dead shard's keys are counted
/// again once its replica is promoted.
#[allow(clippy::print_stderr)] // the measured delay, quoted in the README
async fn a_dead_master_fails_only_its_own_slots(down: Down) {
    let mut cluster = failing_cluster(1).await;
    let server = serve_cluster(&cluster, Duration::from_millis(500)).await;
    let client = server.client().await;

    // Node 0 is the one that goes down.
    let (on, slot_of) = values_on_each_master(&cluster);
    let victim = 0;
    let replica = cluster
        .replica_of(victim)
        .expect("the victim has a replica");

    let live: Vec<String> = on[1].iter().chain(&on[2]).cloned().collect();
    let load = Load::start(
        &client,
        vec![
            on[1].clone(),
            on[2].clone(),
            live.clone(),
            on[victim].clone(),
        ],
    );
    // Some calls on every shard first.
    let order = load.order.clone();
    load.wait_answered(40).await;

    match down {
        Down::Killed => cluster.nodes[victim].stop(),
        Down::Frozen => cluster.nodes[victim].pause(),
    }
    assert!(
        replication_says(cluster.nodes[replica].port, "role:master").await,
        "the replica was not promoted"
    );
    let promoted_at = Instant::now();
    // The dead shard's keys are counted again (on the new master).
    let probe = client.clone();
    let healed = poll_until_async(Duration::from_secs(15), Duration::from_millis(10), || {
        let mut probe = probe.clone();
        let order = order.clone();
        let value = on[victim][0].clone();
        async move { call(&mut probe, &value, &order).await.0.ok.then_some(true) }
    })
    .await;
    assert!(healed, "the promoted replica's keys were never counted");
    // Measured, not asserted (the machine's load decides it): README and
    // bench/RESULTS.md quote it.
    eprintln!(
        "{down:?}: the dead shard was counted again {} ms after its replica's promotion",
        promoted_at.elapsed().as_millis()
    );
    // Load goes on on the healed Cluster for a moment.
    let seen = load.calls.lock().len();
    assert!(
        poll_until_async(Duration::from_secs(10), Duration::from_millis(20), || {
            let calls = load.calls.clone();
            async move { (calls.lock().len() > seen + 100).then_some(true) }
        })
        .await
    );
    let calls = load.stop().await;

    // Live shards: every call answered OK...
    let failed: Vec<&(String, Call)> = calls
        .iter()
        .filter(|(v, c)| !on[victim].contains(v) && !c.ok)
        .collect();
    let live_calls = calls.iter().filter(|(v, _)| live.contains(v)).count();
    assert!(
        live_calls > 200,
        "too little load on the live shards: {live_calls}"
    );
    assert!(
        failed.is_empty(),
        "{} of {live_calls} calls on live shards failed while a master was {down:?}: {:?}",
        failed.len(),
        failed.iter().take(5).collect::<Vec<_>>()
    );
    // ...and counted exactly once, on the master serving it.
    for value in &live {
        let answered = calls.iter().filter(|(v, c)| v == value && c.ok).count() as u64;
        let node = cluster.serving(1, slot_of[value]).unwrap();
        assert_eq!(count_on(&cluster.nodes[node], value), answered, "{value}");
    }
    // The dead shard's keys count on the promoted replica, one per call.
    let mut probe_client = client.clone();
    let value = on[victim][1].clone();
    let before = count_on(&cluster.nodes[replica], &value);
    for _ in 0..5 {
        assert!(call(&mut probe_client, &value, &order).await.0.ok);
    }
    assert_eq!(count_on(&cluster.nodes[replica], &value), before + 5);
    drop(probe);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_master_fails_only_its_own_slots() {
    a_dead_master_fails_only_its_own_slots(Down::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_cluster_master_holds_up_only_its_own_slots() {
    a_dead_master_fails_only_its_own_slots(Down::Frozen).await;
}

/// Asserts that some call from the one numbered `since` on was answered
/// correctly, and that no call started after the first such answer failed;
/// `after` names that first answer in the failure message.
fn assert_none_failed_after_first_ok(calls: &[(String, Call)], since: u64, after: &str) {
    let first_ok = calls
        .iter()
        .map(|(_, c)| *c)
        .filter(|c| c.ok && c.started >= since)
        .min_by_key(|c| c.ended);
    let Some(first) = first_ok else {
        panic!("no call from {since} on was answered correctly");
    };
    let failed: Vec<Call> = calls
        .iter()
        .map(|(_, c)| *c)
        .filter(|c| !c.ok && c.started > first.ended)
        .collect();
    assert!(
        failed.is_empty(),
        "{} calls failed after {after}: {failed:?}",
        failed.len()
    );
}

/// Checks that `node`, restarted empty, counts each of `values` once for
/// every call on it answered after the restart began (from call `since`
/// on). A call that failed meanwhile (a timeout while the node ran its
/// script) may have counted, once: the README's "When Redis fails" says
/// so; and so may the one in flight as the restart began (each caller asks
/// one at a time). None is counted twice.
fn assert_counted_since_restart(
    calls: &[(String, Call)],
    values: &[String],
    since: u64,
    node: &RedisServer,
) {
    for value in values {
        let of = |ok: bool| {
            calls
                .iter()
                .filter(|(v, c)| v == value && c.ok == ok && c.started > since)
                .count() as u64
        };
        let (answered, failed) = (of(true), of(false));
        let stored = count_on(node, value);
        assert!(
            stored >= answered && stored <= answered + failed + 1,
            "{value}: {stored} stored for {answered} answered and {failed} failed"
        );
    }
}

/// Redis killed and started again on its port under four callers, on a
/// pool of four connections: once one call is answered correctly, no call
/// started after it gets the failure policy (no pooled connection that
/// died in the outage is used again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_redis_restart_no_call_fails_once_one_is_answered() {
    let mut redis = RedisServer::start();
    // Deadlines long enough that a busy machine's slowness is no failure:
    // what fails here is a connection left dead by the outage.
    let config = RedisConfig {
        timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        pool_size: 4,
        ..redis_config(RedisMode::Single, redis.addr())
    };
    let server = serve(config).await;
    let client = server.client().await;
    let values: Vec<Vec<String>> = (0..4).map(|i| vec![format!("r{i}")]).collect();
    let load = Load::start(&client, values);
    let calls = load.calls.clone();
    let wait_for = |what: &'static str, check: Check| {
        let calls = calls.clone();
        async move {
            let seen = poll_until_async(Duration::from_secs(15), Duration::from_millis(10), || {
                let ok = check(&calls.lock());
                async move { ok.then_some(true) }
            })
            .await;
            assert!(seen, "timed out waiting for {what}");
        }
    };
    wait_for(
        "answers",
        Box::new(|c| c.iter().filter(|(_, c)| c.ok).count() > 20),
    )
    .await;

    redis.stop();
    let down_from = load.order.load(Ordering::SeqCst);
    wait_for(
        "failures while redis is down",
        Box::new(move |c| {
            c.iter()
                .filter(|(_, c)| !c.ok && c.started > down_from)
                .count()
                > 8
        }),
    )
    .await;
    // Calls started from here on reach the new server or fail; the ones
    // answered while `restart` waits for it to be ready count there too.
    let restart_from = load.order.load(Ordering::SeqCst);
    redis.restart(&[]);
    let up_from = load.order.load(Ordering::SeqCst);
    wait_for(
        "answers after the restart",
        Box::new(move |c| {
            c.iter()
                .filter(|(_, c)| c.ok && c.started > up_from)
                .count()
                > 200
        }),
    )
    .await;
    let calls = load.stop().await;

    assert_none_failed_after_first_ok(&calls, up_from, "the first correct answer");
    // Every call answered after the restart counted once on the new
    // server (it started empty).
    let values = ["r0", "r1", "r2", "r3"].map(String::from);
    assert_counted_since_restart(&calls, &values, restart_from, &redis);
    server.shutdown().await;
}

/// A Cluster master without a replica killed and started again on its
/// port (it finds its `nodes.conf` and serves its slots again, empty),
/// under load on every shard: the other shards never fail and count each
/// call once; once one call on the restarted shard is answered, no later
/// call on it fails (no connection that died with the node is used again),
/// and it counts each call answered after the restart once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cluster_master_restart_no_call_fails_once_one_is_answered() {
    let mut cluster = failing_cluster(0).await;
    let server = serve_cluster(&cluster, Duration::from_secs(1)).await;
    let client = server.client().await;
    let (on, slot_of) = values_on_each_master(&cluster);
    let victim = 0;
    let live: Vec<String> = on[1].iter().chain(&on[2]).cloned().collect();
    let load = Load::start(
        &client,
        vec![on[1].clone(), on[2].clone(), on[victim].clone()],
    );
    load.wait_answered(40).await;
    let calls = load.calls.clone();
    let on_victim = on[victim].clone();
    // Whether more than `n` calls on the victim's values started after
    // `since` and ended `ok` (or not) within `within`.
    let seen = |since: u64, ok: bool, n: usize, within: Duration| {
        let (calls, on_victim) = (calls.clone(), on_victim.clone());
        poll_until_async(within, Duration::from_millis(10), move || {
            let count = calls
                .lock()
                .iter()
                .filter(|(v, c)| on_victim.contains(v) && c.ok == ok && c.started > since)
                .count();
            async move { (count > n).then_some(true) }
        })
    };

    cluster.nodes[victim].stop();
    let down_from = load.order.load(Ordering::SeqCst);
    assert!(
        seen(down_from, false, 4, Duration::from_secs(15)).await,
        "no call on the dead shard failed"
    );
    let restart_from = load.order.load(Ordering::SeqCst);
    let node = &mut cluster.nodes[victim];
    let args = [&["--cluster-enabled", "yes"][..], &FAILING_NODE].concat();
    tokio::task::block_in_place(|| node.restart(&args));
    let up_from = load.order.load(Ordering::SeqCst);
    assert!(
        seen(up_from, true, 100, Duration::from_secs(20)).await,
        "the restarted shard's keys were not counted again"
    );
    let calls = load.stop().await;

    // Live shards: every call answered, each counted once.
    let failed: Vec<&(String, Call)> = calls
        .iter()
        .filter(|(v, c)| live.contains(v) && !c.ok)
        .collect();
    assert!(failed.is_empty(), "calls on live shards failed: {failed:?}");
    for value in &live {
        let answered = calls.iter().filter(|(v, c)| v == value && c.ok).count() as u64;
        let node = cluster.serving(1, slot_of[value]).unwrap();
        assert_eq!(count_on(&cluster.nodes[node], value), answered, "{value}");
    }
    // The restarted shard: no failure after its first correct answer.
    let theirs: Vec<(String, Call)> = calls
        .iter()
        .filter(|(v, _)| on[victim].contains(v))
        .cloned()
        .collect();
    assert_none_failed_after_first_ok(
        &theirs,
        up_from,
        "the restarted shard's first correct answer",
    );
    // It started empty: each call answered after the restart counted once.
    assert_counted_since_restart(&theirs, &on[victim], restart_from, &cluster.nodes[victim]);
    server.shutdown().await;
}

/// A master demoted to a replica (`REPLICAOF`) while the address floodgate
/// dials is repointed to the new master, as a DNS name or a Kubernetes
/// Service is in a failover: the connections on the old master answer
/// READONLY; floodgate drops them and dials afresh, and once one call is
/// answered by the new master no later call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr)] // the measured delay, quoted in the README
async fn a_demoted_master_behind_a_repointed_address_is_left_for_the_new_one() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let proxy = Proxy::start(&old.addr()).await;
    let config = RedisConfig {
        timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        pool_size: 3,
        ..redis_config(RedisMode::Single, proxy.addr.to_string())
    };
    let server = serve(config).await;
    let client = server.client().await;
    let load = Load::start(&client, (0..3).map(|i| vec![format!("d{i}")]).collect());
    load.wait_answered(30).await;

    // The failover: the address now leads to `new`; `old` follows it, and
    // from the moment REPLICAOF returns refuses every write: a call that
    // starts after that and is answered OK was counted on `new`.
    proxy.repoint(&new.addr());
    old.cli(&["REPLICAOF", "127.0.0.1", &new.port.to_string()])
        .unwrap();
    let switched_from = load.order.load(Ordering::SeqCst);
    let switched_at = Instant::now();
    assert!(
        poll_until_async(Duration::from_secs(15), Duration::from_millis(10), || {
            let counted = (0..3).all(|i| count_on(&new, &format!("d{i}")) > 20);
            async move { counted.then_some(true) }
        })
        .await,
        "calls never reached the new master"
    );
    eprintln!(
        "every caller counted on the new master {} ms after the switch",
        switched_at.elapsed().as_millis()
    );
    let calls = load.stop().await;
    assert_none_failed_after_first_ok(&calls, switched_from, "the new master's first answer");
    // Answered after the switch: counted on the new master, once each.
    for i in 0..3 {
        let value = format!("d{i}");
        let answered = calls
            .iter()
            .filter(|(v, c)| *v == value && c.ok && c.started > switched_from)
            .count() as u64;
        let stored = count_on(&new, &value);
        assert!(
            stored >= answered && stored <= answered + 1,
            "{value}: {stored} stored for {answered} answered"
        );
    }
    server.shutdown().await;
}

/// A Sentinel failover under three callers: Sentinel promotes the replica
/// and demotes the old master (which then answers READONLY); floodgate
/// follows `+switch-master`, and once a call is answered by the new master
/// no later call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sentinel_failover_no_call_fails_once_the_new_master_answers() {
    let old = RedisServer::start();
    let new = RedisServer::start_with(&["--replicaof", "127.0.0.1", &old.port.to_string()]);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "sentinel monitor mymaster 127.0.0.1 {} 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
            old.port
        ),
    )
    .unwrap();
    let sentinel = RedisServer::start_sentinel(&conf);
    assert!(
        replication_says(new.port, "master_link_status:up").await,
        "the replica never synced"
    );
    let config = RedisConfig {
        timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        pool_size: 3,
        ..redis_config(RedisMode::Sentinel, format!("mymaster,{}", sentinel.addr()))
    };
    let server = serve(config).await;
    let client = server.client().await;
    let load = Load::start(&client, (0..3).map(|i| vec![format!("s{i}")]).collect());
    load.wait_answered(30).await;

    sentinel.cli(&["SENTINEL", "FAILOVER", "mymaster"]).unwrap();
    // From the moment the old master is a replica it refuses every write:
    // a call that starts after that and is answered OK was counted on the
    // new master.
    assert!(
        replication_says(old.port, "role:slave").await,
        "sentinel never demoted the old master"
    );
    let switched_from = load.order.load(Ordering::SeqCst);
    assert!(
        poll_until_async(Duration::from_secs(15), Duration::from_millis(10), || {
            let counted = (0..3).all(|i| count_on(&new, &format!("s{i}")) > 40);
            async move { counted.then_some(true) }
        })
        .await,
        "calls never reached the new master"
    );
    let calls = load.stop().await;
    assert_none_failed_after_first_ok(&calls, switched_from, "the new master's first answer");
    server.shutdown().await;
    drop((sentinel, old, new));
}

/// The floodgate binary on a Cluster whose master is killed (and never
/// comes back), under load for four seconds: no kind of warning is written
/// more than once a second (floodgate's own, and the Redis client's, whose
/// `Failed to connect to node` and slot-refresh lines came many times a
/// second per instance before they were rate limited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_writes_at_most_one_line_a_second_per_kind() {
    use std::process::{Command, Stdio};
    let mut cluster = failing_cluster(0).await;
    let (grpc_port, http_port) = (crate::support::free_port(), crate::support::free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("serve")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .env("BACKEND_TYPE", "redis")
        .env("REDIS_TYPE", "cluster")
        .env("REDIS_URL", cluster.seeds())
        .env("GRPC_PORT", grpc_port.to_string())
        .env("PORT", http_port.to_string())
        .env("USE_STATSD", "false")
        .env("LOG_FORMAT", "json")
        .env("LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let channel = Channel::from_shared(format!("http://127.0.0.1:{grpc_port}")).unwrap();
    assert!(
        poll_until_async(Duration::from_secs(20), Duration::from_millis(50), || {
            let channel = channel.clone();
            async move {
                let mut c = RateLimitServiceClient::new(channel.connect().await.ok()?);
                c.should_rate_limit(request("edge", &[&[("remote_address", "warm")]]))
                    .await
                    .is_ok()
                    .then_some(true)
            }
        })
        .await,
        "floodgate never answered"
    );
    let mut client = RateLimitServiceClient::new(channel.connect().await.unwrap());
    cluster.nodes[0].stop();
    let until = Instant::now() + Duration::from_secs(4);
    let mut sent = 0;
    while Instant::now() < until && sent < 20_000 {
        let value = format!("a{}", sent % 500);
        let _ = client
            .should_rate_limit(request("edge", &[&[("remote_address", &value)]]))
            .await;
        sent += 1;
    }
    assert!(sent > 100, "too little load: {sent}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exited = poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
        child.try_wait().unwrap().map(|_| true)
    });
    if !exited {
        child.kill().unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // (kind, second) -> lines; a kind is the line's target and message
    // up to its first ':' (the Redis client puts the node after it).
    let mut per_second: std::collections::HashMap<(String, String, String), u32> =
        std::collections::HashMap::new();
    let mut lines = 0;
    for line in stderr.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let level = event["level"].as_str().unwrap_or_default();
        if level != "WARN" && level != "ERROR" {
            continue;
        }
        lines += 1;
        let target = event["target"].as_str().unwrap_or_default().to_owned();
        let message = event["message"].as_str().unwrap_or_default();
        // The limiter's line is one message for every failure: its kind is
        // the error (a timeout and a refused call are two kinds, each
        // rate limited on its own).
        let error = event["error"].as_str().unwrap_or_default();
        let kind = format!("{} {error}", message.split(':').next().unwrap_or_default());
        let second = event["timestamp"]
            .as_str()
            .unwrap_or_default()
            .get(..19)
            .unwrap_or_default()
            .to_owned();
        *per_second.entry((target, kind, second)).or_default() += 1;
    }
    let noisy: Vec<_> = per_second.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        noisy.is_empty(),
        "{lines} warning lines for {sent} calls; more than one a second of: {noisy:?}\n{stderr}"
    );
}
