//! Concurrency: at most `slots` requests in flight, each holding a slot
//! from its acquire until its release, or until `ttl_ms` after the acquire
//! when no release comes (a proxy that died), so a lost release never
//! leaks a slot for longer than that.
//!
//! Definition: a slot is a member (a request's id, hashed) with an expiry.
//! Slots whose expiry is at or before `now` are free. An acquire of a
//! member not holding a slot takes one when fewer than `slots` are held;
//! an acquire of a member already holding one renews its expiry and takes
//! nothing more (a retried call is not a second request). A release frees
//! the member's slot; a release of a member holding none frees nothing, so
//! stray or repeated releases never make room beyond `slots`. `hits` 0
//! reads. Over the limit, the answer's reset is the time until the oldest
//! held slot expires (the latest a slot is freed without a release).

use super::{Outcome, ceil_ms};
use crate::clock::UnixMillis;
use std::time::Duration;

/// What a concurrency operation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Concurrency {
    slots: u64,
    ttl_ms: u64,
    member: u64,
    release: bool,
}

/// What a store did with one operation, as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acted {
    /// Nothing changed: a read, a refused acquire, a release of a member
    /// holding no slot.
    Nothing,
    /// A slot was taken.
    Took,
    /// The member already held a slot: its expiry was renewed.
    Renewed,
    /// The member's slot was freed.
    Freed,
}

impl Acted {
    /// The number a store script replies for it.
    pub const fn code(self) -> i64 {
        match self {
            Self::Nothing => 0,
            Self::Took => 1,
            Self::Renewed => 2,
            Self::Freed => 3,
        }
    }

    /// Reads a store script's number (anything else: nothing).
    pub const fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Took,
            2 => Self::Renewed,
            3 => Self::Freed,
            _ => Self::Nothing,
        }
    }
}

impl Concurrency {
    /// `slots` requests at once, a slot living `ttl_ms` without a release.
    pub const fn new(slots: u64, ttl_ms: u64) -> Self {
        Self {
            slots,
            ttl_ms: if ttl_ms == 0 { 1 } else { ttl_ms },
            member: 0,
            release: false,
        }
    }

    /// The operation of one request: `member` (its id, hashed) acquires,
    /// or with `release` frees its slot.
    pub const fn for_member(self, member: u64, release: bool) -> Self {
        Self {
            member,
            release,
            ..self
        }
    }

    /// Slots.
    pub const fn slots(&self) -> u64 {
        self.slots
    }

    /// Lifetime of a slot without a release, ms.
    pub const fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// The request's member.
    pub const fn member(&self) -> u64 {
        self.member
    }

    /// Whether this frees the member's slot.
    pub const fn is_release(&self) -> bool {
        self.release
    }

    /// The answer, given the slots held (live at `now`) before the
    /// operation, the earliest expiry among them (ms), and what was done.
    pub fn outcome(
        &self,
        held: u64,
        earliest_ms: Option<u64>,
        acted: Acted,
        hits: u64,
        now: UnixMillis,
    ) -> Outcome {
        let after = match acted {
            Acted::Took => held.saturating_add(1),
            Acted::Freed => held.saturating_sub(1),
            Acted::Nothing | Acted::Renewed => held,
        };
        let acquiring = hits > 0 && !self.release;
        let over = match acted {
            Acted::Took | Acted::Renewed | Acted::Freed => false,
            // A refused acquire, or a read of a full set; a release is
            // never refused, even one that frees nothing.
            Acted::Nothing => !self.release && (acquiring || after >= self.slots),
        };
        let reset = if over {
            earliest_ms.map_or(Duration::from_millis(self.ttl_ms), |at| {
                ceil_ms(at.saturating_sub(now.0).saturating_mul(1_000))
            })
        } else {
            Duration::from_millis(self.ttl_ms)
        };
        Outcome {
            over_limit: over,
            remaining: self.slots.saturating_sub(after),
            reset,
            counted: acted == Acted::Took,
            before: held,
            after,
            limit_index: 0,
            leased: 0,
            tat_us: 0,
        }
    }
}

/// The slots of one counter, as the embedded store keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slots {
    /// `(member, expiry ms)`, held.
    held: Vec<(u64, u64)>,
}

impl Slots {
    /// Slots read back from a snapshot.
    pub fn from_parts(held: Vec<(u64, u64)>) -> Self {
        Self { held }
    }

    /// The slots, `(member, expiry ms)`.
    pub fn parts(&self) -> &[(u64, u64)] {
        &self.held
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.held.capacity() * std::mem::size_of::<(u64, u64)>()
    }

    /// When the last slot expires, ms.
    pub fn last_expiry_ms(&self) -> u64 {
        self.held.iter().map(|&(_, at)| at).max().unwrap_or(0)
    }

    /// Runs `c` (with `hits` 0 a read) at `now`.
    pub fn apply(&mut self, c: &Concurrency, now: UnixMillis, hits: u64) -> Outcome {
        self.held.retain(|&(_, at)| at > now.0);
        let (held, earliest, acted) = self.decide(c, now, hits, true);
        c.outcome(held, earliest, acted, hits, now)
    }

    /// What `apply` would answer, changing nothing.
    pub fn peek(&self, c: &Concurrency, now: UnixMillis, hits: u64) -> Outcome {
        let mut copy = self.clone();
        copy.held.retain(|&(_, at)| at > now.0);
        let (held, earliest, acted) = copy.decide(c, now, hits, false);
        c.outcome(held, earliest, acted, hits, now)
    }

    fn decide(
        &mut self,
        c: &Concurrency,
        now: UnixMillis,
        hits: u64,
        write: bool,
    ) -> (u64, Option<u64>, Acted) {
        let held = u64::try_from(self.held.len()).unwrap_or(u64::MAX);
        let earliest = self.held.iter().map(|&(_, at)| at).min();
        let mine = self.held.iter().position(|&(m, _)| m == c.member);
        let expiry = now.0.saturating_add(c.ttl_ms);
        let acted = match (hits, c.release, mine) {
            (0, _, _) => Acted::Nothing,
            (_, true, Some(at)) => {
                if write {
                    self.held.swap_remove(at);
                }
                Acted::Freed
            }
            (_, true, None) => Acted::Nothing,
            (_, false, Some(at)) => {
                if write && let Some(slot) = self.held.get_mut(at) {
                    slot.1 = expiry;
                }
                Acted::Renewed
            }
            (_, false, None) if held < c.slots => {
                if write {
                    self.held.push((c.member, expiry));
                }
                Acted::Took
            }
            (_, false, None) => Acted::Nothing,
        };
        (held, earliest, acted)
    }

    /// Takes back the member's slot (a refused request's acquire).
    pub fn take_back(&mut self, c: &Concurrency) {
        self.held.retain(|&(m, _)| m != c.member);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixMillis = UnixMillis(1_000_000);

    fn c(member: u64, release: bool) -> Concurrency {
        Concurrency::new(2, 60_000).for_member(member, release)
    }

    #[test]
    fn slots_are_taken_renewed_and_freed() {
        let mut slots = Slots::default();
        let a = slots.apply(&c(1, false), NOW, 1);
        assert!(!a.over_limit && a.counted);
        assert_eq!((a.before, a.after, a.remaining), (0, 1, 1));
        // The same request again: renewed, not a second slot.
        let again = slots.apply(&c(1, false), NOW, 1);
        assert!(!again.over_limit && !again.counted);
        assert_eq!(again.remaining, 1);
        assert!(slots.apply(&c(2, false), NOW, 1).counted);
        let full = slots.apply(&c(3, false), UnixMillis(NOW.0 + 1_000), 1);
        assert!(full.over_limit && !full.counted);
        assert_eq!(
            full.reset,
            Duration::from_secs(59),
            "the oldest slot expires then"
        );
        // A stray release and a repeated one free nothing.
        let stray = slots.apply(&c(9, true), NOW, 1);
        assert_eq!((stray.over_limit, stray.remaining), (false, 0));
        assert!(slots.apply(&c(1, true), NOW, 1).remaining == 1);
        assert!(slots.apply(&c(1, true), NOW, 1).remaining == 1);
        assert!(slots.apply(&c(3, false), NOW, 1).counted);
        // A read takes nothing and says whether there is room.
        let read = slots.apply(&c(4, false), NOW, 0);
        assert!(read.over_limit && !read.counted);
    }

    #[test]
    fn slots_without_a_release_expire() {
        let mut slots = Slots::default();
        slots.apply(&c(1, false), NOW, 1);
        slots.apply(&c(2, false), NOW, 1);
        assert!(
            slots
                .apply(&c(3, false), UnixMillis(NOW.0 + 59_999), 1)
                .over_limit
        );
        let later = slots.apply(&c(3, false), UnixMillis(NOW.0 + 60_000), 1);
        assert!(later.counted && !later.over_limit);
        assert_eq!(later.after, 1);
    }

    #[test]
    fn peek_changes_nothing() {
        let mut slots = Slots::default();
        slots.apply(&c(1, false), NOW, 1);
        let peeked = slots.peek(&c(2, false), NOW, 1);
        assert!(peeked.counted);
        assert_eq!(slots.parts().len(), 1);
    }
}
