//! The request vocabulary shared by every layer: a domain, descriptors made of
//! entries, per-descriptor overrides and hits, and the time units of a limit.
//!
//! These are plain domain types; proto types never get past `server/`.

use std::fmt;

/// A rate-limit time unit, as named in rule files and in the RLS API.
///
/// MONTH is 30 days and YEAR is 365 days, as in the reference service: windows
/// are epoch-aligned blocks, not calendar periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86400 seconds.
    Day,
    /// 604800 seconds; epoch-aligned, so weeks start on Thursday 00:00 UTC.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Self; 7] = [
        Self::Second,
        Self::Minute,
        Self::Hour,
        Self::Day,
        Self::Week,
        Self::Month,
        Self::Year,
    ];

    /// Length of one unit in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3_600,
            Self::Day => 86_400,
            Self::Week => 604_800,
            Self::Month => 2_592_000,
            Self::Year => 31_536_000,
        }
    }

    /// The proto enum name (`SECOND` … `YEAR`), as proto3 JSON writes it.
    pub const fn proto_name(self) -> &'static str {
        match self {
            Self::Second => "SECOND",
            Self::Minute => "MINUTE",
            Self::Hour => "HOUR",
            Self::Day => "DAY",
            Self::Week => "WEEK",
            Self::Month => "MONTH",
            Self::Year => "YEAR",
        }
    }

    /// The unit of a proto `RateLimitUnit` number; `None` for UNKNOWN (0)
    /// and numbers no unit has.
    pub const fn from_proto_number(n: u64) -> Option<Self> {
        match n {
            1 => Some(Self::Second),
            2 => Some(Self::Minute),
            3 => Some(Self::Hour),
            4 => Some(Self::Day),
            5 => Some(Self::Month),
            6 => Some(Self::Year),
            7 => Some(Self::Week),
            _ => None,
        }
    }

    /// Lowercase name as written in rule files (`second` … `year`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
            Self::Year => "year",
        }
    }

    /// Parses a unit name case-insensitively, as the reference does.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|unit| unit.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A descriptor's `RateLimitOverride` without a usable unit (UNKNOWN or
/// missing): the same answer on gRPC and `/json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "descriptor {index} limit override has unit UNKNOWN; use SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
)]
pub(crate) struct UnknownOverrideUnit {
    /// Position of the descriptor in the request.
    pub index: usize,
}

/// One `key`/`value` pair of a request descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Entry {
    /// Descriptor key, e.g. `remote_address`.
    pub key: String,
    /// Runtime value, e.g. `10.0.0.1`; may be empty.
    pub value: String,
}

impl Entry {
    /// Builds an entry from anything string-like.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A limit carried by the request itself (`RateLimitOverride`), replacing any
/// configured rule for that descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitOverride {
    /// Allowed hits per window; 0 blocks everything.
    pub requests_per_unit: u32,
    /// Window length.
    pub unit: Unit,
}

/// One descriptor of a request: the entries matched against the rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Descriptor {
    /// Hierarchical entries, outermost first.
    pub entries: Vec<Entry>,
    /// Optional limit supplied by the caller instead of the rule files.
    pub limit: Option<RateLimitOverride>,
    /// Per-descriptor hits; when present it wins over the request's value and
    /// 0 means "check without consuming".
    pub hits_addend: Option<u64>,
}

impl Descriptor {
    /// A descriptor of the given `(key, value)` pairs, with no override.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        Self {
            entries: pairs.into_iter().map(|(k, v)| Entry::new(k, v)).collect(),
            limit: None,
            hits_addend: None,
        }
    }
}

/// A whole `ShouldRateLimit` question.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// Rule namespace; must not be empty.
    pub domain: String,
    /// Descriptors, answered in this order; must not be empty.
    pub descriptors: Vec<Descriptor>,
    /// Request-level hits; 0 means 1.
    pub hits_addend: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_case_insensitively() {
        assert_eq!(Unit::parse("SECOND"), Some(Unit::Second));
        assert_eq!(Unit::parse("Minute"), Some(Unit::Minute));
        assert_eq!(Unit::parse("week"), Some(Unit::Week));
        assert_eq!(Unit::parse("minutes"), None);
        assert_eq!(Unit::parse(""), None);
    }

    #[test]
    fn month_and_year_are_fixed_day_counts() {
        assert_eq!(Unit::Month.seconds(), 30 * 86_400);
        assert_eq!(Unit::Year.seconds(), 365 * 86_400);
    }
}
