//! The rule types the limiter reads: a matched [`Rule`] with its
//! [`Policy`] (its [`Limit`]s, or unlimited), each limit's [`Algorithm`],
//! and the config path a rule was found at.

use crate::descriptor::Unit;
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
    /// Requests in flight: `requests_per_unit` slots, each released by the
    /// request's stream-done call or freed one window after its acquire.
    Concurrency,
}

impl Algorithm {
    /// Every algorithm, in the order they are listed in error messages.
    pub const ALL: [Self; 5] = [
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingLog,
        Self::Gcra,
        Self::Concurrency,
    ];

    /// Name as written in rule files.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindow => "sliding_window",
            Self::SlidingLog => "sliding_log",
            Self::Gcra => "gcra",
            Self::Concurrency => "concurrency",
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
    /// `shadow_mode` on this limit (extension): a candidate limit, decided
    /// alone on counters of its own, that never makes the answer
    /// OVER_LIMIT; its would-be denials count in the rule's `shadow_mode`
    /// metric. A rule lists its enforced limits first, then these.
    pub shadow_mode: bool,
    /// `calendar: true` (extension, fixed windows of a day, week, month or
    /// year): the calendar the windows follow.
    pub calendar: Option<&'static crate::algorithm::calendar::Calendar>,
    /// `algorithm: concurrency`: the entries that name a request's slot
    /// and mark its release.
    pub slot: Option<SlotKeys>,
    /// `lease: true` (extension): on Redis, an instance admits from blocks
    /// of hits it took from the store ahead of demand (never more than the
    /// limit across instances; see `limiter::lease`).
    pub lease: bool,
    /// `store: NAME` (extension): the store counting this limit, by its
    /// place among the process's stores (0: `default`).
    pub store: u8,
    /// `partition_allowance` (extension, leased fixed windows): hits an
    /// instance cut off from the limit's store admits per window on its
    /// own once its blocks run out (0: none; the store's `failure_mode`
    /// answers).
    pub partition_allowance: u64,
}

/// The descriptor entries of a concurrency limit (`slot_key`,
/// `release_key`): a request's descriptor carries, after the rule's own
/// entries, `slot_key` = the request's id (Envoy: `x-request-id`) to take
/// a slot, and then `release_key` (any value) to free it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlotKeys {
    /// The entry holding the request's id.
    pub slot_key: Arc<str>,
    /// The entry marking a release.
    pub release_key: Arc<str>,
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
    Unlimited {
        /// `requests_per_unit` as written (0 when absent): never enforced,
        /// only shown by `/rlconfig`, as the reference shows it.
        requests_per_unit: u32,
    },
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

/// A node's free-form `metadata`: returned, merged, in a response's dynamic
/// metadata (`RESPONSE_DYNAMIC_METADATA`). Keys are not checked.
pub(crate) type Metadata = serde_json::Map<String, serde_json::Value>;

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
    /// `metadata`: the node's YAML map, converted once at load and shared;
    /// `None` when absent or empty (as the reference, which drops an empty
    /// map).
    pub metadata: Option<Arc<Metadata>>,
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
    /// The store operations its limits become, each with the index of the
    /// first limit it covers ([`specs`](super::specs::specs)), built once
    /// at load; empty when unlimited.
    pub specs: Vec<(crate::algorithm::Spec, usize)>,
    /// `table` (extension): the limit table whose entries replace these
    /// limits per value.
    pub table: Option<Arc<TableUse>>,
}

/// How a rule reads a limit table: its name, the descriptor entry whose
/// value is the table's key, and the rule's limits as written, which an
/// entry is laid over (so an entry is checked exactly as a rule is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableUse {
    /// The table's name.
    pub name: Arc<str>,
    /// The descriptor entry whose value keys the table.
    pub key: Arc<str>,
    /// The rule's `rate_limit` (one) or `rate_limits` (several), with
    /// `table` and `table_key` cleared.
    pub(crate) template: Vec<super::model::RateLimit>,
    /// Written as `rate_limits`: entries are `{"rate_limits": [...]}`.
    pub(crate) several: bool,
    /// The stores the template names (`store:`), for its entries' limits
    /// to count where the rule's do.
    pub(crate) stores: Vec<StoreInfo>,
}

/// Longest table name: names travel in API paths and metric labels.
pub(crate) const MAX_TABLE_NAME: usize = 64;

/// Whether `name` may name a table: 1 to [`MAX_TABLE_NAME`] ASCII
/// letters, digits, `_`, `-` or `.`, so it needs no escaping in a path, a
/// file or a label.
pub(crate) fn is_table_name(name: &str) -> bool {
    (1..=MAX_TABLE_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A store rules may name (`STORES_FILE`, and `local`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    /// The name rules give (`store: NAME`).
    pub name: String,
    /// Its place among the process's stores (0: `default`).
    pub index: u8,
    /// It counts fixed windows only (memcached).
    pub fixed_windows_only: bool,
}
