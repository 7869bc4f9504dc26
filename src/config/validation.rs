//! Rule files in, a validated [`Index`] or the complete list of problems out.
//!
//! Owns: reading the rule directory, the unknown-key check, every validation
//! rule with the reference's wording (REFERENCE.md §1.3) and the rendering of
//! problems. Must not touch: matching (`index`) or anything request-time.
//!
//! Every problem is collected — across descriptors and across files — and
//! none stops the load early, so one `check-config` run shows them all. Each
//! renders as one line:
//!
//! ```text
//! <file>[:<line>:<col>]: [<path> [(key=<k>, value=<v>)]: ]<message>
//! edge.yaml: descriptors[2] (key=remote_address): invalid rate limit unit 'minutes'
//! ```
//!
//! The path names the YAML node at fault: `descriptors[0].descriptors[1]` for
//! a descriptor (the fields of its `rate_limit` are reported on it), with
//! `.rate_limit`, `.rate_limits[i]` or `.rate_limit.replaces[j]` appended
//! where that is more precise. The parenthesis shows the innermost
//! descriptor's `key`/`value` so the line can be found without counting. Only
//! YAML syntax and type errors know their line and column: the YAML crate
//! keeps no positions for the tree the other checks walk.

use super::index::{Algorithm, DomainIndex, Index, Level, Limit, Node, PathStep, Policy, Rule};
use super::model::{self, DESCRIPTOR_KEYS, RATE_LIMIT_KEYS, REPLACES_KEYS, ROOT_KEYS};
use crate::algorithm::MAX_LIMITS;
use crate::descriptor::Unit;
use serde_yaml_ng::Value;
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a set of rule files is combined (process settings, not rule files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// `MERGE_DOMAIN_CONFIG`: several files may declare the same domain; their
    /// descriptors are merged (a duplicate composite key is still an error).
    pub merge_domains: bool,
    /// `RUNTIME_IGNOREDOTFILES`: skip files whose name starts with `.`.
    pub ignore_dotfiles: bool,
}

/// A named rule file's contents.
#[derive(Debug, Clone)]
pub struct Source {
    /// File name as shown in errors (not a path).
    pub name: String,
    /// YAML text.
    pub text: String,
}

/// One problem in the rule files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The whole problem on one line, as [`Display`](fmt::Display) prints it.
    pub rendered: String,
    file: String,
    location: Option<(usize, usize)>,
    path: String,
    message: String,
}

impl ConfigIssue {
    fn new(
        file: &str,
        location: Option<(usize, usize)>,
        path: &str,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        let mut rendered = file.to_owned();
        if let Some((line, column)) = location {
            // Writing to a String cannot fail.
            let _ = write!(rendered, ":{line}:{column}");
        }
        rendered.push_str(": ");
        if !path.is_empty() {
            rendered.push_str(path);
            rendered.push_str(": ");
        }
        rendered.push_str(&message);
        Self {
            rendered,
            file: file.to_owned(),
            location,
            path: path.to_owned(),
            message,
        }
    }

    /// Name of the rule file.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// 1-based `(line, column)`, when the YAML parser reported one.
    pub fn location(&self) -> Option<(usize, usize)> {
        self.location
    }

    /// Path of the YAML node at fault (see the module docs); empty for
    /// file-level problems.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong, in the reference's wording where it has one.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rendered)
    }
}

/// Why the rule files did not produce an [`Index`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The rule directory itself could not be listed.
    #[error("cannot read rule directory {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The files hold problems; all of them, in file then document order.
    /// Print each with its `Display` — this error's own text is a summary.
    #[error("{} in rule files", count_errors(.0))]
    Invalid(Vec<ConfigIssue>),
}

impl ConfigError {
    /// The problems found; empty for [`ConfigError::ReadDir`].
    pub fn issues(&self) -> &[ConfigIssue] {
        match self {
            Self::ReadDir { .. } => &[],
            Self::Invalid(issues) => issues,
        }
    }
}

fn count_errors(issues: &[ConfigIssue]) -> String {
    match issues.len() {
        1 => "1 error".to_owned(),
        n => format!("{n} errors"),
    }
}

/// Loads every regular file directly in `dir`, in file-name order.
///
/// Symlinks are followed; subdirectories and other non-regular entries are
/// skipped (which also keeps a Kubernetes ConfigMap mount's `..data`
/// directory out). With [`LoadOptions::ignore_dotfiles`], names starting
/// with `.` are skipped. An empty directory gives an empty index, as the
/// reference serves with no domains. A file that cannot be read is reported
/// as an issue like any other problem.
///
/// # Errors
/// [`ConfigError::ReadDir`] when `dir` cannot be listed;
/// [`ConfigError::Invalid`] with every problem otherwise.
pub fn load_dir(dir: &Path, options: &LoadOptions) -> Result<Index, ConfigError> {
    let read_dir_error = |source| ConfigError::ReadDir {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
        names.push(entry.map_err(read_dir_error)?.file_name());
    }
    names.sort();

    let mut loader = Loader::new(options);
    for name in names {
        let file = name.to_string_lossy();
        if options.ignore_dotfiles && file.starts_with('.') {
            continue;
        }
        let path = dir.join(&name);
        // `metadata` follows symlinks; a dangling one is reported below.
        let metadata = std::fs::metadata(&path);
        if metadata.as_ref().is_ok_and(|meta| !meta.is_file()) {
            continue;
        }
        match metadata.and_then(|_| std::fs::read_to_string(&path)) {
            Ok(text) => loader.load(&file, &text),
            Err(err) => loader.issue(&file, None, "", format!("cannot read rule file: {err}")),
        }
    }
    loader.finish()
}

/// Loads in-memory rule files, in the given order (errors follow it).
///
/// # Errors
/// [`ConfigError::Invalid`] with every problem found.
pub fn load_sources(sources: &[Source], options: &LoadOptions) -> Result<Index, ConfigError> {
    let mut loader = Loader::new(options);
    for source in sources {
        loader.load(&source.name, &source.text);
    }
    loader.finish()
}

/// A descriptor node before freezing into the index.
#[derive(Debug)]
struct BuildNode {
    key: String,
    value: Option<String>,
    rule: Option<Rule>,
    share_threshold: bool,
    children: BuildLevel,
}

/// The nodes of one level, in config order, plus what makes a duplicate.
#[derive(Debug, Default)]
struct BuildLevel {
    nodes: Vec<BuildNode>,
    seen: HashSet<(String, Option<String>)>,
}

#[derive(Debug)]
struct BuildDomain {
    name: String,
    root: BuildLevel,
}

/// Accumulates domains and issues over all files.
#[derive(Debug)]
struct Loader<'o> {
    options: &'o LoadOptions,
    issues: Vec<ConfigIssue>,
    domains: Vec<BuildDomain>,
    by_name: HashMap<String, usize>,
}

/// Where in the tree a check is: for issue paths and reference keys.
#[derive(Debug, Clone)]
struct Place<'a> {
    /// Dotted node path, e.g. `descriptors[0].descriptors[1]`.
    at: String,
    /// Innermost descriptor's key and value, for the parenthesis.
    key: Option<&'a str>,
    value: Option<&'a str>,
}

impl Place<'_> {
    fn render(&self, suffix: &str) -> String {
        let mut out = format!("{}{suffix}", self.at);
        let key = self.key.filter(|key| !key.is_empty());
        let value = self.value.filter(|value| !value.is_empty());
        match (key, value) {
            (Some(key), Some(value)) => {
                let _ = write!(out, " (key={key}, value={value})");
            }
            (Some(key), None) => {
                let _ = write!(out, " (key={key})");
            }
            (None, Some(value)) => {
                let _ = write!(out, " (value={value})");
            }
            (None, None) => {}
        }
        out
    }
}

/// Per-file context of the descriptor walk.
#[derive(Debug)]
struct FileCheck<'a> {
    file: &'a str,
    domain: &'a str,
    issues: &'a mut Vec<ConfigIssue>,
}

impl FileCheck<'_> {
    fn issue(&mut self, path: &str, message: impl Into<String>) {
        self.issues
            .push(ConfigIssue::new(self.file, None, path, message));
    }
}

impl<'o> Loader<'o> {
    fn new(options: &'o LoadOptions) -> Self {
        Self {
            options,
            issues: Vec::new(),
            domains: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    fn issue(&mut self, file: &str, location: Option<(usize, usize)>, path: &str, message: String) {
        self.issues
            .push(ConfigIssue::new(file, location, path, message));
    }

    fn load(&mut self, file: &str, text: &str) {
        let document = match model::parse_tree(text) {
            Ok(document) => document,
            Err(err) => {
                let message = format!("error loading config file: {}", err.message);
                return self.issue(file, err.location, "", message);
            }
        };
        let tree = &document.tree;
        let parsed = match model::parse_file(text, &document) {
            Ok(parsed) => parsed,
            Err(err) => {
                // A wrong key or a list of scalars usually causes the type
                // error; report those, in the reference's words, instead.
                let before = self.issues.len();
                let mut check = FileCheck {
                    file,
                    domain: "",
                    issues: &mut self.issues,
                };
                check_keys(&mut check, tree, MapKind::Root, &Place::root(), "", true);
                if self.issues.len() == before {
                    let message = format!("error loading config file: {}", err.message);
                    self.issue(file, err.location, "", message);
                }
                return;
            }
        };

        let domain = parsed.domain.as_deref().unwrap_or_default();
        let mut check = FileCheck {
            file,
            domain,
            issues: &mut self.issues,
        };
        check_keys(&mut check, tree, MapKind::Root, &Place::root(), "", false);

        // Descriptors of a rejected file are still checked (into a scratch
        // level) so that all their problems are reported too.
        let mut scratch = BuildLevel::default();
        let existing = self.by_name.get(domain).copied();
        let level = if domain.is_empty() {
            check.issue("", "config file cannot have empty domain");
            &mut scratch
        } else if existing.is_some() && !self.options.merge_domains {
            check.issue("", format!("duplicate domain '{domain}' in config file"));
            &mut scratch
        } else {
            let at = existing.unwrap_or_else(|| {
                self.by_name.insert(domain.to_owned(), self.domains.len());
                self.domains.push(BuildDomain {
                    name: domain.to_owned(),
                    root: BuildLevel::default(),
                });
                self.domains.len() - 1
            });
            match self.domains.get_mut(at) {
                Some(built) => &mut built.root,
                None => &mut scratch,
            }
        };
        let descriptors = parsed.descriptors.as_deref().unwrap_or_default();
        let mut ancestors = Vec::new();
        add_descriptors(
            &mut check,
            level,
            descriptors,
            tree.get("descriptors"),
            &Place::root(),
            &format!("{domain}."),
            &mut ancestors,
        );
    }

    fn finish(self) -> Result<Index, ConfigError> {
        if !self.issues.is_empty() {
            return Err(ConfigError::Invalid(self.issues));
        }
        let domains = self
            .domains
            .into_iter()
            .map(|domain| {
                let mut rules = Vec::new();
                let mut node_count = 0;
                let root = freeze(domain.root, &mut rules, &mut node_count);
                DomainIndex {
                    name: domain.name,
                    root,
                    rules,
                    node_count,
                }
            })
            .collect();
        Ok(Index::from_domains(domains))
    }
}

impl Place<'static> {
    fn root() -> Self {
        Self {
            at: String::new(),
            key: None,
            value: None,
        }
    }
}

/// Turns a build level into the lookup structure. Rules are numbered in
/// pre-order, i.e. config order.
fn freeze(level: BuildLevel, rules: &mut Vec<Rule>, node_count: &mut usize) -> Level {
    let mut out = Level::default();
    for node in level.nodes {
        *node_count += 1;
        let rule = node.rule.map(|rule| {
            rules.push(rule);
            rules.len() - 1
        });
        let share_pattern = node
            .value
            .as_deref()
            .filter(|_| node.share_threshold)
            .map(Box::from);
        let children = freeze(node.children, rules, node_count);
        out.insert(
            &node.key,
            node.value.as_deref(),
            Node {
                rule,
                share_pattern,
                children,
            },
        );
    }
    out
}

/// Validates `descriptors` (whose raw YAML list is `raw`) into `level`.
///
/// `prefix` is the reference's key of the parent plus `.`; `ancestors` the
/// path steps above this level.
fn add_descriptors(
    check: &mut FileCheck<'_>,
    level: &mut BuildLevel,
    descriptors: &[model::Descriptor],
    raw: Option<&Value>,
    parent: &Place<'_>,
    prefix: &str,
    ancestors: &mut Vec<PathStep>,
) {
    let raw_items = raw.and_then(Value::as_sequence);
    for (index, descriptor) in descriptors.iter().enumerate() {
        let raw_item = raw_items.and_then(|items| items.get(index));
        let key = descriptor.key.as_deref().unwrap_or_default();
        // An empty value is the same as none: a default node.
        let value = descriptor
            .value
            .as_deref()
            .filter(|value| !value.is_empty());
        let place = Place {
            at: if parent.at.is_empty() {
                format!("descriptors[{index}]")
            } else {
                format!("{}.descriptors[{index}]", parent.at)
            },
            key: Some(key),
            value,
        };
        let here = place.render("");
        if let Some(raw_item) = raw_item {
            check_keys(check, raw_item, MapKind::Descriptor, &place, "", false);
        }

        let segment = match value {
            Some(value) => format!("{key}_{value}"),
            None => key.to_owned(),
        };
        let full_key = format!("{prefix}{segment}");
        let mut keep = true;
        if key.is_empty() {
            check.issue(&here, "descriptor has empty key");
            keep = false;
        } else if !level
            .seen
            .insert((key.to_owned(), value.map(str::to_owned)))
        {
            check.issue(
                &here,
                format!("duplicate descriptor composite key '{full_key}'"),
            );
            keep = false;
        }

        let share_threshold = descriptor.share_threshold.unwrap_or(false);
        if share_threshold && !value.is_some_and(|value| value.contains('*')) {
            check.issue(
                &here,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{segment}'"
                ),
            );
        }
        if descriptor.rate_limit.is_some() && descriptor.rate_limits.is_some() {
            check.issue(&here, "use either rate_limit or rate_limits, not both");
        }

        ancestors.push(PathStep {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            value_to_metric: descriptor.value_to_metric.unwrap_or(false),
            share_threshold,
        });
        let checked = match (&descriptor.rate_limit, &descriptor.rate_limits) {
            (Some(rate_limit), None) => check_rate_limit(check, rate_limit, &place, ".rate_limit"),
            (None, Some(rate_limits)) => check_rate_limits(check, rate_limits, &place),
            _ => None,
        };
        let rule = checked.map(|(policy, replaces)| Rule {
            full_key: full_key.clone(),
            policy,
            replaces,
            shadow_mode: descriptor.shadow_mode.unwrap_or(false),
            quota_mode: descriptor.quota_mode.unwrap_or(false),
            metadata: descriptor.metadata.clone(),
            domain: check.domain.to_owned(),
            detailed_metric: descriptor.detailed_metric.unwrap_or(false),
            value_to_metric: descriptor.value_to_metric.unwrap_or(false),
            path: ancestors.clone(),
        });
        let mut children = BuildLevel::default();
        add_descriptors(
            check,
            &mut children,
            descriptor.descriptors.as_deref().unwrap_or_default(),
            raw_item.and_then(|item| item.get("descriptors")),
            &place,
            &format!("{full_key}."),
            ancestors,
        );
        ancestors.pop();

        if keep {
            level.nodes.push(BuildNode {
                key: key.to_owned(),
                value: value.map(str::to_owned),
                rule,
                share_threshold,
                children,
            });
        }
    }
}

/// Largest `requests_per_unit` of a `sliding_log` limit: the log keeps one
/// entry per admitted hit, so this bounds its memory.
const MAX_SLIDING_LOG_LIMIT: u32 = 10_000;

/// Checks a `rate_limits` list: every entry as a `rate_limit`, none
/// unlimited, all of one algorithm.
fn check_rate_limits(
    check: &mut FileCheck<'_>,
    rate_limits: &[model::RateLimit],
    place: &Place<'_>,
) -> Option<(Policy, Vec<Arc<str>>)> {
    let here = place.render("");
    if rate_limits.is_empty() {
        check.issue(&here, "rate_limits must list at least one limit");
        return None;
    }
    if rate_limits.len() > MAX_LIMITS {
        check.issue(
            &here,
            format!(
                "rate_limits lists {} limits; at most {MAX_LIMITS} are allowed",
                rate_limits.len()
            ),
        );
        return None;
    }
    let mut limits = Vec::with_capacity(rate_limits.len());
    let mut replaces = Vec::new();
    let mut ok = true;
    for (index, rate_limit) in rate_limits.iter().enumerate() {
        let field = format!(".rate_limits[{index}]");
        if rate_limit.unlimited.unwrap_or(false) {
            check.issue(
                &place.render(&field),
                "unlimited is not allowed in rate_limits; use rate_limit",
            );
            ok = false;
            continue;
        }
        match check_rate_limit(check, rate_limit, place, &field) {
            Some((Policy::Limited(mut one), more)) => {
                limits.append(&mut one);
                replaces.extend(more);
            }
            _ => ok = false,
        }
    }
    if ok && limits.iter().any(|l| l.algorithm != limits[0].algorithm) {
        check.issue(
            &here,
            "all rate_limits of a descriptor must use the same algorithm",
        );
        ok = false;
    }
    if ok {
        // Two limits of one window length would share one counter (its key
        // is the window) and count every hit twice.
        for (j, limit) in limits.iter().enumerate() {
            let first = limits
                .iter()
                .position(|other| other.window_secs() == limit.window_secs());
            if let Some(i) = first.filter(|&i| i < j) {
                check.issue(
                    &place.render(&format!(".rate_limits[{j}]")),
                    format!(
                        "has the same window ({} s) as rate_limits[{i}]; the windows of one descriptor must differ",
                        limit.window_secs()
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some((Policy::Limited(limits), replaces))
}

/// Checks one `rate_limit` (at `field`, e.g. `.rate_limit`); `None` when it
/// has a problem (already reported).
fn check_rate_limit(
    check: &mut FileCheck<'_>,
    rate_limit: &model::RateLimit,
    place: &Place<'_>,
    field: &str,
) -> Option<(Policy, Vec<Arc<str>>)> {
    let before = check.issues.len();
    let here = if field == ".rate_limit" {
        place.render("")
    } else {
        place.render(field)
    };
    let unlimited = rate_limit.unlimited.unwrap_or(false);
    let unit_text = rate_limit.unit.as_deref();
    let unit = unit_text.and_then(Unit::parse);
    if unlimited {
        // As in the reference, only a *valid* unit conflicts with unlimited.
        if unit.is_some() {
            check.issue(&here, "should not specify rate limit unit when unlimited");
        }
    } else {
        match unit_text {
            None => check.issue(
                &here,
                "missing rate limit unit (second, minute, hour, day, week, month or year)",
            ),
            Some(text) if unit.is_none() => {
                check.issue(&here, format!("invalid rate limit unit '{text}'"));
            }
            Some(_) => {}
        }
        if rate_limit.requests_per_unit.is_none() {
            check.issue(
                &here,
                "missing requests_per_unit (0 is allowed and blocks every request)",
            );
        }
    }
    let unit_multiplier = NonZeroU32::new(rate_limit.unit_multiplier.unwrap_or(1));
    if unit_multiplier.is_none() {
        check.issue(&here, "unit_multiplier must be at least 1");
    }
    let algorithm = match rate_limit.algorithm.as_deref() {
        None => Some(Algorithm::default()),
        Some(name) => {
            let algorithm = Algorithm::parse(name);
            if algorithm.is_none() {
                let supported: Vec<_> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
                check.issue(
                    &here,
                    format!(
                        "unknown algorithm '{name}' (supported: {})",
                        supported.join(", ")
                    ),
                );
            }
            algorithm
        }
    };
    let name = rate_limit.name.as_deref();
    let mut replaces = Vec::new();
    for (index, entry) in rate_limit.replaces.iter().flatten().enumerate() {
        let at = place.render(&format!("{field}.replaces[{index}]"));
        match entry.name.as_deref() {
            None | Some("") => check.issue(&at, "should not have an empty replaces entry"),
            Some(replaced) if Some(replaced) == name => {
                check.issue(&at, "replaces should not contain name of same descriptor");
            }
            Some(replaced) => replaces.push(Arc::from(replaced)),
        }
    }
    if let Some(algorithm) = algorithm {
        if rate_limit.burst.is_some() && algorithm != Algorithm::Gcra {
            check.issue(&here, "burst is only valid with algorithm gcra");
        }
        if rate_limit.burst == Some(0) {
            check.issue(&here, "burst must be at least 1");
        }
        if rate_limit.count_rejected.is_some() && algorithm != Algorithm::SlidingWindow {
            check.issue(
                &here,
                "count_rejected is only valid with algorithm sliding_window",
            );
        }
        if let Some(limit) = rate_limit.requests_per_unit
            && algorithm == Algorithm::SlidingLog
            && limit > MAX_SLIDING_LOG_LIMIT
        {
            check.issue(
                &here,
                format!(
                    "sliding_log keeps one entry per hit: requests_per_unit {limit} is over the maximum of {MAX_SLIDING_LOG_LIMIT}; use sliding_window"
                ),
            );
        }
    }
    if check.issues.len() != before {
        return None;
    }
    let policy = if unlimited {
        Policy::Unlimited
    } else {
        Policy::Limited(vec![Limit {
            name: name.filter(|name| !name.is_empty()).map(Arc::from),
            requests_per_unit: rate_limit.requests_per_unit?,
            unit: unit?,
            unit_multiplier: unit_multiplier?,
            algorithm: algorithm?,
            burst: rate_limit.burst,
            count_rejected: rate_limit.count_rejected.unwrap_or(false),
        }])
    };
    Some((policy, replaces))
}

/// The kinds of YAML maps in a rule file, each with its own allowed keys.
#[derive(Debug, Clone, Copy)]
enum MapKind {
    Root,
    Descriptor,
    RateLimit,
    Replaces,
}

impl MapKind {
    fn allowed(self) -> &'static [&'static str] {
        match self {
            Self::Root => ROOT_KEYS,
            Self::Descriptor => DESCRIPTOR_KEYS,
            Self::RateLimit => RATE_LIMIT_KEYS,
            Self::Replaces => REPLACES_KEYS,
        }
    }
}

/// Reports unknown and non-string keys of `map` (at `place` + `suffix`),
/// descending into its `rate_limit(s)` and `replaces`, and into child
/// `descriptors` only when `deep` (otherwise the descriptor walk visits them,
/// which keeps issues in document order). `metadata` is free-form. Values of
/// the wrong type are left to serde, which knows their line.
fn check_keys(
    check: &mut FileCheck<'_>,
    map: &Value,
    kind: MapKind,
    place: &Place<'_>,
    suffix: &str,
    deep: bool,
) {
    let Some(mapping) = map.as_mapping() else {
        return;
    };
    let here = place.render(suffix);
    for (key, value) in mapping {
        let Some(name) = key.as_str() else {
            check.issue(
                &here,
                format!("config error, key is not of type string: {}", go_text(key)),
            );
            continue;
        };
        if !kind.allowed().contains(&name) {
            check.issue(&here, format!("config error, unknown key '{name}'"));
            continue;
        }
        let list = |check: &mut FileCheck<'_>, at: &str, kind: MapKind| {
            for (index, item) in value.as_sequence().into_iter().flatten().enumerate() {
                let suffix = format!("{suffix}.{at}[{index}]");
                if item.is_mapping() {
                    check_keys(check, item, kind, place, &suffix, deep);
                } else {
                    check.issue(
                        &place.render(&suffix),
                        format!(
                            "config error, yaml file contains list of type other than map: {}",
                            go_text(item)
                        ),
                    );
                }
            }
        };
        match (kind, name) {
            (MapKind::Root | MapKind::Descriptor, "descriptors") if deep => {
                for (index, item) in value.as_sequence().into_iter().flatten().enumerate() {
                    let child = Place {
                        at: if place.at.is_empty() {
                            format!("descriptors[{index}]")
                        } else {
                            format!("{}.descriptors[{index}]", place.at)
                        },
                        key: item.get("key").and_then(Value::as_str),
                        value: item.get("value").and_then(Value::as_str),
                    };
                    if item.is_mapping() {
                        check_keys(check, item, MapKind::Descriptor, &child, "", deep);
                    } else {
                        check.issue(
                            &child.at,
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                go_text(item)
                            ),
                        );
                    }
                }
            }
            (MapKind::Descriptor, "rate_limit") => {
                check_keys(check, value, MapKind::RateLimit, place, ".rate_limit", deep);
            }
            (MapKind::Descriptor, "rate_limits") => list(check, "rate_limits", MapKind::RateLimit),
            (MapKind::RateLimit, "replaces") => list(check, "replaces", MapKind::Replaces),
            _ => {}
        }
    }
}

/// A YAML value as Go's `%v` prints it, which is how the reference shows
/// offending keys and list items.
fn go_text(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(items) => {
            let items: Vec<_> = items.iter().map(go_text).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Mapping(map) => {
            let pairs: Vec<_> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", go_text(k), go_text(v)))
                .collect();
            format!("map[{}]", pairs.join(" "))
        }
        Value::Tagged(tagged) => format!("{} {}", tagged.tag, go_text(&tagged.value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
        "non_string_key",
        "list_of_scalars",
        "type_error",
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
            Policy::Unlimited => panic!("unlimited"),
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
        let index =
            load_sources(&[source("example.yaml", &text)], &LoadOptions::default()).unwrap();
        let rules: Vec<String> = index
            .rules()
            .map(|rule| {
                let policy = match &rule.policy {
                    Policy::Limited(limits) => {
                        format!("{}/{}", limits[0].requests_per_unit, limits[0].unit)
                    }
                    Policy::Unlimited => "unlimited".to_owned(),
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
        let index =
            load_sources(&[source("example.yaml", &text)], &LoadOptions::default()).unwrap();
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
}
