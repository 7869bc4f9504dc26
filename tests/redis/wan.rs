//! The simulated WAN of `support::wan` in front of a real redis-server,
//! checked with the `redis` crate: a round trip costs both one-way delays, a
//! pipeline crosses whole rather than one chunk per delay, and a partition
//! fails commands and new connections until it heals.

use crate::support::redis::RedisServer;
use crate::support::wan::{DEFAULT_ONE_WAY, WanProxy};
use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, RedisResult};
use std::time::{Duration, Instant};

/// The client's connect and response timeouts: many round trips long.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

async fn connect(proxy: &WanProxy) -> RedisResult<MultiplexedConnection> {
    let client = Client::open(format!("redis://{}", proxy.url()))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CLIENT_TIMEOUT))
        .set_response_timeout(Some(CLIENT_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

async fn ping(conn: &mut MultiplexedConnection) -> RedisResult<String> {
    ::redis::cmd("PING").query_async(conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_costs_both_one_way_delays() {
    let redis = RedisServer::start();
    let proxy = WanProxy::start(&redis.addr(), DEFAULT_ONE_WAY).await;
    let mut conn = connect(&proxy).await.unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
        let took = started.elapsed();
        assert!(took >= 2 * DEFAULT_ONE_WAY, "PING took {took:?}");
    }
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_of_200_sets_crosses_whole_and_reads_back() {
    let redis = RedisServer::start();
    let proxy = WanProxy::start(&redis.addr(), DEFAULT_ONE_WAY).await;
    let mut conn = connect(&proxy).await.unwrap();
    let mut pipe = ::redis::pipe();
    for i in 0..200 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    let started = Instant::now();
    let () = pipe.query_async(&mut conn).await.unwrap();
    assert!(started.elapsed() >= 2 * DEFAULT_ONE_WAY);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let values: Vec<Option<u32>> = ::redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    let expected: Vec<Option<u32>> = (0..200).map(Some).collect();
    assert_eq!(values, expected);
    // And on the backend itself, not only through the proxy.
    assert_eq!(redis.cli(&["GET", "k199"]).unwrap().trim(), "199");
}

/// A connection made during a partition fails: at connect, or at its first
/// command.
async fn fails_to_connect(proxy: &WanProxy) -> bool {
    match connect(proxy).await {
        Err(_) => true,
        Ok(mut conn) => ping(&mut conn).await.is_err(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_fails_commands_and_connections_until_healed() {
    let redis = RedisServer::start();
    let proxy = WanProxy::start(&redis.addr(), DEFAULT_ONE_WAY).await;
    let mut conn = connect(&proxy).await.unwrap();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");

    proxy.partition();
    // Fails by the client's response timeout at the latest: the open
    // connection was dropped.
    assert!(ping(&mut conn).await.is_err());
    assert!(fails_to_connect(&proxy).await);
    assert!(proxy.refused() >= 1);

    proxy.heal();
    let mut fresh = connect(&proxy).await.unwrap();
    assert_eq!(ping(&mut fresh).await.unwrap(), "PONG");
    assert_eq!(proxy.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_delay_applies_to_later_round_trips() {
    let redis = RedisServer::start();
    let proxy = WanProxy::start(&redis.addr(), Duration::ZERO).await;
    let mut conn = connect(&proxy).await.unwrap();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    proxy.set_delay(Duration::from_millis(100));
    let started = Instant::now();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(200), "PING took {took:?}");
}
