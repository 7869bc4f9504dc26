//! Rule files: YAML in (`model`), validated into a descriptor `Index`
//! (`validation`), looked up per request (`index`).
//!
//! Only `model` and `validation` touch the YAML crate; `index` is pure lookup.

mod index;
mod model;
mod validation;

pub use index::{Algorithm, DomainSummary, Index, Limit, Lookup, Match, Policy, Rule};
pub use validation::{ConfigError, ConfigIssue, LoadOptions, Source, load_dir, load_sources};
