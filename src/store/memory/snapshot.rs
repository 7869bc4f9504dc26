//! Snapshots of the embedded store: its counters written to a file every
//! interval and at shutdown, and read back at start, so a restart (a
//! deploy) does not hand every caller a fresh quota.
//!
//! The file: `FGSNAP02`, the time it was written (ms), the number of
//! counters, each counter, then an XXH3-64 checksum of everything before
//! it. Integers are little-endian. A counter is its identity (length,
//! escaped text, candidate flag), its kind (fixed window with its length
//! and start, sliding window, sliding log, GCRA with its interval and
//! burst), its expiry (ms), when it was last used (ms) and its state (a
//! fixed window's count, a sliding window's buckets, a log's timestamps,
//! a GCRA's theoretical arrival time). Counters go least recently used
//! first. A file's order is its shard's only: the last-used times order
//! the counters of all the files, so that a restore under a smaller
//! budget keeps the most recently used (see `MemoryStore::load_snapshot`).
//!
//! `FGSNAP01` files, written by earlier versions, are the same without
//! the last-used time and are still read: their counters count as used
//! when the file was written, in the file's order.
//!
//! One such file per shard of the store: `MEMORY_STORE_SNAPSHOT_PATH` for
//! the first, `<path>.1` … `<path>.63` beside it. Writing: each shard that
//! changed since its last write is encoded under its own lock (a short
//! hold, as a request's) and its file written on a blocking thread as a
//! temporary file, fsynced, renamed over the old one and its directory
//! fsynced, so a crash leaves each file's previous version or its new one,
//! never a torn file; shards that did not change are not written again
//! (under a hot load, a few files a second, not the whole store).
//! Reading refuses anything that is not a whole snapshot of either version
//! (wrong magic, short, checksum mismatch, impossible lengths), and drops
//! the counters whose window ended while floodgate was down.

use super::entry::{CounterKind, Entry, EntryKey, State};
use crate::algorithm::concurrency::Slots;
use crate::algorithm::fixed_window::Counter;
use crate::algorithm::sliding_log::Log;
use crate::algorithm::sliding_window::Buckets;
use crate::clock::UnixMillis;
use crate::store::CounterId;
use std::path::{Path, PathBuf};

/// The first bytes of every snapshot written, the format's version
/// included.
const MAGIC: &[u8; 8] = b"FGSNAP02";

/// The first bytes of a snapshot of the previous version (no last-used
/// times), still read.
const MAGIC_V1: &[u8; 8] = b"FGSNAP01";

/// Bounds a damaged or foreign file cannot make floodgate exceed while
/// reading it (a real counter is far below each).
const MAX_ID_BYTES: usize = 1 << 16;
const MAX_BUCKETS: usize = 1 << 16;
const MAX_LOG_ENTRIES: usize = 1 << 24;

/// Why a snapshot could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file could not be read, written or renamed.
    #[error("snapshot file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a snapshot floodgate can read.
    #[error("snapshot file {path} is not a floodgate snapshot: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Appends one counter to `out`; `false` (nothing written) for an identity
/// longer than a snapshot takes, which request bounds never let through.
pub(super) fn encode_entry(out: &mut Vec<u8>, key: &EntryKey, entry: &Entry) -> bool {
    let id = key.id.as_str().as_bytes();
    let Some(id_len) = u32::try_from(id.len())
        .ok()
        .filter(|_| id.len() <= MAX_ID_BYTES)
    else {
        return false;
    };
    put_u32(out, id_len);
    out.extend_from_slice(id);
    out.push(u8::from(key.id.is_candidate()));
    match key.kind {
        CounterKind::Fixed {
            window_secs,
            start_secs,
        } => {
            out.push(0);
            put_u64(out, window_secs);
            put_u64(out, start_secs);
        }
        CounterKind::Sliding => out.push(1),
        CounterKind::Log => out.push(2),
        CounterKind::Gcra { interval_us, burst } => {
            out.push(3);
            put_u64(out, interval_us);
            put_u64(out, burst);
        }
        CounterKind::Concurrency => out.push(4),
    }
    put_u64(out, entry.expires_at.0);
    put_u64(out, entry.used_at.0);
    match &entry.state {
        State::Fixed(counter) => {
            put_u64(out, counter.window_start_secs);
            put_u64(out, counter.count);
        }
        State::Sliding(buckets) => {
            let parts = buckets.parts();
            put_u32(out, u32::try_from(parts.len()).unwrap_or(0));
            for &(length, start, count) in parts {
                put_u64(out, length);
                put_u64(out, start);
                put_u64(out, count);
            }
        }
        State::Log(log) => {
            let timestamps = log.timestamps();
            put_u32(out, u32::try_from(timestamps.len()).unwrap_or(0));
            for at in timestamps {
                put_u64(out, at);
            }
        }
        State::Gcra(tat) => {
            out.push(u8::from(tat.is_some()));
            put_u64(out, tat.unwrap_or(0));
        }
        State::Slots(slots) => {
            let parts = slots.parts();
            put_u32(out, u32::try_from(parts.len()).unwrap_or(0));
            for &(member, expiry) in parts {
                put_u64(out, member);
                put_u64(out, expiry);
            }
        }
    }
    true
}

/// The header of a snapshot of `count` counters written at `now`; the
/// counters follow, then the checksum ([`write_atomically`]).
pub(super) fn header(now: UnixMillis, count: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(MAGIC);
    put_u64(&mut out, now.0);
    put_u64(&mut out, count);
    out
}

/// A whole snapshot in memory (header, counters, checksum), as
/// [`write_atomically`] writes it: for tests.
#[cfg(test)]
pub(super) fn concatenated(header: &[u8], images: &[&[u8]]) -> Vec<u8> {
    let mut out = header.to_vec();
    for image in images {
        out.extend_from_slice(image);
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&out);
    put_u64(&mut out, sum);
    out
}

/// Reads a snapshot: every counter whose window has not ended by `now`,
/// least recently used first, their last-used times non-decreasing.
///
/// # Errors
///
/// [`SnapshotError::Invalid`] when `bytes` is not a whole snapshot.
pub(super) fn decode(
    bytes: &[u8],
    now: UnixMillis,
    path: &Path,
) -> Result<Vec<(CounterId, CounterKind, Entry)>, SnapshotError> {
    let invalid = |reason| SnapshotError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let has_used_at = match bytes.get(..MAGIC.len()) {
        Some(magic) if magic == MAGIC => true,
        Some(magic) if magic == MAGIC_V1 => false,
        _ => return Err(invalid("it does not start with FGSNAP02 or FGSNAP01")),
    };
    let (body, sum) = bytes
        .split_last_chunk::<8>()
        .ok_or_else(|| invalid("it is cut short"))?;
    if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(*sum) {
        return Err(invalid(
            "its checksum does not match (damaged or cut short)",
        ));
    }
    let mut r = Reader {
        rest: body.get(MAGIC.len()..).unwrap_or_default(),
    };
    let short = || invalid("a counter is cut short");
    let written_at = UnixMillis(r.u64().ok_or_else(short)?);
    let count = r.u64().ok_or_else(short)?;
    let mut entries = Vec::new();
    // The order of the file is its shard's exact LRU order: a time that
    // went back (a clock stepped back) is raised to the one before it, so
    // sorting by time never reorders a file.
    let mut last_used = UnixMillis(0);
    for _ in 0..count {
        let id_len = usize::try_from(r.u32().ok_or_else(short)?).unwrap_or(usize::MAX);
        if id_len > MAX_ID_BYTES {
            return Err(invalid("a counter identity is too long"));
        }
        let id = String::from_utf8(r.bytes(id_len).ok_or_else(short)?.to_vec())
            .map_err(|_| invalid("a counter identity is not UTF-8"))?;
        let candidate = r.u8().ok_or_else(short)? == 1;
        let kind = match r.u8().ok_or_else(short)? {
            0 => CounterKind::Fixed {
                window_secs: r.u64().ok_or_else(short)?,
                start_secs: r.u64().ok_or_else(short)?,
            },
            1 => CounterKind::Sliding,
            2 => CounterKind::Log,
            3 => CounterKind::Gcra {
                interval_us: r.u64().ok_or_else(short)?,
                burst: r.u64().ok_or_else(short)?,
            },
            4 => CounterKind::Concurrency,
            _ => return Err(invalid("a counter has an unknown kind")),
        };
        let expires_at = UnixMillis(r.u64().ok_or_else(short)?);
        let used_at = if has_used_at {
            UnixMillis(r.u64().ok_or_else(short)?)
        } else {
            written_at
        };
        last_used = last_used.max(used_at);
        let state = match kind {
            CounterKind::Fixed { .. } => State::Fixed(Counter {
                window_start_secs: r.u64().ok_or_else(short)?,
                count: r.u64().ok_or_else(short)?,
            }),
            CounterKind::Sliding => {
                let n = usize::try_from(r.u32().ok_or_else(short)?).unwrap_or(usize::MAX);
                if n > MAX_BUCKETS {
                    return Err(invalid("a sliding window has too many buckets"));
                }
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    parts.push((
                        r.u64().ok_or_else(short)?,
                        r.u64().ok_or_else(short)?,
                        r.u64().ok_or_else(short)?,
                    ));
                }
                State::Sliding(Buckets::from_parts(parts))
            }
            CounterKind::Log => {
                let n = usize::try_from(r.u32().ok_or_else(short)?).unwrap_or(usize::MAX);
                if n > MAX_LOG_ENTRIES || n > r.rest.len() / 8 {
                    return Err(invalid("a sliding log has too many entries"));
                }
                let mut timestamps = Vec::with_capacity(n);
                for _ in 0..n {
                    timestamps.push(r.u64().ok_or_else(short)?);
                }
                State::Log(Log::from_timestamps(timestamps))
            }
            CounterKind::Gcra { .. } => {
                let present = r.u8().ok_or_else(short)? == 1;
                let tat = r.u64().ok_or_else(short)?;
                State::Gcra(present.then_some(tat))
            }
            CounterKind::Concurrency => {
                let n = usize::try_from(r.u32().ok_or_else(short)?).unwrap_or(usize::MAX);
                if n > MAX_LOG_ENTRIES || n > r.rest.len() / 16 {
                    return Err(invalid("a concurrency limit has too many slots"));
                }
                let mut held = Vec::with_capacity(n);
                for _ in 0..n {
                    held.push((r.u64().ok_or_else(short)?, r.u64().ok_or_else(short)?));
                }
                State::Slots(Slots::from_parts(held))
            }
        };
        if expires_at > now {
            entries.push((
                CounterId::from_snapshot(id, candidate),
                kind,
                Entry {
                    state,
                    expires_at,
                    used_at: last_used,
                    bytes: 0,
                },
            ));
        }
    }
    if !r.rest.is_empty() {
        return Err(invalid("bytes follow the last counter"));
    }
    Ok(entries)
}

/// The file of part `i` of the snapshot at `path`: `path` itself for the
/// first, `path.<i>` for the others.
pub(super) fn part_path(path: &Path, i: usize) -> PathBuf {
    if i == 0 {
        return path.to_owned();
    }
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{i}"));
    PathBuf::from(name)
}

/// Writes the concatenation of `parts` and its checksum to `path`
/// atomically: a temporary file beside it, fsynced, renamed over it, the
/// directory fsynced. The parts are written as they are (no copy of the
/// whole snapshot in memory); returns the file's length.
///
/// # Errors
///
/// [`SnapshotError::Io`] naming the file.
pub(super) fn write_atomically<'a>(
    path: &Path,
    parts: impl IntoIterator<Item = &'a [u8]>,
) -> Result<u64, SnapshotError> {
    use std::io::Write as _;
    let io = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let mut file = std::fs::File::create(&temporary).map_err(io)?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut len = 0u64;
    for part in parts {
        hasher.update(part);
        file.write_all(part).map_err(io)?;
        len += u64::try_from(part.len()).unwrap_or(u64::MAX);
    }
    file.write_all(&hasher.digest().to_le_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(io)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(len + 8)
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// Reads integers off the front of a byte slice; `None` when it is too
/// short.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.rest.split_at_checked(n)?;
        self.rest = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.bytes(1)?.first().copied()
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
}
