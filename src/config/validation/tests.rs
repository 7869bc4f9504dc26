//! Unit tests of `validation`.

use super::*;
use std::fs;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

fn source(name: &str, text: &str) -> Source {
    Source {
        name: name.to_owned(),
        text: text.to_owned(),
    }
}

fn rendered(result: Result<Index, ConfigError>) -> String {
    match result {
        Ok(_) => "<loaded>".to_owned(),
        Err(ConfigError::Invalid(issues)) => issues
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        Err(err) => format!("<{err}>"),
    }
}

fn errors_of(yaml: &str) -> String {
    rendered(load_sources(
        &[source("t.yaml", yaml)],
        &LoadOptions::default(),
    ))
}

fn expected(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    text.strip_suffix('\n').unwrap_or(&text).to_owned()
}

/// Every rule named in the style guide has a fixture.
const RULES: &[&str] = &[
    "empty_domain",
    "empty_key",
    "duplicate_composite_key",
    "invalid_unit",
    "unknown_key",
    "unlimited_with_unit",
    "empty_replaces",
    "replaces_self",
    "share_threshold_without_wildcard",
    "yaml_syntax",
    "zero_multiplier",
    "unknown_algorithm",
    "many_errors",
    "missing_unit",
    "missing_requests_per_unit",
    "rate_limits_with_rate_limit",
    "rate_limits_mixed_algorithms",
    "rate_limits_same_window",
    "rate_limits_unlimited",
    "sliding_log_too_large",
    "burst_without_gcra",
    "count_rejected_without_sliding_window",
    "lease_on_sliding_log",
    "lease_mixed_sliding_windows",
    "non_string_key",
    "list_of_scalars",
    "type_error",
    "table_on_concurrency",
    "table_on_unlimited",
    "table_key_without_table",
    "table_invalid_name",
    "rate_limits_different_tables",
];

#[test]
fn every_invalid_fixture_renders_its_err_file() {
    let dir = fixtures().join("invalid");
    let mut checked = Vec::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let text = fs::read_to_string(&path).unwrap();
        let actual = rendered(load_sources(
            &[source(name, &text)],
            &LoadOptions::default(),
        ));
        assert_eq!(
            actual,
            expected(&path.with_extension("err")),
            "fixture {name}"
        );
        checked.push(stem);
    }
    for rule in RULES {
        assert!(checked.iter().any(|c| c == rule), "no fixture for {rule}");
    }
}

#[test]
fn duplicate_domain_across_files() {
    let dir = fixtures().join("invalid/duplicate_domain");
    let actual = rendered(load_dir(&dir, &LoadOptions::default()));
    assert_eq!(
        actual,
        expected(&fixtures().join("invalid/duplicate_domain.err"))
    );
}

#[test]
fn merge_domains_accepts_the_same_domain_twice() {
    let dir = fixtures().join("invalid/duplicate_domain");
    let options = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let index = load_dir(&dir, &options).unwrap();
    assert_eq!(index.summaries().len(), 1);
    assert_eq!(index.rules().count(), 2);
}

#[test]
fn merge_still_rejects_duplicate_composite_keys() {
    let a = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let options = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let actual = rendered(load_sources(
        &[source("a.yaml", a), source("b.yaml", a)],
        &options,
    ));
    assert_eq!(
        actual,
        "b.yaml: descriptors[0] (key=k): duplicate descriptor composite key 'd.k'"
    );
}

#[test]
fn errors_are_collected_across_files() {
    let actual = rendered(load_sources(
        &[
            source("a.yaml", "domain: ''\n"),
            source("b.yaml", "domain: b\ndescriptors:\n  - value: x\n"),
        ],
        &LoadOptions::default(),
    ));
    assert_eq!(
        actual,
        "a.yaml: config file cannot have empty domain\n\
             b.yaml: descriptors[0] (value=x): descriptor has empty key"
    );
}

#[test]
fn zero_requests_per_unit_is_valid() {
    let index = load_sources(
            &[source(
                "t.yaml",
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
            )],
            &LoadOptions::default(),
        )
        .unwrap();
    let rule = index.rules().next().unwrap();
    match &rule.policy {
        Policy::Limited(limits) => assert_eq!(limits[0].requests_per_unit, 0),
        Policy::Unlimited { .. } => panic!("unlimited"),
    }
}

#[test]
fn unlimited_ignores_an_invalid_unit_like_the_reference() {
    assert_eq!(
        errors_of(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: nope}\n"
        ),
        "<loaded>"
    );
}

#[test]
fn empty_value_is_a_default_node() {
    assert_eq!(
        errors_of("domain: d\ndescriptors:\n  - key: k\n    value: ''\n  - key: k\n"),
        "t.yaml: descriptors[1] (key=k): duplicate descriptor composite key 'd.k'"
    );
}

#[test]
fn error_summary_is_one_lowercase_clause() {
    let err = load_sources(
        &[source("a.yaml", "domain: ''\n"), source("b.yaml", "x: 1\n")],
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "3 errors in rule files");
    assert_eq!(err.issues().len(), 3);
    let issue = &err.issues()[1];
    assert_eq!(issue.file(), "b.yaml");
    assert_eq!(issue.location(), None);
    assert_eq!(issue.path(), "");
    assert_eq!(issue.message(), "config error, unknown key 'x'");
    let one =
        load_sources(&[source("a.yaml", "domain: ''\n")], &LoadOptions::default()).unwrap_err();
    assert_eq!(one.to_string(), "1 error in rule files");
}

#[test]
fn yaml_error_carries_line_and_column() {
    let err =
        load_sources(&[source("a.yaml", "domain: [\n")], &LoadOptions::default()).unwrap_err();
    let issue = &err.issues()[0];
    assert_eq!(issue.location(), Some((2, 1)));
    assert!(
        issue
            .rendered
            .starts_with("a.yaml:2:1: error loading config file: ")
    );
}

#[test]
fn load_dir_reads_regular_files_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("b.yaml"), "domain: ''\n").unwrap();
    fs::write(dir.path().join("a.yaml"), "domain: ''\n").unwrap();
    fs::write(dir.path().join(".hidden"), "domain: ''\n").unwrap();
    fs::create_dir(dir.path().join("..data")).unwrap();
    fs::write(dir.path().join("..data/c.yaml"), "domain: ''\n").unwrap();

    let all = rendered(load_dir(dir.path(), &LoadOptions::default()));
    assert_eq!(
        all,
        ".hidden: config file cannot have empty domain\n\
             a.yaml: config file cannot have empty domain\n\
             b.yaml: config file cannot have empty domain"
    );
    let options = LoadOptions {
        ignore_dotfiles: true,
        ..LoadOptions::default()
    };
    let visible = rendered(load_dir(dir.path(), &options));
    assert_eq!(
        visible,
        "a.yaml: config file cannot have empty domain\n\
             b.yaml: config file cannot have empty domain"
    );
}

#[cfg(unix)]
#[test]
fn load_dir_follows_symlinks_like_a_configmap_mount() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("..2024_01_01");
    fs::create_dir(&data).unwrap();
    fs::write(
            data.join("rl.yaml"),
            "domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
        .unwrap();
    std::os::unix::fs::symlink(&data, dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/rl.yaml", dir.path().join("rl.yaml")).unwrap();
    std::os::unix::fs::symlink("missing.yaml", dir.path().join("zz.yaml")).unwrap();

    let err = load_dir(dir.path(), &LoadOptions::default()).unwrap_err();
    assert_eq!(err.issues().len(), 1);
    assert!(
        err.issues()[0]
            .rendered
            .starts_with("zz.yaml: cannot read rule file: ")
    );
    fs::remove_file(dir.path().join("zz.yaml")).unwrap();
    let index = load_dir(dir.path(), &LoadOptions::default()).unwrap();
    assert!(index.has_domain("rl"));
}

#[test]
fn load_dir_of_an_empty_dir_is_an_empty_index() {
    let dir = tempfile::tempdir().unwrap();
    let index = load_dir(dir.path(), &LoadOptions::default()).unwrap();
    assert!(index.is_empty());
    assert!(index.summaries().is_empty());
}

#[test]
fn load_dir_of_a_missing_dir_is_a_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = load_dir(&dir.path().join("nope"), &LoadOptions::default()).unwrap_err();
    assert!(matches!(err, ConfigError::ReadDir { .. }));
    assert!(err.to_string().starts_with("cannot read rule directory "));
}

#[test]
fn example_config_loads_into_the_expected_rules() {
    let dir = fixtures().join("valid");
    let text = fs::read_to_string(dir.join("example.yaml")).unwrap();
    let index = load_sources(&[source("example.yaml", &text)], &LoadOptions::default()).unwrap();
    let rules: Vec<String> = index
        .rules()
        .map(|rule| {
            let policy = match &rule.policy {
                Policy::Limited(limits) => {
                    format!("{}/{}", limits[0].requests_per_unit, limits[0].unit)
                }
                Policy::Unlimited { .. } => "unlimited".to_owned(),
            };
            let mut line = format!("{} {policy}", rule.full_key);
            if rule.shadow_mode {
                line.push_str(" shadow");
            }
            if let Policy::Limited(limits) = &rule.policy
                && let Some(name) = &limits[0].name
            {
                let _ = write!(line, " name={name}");
            }
            if !rule.replaces.is_empty() {
                let names: Vec<&str> = rule.replaces.iter().map(|name| &**name).collect();
                let _ = write!(line, " replaces={}", names.join(","));
            }
            line
        })
        .collect();
    assert_eq!(
        rules,
        [
            "rl.category_account 4/minute replaces=per-user",
            "rl.source_cluster_proxy.destination_cluster_bar 1/minute",
            "rl.source_cluster_proxy.destination_cluster_mock 1/minute",
            "rl.foo 2/minute",
            "rl.foo.bar 3/minute",
            "rl.foo.bar_bkthomps 1/minute name=per-user",
            "rl.foo.bar_bkthomps.baz_not-so-shady 3/minute",
            "rl.foo.bar_bkthomps.baz_shady 3/minute shadow",
            "rl.foo.bar_bkthomps.bay 2/minute",
            "rl.foo.baz_not-so-shady 3/minute",
            "rl.foo.baz_shady 3/minute shadow",
            "rl.key4 4/second name=key4-limit",
            "rl.key5 5/second replaces=key4-limit",
            "rl.key6 unlimited",
        ]
    );
    assert_eq!(
        index.summaries(),
        [crate::config::DomainSummary {
            domain: "rl".to_owned(),
            descriptors: 15,
            rules: 14,
        }]
    );
}

#[test]
fn example_config_matches_like_the_reference() {
    let dir = fixtures().join("valid");
    let text = fs::read_to_string(dir.join("example.yaml")).unwrap();
    let index = load_sources(&[source("example.yaml", &text)], &LoadOptions::default()).unwrap();
    let hit = |pairs: &[(&str, &str)]| {
        let entries: Vec<_> = pairs
            .iter()
            .map(|(k, v)| crate::descriptor::Entry::new(*k, *v))
            .collect();
        match index.lookup("rl", &entries) {
            crate::config::Lookup::Matched(m) => m.rule.full_key.clone(),
            other => format!("{other:?}"),
        }
    };
    assert_eq!(hit(&[("foo", "x")]), "rl.foo");
    assert_eq!(hit(&[("foo", "x"), ("bar", "y")]), "rl.foo.bar");
    assert_eq!(
        hit(&[("foo", "x"), ("bar", "bkthomps")]),
        "rl.foo.bar_bkthomps"
    );
    assert_eq!(
        hit(&[("foo", "x"), ("bar", "bkthomps"), ("bay", "z")]),
        "rl.foo.bar_bkthomps.bay"
    );
    // `bar=y` is the default node, which has no children.
    assert_eq!(hit(&[("foo", "x"), ("bar", "y"), ("bay", "z")]), "NoMatch");
    assert_eq!(hit(&[("source_cluster", "proxy")]), "NoMatch");
    assert_eq!(
        hit(&[("source_cluster", "proxy"), ("destination_cluster", "mock")]),
        "rl.source_cluster_proxy.destination_cluster_mock"
    );
}

proptest::proptest! {
    #[test]
    fn loading_never_panics(text in "(domain: d\n|descriptors:\n|  - key: [a-z*]{0,3}\n|    value: [a-z*_]{0,3}\n|    rate_limit: \\{unit: [a-z]{0,6}, requests_per_unit: -?[0-9]\\}\n|    share_threshold: true\n|    descriptors:\n|      - key: k\n|[ :\\[\\]{}&*<-]{1,3}\n){0,10}") {
        let _ = load_sources(&[source("p.yaml", &text)], &LoadOptions::default());
    }
}

#[test]
fn other_valid_fixtures_load() {
    let dir = fixtures().join("valid");
    let index = load_dir(&dir, &LoadOptions::default()).unwrap();
    assert!(index.has_domain("rl"));
    assert!(index.summaries().len() >= 2);
}

mod extensions;
mod stores;
