//! The validated, immutable descriptor index and its per-request lookup.
//!
//! Owns: the prebuilt per-domain tree (the rule types it hands out are in
//! `rule`) and the matching semantics of the reference
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

pub(crate) use super::rule::Metadata;
pub(crate) use super::rule::{Algorithm, Limit, PathStep, Policy, Rule, SlotKeys, TableUse};
use crate::descriptor::Entry;
use std::collections::HashMap;

/// The maps of the index hold names and values from rule files, looked up
/// with a caller's strings on every request: a fast keyed hash (callers add
/// nothing to them, so none can grow a probe chain).
type FastHash = foldhash::fast::RandomState;
use std::sync::Arc;

/// Shared, atomically swappable rule index: reloads store a new `Arc<Index>`
/// and each request reads it once.
pub(crate) type SharedIndex = Arc<arc_swap::ArcSwap<Index>>;

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
    /// The domain's secret keys ([`Index::secret_keys`]).
    pub secret_keys: &'a [Box<str>],
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
    ///
    /// Runtime values of secret keys are written as `redactor` shows them.
    pub fn stats_key(&self, entries: &[Entry], redactor: &super::Redactor) -> String {
        self.stats_key_cow(entries, redactor).into_owned()
    }

    /// [`Match::stats_key`] without allocating when the key is the rule's
    /// configured path (no `detailed_metric`, no `value_to_metric`), the
    /// common case on the request path.
    pub fn stats_key_cow(
        &self,
        entries: &[Entry],
        redactor: &super::Redactor,
    ) -> std::borrow::Cow<'a, str> {
        let rule = self.rule;
        if !rule.detailed_metric && !rule.path.iter().any(|step| step.value_to_metric) {
            return std::borrow::Cow::Borrowed(&rule.full_key);
        }
        std::borrow::Cow::Owned(self.runtime_stats_key(entries, redactor))
    }

    fn runtime_stats_key(&self, entries: &[Entry], redactor: &super::Redactor) -> String {
        fn shown<'e>(
            redactor: &super::Redactor,
            keys: &[Box<str>],
            entry: &'e Entry,
        ) -> std::borrow::Cow<'e, str> {
            redactor.show(keys, &entry.key, &entry.value)
        }
        let shown = |entry| shown(redactor, self.secret_keys, entry);
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
                    key.push_str(&shown(entry));
                }
            }
            return key;
        }
        for (index, (entry, step)) in entries.iter().zip(&rule.path).enumerate() {
            key.push('.');
            key.push_str(&step.key);
            let config_value = step.value.as_deref();
            let text = if let Some(pattern) = self.shared_at(index) {
                Some(std::borrow::Cow::Borrowed(pattern))
            } else if step.value_to_metric && (config_value.is_none() || step.is_wildcard()) {
                Some(shown(entry)).filter(|_| !entry.value.is_empty())
            } else {
                config_value.map(std::borrow::Cow::Borrowed)
            };
            if let Some(text) = text {
                key.push('_');
                key.push_str(&text);
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

/// How [`Level::select`] chose a node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Selected<'a> {
    /// The node whose value equals the entry's.
    Exact,
    /// The first wildcard node whose pattern matches.
    Wildcard(&'a Pattern),
    /// The key-only node.
    Default,
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
    exact: HashMap<Box<str>, usize, FastHash>,
    /// Wildcard nodes in config order.
    wildcards: Vec<(Pattern, usize)>,
    /// The key-only node.
    default: Option<usize>,
}

/// One level of the tree: nodes grouped by key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Level {
    keys: HashMap<Box<str>, KeyNodes, FastHash>,
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
        self.select_how(entry).map(|(node, _)| node)
    }

    /// [`Level::select`], also saying how the node was chosen.
    fn select_how(&self, entry: &Entry) -> Option<(&Node, Selected<'_>)> {
        let group = self.keys.get(entry.key.as_str())?;
        let (id, how) = match group.exact.get(entry.value.as_str()) {
            Some(&id) => (id, Selected::Exact),
            None => match group
                .wildcards
                .iter()
                .find(|(pattern, _)| pattern.matches(&entry.value))
            {
                Some((pattern, id)) => (*id, Selected::Wildcard(pattern)),
                None => (group.default?, Selected::Default),
            },
        };
        Some((group.nodes.get(id)?, how))
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
    /// Keys of its `redact: true` nodes: their values are secret.
    pub(crate) secret_keys: Box<[Box<str>]>,
}

/// The validated, immutable rule set: every domain's prebuilt descriptor
/// tree. Built only by [`load_dir`](super::load_dir) /
/// [`load_sources`](super::load_sources); cheap to share behind an `Arc`.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Domains sorted by name.
    domains: Vec<DomainIndex>,
    /// Position in `domains` by name.
    by_name: HashMap<Box<str>, usize, FastHash>,
    /// The distinct `slot_key` / `release_key` pairs of concurrency limits:
    /// the entries a descriptor may carry after its rule's own.
    slot_keys: Vec<SlotKeys>,
    /// Some rule has a leased limit (`lease: true`).
    leased: bool,
    /// Some rule reads a limit table (`table`).
    tabled: bool,
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
        let mut slot_keys: Vec<SlotKeys> = Vec::new();
        let mut leased = false;
        let mut tabled = false;
        for rule in domains.iter().flat_map(|domain| domain.rules.iter()) {
            tabled |= rule.table.is_some();
            if let Policy::Limited(limits) = &rule.policy {
                leased |= limits.iter().any(|l| l.lease);
                for keys in limits.iter().filter_map(|l| l.slot.as_ref()) {
                    if !slot_keys.contains(keys) {
                        slot_keys.push(keys.clone());
                    }
                }
            }
        }
        Self {
            domains,
            by_name,
            slot_keys,
            leased,
            tabled,
        }
    }

    /// Whether some rule reads a limit table: requests read the tables
    /// only then.
    pub(crate) fn has_tables(&self) -> bool {
        self.tabled
    }

    /// Whether some rule has a leased limit (`lease: true`).
    pub(crate) fn has_leases(&self) -> bool {
        self.leased
    }

    /// The `slot_key` / `release_key` pairs of the concurrency limits.
    pub(crate) fn slot_keys(&self) -> &[SlotKeys] {
        &self.slot_keys
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
            Some(rule) => Lookup::Matched(Match {
                rule,
                shared,
                secret_keys: &domain.secret_keys,
            }),
            None => Lookup::NoMatch,
        }
    }

    /// The keys whose values `domain`'s rules mark secret (`redact: true`),
    /// for [`super::Redactor::show`].
    pub fn secret_keys(&self, domain: &str) -> &[Box<str>] {
        self.domain(domain).map_or(&[], |d| &d.secret_keys)
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

mod pattern;
#[cfg(test)]
mod tests;
mod walk;

pub(crate) use pattern::Pattern;
pub(crate) use walk::{StepMatch, Walk};
