//! Connection settings of the Redis store: deployment, address forms,
//! TLS, timeouts, pool size, key prefix and expiry jitter.

use super::StoreError;
use redis::{ConnectionInfo, IntoConnectionInfo as _, RedisResult};
use std::path::PathBuf;
use std::time::Duration;

/// How Redis is deployed (`REDIS_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    /// One server (`REDIS_URL` = `host:port`, `redis://…` or a socket path).
    Single,
    /// A master found through Sentinel (`REDIS_URL` = `mastername,host:port,…`).
    Sentinel,
    /// A Redis Cluster (`REDIS_URL` = comma-separated seed nodes).
    Cluster,
}

/// Everything needed to reach Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Deployment kind.
    pub mode: RedisMode,
    /// Address(es), in the reference's `REDIS_URL` forms.
    pub url: String,
    /// `REDIS_AUTH`: `password` or `user:password`.
    pub auth: Option<String>,
    /// `REDIS_SENTINEL_AUTH`: password for the Sentinel nodes themselves.
    pub sentinel_auth: Option<String>,
    /// Multiplexed connections to open (standalone and Sentinel).
    pub pool_size: usize,
    /// Deadline of one request's round trip.
    pub timeout: Duration,
    /// Deadline of one connection attempt.
    pub connect_timeout: Duration,
    /// `CACHE_KEY_PREFIX`, prepended to every key.
    pub key_prefix: String,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: random extra expiry of a fixed
    /// window's key in `[0, N)`, and below the window's length, so keys of
    /// one window do not all expire in the same instant.
    pub expiration_jitter_max_secs: u64,
    /// `REDIS_TLS` and its certificates; `None` is plaintext (unless the
    /// URL itself says `rediss://`).
    pub tls: Option<RedisTls>,
    /// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR` (default on): a
    /// connection that answers READONLY (a master demoted behind a DNS name
    /// or a Service) is dropped and dialled afresh. LOADING, MASTERDOWN and
    /// dropped connections are dialled afresh either way.
    pub redial_on_readonly: bool,
    /// The first connection's retry waits: from the first to the longest,
    /// doubling (`REDIS_STARTUP_INITIAL_INTERVAL`,
    /// `REDIS_STARTUP_MAX_INTERVAL`).
    pub startup_backoff: (Duration, Duration),
}

/// TLS to Redis (`REDIS_TLS`, `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`,
/// `REDIS_TLS_CLIENT_KEY`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM CA bundle to trust instead of the system's roots.
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate, for Redis servers that require one.
    pub client_cert: Option<PathBuf>,
    /// PEM key of the client certificate.
    pub client_key: Option<PathBuf>,
    /// Accept a certificate valid for another host name (e.g. managed Redis
    /// reached by IP). The chain is still verified.
    pub skip_hostname_verification: bool,
}

impl RedisTls {
    /// The certificates to hand the Redis client, read from their files.
    pub(super) fn certificates(&self) -> Result<redis::TlsCertificates, StoreError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| StoreError::TlsFile {
                path: path.clone(),
                source,
            })
        };
        let client_tls = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert: self.ca_cert.as_ref().map(read).transpose()?,
        })
    }
}

impl RedisConfig {
    /// A standalone config for `url` with default timeouts and no prefix.
    pub fn single(url: impl Into<String>) -> Self {
        Self {
            mode: RedisMode::Single,
            url: url.into(),
            auth: None,
            sentinel_auth: None,
            pool_size: 2,
            timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            key_prefix: String::new(),
            expiration_jitter_max_secs: 0,
            tls: None,
            redial_on_readonly: true,
            startup_backoff: (Duration::from_millis(100), Duration::from_secs(5)),
        }
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

/// Replaces the password of every `scheme://user:password@host` in `url`.
pub(super) fn redact(url: &str) -> String {
    url.split(',')
        .map(|part| match (part.find("://"), part.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                let userinfo = &part[scheme_end + 3..at];
                let user = userinfo.split(':').next().unwrap_or_default();
                format!("{}{user}:***{}", &part[..scheme_end + 3], &part[at..])
            }
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses one address in the reference's forms: `host:port`, a URL
/// (`redis://`, `rediss://`, `unix://`), or a unix socket path. With `tls`,
/// a bare `host:port` is reached over TLS.
pub(super) fn connection_info(
    addr: &str,
    auth: Option<&str>,
    tls: Option<&RedisTls>,
) -> RedisResult<ConnectionInfo> {
    let addr = addr.trim();
    let info = if addr.contains("://") {
        addr.into_connection_info()?
    } else if addr.starts_with('/') {
        format!("unix://{addr}").into_connection_info()?
    } else {
        match tls {
            Some(tls) if tls.skip_hostname_verification => format!("rediss://{addr}/#insecure"),
            Some(_) => format!("rediss://{addr}"),
            None => format!("redis://{addr}"),
        }
        .into_connection_info()?
    };
    Ok(match auth.filter(|a| !a.is_empty()) {
        None => info,
        Some(auth) => {
            let mut settings = info.redis_settings().clone();
            settings = match auth.split_once(':') {
                Some((user, password)) => settings.set_username(user).set_password(password),
                None => settings.set_password(auth),
            };
            info.set_redis_settings(settings)
        }
    })
}
