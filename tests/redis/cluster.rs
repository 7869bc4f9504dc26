//! A Redis Cluster through a served floodgate: one script call per node,
//! and slots that move (finished, or half way) while floodgate's slot table
//! still places them on their old node: every hit counted once, where the
//! slot now is.

use crate::support::backends::{connected, redis_config};
use crate::support::grpc::{TestServer, ask, index, request};
use crate::support::redis::RedisCluster;
use floodgate::LimiterOptions;
use floodgate::RedisMode;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use floodgate::{ManualClock, UnixMillis};
use std::sync::Arc;

const RULES: &str = r"
domain: edge
descriptors:
  - key: hundred
    rate_limit: {unit: hour, requests_per_unit: 100}
";

const T0: u64 = 1_700_000_080;

async fn setup() -> (RedisCluster, TestServer) {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = connected(redis_config(RedisMode::Cluster, cluster.seeds())).await;
    let server = TestServer::start(
        index(&[("edge.yaml", RULES)]),
        store,
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
    )
    .await;
    (cluster, server)
}

/// The counter key of `hundred=<value>` in the current hour.
fn key(value: &str) -> String {
    format!("{{edge|hundred={value}}}f3600:{}", T0 - T0 % 3_600)
}

/// EVALSHA calls the cluster's nodes have served, together.
fn evalsha_calls(cluster: &RedisCluster) -> u64 {
    cluster.nodes.iter().map(crate::redis::evalsha_calls).sum()
}

/// One request with a `hundred` descriptor per value.
fn on_each(values: &[String]) -> RateLimitRequest {
    let descriptors: Vec<[(&str, &str); 1]> =
        values.iter().map(|v| [("hundred", v.as_str())]).collect();
    let all: Vec<&[(&str, &str)]> = descriptors.iter().map(|d| &d[..]).collect();
    request("edge", &all)
}

/// A counter's value on node `i` (0 when absent).
fn count_on(cluster: &RedisCluster, i: usize, key: &str) -> u64 {
    cluster.nodes[i]
        .cli(&["GET", key])
        .map(|v| v.trim().parse().unwrap_or(0))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_on_many_hash_tags_is_one_script_call_per_node() {
    let (cluster, server) = setup().await;
    let mut client = server.client().await;
    let values: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    for remaining in [99, 98, 97] {
        let before = evalsha_calls(&cluster);
        let r = ask(&mut client, on_each(&values)).await;
        let calls = evalsha_calls(&cluster) - before;
        assert!(
            r.statuses.iter().all(|s| s.limit_remaining == remaining),
            "{r:?}"
        );
        // 30 hash tags on 3 nodes: one call per node, not one per tag.
        assert!((1..=3).contains(&calls), "{calls} script calls");
    }
    // Every counter on exactly one node, counted three times.
    for value in &values {
        let holder = cluster.holder(&key(value)).unwrap();
        assert_eq!(count_on(&cluster, holder, &key(value)), 3, "{value}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_moved_behind_floodgates_back_count_every_hit_once() {
    let (cluster, server) = setup().await;
    let mut client = server.client().await;
    let values: Vec<String> = (0..40).map(|i| format!("v{i}")).collect();
    ask(&mut client, on_each(&values)).await;

    // Three values on one node, in three different slots: `moved` and
    // `moving` leave it, `stays` keeps each call a multi-slot node call.
    let holder = |v: &String| cluster.holder(&key(v)).unwrap();
    let from = holder(&values[0]);
    let on_from: Vec<&String> = values.iter().filter(|v| holder(v) == from).collect();
    let mut picked: Vec<&String> = Vec::new();
    for v in on_from {
        if picked
            .iter()
            .all(|p| cluster.slot(&key(p)) != cluster.slot(&key(v)))
        {
            picked.push(v);
        }
    }
    let [moved, moving, stays] = picked[..3] else {
        panic!("three slots on node {from}: {picked:?}");
    };
    let to = (from + 1) % cluster.nodes.len();
    let pair = |a: &str, b: &str| request("edge", &[&[("hundred", a)], &[("hundred", b)]]);

    // A finished move floodgate's table does not know yet.
    let moved_slot = cluster.slot(&key(moved));
    cluster.begin_move(moved_slot, from, to);
    cluster.finish_move(moved_slot, to);
    let r = ask(&mut client, pair(moved, stays)).await;
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (98, 98),
        "{r:?}"
    );
    assert_eq!(count_on(&cluster, to, &key(moved)), 2);
    assert_eq!(count_on(&cluster, from, &key(moved)), 0);

    // A move half way: the key is on the new node, the slot still
    // MIGRATING on the old one.
    let moving_slot = cluster.slot(&key(moving));
    cluster.begin_move(moving_slot, from, to);
    // `stays` first: a call that wrote it and then failed on `moving` would
    // count it twice when sent again.
    let r = ask(&mut client, pair(stays, moving)).await;
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (97, 98),
        "{r:?}"
    );
    cluster.finish_move(moving_slot, to);
    // (Read once the move is done: the importing node answers MOVED before.)
    assert_eq!(count_on(&cluster, to, &key(moving)), 2);

    // Afterwards, everything once, on the node that now serves it.
    for _ in 0..3 {
        ask(&mut client, on_each(&values)).await;
    }
    let r = ask(&mut client, on_each(&values)).await;
    let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
    for (value, left) in values.iter().zip(&remaining) {
        let expected = if [moved, moving].contains(&value) {
            94
        } else if value == stays {
            93
        } else {
            95
        };
        assert_eq!(*left, expected, "{value}: {remaining:?}");
        let holder = cluster.holder(&key(value)).unwrap();
        assert_eq!(
            count_on(&cluster, holder, &key(value)),
            u64::from(100 - expected),
            "{value}"
        );
    }
    server.shutdown().await;
}
