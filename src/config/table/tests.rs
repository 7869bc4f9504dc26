//! Unit tests of the table registry: changes, pages, the audit trail, the
//! log read back.

use super::*;
use crate::config::{LoadOptions, Source, load_sources};
use serde_json::json;

fn rules() -> Arc<Index> {
    let text = "domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60, table: plans}
";
    Arc::new(
        load_sources(
            &[Source {
                name: "api.yaml".to_owned(),
                text: text.to_owned(),
            }],
            &LoadOptions::default(),
        )
        .unwrap(),
    )
}

fn entry(value: &serde_json::Value) -> TableEntry {
    TableEntry::from_json(value).unwrap()
}

fn writing<'a>(rules: &'a Arc<Index>, metrics: &'a Metrics, time: &'a str) -> Writing<'a> {
    Writing {
        rules,
        metrics,
        who: "trusted:127.0.0.1",
        time,
        dry_run: false,
    }
}

/// A log's path in a directory of its own, removed when the guard drops
/// (a failed test's too).
fn temp_log(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("floodgate-tables-{name}-"))
        .tempdir()
        .unwrap();
    let path = dir.path().join("tables.log");
    (dir, path)
}

#[test]
fn without_a_place_changes_are_refused_but_dry_runs_answer() {
    let (rules, metrics) = (rules(), Metrics::default());
    let tables = Tables::default();
    let w = writing(&rules, &metrics, "t");
    let err = tables
        .put(&w, "plans", "acme", entry(&json!({"requests_per_unit": 5})))
        .unwrap_err();
    assert!(matches!(err, TableError::NoPath));
    assert!(err.to_string().contains("TABLES_PATH"));
    let dry = Writing { dry_run: true, ..w };
    let change = tables
        .put(
            &dry,
            "plans",
            "acme",
            entry(&json!({"requests_per_unit": 5})),
        )
        .unwrap();
    assert_eq!((change.version, change.previous), (1, None));
    assert_eq!(tables.entry("plans", "acme"), None);
    let redis = Tables::unkept(Unkept::Redis);
    let err = redis
        .put(&w, "plans", "acme", entry(&json!({"requests_per_unit": 5})))
        .unwrap_err();
    assert!(err.to_string().contains("Redis"), "{err}");
}

#[test]
fn changes_are_resolved_for_the_rules_and_kept_across_a_reopen() {
    let (rules, metrics) = (rules(), Metrics::default());
    let (_dir, path) = temp_log("reopen");
    let tables = Tables::open(&path).unwrap();
    let w = writing(&rules, &metrics, "2026-01-01T00:00:00Z");
    tables
        .put(
            &w,
            "plans",
            "acme",
            entry(&json!({"requests_per_unit": 5, "name": "gold"})),
        )
        .unwrap();
    tables
        .put(&w, "plans", "beta", entry(&json!({"unlimited": true})))
        .unwrap();
    let rule = rules.rules().next().unwrap().table.clone().unwrap();
    let set = tables.load();
    let found = set.find(&rule, "acme").unwrap();
    let Some(Resolved::Limited { limits, .. }) = found.resolved else {
        panic!("limited");
    };
    assert_eq!(
        (limits[0].requests_per_unit, limits[0].window_secs()),
        (5, 60)
    );
    assert!(set.find(&rule, "nobody").is_none());
    drop(set);
    // A wrong entry changes nothing.
    let err = tables
        .put(
            &w,
            "plans",
            "acme",
            entry(&json!({"requests_per_unit": 5, "burst": 2})),
        )
        .unwrap_err();
    let TableError::Invalid(problems) = err else {
        panic!("invalid");
    };
    assert_eq!(problems, ["entry: burst is only valid with algorithm gcra"]);
    tables.delete(&w, "plans", "beta").unwrap();
    assert!(matches!(
        tables.delete(&w, "plans", "beta"),
        Err(TableError::NotFound)
    ));
    let before = tables.list();
    let trail = tables.audit(None, None, None, 100);
    drop(tables);

    let again = Tables::open(&path).unwrap();
    assert_eq!(again.list(), before);
    assert_eq!(
        again.list(),
        [TableSummary {
            table: "plans".to_owned(),
            entries: 1,
            version: 3
        }]
    );
    assert_eq!(again.audit(None, None, None, 100), trail);
    again.refresh(&rules, &metrics);
    assert!(again.load().find(&rule, "acme").unwrap().resolved.is_some());
}

#[test]
fn a_torn_last_line_is_cut_off() {
    let (rules, metrics) = (rules(), Metrics::default());
    let (_dir, path) = temp_log("torn");
    let tables = Tables::open(&path).unwrap();
    let w = writing(&rules, &metrics, "t");
    tables
        .put(&w, "plans", "acme", entry(&json!({"requests_per_unit": 5})))
        .unwrap();
    drop(tables);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"time\":\"t\",\"who\"");
    std::fs::write(&path, text).unwrap();
    let again = Tables::open(&path).unwrap();
    assert_eq!(again.list().len(), 1);
    again
        .put(&w, "plans", "beta", entry(&json!({"requests_per_unit": 6})))
        .unwrap();
    drop(again);
    assert_eq!(Tables::open(&path).unwrap().list()[0].entries, 2);
}

#[test]
fn an_import_is_all_or_nothing_and_names_its_bad_line() {
    let (rules, metrics) = (rules(), Metrics::default());
    let (_dir, path) = temp_log("import");
    let tables = Tables::open(&path).unwrap();
    let w = writing(&rules, &metrics, "t");
    let items = vec![
        ("a".to_owned(), entry(&json!({"requests_per_unit": 1}))),
        (
            "b".to_owned(),
            entry(&json!({"requests_per_unit": 2, "unit": "fortnight"})),
        ),
    ];
    let err = tables.import(&w, "plans", items).unwrap_err();
    let TableError::ImportLine { line, problems } = err else {
        panic!("import line");
    };
    assert_eq!(line, 2);
    assert_eq!(problems, ["entry: invalid rate limit unit 'fortnight'"]);
    assert!(tables.list().is_empty());
    let items = (0..5)
        .map(|i| (format!("k{i}"), entry(&json!({"requests_per_unit": i}))))
        .collect();
    let changes = tables.import(&w, "plans", items).unwrap();
    assert_eq!(changes.len(), 5);
    assert!(
        changes
            .iter()
            .all(|c| c.version == 1 && c.action == Action::Import)
    );
    // Pages: sorted by key, `next` until the end, empty past it.
    let first = tables.page("plans", None, 2).unwrap();
    let keys: Vec<_> = first.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        (keys, first.next.as_deref()),
        (vec!["k0", "k1"], Some("k1"))
    );
    let last = tables.page("plans", Some("k3"), 2).unwrap();
    assert_eq!((last.entries.len(), last.next), (1, None));
    assert_eq!(tables.page("plans", Some("zzz"), 2).unwrap().entries, []);
    assert_eq!(tables.page("missing", None, 2), None);
}

#[test]
fn the_audit_trail_is_newest_first_filtered_and_paged() {
    let (rules, metrics) = (rules(), Metrics::default());
    let (_dir, path) = temp_log("audit");
    let tables = Tables::open(&path).unwrap();
    let w = writing(&rules, &metrics, "t");
    let five = entry(&json!({"requests_per_unit": 5}));
    let six = entry(&json!({"requests_per_unit": 6}));
    tables.put(&w, "plans", "a", five.clone()).unwrap();
    tables.put(&w, "other", "a", five.clone()).unwrap();
    tables.put(&w, "plans", "a", six.clone()).unwrap();
    tables.delete(&w, "plans", "a").unwrap();
    let page = tables.audit(Some("plans"), Some("a"), None, 2);
    let seen: Vec<_> = page
        .changes
        .iter()
        .map(|c| (c.action, c.previous.clone(), c.entry.clone(), c.version))
        .collect();
    assert_eq!(
        seen,
        [
            (Action::Delete, Some(six.clone()), None, 3),
            (Action::Put, Some(five), Some(six), 2),
        ]
    );
    let rest = tables.audit(Some("plans"), Some("a"), page.next, 2);
    assert_eq!(rest.changes.len(), 1);
    assert_eq!(rest.changes[0].previous, None);
    assert_eq!(rest.next, None);
    assert_eq!(tables.audit(None, None, None, 10).changes.len(), 4);
    let mut rendered = String::new();
    metrics.table.render(&mut rendered);
    assert!(rendered.contains("ratelimit_table_entries{table=\"plans\"} 0\n"));
    assert!(rendered.contains("ratelimit_table_changes_total{table=\"plans\",action=\"put\"} 2\n"));
}

/// A shared change `seq` of `plans` putting `key` at `n` (`None`: delete),
/// as the store's log keeps it.
fn shared(seq: u64, key: &str, n: Option<u32>, previous: &str) -> SharedChange {
    let entry = n.map(|n| json!({"requests_per_unit": n}));
    let items = json!([{"key": key, "entry": entry}]).to_string();
    let version = seq.to_string();
    let action = if n.is_some() { "put" } else { "delete" };
    SharedChange::parse(seq, format!("{seq}-0"), |name| match name {
        "table" => "plans",
        "action" => action,
        "who" => "billing",
        "time" => "2026-11-28T00:00:00Z",
        "version" => &version,
        "items" => &items,
        "previous" => previous,
        _ => "",
    })
    .unwrap()
}

#[test]
fn a_shared_copy_applies_changes_in_log_order_and_asks_for_a_load_on_a_gap() {
    let (rules, metrics) = (rules(), Metrics::default());
    let tables = Tables::shared();
    assert!(!tables.ready(), "not ready before the first load");
    let cursor = SharedCursor {
        seq: 0,
        id: "0".to_owned(),
        loaded: false,
    };
    assert_eq!(
        tables.load_shared(cursor, Vec::new(), &[], &rules, &metrics),
        0
    );
    assert!(tables.ready());
    let one = shared(1, "acme", Some(5), "");
    let two = shared(2, "acme", Some(7), r#"{"requests_per_unit":5}"#);
    assert!(tables.apply_shared(&[one, two.clone()], &rules, &metrics));
    // Applied again (a writer and the follower both read it): skipped.
    assert!(tables.apply_shared(&[two], &rules, &metrics));
    assert_eq!(tables.entry("plans", "acme").unwrap().1, 2);
    assert_eq!(tables.shared_cursor().seq, 2);
    // Change 4 without 3: not applied, and the copy must be loaded whole.
    assert!(!tables.apply_shared(&[shared(4, "acme", None, "")], &rules, &metrics));
    assert_eq!(
        tables.entry("plans", "acme"),
        Some((entry(&json!({"requests_per_unit": 7})), 2))
    );
    let audit = tables.audit(None, None, None, 10);
    let seen: Vec<_> = audit
        .changes
        .iter()
        .map(|c| (c.who.as_str(), c.previous.clone(), c.seq))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "billing",
                Some(entry(&json!({"requests_per_unit": 5}))),
                2 << 20
            ),
            ("billing", None, 1 << 20),
        ]
    );
    // Every rule reading the table takes the entry.
    let rule = rules.rules().find_map(|r| r.table.clone()).unwrap();
    assert!(
        tables
            .load()
            .find(&rule, "acme")
            .unwrap()
            .resolved
            .is_some()
    );
}

#[test]
fn a_shared_load_replaces_the_copy_and_keeps_the_trail_up_to_its_cursor() {
    let (rules, metrics) = (rules(), Metrics::default());
    let tables = Tables::shared();
    let log = [
        shared(3, "b", None, r#"{"requests_per_unit":2}"#),
        shared(2, "b", Some(2), ""),
    ];
    let cursor = SharedCursor {
        seq: 2,
        id: "2-0".to_owned(),
        loaded: false,
    };
    let table = (
        "plans".to_owned(),
        2,
        vec![
            ("a".to_owned(), r#"{"requests_per_unit":1}"#.to_owned()),
            ("bad".to_owned(), "{".to_owned()),
        ],
    );
    assert_eq!(
        tables.load_shared(cursor, vec![table], &log, &rules, &metrics),
        1,
        "one unreadable entry"
    );
    assert_eq!(tables.page("plans", None, 10).unwrap().entries.len(), 1);
    // Only changes up to the cursor are in the trail; 3 comes by applying.
    assert_eq!(tables.audit(None, None, None, 10).changes.len(), 1);
    assert_eq!(tables.shared_cursor().id, "2-0");
}

#[test]
fn shared_items_write_the_log_and_each_key() {
    let items = vec![
        (
            "a".to_owned(),
            Some(entry(&json!({"requests_per_unit": 1}))),
        ),
        ("b".to_owned(), None),
    ];
    let (log, pairs) = shared_items(&items).unwrap();
    assert_eq!(
        log,
        r#"[{"key":"a","entry":{"requests_per_unit":1}},{"key":"b","entry":null}]"#
    );
    assert_eq!(
        pairs,
        [
            (
                "a".to_owned(),
                Some(r#"{"requests_per_unit":1}"#.to_owned())
            ),
            ("b".to_owned(), None)
        ]
    );
}

#[test]
fn a_log_mostly_history_is_compacted_and_reads_back_the_same_tables_and_trail() {
    let (rules, metrics) = (rules(), Metrics::default());
    let (_dir, path) = temp_log("compact");
    let tables = Tables::open(&path).unwrap();
    let w = writing(&rules, &metrics, "2026-01-01T00:00:00Z");
    // 60 changes over 6 keys, puts and deletes mixed.
    for i in 0..60_u32 {
        let key = format!("k{}", i % 6);
        if i % 7 == 3 && tables.entry("plans", &key).is_some() {
            tables.delete(&w, "plans", &key).unwrap();
        } else {
            let e = entry(&json!({"requests_per_unit": i + 1}));
            tables.put(&w, "plans", &key, e).unwrap();
        }
    }
    let trail = |t: &Tables| {
        t.audit(None, None, None, 1000)
            .changes
            .into_iter()
            .map(|c| (c.key, c.previous, c.entry, c.version))
            .collect::<Vec<_>>()
    };
    let page = |t: &Tables| t.page("plans", None, 100).unwrap();
    let lines = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().lines().count();
    let (want_page, want_trail) = (page(&tables), trail(&tables));
    drop(tables);
    assert_eq!(lines(&path), 60);
    // Keeping 10 changes: the log becomes one base line and the last 10.
    let reopened = Tables::open_keeping(&path, 10, 20).unwrap();
    assert_eq!(lines(&path), 11);
    assert_eq!(page(&reopened), want_page);
    // This run read the whole log: its trail holds every change.
    assert_eq!(trail(&reopened), want_trail);
    drop(reopened);
    // Read back again (as compacted, and compacted no further).
    let again = Tables::open_keeping(&path, 10, 20).unwrap();
    assert_eq!(lines(&path), 11);
    assert_eq!(page(&again), want_page);
    assert_eq!(trail(&again), want_trail[..10]);
    assert_eq!(again.entry("plans", "k0").map(|e| e.1), Some(60));
}
