//! What `/explain` predicts is exactly what the next decision answers, for
//! random requests over every kind of rule above, random clock steps, with
//! the local cache and stop-increment on or off; and explaining counts
//! nothing (the decision after it is the one a fresh limiter would give).

use super::*;
use proptest::prelude::*;

const KEYS: [&str; 12] = [
    "k20", "k8", "minute", "shadow", "quota_a", "quota_b", "free", "replacer", "path", "burst",
    "trial", "mixed",
];

fn descriptor((key, value, hits): (usize, u8, Option<u64>)) -> Descriptor {
    let key = KEYS[key % KEYS.len()];
    let value = if key == "path" {
        format!("/api/{value}")
    } else {
        format!("v{value}")
    };
    let mut d = one(key, &value);
    d.hits_addend = hits;
    d
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_next_decision_gets_the_explained_statuses(
        stop_when_over in any::<bool>(),
        local_cache in any::<bool>(),
        steps in proptest::collection::vec(
            (0u64..2_500, proptest::collection::vec((0usize..12, 0u8..2, proptest::option::of(0u64..3)), 1..4)),
            1..30,
        ),
    ) {
        let options = LimiterOptions {
            stop_when_over,
            local_cache_bytes: if local_cache { 1 << 20 } else { 0 },
            ..LimiterOptions::default()
        };
        let (explained, clock) = limiter_with(options.clone());
        let (plain, plain_clock) = limiter_with(options);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (advance, descriptors) in steps {
            clock.advance(std::time::Duration::from_millis(advance));
            plain_clock.advance(std::time::Duration::from_millis(advance));
            let r = request(descriptors.into_iter().map(descriptor).collect());
            let explanation = rt.block_on(explained.explain(&r)).unwrap();
            let decided = rt.block_on(explained.should_rate_limit(&r)).unwrap();
            let fresh = rt.block_on(plain.should_rate_limit(&r)).unwrap();
            prop_assert_eq!(&decided, &fresh, "explaining counted something");
            prop_assert_eq!(explanation.overall_code, decided.overall_code);
            let predicted: Vec<Status> =
                explanation.descriptors.iter().map(|d| d.status.clone()).collect();
            prop_assert_eq!(predicted, decided.statuses);
        }
    }
}
