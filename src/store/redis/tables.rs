//! Limit tables kept in Redis, shared by every instance: each table's
//! entries in a hash, the tables' versions, a change counter, and a capped
//! log (a stream) of every change, which instances follow and the audit
//! trail reads. Every key carries the hash tag `{floodgate-tables}`, so on
//! a Cluster they live on one node and one script changes them together.
//!
//! This file only moves strings to and from Redis; what an entry means is
//! the tables' own business (`config::table`).

use super::RedisStore;
use super::connection::{Connection, TABLES_TIMEOUT};
use crate::store::StoreError;
use redis::{Cmd, FromRedisValue, Value};
use std::time::Duration;

/// `scripts/table_change.lua`: one change, whole or not at all. Sent with
/// EVAL, source and all: changes are rare, and no NOSCRIPT to recover from.
const CHANGE: &str = include_str!("scripts/table_change.lua");

/// Longest wait for a change (the tables' connections wait as long).
const CHANGE_TIMEOUT: Duration = TABLES_TIMEOUT;
/// Longest wait for one read of the tables (a page of a scan or the log).
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One change to send.
#[derive(Debug)]
pub(crate) struct TableWrite<'a> {
    /// The table.
    pub(crate) table: &'a str,
    /// `put`, `delete` or `import`.
    pub(crate) action: &'a str,
    /// Who: a token's name or `trusted:<address>`.
    pub(crate) who: &'a str,
    /// When, RFC 3339.
    pub(crate) time: &'a str,
    /// The items as the log keeps them (JSON).
    pub(crate) items_json: &'a str,
    /// Key and entry JSON pairs; `None` deletes the key.
    pub(crate) items: &'a [(String, Option<String>)],
    /// Changes the log keeps, at least.
    pub(crate) log_cap: usize,
}

/// What a change became.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TableWritten {
    /// Made: its position in the change log, the table's new version and
    /// each key's entry before it (JSON, `None` when there was none).
    Made {
        /// The change counter after it.
        seq: u64,
        /// The table's version after it.
        version: u64,
        /// Each item's previous entry.
        previous: Vec<Option<String>>,
    },
    /// A key to delete was missing; nothing changed.
    Missing,
}

/// One change as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableLogLine {
    /// The stream entry's id (the cursor to read after).
    pub(crate) id: String,
    /// The change counter at it.
    pub(crate) seq: u64,
    /// Its fields: table, action, who, time, version, items, previous.
    pub(crate) fields: Vec<(String, String)>,
}

impl TableLogLine {
    /// The field `name`, or "".
    pub(crate) fn field(&self, name: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The keys, under the store's `CACHE_KEY_PREFIX`.
fn key(prefix: &str, name: &str) -> String {
    format!("{prefix}{{floodgate-tables}}:{name}")
}

impl RedisStore {
    fn table_key(&self, name: &str) -> String {
        key(&self.inner.config.key_prefix, name)
    }

    /// Runs `cmd` within `within` on the tables' own connection (routed by
    /// its key on a Cluster).
    async fn table_call<T: FromRedisValue>(
        &self,
        within: Duration,
        cmd: &Cmd,
    ) -> Result<T, StoreError> {
        let Some(connection) = self.inner.connection.load_full() else {
            return Err(StoreError::NotConnected);
        };
        let run = async {
            match &*connection {
                Connection::Pool(pool) => cmd.query_async(&mut pool.tables.clone()).await,
                Connection::Cluster(cluster) => cmd.query_async(&mut cluster.tables.clone()).await,
            }
        };
        match tokio::time::timeout(within, run).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                self.inner.signals.failed(&err);
                Err(err.into())
            }
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Makes one table change in Redis, durable there before it answers.
    ///
    /// # Errors
    /// [`StoreError`]: Redis unreachable, or it refused the script; a
    /// timeout leaves unknown whether the change was made (the log says).
    pub(crate) async fn table_write(
        &self,
        write: &TableWrite<'_>,
    ) -> Result<TableWritten, StoreError> {
        let keys = [
            self.table_key("seq"),
            self.table_key("versions"),
            self.table_key(&format!("t:{}", write.table)),
            self.table_key("log"),
        ];
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CHANGE).arg(keys.len());
        for key in &keys {
            cmd.arg(key);
        }
        cmd.arg(write.table)
            .arg(write.action)
            .arg(write.who)
            .arg(write.time)
            .arg(write.log_cap)
            .arg(write.items_json);
        for (key, entry) in write.items {
            cmd.arg(key).arg(entry.as_deref().unwrap_or(""));
        }
        let reply: Value = self.table_call(CHANGE_TIMEOUT, &cmd).await?;
        written(reply, write.items.len())
    }

    /// The change counter: changes made to every table so far (0 when
    /// Redis holds no tables).
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be read.
    pub(crate) async fn table_seq(&self) -> Result<u64, StoreError> {
        let key = self.table_key("seq");
        let seq: Option<u64> = self
            .table_call(READ_TIMEOUT, redis::cmd("GET").arg(&key))
            .await?;
        Ok(seq.unwrap_or(0))
    }

    /// Every table's version, by name.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be read.
    pub(crate) async fn table_versions(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let key = self.table_key("versions");
        self.table_call(READ_TIMEOUT, redis::cmd("HGETALL").arg(&key))
            .await
    }

    /// One page of `table`'s entries from `cursor` (0 first): the next
    /// cursor (0 at the end) and (key, entry JSON) pairs.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be read.
    pub(crate) async fn table_scan(
        &self,
        table: &str,
        cursor: u64,
    ) -> Result<(u64, Vec<(String, String)>), StoreError> {
        let key = self.table_key(&format!("t:{table}"));
        let cmd = redis::cmd("HSCAN")
            .arg(&key)
            .arg(cursor)
            .arg("COUNT")
            .arg(10_000)
            .clone();
        self.table_call(READ_TIMEOUT, &cmd).await
    }

    /// Up to `count` changes of the log after the entry `after` ("0" from
    /// the oldest kept), oldest first.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be read or answers another shape.
    pub(crate) async fn table_log_after(
        &self,
        after: &str,
        count: usize,
    ) -> Result<Vec<TableLogLine>, StoreError> {
        let key = self.table_key("log");
        let from = format!("({after}");
        let cmd = redis::cmd("XRANGE")
            .arg(&key)
            .arg(if after == "0" { "-" } else { from.as_str() })
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .clone();
        let reply: Value = self.table_call(READ_TIMEOUT, &cmd).await?;
        log_lines(reply)
    }

    /// Up to `count` changes of the log before the entry `before` (`None`:
    /// from the newest), newest first.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be read or answers another shape.
    pub(crate) async fn table_log_before(
        &self,
        before: Option<&str>,
        count: usize,
    ) -> Result<Vec<TableLogLine>, StoreError> {
        let key = self.table_key("log");
        let from = before.map_or_else(|| "+".to_owned(), |id| format!("({id}"));
        let cmd = redis::cmd("XREVRANGE")
            .arg(&key)
            .arg(&from)
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .clone();
        let reply: Value = self.table_call(READ_TIMEOUT, &cmd).await?;
        log_lines(reply)
    }
}

fn bad(detail: impl Into<String>) -> StoreError {
    StoreError::BadReply {
        detail: detail.into(),
    }
}

/// The change script's reply.
fn written(reply: Value, items: usize) -> Result<TableWritten, StoreError> {
    let Value::Array(parts) = reply else {
        return Err(bad("table change: not an array"));
    };
    let int = |value: Option<&Value>| match value {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    match int(parts.first()) {
        Some(0) => return Ok(TableWritten::Missing),
        Some(1) => {}
        _ => return Err(bad("table change: unknown answer")),
    }
    let (Some(seq), Some(version)) = (int(parts.get(1)), int(parts.get(2))) else {
        return Err(bad("table change: no seq or version"));
    };
    let joined = match parts.get(3) {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::SimpleString(text)) => text.clone(),
        _ => return Err(bad("table change: no previous entries")),
    };
    let previous: Vec<Option<String>> = joined
        .split('\n')
        .map(|p| (!p.is_empty()).then(|| p.to_owned()))
        .collect();
    if previous.len() != items {
        return Err(bad("table change: previous entries miscounted"));
    }
    Ok(TableWritten::Made {
        seq,
        version,
        previous,
    })
}

/// The entries of an XRANGE or XREVRANGE reply.
fn log_lines(reply: Value) -> Result<Vec<TableLogLine>, StoreError> {
    let Value::Array(entries) = reply else {
        return Err(bad("table log: not an array"));
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let mut lines = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else {
            return Err(bad("table log: entry not an array"));
        };
        let (Some(id), Some(Value::Array(values))) = (parts.first().and_then(text), parts.get(1))
        else {
            return Err(bad("table log: entry without id or fields"));
        };
        let mut fields = Vec::with_capacity(values.len() / 2);
        for pair in values.chunks(2) {
            if let [name, value] = pair
                && let (Some(name), Some(value)) = (text(name), text(value))
            {
                fields.push((name, value));
            }
        }
        let seq = fields
            .iter()
            .find(|(k, _)| k == "seq")
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| bad("table log: entry without seq"))?;
        lines.push(TableLogLine { id, seq, fields });
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag_whatever_the_prefix() {
        assert_eq!(key("", "seq"), "{floodgate-tables}:seq");
        assert_eq!(key("app_", "t:plans"), "app_{floodgate-tables}:t:plans");
    }

    #[test]
    fn a_change_reply_reads_its_previous_entries_in_order() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(7),
            Value::Int(3),
            Value::BulkString(b"{\"requests_per_unit\":5}\n".to_vec()),
        ]);
        assert_eq!(
            written(reply, 2).unwrap(),
            TableWritten::Made {
                seq: 7,
                version: 3,
                previous: vec![Some("{\"requests_per_unit\":5}".to_owned()), None],
            }
        );
        assert_eq!(
            written(Value::Array(vec![Value::Int(0)]), 1).unwrap(),
            TableWritten::Missing
        );
        assert!(written(Value::Int(1), 1).is_err());
    }
}
