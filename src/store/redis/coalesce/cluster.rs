//! Cluster lanes: each master has lanes of its own, over connections
//! floodgate dials to it directly, so each node's calls go and come back on
//! their own. A request's operations are split by the node that serves
//! their slot (floodgate's slot table), each part joins the queue of its
//! node's lane, and the parts' replies are put back in order. A node that
//! does not answer delays and fails only the requests that touch its slots;
//! a request whose operations are all on live nodes is answered at normal
//! speed.
//!
//! A node lane's call carries the operations of every hash tag its node
//! serves. A call's declared keys must share a slot, so the call carries
//! its keys as arguments (`node_batch.lua`) and checks, before writing
//! anything, that the node serves each of its slots and is not moving it
//! (one probe key per slot); a call of one hash tag declares its keys (the
//! plain batch script), and the server itself checks the slot. Where
//! floodgate's slot table was wrong (a slot moved, is moving, or a master
//! was demoted), the call writes nothing and its requests go to a routed
//! lane: one call per hash tag through the cluster client, which follows
//! MOVED and ASK. A second round trip for them, never a lost or doubled
//! count. Operations of a slot the table does not place go routed from the
//! start.
//!
//! The slot table is read again (at most four times a second) when a call
//! finds it wrong, when a node call fails (a master may have died and its
//! replica been promoted) and on MOVED or CLUSTERDOWN.

use super::{Job, Lane, LaneOp, Replies, Target, batch_of};
use crate::store::StoreError;
use crate::store::redis::command::{KeysIn, key_of};
use crate::store::redis::fault::Signals;
use crate::store::redis::slots::{Owners, SlotTable, slot_of};
use arc_swap::ArcSwapOption;
use futures_util::future::join_all;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use tokio::time::Instant;
use tracing::warn;

/// Dials a Cluster master directly, as the cluster client would (auth,
/// TLS, timeouts): what a node lane's connection is made of.
pub(in crate::store::redis) type Dial =
    Box<dyn Fn(&str) -> Result<ConnectionManager, StoreError> + Send + Sync>;

/// The lanes of one Cluster connection: per master, and routed.
pub(in crate::store::redis) struct ClusterLanes {
    /// The cluster client: routed calls and reads of the slot table.
    conn: ClusterConnection,
    slots: Arc<SlotTable>,
    dial: Dial,
    /// Lanes per master (the pool size).
    per_node: usize,
    /// One call per hash tag through the cluster client.
    routed: Vec<Lane>,
    /// The node lanes of the table last seen.
    placement: ArcSwapOption<Placement>,
    signals: Arc<Signals>,
    next: AtomicUsize,
    /// Bound of one read of the slot table from one node.
    read_within: Duration,
}

impl std::fmt::Debug for ClusterLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterLanes")
            .field("per_node", &self.per_node)
            .field("routed", &self.routed.len())
            .finish_non_exhaustive()
    }
}

/// The node lanes for one reading of the slot table.
struct Placement {
    owners: Arc<Owners>,
    /// By node number: its address, a connection for reading the table,
    /// its lanes (none when it could not be dialled: its operations go
    /// routed).
    nodes: Vec<NodeLanes>,
}

struct NodeLanes {
    addr: String,
    conn: Option<ConnectionManager>,
    lanes: Vec<Lane>,
}

/// What a node lane needs besides its connection.
pub(in crate::store::redis) struct Node {
    pub(super) conn: ConnectionManager,
    /// Where the jobs of slots this node no longer serves go.
    routed: Lane,
    slots: Arc<SlotTable>,
}

impl Node {
    /// The call for a round's operations: the node batch script with one
    /// probe per slot, or the plain batch script when they share one hash
    /// tag (one slot, which the server checks itself).
    pub(super) fn command<'a>(
        &self,
        ops: impl Iterator<Item = &'a LaneOp> + Clone,
    ) -> (redis::Cmd, usize) {
        node_command(ops)
    }

    /// The node does not serve one of the call's slots (nothing was
    /// written): the table is read again, and the jobs go routed.
    pub(super) fn not_here(&self, batch: &mut Vec<Job>) {
        self.slots.mark_stale();
        self.routed.forward(batch);
    }

    /// The node's call failed: it may have died, and a replica taken its
    /// slots.
    pub(super) fn failed(&self) {
        self.slots.mark_stale();
    }
}

/// See [`Node::command`].
fn node_command<'a>(ops: impl Iterator<Item = &'a LaneOp> + Clone) -> (redis::Cmd, usize) {
    let mut tags = ops.clone().map(|op| hash_tag(&op.cmd));
    let first = tags.next();
    if tags.all(|tag| Some(tag) == first) {
        return batch_of(ops, KeysIn::Keys);
    }
    let mut slots: Vec<u16> = Vec::new();
    let mut probes = Vec::new();
    for op in ops.clone() {
        let tag = hash_tag(&op.cmd);
        let slot = slot_of(tag);
        if !slots.contains(&slot) {
            slots.push(slot);
            probes.push(probe_key(key_of(&op.cmd), tag));
        }
    }
    batch_of(ops, KeysIn::Args { probes: &probes })
}

impl ClusterLanes {
    /// Lanes over `conn` (routed) and over connections `dial` makes to each
    /// master the table names, `per_node` per master.
    pub(in crate::store::redis) fn new(
        conn: ClusterConnection,
        slots: Arc<SlotTable>,
        dial: Dial,
        per_node: usize,
        signals: Arc<Signals>,
        read_within: Duration,
    ) -> Self {
        let routed = (0..per_node.max(1))
            .map(|_| Lane::spawn_routed(conn.clone(), Arc::clone(&signals)))
            .collect();
        Self {
            conn,
            slots,
            dial,
            per_node: per_node.max(1),
            routed,
            placement: ArcSwapOption::empty(),
            signals,
            next: AtomicUsize::new(0),
            read_within,
        }
    }

    /// Runs one request's operations: each part on its node's lane, all at
    /// once; the replies in the operations' order, or the first part's
    /// error.
    pub(in crate::store::redis) async fn run(
        &self,
        ops: Vec<LaneOp>,
        deadline: Instant,
    ) -> Replies {
        let placement = self.placement();
        self.slots.refresh_if_stale(
            &self.conn,
            || {
                placement
                    .iter()
                    .flat_map(|p| p.nodes.iter().filter_map(|n| n.conn.clone()))
                    .collect()
            },
            self.read_within,
        );
        let pick = super::in_runs(&self.next, usize::MAX);
        let node_of = |op: &LaneOp| {
            let owners = &placement.as_deref()?.owners;
            owners.of(slot_of(hash_tag(&op.cmd)))
        };
        let first = ops.first().and_then(node_of);
        if ops.iter().all(|op| node_of(op) == first) {
            let lane = self.lane(placement.as_deref(), first, pick);
            return lane
                .ok_or_else(super::lane_closed)?
                .run(ops, deadline)
                .await;
        }
        // Several nodes: split, run the parts at once, put the replies
        // back in order.
        let lens: Vec<usize> = ops.iter().map(|op| op.reply_len).collect();
        let mut parts: Vec<(Option<u16>, Vec<usize>, Vec<LaneOp>)> = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            let node = node_of(&op);
            match parts.iter_mut().find(|(n, _, _)| *n == node) {
                Some((_, at, part)) => {
                    at.push(i);
                    part.push(op);
                }
                None => parts.push((node, vec![i], vec![op])),
            }
        }
        let results = join_all(parts.into_iter().map(|(node, at, part)| {
            let lane = self.lane(placement.as_deref(), node, pick);
            async move {
                let result = match lane {
                    Some(lane) => lane.run(part, deadline).await,
                    None => Err(super::lane_closed()),
                };
                (at, result)
            }
        }))
        .await;
        let mut own: Vec<&[i64]> = vec![&[]; lens.len()];
        let mut all = Vec::with_capacity(results.len());
        for (at, result) in &results {
            let replies = result.as_ref().map_err(Clone::clone)?;
            all.push((at, replies));
        }
        for (at, replies) in all {
            let mut rest = replies.as_slice();
            for &i in at {
                let n = lens.get(i).copied().unwrap_or(0);
                let (mine, tail) = rest.split_at_checked(n).unwrap_or((rest, &[]));
                rest = tail;
                if let Some(slot) = own.get_mut(i) {
                    *slot = mine;
                }
            }
        }
        Ok(own.concat())
    }

    /// The lane for operations of `node` (routed when the table places
    /// them nowhere, or their node could not be dialled).
    fn lane<'a>(
        &'a self,
        placement: Option<&'a Placement>,
        node: Option<u16>,
        pick: usize,
    ) -> Option<&'a Lane> {
        let lanes = node
            .and_then(|node| placement?.nodes.get(usize::from(node)))
            .map(|node| node.lanes.as_slice())
            .filter(|lanes| !lanes.is_empty())
            .unwrap_or(&self.routed);
        lanes.get(pick % lanes.len().max(1))
    }

    /// The node lanes for the table as last read, built when the table
    /// changed (lanes of masters still named are kept; the others end
    /// with their last request).
    fn placement(&self) -> Option<Arc<Placement>> {
        let owners = self.slots.owners()?;
        let current = self.placement.load_full();
        if let Some(current) = &current
            && Arc::ptr_eq(&current.owners, &owners)
        {
            return Some(Arc::clone(current));
        }
        let nodes = owners
            .addrs()
            .iter()
            .map(|addr| {
                if let Some(kept) = current
                    .as_deref()
                    .and_then(|p| p.nodes.iter().find(|n| &n.addr == addr))
                {
                    return NodeLanes {
                        addr: addr.clone(),
                        conn: kept.conn.clone(),
                        lanes: kept.lanes.clone(),
                    };
                }
                self.dial_node(addr)
            })
            .collect();
        let placement = Arc::new(Placement { owners, nodes });
        self.placement.store(Some(Arc::clone(&placement)));
        Some(placement)
    }

    fn dial_node(&self, addr: &str) -> NodeLanes {
        match (self.dial)(addr) {
            Ok(conn) => {
                let routed = self.routed.first().cloned();
                let lanes = routed
                    .map(|routed| {
                        (0..self.per_node)
                            .map(|_| {
                                let node = Node {
                                    conn: conn.clone(),
                                    routed: routed.clone(),
                                    slots: Arc::clone(&self.slots),
                                };
                                Lane::spawn(Target::Node(node), Arc::clone(&self.signals))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                NodeLanes {
                    addr: addr.to_owned(),
                    conn: Some(conn),
                    lanes,
                }
            }
            Err(err) => {
                warn!(error = &err as &dyn std::error::Error, redis.node = %addr, "cannot dial a Cluster master; its operations go through the cluster client");
                NodeLanes {
                    addr: addr.to_owned(),
                    conn: None,
                    lanes: Vec::new(),
                }
            }
        }
    }
}

/// The probe key of the slot of `key` (whose hash tag is `tag`): a key of
/// that slot that never exists (the tag and a suffix no counter key has).
/// A key without a hash tag is its own slot's probe.
fn probe_key(key: &[u8], tag: &[u8]) -> Vec<u8> {
    if tag.len() == key.len() {
        key.to_vec()
    } else {
        [b"{", tag, b"}", PROBE_SUFFIX].concat()
    }
}

/// The suffix of probe keys: no counter key ends its hash tag with it.
const PROBE_SUFFIX: &[u8] = b"floodgate:slot-probe";

/// The bytes Redis hashes to place an operation's key: between its first
/// `{` and the next `}` when non-empty, else the whole key. Equal tags,
/// equal slots.
pub(super) fn hash_tag(cmd: &redis::Cmd) -> &[u8] {
    let key = key_of(cmd);
    key.iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = key.get(open + 1..)?;
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| rest.get(..close)).flatten()
        })
        .unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::super::routed::per_tag;
    use super::{LaneOp, hash_tag, probe_key};
    use crate::store::redis::slots::slot_of;

    fn op(key: &str) -> redis::Cmd {
        let mut cmd = redis::Cmd::new();
        cmd.arg(key).arg(5);
        cmd
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(hash_tag(&op("p:{d|k=v}f60:0")), b"d|k=v");
        assert_eq!(hash_tag(&op("{d|k=v}s1:0")), b"d|k=v");
        // An empty tag or none: the whole key is hashed.
        assert_eq!(hash_tag(&op("{}x")), b"{}x");
        assert_eq!(hash_tag(&op("plain")), b"plain");
        assert_eq!(hash_tag(&op("a{b")), b"a{b");
        // Only the first '{' counts.
        assert_eq!(hash_tag(&op("{a}{b}")), b"a");
    }

    fn job(keys: &[&str]) -> Vec<LaneOp> {
        keys.iter()
            .map(|key| LaneOp {
                algorithm: 1,
                reply_len: 2,
                cmd: op(key),
            })
            .collect()
    }

    #[test]
    fn a_routed_round_is_one_call_per_hash_tag_in_arrival_order() {
        let batch = vec![
            job(&["{a}x", "{b}x"]),
            job(&["{a}y"]),
            job(&["{b}z", "{c}w"]),
        ];
        let mut calls = per_tag(&batch);
        calls.sort_unstable();
        assert_eq!(
            calls,
            [vec![(0, 0), (1, 0)], vec![(0, 1), (2, 0)], vec![(2, 1)]]
        );
    }

    #[test]
    fn probes_are_one_missing_key_per_slot_in_that_slot() {
        for (key, probe) in [
            ("p:{a}f60:1", "{a}floodgate:slot-probe"),
            ("{b}s1:0", "{b}floodgate:slot-probe"),
            ("plain", "plain"),
        ] {
            let cmd = op(key);
            let tag = hash_tag(&cmd);
            let made = probe_key(key.as_bytes(), tag);
            assert_eq!(String::from_utf8_lossy(&made), probe);
            assert_eq!(
                slot_of(hash_tag(&op(std::str::from_utf8(&made).unwrap()))),
                slot_of(tag)
            );
        }
    }

    #[test]
    fn a_node_call_of_one_tag_declares_its_keys_and_of_many_probes_each_slot() {
        use crate::store::redis::command::bytes_of;
        use crate::store::redis::scripts;
        let text = |cmd: &redis::Cmd| -> Vec<String> {
            bytes_of(cmd)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        };
        let one = job(&["{hot}a", "{hot}b"]);
        let (cmd, expected) = super::node_command(one.iter());
        assert_eq!(expected, 4);
        assert_eq!(text(&cmd)[1], scripts::BATCH.get_hash());
        let many = job(&["p:{a}f60:1", "p:{a}f3600:0", "{b}s1:0", "plain"]);
        let (cmd, expected) = super::node_command(many.iter());
        assert_eq!(expected, 8);
        let args = text(&cmd);
        assert_eq!(args[1], scripts::NODE_BATCH.get_hash());
        // 0 keys, 4 operations, 3 probes (one per slot), the 4 keys, then
        // the probes.
        assert_eq!(&args[2..5], ["0", "4", "3"]);
        assert_eq!(
            &args[9..12],
            [
                "{a}floodgate:slot-probe",
                "{b}floodgate:slot-probe",
                "plain"
            ]
        );
    }
}
