//! The rate-limit headers: the most constrained descriptor's, every
//! descriptor's (`LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED`) and the upstream
//! request's (`LIMIT_REQUEST_HEADERS_ENABLED`).

use super::*;

#[tokio::test]
async fn headers_describe_the_most_constrained_descriptor() {
    let (l, _) = limiter_with(LimiterOptions {
        response_headers: Some(HeaderNames::default()),
        ..LimiterOptions::default()
    });
    let r = ask(
        &l,
        vec![one("k20", "x"), one("minute", "x"), one("free", "x")],
    )
    .await;
    let headers: Vec<(String, String)> = r
        .response_headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("RateLimit-Limit".into(), "2".into()),
            ("RateLimit-Remaining".into(), "1".into()),
            ("RateLimit-Reset".into(), "40".into()),
        ]
    );
    // An over-limit descriptor wins even with more "remaining" elsewhere.
    let r = ask(&l, vec![one("blocked", "x"), one("k20", "x")]).await;
    assert_eq!(&*r.response_headers[0].1, "0");
    assert_eq!(r.response_headers[2].1, "1");
    // No limited descriptor: no headers.
    let r = ask(&l, vec![one("free", "x")]).await;
    assert!(r.response_headers.is_empty());
}

fn pairs(headers: &[(Arc<str>, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// `LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED` (the reference's pull request
/// #1190): a limit/remaining pair per limited descriptor, named by its unit,
/// in request order, instead of the most constrained one's headers.
#[tokio::test]
async fn all_descriptors_headers_name_each_limit_by_its_unit() {
    let (l, _) = limiter_with(LimiterOptions {
        response_headers: Some(HeaderNames::default()),
        all_descriptors_headers: true,
        ..LimiterOptions::default()
    });
    let r = ask(
        &l,
        vec![
            one("k20", "x"),
            one("free", "x"),
            one("minute", "x"),
            one("hourly", "x"),
        ],
    )
    .await;
    assert_eq!(
        pairs(&r.response_headers),
        [
            ("ratelimit-limit-seconds", "20"),
            ("ratelimit-remaining-seconds", "19"),
            ("ratelimit-limit-minutes", "2"),
            ("ratelimit-remaining-minutes", "1"),
            ("ratelimit-limit-hours", "10"),
            ("ratelimit-remaining-hours", "9"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert!(r.request_headers.is_empty());
}

/// `LIMIT_REQUEST_HEADERS_ENABLED` (pull request #1168): the most
/// constrained descriptor's figures for the request sent upstream, under
/// their own names, whether response headers are on or not.
#[tokio::test]
async fn request_headers_carry_the_most_constrained_descriptor() {
    let (l, _) = limiter_with(LimiterOptions {
        request_headers: Some(HeaderNames {
            limit: Arc::from("X-Up-Limit"),
            remaining: Arc::from("X-Up-Remaining"),
            reset: Arc::from("X-Up-Reset"),
        }),
        ..LimiterOptions::default()
    });
    let r = ask(&l, vec![one("k20", "x"), one("minute", "x")]).await;
    assert!(r.response_headers.is_empty());
    assert_eq!(
        pairs(&r.request_headers),
        [
            ("X-Up-Limit", "2"),
            ("X-Up-Remaining", "1"),
            ("X-Up-Reset", "40")
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
}
