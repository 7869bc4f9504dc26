//! The RLQS demand registry: per bucket, the Envoys (members) reporting it,
//! each with its measured demand and the share of the budget it holds.
//!
//! Shared by every floodgate instance on one store, so instances split one
//! budget. One report of one Envoy is one round trip, whatever its number
//! of buckets; each bucket's update is atomic (a Lua script on Redis, one
//! lock in memory): the member's demand is measured on floodgate's clock
//! (requests since its last report over the time since then, at least a
//! second), its target computed by [`quota_split::targets`](crate::algorithm::quota_split::targets) and its grant by
//! [`quota_split::grant`](crate::algorithm::quota_split::grant), so the grants of all members never add up to more
//! than the budget. Members not seen for `stale` are dropped: by then the
//! assignments they held have expired in their Envoys.
//!
//! Knows bucket identities and members, not rules or Envoy's protocol.

use super::{CounterId, StoreError};
use crate::clock::UnixMillis;
use std::future::Future;
use std::time::Duration;

/// Most members one bucket tracks; a member past it is not admitted (and
/// gets no share) until others go stale.
pub(crate) const MAX_MEMBERS: usize = 1_024;

/// Largest request count one report may carry (more is counted as this).
pub(crate) const MAX_REPORTED_REQUESTS: u64 = 1_000_000_000;

/// One member's report on one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemandReport {
    /// The bucket's identity (domain and its descriptor, escaped).
    pub id: CounterId,
    /// Requests seen since the member's last report (allowed + denied).
    pub requests: u64,
    /// The member leaves the bucket (it was abandoned): its grant is
    /// released.
    pub leave: bool,
}

/// What the registry answers for one [`DemandReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Units of the budget ([`quota_split::UNITS`](crate::algorithm::quota_split::UNITS)) the member now holds.
    pub units: u64,
    /// Live members of the bucket, this one included.
    pub members: u64,
    /// False when the bucket is full (`MAX_MEMBERS`): nothing was recorded.
    pub admitted: bool,
}

/// One member as the registry holds it (for the operator view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's name (an Envoy's client id, or its stream's).
    pub name: String,
    /// Measured demand in thousandths of a request per second.
    pub demand_milli: u64,
    /// Units of the budget it holds.
    pub units: u64,
    /// When it last reported.
    pub last_seen: UnixMillis,
}

/// Where the demand registry lives.
pub trait DemandRegistry: Send + Sync {
    /// Records one report of `member` on every bucket of `reports` at
    /// `now`, in one round trip; one [`Grant`] per report, in order.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached; then nothing is
    /// known about which buckets were updated.
    fn report_demand(
        &self,
        member: &str,
        reports: &[DemandReport],
        now: UnixMillis,
        stale: Duration,
    ) -> impl Future<Output = Result<Vec<Grant>, StoreError>> + Send;

    /// The live members of bucket `id`, by name (reads only).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached.
    fn members(
        &self,
        id: &CounterId,
        now: UnixMillis,
        stale: Duration,
    ) -> impl Future<Output = Result<Vec<Member>, StoreError>> + Send;
}

/// Milliseconds of `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Demand in thousandths of a request per second: `requests` over the time
/// since `previous` (at least a second; a first report counts over one).
pub(crate) fn demand_milli(requests: u64, previous: Option<UnixMillis>, now: UnixMillis) -> u64 {
    let interval = previous
        .map_or(1_000, |seen| now.0.saturating_sub(seen.0))
        .max(1_000);
    let demand = u128::from(requests.min(MAX_REPORTED_REQUESTS)) * 1_000_000 / u128::from(interval);
    u64::try_from(demand).unwrap_or(u64::MAX)
}

/// The members seen within `stale_ms` of `now`, sorted by name.
pub(crate) fn live(
    members: impl Iterator<Item = Member>,
    now: UnixMillis,
    stale_ms: u64,
) -> Vec<Member> {
    let mut members: Vec<Member> = members
        .filter(|member| member.last_seen.0.saturating_add(stale_ms) > now.0)
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    members
}

/// Reads one registry value `"<demand_milli>:<units>:<last_seen_ms>"`.
pub(crate) fn parse_member(name: String, value: &str) -> Option<Member> {
    let mut parts = value.split(':').map(str::parse::<u64>);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Ok(demand_milli)), Some(Ok(units)), Some(Ok(seen)), None) => Some(Member {
            name,
            demand_milli,
            units,
            last_seen: UnixMillis(seen),
        }),
        _ => None,
    }
}
