//! TLS for the gRPC listener: server certificate and key, optional client
//! CA (mTLS, a client certificate is then required) and optional client
//! certificate SAN check. The PEM files are polled and re-read when they
//! change, so rotated certificates are served without a restart.
//!
//! Owns: building the rustls configuration (always with the `ring`
//! provider), the TLS accept loop fed to tonic, and the file poller. Knows
//! nothing of rate limiting.
//!
//! tonic's own `ServerTlsConfig` is fixed once the server is built, so the
//! handshake is done here: every accepted connection is handed the
//! configuration stored at that moment, and in-flight connections keep the
//! one they started with.

use arc_swap::ArcSwap;
use rustls::DistinguishedName;
use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// How often the certificate files are checked for changes.
const TLS_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Longest a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Handshaken connections waiting for the gRPC server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// Where the gRPC listener's TLS material lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM certificate chain (`GRPC_SERVER_TLS_CERT`).
    pub cert: PathBuf,
    /// PEM private key (`GRPC_SERVER_TLS_KEY`).
    pub key: PathBuf,
    /// PEM CA bundle for client certificates (`GRPC_CLIENT_TLS_CACERT`);
    /// when set, every client must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
    /// DNS name the client certificate must be valid for
    /// (`GRPC_CLIENT_TLS_SAN`); needs `client_ca`.
    pub client_san: Option<String>,
}

/// Why the TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read tls {what} file {path}")]
    Read {
        /// Which file (certificate, key, client ca).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no usable item, or a malformed one.
    #[error("tls {what} file {path} holds no valid PEM {what}")]
    Pem {
        /// Which file (certificate, key, client ca).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Cause, when the PEM parser gave one.
        #[source]
        source: Option<rustls_pki_types::pem::Error>,
    },
    /// The client SAN is not a valid DNS name.
    #[error("client certificate SAN '{san}' is not a valid DNS name")]
    San {
        /// The configured SAN.
        san: String,
    },
    /// The client CA bundle cannot verify client certificates.
    #[error("cannot build the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// rustls refused the certificate, key or protocol settings.
    #[error("invalid tls configuration")]
    Config(#[source] rustls::Error),
}

/// The PEM files' bytes, read once per build so that the fingerprint and the
/// configuration always describe the same contents.
#[derive(Debug, PartialEq, Eq)]
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Files {
    fn read(options: &TlsOptions) -> Result<Self, TlsError> {
        let read = |what: &'static str, path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                what,
                path: path.to_path_buf(),
                source,
            })
        };
        Ok(Self {
            cert: read("certificate", &options.cert)?,
            key: read("key", &options.key)?,
            client_ca: options
                .client_ca
                .as_deref()
                .map(|path| read("client ca", path))
                .transpose()?,
        })
    }

    fn digest(&self) -> u64 {
        // Only compared within this process, so DefaultHasher is fine.
        let mut hasher = std::hash::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

impl std::hash::Hash for Files {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.cert.hash(state);
        self.key.hash(state);
        self.client_ca.hash(state);
    }
}

/// Builds the rustls server configuration from `options`, with the digest
/// of the file contents it was built from (the baseline for [`watch`]).
pub(crate) fn load(options: &TlsOptions) -> Result<(Arc<ServerConfig>, u64), TlsError> {
    let files = Files::read(options)?;
    Ok((build(options, &files)?, files.digest()))
}

fn build(options: &TlsOptions, files: &Files) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certificates(&files.cert, "certificate", &options.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|source| TlsError::Pem {
        what: "key",
        path: options.key.clone(),
        source: Some(source),
    })?;

    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let builder = match (&options.client_ca, &files.client_ca) {
        (Some(path), Some(bytes)) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(bytes, "client ca", path)? {
                roots.add(ca).map_err(TlsError::Config)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(TlsError::Verifier)?;
            let verifier = match &options.client_san {
                Some(san) => Arc::new(SanVerifier::new(verifier, san)?),
                None => verifier,
            };
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(TlsError::Config)?;
    // gRPC is HTTP/2 only.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(
    bytes: &[u8],
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what,
            path: path.to_path_buf(),
            source: Some(source),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_path_buf(),
            source: None,
        });
    }
    Ok(certs)
}

/// The WebPKI client verifier, plus: the end-entity certificate must be
/// valid for one DNS name (`GRPC_CLIENT_TLS_SAN`).
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: ServerName<'static>,
}

impl SanVerifier {
    fn new(inner: Arc<dyn ClientCertVerifier>, san: &str) -> Result<Self, TlsError> {
        let san = ServerName::try_from(san.to_owned()).map_err(|_| TlsError::San {
            san: san.to_owned(),
        })?;
        Ok(Self { inner, san })
    }
}

impl ClientCertVerifier for SanVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        cert.verify_is_valid_for_subject_name(&self.san)
            .map_err(|_| {
                rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
            })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The configuration in force, swapped when the files change.
pub(crate) type SharedConfig = Arc<ArcSwap<ServerConfig>>;

/// A stream of TLS connections for tonic, fed by an accept loop that runs
/// until `stop` is cancelled. Handshakes run concurrently (one slow client
/// never blocks the others) and are bounded by [`HANDSHAKE_TIMEOUT`]; the
/// loop owns them and drops them when it ends.
pub(crate) fn incoming(
    listener: TcpListener,
    config: SharedConfig,
    stop: CancellationToken,
) -> (
    ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>>,
    impl Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = mpsc::channel(ACCEPTED_QUEUE);
    let accept_loop = async move {
        let mut handshakes = JoinSet::new();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        if let Err(err) = tcp.set_nodelay(true) {
                            debug!(error = &err as &dyn std::error::Error, "cannot set TCP_NODELAY");
                        }
                        let acceptor = tokio_rustls::TlsAcceptor::from(config.load_full());
                        handshakes.spawn(async move {
                            (peer, tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await)
                        });
                    }
                    Err(err) => {
                        warn!(error = &err as &dyn std::error::Error, "cannot accept grpc connection");
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        }
                    }
                },
                Some(done) = handshakes.join_next() => match done {
                    Ok((_, Ok(Ok(stream)))) => {
                        if tx.send(Ok(stream)).await.is_err() {
                            break; // the server stopped taking connections
                        }
                    }
                    Ok((peer, Ok(Err(err)))) => {
                        debug!(error = &err as &dyn std::error::Error, net.peer = %peer, "tls handshake failed");
                    }
                    Ok((peer, Err(_))) => debug!(net.peer = %peer, "tls handshake timed out"),
                    Err(err) => error!(error = &err as &dyn std::error::Error, "tls handshake task failed"),
                },
            }
        }
    };
    (ReceiverStream::new(rx), accept_loop)
}

/// Re-reads the PEM files every [`TLS_POLL_INTERVAL`] until `stop`, and
/// stores a new configuration when their contents changed and build. A bad
/// or unreadable file keeps the previous configuration serving and is logged
/// at `error` once per distinct state.
pub(crate) async fn watch(
    options: TlsOptions,
    config: SharedConfig,
    loaded_digest: u64,
    stop: CancellationToken,
) {
    // `None`: the files could not be read at the last check.
    let mut last = Some(loaded_digest);
    let mut tick = tokio::time::interval(TLS_POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let opts = options.clone();
        let checked = tokio::task::spawn_blocking(move || match Files::read(&opts) {
            Err(err) => (None, Err(err)),
            Ok(files) => {
                let digest = files.digest();
                let built = if Some(digest) == last {
                    Ok(None)
                } else {
                    build(&opts, &files).map(Some)
                };
                (Some(digest), built)
            }
        })
        .await;
        let (seen, built) = match checked {
            Ok(checked) => checked,
            Err(err) => {
                error!(
                    error = &err as &dyn std::error::Error,
                    "tls watcher stopped"
                );
                break;
            }
        };
        let changed = seen != last;
        last = seen;
        match built {
            Ok(None) => {}
            Ok(Some(new_config)) => {
                config.store(new_config);
                info!("tls certificates reloaded");
            }
            Err(err) if changed => error!(
                error = &err as &dyn std::error::Error,
                "cannot reload tls certificates; keeping the previous ones"
            ),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn pair(name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn options(dir: &Path, cert: &str, key: &str, ca: Option<&str>) -> TlsOptions {
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
        let client_ca = ca.map(|ca| {
            std::fs::write(dir.join("ca.crt"), ca).unwrap();
            dir.join("ca.crt")
        });
        TlsOptions {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca,
            client_san: None,
        }
    }

    #[test]
    fn builds_with_h2_alpn() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("localhost");
        let (config, _) = load(&options(dir.path(), &cert, &key, None)).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn key_of_another_certificate_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = pair("localhost");
        let (_, other_key) = pair("localhost");
        let err = load(&options(dir.path(), &cert, &other_key, None)).unwrap_err();
        assert!(matches!(err, TlsError::Config(_)), "{err:?}");
    }

    #[test]
    fn files_without_pem_items_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("localhost");
        let err = load(&options(dir.path(), "not pem", &key, None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "tls certificate file {} holds no valid PEM certificate",
                dir.path().join("tls.crt").display()
            )
        );
        let err = load(&options(dir.path(), &cert, &key, Some(""))).unwrap_err();
        assert!(err.to_string().starts_with("tls client ca file"), "{err}");
        let err = load(&TlsOptions {
            cert: dir.path().join("missing.crt"),
            ..options(dir.path(), &cert, &key, None)
        })
        .unwrap_err();
        assert!(matches!(
            err,
            TlsError::Read {
                what: "certificate",
                ..
            }
        ));
    }

    #[test]
    fn client_san_must_be_a_dns_name() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("localhost");
        let (ca, _) = pair("ca");
        let err = load(&TlsOptions {
            client_san: Some("not a name!".to_owned()),
            ..options(dir.path(), &cert, &key, Some(&ca))
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "client certificate SAN 'not a name!' is not a valid DNS name"
        );
    }
}
