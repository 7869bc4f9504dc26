//! The answer: per-descriptor statuses, the overall code and the
//! rate-limit headers, from the plan and the store's outcomes.

use super::Limiter;
use super::answer::{Code, HeaderNames, Response, Status};
use super::pick::{Overall, pick};
use super::plan::{Pending, Plan};
use crate::metrics::RuleHit;
use crate::store::Store;
use std::sync::Arc;

impl<S: Store> Limiter<S> {
    pub(super) fn respond(&self, plans: &[Plan<'_>], slots: &[Pending]) -> Response {
        let mut statuses = Vec::with_capacity(plans.len());
        let mut overall = Overall::default();
        let mut passed_metadata = self.options.dynamic_metadata.then(Vec::new);
        let mut slots = slots.iter().peekable();
        for (i, plan) in plans.iter().enumerate() {
            let status = match plan {
                Plan::NoLimit => Status::NO_LIMIT,
                Plan::Unlimited { .. } => Status::UNLIMITED,
                Plan::Limited {
                    limits,
                    shadow_mode,
                    quota_mode,
                    stats_key,
                    metadata,
                    ..
                } => {
                    let picked = pick(
                        limits,
                        std::iter::from_fn(|| slots.next_if(|s| s.plan == i)),
                    );
                    let (outcome, hits) = (picked.outcome, picked.hits);
                    let limit = limits
                        .get(picked.at)
                        .map_or(0, |l| u64::from(l.requests_per_unit));
                    self.metrics.record_rule(
                        stats_key,
                        RuleHit {
                            hits,
                            limit,
                            // Algorithms without a running count report it
                            // through `remaining`. (A hit admitted from a
                            // lease's block has a count but reports only
                            // the block as remaining.)
                            before: if outcome.after > 0 {
                                outcome.before
                            } else {
                                limit.saturating_sub(outcome.remaining).saturating_sub(hits)
                            },
                            after: if outcome.after > 0 {
                                outcome.after
                            } else {
                                limit.saturating_sub(outcome.remaining)
                            },
                            over_limit: outcome.over_limit,
                            local_cache: picked.cached,
                            // A rule whose limits are all shadow ones
                            // answers as a shadow rule.
                            shadow_mode: picked.is_shadow(*shadow_mode),
                        },
                    );
                    if picked.shadow_denied > 0 {
                        self.metrics.record_shadow(stats_key, picked.shadow_denied);
                    }
                    let status = picked.status(limits, *shadow_mode);
                    if let (Some(passed), Some(metadata), Code::Ok) =
                        (&mut passed_metadata, metadata, status.code)
                    {
                        passed.push(Arc::clone(metadata));
                    }
                    overall.add(&status, *quota_mode);
                    status
                }
            };
            statuses.push(status);
        }
        let over = overall.is_over();
        let overall_code = if over && !self.options.global_shadow_mode {
            Code::OverLimit
        } else {
            if over {
                self.metrics.record_global_shadow();
            }
            Code::Ok
        };
        let response_headers = if self.options.all_descriptors_headers {
            every_limit_headers(&statuses)
        } else {
            self.options
                .response_headers
                .as_ref()
                .map(|names| limit_headers(names, plans, &statuses))
                .unwrap_or_default()
        };
        let request_headers = self
            .options
            .request_headers
            .as_ref()
            .map(|names| limit_headers(names, plans, &statuses))
            .unwrap_or_default();
        Response {
            overall_code,
            statuses,
            response_headers,
            request_headers,
            dynamic_metadata: passed_metadata,
        }
    }
}

/// `LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED`: `ratelimit-limit-<unit>s` and
/// `ratelimit-remaining-<unit>s` for every descriptor with a limit, in
/// request order (two descriptors on one unit give two pairs, as the
/// reference's pull request #1190 writes them).
fn every_limit_headers(statuses: &[Status]) -> Vec<(Arc<str>, String)> {
    statuses
        .iter()
        .filter_map(|status| {
            let limit = status.current_limit.as_ref()?;
            let unit = limit.unit.as_str();
            Some([
                (
                    Arc::from(format!("ratelimit-limit-{unit}s")),
                    limit.requests_per_unit.to_string(),
                ),
                (
                    Arc::from(format!("ratelimit-remaining-{unit}s")),
                    status.limit_remaining.to_string(),
                ),
            ])
        })
        .flatten()
        .collect()
}

/// The reference's "most constrained descriptor" headers: the smallest
/// remaining among limited descriptors, unless a non-quota descriptor is over
/// its limit, in which case the last such one.
pub(super) fn limit_headers(
    names: &HeaderNames,
    plans: &[Plan<'_>],
    statuses: &[Status],
) -> Vec<(Arc<str>, String)> {
    let mut chosen: Option<&Status> = None;
    for status in statuses {
        if status.current_limit.is_none() {
            continue;
        }
        let smaller = chosen.is_none_or(|c| status.limit_remaining < c.limit_remaining);
        if smaller {
            chosen = Some(status);
        }
    }
    for (status, plan) in statuses.iter().zip(plans) {
        let quota = matches!(
            plan,
            Plan::Limited {
                quota_mode: true,
                ..
            }
        );
        if status.code == Code::OverLimit && !quota {
            chosen = Some(status);
        }
    }
    let Some(status) = chosen else {
        return Vec::new();
    };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status.duration_until_reset.map_or(0, |d| d.as_secs());
    vec![
        (names.limit.clone(), limit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset.to_string()),
    ]
}
