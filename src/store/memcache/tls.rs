//! TLS to memcached (`MEMCACHE_TLS` and its certificates): the client
//! configuration, built once when the store is made.

use super::{MemcacheTls, StoreError};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::Path;
use std::sync::Arc;

/// The client configuration `tls` describes, its files read.
///
/// # Errors
///
/// [`StoreError::TlsFile`] when a file cannot be read or holds no usable
/// certificate or key; [`StoreError::Config`] when rustls refuses them.
pub(super) fn client_config(tls: &MemcacheTls) -> Result<Arc<ClientConfig>, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &tls.ca_cert {
        Some(path) => {
            for cert in certificates(path)? {
                roots
                    .add(cert)
                    .map_err(|_| bad_file(path, "not a CA certificate"))?;
            }
        }
        // As the reference: without a CA file, the system's roots.
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|_| config("no TLS version available"))?;
    let builder = if tls.skip_hostname_verification {
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|_| config("no usable CA certificate for memcached"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName { inner }))
    } else {
        builder.with_root_certificates(roots)
    };
    let config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|_| bad_file(key, "no private key"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|_| config("the memcached client certificate and key do not match"))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The name the server's certificate is checked against: the host of
/// `host:port` (an IP address as such).
pub(super) fn server_name(host: &str) -> Result<ServerName<'static>, StoreError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host);
    ServerName::try_from(host.to_owned())
        .map_err(|_| config("a memcached host is not a valid TLS server name"))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let read = std::fs::read(path).map_err(|source| StoreError::TlsFile {
        path: path.to_owned(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&read)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(bad_file(path, "no PEM certificate"));
    }
    Ok(certs)
}

fn bad_file(path: &Path, what: &str) -> StoreError {
    StoreError::TlsFile {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()),
    }
}

const fn config(reason: &'static str) -> StoreError {
    StoreError::Config { reason }
}

/// `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`: the chain is verified as
/// always; only a certificate issued for another name is accepted.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
