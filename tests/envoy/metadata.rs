//! `RESPONSE_DYNAMIC_METADATA`: the `metadata` of matched rules comes back
//! in `dynamic_metadata`, merged as the reference merges it (descriptors
//! that passed only, first value wins, maps merged key by key), over gRPC,
//! over `/json`, and through a real Envoy into its access log.

use crate::support::envoy::Envoy;
use crate::support::grpc::{TestServer, ask, index, request};
use crate::support::http::post_json;
use crate::support::poll_until_async;
use floodgate::LimiterOptions;
use floodgate::{ManualClock, SystemClock, UnixMillis};
use floodgate::{MemoryStore, StoreKind};
use prost_types::value::Kind;
use prost_types::{Struct, Value};
use std::sync::Arc;
use std::time::Duration;

const RULES: &str = r"
domain: edge
descriptors:
  - key: first
    metadata: {route: first, nested: {x: 1, deep: {p: a}}, list: [1, 2]}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: second
    metadata: {route: second, nested: {x: 2, y: two, deep: {q: b}}, only_second: true}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: over
    metadata: {route: over, only_over: 1}
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    metadata: {only_free: 1}
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    metadata: {only_shadow: 1}
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: replaced
    metadata: {only_replaced: 1}
    rate_limit: {unit: minute, requests_per_unit: 10, name: old}
  - key: replacer
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces: [{name: old}]
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    metadata: {kept: detailed}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: valued
    value_to_metric: true
    metadata: {kept: valued}
    rate_limit: {unit: minute, requests_per_unit: 10}
";

async fn start(dynamic_metadata: bool) -> TestServer {
    TestServer::start(
        index(&[("edge.yaml", RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_080))),
        LimiterOptions {
            dynamic_metadata,
            ..LimiterOptions::default()
        },
    )
    .await
}

fn field<'a>(s: &'a Struct, key: &str) -> Option<&'a Kind> {
    s.fields.get(key).and_then(|v| v.kind.as_ref())
}

fn str_value(text: &str) -> Kind {
    Kind::StringValue(text.to_owned())
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

#[tokio::test]
async fn merges_the_metadata_of_passed_descriptors_first_value_winning() {
    let server = start(true).await;
    let mut client = server.client().await;
    let all: &[&[(&str, &str)]] = &[
        &[("over", "x")],
        &[("first", "a")],
        &[("free", "x")],
        &[("second", "b")],
        &[("shadow", "x")],
        &[("replaced", "x")],
        &[("replacer", "x")],
        &[("unknown", "x")],
    ];
    let response = ask(&mut client, request("edge", all)).await;
    let dm = response.dynamic_metadata.expect("dynamic metadata is on");
    assert_eq!(field(&dm, "domain"), Some(&str_value("edge")));
    let Some(Kind::ListValue(descriptors)) = field(&dm, "descriptors") else {
        panic!("descriptors: {dm:?}")
    };
    assert_eq!(descriptors.values.len(), all.len());
    assert!(
        field(&dm, "hitsAddend").is_none(),
        "request hits_addend is 0"
    );

    let Some(Kind::StructValue(merged)) = field(&dm, "metadata") else {
        panic!("metadata: {dm:?}")
    };
    // Over the limit, unlimited and replaced descriptors add nothing; a
    // shadow-mode descriptor passed (its status is OK).
    let mut keys: Vec<&str> = merged.fields.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["list", "nested", "only_second", "only_shadow", "route"]
    );
    // "over" comes first in the request but did not pass.
    assert_eq!(field(merged, "route"), Some(&str_value("first")));
    let Some(Kind::ListValue(list)) = field(merged, "list") else {
        panic!("list")
    };
    assert_eq!(list.values, vec![number(1.0), number(2.0)]);
    let Some(Kind::StructValue(nested)) = field(merged, "nested") else {
        panic!("nested")
    };
    assert_eq!(field(nested, "x"), Some(&Kind::NumberValue(1.0)));
    assert_eq!(field(nested, "y"), Some(&str_value("two")));
    let Some(Kind::StructValue(deep)) = field(nested, "deep") else {
        panic!("deep")
    };
    assert_eq!(field(deep, "p"), Some(&str_value("a")));
    assert_eq!(field(deep, "q"), Some(&str_value("b")));

    // The rules were not changed by the merge: "second" alone still says
    // x = 2 and has no "p".
    let alone = ask(&mut client, request("edge", &[&[("second", "b")]])).await;
    let dm = alone.dynamic_metadata.unwrap();
    let Some(Kind::StructValue(merged)) = field(&dm, "metadata") else {
        panic!("metadata")
    };
    let Some(Kind::StructValue(nested)) = field(merged, "nested") else {
        panic!("nested")
    };
    assert_eq!(field(nested, "x"), Some(&Kind::NumberValue(2.0)));
    let Some(Kind::StructValue(deep)) = field(nested, "deep") else {
        panic!("deep")
    };
    assert!(field(deep, "p").is_none(), "{deep:?}");

    // Rules without metadata: the request is still described, with no
    // `metadata` key.
    let plain = ask(&mut client, request("edge", &[&[("plain", "x")]])).await;
    let dm = plain.dynamic_metadata.unwrap();
    assert!(field(&dm, "metadata").is_none(), "{dm:?}");
    assert_eq!(field(&dm, "domain"), Some(&str_value("edge")));

    // Rules whose stats key uses runtime values keep their metadata.
    for key in ["detailed", "valued"] {
        let r = ask(&mut client, request("edge", &[&[(key, "v")]])).await;
        let dm = r.dynamic_metadata.unwrap();
        let Some(Kind::StructValue(merged)) = field(&dm, "metadata") else {
            panic!("{key}: {dm:?}")
        };
        assert_eq!(field(merged, "kept"), Some(&str_value(key)));
    }
    server.shutdown().await;
}

#[tokio::test]
async fn off_by_default_and_shown_in_json_when_on() {
    let off = start(false).await;
    let mut client = off.client().await;
    let response = ask(&mut client, request("edge", &[&[("first", "a")]])).await;
    assert_eq!(response.dynamic_metadata, None);
    let json = post_json(
        off.http_addr,
        "/json",
        r#"{"domain":"edge","descriptors":[{"entries":[{"key":"first","value":"a"}]}]}"#,
    )
    .await;
    assert!(!json.body.contains("dynamicMetadata"), "{}", json.body);
    off.shutdown().await;

    let on = start(true).await;
    let json = post_json(
        on.http_addr,
        "/json",
        r#"{"domain":"edge","hitsAddend":2,"descriptors":[{"entries":[{"key":"first","value":"a"}]}]}"#,
    )
    .await;
    assert_eq!(json.status, 200, "{}", json.body);
    let body: serde_json::Value = serde_json::from_str(&json.body).unwrap();
    assert_eq!(
        body["dynamicMetadata"],
        serde_json::json!({
            "domain": "edge",
            "descriptors": [{"entries": ["first=a"]}],
            "hitsAddend": 2.0,
            "metadata": {"route": "first", "nested": {"x": 1.0, "deep": {"p": "a"}}, "list": [1.0, 2.0]},
        })
    );
    on.shutdown().await;
}

/// Rules for Envoy's `edge` listener (e2e/envoy.yaml sends `user`,
/// `remote_address` and `generic_key` descriptors).
const ENVOY_RULES: &str = r"
domain: edge
descriptors:
  - key: user
    metadata: {service: user-pool, tier: gold}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: generic_key
    value: edge
    metadata: {service: shared-pool, listener: edge}
    rate_limit: {unit: second, requests_per_unit: 10000}
";

#[tokio::test]
async fn envoy_logs_the_metadata_of_the_matched_rules() {
    let server = TestServer::start(
        index(&[("edge.yaml", ENVOY_RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(SystemClock),
        LimiterOptions {
            dynamic_metadata: true,
            ..LimiterOptions::default()
        },
    )
    .await;
    let envoy = Envoy::start(server.grpc_addr.port()).await;
    // A fresh user per run: the limit is 1 per minute, so the second request
    // of the same user is over it whatever the minute.
    let user = format!("meta-{}", std::process::id());
    let first = envoy.get("/", &[("x-user-id", &user)]).await;
    assert_eq!(first.status, 200, "envoy log:\n{}", envoy.log());
    let second = envoy.get("/", &[("x-user-id", &user)]).await;
    assert_eq!(second.status, 429, "envoy log:\n{}", envoy.log());

    // Envoy flushes its access log about once a second.
    let lines = || -> Vec<String> {
        envoy
            .access_log()
            .lines()
            .filter(|line| line.contains(&user))
            .map(str::to_owned)
            .collect()
    };
    let logged = poll_until_async(Duration::from_secs(15), Duration::from_millis(50), || {
        let done = lines().len() >= 2;
        async move { done.then_some(true) }
    })
    .await;
    assert!(logged, "no access log lines; envoy log:\n{}", envoy.log());
    let lines = lines();

    let metadata = |line: &str| -> serde_json::Value {
        let json = line
            .split_once(' ')
            .and_then(|(_, rest)| rest.split_once(' '))
            .map_or("", |(_, json)| json);
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let allowed = lines.iter().find(|l| l.starts_with("200 ")).unwrap();
    let denied = lines.iter().find(|l| l.starts_with("429 ")).unwrap();
    let allowed = metadata(allowed);
    assert_eq!(allowed["domain"], "edge");
    assert_eq!(
        allowed["metadata"],
        serde_json::json!({"service": "user-pool", "tier": "gold", "listener": "edge"}),
        "user passed first, so its service wins: {allowed}"
    );
    assert_eq!(
        allowed["descriptors"][0]["entries"][0],
        format!("user={user}")
    );
    // The user descriptor is over its limit: only generic_key's metadata.
    let denied = metadata(denied);
    assert_eq!(
        denied["metadata"],
        serde_json::json!({"service": "shared-pool", "listener": "edge"}),
        "{denied}"
    );
    drop(envoy);
    server.shutdown().await;
}
