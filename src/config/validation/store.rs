//! `store` and `partition_allowance` (extensions): the store a limit
//! counts on, and what an instance cut off from it admits on its own.

use super::*;

/// `store: NAME` (extension): a store the process has, as its place and
/// whether it counts fixed windows only; `None` when unknown (reported).
pub(super) fn check_store(
    check: &mut FileCheck<'_>,
    rate_limit: &model::RateLimit,
    here: &str,
    unlimited: bool,
) -> Option<(u8, bool)> {
    let name = rate_limit.store.as_deref();
    let found = check.store(name);
    if found.is_none() {
        let known = check.store_names();
        check.issue(
            here,
            format!(
                "store '{}' is not defined (stores: {known}; STORES_FILE defines more)",
                name.unwrap_or_default()
            ),
        );
    } else if unlimited && name.is_some() {
        check.issue(here, "store is not valid on an unlimited limit");
    }
    found
}

/// `partition_allowance: F` (extension): 0 to 1, on a leased fixed
/// window (the hits admitted on their own are charged to the window's
/// counter when the store is back, which only a fixed window's counter
/// takes as they were admitted). `None` when absent or wrong (reported).
pub(super) fn check_allowance(
    check: &mut FileCheck<'_>,
    rate_limit: &model::RateLimit,
    here: &str,
    algorithm: Option<Algorithm>,
) -> Option<f64> {
    let number = rate_limit.partition_allowance.as_ref()?;
    let share = number.as_f64().filter(|f| (0.0..=1.0).contains(f));
    if share.is_none() {
        check.issue(
            here,
            format!("partition_allowance must be a number from 0 to 1, not {number}"),
        );
    }
    if rate_limit.lease != Some(true) || algorithm != Some(Algorithm::FixedWindow) {
        check.issue(
            here,
            "partition_allowance is only valid on a leased fixed window (lease: true, algorithm fixed_window)",
        );
        return None;
    }
    share
}
