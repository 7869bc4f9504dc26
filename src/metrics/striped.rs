//! Counters every request adds to, split in per-thread stripes.
//!
//! An atomic add is cheap on one core, but when the threads of a many-core
//! host all add to the same counter its cache line moves from core to core
//! on every request, and the request path serialises on it. Each thread
//! adds to a stripe of its own (its own cache line); readers (`/metrics`,
//! statsd, the live page: rare) sum the stripes. A stripe per core, up to
//! [`MAX_STRIPES`], so a process with thousands of series stays small.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// Most stripes per counter: on a bigger host threads share a stripe
/// (still an 8th of the traffic on each cache line), and a rule's
/// counters stay at most 1 KiB however many cores.
pub(super) const MAX_STRIPES: usize = 8;

/// Stripes per counter: the cores this process may run on, rounded up to
/// a power of two (a thread's stripe is then a mask, not a division).
static STRIPES: LazyLock<usize> = LazyLock::new(|| {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, MAX_STRIPES)
        .next_power_of_two()
});

/// Threads numbered in the order they first count.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number (tokio's workers start together, so they get
    /// consecutive numbers and stripes of their own).
    static THREAD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// This thread's number.
fn thread_number() -> usize {
    THREAD.with(|number| {
        number.get().unwrap_or_else(|| {
            let next = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            number.set(Some(next));
            next
        })
    })
}

/// `T` once per stripe; see the module.
#[derive(Debug)]
pub(crate) struct Striped<T> {
    /// Stripe 0: held apart, so there always is one.
    first: CachePadded<T>,
    /// Stripes 1 and up.
    rest: Box<[CachePadded<T>]>,
}

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Self {
            first: CachePadded::default(),
            rest: (1..*STRIPES).map(|_| CachePadded::default()).collect(),
        }
    }
}

impl<T> Striped<T> {
    /// The calling thread's stripe.
    pub(crate) fn local(&self) -> &T {
        // The stripes are a power of two, `rest.len() + 1`: the mask is
        // `rest.len()`.
        (thread_number() & self.rest.len())
            .checked_sub(1)
            .and_then(|i| self.rest.get(i))
            .unwrap_or(&self.first)
    }

    /// Every stripe, for readers summing them.
    pub(crate) fn each(&self) -> impl Iterator<Item = &T> {
        std::iter::once(&self.first)
            .chain(self.rest.iter())
            .map(|stripe| &**stripe)
    }
}

/// A counter: requests add to their thread's stripe.
pub(crate) type Counter = Striped<AtomicU64>;

impl Striped<AtomicU64> {
    /// Adds `n` on this thread's stripe.
    pub(crate) fn add(&self, n: u64) {
        self.local().fetch_add(n, Ordering::Relaxed);
    }

    /// The total over every stripe.
    pub(crate) fn get(&self) -> u64 {
        self.each()
            .fold(0u64, |sum, c| sum.wrapping_add(c.load(Ordering::Relaxed)))
    }
}

/// A gauge going up and down, perhaps on different threads (a stripe may
/// go below zero; the sum is right).
pub(crate) type Gauge = Striped<AtomicI64>;

impl Striped<AtomicI64> {
    /// Adds `n` (negative to take away) on this thread's stripe.
    pub(crate) fn add(&self, n: i64) {
        self.local().fetch_add(n, Ordering::Relaxed);
    }

    /// The total over every stripe.
    pub(crate) fn get(&self) -> i64 {
        self.each()
            .fold(0i64, |sum, c| sum.wrapping_add(c.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_sum_counts_every_thread() {
        let counter = Arc::new(Counter::default());
        let gauge = Arc::new(Gauge::default());
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (counter, gauge) = (Arc::clone(&counter), Arc::clone(&gauge));
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        counter.add(i + 1);
                    }
                    // Up on one thread, down on another.
                    gauge.add(if i % 2 == 0 { 3 } else { -3 });
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(counter.get(), 1_000 * (1..=8).sum::<u64>());
        assert_eq!(gauge.get(), 0);
        assert!(counter.each().count().is_power_of_two());
        assert!(counter.each().count() <= MAX_STRIPES);
    }

    #[test]
    fn stripes_sit_on_cache_lines_of_their_own() {
        let counter = Counter::default();
        let addresses: Vec<usize> = counter.each().map(|c| c as *const _ as usize).collect();
        for (i, a) in addresses.iter().enumerate() {
            for b in &addresses[i + 1..] {
                assert!(a.abs_diff(*b) >= 64, "{addresses:?}");
            }
        }
    }
}
