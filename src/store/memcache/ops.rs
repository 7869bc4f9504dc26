//! One request's calls to memcached: each operation's key and server, its
//! count (`incr`, `add`), the answers, and a refused request's hits taken
//! back.

use super::pool::{Conn, Server};
use super::{MAX_RELATIVE_EXPIRY_SECS, MemcacheStore, keys};
use crate::algorithm::fixed_window::Tally;
use crate::algorithm::{Outcome, Spec};
use crate::clock::UnixMillis;
use crate::store::{Batch, Op, StoreError, taken_back};
use futures_util::future::join_all;
use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::time::Duration;

impl MemcacheStore {
    /// The expiry memcached is given for a window of `window_secs`: as the
    /// reference, the whole window plus jitter (less than one more window,
    /// see [`crate::store::expiry_jitter_secs`]); past 30 days memcached
    /// reads a point in time, so that is what it is given (the reference
    /// sends a year as a duration, which memcached reads as 1971: yearly
    /// counters expire at once there). The point is on the wall clock,
    /// memcached's own, whatever clock decides the windows.
    pub(super) fn expiry(&self, window_secs: u64) -> u32 {
        let max = self.inner.config.expiration_jitter_max_secs;
        let ttl = window_secs.saturating_add(crate::store::expiry_jitter_secs(max, window_secs));
        let secs = if ttl > MAX_RELATIVE_EXPIRY_SECS {
            let wall = crate::clock::Clock::now(&crate::clock::SystemClock);
            wall.as_secs().saturating_add(ttl)
        } else {
            ttl
        };
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    /// Each operation's key and the server holding it.
    fn plan(
        &self,
        ops: &[Op],
        now: UnixMillis,
        servers: usize,
    ) -> Result<Vec<(String, usize)>, StoreError> {
        ops.iter()
            .map(|op| match op.spec {
                Spec::FixedWindow { window, .. } => {
                    let key = keys::fixed_window(
                        &self.inner.config.key_prefix,
                        &op.id,
                        window.window_secs(),
                        window.window_start(now),
                    );
                    let server = keys::server_of(&key, servers);
                    Ok((key, server))
                }
                _ => Err(StoreError::Config {
                    reason: "the memcache store counts fixed_window limits only",
                }),
            })
            .collect()
    }

    /// Runs `work` on each server's operations (one connection per server,
    /// every server at once), within `deadline`; the answers come back in
    /// operation order.
    async fn per_server<'a, T, F, Fut>(
        &self,
        servers: &'a [Arc<Server>],
        planned: &'a [(String, usize)],
        deadline: Duration,
        work: F,
    ) -> Result<Vec<T>, StoreError>
    where
        T: Default + Clone,
        F: Fn(&'a Server, Vec<usize>) -> Fut,
        Fut: Future<Output = io::Result<Vec<(usize, T)>>>,
    {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, (_, server)) in planned.iter().enumerate() {
            match groups.iter_mut().find(|(s, _)| s == server) {
                Some((_, ops)) => ops.push(i),
                None => groups.push((*server, vec![i])),
            }
        }
        let calls = groups
            .into_iter()
            .filter_map(|(server, ops)| servers.get(server).map(|server| work(server, ops)));
        let results = tokio::time::timeout(deadline, join_all(calls))
            .await
            .map_err(|_| StoreError::Timeout)?;
        let mut answers = vec![T::default(); planned.len()];
        for result in results {
            for (i, value) in result.map_err(memcache_error)? {
                if let Some(slot) = answers.get_mut(i) {
                    *slot = value;
                }
            }
        }
        Ok(answers)
    }

    pub(super) async fn run(
        &self,
        batch: Batch,
        now: UnixMillis,
        deadline: Duration,
    ) -> Result<Vec<Outcome>, StoreError> {
        let servers = self.inner.servers.load_full();
        let planned = self.plan(&batch.ops, now, servers.len())?;
        let max_idle = self.inner.config.max_idle_conns;
        let tls = self.inner.tls.as_ref();
        let counts = self
            .per_server(&servers, &planned, deadline, |server, ops| {
                let (batch, planned) = (&batch, &planned);
                async move {
                    let mut conn = server.take(tls).await?;
                    let mut out = Vec::with_capacity(ops.len());
                    for i in ops {
                        let (Some(op), Some((key, _))) = (batch.ops.get(i), planned.get(i)) else {
                            continue;
                        };
                        let window_secs = match op.spec {
                            Spec::FixedWindow { window, .. } => window.window_secs(),
                            _ => 0,
                        };
                        let after =
                            count(&mut conn, key, op.hits, || self.expiry(window_secs)).await?;
                        // Refused on its own: the hits come straight back
                        // out (the count stays as it was for the others).
                        let refused = matches!(op.spec, Spec::FixedWindow { limit, .. } if after > limit)
                            && batch.refuses(op)
                            && op.hits > 0;
                        if refused {
                            conn.decrement(key, op.hits).await?;
                        }
                        out.push((i, (after, refused)));
                    }
                    server.give_back(conn, max_idle);
                    Ok(out)
                }
            })
            .await?;
        let mut outcomes: Vec<Outcome> = batch
            .ops
            .iter()
            .zip(&counts)
            .map(|(op, &(after, refused))| answer(op, after, refused, now))
            .collect();
        if batch.refused_by(&outcomes) {
            self.take_back(&batch, &planned, &servers, &mut outcomes, now, deadline)
                .await?;
        }
        Ok(outcomes)
    }

    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: the batch is refused, so
    /// the hits its other operations counted are taken back.
    async fn take_back(
        &self,
        batch: &Batch,
        planned: &[(String, usize)],
        servers: &[Arc<Server>],
        outcomes: &mut [Outcome],
        now: UnixMillis,
        deadline: Duration,
    ) -> Result<(), StoreError> {
        let undo: Vec<bool> = batch
            .ops
            .iter()
            .zip(outcomes.iter())
            .map(|(op, o)| o.counted && op.hits > 0 && !op.id.is_candidate())
            .collect();
        let max_idle = self.inner.config.max_idle_conns;
        let tls = self.inner.tls.as_ref();
        self.per_server(servers, planned, deadline, |server, ops| {
            let ops: Vec<usize> = ops
                .into_iter()
                .filter(|&i| undo.get(i) == Some(&true))
                .collect();
            async move {
                if ops.is_empty() {
                    return Ok(Vec::<(usize, ())>::new());
                }
                let mut conn = server.take(tls).await?;
                for &i in &ops {
                    if let (Some(op), Some((key, _))) = (batch.ops.get(i), planned.get(i)) {
                        conn.decrement(key, op.hits).await?;
                    }
                }
                server.give_back(conn, max_idle);
                Ok(Vec::<(usize, ())>::new())
            }
        })
        .await?;
        for ((op, outcome), undone) in batch.ops.iter().zip(outcomes.iter_mut()).zip(undo) {
            if undone {
                *outcome = taken_back(op, *outcome, now);
            }
        }
        Ok(())
    }

    pub(super) async fn read(
        &self,
        batch: &Batch,
        now: UnixMillis,
    ) -> Result<Vec<Outcome>, StoreError> {
        let servers = self.inner.servers.load_full();
        let planned = self.plan(&batch.ops, now, servers.len())?;
        let max_idle = self.inner.config.max_idle_conns;
        let tls = self.inner.tls.as_ref();
        let counts = self
            .per_server(
                &servers,
                &planned,
                self.inner.config.timeout,
                |server, ops| {
                    let planned = &planned;
                    async move {
                        let mut conn = server.take(tls).await?;
                        let mut out = Vec::with_capacity(ops.len());
                        for i in ops {
                            if let Some((key, _)) = planned.get(i) {
                                out.push((i, count(&mut conn, key, 0, || 0).await?));
                            }
                        }
                        server.give_back(conn, max_idle);
                        Ok(out)
                    }
                },
            )
            .await?;
        Ok(batch
            .ops
            .iter()
            .zip(counts)
            .map(|(op, before)| match op.spec {
                Spec::FixedWindow { window, limit } => {
                    let after = before.saturating_add(op.hits);
                    if batch.refuses(op) && op.hits > 0 && after > limit {
                        window.refused(before, op.hits, limit, now)
                    } else {
                        window.outcome(Tally { before, after }, limit, now, true)
                    }
                }
                _ => Outcome::NOTHING,
            })
            .collect())
    }
}

/// The answer for `op` once memcached counted it to `after`; `refused`:
/// the hits were taken straight back out.
pub(super) fn answer(op: &Op, after: u64, refused: bool, now: UnixMillis) -> Outcome {
    let Spec::FixedWindow { window, limit } = op.spec else {
        return Outcome::NOTHING;
    };
    let before = after.saturating_sub(op.hits);
    if refused {
        window.refused(before, op.hits, limit, now)
    } else {
        window.outcome(Tally { before, after }, limit, now, true)
    }
}

/// Counts `hits` on `key` and answers the count after them: `incr`; when
/// the key is missing, `add` it with the expiry `expiry` gives (asked only
/// then: it draws the jitter); when another caller added it first, `incr`
/// again (the reference's sequence). `hits` 0 reads.
async fn count(
    conn: &mut Conn,
    key: &str,
    hits: u64,
    expiry: impl FnOnce() -> u32,
) -> io::Result<u64> {
    match conn.increment(key, hits).await {
        Err(err) if err.kind() == ErrorKind::NotFound => {
            if hits == 0 {
                return Ok(0);
            }
            match conn.add(key, hits.to_string().as_bytes(), expiry()).await {
                Ok(()) => Ok(hits),
                Err(err) if err.kind() == ErrorKind::AlreadyExists => {
                    conn.increment(key, hits).await
                }
                Err(err) => Err(err),
            }
        }
        other => other,
    }
}

fn memcache_error(source: io::Error) -> StoreError {
    let transient = !matches!(
        source.kind(),
        ErrorKind::InvalidInput | ErrorKind::InvalidData
    );
    StoreError::Memcache { transient, source }
}
