//! Leased quotas (`lease: true`): blocks of hits taken from the store,
//! given back unused, or stranded (counted in the store, never admitted),
//! and the hits they held. Every label set is fixed.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// What became of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Taken from the store.
    Taken,
    /// Its unused hits given back to their window or bucket.
    GivenBack,
    /// Its unused hits left counted in the store until their window ends
    /// (a GCRA block that lapsed, or a give-back the store refused).
    Stranded,
    /// Hits admitted on an instance's own while the store was unreachable
    /// (`partition_allowance`; no block).
    Credited,
    /// Such hits charged to the store once it was back.
    Charged,
}

impl Fate {
    const ALL: [Self; 5] = [
        Self::Taken,
        Self::GivenBack,
        Self::Stranded,
        Self::Credited,
        Self::Charged,
    ];

    /// The `outcome` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Taken => "taken",
            Self::GivenBack => "given_back",
            Self::Stranded => "stranded",
            Self::Credited => "credited",
            Self::Charged => "charged",
        }
    }
}

/// Blocks and their hits, by fate.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    blocks: [AtomicU64; 5],
    hits: [AtomicU64; 5],
}

impl LeaseMetrics {
    /// `blocks` blocks of `hits` hits in all met `fate`.
    pub fn record(&self, fate: Fate, blocks: u64, hits: u64) {
        if let Some(count) = self.blocks.get(fate as usize) {
            count.fetch_add(blocks, Ordering::Relaxed);
        }
        if let Some(count) = self.hits.get(fate as usize) {
            count.fetch_add(hits, Ordering::Relaxed);
        }
    }

    /// Blocks and hits that met `fate` so far.
    pub fn get(&self, fate: Fate) -> (u64, u64) {
        let read = |all: &[AtomicU64; 5]| {
            all.get(fate as usize)
                .map_or(0, |c| c.load(Ordering::Relaxed))
        };
        (read(&self.blocks), read(&self.hits))
    }

    /// Appends both counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        for (name, help, index) in [
            (
                "ratelimit_lease_blocks_total",
                "Leased blocks of hits, by outcome: taken from the store, given back unused, stranded; credited and charged: partition_allowance admissions and their charges to the store.",
                0,
            ),
            (
                "ratelimit_lease_hits_total",
                "Hits in leased blocks, by outcome (given_back and stranded: the unused ones).",
                1,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for fate in Fate::ALL {
                let (blocks, hits) = self.get(fate);
                let value = if index == 0 { blocks } else { hits };
                let _ = writeln!(out, "{name}{{outcome=\"{}\"}} {value}", fate.as_str());
            }
        }
    }
}
