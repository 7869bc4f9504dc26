//! Which Cluster node serves each slot, as floodgate last read it
//! (`CLUSTER SLOTS`): the Cluster lanes group their operations by node with
//! it, so one script call carries the operations of every hash tag a node
//! serves.
//!
//! The table only groups; it never decides where a write lands. A call is
//! routed by the slot of its first key (the cluster client's own map), and
//! the node batch script checks that its node serves each of the call's
//! slots, and is not moving it, before it writes anything. So a stale table
//! costs a second round trip for the operations concerned (sent per hash
//! tag instead, as the client routes them), never a partial or doubled
//! count; and it marks the table for a refresh.

use arc_swap::ArcSwapOption;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, warn};

/// Slots in a Redis Cluster.
const SLOT_COUNT: u16 = 16_384;
pub(super) const SLOTS: usize = SLOT_COUNT as usize;

/// Least time between two reads of the table: a moved slot or a promoted
/// replica is read again within a quarter of a second, and a flapping node
/// does not turn every call into a `CLUSTER SLOTS`.
const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// The node of each slot: a small number per node, `None` where no node
/// serves the slot (or none did when the table was read).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Owners {
    node: Box<[Option<u16>]>,
    /// Each node's `host:port`, by its number.
    addrs: Vec<String>,
}

impl Owners {
    /// The node serving `slot`, if the table knows one.
    pub(super) fn of(&self, slot: u16) -> Option<u16> {
        self.node.get(usize::from(slot)).copied().flatten()
    }

    /// Every master's `host:port`, by node number.
    pub(super) fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// Reads a `CLUSTER SLOTS` reply: `[start, end, [host, port, id…],
    /// replicas…]` per range. A node is known by its id when the reply
    /// carries one (it survives an address change), else by its address.
    pub(super) fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut node = vec![None; SLOTS].into_boxed_slice();
        let mut names: HashMap<Vec<u8>, u16> = HashMap::new();
        let mut addrs = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let name = node_name(master)?;
            let next = u16::try_from(names.len()).ok()?;
            let index = *names.entry(name).or_insert(next);
            if usize::from(index) == addrs.len() {
                addrs.push(node_addr(master)?);
            }
            let start = usize::try_from(*start).ok()?;
            let end = usize::try_from(*end).ok()?;
            for owner in node.get_mut(start..=end)? {
                *owner = Some(index);
            }
        }
        Some(Self { node, addrs })
    }
}

/// A master's `host:port` in a `CLUSTER SLOTS` entry.
fn node_addr(master: &[Value]) -> Option<String> {
    let host = match master.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let Value::Int(port) = master.get(1)? else {
        return None;
    };
    // An IPv6 literal needs brackets before its port.
    Some(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// A master's name in a `CLUSTER SLOTS` entry: its id, else `host:port`.
fn node_name(master: &[Value]) -> Option<Vec<u8>> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(n) => Some(n.to_string().into_bytes()),
        _ => None,
    };
    if let Some(id) = master.get(2).and_then(text).filter(|id| !id.is_empty()) {
        return Some(id);
    }
    let mut name = text(master.first()?)?;
    name.push(b':');
    name.extend(text(master.get(1)?)?);
    Some(name)
}

/// The slot of a key's hash tag (`hash_tag`): CRC16 (XMODEM) modulo
/// [`SLOTS`], as Redis computes it.
pub(super) fn slot_of(tag: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOT_COUNT
}

/// The table the lanes of one Cluster connection share, and its refresh.
#[derive(Debug)]
pub(super) struct SlotTable {
    owners: ArcSwapOption<Owners>,
    /// A call found the table wrong (or it could not be read).
    stale: AtomicBool,
    /// A read is under way.
    refreshing: AtomicBool,
    last_read: parking_lot::Mutex<Option<Instant>>,
    /// When a failed read was last logged, and the failures left out since
    /// (at most one line a second while no node answers).
    last_warned: parking_lot::Mutex<(Option<Instant>, u64)>,
}

impl SlotTable {
    /// An empty table, to be read: until then every operation goes per
    /// hash tag.
    pub(super) fn new() -> Self {
        Self {
            owners: ArcSwapOption::empty(),
            stale: AtomicBool::new(true),
            refreshing: AtomicBool::new(false),
            last_read: parking_lot::Mutex::new(None),
            last_warned: parking_lot::Mutex::new((None, 0)),
        }
    }

    /// The table as last read.
    pub(super) fn owners(&self) -> Option<Arc<Owners>> {
        self.owners.load_full()
    }

    /// Notes that a call found the table wrong (or failed, as when a node
    /// went away): the next
    /// [`SlotTable::refresh_if_stale`] reads it again.
    pub(super) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Starts reading the table again in the background when it is stale,
    /// no read is under way and the last began at least [`REFRESH_EVERY`]
    /// ago. Never waits: requests go on with the table they have.
    ///
    /// The table is asked of every master floodgate dials itself (`nodes`,
    /// taken only when a read starts) at once, the first answer kept, so a
    /// dead or hung node delays nothing; then, if none answered, of the
    /// cluster client.
    pub(super) fn refresh_if_stale(
        self: &Arc<Self>,
        conn: &ClusterConnection,
        nodes: impl FnOnce() -> Vec<ConnectionManager>,
        within: Duration,
    ) {
        if !self.stale.load(Ordering::Relaxed) || self.refreshing.swap(true, Ordering::Acquire) {
            return;
        }
        {
            let mut last = self.last_read.lock();
            let now = Instant::now();
            if last.is_some_and(|at| now.duration_since(at) < REFRESH_EVERY) {
                self.refreshing.store(false, Ordering::Release);
                return;
            }
            *last = Some(now);
        }
        let table = Arc::clone(self);
        let conn = conn.clone();
        let nodes = nodes();
        tokio::spawn(async move {
            table.stale.store(false, Ordering::Relaxed);
            // Every source at once, the first answer wins: a hung node
            // must not delay the read behind it.
            let mut reads: FuturesUnordered<_> = nodes
                .into_iter()
                .map(|node| table.read_within(node, within))
                .collect();
            let mut last_error = None;
            let mut read = false;
            while let Some(result) = reads.next().await {
                match result {
                    Ok(()) => {
                        read = true;
                        break;
                    }
                    Err(err) => last_error = Some(err),
                }
            }
            drop(reads);
            if !read {
                match table.read_within(conn, within).await {
                    Ok(()) => read = true,
                    Err(err) => last_error = Some(err),
                }
            }
            if !read {
                table.stale.store(true, Ordering::Relaxed);
                if let Some(err) = last_error
                    && let Some(left_out) = table.may_warn()
                {
                    warn!(error = %err, log.left_out = left_out, "could not read the Cluster's slot table; operations go per hash tag meanwhile");
                }
            }
            table.refreshing.store(false, Ordering::Release);
        });
    }

    /// Whether a failed read may be logged now (`Some` with the failures
    /// left out since the last line), at most once a second.
    fn may_warn(&self) -> Option<u64> {
        let mut warned = self.last_warned.lock();
        let now = Instant::now();
        if warned
            .0
            .is_some_and(|at| now.duration_since(at) < Duration::from_secs(1))
        {
            warned.1 += 1;
            return None;
        }
        warned.0 = Some(now);
        Some(std::mem::take(&mut warned.1))
    }

    /// [`SlotTable::read`] from `conn`, bounded by `within`.
    async fn read_within<C: ConnectionLike>(
        &self,
        mut conn: C,
        within: Duration,
    ) -> RedisResult<()> {
        tokio::time::timeout(within, self.read(&mut conn))
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }

    /// Reads the table now; it is fresh when that succeeds.
    pub(super) async fn read_now(&self, conn: &mut ClusterConnection) -> RedisResult<()> {
        self.read(conn).await?;
        self.stale.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Reads the table (`CLUSTER SLOTS`) from one node, or from any node
    /// the cluster client picks. A table no different from the one held
    /// is not stored again, so whoever keys work by the table's identity
    /// (the per-node lanes) keeps it.
    async fn read<C: ConnectionLike>(&self, conn: &mut C) -> RedisResult<()> {
        let reply = match conn
            .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
            .await?
        {
            // A routed command's server error comes back as a value.
            Value::ServerError(err) => return Err(RedisError::from(err)),
            reply => reply,
        };
        let owners = Owners::parse(&reply).ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected CLUSTER SLOTS reply",
            ))
        })?;
        debug!("read the Cluster's slot table");
        if self.owners.load().as_deref() != Some(&owners) {
            self.owners.store(Some(Arc::new(owners)));
        }
        Ok(())
    }
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

#[cfg(test)]
mod tests {
    use super::{Owners, SLOTS, slot_of};
    use redis::Value;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64, id: Option<&str>) -> Value {
        let mut master = vec![bulk(host), Value::Int(port)];
        master.extend(id.map(bulk));
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(master),
            // A replica: ignored.
            Value::Array(vec![bulk(host), Value::Int(port + 1), bulk("replica")]),
        ])
    }

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(slot_of(b"foo"), 12_182);
        assert_eq!(slot_of(b"bar"), 5_061);
        assert_eq!(slot_of(b""), 0);
        assert!((0..1_000).all(|i| usize::from(slot_of(format!("k{i}").as_bytes())) < SLOTS));
    }

    #[test]
    fn the_table_maps_each_range_to_its_master() {
        let reply = Value::Array(vec![
            range(0, 5_460, "127.0.0.1", 7000, Some("a")),
            range(5_461, 10_922, "127.0.0.1", 7001, Some("b")),
            range(10_923, 16_000, "127.0.0.1", 7002, Some("c")),
            // Two ranges of one node share its number.
            range(16_001, 16_383, "127.0.0.1", 7000, Some("a")),
        ]);
        let owners = Owners::parse(&reply).unwrap();
        assert_eq!(owners.of(0), owners.of(5_460));
        assert_ne!(owners.of(5_460), owners.of(5_461));
        assert_ne!(owners.of(10_922), owners.of(10_923));
        assert_eq!(owners.of(0), owners.of(16_383));
        assert!(owners.of(0).is_some());
        // Out of range: unknown, not a panic.
        assert_eq!(owners.of(16_384), None);
    }

    #[test]
    fn nodes_without_an_id_are_known_by_address_and_gaps_by_none() {
        let reply = Value::Array(vec![
            range(0, 99, "10.0.0.1", 7000, None),
            range(200, 299, "10.0.0.1", 7000, None),
            range(300, 399, "10.0.0.2", 7000, None),
        ]);
        let owners = Owners::parse(&reply).unwrap();
        assert_eq!(owners.of(0), owners.of(250));
        assert_ne!(owners.of(0), owners.of(300));
        assert_eq!(owners.of(150), None);
        assert_eq!(owners.of(16_383), None);
    }

    #[test]
    fn a_reply_of_another_shape_is_refused() {
        assert_eq!(Owners::parse(&Value::Int(1)), None);
        assert_eq!(Owners::parse(&Value::Array(vec![Value::Int(1)])), None);
        // A range past the last slot.
        let reply = Value::Array(vec![range(0, 16_384, "h", 1, Some("a"))]);
        assert_eq!(Owners::parse(&reply), None);
        let reply = Value::Array(vec![range(-1, 3, "h", 1, Some("a"))]);
        assert_eq!(Owners::parse(&reply), None);
    }
}
