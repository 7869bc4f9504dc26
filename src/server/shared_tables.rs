//! Limit tables shared through Redis: the API's changes made there (durable
//! in Redis before the API answers), and every instance following Redis's
//! change log into its own copy, which is all decisions ever read.
//!
//! Following is a poll of the change counter every [`FOLLOW_EVERY`], then
//! the log's new changes in order. A poll, not pub/sub: a published message
//! is lost to a subscriber that is reconnecting, so a poll would be needed
//! anyway to heal that; one `GET` every 100 ms per instance costs Redis
//! nothing and bounds the lag the same way after a restart, a missed
//! change or a failover.

use crate::config::{
    Action, Change, SharedChange, SharedCursor, SharedTable, TableEntry, TableError, shared_items,
};
use crate::limiter::Limiter;
use crate::store::{RedisStore, StoreError, StoreKind, TableLogLine, TableWrite, TableWritten};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// Changes the log in Redis keeps, at least (the audit trail's depth).
const LOG_KEPT: usize = 100_000;
/// How often each instance asks Redis whether tables changed.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// Changes read from the log in one call.
const PAGE: usize = 100;
/// Changes read in one call when filling the audit trail at start.
const AUDIT_PAGE: usize = 1_000;

/// The Redis store tables live in, if the limiter counts in Redis.
pub(crate) fn redis_of(limiter: &Limiter<StoreKind>) -> Option<&RedisStore> {
    match limiter.store() {
        StoreKind::Redis { main, .. } => Some(main),
        StoreKind::Memory(_) | StoreKind::Memcache(_) => None,
    }
}

/// Why a call to Redis failed, for the API's answer (503).
fn unavailable(err: &StoreError) -> TableError {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    TableError::Shared(message)
}

/// Makes one change in Redis (already checked against the rules here),
/// then reads the log up to it, so this instance answers with it applied.
///
/// # Errors
/// [`TableError::NotFound`] for a missing key to delete;
/// [`TableError::Shared`] when Redis does not make it.
pub(crate) async fn commit(
    redis: &RedisStore,
    limiter: &Limiter<StoreKind>,
    (who, time): (&str, &str),
    table: &str,
    action: Action,
    items: &[(String, Option<TableEntry>)],
) -> Result<Vec<Change>, TableError> {
    let (items_json, pairs) = shared_items(items)?;
    let write = TableWrite {
        table,
        action: action.as_str(),
        who,
        time,
        items_json: &items_json,
        items: &pairs,
        log_cap: LOG_KEPT,
    };
    let (seq, version, previous) = match redis.table_write(&write).await {
        Ok(TableWritten::Made {
            seq,
            version,
            previous,
        }) => (seq, version, previous),
        Ok(TableWritten::Missing) => return Err(TableError::NotFound),
        Err(err) => return Err(unavailable(&err)),
    };
    let change = SharedChange::made((seq, version), (who, time), table, action, items, &previous)?;
    if let Err(err) = follow_once(redis, limiter).await {
        // Made in Redis: the follower applies it on its next poll.
        warn!(
            error = &err as &dyn std::error::Error,
            "table change made in Redis, not yet read back"
        );
    }
    Ok(change.changes())
}

/// Brings this instance's copy up to Redis's: the new changes in order, or
/// the whole tables again when the log no longer holds every change since
/// this copy's (trimmed, or Redis lost its data).
///
/// # Errors
/// [`StoreError`] when Redis cannot be read; the copy stays as it was.
pub(crate) async fn follow_once(
    redis: &RedisStore,
    limiter: &Limiter<StoreKind>,
) -> Result<(), StoreError> {
    let tables = limiter.tables();
    let latest = redis.table_seq().await?;
    let mut cursor = tables.shared_cursor();
    if latest == cursor.seq && cursor.loaded {
        return Ok(());
    }
    if latest < cursor.seq || !cursor.loaded {
        if latest < cursor.seq {
            error!(
                tables.seq = cursor.seq,
                redis.seq = latest,
                "Redis holds fewer table changes than this instance read: it lost data; loading its tables as they are"
            );
        }
        load(redis, limiter).await?;
        cursor = tables.shared_cursor();
    }
    // Bounded: each round applies a page, or loads whole and ends.
    for _ in 0..latest
        .saturating_sub(cursor.seq)
        .div_ceil(PAGE as u64)
        .saturating_add(1)
    {
        let lines = redis.table_log_after(&cursor.id, PAGE).await?;
        let changes = parse(&lines);
        let rules = limiter.rules().load_full();
        let whole = changes.len() == lines.len()
            && tables.apply_shared(&changes, &rules, limiter.metrics());
        let now = tables.shared_cursor();
        if !whole || (lines.is_empty() && now.seq < latest) {
            warn!(
                tables.seq = now.seq,
                redis.seq = latest,
                "table change log no longer holds every change since this copy; loading the tables whole"
            );
            return load(redis, limiter).await;
        }
        if lines.len() < PAGE || now.seq >= latest {
            return Ok(());
        }
        cursor = now;
    }
    Ok(())
}

/// The log's lines as changes; an unreadable one ends the list (and the
/// caller loads whole).
fn parse(lines: &[TableLogLine]) -> Vec<SharedChange> {
    let mut changes = Vec::with_capacity(lines.len());
    for line in lines {
        match SharedChange::parse(line.seq, line.id.clone(), |name| line.field(name)) {
            Ok(change) => changes.push(change),
            Err(err) => {
                error!(
                    error = &err as &dyn std::error::Error,
                    "unreadable table change in Redis"
                );
                break;
            }
        }
    }
    changes
}

/// Reads every table whole from Redis, with the log's last changes for the
/// audit trail, and replaces this instance's copy.
async fn load(redis: &RedisStore, limiter: &Limiter<StoreKind>) -> Result<(), StoreError> {
    // The log's newest change first: every table read after it is as it
    // was then or later, and the changes after it are applied next.
    let mut audit: Vec<SharedChange> = Vec::new();
    let mut before: Option<String> = None;
    let mut items = 0_usize;
    while items < LOG_KEPT {
        let lines = redis
            .table_log_before(before.as_deref(), AUDIT_PAGE)
            .await?;
        let changes = parse(&lines);
        items = items.saturating_add(changes.iter().map(SharedChange::len).sum::<usize>());
        let last = lines.len() < AUDIT_PAGE || changes.len() < lines.len();
        before = lines.last().map(|l| l.id.clone());
        audit.extend(changes);
        if last {
            break;
        }
    }
    let cursor = match audit.first() {
        Some(newest) => SharedCursor {
            seq: newest.seq,
            id: newest.id.clone(),
            loaded: true,
        },
        None => SharedCursor {
            seq: redis.table_seq().await?,
            id: "0".to_owned(),
            loaded: true,
        },
    };
    let mut tables: Vec<SharedTable> = Vec::new();
    for (name, version) in redis.table_versions().await? {
        let mut entries = Vec::new();
        let mut at = 0;
        // Bounded by the table's size: HSCAN ends at cursor 0.
        loop {
            let (next, page) = redis.table_scan(&name, at).await?;
            entries.extend(page);
            if next == 0 {
                break;
            }
            at = next;
        }
        tables.push((name, version, entries));
    }
    let rules = limiter.rules().load_full();
    let count: usize = tables.iter().map(|(_, _, e)| e.len()).sum();
    let unreadable =
        limiter
            .tables()
            .load_shared(cursor.clone(), tables, &audit, &rules, limiter.metrics());
    if unreadable > 0 {
        error!(
            tables.unreadable = unreadable,
            "table entries in Redis that cannot be read; their keys use the rules' limits"
        );
    }
    info!(
        tables.entries = count,
        tables.seq = cursor.seq,
        "limit tables loaded from Redis"
    );
    Ok(())
}

/// Follows Redis's tables until `shutdown`: loads them once connected,
/// then applies each change within [`FOLLOW_EVERY`]; records the lag (time
/// since this copy last matched Redis's).
pub(crate) async fn follow(limiter: Arc<Limiter<StoreKind>>, shutdown: CancellationToken) {
    let Some(redis) = redis_of(&limiter).cloned() else {
        return;
    };
    let mut tick = tokio::time::interval(FOLLOW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut matched = Instant::now();
    let mut failing = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !redis.is_ready() {
            continue;
        }
        match follow_once(&redis, &limiter).await {
            Ok(()) => {
                matched = Instant::now();
                if failing {
                    info!("limit tables follow Redis again");
                }
                failing = false;
            }
            Err(err) => {
                if !failing {
                    warn!(
                        error = &err as &dyn std::error::Error,
                        "limit tables cannot be read from Redis; decisions keep the last tables"
                    );
                }
                failing = true;
            }
        }
        limiter.metrics().table.set_lag(matched.elapsed());
    }
}
