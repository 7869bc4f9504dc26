//! RLQS settings and the protocol constants they rest on.

use super::state::StreamBounds;
use std::time::Duration;

/// How often Envoy 1.40 reports every bucket it knows, whatever
/// `reporting_interval` says.
pub(crate) const ENVOY_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The gRPC metadata an Envoy may name itself with
/// (`grpc_service.initial_metadata`), so a reconnecting Envoy keeps its
/// place in every bucket's split instead of joining as a newcomer.
pub(crate) const CLIENT_ID_HEADER: &str = "rlqs-client-id";

/// Longest client id taken from [`CLIENT_ID_HEADER`]; a longer one is
/// ignored (the stream gets a name of its own).
pub(crate) const MAX_CLIENT_ID_BYTES: usize = 128;

/// The shortest TTL sent: Envoy 1.40 expires anything under a second at
/// once.
pub(crate) const MIN_ASSIGNMENT_TTL: Duration = Duration::from_secs(1);

/// What a bucket that matches no rule (or a domain without rules) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// ALLOW_ALL, as RLS answers OK for an unmatched descriptor.
    #[default]
    AllowAll,
    /// DENY_ALL.
    DenyAll,
}

/// RLQS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsOptions {
    /// `RLQS_UNMATCHED_BEHAVIOR`.
    pub unmatched: Unmatched,
    /// `RLQS_ASSIGNMENT_TTL`: how long an Envoy keeps an assignment without
    /// hearing from floodgate (at least `MIN_ASSIGNMENT_TTL`).
    pub assignment_ttl: Duration,
    /// `RLQS_IDLE_TIMEOUT`: a bucket reporting no request for this long is
    /// abandoned.
    pub idle_timeout: Duration,
    /// Bounds on bucket ids, the domain and buckets per stream.
    pub bounds: StreamBounds,
    /// `SHADOW_MODE`: nothing is ever denied.
    pub global_shadow_mode: bool,
}

impl Default for RlqsOptions {
    fn default() -> Self {
        Self {
            unmatched: Unmatched::AllowAll,
            assignment_ttl: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
            bounds: StreamBounds::default(),
            global_shadow_mode: false,
        }
    }
}

impl RlqsOptions {
    /// The TTL sent, never under `MIN_ASSIGNMENT_TTL`.
    pub fn ttl(&self) -> Duration {
        self.assignment_ttl.max(MIN_ASSIGNMENT_TTL)
    }

    /// How long a member stays in a bucket's split without reporting: its
    /// assignment's TTL, plus one report interval for the message in flight.
    pub fn stale_after(&self) -> Duration {
        self.ttl().saturating_add(ENVOY_REPORT_INTERVAL)
    }
}
