//! `rate_limit` and `rate_limits` validation, with the reference's wording:
//! units, multipliers, algorithms and their options, `replaces`, windows.

use super::store::{check_allowance, check_store};
use super::*;
use crate::algorithm::calendar::{Calendar, CalendarUnit, parse_weekday};
use crate::config::rule::SlotKeys;

/// Largest `requests_per_unit` of a `sliding_log` limit: the log keeps one
/// entry per admitted hit, so this bounds its memory.
pub(super) const MAX_SLIDING_LOG_LIMIT: u32 = 10_000;

/// Checks a `rate_limits` list: every entry as a `rate_limit`, none
/// unlimited, all of one algorithm.
pub(super) fn check_rate_limits(
    check: &mut FileCheck<'_>,
    rate_limits: &[model::RateLimit],
    place: &Place<'_>,
) -> Option<(Policy, Vec<Arc<str>>)> {
    let here = place.render("");
    if rate_limits.is_empty() {
        check.issue(&here, "rate_limits must list at least one limit");
        return None;
    }
    if rate_limits.len() > MAX_LIMITS {
        check.issue(
            &here,
            format!(
                "rate_limits lists {} limits; at most {MAX_LIMITS} are allowed",
                rate_limits.len()
            ),
        );
        return None;
    }
    let mut limits = Vec::with_capacity(rate_limits.len());
    let mut replaces = Vec::new();
    let mut ok = true;
    for (index, rate_limit) in rate_limits.iter().enumerate() {
        let field = format!(".rate_limits[{index}]");
        if rate_limit.unlimited.unwrap_or(false) {
            check.issue(
                &place.render(&field),
                "unlimited is not allowed in rate_limits; use rate_limit",
            );
            ok = false;
            continue;
        }
        match check_rate_limit(check, rate_limit, place, &field) {
            Some((Policy::Limited(mut one), more)) => {
                limits.append(&mut one);
                replaces.extend(more);
            }
            _ => ok = false,
        }
    }
    // Shadow limits (candidates) are decided alone on counters of their
    // own, so only the enforced ones must share an algorithm and differ in
    // window length.
    let enforced: Vec<(usize, &Limit)> = limits
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.shadow_mode)
        .collect();
    if ok
        && let Some((_, first)) = enforced.first()
        && enforced.iter().any(|(_, l)| l.algorithm != first.algorithm)
    {
        check.issue(
            &here,
            "all rate_limits of a descriptor must use the same algorithm",
        );
        ok = false;
    }
    if ok
        && let Some((_, first)) = enforced.first()
        && first.algorithm == Algorithm::SlidingWindow
        && enforced.iter().any(|(_, l)| l.lease != first.lease)
    {
        // The enforced sliding windows of a descriptor are one store
        // operation, leased as a whole or not at all.
        check.issue(
            &here,
            "all sliding_window rate_limits of a descriptor must agree on lease",
        );
        ok = false;
    }
    if ok
        && let Some((_, first)) = enforced.first()
        && first.algorithm == Algorithm::SlidingWindow
        && enforced.iter().any(|(_, l)| l.store != first.store)
    {
        // One store operation: on one store.
        check.issue(
            &here,
            "all sliding_window rate_limits of a descriptor must agree on store",
        );
        ok = false;
    }
    if ok && enforced.len() > 1 && enforced.iter().any(|(_, l)| check.fixed_only_at(l.store)) {
        // memcached keys, written as the reference writes them, hold the
        // window's start but not its length: a second and a minute of one
        // descriptor would share a counter at every minute's start.
        check.issue(
            &here,
            "several enforced limits on one descriptor need Redis or the embedded store: the memcache store keeps one limit per descriptor, as the reference",
        );
        ok = false;
    }
    if ok {
        // Two limits of one window length would share one counter (its key
        // is the window) and count every hit twice.
        for (n, &(j, limit)) in enforced.iter().enumerate() {
            let first = enforced.iter().take(n).find(|(_, other)| {
                other.window_secs() == limit.window_secs() && other.calendar == limit.calendar
            });
            if let Some(&(i, _)) = first {
                check.issue(
                    &place.render(&format!(".rate_limits[{j}]")),
                    format!(
                        "has the same window ({} s) as rate_limits[{i}]; the windows of one descriptor must differ",
                        limit.window_secs()
                    ),
                );
                ok = false;
            }
        }
    }
    // Enforced limits first: the limiter decides them as one group and the
    // candidates after them, one by one.
    limits.sort_by_key(|l| l.shadow_mode);
    ok.then_some((Policy::Limited(limits), replaces))
}

/// Checks one `rate_limit` (at `field`, e.g. `.rate_limit`); `None` when it
/// has a problem (already reported).
pub(super) fn check_rate_limit(
    check: &mut FileCheck<'_>,
    rate_limit: &model::RateLimit,
    place: &Place<'_>,
    field: &str,
) -> Option<(Policy, Vec<Arc<str>>)> {
    let before = check.issues.len();
    let here = if field == ".rate_limit" {
        place.render("")
    } else {
        place.render(field)
    };
    let unlimited = rate_limit.unlimited.unwrap_or(false);
    let unit_text = rate_limit.unit.as_deref();
    let unit = unit_text.and_then(Unit::parse);
    if unlimited {
        // As in the reference, only a *valid* unit conflicts with unlimited.
        if unit.is_some() {
            check.issue(&here, "should not specify rate limit unit when unlimited");
        }
    } else {
        match unit_text {
            None => check.issue(
                &here,
                "missing rate limit unit (second, minute, hour, day, week, month or year)",
            ),
            Some(text) if unit.is_none() => {
                check.issue(&here, format!("invalid rate limit unit '{text}'"));
            }
            Some(_) => {}
        }
        if rate_limit.requests_per_unit.is_none() {
            check.issue(
                &here,
                "missing requests_per_unit (0 is allowed and blocks every request)",
            );
        }
    }
    let unit_multiplier = NonZeroU32::new(rate_limit.unit_multiplier.unwrap_or(1));
    if unit_multiplier.is_none() {
        check.issue(&here, "unit_multiplier must be at least 1");
    }
    let algorithm = match rate_limit.algorithm.as_deref() {
        None => Some(Algorithm::default()),
        Some(name) => {
            let algorithm = Algorithm::parse(name);
            if algorithm.is_none() {
                let supported: Vec<_> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
                check.issue(
                    &here,
                    format!(
                        "unknown algorithm '{name}' (supported: {})",
                        supported.join(", ")
                    ),
                );
            }
            algorithm
        }
    };
    let name = rate_limit.name.as_deref();
    let mut replaces = Vec::new();
    for (index, entry) in rate_limit.replaces.iter().flatten().enumerate() {
        let at = place.render(&format!("{field}.replaces[{index}]"));
        match entry.name.as_deref() {
            None | Some("") => check.issue(&at, "should not have an empty replaces entry"),
            Some(replaced) if Some(replaced) == name => {
                check.issue(&at, "replaces should not contain name of same descriptor");
            }
            Some(replaced) => replaces.push(Arc::from(replaced)),
        }
    }
    let store = check_store(check, rate_limit, &here, unlimited);
    let fixed_only = store.is_some_and(|(_, fixed_only)| fixed_only);
    if let Some(algorithm) = algorithm {
        if fixed_only && algorithm != Algorithm::FixedWindow && !unlimited {
            check.issue(
                &here,
                format!(
                    "algorithm {} needs Redis or the embedded store: the memcache store counts fixed_window only",
                    algorithm.as_str()
                ),
            );
        }
        if rate_limit.burst.is_some() && algorithm != Algorithm::Gcra {
            check.issue(&here, "burst is only valid with algorithm gcra");
        }
        if rate_limit.burst == Some(0) {
            check.issue(&here, "burst must be at least 1");
        }
        if rate_limit.count_rejected.is_some() && algorithm != Algorithm::SlidingWindow {
            check.issue(
                &here,
                "count_rejected is only valid with algorithm sliding_window",
            );
        }
        if rate_limit.lease == Some(true)
            && !unlimited
            && !matches!(
                algorithm,
                Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::Gcra
            )
        {
            check.issue(
                &here,
                format!(
                    "lease is only valid with algorithm fixed_window, sliding_window or gcra, not {}",
                    algorithm.as_str()
                ),
            );
        }
        if let Some(limit) = rate_limit.requests_per_unit
            && algorithm == Algorithm::SlidingLog
            && limit > MAX_SLIDING_LOG_LIMIT
        {
            check.issue(
                &here,
                format!(
                    "sliding_log keeps one entry per hit: requests_per_unit {limit} is over the maximum of {MAX_SLIDING_LOG_LIMIT}; use sliding_window"
                ),
            );
        }
    }
    let allowance = check_allowance(check, rate_limit, &here, algorithm);
    let calendar = check_calendar(check, rate_limit, &here, unit, unit_multiplier, algorithm);
    let slot = check_slot_keys(check, rate_limit, &here, algorithm);
    if unlimited && rate_limit.shadow_mode == Some(true) {
        check.issue(&here, "shadow_mode cannot be set on an unlimited limit");
    }
    if check.issues.len() != before {
        return None;
    }
    let policy = if unlimited {
        Policy::Unlimited {
            requests_per_unit: rate_limit.requests_per_unit.unwrap_or(0),
        }
    } else {
        Policy::Limited(vec![Limit {
            name: name.filter(|name| !name.is_empty()).map(Arc::from),
            requests_per_unit: rate_limit.requests_per_unit?,
            unit: unit?,
            unit_multiplier: unit_multiplier?,
            algorithm: algorithm?,
            burst: rate_limit.burst,
            count_rejected: rate_limit.count_rejected.unwrap_or(false),
            shadow_mode: rate_limit.shadow_mode.unwrap_or(false),
            calendar,
            slot,
            lease: rate_limit.lease.unwrap_or(false),
            store: store.map_or(0, |(index, _)| index),
            partition_allowance: allowance.map_or(0, |share| {
                // Whole hits, rounded down: the stated bound is never
                // exceeded.
                let limit = f64::from(rate_limit.requests_per_unit.unwrap_or(0));
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let hits = (share * limit).floor() as u64;
                hits
            }),
        }])
    };
    Some((policy, replaces))
}

/// `calendar`, `time_zone` and `week_start` (extension): a fixed window of
/// a day, week, month or year, one unit long, in a zone the time-zone
/// database knows. `None` when off or wrong (wrong is reported).
fn check_calendar(
    check: &mut FileCheck<'_>,
    rate_limit: &model::RateLimit,
    here: &str,
    unit: Option<Unit>,
    unit_multiplier: Option<NonZeroU32>,
    algorithm: Option<Algorithm>,
) -> Option<&'static Calendar> {
    if rate_limit.calendar != Some(true) {
        if rate_limit.time_zone.is_some() || rate_limit.week_start.is_some() {
            check.issue(here, "time_zone and week_start need calendar: true");
        }
        return None;
    }
    let calendar_unit = match unit {
        Some(Unit::Day) => Some(CalendarUnit::Day),
        Some(Unit::Week) => Some(CalendarUnit::Week),
        Some(Unit::Month) => Some(CalendarUnit::Month),
        Some(Unit::Year) => Some(CalendarUnit::Year),
        _ => None,
    };
    let mut ok = true;
    if calendar_unit.is_none() {
        check.issue(here, "calendar windows need unit day, week, month or year");
        ok = false;
    }
    if algorithm.is_some_and(|a| a != Algorithm::FixedWindow) {
        check.issue(here, "calendar is only valid with algorithm fixed_window");
        ok = false;
    }
    if unit_multiplier.is_some_and(|m| m.get() != 1) {
        check.issue(
            here,
            "calendar windows are one unit long: unit_multiplier must be 1",
        );
        ok = false;
    }
    if rate_limit.week_start.is_some() && unit != Some(Unit::Week) {
        check.issue(here, "week_start is only valid with unit week");
        ok = false;
    }
    let week_start = match rate_limit.week_start.as_deref() {
        None => Some(jiff::civil::Weekday::Monday),
        Some(name) => {
            let day = parse_weekday(name);
            if day.is_none() {
                check.issue(
                    here,
                    format!("invalid week_start '{name}' (monday, tuesday, ..., sunday)"),
                );
            }
            day
        }
    };
    let zone = rate_limit.time_zone.as_deref().unwrap_or("UTC");
    match (ok, calendar_unit, week_start) {
        (true, Some(unit), Some(week_start)) => match Calendar::interned(unit, zone, week_start) {
            Ok(calendar) => Some(calendar),
            Err(err) => {
                check.issue(here, err.to_string());
                None
            }
        },
        _ => None,
    }
}

/// `slot_key` and `release_key` (extension): both, and only, on a
/// concurrency limit, two different entry keys.
fn check_slot_keys(
    check: &mut FileCheck<'_>,
    rate_limit: &model::RateLimit,
    here: &str,
    algorithm: Option<Algorithm>,
) -> Option<SlotKeys> {
    let slot_key = rate_limit.slot_key.as_deref().filter(|k| !k.is_empty());
    let release_key = rate_limit.release_key.as_deref().filter(|k| !k.is_empty());
    if algorithm != Some(Algorithm::Concurrency) {
        if slot_key.is_some() || release_key.is_some() {
            check.issue(
                here,
                "slot_key and release_key are only valid with algorithm concurrency",
            );
        }
        return None;
    }
    match (slot_key, release_key) {
        (Some(slot_key), Some(release_key)) if slot_key != release_key => Some(SlotKeys {
            slot_key: Arc::from(slot_key),
            release_key: Arc::from(release_key),
        }),
        (Some(_), Some(_)) => {
            check.issue(here, "slot_key and release_key must differ");
            None
        }
        _ => {
            check.issue(
                here,
                "algorithm concurrency needs slot_key (the entry holding the request's id) and release_key (the entry marking its release)",
            );
            None
        }
    }
}
