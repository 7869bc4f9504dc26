//! Global limits across regions (`regions`), tests that need redis-server on
//! PATH and run for minutes of real time: a per-minute budget is watched
//! over whole minutes through a simulated WAN, and decision times are
//! compared to within 2 ms, so `scripts/test.sh` runs this binary alone,
//! after the others; `Cargo.toml` keeps it out of a plain `cargo test`
//! (`test = false`), and `cargo test --test regions` runs it.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod regions;
