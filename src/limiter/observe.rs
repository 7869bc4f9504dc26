//! Feeds the per-domain top lists ([`TopRecorder`]) from a decided request:
//! each descriptor's hits, and its hits when any of its limits answered
//! over (shadow ones included).

use super::Limiter;
use super::plan::Pending;
use crate::clock::UnixMillis;
use crate::config::Index;
use crate::descriptor::Request;
use crate::insight::TopRecorder;
use crate::store::Store;

impl<S: Store> Limiter<S> {
    /// Records `request` in the top lists; `slots` are its answered
    /// operations, in descriptor order.
    pub(super) fn observe(
        &self,
        index: &Index,
        request: &Request,
        slots: &[Pending],
        now: UnixMillis,
    ) {
        record(&self.top, index, request, slots, now);
    }
}

fn record(top: &TopRecorder, index: &Index, request: &Request, slots: &[Pending], now: UnixMillis) {
    let request_hits = u64::from(request.hits_addend.max(1));
    let mut slots = slots.iter().peekable();
    let descriptors = request.descriptors.iter().enumerate().map(|(i, d)| {
        let hits = d.hits_addend.unwrap_or(request_hits);
        let mut over = false;
        while let Some(slot) = slots.next_if(|s| s.plan == i) {
            over |= slot.outcome.is_some_and(|o| o.over_limit);
        }
        (d.entries.as_slice(), hits, if over { hits } else { 0 })
    });
    top.record(&request.domain, descriptors, now, |domain| {
        index.has_domain(domain)
    });
}
