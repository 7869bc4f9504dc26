//! Operator views that never count: the per-domain heavy hitters behind
//! `GET /top` and the live page. (`/explain` is computed by the limiter,
//! [`crate::limiter::Limiter::explain`], which owns the decision it
//! mirrors.)
//!
//! Owns: bounded summaries of descriptors by hits and by over-limit answers.
//! Must not touch: counters, stores, rules or the wire format.

pub(crate) mod summary;
pub(crate) mod top;

pub use top::TopRecorder;
pub(crate) use top::{By, TopItem, Window};
