//! The RLQS demand registry on Redis: one hash per bucket
//! (`keys::demand_registry`), updated by `scripts/rlqs_demand.lua`. One
//! report is one round trip: one script call for all its buckets on a
//! standalone or Sentinel Redis; on a Cluster one call per bucket (each in
//! its own slot), all sent at once.

use super::RedisStore;
use super::connection::{Connection, no_connection};
use crate::algorithm::quota_split as split;
use crate::clock::UnixMillis;
use crate::store::rlqs::{
    DemandRegistry, DemandReport, Grant, MAX_MEMBERS, Member, live, millis, parse_member,
};
use crate::store::{CounterId, StoreError};
use redis::{RedisResult, Script};
use std::sync::LazyLock;
use std::time::Duration;

/// `scripts/rlqs_demand.lua`: measure, target and grant, per bucket.
static DEMAND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rlqs_demand.lua")));

impl RedisStore {
    /// One script call over `reports` (all in one slot, or a Pool).
    async fn demand_call(
        &self,
        connection: &Connection,
        member: &str,
        reports: &[DemandReport],
        now: UnixMillis,
        stale_ms: u64,
    ) -> RedisResult<Vec<Grant>> {
        let mut invocation = DEMAND.prepare_invoke();
        invocation
            .arg(member)
            .arg(now.0)
            .arg(stale_ms.max(1))
            .arg(MAX_MEMBERS)
            .arg(split::UNITS)
            .arg(split::FLOOR_UNITS);
        for report in reports {
            invocation
                .key(self.inner.keys.demand_registry(&report.id))
                .arg(report.requests)
                .arg(u8::from(report.leave));
        }
        let replies: Vec<Vec<i64>> = match connection {
            Connection::Pool(pool) => {
                let mut conn = pool.pick().ok_or_else(no_connection)?;
                invocation.invoke_async(&mut conn).await?
            }
            Connection::Cluster(cluster) => {
                invocation.invoke_async(&mut cluster.conn.clone()).await?
            }
        };
        if replies.len() != reports.len() {
            return Err(super::reply::bad_reply(format!(
                "{} demand replies for {} buckets",
                replies.len(),
                reports.len()
            )));
        }
        replies
            .into_iter()
            .map(|reply| match reply.as_slice() {
                [units, members, admitted] => Ok(Grant {
                    units: u64::try_from(*units).unwrap_or(0).min(split::UNITS),
                    members: u64::try_from(*members).unwrap_or(0),
                    admitted: *admitted == 1,
                }),
                other => Err(super::reply::bad_reply(format!("demand reply {other:?}"))),
            })
            .collect()
    }
}

impl DemandRegistry for RedisStore {
    async fn report_demand(
        &self,
        member: &str,
        reports: &[DemandReport],
        now: UnixMillis,
        stale: Duration,
    ) -> Result<Vec<Grant>, StoreError> {
        if reports.is_empty() {
            return Ok(Vec::new());
        }
        let stale_ms = millis(stale);
        let call = async {
            let connection = self.connection().await;
            match &*connection {
                Connection::Pool(_) => {
                    self.demand_call(&connection, member, reports, now, stale_ms)
                        .await
                }
                Connection::Cluster(_) => {
                    let calls = reports.iter().map(|report| {
                        self.demand_call(
                            &connection,
                            member,
                            std::slice::from_ref(report),
                            now,
                            stale_ms,
                        )
                    });
                    let mut grants = Vec::with_capacity(reports.len());
                    for result in futures_util::future::join_all(calls).await {
                        grants.extend(result?);
                    }
                    Ok(grants)
                }
            }
        };
        match tokio::time::timeout(self.inner.config.timeout, call).await {
            Ok(result) => result.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    async fn members(
        &self,
        id: &CounterId,
        now: UnixMillis,
        stale: Duration,
    ) -> Result<Vec<Member>, StoreError> {
        let key = self.inner.keys.demand_registry(id);
        let call = async {
            let connection = self.connection().await;
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(&key);
            let pairs: Vec<(String, String)> = match &*connection {
                Connection::Pool(pool) => {
                    let mut conn = pool.pick().ok_or_else(no_connection)?;
                    cmd.query_async(&mut conn).await?
                }
                Connection::Cluster(cluster) => cmd.query_async(&mut cluster.conn.clone()).await?,
            };
            Ok::<_, redis::RedisError>(pairs)
        };
        let pairs = match tokio::time::timeout(self.inner.config.timeout, call).await {
            Ok(result) => result.map_err(StoreError::from)?,
            Err(_) => return Err(StoreError::Timeout),
        };
        Ok(live(
            pairs
                .into_iter()
                .filter_map(|(name, value)| parse_member(name, &value)),
            now,
            millis(stale),
        ))
    }
}
