//! The access layer in front of the operator views, against the binary:
//! a client from 127.0.0.2 is outside a trusted 127.0.0.1/32, one from
//! 127.0.0.1 inside it. Every view, with no, a wrong, a valid and a
//! removed token; the probes, `/json`, `/metrics` and `/rlconfig` open to
//! all.

use crate::support::floodgate::Floodgate;
use crate::support::http::{HttpAnswer, send_from};
use crate::support::wait_until;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const INSIDE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const OUTSIDE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-abcdefghijklm";
const EXPLAIN: &str =
    r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}"#;

/// Every operator view: (method, path, body).
const VIEWS: [(&str, &str, Option<&str>); 5] = [
    ("POST", "/explain", Some(EXPLAIN)),
    ("GET", "/top?domain=edge", None),
    ("GET", "/history", None),
    ("GET", "/", None),
    ("GET", "/rlqs?domain=edge&bucket=user=u1", None),
];

/// What every client may call, token or not.
const OPEN: [(&str, &str, Option<&str>); 5] = [
    ("GET", "/healthcheck", None),
    ("GET", "/livez", None),
    ("GET", "/metrics", None),
    ("GET", "/rlconfig", None),
    ("POST", "/json", Some(EXPLAIN)),
];

async fn call(
    http: SocketAddr,
    from: IpAddr,
    (method, path, body): (&str, &str, Option<&str>),
    token: Option<&str>,
) -> HttpAnswer {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    send_from(Some(from), http, method, path, &headers, body).await
}

#[tokio::test]
async fn views_need_a_valid_token_outside_the_trusted_networks() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("# operators\nalice:{ALICE}\nbob:{BOB}:write\n"),
    )
    .unwrap();
    let log_path = dir.path().join("log");
    let server = Floodgate::start_logged(
        &[
            ("ADMIN_TRUSTED_NETWORKS", "127.0.0.1/32".to_owned()),
            ("ADMIN_TOKENS_FILE", tokens.display().to_string()),
            ("LOG_LEVEL", "info".to_owned()),
        ],
        std::fs::File::create(&log_path).unwrap(),
    )
    .await;
    let http = server.http;
    for view in VIEWS {
        let path = view.1;
        let trusted = call(http, INSIDE, view, None).await;
        assert_eq!(trusted.status, 200, "{path} from a trusted network");
        for token in [None, Some("not-a-token-at-all-0000")] {
            let refused = call(http, OUTSIDE, view, token).await;
            assert_eq!(
                refused.status, 401,
                "{path} with {token:?}: {}",
                refused.body
            );
            assert!(
                refused.headers.contains("www-authenticate: Bearer"),
                "{path}: {}",
                refused.headers
            );
        }
        for token in [ALICE, BOB] {
            let answer = call(http, OUTSIDE, view, Some(token)).await;
            assert_eq!(
                answer.status, 200,
                "{path} with a valid token: {}",
                answer.body
            );
        }
    }
    for open in OPEN {
        let answer = call(http, OUTSIDE, open, None).await;
        assert!(answer.status < 400, "{} refused: {}", open.1, answer.status);
    }

    // alice's line removed: her token is refused once the file is read
    // again (every 500 ms), bob's still works.
    std::fs::write(&tokens, format!("bob:{BOB}\n")).unwrap();
    wait_until(
        "alice's removed token is refused",
        Duration::from_secs(10),
        || async { call(http, OUTSIDE, VIEWS[1], Some(ALICE)).await.status == 401 },
    )
    .await;
    assert_eq!(call(http, OUTSIDE, VIEWS[1], Some(BOB)).await.status, 200);

    // A bad file (a short token on line 2) keeps the previous tokens.
    std::fs::write(&tokens, format!("bob:{BOB}\ncarol:short-token\n")).unwrap();
    wait_until(
        "the bad file is reported",
        Duration::from_secs(10),
        || async {
            std::fs::read_to_string(&log_path)
                .unwrap()
                .contains("line 2: the token is shorter than 16 characters")
        },
    )
    .await;
    assert_eq!(call(http, OUTSIDE, VIEWS[1], Some(BOB)).await.status, 200);

    let metrics = call(http, OUTSIDE, OPEN[2], None).await.body;
    for series in [
        r#"ratelimit_admin_requests_total{view="explain",result="ok"} 3"#,
        r#"ratelimit_admin_requests_total{view="page",result="unauthenticated"} 2"#,
        r#"ratelimit_admin_requests_total{view="rlqs",result="forbidden"} 0"#,
    ] {
        assert!(metrics.contains(series), "{series} in\n{metrics}");
    }
    server.stop().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("admin.user=alice"), "{log}");
    assert!(log.contains("admin.user=bob"), "{log}");
    for token in [ALICE, BOB, "short-token", "not-a-token-at-all-0000"] {
        assert!(!log.contains(token), "a token in the log:\n{log}");
        assert!(!metrics.contains(token), "a token in the metrics");
    }
}

#[tokio::test]
async fn views_are_forbidden_outside_the_trusted_networks_without_a_tokens_file() {
    let server = Floodgate::start(&[("ADMIN_TRUSTED_NETWORKS", "127.0.0.1/32".to_owned())]).await;
    for view in VIEWS {
        let refused = call(server.http, OUTSIDE, view, Some(ALICE)).await;
        assert_eq!(refused.status, 403, "{}", view.1);
        assert!(
            refused.body.contains("ADMIN_TRUSTED_NETWORKS")
                && refused.body.contains("ADMIN_TOKENS_FILE"),
            "{}",
            refused.body
        );
        assert_eq!(call(server.http, INSIDE, view, None).await.status, 200);
    }
    for open in OPEN {
        let answer = call(server.http, OUTSIDE, open, None).await;
        assert!(answer.status < 400, "{} refused: {}", open.1, answer.status);
    }
    server.stop().await;
}
