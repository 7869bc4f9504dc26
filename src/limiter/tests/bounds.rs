//! Bad requests are refused whole and count nothing.

use super::*;

#[tokio::test]
async fn bad_requests_are_rejected_and_count_nothing() {
    let (l, _) = limiter_with(LimiterOptions {
        bounds: RequestBounds {
            max_descriptors: 2,
            max_entries: 2,
            max_entry_bytes: 8,
            max_domain_bytes: 4,
            max_hits_addend: 10,
        },
        ..LimiterOptions::default()
    });
    let mut req = request(vec![one("minute", "u")]);
    req.domain.clear();
    let err = l.should_rate_limit(&req).await.unwrap_err();
    assert_eq!(err.to_string(), "rate limit domain must not be empty");
    let err = l.should_rate_limit(&request(vec![])).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "rate limit descriptor list must not be empty"
    );
    let three = vec![one("minute", "u"), one("minute", "u"), one("minute", "u")];
    let err = l.should_rate_limit(&request(three)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "request has 3 descriptors, more than the limit of 2"
    );
    let deep = Descriptor {
        entries: vec![
            Entry::new("a", "1"),
            Entry::new("b", "2"),
            Entry::new("c", "3"),
        ],
        ..Descriptor::default()
    };
    let err = l
        .should_rate_limit(&request(vec![one("minute", "u"), deep]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "descriptor 1 has 3 entries, more than the limit of 2"
    );
    let err = l
        .should_rate_limit(&request(vec![one("minute", "123456789")]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "descriptor 0 entry 0 is 15 bytes, more than the limit of 8"
    );
    assert!(err.is_invalid_request());
    let mut long = request(vec![one("minute", "u")]);
    long.domain = "edge5".into();
    let err = l.should_rate_limit(&long).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "domain is 5 bytes, more than the limit of 4"
    );
    let mut heavy = request(vec![one("minute", "u")]);
    heavy.hits_addend = 11;
    let err = l.should_rate_limit(&heavy).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "request hits_addend 11 is more than the limit of 10"
    );
    let mut heavy = one("minute", "u");
    heavy.hits_addend = Some(1 << 31);
    let err = l
        .should_rate_limit(&request(vec![one("minute", "u"), heavy]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "descriptor 1 hits_addend 2147483648 is more than the limit of 10"
    );
    assert!(err.is_invalid_request());
    let memory = l.store().as_memory().unwrap();
    assert!(memory.is_empty(), "a rejected request counted something");
}
