//! Tests that need `prometheus`, `promtool`, `kubectl` and
//! `kubernetes-validate` (and `redis-server`): the operations kit, proven
//! with the real tools.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod ops;
