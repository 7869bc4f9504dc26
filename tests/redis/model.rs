//! The decision semantics as a plain model, and a property: for random rule
//! sets and random request sequences under manual clocks (two instances,
//! skewed, stepping forward and back by up to `AHEAD_SECS` behind the
//! latest reading, the skew floodgate absorbs), the embedded store, a standalone
//! Redis and a 3-master Redis Cluster answer exactly what the model answers
//! (and memcached, on rules of fixed windows, all it counts):
//! per descriptor the code, the remaining count, the reset and the limit,
//! and the overall code. Limit tables change between requests (entries
//! put, changed, deleted; rules reading them take their limits).
//!
//! The model shares no code with `src/`: one small function per algorithm
//! over plain maps. `MODEL_CASES` sets the number of cases (default 24 per
//! store); e.g. `MODEL_CASES=2000 cargo test --test integration model`.

use crate::support::backends::{Backend, cluster, memory, redis_config, standalone};
use arc_swap::ArcSwap;
use floodgate::{Code, Limiter, LimiterOptions, TableEntry, Tables, Writing};
use floodgate::{Descriptor, RateLimitOverride, Request, Unit};
use floodgate::{LoadOptions, Source, StoreEntry, StoreInfo, load_sources};
use floodgate::{ManualClock, UnixMillis};
use floodgate::{MemcacheConfig, MemcacheStore, RedisConfig, RedisStore, StoreKind};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Window lengths rules draw from, seconds (with the unit and multiplier
/// that spell them): some short, one over 60 s, one an hour.
const WINDOWS: [(u64, &str, u32); 6] = [
    (1, "second", 1),
    (2, "second", 2),
    (10, "second", 10),
    (60, "minute", 1),
    (90, "second", 90),
    (3_600, "hour", 1),
];

const KEYS: usize = 5;

/// Calendar windows rules draw from: unit and zone (weeks start on Monday).
const CALENDARS: [(&str, &str); 4] = [
    ("day", "Europe/Paris"),
    ("week", "America/New_York"),
    ("month", "Australia/Lord_Howe"),
    ("day", "Australia/Lord_Howe"),
];

/// Window lengths from this value up stand for `CALENDARS[w - CALENDAR_W]`.
const CALENDAR_W: u64 = 1_000_000_000;

/// Where scenarios start, ms: any time, and a few seconds before local
/// midnights that begin or end a daylight-saving day (Paris's 23- and
/// 25-hour days, Lord Howe's half hours) and a New York week.
const STARTS: [u64; 5] = [
    1_700_000_080_000,
    1_774_738_780_000, // 2026-03-28T22:59:40Z, Paris 23:59:40, the 23-hour day next
    1_792_879_175_000, // 2026-10-24T21:59:35Z, Paris 23:59:35, the 25-hour day next
    1_775_395_790_000, // 2026-04-05T13:29:50Z, Lord Howe 23:59:50 of its 24.5-hour day
    1_793_595_595_000, // 2026-11-02T04:59:55Z, New York Sunday 23:59:55, end of a 169-hour week
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Fixed,
    Sliding,
    Log,
    Gcra,
    Concurrency,
}

/// One generated rule: a key `k<i>` with its limits (or unlimited).
#[derive(Debug, Clone)]
struct RuleGen {
    alg: Alg,
    /// `(limit, index into WINDOWS)`, distinct windows.
    limits: Vec<(u64, usize)>,
    burst: Option<u64>,
    unlimited: bool,
    shadow: bool,
    quota: bool,
    /// Replaces the (named) rule of this key.
    replaces: Option<usize>,
    /// A fixed window on this calendar (index into `CALENDARS`) instead of
    /// `limits`' windows: one limit, `calendar: true`.
    calendar: Option<usize>,
    /// Reads the limit table `t<i>` (one limit of a fixed window, sliding
    /// window or log, not on a calendar).
    table: bool,
    /// The store its limits count on ([`STORES`]); with `mix`, a fixed
    /// window's odd limits count on `local` instead.
    store: usize,
    mix: bool,
}

/// The stores rules name (`store:`): the backend under test (`default`),
/// a second store of its kind, and `local` (an embedded store).
const STORES: [&str; 3] = ["default", "other", "local"];

/// The place of the store limit `j` of `r` counts on.
fn store_of(r: &RuleGen, j: usize) -> usize {
    if r.mix && r.alg == Alg::Fixed && j % 2 == 1 {
        2
    } else {
        r.store
    }
}

/// A change to a limit table between requests.
#[derive(Debug, Clone, Copy)]
enum TableOp {
    Delete,
    Unlimited,
    /// `{"requests_per_unit": n}`: the rule's window, this limit.
    Limit(u64),
}

#[derive(Debug, Clone)]
struct DescGen {
    key: usize,
    value: u8,
    hits: Option<u64>,
    /// `(requests_per_unit, 0 second | 1 minute | 2 hour)`.
    limit_override: Option<(u32, u8)>,
    /// Concurrency entries after the rule's: `sid` = `m<member>`, and with
    /// `true` `rel` (a release).
    slot: Option<(u8, bool)>,
}

#[derive(Debug, Clone)]
struct Step {
    /// Table changes made before the request: (rule key, value, change).
    table_ops: Vec<(usize, u8, TableOp)>,
    instance: usize,
    /// Clock change before the request, ms (may be negative, small).
    advance_ms: i64,
    request_hits: u32,
    descriptors: Vec<DescGen>,
}

#[derive(Debug, Clone)]
struct Scenario {
    /// Index into `STARTS`: where the clocks begin.
    start: usize,
    rules: Vec<RuleGen>,
    stop_when_over: bool,
    local_cache: bool,
    /// Offset of instance 1's clock from instance 0's, ms.
    skew_ms: i64,
    steps: Vec<Step>,
}

fn rule_gen() -> impl Strategy<Value = RuleGen> {
    (
        prop_oneof![
            Just(Alg::Fixed),
            Just(Alg::Sliding),
            Just(Alg::Log),
            Just(Alg::Gcra),
            Just(Alg::Concurrency)
        ],
        proptest::collection::vec((0u64..6, 0usize..WINDOWS.len()), 1..4),
        proptest::option::of(1u64..5),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        proptest::option::weighted(0.15, 0usize..KEYS),
        proptest::option::weighted(0.3, 0usize..CALENDARS.len()),
        prop::bool::weighted(0.4),
        (0usize..STORES.len(), prop::bool::weighted(0.3)),
    )
        .prop_map(
            |(
                alg,
                mut limits,
                burst,
                unlimited,
                shadow,
                quota,
                replaces,
                calendar,
                table,
                (store, mix),
            )| {
                let mut seen = HashSet::new();
                limits.retain(|&(_, w)| seen.insert(w));
                let calendar = calendar.filter(|_| alg == Alg::Fixed && !unlimited);
                if calendar.is_some() || alg == Alg::Concurrency {
                    limits.truncate(1);
                }
                let table = table
                    && !unlimited
                    && calendar.is_none()
                    && limits.len() == 1
                    && matches!(alg, Alg::Fixed | Alg::Sliding | Alg::Log);
                RuleGen {
                    alg,
                    limits,
                    burst: burst.filter(|_| alg == Alg::Gcra),
                    unlimited,
                    shadow,
                    quota,
                    replaces,
                    calendar,
                    table,
                    store,
                    mix,
                }
            },
        )
}

fn step_gen() -> impl Strategy<Value = Step> {
    let desc = (
        0usize..=KEYS,
        0u8..2,
        proptest::option::weighted(0.4, 0u64..4),
        proptest::option::weighted(0.1, (0u32..5, 0u8..3)),
        proptest::option::weighted(0.4, (0u8..3, prop::bool::weighted(0.4))),
    )
        .prop_map(|(key, value, hits, limit_override, slot)| DescGen {
            key,
            value,
            hits,
            slot: slot.filter(|_| limit_override.is_none()),
            limit_override,
        });
    (
        0usize..2,
        prop_oneof![
            6 => Just(0i64),
            6 => 1i64..400,
            3 => 400i64..2_500,
            1 => Just(61_000i64),
            1 => Just(3_601_000i64),
            2 => -2_000i64..0,
        ],
        0u32..3,
        proptest::collection::vec(desc, 1..4),
        proptest::collection::vec(
            (
                0usize..KEYS,
                0u8..2,
                prop_oneof![
                    1 => Just(TableOp::Delete),
                    1 => Just(TableOp::Unlimited),
                    3 => (0u64..6).prop_map(TableOp::Limit),
                ],
            ),
            0..3,
        ),
    )
        .prop_map(
            |(instance, advance_ms, request_hits, descriptors, table_ops)| Step {
                table_ops,
                instance,
                advance_ms,
                request_hits,
                descriptors,
            },
        )
}

fn scenario_gen() -> impl Strategy<Value = Scenario> {
    (
        proptest::collection::vec(rule_gen(), KEYS),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0i64), -1_000i64..1_000],
        proptest::collection::vec(step_gen(), 1..40),
        0usize..STARTS.len(),
    )
        .prop_map(
            |(rules, stop_when_over, local_cache, skew_ms, steps, start)| Scenario {
                start,
                rules,
                stop_when_over,
                local_cache,
                skew_ms,
                steps,
            },
        )
}

/// The rules as a YAML file.
fn yaml(rules: &[RuleGen]) -> String {
    let mut out = String::from("domain: m\ndescriptors:\n");
    for (i, r) in rules.iter().enumerate() {
        let _ = writeln!(out, "  - key: k{i}");
        if r.shadow {
            out.push_str("    shadow_mode: true\n");
        }
        if r.quota {
            out.push_str("    quota_mode: true\n");
        }
        if r.unlimited {
            let replaces = r
                .replaces
                .filter(|&j| j != i)
                .map(|j| format!(", replaces: [{{name: n{j}}}]"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    rate_limit: {{unlimited: true, name: n{i}{replaces}}}"
            );
            continue;
        }
        let alg = match r.alg {
            Alg::Fixed => "fixed_window",
            Alg::Sliding => "sliding_window",
            Alg::Log => "sliding_log",
            Alg::Gcra => "gcra",
            Alg::Concurrency => "concurrency",
        };
        let slot_keys = if r.alg == Alg::Concurrency {
            ", slot_key: sid, release_key: rel"
        } else {
            ""
        };
        let one = |j: usize, &(limit, w): &(u64, usize)| {
            let store = match store_of(r, j) {
                0 => String::new(),
                at => format!(", store: {}", STORES[at]),
            };
            if let Some(c) = r.calendar {
                let (unit, zone) = CALENDARS[c];
                return format!(
                    "{{unit: {unit}, calendar: true, time_zone: {zone}, requests_per_unit: {limit}, algorithm: fixed_window{store}"
                );
            }
            let (_, unit, mult) = WINDOWS[w];
            let burst = r.burst.map(|b| format!(", burst: {b}")).unwrap_or_default();
            format!(
                "{{unit: {unit}, unit_multiplier: {mult}, requests_per_unit: {limit}, algorithm: {alg}{burst}{slot_keys}{store}"
            )
        };
        // One limit: a named `rate_limit` (replaceable); several: a list.
        if let [single] = r.limits.as_slice() {
            let replaces = r
                .replaces
                .filter(|&j| j != i)
                .map(|j| format!(", replaces: [{{name: n{j}}}]"))
                .unwrap_or_default();
            let table = if r.table {
                format!(", table: t{i}")
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "    rate_limit: {}, name: n{i}{replaces}{table}}}",
                one(0, single)
            );
        } else {
            out.push_str("    rate_limits:\n");
            for (j, l) in r.limits.iter().enumerate() {
                let _ = writeln!(out, "      - {}}}", one(j, l));
            }
        }
    }
    out
}

// ---------------------------------------------------------------- the model

/// What the model says of one counter operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    pub(crate) over: bool,
    pub(crate) remaining: u64,
    reset_ms: u64,
    counted: bool,
    /// Which limit of the operation it reports.
    index: usize,
    /// Fixed window: the count before.
    pub(crate) before: u64,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Model {
    /// (id, window s, window start s) -> count; under `reference_keys` the
    /// window is 0 for the reference's unit lengths.
    fixed: HashMap<(String, u64, u64), u64>,
    /// Fixed-window counters keyed as the reference keys them in memcached:
    /// by descriptor and window start, without the window's length when it
    /// is one of the reference's units (a second and a minute of one
    /// descriptor share a counter at a minute's start).
    reference_keys: bool,
    /// (id, bucket s, bucket start s) -> count.
    buckets: HashMap<(String, u64, u64), u64>,
    /// id -> admitted hit times, µs.
    log: HashMap<String, Vec<u64>>,
    /// (id, interval µs, burst) -> theoretical arrival time, µs.
    tat: HashMap<(String, u64, u64), u64>,
    /// Per instance: fixed windows known over: (id, window s, start s).
    cache: [HashSet<(String, u64, u64)>; 2],
    /// (id, slot lifetime ms) -> held slots: (member, expiry ms).
    slots: HashMap<(String, u64), Vec<(u64, u64)>>,
    /// Members of acquires that name no slot (never released).
    anonymous: u64,
    /// Limit table entries: (rule key, value) -> `None` unlimited, else
    /// the limit.
    tables: HashMap<(usize, u8), Option<u64>>,
}

fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1_000)
}

/// Start and end (s) of the fixed window of `w` holding second `s`: epoch
/// aligned, or for `w >= CALENDAR_W` local midnight to local midnight of
/// the calendar's day, Monday-started week or month (written with jiff's
/// zoned arithmetic, apart from floodgate's own code).
fn window_bounds(w: u64, s: u64) -> (u64, u64) {
    if w < CALENDAR_W {
        let start = s - s % w;
        return (start, start + w);
    }
    let (unit, zone) = CALENDARS[usize::try_from(w - CALENDAR_W).unwrap()];
    let tz = jiff::tz::TimeZone::get(zone).unwrap();
    let here = jiff::Timestamp::from_second(i64::try_from(s).unwrap())
        .unwrap()
        .to_zoned_datetime(tz.clone());
    let mut first = here.date();
    let mut next = first.tomorrow().unwrap();
    match unit {
        "day" => {}
        "week" => {
            while first.weekday() != jiff::civil::Weekday::Monday {
                first = first.yesterday().unwrap();
            }
            next = first;
            for _ in 0..7 {
                next = next.tomorrow().unwrap();
            }
        }
        _ => {
            first = first.first_of_month();
            next = first.last_of_month().tomorrow().unwrap();
        }
    }
    let midnight = |date: jiff::civil::Date| {
        let noon = date.at(12, 0, 0, 0).to_zoned_datetime(tz.clone()).unwrap();
        u64::try_from(noon.start_of_day().unwrap().timestamp().as_second()).unwrap()
    };
    (midnight(first), midnight(next))
}

/// The counter a fixed window of `w` seconds starting at `start` counts on.
fn fixed_key(m: &Model, id: &str, w: u64, start: u64) -> (String, u64, u64) {
    const REFERENCE_UNITS: [u64; 7] = [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000];
    let w = if m.reference_keys && REFERENCE_UNITS.contains(&w) {
        0
    } else {
        w
    };
    (id.to_owned(), w, start)
}

/// Fixed window; `refuse`: stop-increment (hits that would go over are not
/// counted).
pub(crate) fn fixed(
    m: &mut Model,
    id: &str,
    limit: u64,
    w: u64,
    hits: u64,
    now: u64,
    refuse: bool,
) -> Out {
    let s = now / 1_000;
    let (start, end) = window_bounds(w, s);
    let reset_ms = (end - s) * 1_000;
    let count = m.fixed.entry(fixed_key(m, id, w, start)).or_default();
    let before = *count;
    if refuse && hits > 0 && before + hits > limit {
        return Out {
            over: true,
            remaining: 0,
            reset_ms,
            counted: false,
            index: 0,
            before,
        };
    }
    *count += hits;
    let after = *count;
    let over = after > limit;
    Out {
        over,
        remaining: if over { 0 } else { limit - after },
        reset_ms,
        counted: true,
        index: 0,
        before,
    }
}

/// Concurrency: `limit` slots, each living `ttl_ms` from its acquire unless
/// released; slots expired at or before now are free. An acquire (hits >
/// 0) of a member holding a slot renews it; of another, takes one if any
/// is free, else is refused (reset: until the oldest slot expires). A
/// release frees the member's slot if it holds one and is never refused.
/// Hits 0 reads (over when every slot is held).
#[allow(clippy::too_many_arguments)]
fn concurrency(
    m: &mut Model,
    id: &str,
    limit: u64,
    ttl_ms: u64,
    member: u64,
    release: bool,
    hits: u64,
    now: u64,
) -> Out {
    let held = m.slots.entry((id.to_owned(), ttl_ms)).or_default();
    held.retain(|&(_, expiry)| expiry > now);
    let before = held.len() as u64;
    let earliest = held.iter().map(|&(_, expiry)| expiry).min();
    let mine = held.iter().position(|&(m, _)| m == member);
    let (after, over, counted) = match (hits, release, mine) {
        (0, _, _) => (before, !release && before >= limit, false),
        (_, true, Some(at)) => {
            held.remove(at);
            (before - 1, false, false)
        }
        (_, true, None) => (before, false, false),
        (_, false, Some(at)) => {
            held[at].1 = now + ttl_ms;
            (before, false, false)
        }
        (_, false, None) if before < limit => {
            held.push((member, now + ttl_ms));
            (before + 1, false, true)
        }
        (_, false, None) => (before, true, false),
    };
    Out {
        over,
        remaining: limit.saturating_sub(after),
        reset_ms: if over {
            earliest.map_or(ttl_ms, |expiry| expiry - now)
        } else {
            ttl_ms
        },
        counted,
        index: 0,
        before,
    }
}

/// Picks an operation's report among its windows: the first over, else
/// the least remaining.
fn report(outs: impl Iterator<Item = Out>) -> Out {
    let mut best: Option<Out> = None;
    for o in outs {
        if o.over {
            return o;
        }
        if best.is_none_or(|b| o.remaining < b.remaining) {
            best = Some(o);
        }
    }
    best.expect("at least one window")
}

/// Sliding windows: each window of its own 1 s (or ceil(w/60) s) buckets,
/// reading 2 s ahead.
pub(crate) fn sliding(m: &mut Model, id: &str, limits: &[(u64, u64)], hits: u64, now: u64) -> Out {
    let s = now / 1_000;
    // (limit, bucket, covered bucket starts ascending, current start, n)
    let windows: Vec<(u64, u64, Vec<u64>, u64, u64)> = limits
        .iter()
        .map(|&(limit, w)| {
            let b = w.div_ceil(60).max(1);
            let n = w.div_ceil(b);
            let ahead = 2u64.div_ceil(b);
            let cur = s - s % b;
            let starts = (0..n + ahead).map(|j| cur + (j + 1) * b - n * b).collect();
            (limit, b, starts, cur, n)
        })
        .collect();
    let count = |m: &Model, b: u64, start: u64| {
        m.buckets
            .get(&(id.to_owned(), b, start))
            .copied()
            .unwrap_or(0)
    };
    let sums: Vec<u64> = windows
        .iter()
        .map(|(_, b, starts, _, _)| starts.iter().map(|&st| count(m, *b, st)).sum())
        .collect();
    let admitted = windows
        .iter()
        .zip(&sums)
        .all(|((limit, ..), &sum)| sum + hits <= *limit || (hits == 0 && sum <= *limit));
    let counted = hits > 0 && admitted;
    let outs: Vec<Out> = windows
        .iter()
        .zip(&sums)
        .enumerate()
        .map(|(index, ((limit, b, starts, cur, n), &sum))| {
            let leaves = |st: u64| ((st + n * b) * 1_000).saturating_sub(now);
            let over = if hits == 0 {
                sum > *limit
            } else {
                sum + hits > *limit
            };
            if over {
                let excess = sum + hits.max(1) - limit;
                let mut freed = 0;
                let mut reset_ms = leaves(*cur);
                for &st in starts {
                    freed += count(m, *b, st);
                    if freed >= excess {
                        reset_ms = leaves(st);
                        break;
                    }
                }
                return Out {
                    over,
                    remaining: 0,
                    reset_ms,
                    counted,
                    index,
                    before: sum,
                };
            }
            let after = sum + if counted { hits } else { 0 };
            let oldest = starts
                .iter()
                .find(|&&st| count(m, *b, st) > 0 || (st == *cur && counted));
            let reset_ms = oldest.map_or(limits[index].1 * 1_000, |&st| leaves(st));
            Out {
                over,
                remaining: limit - after,
                reset_ms,
                counted,
                index,
                before: sum,
            }
        })
        .collect();
    if counted {
        let mut done = HashSet::new();
        for (_, b, _, cur, _) in &windows {
            if done.insert(*b) {
                *m.buckets.entry((id.to_owned(), *b, *cur)).or_default() += hits;
            }
        }
    }
    report(outs.into_iter())
}

/// Sliding log: every admitted hit's time.
fn log(m: &mut Model, id: &str, limits: &[(u64, u64)], hits: u64, now: u64) -> Out {
    let now_us = now * 1_000;
    let longest_us = limits.iter().map(|l| l.1).max().unwrap_or(0) * 1_000_000;
    let entries = m.log.entry(id.to_owned()).or_default();
    entries.retain(|&t| t > now_us.saturating_sub(longest_us));
    entries.sort_unstable();
    let probes: Vec<(u64, Vec<u64>)> = limits
        .iter()
        .map(|&(_, w)| {
            let from = now_us.saturating_sub(w * 1_000_000);
            let inside: Vec<u64> = entries.iter().copied().filter(|&t| t > from).collect();
            (inside.len() as u64, inside)
        })
        .collect();
    let admitted = limits
        .iter()
        .zip(&probes)
        .all(|(&(limit, _), (c, _))| c + hits <= limit || (hits == 0 && *c <= limit));
    let counted = hits > 0 && admitted;
    let outs: Vec<Out> = limits
        .iter()
        .zip(&probes)
        .enumerate()
        .map(|(index, (&(limit, w), (c, inside)))| {
            let w_us = w * 1_000_000;
            let over = if hits == 0 {
                *c > limit
            } else {
                c + hits > limit
            };
            if over {
                let offset = (c + hits.max(1)).saturating_sub(limit).saturating_sub(1);
                let reset_ms = inside
                    .get(usize::try_from(offset).unwrap())
                    .map_or(w * 1_000, |&at| ceil_ms((at + w_us).saturating_sub(now_us)));
                return Out {
                    over,
                    remaining: 0,
                    reset_ms,
                    counted,
                    index,
                    before: *c,
                };
            }
            let after = c + if counted { hits } else { 0 };
            let oldest = inside.first().copied().or(counted.then_some(now_us));
            let reset_ms =
                oldest.map_or(w * 1_000, |at| ceil_ms((at + w_us).saturating_sub(now_us)));
            Out {
                over,
                remaining: limit - after,
                reset_ms,
                counted,
                index,
                before: *c,
            }
        })
        .collect();
    if counted {
        entries.extend(std::iter::repeat_n(now_us, usize::try_from(hits).unwrap()));
    }
    report(outs.into_iter())
}

/// GCRA: `limit` per window, `burst` at once.
pub(crate) fn gcra(
    m: &mut Model,
    id: &str,
    limit: u64,
    w: u64,
    burst: u64,
    hits: u64,
    now: u64,
) -> Out {
    let window_ms = w * 1_000;
    if limit == 0 {
        return Out {
            over: true,
            remaining: 0,
            reset_ms: window_ms,
            counted: false,
            index: 0,
            before: 0,
        };
    }
    let interval = (window_ms * 1_000 / limit).max(1);
    let burst = burst.max(1);
    let capacity = burst * interval;
    let now_us = now * 1_000;
    let key = (id.to_owned(), interval, burst);
    let tat = m.tat.get(&key).copied().unwrap_or(now_us).max(now_us);
    let new_tat = tat + hits * interval;
    if new_tat - now_us <= capacity {
        let used = if hits > 0 { new_tat } else { tat };
        if hits > 0 {
            m.tat.insert(key, new_tat);
        }
        Out {
            over: false,
            remaining: ((capacity - (used - now_us)) / interval).min(limit.max(burst)),
            reset_ms: ceil_ms(used - now_us),
            counted: hits > 0,
            index: 0,
            before: 0,
        }
    } else {
        Out {
            over: true,
            remaining: 0,
            reset_ms: ceil_ms(new_tat - capacity - now_us),
            counted: false,
            index: 0,
            before: 0,
        }
    }
}

/// One counter operation of a request.
#[derive(Debug, Clone)]
struct ModelOp {
    /// Concurrency: the request's member and whether it releases.
    slot: Option<(u64, bool)>,
    desc: usize,
    id: String,
    alg: Alg,
    /// `(limit, window s)` of this operation, and the index of its first
    /// limit among the descriptor's.
    limits: Vec<(u64, u64)>,
    base: usize,
    burst: Option<u64>,
    hits: u64,
    /// The store it counts on.
    store: usize,
}

/// A counter's name in the model: its descriptor's, on its store (each
/// store keeps its own counters).
fn on_store(id: &str, store: usize) -> String {
    match store {
        0 => id.to_owned(),
        at => format!("{}@{id}", STORES[at]),
    }
}

/// What the model answers per descriptor: (code, remaining, reset ms,
/// limit), and overall.
type Answer = (Vec<(Code, u32, Option<u64>, Option<u32>)>, Code);

const UNIT_SECS: [u64; 3] = [1, 60, 3_600];

fn decide(m: &mut Model, sc: &Scenario, instance: usize, now: u64, step: &Step) -> Answer {
    // Plans: limits (limit, window s) per descriptor, or none / unlimited.
    enum Plan {
        None,
        Unlimited,
        Limited {
            alg: Alg,
            /// (limit, window s, name, store)
            limits: Vec<(u64, u64, Option<usize>, usize)>,
            shadow: bool,
            quota: bool,
            burst: Option<u64>,
        },
    }
    let mut plans: Vec<Plan> = step
        .descriptors
        .iter()
        .map(|d| {
            if let Some((rpu, unit)) = d.limit_override {
                return Plan::Limited {
                    alg: Alg::Fixed,
                    limits: vec![(u64::from(rpu), UNIT_SECS[usize::from(unit)], None, 0)],
                    shadow: false,
                    quota: false,
                    burst: None,
                };
            }
            let Some(r) = sc.rules.get(d.key) else {
                return Plan::None;
            };
            // Slot entries after a rule's own: only a concurrency limit
            // takes them; any other rule does not match the longer
            // descriptor.
            if d.slot.is_some() && (r.unlimited || r.alg != Alg::Concurrency) {
                return Plan::None;
            }
            if r.unlimited {
                return Plan::Unlimited;
            }
            // A table entry for this value replaces the rule's limit (its
            // window stays the rule's), or makes it unlimited.
            let entry = if r.table {
                m.tables.get(&(d.key, d.value)).copied()
            } else {
                None
            };
            if entry == Some(None) {
                return Plan::Unlimited;
            }
            let named = r.limits.len() == 1;
            Plan::Limited {
                alg: r.alg,
                limits: r
                    .limits
                    .iter()
                    .enumerate()
                    .map(|(j, &(l, w))| {
                        let l = entry.flatten().unwrap_or(l);
                        let w = match r.calendar {
                            Some(c) => CALENDAR_W + c as u64,
                            None => WINDOWS[w].0,
                        };
                        (l, w, named.then_some(d.key), store_of(r, j))
                    })
                    .collect(),
                shadow: r.shadow,
                quota: r.quota,
                burst: r.burst,
            }
        })
        .collect();
    // `replaces` (reference `constructLimitsToCheck`): the replaces of every
    // matched rule are collected, an unlimited rule's included, before the
    // unlimited ones are dropped; a request override carries none. The
    // generator writes `replaces` on unlimited and single-limit rules.
    let replaced: HashSet<usize> = step
        .descriptors
        .iter()
        .zip(&plans)
        .filter(|(d, p)| {
            d.limit_override.is_none() && matches!(p, Plan::Limited { .. } | Plan::Unlimited)
        })
        .filter_map(|(d, _)| {
            let r = &sc.rules[d.key];
            (r.unlimited || r.limits.len() == 1)
                .then_some(r.replaces)
                .flatten()
                .filter(|&j| j != d.key)
        })
        .collect();
    for p in &mut plans {
        if let Plan::Limited { limits, .. } = p {
            limits.retain(|(_, _, name, _)| !name.is_some_and(|n| replaced.contains(&n)));
            if limits.is_empty() {
                *p = Plan::None;
            }
        }
    }
    // Operations.
    let request_hits = u64::from(step.request_hits.max(1));
    let mut ops: Vec<ModelOp> = Vec::new();
    for (i, (d, p)) in step.descriptors.iter().zip(&plans).enumerate() {
        let Plan::Limited {
            alg, limits, burst, ..
        } = p
        else {
            continue;
        };
        let id = format!("k{}={}", d.key, d.value);
        let hits = d.hits.unwrap_or(request_hits);
        let pairs: Vec<(u64, u64)> = limits.iter().map(|&(l, w, _, _)| (l, w)).collect();
        let stores: Vec<usize> = limits.iter().map(|&(_, _, _, at)| at).collect();
        match alg {
            Alg::Sliding | Alg::Log => ops.push(ModelOp {
                slot: None,
                desc: i,
                alg: *alg,
                limits: pairs,
                base: 0,
                burst: *burst,
                hits,
                store: stores[0],
                id: on_store(&id, stores[0]),
            }),
            Alg::Fixed | Alg::Gcra | Alg::Concurrency => {
                let slot = (*alg == Alg::Concurrency).then(|| match d.slot {
                    Some((member, release)) => (u64::from(member), release),
                    None => {
                        m.anonymous += 1;
                        (1_000 + m.anonymous, false)
                    }
                });
                for (base, pair) in pairs.into_iter().enumerate() {
                    ops.push(ModelOp {
                        slot,
                        desc: i,
                        id: on_store(&id, stores[base]),
                        alg: *alg,
                        limits: vec![pair],
                        base,
                        burst: *burst,
                        hits,
                        store: stores[base],
                    });
                }
            }
        }
    }
    // The local cache answers fixed windows known over.
    let s = now / 1_000;
    let mut outs: Vec<Option<Out>> = vec![None; ops.len()];
    let mut cached = vec![false; ops.len()];
    if sc.local_cache {
        // The process-wide store's counters only (a counter is named by its
        // descriptor, the same on every store).
        for (k, op) in ops.iter().enumerate() {
            if op.alg == Alg::Fixed && op.store == 0 {
                let w = op.limits[0].1;
                let (start, end) = window_bounds(w, s);
                if m.cache[instance].contains(&(op.id.clone(), w, start)) {
                    outs[k] = Some(Out {
                        over: true,
                        remaining: 0,
                        reset_ms: (end - s) * 1_000,
                        counted: false,
                        index: 0,
                        before: 0,
                    });
                    cached[k] = true;
                }
            }
        }
    }
    if sc.stop_when_over && cached.iter().any(|&c| c) {
        for op in &mut ops {
            op.hits = 0;
        }
    }
    let refuse = sc.stop_when_over;
    for (k, op) in ops.iter().enumerate() {
        if cached[k] {
            continue;
        }
        let o = match op.alg {
            Alg::Fixed => fixed(
                m,
                &op.id,
                op.limits[0].0,
                op.limits[0].1,
                op.hits,
                now,
                refuse,
            ),
            Alg::Sliding => sliding(m, &op.id, &op.limits, op.hits, now),
            Alg::Log => log(m, &op.id, &op.limits, op.hits, now),
            Alg::Gcra => {
                let (limit, w) = op.limits[0];
                gcra(m, &op.id, limit, w, op.burst.unwrap_or(limit), op.hits, now)
            }
            Alg::Concurrency => {
                let (limit, w) = op.limits[0];
                let (member, release) = op.slot.unwrap_or_default();
                concurrency(m, &op.id, limit, w * 1_000, member, release, op.hits, now)
            }
        };
        outs[k] = Some(o);
    }
    // Stop-increment: a request over on a store counts nothing on that
    // store (each store's part is refused as a whole on its own).
    let over_on: HashSet<usize> = ops
        .iter()
        .zip(outs.iter().zip(&cached))
        .filter(|(_, (o, c))| !**c && o.is_some_and(|o| o.over))
        .map(|(op, _)| op.store)
        .collect();
    if refuse && !over_on.is_empty() {
        for (k, op) in ops.iter().enumerate() {
            let Some(o) = outs[k].as_mut() else { continue };
            if cached[k] || !o.counted || op.hits == 0 || !over_on.contains(&op.store) {
                continue;
            }
            take_back(m, op, now);
            *o = match op.alg {
                Alg::Fixed => {
                    let limit = op.limits[0].0;
                    let over = o.before + op.hits > limit;
                    Out {
                        over,
                        remaining: if over || o.before >= limit {
                            0
                        } else {
                            limit - o.before
                        },
                        counted: false,
                        ..*o
                    }
                }
                Alg::Concurrency => Out {
                    remaining: o.remaining + 1,
                    counted: false,
                    ..*o
                },
                _ => Out {
                    remaining: o.remaining + op.hits,
                    counted: false,
                    ..*o
                },
            };
        }
    }
    if sc.local_cache {
        for (k, op) in ops.iter().enumerate() {
            let Some(o) = outs[k] else { continue };
            if !cached[k]
                && op.alg == Alg::Fixed
                && op.store == 0
                && o.over
                && (o.counted || op.hits == 0)
            {
                let w = op.limits[0].1;
                m.cache[instance].insert((op.id.clone(), w, window_bounds(w, s).0));
            }
        }
    }
    // The response.
    let mut statuses = Vec::new();
    let (mut any_over, mut quota_total, mut quota_over) = (false, 0, 0);
    for (i, p) in plans.iter().enumerate() {
        let Plan::Limited {
            limits,
            shadow,
            quota,
            ..
        } = p
        else {
            statuses.push(match p {
                Plan::Unlimited => (Code::Ok, u32::MAX, None, None),
                _ => (Code::Ok, 0, None, None),
            });
            continue;
        };
        let mut chosen: Option<(usize, Out)> = None;
        for (k, op) in ops.iter().enumerate().filter(|(_, op)| op.desc == i) {
            let o = outs[k].expect("every operation answered");
            let better = match &chosen {
                None => true,
                Some((_, best)) if best.over => false,
                Some((_, best)) => o.over || o.remaining < best.remaining,
            };
            if better {
                chosen = Some((op.base + o.index, o));
            }
        }
        let (at, o) = chosen.expect("a limited descriptor has an operation");
        let code = if o.over && !shadow {
            Code::OverLimit
        } else {
            Code::Ok
        };
        if *quota {
            quota_total += 1;
            quota_over += usize::from(code == Code::OverLimit);
        } else {
            any_over |= code == Code::OverLimit;
        }
        statuses.push((
            code,
            u32::try_from(o.remaining).unwrap_or(u32::MAX),
            Some(o.reset_ms),
            Some(u32::try_from(limits[at].0).unwrap()),
        ));
    }
    let over = any_over || (quota_total > 0 && quota_over == quota_total);
    (statuses, if over { Code::OverLimit } else { Code::Ok })
}

fn take_back(m: &mut Model, op: &ModelOp, now: u64) {
    let s = now / 1_000;
    match op.alg {
        Alg::Concurrency => {
            let ttl_ms = op.limits[0].1 * 1_000;
            let member = op.slot.map_or(0, |(member, _)| member);
            if let Some(held) = m.slots.get_mut(&(op.id.clone(), ttl_ms)) {
                held.retain(|&(m, _)| m != member);
            }
        }
        Alg::Fixed => {
            let w = op.limits[0].1;
            if let Some(c) = m
                .fixed
                .get_mut(&fixed_key(m, &op.id, w, window_bounds(w, s).0))
            {
                *c -= op.hits;
            }
        }
        Alg::Sliding => {
            let mut done = HashSet::new();
            for &(_, w) in &op.limits {
                let b = w.div_ceil(60).max(1);
                if done.insert(b)
                    && let Some(c) = m.buckets.get_mut(&(op.id.clone(), b, s - s % b))
                {
                    *c -= op.hits;
                }
            }
        }
        Alg::Log => {
            let entries = m.log.entry(op.id.clone()).or_default();
            for _ in 0..op.hits {
                if let Some(at) = entries.iter().rposition(|&t| t == now * 1_000) {
                    entries.remove(at);
                }
            }
        }
        Alg::Gcra => {
            let (limit, w) = op.limits[0];
            let interval = (w * 1_000_000 / limit.max(1)).max(1);
            let burst = op.burst.unwrap_or(limit).max(1);
            if let Some(tat) = m.tat.get_mut(&(op.id.clone(), interval, burst)) {
                *tat -= op.hits * interval;
            }
        }
    }
}

// ------------------------------------------------------------- the property

static CASE: AtomicU64 = AtomicU64::new(0);

/// A store for one case: a fresh embedded store, or the shared Redis (or
/// memcached) with a key prefix of its own.
fn fresh_store(backend: &Backend, rt: &tokio::runtime::Runtime) -> StoreKind {
    match &backend.store {
        StoreKind::Memcache(store) => {
            let config = MemcacheConfig {
                key_prefix: format!("case{}:", CASE.fetch_add(1, Ordering::Relaxed)),
                expiration_jitter_max_secs: 0,
                timeout: std::time::Duration::from_secs(2),
                ..MemcacheConfig::servers(store.servers())
            };
            StoreKind::Memcache(rt.block_on(MemcacheStore::connect(config)).unwrap())
        }
        StoreKind::Memory(_) => StoreKind::Memory(floodgate::MemoryStore::new()),
        StoreKind::Redis { main, .. } => {
            let config = RedisConfig {
                key_prefix: format!("case{}:", CASE.fetch_add(1, Ordering::Relaxed)),
                ..redis_config(main.config().mode, main.config().url.clone())
            };
            let store = RedisStore::new(config);
            rt.block_on(store.connect()).expect("redis reachable");
            StoreKind::Redis {
                main: store,
                per_second: None,
            }
        }
    }
}

fn check(
    sc: &Scenario,
    stores: &[StoreKind; 3],
    rt: &tokio::runtime::Runtime,
) -> Result<(), TestCaseError> {
    let [store, other, local] = stores;
    // The rules name `other` (the backend's kind) and `local` (embedded)
    // besides `default`, at places 1 and 2 as the limiters count in them.
    let options = LoadOptions {
        fixed_windows_only: matches!(store, StoreKind::Memcache(_)),
        stores: [(1, other), (2, local)]
            .into_iter()
            .map(|(index, kind)| StoreInfo {
                name: STORES[usize::from(index)].to_owned(),
                index,
                fixed_windows_only: matches!(kind, StoreKind::Memcache(_)),
            })
            .collect(),
        ..LoadOptions::default()
    };
    let source = Source {
        name: "m.yaml".to_owned(),
        text: yaml(&sc.rules),
    };
    let rules = Arc::new(ArcSwap::from_pointee(
        load_sources(&[source], &options).expect("generated rules are valid"),
    ));
    let options = LimiterOptions {
        stop_when_over: sc.stop_when_over,
        local_cache_bytes: if sc.local_cache { 1 << 20 } else { 0 },
        ..LimiterOptions::default()
    };
    let clocks = [
        ManualClock::new(UnixMillis(STARTS[sc.start])),
        ManualClock::new(UnixMillis(STARTS[sc.start])),
    ];
    // REDACT_STORE_KEYS on every key of the rules, one key file for both
    // instances: the store sees tags only, and every answer is the model's.
    let redactor = Arc::new(
        floodgate::Redactor::new(None, (0..KEYS).map(|i| format!("k{i}")).collect(), true).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let tables = Arc::new(Tables::open(&dir.path().join("tables.log")).unwrap());
    let limiters: Vec<Limiter<StoreKind>> = clocks
        .iter()
        .map(|c| {
            Limiter::new(
                rules.clone(),
                store.clone(),
                Arc::new(c.clone()),
                options.clone(),
            )
            .with_redactor(redactor.clone())
            .with_tables(tables.clone())
            .with_stores(
                [(1, other), (2, local)]
                    .into_iter()
                    .map(|(at, kind)| StoreEntry {
                        name: Arc::from(STORES[at]),
                        store: kind.clone(),
                        failure_mode: None,
                    })
                    .collect(),
            )
        })
        .collect();
    let mut model = Model {
        reference_keys: matches!(store, StoreKind::Memcache(_)),
        ..Model::default()
    };
    let mut t = STARTS[sc.start];
    // The latest clock reading so far: no reading may fall more than
    // `AHEAD_SECS` behind it, the skew floodgate promises to absorb (the
    // memory store forgets sliding-window buckets no clock within that
    // bound can reach; Redis keeps them until they expire). Steps back
    // beyond it are lifted to the bound.
    let behind_ms = floodgate::algorithm::sliding_window::AHEAD_SECS * 1_000;
    let mut latest = 0;
    for (n, step) in sc.steps.iter().enumerate() {
        t = t.saturating_add_signed(step.advance_ms);
        let skew = if step.instance == 1 { sc.skew_ms } else { 0 };
        let mut now = t.saturating_add_signed(skew);
        if now.saturating_add(behind_ms) < latest {
            let lift = latest - behind_ms - now;
            t += lift;
            now += lift;
        }
        latest = latest.max(now);
        clocks[step.instance].set(UnixMillis(now));
        change_tables(&tables, &rules.load_full(), &mut model, step);
        let request = Request {
            domain: "m".into(),
            descriptors: step
                .descriptors
                .iter()
                .map(|d| Descriptor {
                    hits_addend: d.hits,
                    limit: d.limit_override.map(|(rpu, unit)| RateLimitOverride {
                        requests_per_unit: rpu,
                        unit: [Unit::Second, Unit::Minute, Unit::Hour][usize::from(unit)],
                    }),
                    ..Descriptor::from_pairs(
                        [
                            (
                                format!("k{}", d.key),
                                ["a", "b"][usize::from(d.value)].to_owned(),
                            ),
                            ("sid".to_owned(), format!("m{}", d.slot.map_or(0, |s| s.0))),
                            ("rel".to_owned(), "1".to_owned()),
                        ]
                        .into_iter()
                        .take(match d.slot {
                            None => 1,
                            Some((_, false)) => 2,
                            Some((_, true)) => 3,
                        })
                        .collect::<Vec<_>>()
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                    )
                })
                .collect(),
            hits_addend: step.request_hits,
        };
        let got = rt
            .block_on(limiters[step.instance].should_rate_limit(&request))
            .map_err(|e| TestCaseError::fail(format!("step {n}: {e}")))?;
        let got: Answer = (
            got.statuses
                .iter()
                .map(|s| {
                    (
                        s.code,
                        s.limit_remaining,
                        s.duration_until_reset
                            .map(|d| u64::try_from(d.as_millis()).unwrap()),
                        s.current_limit.as_ref().map(|l| l.requests_per_unit),
                    )
                })
                .collect(),
            got.overall_code,
        );
        let want = decide(&mut model, sc, step.instance, now, step);
        prop_assert_eq!(
            got,
            want,
            "step {} at {} ms (instance {}): {:?}\nrules:\n{}",
            n,
            now,
            step.instance,
            step,
            yaml(&sc.rules)
        );
    }
    Ok(())
}

/// Applies `step`'s table changes to the tables and the model.
fn change_tables(tables: &Tables, rules: &Arc<floodgate::Index>, model: &mut Model, step: &Step) {
    let metrics = floodgate::Metrics::default();
    let writing = Writing {
        rules,
        metrics: &metrics,
        who: "model",
        time: "t",
        dry_run: false,
    };
    for &(key, value, op) in &step.table_ops {
        let (table, at) = (format!("t{key}"), ["a", "b"][usize::from(value)]);
        let entry = match op {
            TableOp::Delete => {
                // Deleting a missing entry is refused and changes nothing.
                let _ = tables.delete(&writing, &table, at);
                model.tables.remove(&(key, value));
                continue;
            }
            TableOp::Unlimited => serde_json::json!({"unlimited": true}),
            TableOp::Limit(n) => serde_json::json!({"requests_per_unit": n}),
        };
        let entry = TableEntry::from_json(&entry).unwrap();
        tables.put(&writing, &table, at, entry).unwrap();
        model.tables.insert(
            (key, value),
            match op {
                TableOp::Limit(n) => Some(n),
                TableOp::Delete | TableOp::Unlimited => None,
            },
        );
    }
}

pub(crate) fn cases() -> u32 {
    std::env::var("MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Runs the model property against `backend`; `fixed_only`: every rule a
/// fixed window (a store that counts nothing else: memcached).
fn run(backend: impl std::future::Future<Output = Backend>) {
    run_with(backend, false);
}

fn run_with(backend: impl std::future::Future<Output = Backend>, fixed_only: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backend = rt.block_on(backend);
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let scenarios = scenario_gen().prop_map(move |mut sc| {
        if fixed_only {
            // One limit per descriptor, as the reference (and memcached).
            for rule in &mut sc.rules {
                rule.alg = Alg::Fixed;
                rule.burst = None;
                rule.limits.truncate(1);
                // memcached keeps no tables (a rule naming one is refused).
                rule.table = false;
                // memcached expires a counter on its own clock, a window's
                // length after it is first counted (as the reference sets
                // it), while the model's clock is the test's: a window of
                // seconds could expire in the real time a case takes (its
                // clock ticks whole seconds). A minute outlasts any case.
                for (_, w) in &mut rule.limits {
                    if WINDOWS[*w].0 < 60 {
                        *w = 3;
                    }
                }
            }
        }
        sc
    });
    let result = runner.run(&scenarios, |sc| {
        let stores = [
            fresh_store(&backend, &rt),
            fresh_store(&backend, &rt),
            StoreKind::Memory(floodgate::MemoryStore::new()),
        ];
        check(&sc, &stores, &rt)
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}

#[test]
fn memory_store_answers_as_the_model() {
    run(memory());
}

#[test]
fn redis_standalone_answers_as_the_model() {
    run(standalone());
}

#[test]
fn redis_cluster_answers_as_the_model() {
    run(cluster());
}

#[test]
fn memcached_answers_as_the_model_on_fixed_windows() {
    run_with(crate::memcached::backend(), true);
}
