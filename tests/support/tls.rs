//! Test PKI generated with rcgen: a CA, server and client certificates, PEM
//! files in a tempdir, and TLS clients for the gRPC port.

use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A certificate authority able to issue server and client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    fn issue(&self, san: &str, purpose: ExtendedKeyUsagePurpose) -> Pem {
        let mut params = CertificateParams::new(vec![san.to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, san);
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost`.
    pub fn server(&self) -> Pem {
        self.issue("localhost", ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A server certificate for the DNS name `san`.
    pub fn server_for(&self, san: &str) -> Pem {
        self.issue(san, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate valid for the DNS name `san`.
    pub fn client(&self, san: &str) -> Pem {
        self.issue(san, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// Writes `text` to `dir/name` atomically (write, then rename) and returns
/// the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// Connects to `addr` over TLS as `localhost`, trusting `ca_pem`, with an
/// optional client identity, and asks one `ShouldRateLimit`. Any failure
/// (connect, handshake, or the RPC) is an `Err` with its text.
pub async fn try_ask(
    addr: SocketAddr,
    ca_pem: &str,
    identity: Option<&Pem>,
) -> Result<RateLimitResponse, String> {
    let mut tls = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(ca_pem));
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert, &id.key));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| format!("{e:?}"))?
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    let mut client = RateLimitServiceClient::new(channel);
    client
        .should_rate_limit(super::grpc::request("edge", &[&[("user", "a")]]))
        .await
        .map(tonic::Response::into_inner)
        .map_err(|e| format!("rpc: {e:?}"))
}

/// The rules [`start`] serves: `edge`, 100 a minute per user.
const TLS_RULES: &str = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";

/// A test server with the `edge` rules on the embedded store, serving gRPC
/// over `tls`.
pub async fn start(tls: floodgate::TlsOptions) -> super::grpc::TestServer {
    use floodgate::LimiterOptions;
    use floodgate::ServeOptions;
    use floodgate::{ManualClock, UnixMillis};
    use floodgate::{MemoryStore, StoreKind};
    super::grpc::TestServer::start_with(
        super::grpc::index(&[("edge.yaml", TLS_RULES)]),
        StoreKind::Memory(MemoryStore::new()),
        std::sync::Arc::new(ManualClock::new(UnixMillis::from_secs(1_700_000_000))),
        LimiterOptions::default(),
        ServeOptions {
            shutdown_grace: std::time::Duration::from_secs(5),
            tls: Some(tls),
            ..ServeOptions::default()
        },
    )
    .await
}

/// Writes a CA, a server certificate for `localhost` and a client
/// certificate as PEM files into a new directory.
pub fn redis_pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("redis test ca");
    let server = ca.server();
    let client = ca.client("floodgate");
    write(dir.path(), "ca.pem", &ca.cert_pem());
    write(dir.path(), "server.pem", &server.cert);
    write(dir.path(), "server.key", &server.key);
    write(dir.path(), "client.pem", &client.cert);
    write(dir.path(), "client.key", &client.key);
    dir
}
