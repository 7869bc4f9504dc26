//! CONTRACT STUB — replaced by the config implementation.

use crate::descriptor::{Entry, Unit};
use std::num::NonZeroU32;
use std::sync::Arc;

/// Counting algorithm of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Epoch-aligned fixed window (the reference behaviour).
    #[default]
    FixedWindow,
}

/// A concrete limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Optional name (target of `replaces`, reported in `current_limit.name`).
    pub name: Option<Arc<str>>,
    /// Allowed hits per window.
    pub requests_per_unit: u32,
    /// Unit.
    pub unit: Unit,
    /// Window = unit * multiplier.
    pub unit_multiplier: NonZeroU32,
    /// Algorithm.
    pub algorithm: Algorithm,
}

impl Limit {
    /// Window length in seconds.
    pub fn window_secs(&self) -> u64 {
        self.unit
            .seconds()
            .saturating_mul(u64::from(self.unit_multiplier.get()))
    }
}

/// What a matched node says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Counted against a limit.
    Limited(Limit),
    /// Never limited, never counted.
    Unlimited,
}

/// A rule: node with `rate_limit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Reference full key `domain.k_v.k`.
    pub full_key: String,
    /// Policy.
    pub policy: Policy,
    /// Names of limits this rule replaces.
    pub replaces: Vec<Arc<str>>,
    /// shadow_mode.
    pub shadow_mode: bool,
    /// quota_mode.
    pub quota_mode: bool,
    /// metadata (YAML map as JSON).
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Match.
#[derive(Debug, Clone)]
pub struct Match<'a> {
    /// The rule.
    pub rule: &'a Rule,
    /// share_threshold substitutions: (entry index, wildcard pattern).
    pub shared: Vec<(usize, &'a str)>,
}

/// Lookup result.
#[derive(Debug, Clone)]
pub enum Lookup<'a> {
    /// Domain unknown.
    UnknownDomain,
    /// No rule.
    NoMatch,
    /// Rule found.
    Matched(Match<'a>),
}

/// Summary line per domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSummary {
    /// Domain.
    pub domain: String,
    /// Number of descriptor nodes.
    pub descriptors: usize,
    /// Number of rules.
    pub rules: usize,
}

/// Index.
#[derive(Debug, Clone, Default)]
pub struct Index {}

impl Index {
    /// Empty.
    pub fn empty() -> Self {
        Self::default()
    }
    /// Has domain.
    pub fn has_domain(&self, _domain: &str) -> bool {
        false
    }
    /// Lookup.
    pub fn lookup<'a>(&'a self, _domain: &str, _entries: &[Entry]) -> Lookup<'a> {
        Lookup::UnknownDomain
    }
    /// Summaries.
    pub fn summaries(&self) -> Vec<DomainSummary> {
        Vec::new()
    }
}
