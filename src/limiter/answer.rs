//! What floodgate answers: the codes, per-descriptor statuses, the whole
//! response and the names of its headers. The vocabulary `pick` and
//! `response` share, so neither imports the other.

use crate::config::{Limit, Metadata};
use crate::descriptor::Unit;
use std::sync::Arc;
use std::time::Duration;

/// Answer for one descriptor, or for the whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or not limited at all).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit that applied to a descriptor, as reported to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The rule's `name`, if it has one.
    pub name: Option<Arc<str>>,
    /// Allowed hits per window.
    pub requests_per_unit: u32,
    /// The rule's unit (a window may span `unit_multiplier` units).
    pub unit: Unit,
}

/// The answer for one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// OK or OVER_LIMIT (after shadow-mode rewriting).
    pub code: Code,
    /// The limit applied, or `None` when no limit matched.
    pub current_limit: Option<CurrentLimit>,
    /// Hits still allowed in this window (`u32::MAX` for unlimited rules).
    pub limit_remaining: u32,
    /// Time until the window resets, when a limit applied.
    pub duration_until_reset: Option<Duration>,
}

impl Status {
    pub(super) const NO_LIMIT: Self = Self {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: 0,
        duration_until_reset: None,
    };

    pub(super) const UNLIMITED: Self = Self {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: u32::MAX,
        duration_until_reset: None,
    };
}

/// The answer to a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// OVER_LIMIT if any (non-quota) descriptor is over its limit.
    pub overall_code: Code,
    /// One status per request descriptor, in request order.
    pub statuses: Vec<Status>,
    /// `RateLimit-*` headers for the most constrained descriptor, when enabled.
    pub response_headers: Vec<(Arc<str>, String)>,
    /// Headers for the request sent upstream (`request_headers_to_add`).
    pub request_headers: Vec<(Arc<str>, String)>,
    /// `RESPONSE_DYNAMIC_METADATA`: the `metadata` of the matched rules whose
    /// descriptors passed (not over the limit, not unlimited, not replaced),
    /// in request order, for the server to merge (first value wins); `None`
    /// when the setting is off.
    pub dynamic_metadata: Option<Vec<Arc<Metadata>>>,
}

/// Names of the three rate-limit response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// Header carrying the limit (`RateLimit-Limit`).
    pub limit: Arc<str>,
    /// Header carrying the remaining hits (`RateLimit-Remaining`).
    pub remaining: Arc<str>,
    /// Header carrying the seconds until reset (`RateLimit-Reset`).
    pub reset: Arc<str>,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            limit: Arc::from("RateLimit-Limit"),
            remaining: Arc::from("RateLimit-Remaining"),
            reset: Arc::from("RateLimit-Reset"),
        }
    }
}

pub(super) fn current_limit(limit: &Limit) -> CurrentLimit {
    CurrentLimit {
        name: limit.name.clone(),
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit,
    }
}
