//! gRPC over TLS and mTLS, with certificates generated in the test.

use crate::support::tls::{Ca, Pem, start, try_ask, write};
use floodgate::TlsOptions;
use std::path::Path;
use std::time::Duration;

/// Writes the server's PEM files (and the client CA, if any) into `dir`.
fn tls_files(dir: &Path, server: &Pem, client_ca: Option<&Ca>, san: Option<&str>) -> TlsOptions {
    TlsOptions {
        cert: write(dir, "tls.crt", &server.cert),
        key: write(dir, "tls.key", &server.key),
        client_ca: client_ca.map(|ca| write(dir, "ca.crt", &ca.cert_pem())),
        client_san: san.map(str::to_owned),
    }
}

#[tokio::test]
async fn tls_serves_clients_that_trust_the_ca_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server ca");
    let server = start(tls_files(dir.path(), &ca.server(), None, None)).await;

    let r = try_ask(server.grpc_addr, &ca.cert_pem(), None)
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 99);

    let stranger = Ca::new("another ca");
    let err = try_ask(server.grpc_addr, &stranger.cert_pem(), None)
        .await
        .unwrap_err();
    // The client refuses a server certificate its CA did not sign.
    assert!(
        err.starts_with("connect:") && err.contains("InvalidCertificate(UnknownIssuer)"),
        "{err}"
    );

    let plaintext = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await;
    let refused = match plaintext {
        Err(_) => true,
        Ok(channel) => floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel)
            .should_rate_limit(crate::support::grpc::request("edge", &[&[("user", "a")]]))
            .await
            .is_err(),
    };
    assert!(refused, "a plaintext client was served");
    server.shutdown().await;
}

#[tokio::test]
async fn mtls_requires_a_client_certificate_from_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Ca::new("server ca");
    let client_ca = Ca::new("client ca");
    let server = start(tls_files(
        dir.path(),
        &server_ca.server(),
        Some(&client_ca),
        None,
    ))
    .await;
    let ca = server_ca.cert_pem();

    try_ask(
        server.grpc_addr,
        &ca,
        Some(&client_ca.client("client.example")),
    )
    .await
    .unwrap();
    // TLS 1.3: the client's handshake ends before the server checks its
    // certificate, so the refusal arrives as the server's alert on the call.
    let err = try_ask(server.grpc_addr, &ca, None).await.unwrap_err();
    assert!(
        err.starts_with("rpc:") && err.contains("received fatal alert: CertificateRequired"),
        "{err}"
    );
    // Same name as the client CA, another key: its signature does not verify.
    let forged = Ca::new("client ca").client("client.example");
    let err = try_ask(server.grpc_addr, &ca, Some(&forged))
        .await
        .unwrap_err();
    assert!(
        err.starts_with("rpc:") && err.contains("received fatal alert: DecryptError"),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn client_certificate_must_match_the_configured_san() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Ca::new("server ca");
    let client_ca = Ca::new("client ca");
    let server = start(tls_files(
        dir.path(),
        &server_ca.server(),
        Some(&client_ca),
        Some("envoy.example"),
    ))
    .await;
    let ca = server_ca.cert_pem();

    try_ask(
        server.grpc_addr,
        &ca,
        Some(&client_ca.client("envoy.example")),
    )
    .await
    .unwrap();
    let err = try_ask(
        server.grpc_addr,
        &ca,
        Some(&client_ca.client("other.example")),
    )
    .await
    .unwrap_err();
    // Signed by the client CA, but not for the configured SAN.
    assert!(
        err.starts_with("rpc:") && err.contains("received fatal alert: BadCertificate"),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn rotated_server_certificate_is_served_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = Ca::new("old ca");
    let server = start(tls_files(dir.path(), &old_ca.server(), None, None)).await;
    try_ask(server.grpc_addr, &old_ca.cert_pem(), None)
        .await
        .unwrap();

    let new_ca = Ca::new("new ca");
    let rotated = new_ca.server();
    // Key first, then certificate, as a rotation may write them: a check
    // that sees the mismatched pair in between rejects it and keeps the old
    // one serving (see the unit test key_of_another_certificate_is_rejected).
    write(dir.path(), "tls.key", &rotated.key);
    write(dir.path(), "tls.crt", &rotated.cert);

    let rotated = crate::support::poll_until_async(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let pem = new_ca.cert_pem();
            async move {
                try_ask(server.grpc_addr, &pem, None)
                    .await
                    .is_ok()
                    .then_some(true)
            }
        },
    )
    .await;
    assert!(rotated, "the rotated certificate was not served");
    let err = try_ask(server.grpc_addr, &old_ca.cert_pem(), None)
        .await
        .unwrap_err();
    // The client refuses a server certificate its CA did not sign.
    assert!(
        err.starts_with("connect:") && err.contains("InvalidCertificate(UnknownIssuer)"),
        "{err}"
    );
    server.shutdown().await;
}
