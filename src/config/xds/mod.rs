//! Rules over xDS: floodgate as a state-of-the-world client of an
//! Aggregated Discovery Service (`CONFIG_TYPE=GRPC_XDS_SOTW`), the way
//! Envoy Gateway feeds the reference service its rules.
//!
//! Owns: the ADS stream (`client`), the reconnect waits (`backoff`), and
//! the conversion of `RateLimitConfig` resources into the rule model
//! (`convert`). Must not touch: counters, stores, or anything per request.
//! The xDS wire types live in the crate's one generated module, `crate::proto`.
//!
//! Each response is the whole rule set: its resources (one per domain, or
//! several per domain with `MERGE_DOMAIN_CONFIG`) are validated exactly as
//! rule files are, then either stored with one atomic swap (the same swap
//! the file watcher makes, so counters of unchanged limits live on) and
//! ACKed, or NACKed with every problem while the last good rules keep
//! serving. Both outcomes are counted like file reloads
//! (`config_load_success`, `config_load_error`).

mod backoff;
mod client;
mod convert;

pub use backoff::Backoff;
pub use client::{RuleFeed, XdsClient, XdsError};
pub use convert::RATE_LIMIT_CONFIG_TYPE;

use std::path::PathBuf;
use std::time::Duration;

/// Management server used when none is set (`CONFIG_GRPC_XDS_SERVER_URL`).
pub(crate) const DEFAULT_SERVER_URL: &str = "localhost:18000";
/// Node id used when none is set (`CONFIG_GRPC_XDS_NODE_ID`).
pub(crate) const DEFAULT_NODE_ID: &str = "default";
/// Largest response accepted by default: gRPC's default receive limit.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
/// Wait between two failed connection attempts by default
/// (`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`).
pub(crate) const DEFAULT_CONNECT_RETRY_INTERVAL: Duration = Duration::from_secs(3);

/// How to reach the management server and who to say we are.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsOptions {
    /// `host:port` of the ADS server.
    pub server_url: String,
    /// Node id sent in every request.
    pub node_id: String,
    /// Node metadata, sent as string values.
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent when opening the stream.
    pub additional_headers: Vec<(String, String)>,
    /// TLS to the server; `None` is plaintext.
    pub tls: Option<XdsTls>,
    /// Largest response message accepted; a larger one breaks the stream
    /// (the last good rules keep serving) and the client reconnects.
    pub max_message_bytes: usize,
    /// Wait before reopening a broken stream.
    pub backoff: Backoff,
    /// Wait (± 50 % at random) between failed connection attempts.
    pub connect_retry_interval: Duration,
}

impl Default for XdsOptions {
    fn default() -> Self {
        Self {
            server_url: DEFAULT_SERVER_URL.to_owned(),
            node_id: DEFAULT_NODE_ID.to_owned(),
            node_metadata: Vec::new(),
            additional_headers: Vec::new(),
            tls: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            backoff: Backoff::default(),
            connect_retry_interval: DEFAULT_CONNECT_RETRY_INTERVAL,
        }
    }
}

/// TLS to the management server. The files are read at start (a bad one
/// stops the start) and again at every connection attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XdsTls {
    /// PEM CA bundle that signed the server's certificate; `None` trusts
    /// the system's roots.
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate (mTLS); with `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Name the server's certificate must be valid for, instead of the
    /// host of the server address.
    pub san: Option<String>,
}
