//! Fenced block fetches: a lease's fetch whose answer never came loses
//! nothing.
//!
//! A fetch that misses `REDIS_TIMEOUT` (Redis frozen, a connection lost)
//! may still run later: its bytes sit in Redis's socket, and Redis runs
//! them when it resumes, though floodgate stopped listening. Its block
//! would then be counted with no one holding it, refused to every
//! instance until its window ended.
//!
//! So each fetch names a fence key of its own, under its descriptor's hash
//! tag (one slot with its counter): `fetch.lua` takes the block only while
//! the fence does not exist, and then keeps its reply there. A fetch that
//! failed is settled on a later step by `settle.lua`, which reads the fence
//! and, when it is not there, sets it empty: a fetch that ran is found
//! there (its block given back), one that has not run never will. Redis
//! runs each script whole, so whichever comes first, the block is either
//! found or never taken. A settle changes nothing once the fence is there,
//! so one whose answer was lost (it too past `REDIS_TIMEOUT`) is sent again
//! and finds the same block; the block is given back under the fetch's
//! token, which Redis runs once however often it is sent.
//!
//! The fence lives [`FENCE_TTL_MS`]: a fetch settled that long after it
//! ran, or run that long after it was settled, is beyond it (Redis
//! unreachable for that long): its block strands until its window ends, as
//! without the fence. A fetch that was answered needs its fence no more:
//! the lease's next fetch removes it, so a lease keeps about one fence,
//! not one per fetch of the last 30 s.

use super::RedisStore;
use super::command::{Undo, algorithm_number, key_of, write_op};
use super::reply::outcome;
use super::scripts;
use crate::algorithm::Outcome;
use crate::store::{Fetch, Settled, StoreError};

/// How long a fence is kept, ms; see the module.
pub(super) const FENCE_TTL_MS: u64 = 30_000;

impl RedisStore {
    /// [`Store::fetch`](crate::store::Store::fetch) on Redis: one fenced
    /// script call per fetch, in one round trip, by `REDIS_TIMEOUT`.
    pub(super) async fn fetch_fenced(&self, fetches: &[Fetch]) -> Result<Vec<Outcome>, StoreError> {
        if fetches.is_empty() {
            return Ok(Vec::new());
        }
        let cmds = fetches.iter().map(|f| self.fetch_cmd(f)).collect();
        let replies = self.counted_round_trip(cmds).await?;
        fetches
            .iter()
            .zip(&replies)
            .map(|(f, reply)| {
                let algorithm = algorithm_number(&f.op, false);
                Ok(outcome(&f.op, algorithm, reply, f.at)?)
            })
            .collect()
    }

    /// [`Store::settle`](crate::store::Store::settle) on Redis: each
    /// fetch's fence read (and set, when the fetch has not run, so that it
    /// never will), in one round trip. The fence is left as it is found, so
    /// a settle whose answer is lost is sent again and finds the same.
    pub(super) async fn settle_fetches(&self, fetches: Vec<Fetch>) -> Settled {
        if fetches.is_empty() {
            return Settled::default();
        }
        let cmds = fetches
            .iter()
            .map(|f| {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(scripts::SETTLE.get_hash())
                    .arg(1)
                    .arg(self.inner.keys.fence(&f.op.id, f.token))
                    .arg(FENCE_TTL_MS);
                cmd
            })
            .collect();
        let Ok(replies) = self.counted_round_trip(cmds).await else {
            return Settled {
                found: Vec::new(),
                unanswered: fetches,
            };
        };
        let mut settled = Settled::default();
        for (f, reply) in fetches.into_iter().zip(&replies) {
            if reply.is_empty() {
                continue;
            }
            let algorithm = algorithm_number(&f.op, false);
            match outcome(&f.op, algorithm, reply, f.at) {
                Ok(got) => settled.found.push((f, got)),
                // A fence that does not read as the fetch's reply (written
                // by something else): asked again, never guessed.
                Err(_) => settled.unanswered.push(f),
            }
        }
        settled
    }

    /// [`RedisStore::round_trip`], each call counted as the lanes' are
    /// (carrying no request).
    async fn counted_round_trip(&self, cmds: Vec<redis::Cmd>) -> Result<Vec<Vec<i64>>, StoreError> {
        for _ in &cmds {
            self.inner.signals.count_call(0);
        }
        self.round_trip(cmds).await
    }

    /// The fenced script call of one fetch: its operation as the batch
    /// script takes it, after its key and fence.
    fn fetch_cmd(&self, fetch: &Fetch) -> redis::Cmd {
        let (op, _) = self.call(&fetch.op, fetch.at, false);
        let algorithm = algorithm_number(&fetch.op, false);
        let mut cmd = redis::cmd("EVALSHA");
        let keys = &self.inner.keys;
        cmd.arg(scripts::FETCH.get_hash())
            .arg(2 + usize::from(fetch.forget.is_some()))
            .arg(key_of(&op))
            .arg(keys.fence(&fetch.op.id, fetch.token));
        if let Some(forget) = fetch.forget {
            cmd.arg(keys.fence(&fetch.op.id, forget));
        }
        cmd.arg(FENCE_TTL_MS);
        write_op(&mut cmd, algorithm, &op);
        cmd
    }
}

/// The fenced script call that gives back a lease's unused hits once
/// (`give_back.lua`), however often it is sent under `fence`; `tat_us` is
/// the TAT the block left (for [`Undo::Tat`]). `None` for an undo a lease
/// never gives (a log's members).
pub(super) fn give_back_cmd(fence: &str, undo: &Undo, tat_us: u64) -> Option<redis::Cmd> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts::GIVE_BACK.get_hash());
    match undo {
        Undo::Tat { key, amount } => {
            cmd.arg(2)
                .arg(fence)
                .arg(key.as_str())
                .arg(FENCE_TTL_MS)
                .arg("tat")
                .arg(*amount)
                .arg(tat_us);
        }
        Undo::Decrement { keys, amount } => {
            cmd.arg(1 + keys.len()).arg(fence);
            for key in keys {
                cmd.arg(key.as_str());
            }
            cmd.arg(FENCE_TTL_MS).arg("count").arg(*amount);
        }
        Undo::Members { .. } => return None,
    }
    Some(cmd)
}
