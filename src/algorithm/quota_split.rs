//! The split of one rule's budget across the Envoys reporting a bucket:
//! pure integer math, no I/O, no clock.
//!
//! A budget is `requests` per `window_secs` with `burst` tokens at once. It
//! is cut into [`UNITS`] units; a member (one Envoy on one bucket) holds a
//! *grant* of units and enforces a token bucket of `grant / UNITS` of the
//! rate and of the burst, both rounded down, so grants that add up to at
//! most [`UNITS`] give buckets whose rates add up to at most the rule's rate
//! and whose sizes add up to at most its burst.
//!
//! Each member's *target* follows demand ([`targets`]): a floor of
//! [`FLOOR_UNITS`] shared evenly by the members and one spare slot (so an
//! Envoy that starts reporting gets a share at once), and the rest in
//! proportion to the measured demand. A member never takes more than what
//! the others leave ([`grant`]): members are updated one at a time, each
//! at its own report, so a share grows only into room another member has
//! already given back, and the grants in force never add up to more than
//! the budget.

/// The whole budget of a rule, in units.
pub const UNITS: u64 = 1_000_000;

/// The part of the budget shared evenly (5 %): every member and one spare
/// slot for a newcomer get `FLOOR_UNITS / (members + 1)` whatever their
/// demand.
pub const FLOOR_UNITS: u64 = UNITS / 20;

/// Tokens per fill a bucket aims for: fill intervals are stretched until a
/// fill carries at least this many tokens, so rounding a rate down to whole
/// tokens loses at most 0.1 % of it.
const PRECISION_TOKENS: u64 = 1_000;

/// The longest fill interval sent (ten years): rates too small to be
/// written with it are not granted at all.
pub const MAX_FILL_SECS: u64 = 10 * 365 * 86_400;

/// What a rule allows, as the split sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Requests per window; at least 1 (a rule of 0 denies all, and is never
    /// split).
    pub requests: u64,
    /// Window length in seconds; at least 1.
    pub window_secs: u64,
    /// Tokens at once: the rule's `requests_per_unit`, or `burst` for GCRA.
    pub burst: u64,
}

impl Budget {
    /// The rate in requests per second.
    #[allow(clippy::cast_precision_loss)] // reporting only
    pub fn rate_per_sec(&self) -> f64 {
        self.requests as f64 / self.window_secs.max(1) as f64
    }
}

/// A token bucket as Envoy enforces it: starts full with `max_tokens`, and
/// refills continuously at `tokens_per_fill` per `fill_interval_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    /// Size of the bucket (> 0).
    pub max_tokens: u32,
    /// Tokens added per fill interval (> 0).
    pub tokens_per_fill: u32,
    /// The fill interval in whole seconds (>= 1: Envoy 1.40 treats anything
    /// under a second as no limit).
    pub fill_interval_secs: u64,
}

impl TokenBucket {
    /// The refill rate in tokens per second.
    #[allow(clippy::cast_precision_loss)] // reporting only
    pub fn rate_per_sec(&self) -> f64 {
        f64::from(self.tokens_per_fill) / self.fill_interval_secs.max(1) as f64
    }
}

/// What one Envoy is told to do with a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Admit every request.
    AllowAll,
    /// Refuse every request.
    DenyAll,
    /// Admit what a token bucket allows.
    TokenBucket(TokenBucket),
}

/// Each member's target share in units, for `demands` (requests per
/// second, any fixed scale) in member order. The targets add up to at most
/// `UNITS` less one spare floor slot; each is at least the floor
/// `FLOOR_UNITS / (members + 1)`; a member with more demand never has a
/// smaller target.
pub fn targets(demands: &[u64]) -> Vec<u64> {
    let members = demands.len() as u64;
    if members == 0 {
        return Vec::new();
    }
    let floor = FLOOR_UNITS / (members + 1);
    // The spare slot's floor stays unassigned.
    let rest = UNITS - floor * (members + 1);
    let total: u128 = demands.iter().map(|&d| u128::from(d)).sum();
    demands
        .iter()
        .map(|&demand| {
            // demand <= total, so the quotient is <= rest and fits; with no
            // demand at all, the rest is split evenly.
            let by_demand = (u128::from(rest) * u128::from(demand))
                .checked_div(total)
                .map_or(rest / members, |share| u64::try_from(share).unwrap_or(rest));
            floor + by_demand
        })
        .collect()
}

/// The grant a member may hold: its `target`, within what the grants of
/// the other members (`others`) leave of the budget.
pub fn grant(target: u64, others: u64) -> u64 {
    target.min(UNITS.saturating_sub(others))
}

/// The token bucket of a grant of `units` of `budget`, or
/// [`Strategy::DenyAll`] when the grant is too small to be written as a
/// bucket (no whole token of burst, or less than one token per
/// [`MAX_FILL_SECS`]).
///
/// The bucket never exceeds the grant: `max_tokens <= burst * units /
/// UNITS` and `tokens_per_fill / fill_interval <= rate * units / UNITS`.
pub fn bucket(budget: &Budget, units: u64) -> Strategy {
    let units = u128::from(units.min(UNITS));
    let (requests, window, burst) = (
        u128::from(budget.requests),
        u128::from(budget.window_secs.max(1)),
        u128::from(budget.burst),
    );
    let whole = u128::from(UNITS);
    let max_tokens = burst * units / whole;
    // Tokens per window this grant is worth, times UNITS.
    let scaled = requests * units;
    if max_tokens == 0 || scaled == 0 {
        return Strategy::DenyAll;
    }
    // Stretch the fill interval (a whole number of windows) until a fill
    // carries PRECISION_TOKENS, within MAX_FILL_SECS.
    let wanted = (u128::from(PRECISION_TOKENS) * whole)
        .div_ceil(scaled)
        .max(1);
    let longest = (u128::from(MAX_FILL_SECS) / window).max(1);
    let windows = wanted.min(longest);
    let tokens_per_fill = scaled * windows / whole;
    let fill_interval_secs = window * windows;
    match (
        u32::try_from(max_tokens.min(u128::from(u32::MAX))),
        // Saturating at u32::MAX only rounds the rate further down.
        u32::try_from(tokens_per_fill.min(u128::from(u32::MAX))),
        u64::try_from(fill_interval_secs),
    ) {
        (Ok(max_tokens), Ok(tokens_per_fill), Ok(fill_interval_secs)) if tokens_per_fill > 0 => {
            Strategy::TokenBucket(TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_secs,
            })
        }
        _ => Strategy::DenyAll,
    }
}

#[cfg(test)]
mod tests {
    use super::{Budget, FLOOR_UNITS, MAX_FILL_SECS, Strategy, UNITS, bucket, grant, targets};
    use proptest::prelude::{Just, prop_assert, prop_assert_eq, prop_oneof, proptest};
    use proptest::strategy::Strategy as _;

    const PER_MINUTE_60: Budget = Budget {
        requests: 60,
        window_secs: 60,
        burst: 60,
    };

    #[test]
    fn a_lone_member_gets_all_but_the_spare_slot() {
        assert_eq!(targets(&[7]), vec![UNITS - FLOOR_UNITS / 2]);
        assert_eq!(targets(&[0]), vec![UNITS - FLOOR_UNITS / 2]);
        assert_eq!(targets(&[]), Vec::<u64>::new());
    }

    #[test]
    fn equal_demands_split_evenly_and_leave_the_spare_slot() {
        let t = targets(&[5, 5]);
        assert_eq!(t[0], t[1]);
        assert_eq!(t[0], 16_666 + 475_001);
        assert!(t.iter().sum::<u64>() <= UNITS - 16_666);
    }

    #[test]
    fn demand_moves_the_share_but_the_floor_stays() {
        let t = targets(&[1_000, 0]);
        assert_eq!(t[1], FLOOR_UNITS / 3);
        assert!(t[0] > 900_000);
    }

    #[test]
    fn a_grant_never_takes_what_others_hold() {
        assert_eq!(grant(600_000, 500_000), 500_000);
        assert_eq!(grant(400_000, 500_000), 400_000);
        assert_eq!(grant(400_000, 1_200_000), 0);
    }

    #[test]
    fn buckets_of_sixty_per_minute() {
        // Half the budget: 30 tokens at once, 0.5 per second.
        let Strategy::TokenBucket(half) = bucket(&PER_MINUTE_60, UNITS / 2) else {
            panic!("half the budget is a bucket");
        };
        assert_eq!(half.max_tokens, 30);
        assert_eq!(half.tokens_per_fill, 1_020);
        assert_eq!(half.fill_interval_secs, 60 * 34);
        assert!((half.rate_per_sec() - 0.5).abs() < 1e-3);
        // The whole budget: the rule itself.
        let Strategy::TokenBucket(all) = bucket(&PER_MINUTE_60, UNITS) else {
            panic!("the whole budget is a bucket");
        };
        assert_eq!(all.max_tokens, 60);
        assert!(all.rate_per_sec() <= 1.0);
        assert!(all.rate_per_sec() > 0.999);
        // Less than one token of burst: nothing can be granted.
        assert_eq!(bucket(&PER_MINUTE_60, UNITS / 61), Strategy::DenyAll);
        assert_eq!(bucket(&PER_MINUTE_60, 0), Strategy::DenyAll);
    }

    #[test]
    fn fast_rules_need_no_stretching() {
        let budget = Budget {
            requests: 10_000,
            window_secs: 1,
            burst: 10_000,
        };
        let Strategy::TokenBucket(b) = bucket(&budget, UNITS / 4) else {
            panic!("a quarter is a bucket");
        };
        assert_eq!(b.max_tokens, 2_500);
        assert_eq!(b.tokens_per_fill, 2_500);
        assert_eq!(b.fill_interval_secs, 1);
    }

    fn budget() -> impl proptest::strategy::Strategy<Value = Budget> {
        (
            1_u64..=1_000_000,
            prop_oneof![
                Just(1_u64),
                Just(60),
                Just(3_600),
                Just(86_400),
                1_u64..=100_000
            ],
            1_u64..=1_000_000,
        )
            .prop_map(|(requests, window_secs, burst)| Budget {
                requests,
                window_secs,
                burst,
            })
    }

    fn demands() -> impl proptest::strategy::Strategy<Value = Vec<u64>> {
        proptest::collection::vec(
            prop_oneof![Just(0_u64), 0_u64..=10, 0_u64..=u64::from(u32::MAX)],
            1..40,
        )
    }

    proptest! {
        /// Targets add up to the budget less the spare slot, each gets the
        /// floor, and more demand never means a smaller target.
        #[test]
        fn targets_fit_the_budget_and_follow_demand(demands in demands()) {
            let t = targets(&demands);
            let floor = FLOOR_UNITS / (demands.len() as u64 + 1);
            prop_assert_eq!(t.len(), demands.len());
            prop_assert!(t.iter().sum::<u64>() <= UNITS - floor);
            for (i, (&ti, &di)) in t.iter().zip(&demands).enumerate() {
                prop_assert!(ti >= floor, "member {} below the floor", i);
                for (&tj, &dj) in t.iter().zip(&demands) {
                    if di > dj {
                        prop_assert!(ti >= tj);
                    }
                }
            }
        }

        /// Buckets of any grants that fit the budget add up to at most the
        /// rule's rate and burst; every member with a grant worth a token
        /// of burst gets a bucket, and a larger grant never gets a smaller
        /// bucket.
        #[test]
        fn buckets_never_exceed_the_rule(budget in budget(), demands in demands()) {
            let t = targets(&demands);
            let buckets: Vec<Strategy> = t.iter().map(|&units| bucket(&budget, units)).collect();
            let mut tokens = 0_u64;
            let mut rate = 0.0_f64;
            for ((&units, strategy), &demand) in t.iter().zip(&buckets).zip(&demands) {
                match strategy {
                    Strategy::TokenBucket(b) => {
                        prop_assert!(b.max_tokens > 0 && b.tokens_per_fill > 0);
                        prop_assert!(b.fill_interval_secs >= 1);
                        // Exact, per member: tokens/fill <= share of the rate.
                        prop_assert!(
                            u128::from(b.tokens_per_fill) * u128::from(UNITS) * u128::from(budget.window_secs)
                                <= u128::from(budget.requests) * u128::from(units) * u128::from(b.fill_interval_secs)
                        );
                        prop_assert!(
                            u128::from(b.max_tokens) * u128::from(UNITS)
                                <= u128::from(budget.burst) * u128::from(units)
                        );
                        // Rounding costs at most 0.1 % of the share's rate
                        // (unless the fill interval hit its cap).
                        if b.fill_interval_secs.saturating_mul(2) <= MAX_FILL_SECS {
                            prop_assert!(
                                u128::from(b.tokens_per_fill) * 1_000 * u128::from(UNITS) * u128::from(budget.window_secs)
                                    >= 999 * u128::from(budget.requests) * u128::from(units) * u128::from(b.fill_interval_secs)
                            );
                        }
                        tokens += u64::from(b.max_tokens);
                        rate += b.rate_per_sec();
                    }
                    Strategy::DenyAll => {
                        // Only when the share is worth less than a token.
                        prop_assert!(
                            u128::from(budget.burst) * u128::from(units) < u128::from(UNITS)
                                || budget.window_secs > MAX_FILL_SECS,
                            "member with demand {} and {} units denied", demand, units
                        );
                    }
                    Strategy::AllowAll => prop_assert!(false, "a split never allows all"),
                }
            }
            prop_assert!(tokens <= budget.burst);
            prop_assert!(rate <= budget.rate_per_sec() * (1.0 + 1e-12));
            // Every member gets a bucket when the burst has a token for
            // each floor share.
            if budget.burst >= 20 * (demands.len() as u64 + 1) {
                prop_assert!(buckets.iter().all(|b| matches!(b, Strategy::TokenBucket(_))));
            }
            for (i, bi) in buckets.iter().enumerate() {
                for (j, bj) in buckets.iter().enumerate() {
                    if let (Strategy::TokenBucket(a), Strategy::TokenBucket(b)) = (bi, bj)
                        && t[i] > t[j]
                    {
                        prop_assert!(a.max_tokens >= b.max_tokens);
                        prop_assert!(a.rate_per_sec() >= b.rate_per_sec() * (1.0 - 2e-3));
                    }
                }
            }
        }

        /// Members updated one at a time, each taking at most what the
        /// others leave, never hold more than the budget between them; and
        /// once every member has been updated twice with steady demands,
        /// each holds its target.
        #[test]
        fn grants_one_at_a_time_never_exceed_the_budget_and_converge(
            demands in demands(),
            order in proptest::collection::vec(0_usize..40, 0..200),
        ) {
            let n = demands.len();
            let mut grants = vec![0_u64; n];
            let t = targets(&demands);
            let update = |grants: &mut Vec<u64>, i: usize| {
                let others: u64 = grants.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, g)| g).sum();
                grants[i] = grant(t[i], others);
            };
            for i in order.into_iter().map(|i| i % n) {
                update(&mut grants, i);
                prop_assert!(grants.iter().sum::<u64>() <= UNITS);
            }
            for _ in 0..2 {
                for i in 0..n {
                    update(&mut grants, i);
                    prop_assert!(grants.iter().sum::<u64>() <= UNITS);
                }
            }
            prop_assert_eq!(grants, t);
        }
    }
}
