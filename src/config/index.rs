//! The validated, immutable descriptor index and its per-request lookup.
//!
//! Owns: the rule types handed to the limiter (`Rule`, `Limit`, `Policy`), the
//! prebuilt per-domain tree and the matching semantics of the reference
//! service (REFERENCE.md §1.2), plus its stats key (§1.1). Must not touch:
//! YAML or serde (`model`/`validation` build the index), counters, stores or
//! time.
//!
//! # Matching
//!
//! For each request entry, at the current level of the tree, in order:
//! 1. the node whose `key` and `value` equal the entry's exactly;
//! 2. the wildcard nodes of that key (value containing `*`), in config order,
//!    first match wins;
//! 3. the key-only default node.
//!
//! There is no backtracking, and only the node matched by the **last** entry
//! can supply a rule.
//!
//! Each level is prebuilt as a map from key to that key's nodes (a value map
//! for exact and default lookups, a list of pre-split `*` patterns), so a
//! lookup hashes borrowed strings and allocates nothing unless a
//! `share_threshold` wildcard is on the path.
//!
//! **Deliberate difference:** the reference joins key and value with `_` and
//! matches `key_value` strings, so `key: a, value: b_c` also matches the
//! request entry `a_b = c`, and the wildcard `a` / `b*` matches `a_b = x`. Here
//! the key must equal the entry's key and the value (or value pattern) is
//! matched against the entry's value alone, which removes that ambiguity and
//! is otherwise equivalent.

use crate::descriptor::{Entry, Unit};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;

/// Counting algorithm of a limit (rule-file `algorithm`, default
/// `fixed_window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Epoch-aligned fixed window (the reference behaviour).
    #[default]
    FixedWindow,
    /// Sliding window summed from per-bucket counters.
    SlidingWindow,
    /// Exact sliding log of hit timestamps.
    SlidingLog,
    /// Generic cell rate algorithm (a token bucket with O(1) state).
    Gcra,
}

impl Algorithm {
    /// Every algorithm, in the order they are listed in error messages.
    pub const ALL: [Self; 4] = [
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingLog,
        Self::Gcra,
    ];

    /// Name as written in rule files.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindow => "sliding_window",
            Self::SlidingLog => "sliding_log",
            Self::Gcra => "gcra",
        }
    }

    /// Parses a rule-file algorithm name (exact, lowercase).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|algo| algo.as_str() == name)
    }
}

/// A concrete limit: `requests_per_unit` hits per window of
/// `unit * unit_multiplier`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Optional name: the target of `replaces`, reported in
    /// `current_limit.name`.
    pub name: Option<Arc<str>>,
    /// Allowed hits per window; 0 blocks everything.
    pub requests_per_unit: u32,
    /// Base unit of the window.
    pub unit: Unit,
    /// Number of units in one window (extension; 1 in the reference).
    pub unit_multiplier: NonZeroU32,
    /// How hits are counted.
    pub algorithm: Algorithm,
    /// gcra: hits allowed at once (defaults to `requests_per_unit`).
    pub burst: Option<u32>,
    /// sliding_window: count denied hits too (default: only admitted hits
    /// count, so the window truly slides).
    pub count_rejected: bool,
}

impl Limit {
    /// Window length in seconds (`unit` seconds times `unit_multiplier`,
    /// saturating).
    pub fn window_secs(&self) -> u64 {
        self.unit
            .seconds()
            .saturating_mul(u64::from(self.unit_multiplier.get()))
    }
}

/// What a matched rule says about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Counted against one limit (`rate_limit`) or several (`rate_limits`,
    /// all of one algorithm, all enforced); never empty.
    Limited(Vec<Limit>),
    /// `unlimited: true`: never limited, never counted.
    Unlimited,
}

/// One level of the config path leading to a rule: the node matched there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathStep {
    /// The node's `key`.
    pub key: String,
    /// The node's `value`: `None` for a key-only default node, a pattern
    /// containing `*` for a wildcard node, otherwise an exact value.
    pub value: Option<String>,
    /// The node's `value_to_metric` flag.
    pub value_to_metric: bool,
    /// The node's `share_threshold` flag (only ever set on wildcard nodes).
    pub share_threshold: bool,
}

impl PathStep {
    /// Whether this node matches values by a `*` pattern.
    pub fn is_wildcard(&self) -> bool {
        self.value.as_deref().is_some_and(|v| v.contains('*'))
    }

    /// The node's map key in the reference: `key` or `key_value`.
    pub fn segment(&self) -> String {
        match &self.value {
            Some(value) => format!("{}_{value}", self.key),
            None => self.key.clone(),
        }
    }
}

/// A rule: a descriptor node that carries a `rate_limit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The reference's config-path key, `domain.key_value.key2`: the domain,
    /// then each node's `key` or `key_value`, joined by `.`.
    pub full_key: String,
    /// The limit, or unlimited.
    pub policy: Policy,
    /// Names of limits this rule replaces within a request.
    pub replaces: Vec<Arc<str>>,
    /// `shadow_mode`: over-limit answers are rewritten to OK.
    pub shadow_mode: bool,
    /// `quota_mode`: soft limit, see the reference's quota mode.
    pub quota_mode: bool,
    /// `metadata`: the node's YAML map converted to JSON.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Domain the rule belongs to.
    pub domain: String,
    /// `detailed_metric` on this node: the stats key uses every runtime value.
    pub detailed_metric: bool,
    /// `value_to_metric` on this node (the flags of the ancestors are in
    /// [`Rule::path`]).
    pub value_to_metric: bool,
    /// The config nodes from the top level down to this rule's node; one per
    /// entry of a matching request.
    pub path: Vec<PathStep>,
}

/// A successful lookup: the rule, plus how to build its counter key.
#[derive(Debug, Clone)]
pub struct Match<'a> {
    /// The rule of the node matched by the last entry.
    pub rule: &'a Rule,
    /// `share_threshold` substitutions, `(entry index, wildcard pattern)`: the
    /// caller puts the pattern in place of the runtime value of that entry in
    /// the counter key, so every matching value shares one counter. Empty
    /// (and unallocated) when no shared wildcard is on the path.
    pub shared: Vec<(usize, &'a str)>,
}

impl<'a> Match<'a> {
    /// The pattern shared at entry `index`, if any.
    fn shared_at(&self, index: usize) -> Option<&str> {
        self.shared
            .iter()
            .find(|(at, _)| *at == index)
            .map(|(_, pattern)| *pattern)
    }

    /// The reference's stats key for this match. `entries` must be the ones
    /// given to [`Index::lookup`].
    ///
    /// - Default: the rule's [`Rule::full_key`] (config path).
    /// - `detailed_metric` on the rule's node: `domain.k1_v1.k2_v2` from the
    ///   runtime values (always `key_value`, even for an empty value, as the
    ///   reference does), with shared wildcards written as their pattern.
    /// - Otherwise, at levels matched by a default or wildcard node carrying
    ///   `value_to_metric`, the runtime value replaces the config text; a
    ///   shared wildcard always stays its pattern.
    pub fn stats_key(&self, entries: &[Entry]) -> String {
        self.stats_key_cow(entries).into_owned()
    }

    /// [`Match::stats_key`] without allocating when the key is the rule's
    /// configured path (no `detailed_metric`, no `value_to_metric`), the
    /// common case on the request path.
    pub fn stats_key_cow(&self, entries: &[Entry]) -> std::borrow::Cow<'a, str> {
        let rule = self.rule;
        if !rule.detailed_metric && !rule.path.iter().any(|step| step.value_to_metric) {
            return std::borrow::Cow::Borrowed(&rule.full_key);
        }
        std::borrow::Cow::Owned(self.runtime_stats_key(entries))
    }

    fn runtime_stats_key(&self, entries: &[Entry]) -> String {
        let rule = self.rule;
        let mut key = rule.domain.clone();
        if rule.detailed_metric {
            let any_shared = !self.shared.is_empty();
            for (index, entry) in entries.iter().enumerate() {
                key.push('.');
                key.push_str(&entry.key);
                if let Some(pattern) = self.shared_at(index) {
                    key.push('_');
                    key.push_str(pattern);
                } else if !any_shared || !entry.value.is_empty() {
                    // The reference has two builders here; only the one used
                    // with shared wildcards omits `_` for an empty value.
                    key.push('_');
                    key.push_str(&entry.value);
                }
            }
            return key;
        }
        for (index, (entry, step)) in entries.iter().zip(&rule.path).enumerate() {
            key.push('.');
            key.push_str(&step.key);
            let config_value = step.value.as_deref();
            let text = if let Some(pattern) = self.shared_at(index) {
                Some(pattern)
            } else if step.value_to_metric && (config_value.is_none() || step.is_wildcard()) {
                Some(entry.value.as_str()).filter(|value| !value.is_empty())
            } else {
                config_value
            };
            if let Some(text) = text {
                key.push('_');
                key.push_str(text);
            }
        }
        key
    }
}

/// The answer of [`Index::lookup`].
#[derive(Debug, Clone)]
pub enum Lookup<'a> {
    /// The domain has no rule file. Not an error: the request is allowed.
    UnknownDomain,
    /// No rule applies (no node, depth mismatch, node without `rate_limit`,
    /// zero entries). Not an error: the descriptor is allowed.
    NoMatch,
    /// A rule applies.
    Matched(Match<'a>),
}

/// One summary line per domain, for `check-config` and the startup log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSummary {
    /// Domain name.
    pub domain: String,
    /// Number of descriptor nodes in the domain's tree.
    pub descriptors: usize,
    /// Number of nodes carrying a `rate_limit`.
    pub rules: usize,
}

/// A `*` pattern, split once at load time so matching allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// Literal pieces between `*`s; at least two, since the pattern has a `*`.
    parts: Box<[Box<str>]>,
}

impl Pattern {
    /// Builds a pattern; `None` when `raw` has no `*` (it is an exact value).
    pub(crate) fn new(raw: &str) -> Option<Self> {
        raw.contains('*').then(|| Self {
            parts: raw.split('*').map(Box::from).collect(),
        })
    }

    /// Whether `value` matches, each `*` standing for any run of characters
    /// (including none). The first and last pieces are anchored; the middle
    /// pieces are found leftmost-first, which is optimal for `*`-only globs,
    /// so no backtracking is needed.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let Some((first, rest)) = self.parts.split_first() else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return value == &**first;
        };
        let Some(value) = value.strip_prefix(&**first) else {
            return false;
        };
        let Some(mut value) = value.strip_suffix(&**last) else {
            return false;
        };
        for piece in middle.iter().filter(|piece| !piece.is_empty()) {
            match value.split_once(&**piece) {
                Some((_, after)) => value = after,
                None => return false,
            }
        }
        true
    }
}

/// A node of the frozen tree.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    /// Index into the domain's rules.
    pub(crate) rule: Option<usize>,
    /// The node's pattern when it has `share_threshold: true`.
    pub(crate) share_pattern: Option<Box<str>>,
    /// Children, matched by the next entry.
    pub(crate) children: Level,
}

/// The nodes of one key at one level.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyNodes {
    /// Node storage; the maps below index into it.
    nodes: Vec<Node>,
    /// Nodes by configured value. Wildcard nodes are here too: the reference
    /// looks up the literal `key_value` first, so a request value equal to a
    /// pattern's text picks that node even if an earlier pattern matches.
    exact: HashMap<Box<str>, usize>,
    /// Wildcard nodes in config order.
    wildcards: Vec<(Pattern, usize)>,
    /// The key-only node.
    default: Option<usize>,
}

/// One level of the tree: nodes grouped by key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Level {
    keys: HashMap<Box<str>, KeyNodes>,
}

impl Level {
    /// Adds a node; the caller (validation) has rejected duplicates.
    pub(crate) fn insert(&mut self, key: &str, value: Option<&str>, node: Node) {
        let group = self.keys.entry(key.into()).or_default();
        let id = group.nodes.len();
        group.nodes.push(node);
        match value {
            None => group.default = Some(id),
            Some(value) => {
                group.exact.insert(value.into(), id);
                if let Some(pattern) = Pattern::new(value) {
                    group.wildcards.push((pattern, id));
                }
            }
        }
    }

    /// The node an entry selects at this level (§1.2 step 3).
    fn select(&self, entry: &Entry) -> Option<&Node> {
        let group = self.keys.get(entry.key.as_str())?;
        let id = group
            .exact
            .get(entry.value.as_str())
            .copied()
            .or_else(|| {
                group
                    .wildcards
                    .iter()
                    .find(|(pattern, _)| pattern.matches(&entry.value))
                    .map(|(_, id)| *id)
            })
            .or(group.default)?;
        group.nodes.get(id)
    }
}

/// One domain's tree and rules.
#[derive(Debug, Clone)]
pub(crate) struct DomainIndex {
    /// Domain name.
    pub(crate) name: String,
    /// Top-level nodes.
    pub(crate) root: Level,
    /// Rules in config order; nodes refer to them by index.
    pub(crate) rules: Vec<Rule>,
    /// Number of descriptor nodes.
    pub(crate) node_count: usize,
}

/// The validated, immutable rule set: every domain's prebuilt descriptor
/// tree. Built only by [`load_dir`](super::load_dir) /
/// [`load_sources`](super::load_sources); cheap to share behind an `Arc`.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Domains sorted by name.
    domains: Vec<DomainIndex>,
    /// Position in `domains` by name.
    by_name: HashMap<Box<str>, usize>,
}

impl Index {
    /// An index with no domains: every lookup is `UnknownDomain`.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Assembles an index from validated domains (names are unique).
    pub(crate) fn from_domains(mut domains: Vec<DomainIndex>) -> Self {
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        let by_name = domains
            .iter()
            .enumerate()
            .map(|(at, domain)| (domain.name.as_str().into(), at))
            .collect();
        Self { domains, by_name }
    }

    /// Whether no domain is loaded.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Whether a rule file declared `domain`.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.by_name.contains_key(domain)
    }

    fn domain(&self, domain: &str) -> Option<&DomainIndex> {
        self.domains.get(*self.by_name.get(domain)?)
    }

    /// Finds the rule for one request descriptor (REFERENCE.md §1.2).
    ///
    /// Allocates only when a `share_threshold` wildcard is on the path.
    pub fn lookup<'a>(&'a self, domain: &str, entries: &[Entry]) -> Lookup<'a> {
        let Some(domain) = self.domain(domain) else {
            return Lookup::UnknownDomain;
        };
        let mut level = &domain.root;
        let mut shared = Vec::new();
        let mut matched = None;
        for (index, entry) in entries.iter().enumerate() {
            let Some(node) = level.select(entry) else {
                return Lookup::NoMatch;
            };
            if let Some(pattern) = &node.share_pattern {
                shared.push((index, &**pattern));
            }
            level = &node.children;
            matched = Some(node);
        }
        // Only the node of the last entry counts; zero entries match nothing.
        match matched
            .and_then(|node| node.rule)
            .and_then(|rule| domain.rules.get(rule))
        {
            Some(rule) => Lookup::Matched(Match { rule, shared }),
            None => Lookup::NoMatch,
        }
    }

    /// One summary per domain, sorted by domain name.
    pub fn summaries(&self) -> Vec<DomainSummary> {
        self.domains
            .iter()
            .map(|domain| DomainSummary {
                domain: domain.name.clone(),
                descriptors: domain.node_count,
                rules: domain.rules.len(),
            })
            .collect()
    }

    /// Every rule, sorted by domain, then in config order (file order, then
    /// document order).
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.domains.iter().flat_map(|domain| domain.rules.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadOptions, Source, load_sources};
    use proptest::prelude::*;

    fn index(yaml: &str) -> Index {
        index_of(&[("rules.yaml", yaml)], false)
    }

    fn index_of(files: &[(&str, &str)], merge_domains: bool) -> Index {
        let sources: Vec<Source> = files
            .iter()
            .map(|(name, text)| Source {
                name: (*name).to_owned(),
                text: (*text).to_owned(),
            })
            .collect();
        let options = LoadOptions {
            merge_domains,
            ..LoadOptions::default()
        };
        match load_sources(&sources, &options) {
            Ok(index) => index,
            Err(crate::config::ConfigError::Invalid(issues)) => {
                panic!("invalid: {issues:#?}")
            }
            Err(err) => panic!("{err}"),
        }
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
    }

    /// The full key of the matched rule, or a marker for the other outcomes.
    fn hit(index: &Index, domain: &str, pairs: &[(&str, &str)]) -> String {
        match index.lookup(domain, &entries(pairs)) {
            Lookup::UnknownDomain => "<unknown domain>".to_owned(),
            Lookup::NoMatch => "<no match>".to_owned(),
            Lookup::Matched(m) => m.rule.full_key.clone(),
        }
    }

    fn limit(index: &Index, domain: &str, pairs: &[(&str, &str)]) -> Limit {
        match index.lookup(domain, &entries(pairs)) {
            Lookup::Matched(Match {
                rule:
                    Rule {
                        policy: Policy::Limited(limits),
                        ..
                    },
                ..
            }) => limits[0].clone(),
            other => panic!("expected a limited match, got {other:?}"),
        }
    }

    const NESTED: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: second, requests_per_unit: 3}
";

    #[test]
    fn request_depth_must_equal_rule_depth() {
        let index = index(NESTED);
        assert_eq!(hit(&index, "d", &[("a", "1")]), "d.a");
        // `b` has no rate_limit: a request ending there matches nothing.
        assert_eq!(hit(&index, "d", &[("a", "1"), ("b", "2")]), "<no match>");
        assert_eq!(
            hit(&index, "d", &[("a", "1"), ("b", "2"), ("c", "3")]),
            "d.a.b.c"
        );
        // Deeper than the tree: the limit of an intermediate node is ignored.
        assert_eq!(
            hit(
                &index,
                "d",
                &[("a", "1"), ("b", "2"), ("c", "3"), ("e", "4")]
            ),
            "<no match>"
        );
    }

    #[test]
    fn node_with_limit_and_children_serves_both_depths() {
        let index = index(
            "
domain: d
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 20}
",
        );
        assert_eq!(limit(&index, "d", &[("foo", "x")]).requests_per_unit, 10);
        assert_eq!(
            limit(&index, "d", &[("foo", "x"), ("bar", "y")]).requests_per_unit,
            20
        );
    }

    #[test]
    fn exact_beats_wildcard_beats_default() {
        let index = index(
            "
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/login
    rate_limit: {unit: second, requests_per_unit: 3}
",
        );
        assert_eq!(
            hit(&index, "d", &[("path", "/api/login")]),
            "d.path_/api/login"
        );
        assert_eq!(hit(&index, "d", &[("path", "/api/users")]), "d.path_/api/*");
        assert_eq!(hit(&index, "d", &[("path", "/static/x")]), "d.path");
        assert_eq!(hit(&index, "d", &[("other", "/api/x")]), "<no match>");
    }

    #[test]
    fn first_wildcard_in_config_order_wins() {
        let index = index(
            "
domain: d
descriptors:
  - key: k
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: a*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: abc*
    rate_limit: {unit: second, requests_per_unit: 3}
",
        );
        assert_eq!(hit(&index, "d", &[("k", "abcd")]), "d.k_ab*");
        assert_eq!(hit(&index, "d", &[("k", "axyz")]), "d.k_a*");
        // The literal pattern text is an exact hit on its own node.
        assert_eq!(hit(&index, "d", &[("k", "abc*")]), "d.k_abc*");
    }

    #[test]
    fn wildcard_positions() {
        let index = index(
            "
domain: d
descriptors:
  - key: start
    value: '*.example.com'
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: middle
    value: /api/*/action
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: end
    value: files/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: repeated
    value: a*b*c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: star
    value: '*'
    rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        let matches = |key: &str, value: &str| hit(&index, "d", &[(key, value)]) != "<no match>";
        assert!(matches("start", "www.example.com"));
        assert!(matches("start", ".example.com"));
        assert!(!matches("start", "example.com"));
        assert!(matches("middle", "/api/v1/action"));
        assert!(matches("middle", "/api//action"));
        assert!(matches("middle", "/api/a/b/action"));
        assert!(!matches("middle", "/api/v1/other"));
        assert!(matches("end", "files/"));
        assert!(matches("end", "files/a/b"));
        assert!(!matches("end", "file"));
        assert!(matches("repeated", "abc"));
        assert!(matches("repeated", "aXbYc"));
        assert!(matches("repeated", "abbcbc"));
        assert!(!matches("repeated", "acb"));
        assert!(matches("star", ""));
        assert!(matches("star", "anything"));
    }

    #[test]
    fn wildcard_does_not_cross_the_key_value_boundary() {
        // The reference would match `a_b_x` against `a_b*` (see module docs).
        let index = index(
            "
domain: d
descriptors:
  - key: a
    value: b*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        assert_eq!(hit(&index, "d", &[("a_b", "x")]), "<no match>");
        assert_eq!(hit(&index, "d", &[("a_b", "c")]), "<no match>");
        assert_eq!(hit(&index, "d", &[("a", "b_c")]), "d.a_b_c");
    }

    #[test]
    fn no_backtracking_to_the_default_node() {
        let index = index(
            "
domain: d
descriptors:
  - key: k
    value: special
    descriptors:
      - key: x
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    descriptors:
      - key: y
        rate_limit: {unit: second, requests_per_unit: 2}
",
        );
        assert_eq!(hit(&index, "d", &[("k", "other"), ("y", "1")]), "d.k.y");
        // `k=special` matched exactly and has no `y` child: the walk stops.
        assert_eq!(
            hit(&index, "d", &[("k", "special"), ("y", "1")]),
            "<no match>"
        );
        assert_eq!(
            hit(&index, "d", &[("k", "special"), ("x", "only")]),
            "d.k_special.x_only"
        );
    }

    #[test]
    fn specific_value_beats_default() {
        let index = index(
            "
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
",
        );
        assert_eq!(
            limit(&index, "edge", &[("remote_address", "50.0.0.5")]).requests_per_unit,
            0
        );
        assert_eq!(
            limit(&index, "edge", &[("remote_address", "50.0.0.6")]).requests_per_unit,
            10
        );
    }

    #[test]
    fn unlimited_matches_without_a_limit() {
        let index = index(
            "
domain: d
descriptors:
  - key: internal
    rate_limit: {unlimited: true}
",
        );
        match index.lookup("d", &entries(&[("internal", "x")])) {
            Lookup::Matched(m) => assert_eq!(m.rule.policy, Policy::Unlimited),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_domain_and_empty_entries() {
        let index = index(NESTED);
        assert!(index.has_domain("d"));
        assert!(!index.has_domain("other"));
        assert_eq!(hit(&index, "other", &[("a", "1")]), "<unknown domain>");
        assert_eq!(hit(&index, "d", &[]), "<no match>");
        assert_eq!(hit(&Index::empty(), "d", &[("a", "1")]), "<unknown domain>");
    }

    const SHARED: &str = "
domain: d
descriptors:
  - key: path
    value: files/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: docs/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 7}
";

    #[test]
    fn share_threshold_substitutes_the_pattern_from_an_ancestor() {
        let index = index(SHARED);
        let request = entries(&[("path", "files/a.txt"), ("user", "bob")]);
        let Lookup::Matched(m) = index.lookup("d", &request) else {
            panic!("no match");
        };
        assert_eq!(m.rule.full_key, "d.path_files/*.user");
        assert_eq!(m.shared, vec![(0, "files/*")]);

        let Lookup::Matched(m) = index.lookup("d", &entries(&[("path", "docs/x")])) else {
            panic!("no match");
        };
        assert_eq!(m.shared, vec![(0, "docs/*")]);
    }

    #[test]
    fn no_share_threshold_means_no_substitution() {
        let index = index(
            "
domain: d
descriptors:
  - key: path
    value: files/*
    rate_limit: {unit: minute, requests_per_unit: 5}
",
        );
        let Lookup::Matched(m) = index.lookup("d", &entries(&[("path", "files/a")])) else {
            panic!("no match");
        };
        assert!(m.shared.is_empty());
    }

    fn stats(index: &Index, pairs: &[(&str, &str)]) -> String {
        let request = entries(pairs);
        match index.lookup("d", &request) {
            Lookup::Matched(m) => m.stats_key(&request),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stats_key_defaults_to_the_config_path() {
        let index = index(NESTED);
        assert_eq!(
            stats(&index, &[("a", "1"), ("b", "2"), ("c", "3")]),
            "d.a.b.c"
        );
        let index = index_of(&[("w.yaml", SHARED)], false);
        assert_eq!(
            stats(&index, &[("path", "files/a"), ("user", "u")]),
            "d.path_files/*.user"
        );
    }

    #[test]
    fn stats_key_with_detailed_metric_uses_runtime_values() {
        let index = index(
            "
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        value: fixed
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: c
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        assert_eq!(
            stats(&index, &[("a", "x"), ("b", "fixed")]),
            "d.a_x.b_fixed"
        );
        // The reference writes `key_` even for an empty runtime value.
        assert_eq!(stats(&index, &[("a", ""), ("c", "y")]), "d.a_.c_y");
    }

    #[test]
    fn stats_key_with_detailed_metric_keeps_shared_patterns() {
        let index = index(
            "
domain: d
descriptors:
  - key: path
    value: files/*
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        assert_eq!(
            stats(&index, &[("path", "files/x"), ("user", "bob")]),
            "d.path_files/*.user_bob"
        );
        assert_eq!(
            stats(&index, &[("path", "files/x"), ("user", "")]),
            "d.path_files/*.user"
        );
    }

    #[test]
    fn stats_key_with_value_to_metric_includes_unspecified_values() {
        let index = index(
            "
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        value_to_metric: true
        descriptors:
          - key: path
            value: /api/*
            value_to_metric: true
            rate_limit: {unit: second, requests_per_unit: 1}
          - key: path
            value: /static/*
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: shared
    value: s*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        // Default and wildcard levels show the runtime value; the exact level
        // shows its (equal) config value.
        assert_eq!(
            stats(
                &index,
                &[("route", "r1"), ("method", "GET"), ("path", "/api/v1")]
            ),
            "d.route_r1.method_GET.path_/api/v1"
        );
        // A wildcard node without the flag keeps its pattern.
        assert_eq!(
            stats(
                &index,
                &[("route", "r1"), ("method", "GET"), ("path", "/static/a")]
            ),
            "d.route_r1.method_GET.path_/static/*"
        );
        // An empty runtime value leaves the bare key.
        assert_eq!(
            stats(
                &index,
                &[("route", ""), ("method", "GET"), ("path", "/api/v")]
            ),
            "d.route.method_GET.path_/api/v"
        );
        // share_threshold wins over value_to_metric.
        assert_eq!(stats(&index, &[("shared", "sx")]), "d.shared_s*");
    }

    #[test]
    fn merged_domains_combine_descriptors() {
        let index = index_of(
            &[
                (
                    "a.yaml",
                    "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
                (
                    "b.yaml",
                    "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
                ),
            ],
            true,
        );
        assert_eq!(hit(&index, "d", &[("a", "x")]), "d.a");
        assert_eq!(hit(&index, "d", &[("b", "x")]), "d.b");
        let keys: Vec<_> = index.rules().map(|rule| rule.full_key.as_str()).collect();
        assert_eq!(keys, ["d.a", "d.b"]);
        assert_eq!(
            index.summaries(),
            [DomainSummary {
                domain: "d".to_owned(),
                descriptors: 2,
                rules: 2
            }]
        );
    }

    #[test]
    fn units_are_case_insensitive_and_multiplied() {
        let index = index(
            "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: MINUTE, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: Hour, requests_per_unit: 1, unit_multiplier: 3, algorithm: fixed_window}
",
        );
        let a = limit(&index, "d", &[("a", "")]);
        assert_eq!(a.unit, Unit::Minute);
        assert_eq!(a.unit_multiplier.get(), 1);
        assert_eq!(a.window_secs(), 60);
        assert_eq!(a.algorithm, Algorithm::FixedWindow);
        let b = limit(&index, "d", &[("b", "")]);
        assert_eq!(b.unit, Unit::Hour);
        assert_eq!(b.unit_multiplier.get(), 3);
        assert_eq!(b.window_secs(), 3 * 3_600);
    }

    #[test]
    fn summaries_and_rules_are_sorted_by_domain() {
        let index = index_of(
            &[
                (
                    "1.yaml",
                    "domain: zeta\ndescriptors:\n  - key: z\n    rate_limit: {unlimited: true}\n",
                ),
                ("2.yaml", NESTED),
                ("3.yaml", "domain: alpha\n"),
            ],
            false,
        );
        let domains: Vec<_> = index.summaries().into_iter().map(|s| s.domain).collect();
        assert_eq!(domains, ["alpha", "d", "zeta"]);
        let summary = &index.summaries()[1];
        assert_eq!((summary.descriptors, summary.rules), (3, 2));
        let keys: Vec<_> = index.rules().map(|rule| rule.full_key.as_str()).collect();
        assert_eq!(keys, ["d.a", "d.a.b.c", "zeta.z"]);
    }

    /// Plain recursive glob matcher: the specification `Pattern` must meet.
    fn reference_match(pattern: &[u8], value: &[u8]) -> bool {
        match pattern.split_first() {
            None => value.is_empty(),
            Some((b'*', rest)) => {
                reference_match(rest, value)
                    || (!value.is_empty() && reference_match(pattern, &value[1..]))
            }
            Some((c, rest)) => value.first() == Some(c) && reference_match(rest, &value[1..]),
        }
    }

    proptest! {
        #[test]
        fn pattern_agrees_with_a_recursive_matcher(
            pattern in "[ab*]{0,8}",
            value in "[ab]{0,10}",
        ) {
            let expected = reference_match(pattern.as_bytes(), value.as_bytes());
            let actual = match Pattern::new(&pattern) {
                Some(compiled) => compiled.matches(&value),
                None => pattern == value,
            };
            prop_assert_eq!(actual, expected);
        }

        #[test]
        fn pattern_never_panics_on_unicode(pattern in "\\PC{0,6}\\*\\PC{0,6}", value in "\\PC{0,12}") {
            let compiled = Pattern::new(&pattern).unwrap();
            let _ = compiled.matches(&value);
        }
    }
}
