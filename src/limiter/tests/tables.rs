//! The tables stage: a rule's limit table entry replaces its numbers for
//! the value it keys, else the rule's own limits stand.

use super::*;
use crate::config::{TableEntry, Tables, Writing};
use serde_json::json;

const TABLED: &str = r"
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3, name: default, table: plans}
  - key: route
    descriptors:
      - key: plan
        rate_limit: {unit: minute, requests_per_unit: 1, table: routes, table_key: plan}
";

fn tabled() -> (Limiter<StoreKind>, Arc<Tables>, std::path::PathBuf) {
    let index = load_sources(
        &[Source {
            name: "d.yaml".into(),
            text: TABLED.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "floodgate-limiter-tables-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let tables = Arc::new(Tables::open(&dir.join("tables.log")).unwrap());
    let limiter = Limiter::new(
        Arc::new(arc_swap::ArcSwap::from_pointee(index)),
        StoreKind::Memory(MemoryStore::new()),
        Arc::new(ManualClock::new(UnixMillis::from_secs(T0))),
        LimiterOptions::default(),
    )
    .with_tables(Arc::clone(&tables));
    (limiter, tables, dir)
}

fn put(l: &Limiter<StoreKind>, table: &str, key: &str, entry: &serde_json::Value) {
    let rules = l.rules().load_full();
    let writing = Writing {
        rules: &rules,
        metrics: l.metrics(),
        who: "test",
        time: "t",
        dry_run: false,
    };
    l.tables()
        .put(&writing, table, key, TableEntry::from_json(entry).unwrap())
        .unwrap();
}

/// (code, limit, name, remaining) of the first status.
fn answer(r: &Response) -> (Code, Option<u32>, Option<String>, u32) {
    let s = &r.statuses[0];
    (
        s.code,
        s.current_limit.as_ref().map(|c| c.requests_per_unit),
        s.current_limit
            .as_ref()
            .and_then(|c| c.name.as_deref().map(str::to_owned)),
        s.limit_remaining,
    )
}

#[tokio::test]
async fn an_entry_replaces_the_rules_numbers_for_its_value_only() {
    let (l, _tables, dir) = tabled();
    put(
        &l,
        "plans",
        "gold",
        &json!({"requests_per_unit": 5, "name": "gold"}),
    );
    put(&l, "plans", "free", &json!({"unlimited": true}));
    let gold = ask(&l, vec![one("tenant", "gold")]).await;
    assert_eq!(answer(&gold), (Code::Ok, Some(5), Some("gold".into()), 4));
    let other = ask(&l, vec![one("tenant", "other")]).await;
    assert_eq!(
        answer(&other),
        (Code::Ok, Some(3), Some("default".into()), 2)
    );
    let free = ask(&l, vec![one("tenant", "free")]).await;
    assert_eq!(free.statuses[0], Status::UNLIMITED);
    // A change applies to the next request, on the same counter.
    put(&l, "plans", "gold", &json!({"requests_per_unit": 1}));
    let gold = ask(&l, vec![one("tenant", "gold")]).await;
    assert_eq!(
        answer(&gold),
        (Code::OverLimit, Some(1), Some("default".into()), 0)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn table_key_names_another_entry_and_explain_shows_what_was_read() {
    let (l, _tables, dir) = tabled();
    put(&l, "routes", "pro", &json!({"requests_per_unit": 10}));
    let d = Descriptor::from_pairs([("route", "/a"), ("plan", "pro")]);
    let r = ask(&l, vec![d.clone()]).await;
    assert_eq!(answer(&r), (Code::Ok, Some(10), None, 9));
    let explained = l.explain(&request(vec![d])).await.unwrap();
    assert_eq!(
        explained.descriptors[0].table,
        Some(TableRead {
            table: "routes".into(),
            key: "plan".into(),
            value: Some("pro".into()),
            entry: Some(TableEntry::from_json(&json!({"requests_per_unit": 10})).unwrap()),
        })
    );
    let basic = Descriptor::from_pairs([("route", "/a"), ("plan", "basic")]);
    let explained = l.explain(&request(vec![basic])).await.unwrap();
    let read = explained.descriptors[0].table.clone().unwrap();
    assert_eq!((read.value.as_deref(), read.entry), (Some("basic"), None));
    assert_eq!(
        explained.descriptors[0].windows[0].limit.requests_per_unit,
        1
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_rule_changed_after_a_put_reads_its_entries_once_refreshed() {
    let (l, tables, dir) = tabled();
    put(&l, "plans", "gold", &json!({"requests_per_unit": 5}));
    let changed = TABLED.replace(
        "requests_per_unit: 3, name: default",
        "requests_per_unit: 4",
    );
    let index = load_sources(
        &[Source {
            name: "d.yaml".into(),
            text: changed,
        }],
        &LoadOptions::default(),
    )
    .unwrap();
    l.rules().store(Arc::new(index));
    // The rule changed (no name now): the entry is resolved for it again.
    tables.refresh(&l.rules().load_full(), l.metrics());
    let gold = ask(&l, vec![one("tenant", "gold")]).await;
    assert_eq!(answer(&gold), (Code::Ok, Some(5), None, 4));
    std::fs::remove_dir_all(dir).unwrap();
}
