//! Limit tables kept in Redis, through the floodgate binary: two instances
//! on one Redis (and on a Cluster) see each other's changes within a
//! second and answer the same audit trail; an instance killed and started
//! again keeps every table; Redis unreachable refuses changes (503) while
//! decisions keep the last tables; Redis killed during an import leaves
//! the table as it was or with the whole import, never part of it.

use crate::support::floodgate::{Floodgate, http_text};
use crate::support::redis::{RedisServer, shared_cluster};
use crate::support::wait_until;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const RULES: &str = r"
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 60, table: plans}
";

async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, text) = http_text(addr, method, path, body.as_bytes()).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// The limit the binary answers for `tenant` (one hit counted).
async fn limit_of(server: &Floodgate, tenant: &str) -> u32 {
    server.limit_of("api", ("tenant", tenant)).await.0
}

/// How many entries `plans` holds on `server`, and its version.
async fn plans(server: &Floodgate) -> (u64, u64) {
    let (status, list) = call(server.http, "GET", "/v1/tables", "").await;
    assert_eq!(status, 200, "{list}");
    list.as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "plans")
        .map_or((0, 0), |t| {
            (
                t["entries"].as_u64().unwrap(),
                t["version"].as_u64().unwrap(),
            )
        })
}

/// Waits (at most `within`) until `server` answers `entry` for `gold`
/// (`None`: no entry), and returns how long that took.
async fn until_seen(server: &Floodgate, entry: Option<u32>, within: Duration) -> Duration {
    let started = Instant::now();
    wait_until("the other instance sees the change", within, || async {
        let (status, body) = call(server.http, "GET", "/v1/tables/plans/entries/gold", "").await;
        match entry {
            Some(n) => status == 200 && body["entry"]["requests_per_unit"] == n,
            None => status == 404,
        }
    })
    .await;
    started.elapsed()
}

/// `n` import lines `t0..tn` with limits 1..n.
fn import_body(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"key\":\"t{i}\",\"entry\":{{\"requests_per_unit\":{}}}}}\n",
                i + 1
            )
        })
        .collect()
}

/// Two instances on `env`'s Redis: a change on either is used by the other
/// within 1 s, both answer the same audit trail, and an instance killed and
/// started again reads every table back.
async fn two_instances_share_tables(env: &[(&str, String)]) {
    let a = Floodgate::start_with_rules(RULES, env).await;
    let b = Floodgate::start_with_rules(RULES, env).await;
    for server in [&a, &b] {
        wait_until("tables loaded", Duration::from_secs(10), || async {
            call(server.http, "GET", "/v1/tables", "").await.0 == 200
        })
        .await;
    }
    let (status, put) = call(
        a.http,
        "PUT",
        "/v1/tables/plans/entries/gold",
        r#"{"requests_per_unit": 5}"#,
    )
    .await;
    assert_eq!(
        (status, put),
        (
            200,
            json!({"table": "plans", "key": "gold", "previous": null,
                   "entry": {"requests_per_unit": 5}, "version": 1})
        )
    );
    let took = until_seen(&b, Some(5), Duration::from_secs(5)).await;
    assert!(took <= Duration::from_secs(1), "seen after {took:?}");
    assert_eq!(limit_of(&b, "gold").await, 5);
    assert_eq!(limit_of(&a, "gold").await, 5);

    // A change on b, seen by a; a delete of a missing key refused by Redis.
    let (status, _) = call(
        b.http,
        "PUT",
        "/v1/tables/plans/entries/gold",
        r#"{"requests_per_unit": 7}"#,
    )
    .await;
    assert_eq!(status, 200);
    until_seen(&a, Some(7), Duration::from_secs(5)).await;
    assert_eq!(
        call(a.http, "DELETE", "/v1/tables/plans/entries/nobody", "")
            .await
            .0,
        404
    );
    let (status, imported) =
        call(a.http, "POST", "/v1/tables/plans/import", &import_body(500)).await;
    assert_eq!(status, 200, "{imported}");
    assert_eq!(imported["imported"], 500);
    assert_eq!(plans(&a).await, (501, 3));
    wait_until("b has the import", Duration::from_secs(5), || async {
        plans(&b).await == (501, 3)
    })
    .await;
    assert_eq!(limit_of(&b, "t41").await, 42);
    let audit = "/v1/audit?table=plans&limit=3";
    let (_, on_a) = call(a.http, "GET", audit, "").await;
    let (_, on_b) = call(b.http, "GET", audit, "").await;
    assert_eq!(on_a, on_b, "both instances answer the same trail");
    assert_eq!(on_a["changes"][0]["action"], "import");
    let metrics = http_text(b.http, "GET", "/metrics", b"").await.1;
    for line in [
        "ratelimit_table_entries{table=\"plans\"} 501",
        "ratelimit_table_changes_total{table=\"plans\",action=\"import\"} 500",
        "ratelimit_table_lag_seconds ",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // a killed (SIGKILL) and started again: every table read back.
    drop(a);
    let a = Floodgate::start_with_rules(RULES, env).await;
    wait_until(
        "the restarted instance loads",
        Duration::from_secs(10),
        || async {
            call(a.http, "GET", "/v1/tables", "").await.0 == 200 && plans(&a).await == (501, 3)
        },
    )
    .await;
    assert_eq!(limit_of(&a, "gold").await, 7);
    assert_eq!(call(a.http, "GET", audit, "").await.1, on_b);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn two_instances_on_redis_share_tables_and_keep_them_across_a_kill() {
    let redis = RedisServer::start();
    let env = [
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_URL", redis.addr()),
    ];
    two_instances_share_tables(&env).await;
}

#[tokio::test]
async fn two_instances_on_a_cluster_share_tables() {
    let cluster = shared_cluster();
    let env = [
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_TYPE", "cluster".to_owned()),
        ("REDIS_URL", cluster.seeds()),
        // The shared Cluster serves other tests: tables of their own.
        (
            "CACHE_KEY_PREFIX",
            format!("tables{}_", rand::random::<u32>()),
        ),
    ];
    two_instances_share_tables(&env).await;
}

#[tokio::test]
async fn redis_down_refuses_changes_and_a_killed_import_is_whole_or_absent() {
    // Every write on disk before Redis answers, as a deployment keeping
    // tables in Redis should run it.
    let durable = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut redis = RedisServer::start_with(&durable);
    let env = [
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_URL", redis.addr()),
        ("FAILURE_MODE", "allow".to_owned()),
    ];
    let server = Floodgate::start_with_rules(RULES, &env).await;
    wait_until("tables loaded", Duration::from_secs(10), || async {
        call(server.http, "GET", "/v1/tables", "").await.0 == 200
    })
    .await;
    let put = |n: u32| {
        let body = format!("{{\"requests_per_unit\": {n}}}");
        async move { call(server.http, "PUT", "/v1/tables/plans/entries/gold", &body).await }
    };
    assert_eq!(put(5).await.0, 200);
    assert_eq!(plans(&server).await, (1, 1));

    // Redis unreachable: 503 naming Redis, nothing changed; decisions keep
    // the entry (the store's failure mode answers, with the entry's limit).
    redis.stop();
    let (status, body) = put(9).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("Redis"), "{body}");
    assert_eq!(limit_of(&server, "gold").await, 5);
    redis.restart(&durable);
    wait_until("Redis found again", Duration::from_secs(20), || async {
        put(6).await.0 == 200
    })
    .await;
    assert_eq!(plans(&server).await, (1, 2));

    // An import of 100,000 entries with Redis killed while it runs: after
    // Redis restarts from its append-only file, the table holds the one
    // entry or all 100,001, as the answer says.
    let body = import_body(100_000);
    let importing = {
        let at = server.http;
        tokio::spawn(async move { call(at, "POST", "/v1/tables/plans/import", &body).await })
    };
    // Killed while Redis runs the import's script: a PING unanswered for
    // 50 ms means Redis is busy with it (it runs alone).
    let busy = busy_soon(&redis.addr(), &importing).await;
    redis.stop();
    let (status, answer) = importing.await.unwrap();
    assert!(busy, "Redis was killed while it ran the import");
    redis.restart(&durable);
    let want = if status == 200 {
        assert_eq!(answer["imported"], 100_000);
        (100_001, 3)
    } else {
        assert_eq!(status, 503, "{answer}");
        (1, 2)
    };
    let raw = redis.cli(&["HLEN", "{floodgate-tables}:t:plans"]).unwrap();
    assert_eq!(
        raw.trim().parse::<u64>().unwrap(),
        want.0,
        "entries in Redis"
    );
    wait_until(
        "the instance matches Redis",
        Duration::from_secs(20),
        || async { plans(&server).await == want },
    )
    .await;
    server.stop().await;
}

/// Waits (at most 30 s) until Redis at `addr` leaves a PING unanswered for
/// 50 ms, or `task` ends; whether Redis was found busy.
async fn busy_soon<T>(addr: &str, task: &tokio::task::JoinHandle<T>) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) && !task.is_finished() {
        conn.write_all(b"PING\r\n").await.unwrap();
        let mut pong = [0_u8; 7];
        match tokio::time::timeout(Duration::from_millis(50), conn.read_exact(&mut pong)).await {
            Ok(read) => {
                read.unwrap();
            }
            Err(_) => return true,
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}
