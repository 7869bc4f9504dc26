//! Limit tables through the floodgate binary: the API's answers and error
//! paths exactly, the audit trail of a scripted sequence, decisions taking
//! an entry's numbers, and every table kept across a restart
//! (`TABLES_PATH`); without a place to keep them, changes are refused
//! naming the setting; a rule changed by a reload reads its entries again.

use crate::support::floodgate::{Floodgate, http_text};
use crate::support::poll_until_async;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

const RULES: &str = r"
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 60, name: default, table: plans}
";

async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, text) = http_text(addr, method, path, body.as_bytes()).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// The binary's answer for `tenant`: its limit, the limit's unit and the
/// hits remaining.
async fn answer(server: &Floodgate, tenant: &str) -> (u32, i32, u32) {
    server.limit_of("api", ("tenant", tenant)).await
}

/// The limit and remaining hits the binary answers for `tenant`.
async fn decide(server: &Floodgate, tenant: &str) -> (u32, u32) {
    let (limit, _, remaining) = answer(server, tenant).await;
    (limit, remaining)
}

/// The audit trail without its times (read from the real clock), each
/// checked to be RFC 3339 UTC.
fn without_times(mut audit: Value) -> Value {
    for change in audit["changes"].as_array_mut().unwrap() {
        let time = change.as_object_mut().unwrap().remove("time").unwrap();
        assert!(time.as_str().unwrap().ends_with('Z'), "{time}");
    }
    audit
}

#[tokio::test]
async fn the_table_api_answers_exactly_and_keeps_every_table_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tables.log");
    let env = [("TABLES_PATH", log.display().to_string())];
    let server = Floodgate::start_with_rules(RULES, &env).await;
    let at = server.http;
    let entry = "/v1/tables/plans/entries/gold";

    // Error paths: nothing changes.
    assert_eq!(
        call(at, "PUT", entry, "{").await,
        (
            400,
            json!({"error": "bad JSON: EOF while parsing an object at line 1 column 1"})
        )
    );
    assert_eq!(
        call(
            at,
            "PUT",
            entry,
            r#"{"requests_per_unit": -1, "units": "day"}"#
        )
        .await,
        (
            400,
            json!({"error": "invalid table entry", "problems": [
                "entry.requests_per_unit: expected a whole number from 0 to 4294967295",
                "entry.units: unknown field (a window has requests_per_unit, unit, unit_multiplier, burst, name; an entry may instead be {\"unlimited\": true} or {\"rate_limits\": [...]})",
            ]})
        )
    );
    assert_eq!(
        call(
            at,
            "PUT",
            entry,
            r#"{"requests_per_unit": 5, "unit": "fortnight", "burst": 2}"#
        )
        .await,
        (
            400,
            json!({"error": "invalid table entry", "problems": [
                "entry: invalid rate limit unit 'fortnight'",
                "entry: burst is only valid with algorithm gcra",
            ]})
        )
    );
    assert_eq!(
        call(
            at,
            "PUT",
            "/v1/tables/pl%2Fans/entries/gold",
            r#"{"requests_per_unit": 5}"#
        )
        .await,
        (
            400,
            json!({"error": "invalid table name (1 to 64 letters, digits, '_', '-' or '.')"})
        )
    );
    assert_eq!(
        call(at, "PUT", &format!("{entry}?dry_run=maybe"), "{}").await,
        (400, json!({"error": "dry_run: true or false"}))
    );
    assert_eq!(
        call(at, "GET", entry, "").await,
        (404, json!({"error": "no such entry"}))
    );
    assert_eq!(call(at, "GET", "/v1/tables", "").await, (200, json!([])));

    // The scripted sequence.
    let put = call(
        at,
        "PUT",
        entry,
        r#"{"requests_per_unit": 5, "name": "gold"}"#,
    )
    .await;
    assert_eq!(
        put,
        (
            200,
            json!({"table": "plans", "key": "gold", "previous": null,
                   "entry": {"requests_per_unit": 5, "name": "gold"}, "version": 1})
        )
    );
    assert_eq!(decide(&server, "gold").await, (5, 4));
    assert_eq!(decide(&server, "other").await, (60, 59));
    let dry = call(
        at,
        "PUT",
        &format!("{entry}?dry_run=true"),
        r#"{"unlimited": true}"#,
    )
    .await;
    assert_eq!(
        dry,
        (
            200,
            json!({"table": "plans", "key": "gold",
                   "previous": {"requests_per_unit": 5, "name": "gold"},
                   "entry": {"unlimited": true}, "version": 2, "dry_run": true,
                   "preview": [{"rule": "api.tenant", "key": "gold", "windows": []}]})
        )
    );
    // The preview: gold's window (one hit counted) under each new limit.
    for (limit, remaining, over) in [(2, 1, false), (0, 0, true)] {
        let body = format!("{{\"requests_per_unit\": {limit}}}");
        let (status, dry) = call(at, "PUT", &format!("{entry}?dry_run=true"), &body).await;
        assert_eq!(status, 200);
        assert_eq!(
            dry["preview"],
            json!([{"rule": "api.tenant", "key": "gold", "windows": [
                {"requests_per_unit": limit, "count": 1, "remaining": remaining, "over_limit": over}
            ]}])
        );
    }
    assert_eq!(
        call(at, "GET", entry, "").await,
        (
            200,
            json!({"entry": {"requests_per_unit": 5, "name": "gold"}, "version": 1})
        )
    );
    let import = "{\"key\": \"a\", \"entry\": {\"requests_per_unit\": 1}}\n{\"key\": \"b\", \"entry\": {\"requests_per_unit\": 1, \"unit\": \"eon\"}}\n";
    assert_eq!(
        call(at, "POST", "/v1/tables/plans/import", import).await,
        (
            400,
            json!({"error": "invalid import line 2", "line": 2,
                   "problems": ["entry: invalid rate limit unit 'eon'"]})
        )
    );
    let import = "{\"key\": \"a\", \"entry\": {\"requests_per_unit\": 1}}\n\n{\"key\": \"b\", \"entry\": {\"unlimited\": true}}\n";
    assert_eq!(
        call(at, "POST", "/v1/tables/plans/import", import).await,
        (200, json!({"table": "plans", "imported": 2, "version": 2}))
    );
    assert_eq!(
        call(at, "DELETE", "/v1/tables/plans/entries/a", "").await,
        (
            200,
            json!({"table": "plans", "key": "a", "previous": {"requests_per_unit": 1},
                   "entry": null, "version": 3})
        )
    );
    assert_eq!(
        call(at, "DELETE", "/v1/tables/plans/entries/a", "").await,
        (404, json!({"error": "no such entry"}))
    );

    // Pages and their cursors.
    assert_eq!(
        call(at, "GET", "/v1/tables/plans?limit=1", "").await,
        (
            200,
            json!({"table": "plans", "entries": [{"key": "b", "entry": {"unlimited": true}}],
                   "next": "b"})
        )
    );
    assert_eq!(
        call(at, "GET", "/v1/tables/plans?after=b&limit=1", "").await,
        (
            200,
            json!({"table": "plans", "entries": [{"key": "gold", "entry": {"requests_per_unit": 5, "name": "gold"}}],
                   "next": null})
        )
    );
    assert_eq!(
        call(at, "GET", "/v1/tables/plans?after=zzz", "").await,
        (200, json!({"table": "plans", "entries": [], "next": null}))
    );
    for bad in ["limit=0", "limit=1001", "limit=x"] {
        assert_eq!(
            call(at, "GET", &format!("/v1/tables/plans?{bad}"), "").await,
            (
                400,
                json!({"error": "limit: a whole number from 1 to 1000"})
            )
        );
    }
    assert_eq!(
        call(at, "GET", "/v1/tables/plans?page=2", "").await,
        (
            400,
            json!({"error": "unknown query parameter 'page' (allowed: after, limit)"})
        )
    );
    assert_eq!(
        call(at, "GET", "/v1/tables/nothing", "").await,
        (404, json!({"error": "no such table"}))
    );
    let tables = json!([{"table": "plans", "entries": 2, "version": 3}]);
    assert_eq!(
        call(at, "GET", "/v1/tables", "").await,
        (200, tables.clone())
    );

    // The audit trail, newest first, paged.
    let (status, audit) = call(at, "GET", "/v1/audit?table=plans&limit=10", "").await;
    assert_eq!(status, 200);
    let who = "trusted:127.0.0.1";
    let expected = json!({"changes": [
        {"who": who, "action": "delete", "table": "plans", "key": "a",
         "previous": {"requests_per_unit": 1}, "entry": null, "version": 3},
        {"who": who, "action": "import", "table": "plans", "key": "b",
         "previous": null, "entry": {"unlimited": true}, "version": 2},
        {"who": who, "action": "import", "table": "plans", "key": "a",
         "previous": null, "entry": {"requests_per_unit": 1}, "version": 2},
        {"who": who, "action": "put", "table": "plans", "key": "gold",
         "previous": null, "entry": {"requests_per_unit": 5, "name": "gold"}, "version": 1},
    ], "next": null});
    assert_eq!(without_times(audit.clone()), expected);
    let (_, first) = call(at, "GET", "/v1/audit?key=a&limit=1", "").await;
    assert_eq!(first["changes"][0]["action"], "delete");
    let next = first["next"].as_u64().unwrap();
    let (_, older) = call(
        at,
        "GET",
        &format!("/v1/audit?key=a&limit=1&after={next}"),
        "",
    )
    .await;
    assert_eq!(
        (older["changes"][0]["action"].clone(), older["next"].clone()),
        (json!("import"), Value::Null)
    );
    let (_, metrics) = http_text(at, "GET", "/metrics", b"").await;
    for line in [
        "ratelimit_table_entries{table=\"plans\"} 2\n",
        "ratelimit_table_changes_total{table=\"plans\",action=\"put\"} 1\n",
        "ratelimit_table_changes_total{table=\"plans\",action=\"import\"} 2\n",
        "ratelimit_table_changes_total{table=\"plans\",action=\"delete\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line}");
    }
    server.stop().await;

    // A restart reads every table and the trail back from TABLES_PATH.
    let server = Floodgate::start_with_rules(RULES, &env).await;
    let at = server.http;
    assert_eq!(call(at, "GET", "/v1/tables", "").await, (200, tables));
    let (_, again) = call(at, "GET", "/v1/audit?table=plans&limit=10", "").await;
    assert_eq!(again, audit);
    assert_eq!(decide(&server, "gold").await, (5, 4));
    server.stop().await;
}

/// `PUT` of `{"requests_per_unit": 5}` at `plans/gold`, with `query`.
async fn put_gold(addr: SocketAddr, query: &str) -> (u16, Value) {
    let path = format!("/v1/tables/plans/entries/gold{query}");
    call(addr, "PUT", &path, r#"{"requests_per_unit": 5}"#).await
}

#[tokio::test]
async fn without_a_tables_path_changes_are_refused_naming_the_setting() {
    let server = Floodgate::start_with_rules(RULES, &[]).await;
    assert_eq!(
        put_gold(server.http, "").await,
        (
            409,
            json!({"error": "tables are kept nowhere: set TABLES_PATH (--tables-path) or MEMORY_STORE_SNAPSHOT_PATH to change them"})
        )
    );
    // A dry run still checks the entry against the rules.
    assert_eq!(put_gold(server.http, "?dry_run=true").await.0, 200);
    assert_eq!(decide(&server, "gold").await, (60, 59));
    server.stop().await;
}

#[tokio::test]
async fn a_reloaded_rule_reads_the_entries_put_before_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        (
            "TABLES_PATH",
            dir.path().join("tables.log").display().to_string(),
        ),
        ("CONFIG_POLL_INTERVAL", "50ms".to_owned()),
    ];
    let server = Floodgate::start_with_rules(RULES, &env).await;
    assert_eq!(put_gold(server.http, "").await.0, 200);
    assert_eq!(decide(&server, "gold").await, (5, 4));
    // The rule's window and default change: the entry is laid over the
    // new rule (its own limit, the new window), off the request path.
    let changed = RULES.replace(
        "unit: day, requests_per_unit: 60",
        "unit: hour, requests_per_unit: 70",
    );
    std::fs::write(server.rules_dir().join("edge.yaml"), changed).unwrap();
    // Once reloaded, the gold tenant gets the entry's limit on the new
    // window (an hour); between the reload and the entries' refresh it may
    // briefly get the new rule's own (70).
    let running = &server;
    let limit_and_unit = |tenant: &'static str| async move {
        let (limit, unit, _) = answer(running, tenant).await;
        (limit, unit)
    };
    let hour = 3;
    let refreshed = poll_until_async(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async move { (limit_and_unit("gold").await == (5, hour)).then_some(true) },
    )
    .await;
    assert!(refreshed, "the entry was not laid over the reloaded rule");
    assert_eq!(limit_and_unit("other").await, (70, hour));
    server.stop().await;
}

/// The access layer in front of the table API: from 127.0.0.2, outside a
/// trusted 127.0.0.1/32, reads need a token and changes its `write` scope;
/// from inside, changes need none. The audit trail names each writer.
#[tokio::test]
async fn changes_need_the_write_scope_or_a_trusted_network() {
    use crate::support::http::send_from;
    use std::net::{IpAddr, Ipv4Addr};
    const OUTSIDE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    const INSIDE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    const READER: &str = "reader-token-0123456789";
    const WRITER: &str = "writer-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("ro:{READER}\nbilling:{WRITER}:write\n")).unwrap();
    let env = [
        (
            "TABLES_PATH",
            dir.path().join("t.log").display().to_string(),
        ),
        ("ADMIN_TRUSTED_NETWORKS", "127.0.0.1/32".to_owned()),
        ("ADMIN_TOKENS_FILE", tokens.display().to_string()),
    ];
    let server = Floodgate::start_with_rules(RULES, &env).await;
    let at = server.http;
    let entry = "/v1/tables/plans/entries/gold";
    let body = Some(r#"{"requests_per_unit": 5}"#);
    let send = |from: IpAddr, method: &'static str, path: &'static str, token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        async move {
            let headers: Vec<(&str, &str)> =
                auth.iter().map(|a| ("Authorization", a.as_str())).collect();
            let body = (method == "PUT").then_some(body).flatten();
            let answer = send_from(Some(from), at, method, path, &headers, body).await;
            (answer.status, answer.body)
        }
    };

    // No token, or a wrong one: 401 for reads and changes alike.
    for token in [None, Some("not-a-token-at-all-0000")] {
        assert_eq!(send(OUTSIDE, "GET", "/v1/tables", token).await.0, 401);
        assert_eq!(send(OUTSIDE, "PUT", entry, token).await.0, 401);
    }
    // A read token reads, and is refused a change, which changes nothing.
    assert_eq!(
        send(OUTSIDE, "GET", "/v1/tables", Some(READER)).await.0,
        200
    );
    assert_eq!(
        send(OUTSIDE, "PUT", entry, Some(READER)).await,
        (
            403,
            r#"{"error":"changing tables needs a token with the write scope or a trusted network"}"#
                .to_owned()
        )
    );
    assert_eq!(send(OUTSIDE, "GET", entry, Some(READER)).await.0, 404);
    // The write scope changes; a trusted client changes without a token.
    assert_eq!(send(OUTSIDE, "PUT", entry, Some(WRITER)).await.0, 200);
    assert_eq!(send(INSIDE, "DELETE", entry, None).await.0, 200);
    let (status, audit) = send(OUTSIDE, "GET", "/v1/audit", Some(READER)).await;
    assert_eq!(status, 200);
    let audit: Value = serde_json::from_str(&audit).unwrap();
    let who: Vec<(&str, &str)> = audit["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["who"].as_str().unwrap(), c["action"].as_str().unwrap()))
        .collect();
    assert_eq!(who, [("trusted:127.0.0.1", "delete"), ("billing", "put")]);
    let metrics = http_text(server.http, "GET", "/metrics", b"").await.1;
    assert!(
        metrics.contains(
            r#"ratelimit_admin_requests_total{view="tables",result="unauthenticated"} 4"#
        ),
        "{metrics}"
    );
    server.stop().await;
}
