//! What `/explain` answers: the explanation of a request, each
//! descriptor's walk, verdict, windows and table read, and how requests are
//! shed.

use super::super::answer::{Code, Status};
use super::super::options::FailureMode;
use crate::config::{Limit, StepMatch, TableEntry};
use std::time::Duration;

/// The explanation of a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The overall code the request would get now.
    pub overall_code: Code,
    /// One per request descriptor, in request order.
    pub descriptors: Vec<Explained>,
    /// How requests are shed now, and how many were.
    pub shedding: Shedding,
}

/// How floodgate sheds: a gRPC request whose caller's `grpc-timeout` has
/// passed when it is served (or is within the margin kept back to answer)
/// is answered by `FAILURE_MODE` at once, and counts nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shedding {
    /// What a shed request is answered (`FAILURE_MODE`).
    pub failure_mode: FailureMode,
    /// Requests shed since the process started because their caller's
    /// deadline had passed (`ratelimit_shed_total{reason="deadline"}`).
    pub deadline_total: u64,
    /// Requests shed at admission because the wait for a thread would
    /// have made them late (`ratelimit_shed_total{reason="queue"}`).
    pub queue_total: u64,
}

/// How one request entry was matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The entry's key.
    pub key: String,
    /// The entry's value.
    pub value: String,
    /// How the matcher chose a node for it.
    pub matched: StepMatch,
}

/// What decided a descriptor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A rule's limit decides (the status says whether it is over).
    Limited,
    /// No rule file declares the domain.
    UnknownDomain,
    /// Nothing matched, or the node matched has no limit.
    NoRule,
    /// Another descriptor's rule of the same request `replaces` every limit
    /// of this one.
    Replaced {
        /// The rule (as `/rlconfig` names it) that replaces it.
        by: String,
    },
    /// The rule is `unlimited: true`.
    Unlimited,
    /// The request's own `RateLimitOverride` decides.
    Override,
    /// A limit is over, but shadow mode (of the rule, or of a candidate
    /// limit) lets the descriptor pass.
    Shadow,
    /// Answered over limit from the local over-limit cache.
    Cached,
}

/// One limit of a descriptor's rule, as its counters stand now (before this
/// request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowState {
    /// The limit.
    pub limit: Limit,
    /// Hits counted in its window now (GCRA: burst in use).
    pub count: u64,
    /// Hits it still admits now.
    pub remaining: u64,
    /// Whether it is over its limit now.
    pub over_limit: bool,
    /// When it resets (within) or admits again (over).
    pub reset: Duration,
    /// A leased limit (`lease: true`, on Redis): the unused hits of the
    /// block this instance holds for it (0 when none); `None` otherwise.
    pub lease: Option<u64>,
    /// The name of the store counting it (`default`, `local`, or one of
    /// `STORES_FILE`).
    pub store: String,
}

/// The limit table a descriptor's rule reads, and what it found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRead {
    /// The table's name.
    pub table: String,
    /// The descriptor entry whose value keys it (`table_key`).
    pub key: String,
    /// That entry's value in the request (`None`: the descriptor has none).
    pub value: Option<String>,
    /// The entry used; `None`: the rule's own limits (its defaults).
    pub entry: Option<TableEntry>,
}

/// The explanation of one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    /// One per request entry: the matcher's walk.
    pub steps: Vec<Step>,
    /// The rule matched, as `/rlconfig` names it (`domain.key_value…`).
    pub rule: Option<String>,
    /// What decided the answer.
    pub verdict: Verdict,
    /// The status the same request would get now.
    pub status: Status,
    /// Each limit of the rule (or the override) as it stands now.
    pub windows: Vec<WindowState>,
    /// The limit table the rule reads (`table`), if it reads one.
    pub table: Option<TableRead>,
}
