//! The time slots of one domain's top views: a ring of `SLOTS` slots per
//! window, each slot two space-saving summaries (hits, over-limit hits).

use super::{By, SLOTS, TOP_K, Window};
use crate::clock::UnixMillis;
use crate::insight::summary::SpaceSaving;

/// One time slot: what happened in it.
#[derive(Debug)]
pub(super) struct Slot {
    /// Slot number (seconds since the epoch / slot length); `None` unused.
    pub(super) epoch: Option<u64>,
    pub(super) hits: SpaceSaving,
    pub(super) over: SpaceSaving,
}

impl Slot {
    pub(super) fn new() -> Self {
        Self {
            epoch: None,
            hits: SpaceSaving::new(TOP_K),
            over: SpaceSaving::new(TOP_K),
        }
    }

    pub(super) fn summary(&self, by: By) -> &SpaceSaving {
        match by {
            By::Hits => &self.hits,
            By::OverLimit => &self.over,
        }
    }
}

/// A ring of `SLOTS` slots of one length.
#[derive(Debug)]
pub(super) struct Ring {
    pub(super) window: Window,
    pub(super) slots: Vec<Slot>,
}

impl Ring {
    pub(super) fn new(window: Window) -> Self {
        Self {
            window,
            slots: (0..SLOTS).map(|_| Slot::new()).collect(),
        }
    }

    pub(super) fn epoch(&self, now: UnixMillis) -> u64 {
        now.as_secs() / self.window.slot_secs()
    }

    /// The slot of `now`, emptied first when it last held an older epoch.
    pub(super) fn current(&mut self, now: UnixMillis) -> Option<&mut Slot> {
        let epoch = self.epoch(now);
        let at = usize::try_from(epoch % SLOTS as u64).unwrap_or(0);
        let slot = self.slots.get_mut(at)?;
        if slot.epoch != Some(epoch) {
            slot.epoch = Some(epoch);
            slot.hits.clear();
            slot.over.clear();
        }
        Some(slot)
    }

    /// The slots inside the window ending at `now`.
    pub(super) fn live(&self, now: UnixMillis) -> impl Iterator<Item = &Slot> {
        let epoch = self.epoch(now);
        let oldest = epoch.saturating_sub(SLOTS as u64 - 1);
        self.slots
            .iter()
            .filter(move |s| s.epoch.is_some_and(|e| e >= oldest && e <= epoch))
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self
                .slots
                .iter()
                .map(|s| s.hits.heap_bytes() + s.over.heap_bytes())
                .sum::<usize>()
    }
}

/// One domain's rings.
#[derive(Debug)]
pub(super) struct DomainTop {
    pub(super) minute: Ring,
    pub(super) hour: Ring,
}

impl DomainTop {
    pub(super) fn new() -> Self {
        Self {
            minute: Ring::new(Window::Minute),
            hour: Ring::new(Window::Hour),
        }
    }

    pub(super) fn ring(&self, window: Window) -> &Ring {
        match window {
            Window::Minute => &self.minute,
            Window::Hour => &self.hour,
        }
    }
}
