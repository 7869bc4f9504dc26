//! Rule files: YAML in (`model`), validated into a descriptor [`Index`]
//! (`validation`), looked up per request (`index`), reloaded when the rule
//! directory changes (`watch`).
//!
//! Owns: everything about rule files, from the directory listing to the
//! lookup of a request descriptor, and the other rule source, an xDS
//! management server (`xds`, the one module here that touches the network).
//! Must not touch: process settings, counters, stores, or time (beyond the
//! watcher's poll interval and the xDS client's reconnect waits). Only
//! `model` and `validation` touch the YAML crate; `index` is pure lookup over
//! prebuilt data.
//!
//! A load either produces a complete [`Index`] or a [`ConfigError`] listing
//! every problem found ([`ConfigIssue`], one line each), so a reload can keep
//! serving the previous index untouched.

mod index;
#[cfg(test)]
pub(crate) use index::DomainSummary;
mod model;
mod redact;
mod rule;
mod specs;
pub(crate) mod table;
mod validation;
mod watch;
pub(crate) mod xds;

pub(crate) use index::{Algorithm, Limit, Match, Policy, Rule, StepMatch, TableUse, Walk};
pub use index::{Index, Lookup};
pub(crate) use index::{Metadata, SharedIndex};
pub use redact::{RedactError, Redactor};
pub(crate) use specs::{single_spec, specs};
pub use table::{
    Action, AuditPage, Change, KeyedEntry, Page, TableEntry, TableError, TableSummary, Tables,
    Unkept, Window, Writing,
};
pub(crate) use table::{SharedChange, SharedCursor, SharedTable, shared_items};
pub use validation::{ConfigError, LoadOptions, Source, StoreInfo, load_dir, load_sources};
pub(crate) use watch::DEFAULT_POLL_INTERVAL;
pub(crate) use watch::Fingerprint;
pub(crate) use watch::Watcher;
