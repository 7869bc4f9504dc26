//! Waits between reconnects: exponential from an initial interval up to a
//! maximum, optionally spread at random so a fleet of instances does not
//! reconnect in step.

use std::time::Duration;

/// Reconnect backoff after a broken stream (`XDS_CLIENT_BACKOFF_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    /// Wait before the first reconnect; each further attempt doubles it.
    pub initial: Duration,
    /// Longest wait.
    pub max: Duration,
    /// With `jitter`, a wait is drawn uniformly within ± this share of it
    /// (0 to 1).
    pub random_factor: f64,
    /// Spread waits at random.
    pub jitter: bool,
}

impl Default for Backoff {
    /// The reference's defaults: 10 s, 60 s, 0.5, jitter on.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            random_factor: 0.5,
            jitter: true,
        }
    }
}

impl Backoff {
    /// The wait before reconnect `attempt` (0 for the first), with `unit` a
    /// random draw in `[0, 1)`. Never more than [`Backoff::max`].
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let max = self.max.as_secs_f64();
        let base = (self.initial.as_secs_f64() * 2f64.powi(attempt.min(62).cast_signed())).min(max);
        let secs = if self.jitter {
            let spread = base * self.random_factor.clamp(0.0, 1.0);
            (base - spread + 2.0 * spread * unit.clamp(0.0, 1.0)).min(max)
        } else {
            base
        };
        Duration::try_from_secs_f64(secs).unwrap_or(self.max)
    }

    /// [`Backoff::delay`] with a fresh random draw.
    pub(super) fn next(&self, attempt: u32) -> Duration {
        self.delay(attempt, random_unit())
    }
}

/// A random number in `[0, 1)`, to spread reconnects.
pub(super) fn random_unit() -> f64 {
    rand::random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn backoff(jitter: bool) -> Backoff {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            random_factor: 0.5,
            jitter,
        }
    }

    #[test]
    fn doubles_up_to_the_maximum_without_jitter() {
        let b = backoff(false);
        let waits: Vec<u128> = (0..7).map(|n| b.delay(n, 0.9).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
    }

    proptest! {
        #[test]
        fn jitter_stays_within_the_factor_and_the_maximum(attempt in 0u32..100, unit in 0.0f64..1.0) {
            let b = backoff(true);
            let base = backoff(false).delay(attempt, unit).as_secs_f64();
            let wait = b.delay(attempt, unit).as_secs_f64();
            prop_assert!(wait >= base * 0.5 - 1e-9);
            prop_assert!(wait <= (base * 1.5).min(2.0) + 1e-9);
        }
    }

    #[test]
    fn random_draws_are_in_the_unit_interval() {
        for _ in 0..100 {
            let unit = random_unit();
            assert!((0.0..1.0).contains(&unit), "{unit}");
        }
    }
}
