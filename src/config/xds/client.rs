//! The ADS state-of-the-world stream: connect, subscribe to
//! `RateLimitConfig`, apply or reject each response and say which (ACK /
//! NACK), and reconnect with backoff when the stream breaks. Rules in force
//! keep serving through every failure here.

use super::backoff::random_unit;
use super::convert::{RATE_LIMIT_CONFIG_TYPE, index_of};
use super::{XdsOptions, XdsTls};
use crate::config::index::Index;
use crate::config::validation::LoadOptions;
use crate::metrics::ReloadStats;
use crate::proto::envoy::config::core::v3::{Node, node::UserAgentVersionType};
use crate::proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::proto::google::rpc::Status;
use arc_swap::ArcSwap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tracing::{error, info, warn};

/// Longest wait for one TCP (and TLS) connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings on an idle stream, so a server that vanished without
/// closing the connection is noticed and the client reconnects.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the xDS client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XdsError {
    /// The server address is not `host:port`.
    #[error("invalid xds server address '{url}'")]
    Url {
        /// The address given.
        url: String,
        /// The parser's complaint.
        #[source]
        source: tonic::transport::Error,
    },
    /// A certificate or key file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// A client certificate without its key, or a key without its
    /// certificate.
    #[error("the xds client certificate and key must be given together")]
    HalfIdentity,
    /// The TLS configuration could not be built (bad PEM, say).
    #[error("cannot set up tls to the xds server")]
    Tls(#[source] tonic::transport::Error),
    /// The server could not be reached (retried until it can).
    #[error("cannot connect to the xds server")]
    Connect(#[source] tonic::transport::Error),
    /// An additional header that is not valid gRPC ASCII metadata.
    #[error("invalid xds request header '{name}'")]
    Header {
        /// The header name.
        name: String,
    },
}

/// Rule sets applied by an [`XdsClient`], for whoever must follow them
/// (health, metrics, a start that waits for the first rules). Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct RuleFeed {
    stats: Arc<ReloadStats>,
    applied: watch::Receiver<u64>,
}

impl RuleFeed {
    /// The load counters the client updates.
    pub fn stats(&self) -> &Arc<ReloadStats> {
        &self.stats
    }

    /// How many rule sets have been applied so far.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Waits for the next rule set applied after the last one this feed
    /// has seen; `false` once the client has stopped.
    pub async fn changed(&mut self) -> bool {
        self.applied.changed().await.is_ok()
    }

    /// Waits until at least one rule set has been applied; `false` if the
    /// client stopped before.
    pub async fn first(&mut self) -> bool {
        self.applied.wait_for(|applied| *applied > 0).await.is_ok()
    }
}

/// An ADS client storing every valid rule set it receives into `rules`.
#[derive(Debug)]
pub struct XdsClient {
    options: XdsOptions,
    load: LoadOptions,
    rules: Arc<ArcSwap<Index>>,
    stats: Arc<ReloadStats>,
    node: Node,
    headers: MetadataMap,
    applied: watch::Sender<u64>,
    feed: RuleFeed,
    /// `version_info` of the last response applied, sent back in every
    /// request (empty before the first).
    version: String,
}

/// How one stream ended.
enum Ended {
    /// Shutdown was asked for.
    Shutdown,
    /// The stream broke or could not be opened; `received` tells whether
    /// it delivered a response first (which resets the backoff).
    Broken { received: bool },
}

impl XdsClient {
    /// A client of `options.server_url` storing into `rules` (and counting
    /// into `stats`) rule sets validated with `load`.
    ///
    /// # Errors
    /// [`XdsError`] for a malformed address or header, or TLS files that
    /// cannot be read or parsed: checked now, so a bad setting stops the
    /// start instead of looping on reconnects.
    pub fn new(
        options: XdsOptions,
        load: LoadOptions,
        rules: Arc<ArcSwap<Index>>,
        stats: Arc<ReloadStats>,
    ) -> Result<Self, XdsError> {
        endpoint(&options)?;
        let headers = headers(&options.additional_headers)?;
        let node = node(&options);
        let (applied, receiver) = watch::channel(0);
        let feed = RuleFeed {
            stats: stats.clone(),
            applied: receiver,
        };
        Ok(Self {
            options,
            load,
            rules,
            stats,
            node,
            headers,
            applied,
            feed,
            version: String::new(),
        })
    }

    /// A feed of the rule sets this client applies.
    pub fn feed(&self) -> RuleFeed {
        self.feed.clone()
    }

    /// Connects, subscribes and applies responses until `shutdown` is
    /// cancelled, reconnecting whenever the stream breaks. Never fails:
    /// every failure is logged and retried, and the rules in force keep
    /// serving.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut attempt = 0u32;
        loop {
            let Some(channel) = self.connect(&shutdown).await else {
                return;
            };
            match self.stream(channel, &shutdown).await {
                Ended::Shutdown => return,
                Ended::Broken { received } => {
                    if received {
                        attempt = 0;
                    }
                }
            }
            let wait = self.options.backoff.next(attempt);
            attempt = attempt.saturating_add(1);
            info!(
                xds.server = %self.options.server_url,
                retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "reopening the xds stream after backoff"
            );
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Connects to the server, retrying every connect retry interval (± 50
    /// %); `None` on shutdown.
    async fn connect(&self, shutdown: &CancellationToken) -> Option<Channel> {
        loop {
            let attempt = async {
                endpoint(&self.options)?
                    .connect()
                    .await
                    .map_err(XdsError::Connect)
            };
            let result = tokio::select! {
                () = shutdown.cancelled() => return None,
                result = attempt => result,
            };
            match result {
                Ok(channel) => {
                    info!(xds.server = %self.options.server_url, "connected to the xds server");
                    return Some(channel);
                }
                Err(err) => warn!(
                    error = &err as &dyn std::error::Error,
                    xds.server = %self.options.server_url,
                    "cannot connect to the xds server; retrying"
                ),
            }
            let interval = self.options.connect_retry_interval;
            let wait = Duration::try_from_secs_f64(interval.as_secs_f64() * (0.5 + random_unit()))
                .unwrap_or(interval);
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Opens one ADS stream on `channel` and serves it until it ends.
    async fn stream(&mut self, channel: Channel, shutdown: &CancellationToken) -> Ended {
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.options.max_message_bytes);
        // Bounded: one request is sent per response, after it is handled.
        let (requests, outgoing) = mpsc::channel(4);
        let subscribe = self.request("", None);
        if requests.send(subscribe).await.is_err() {
            return Ended::Broken { received: false };
        }
        let mut call = tonic::Request::new(ReceiverStream::new(outgoing));
        *call.metadata_mut() = self.headers.clone();
        let opened = tokio::select! {
            () = shutdown.cancelled() => return Ended::Shutdown,
            opened = client.stream_aggregated_resources(call) => opened,
        };
        let mut responses = match opened {
            Ok(responses) => responses.into_inner(),
            Err(status) => {
                warn!(grpc.code = ?status.code(), grpc.message = status.message(), "xds server refused the stream");
                return Ended::Broken { received: false };
            }
        };
        let mut received = false;
        loop {
            let message = tokio::select! {
                () = shutdown.cancelled() => return Ended::Shutdown,
                message = responses.message() => message,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => {
                    warn!("xds server closed the stream");
                    return Ended::Broken { received };
                }
                Err(status) => {
                    warn!(grpc.code = ?status.code(), grpc.message = status.message(), "xds stream failed");
                    return Ended::Broken { received };
                }
            };
            received = true;
            if response.type_url != RATE_LIMIT_CONFIG_TYPE {
                // Only this type is subscribed to; anything else is the
                // server's mistake, and not ours to ACK.
                warn!(xds.type_url = %response.type_url, "ignoring an xds response of another type");
                continue;
            }
            let reply = self.apply(response).await;
            if requests.send(reply).await.is_err() {
                return Ended::Broken { received };
            }
        }
    }

    /// Validates `response` off the async workers; stores and ACKs it, or
    /// NACKs it keeping the rules in force. Returns the ACK or NACK.
    async fn apply(&mut self, response: DiscoveryResponse) -> DiscoveryRequest {
        let DiscoveryResponse {
            version_info,
            resources,
            nonce,
            ..
        } = response;
        let load = self.load.clone();
        let checked = tokio::task::spawn_blocking(move || index_of(&resources, &load)).await;
        match checked {
            Ok(Ok(index)) => {
                let domains = index.summaries().len();
                self.rules.store(Arc::new(index));
                self.stats.record_success();
                self.version = version_info;
                self.applied.send_modify(|applied| *applied += 1);
                info!(xds.version = %self.version, xds.nonce = %nonce, domains, "rules from xds applied");
                self.request(&nonce, None)
            }
            Ok(Err(rejection)) => {
                self.stats.record_error();
                let detail = rejection.detail();
                for line in detail.lines() {
                    error!(
                        xds.version = %version_info,
                        xds.nonce = %nonce,
                        config.issue = line,
                        "invalid rules from xds; keeping the last good rules"
                    );
                }
                self.request(&nonce, Some(detail))
            }
            Err(err) => {
                // Validation panicked (a bug): reject, keep serving.
                self.stats.record_error();
                error!(
                    error = &err as &dyn std::error::Error,
                    "xds rule validation failed"
                );
                self.request(
                    &nonce,
                    Some("internal error while validating the rules".to_owned()),
                )
            }
        }
    }

    /// A request carrying the last applied version: the subscription (no
    /// nonce), an ACK (`error` `None`) or a NACK of the response `nonce`.
    fn request(&self, nonce: &str, error: Option<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: self.version.clone(),
            node: Some(self.node.clone()),
            resource_names: Vec::new(),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            response_nonce: nonce.to_owned(),
            error_detail: error.map(|message| Status {
                code: tonic::Code::InvalidArgument as i32,
                message,
                details: Vec::new(),
            }),
        }
    }
}

/// The endpoint of the server, with TLS when asked (files read now).
fn endpoint(options: &XdsOptions) -> Result<Endpoint, XdsError> {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{}", options.server_url))
        .map_err(|source| XdsError::Url {
            url: options.server_url.clone(),
            source,
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    match &options.tls {
        Some(tls) => endpoint.tls_config(tls_config(tls)?).map_err(XdsError::Tls),
        None => Ok(endpoint),
    }
}

fn tls_config(tls: &XdsTls) -> Result<ClientTlsConfig, XdsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| XdsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca_cert {
        Some(path) => config.ca_certificate(Certificate::from_pem(read(path)?)),
        None => config.with_native_roots(),
    };
    config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => config.identity(Identity::from_pem(read(cert)?, read(key)?)),
        (None, None) => config,
        _ => return Err(XdsError::HalfIdentity),
    };
    if let Some(san) = &tls.san {
        config = config.domain_name(san.clone());
    }
    Ok(config)
}

/// The additional headers as gRPC metadata: names lowercased (HTTP/2 and
/// the reference's gRPC library both do), values ASCII.
fn headers(pairs: &[(String, String)]) -> Result<MetadataMap, XdsError> {
    let mut map = MetadataMap::new();
    for (name, value) in pairs {
        let invalid = || XdsError::Header { name: name.clone() };
        let key: AsciiMetadataKey = name.to_ascii_lowercase().parse().map_err(|_| invalid())?;
        let value: AsciiMetadataValue = value.parse().map_err(|_| invalid())?;
        map.append(key, value);
    }
    Ok(map)
}

/// Who floodgate says it is: the node id, its metadata as strings, and
/// floodgate's name and version as the user agent.
fn node(options: &XdsOptions) -> Node {
    let fields = options
        .node_metadata
        .iter()
        .map(|(key, value)| {
            let value = prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(value.clone())),
            };
            (key.clone(), value)
        })
        .collect();
    Node {
        id: options.node_id.clone(),
        cluster: String::new(),
        metadata: Some(prost_types::Struct { fields }),
        user_agent_name: "floodgate".to_owned(),
        user_agent_version_type: Some(UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_carries_id_metadata_and_user_agent() {
        let options = XdsOptions {
            node_id: "envoy-ratelimit".to_owned(),
            node_metadata: vec![("zone".to_owned(), "a".to_owned())],
            ..XdsOptions::default()
        };
        let node = node(&options);
        assert_eq!(node.id, "envoy-ratelimit");
        let zone = &node.metadata.unwrap().fields["zone"];
        assert_eq!(
            zone.kind,
            Some(prost_types::value::Kind::StringValue("a".to_owned()))
        );
        assert_eq!(node.user_agent_name, "floodgate");
    }

    #[test]
    fn headers_are_lowercased_and_checked() {
        let map = headers(&[("X-Tenant".to_owned(), "blue".to_owned())]).unwrap();
        assert_eq!(map.get("x-tenant").unwrap(), "blue");
        let err = headers(&[("bad header".to_owned(), "v".to_owned())]).unwrap_err();
        assert_eq!(err.to_string(), "invalid xds request header 'bad header'");
    }

    #[test]
    fn bad_settings_stop_the_start() {
        let client = |options: XdsOptions| {
            XdsClient::new(
                options,
                LoadOptions::default(),
                Arc::new(ArcSwap::from_pointee(Index::empty())),
                Arc::default(),
            )
        };
        let err = client(XdsOptions {
            server_url: "not a url".to_owned(),
            ..XdsOptions::default()
        })
        .unwrap_err();
        assert!(matches!(err, XdsError::Url { .. }), "{err}");
        let err = client(XdsOptions {
            tls: Some(XdsTls {
                ca_cert: Some(PathBuf::from("/nonexistent/ca.pem")),
                ..XdsTls::default()
            }),
            ..XdsOptions::default()
        })
        .unwrap_err();
        assert!(matches!(err, XdsError::Read { .. }), "{err}");
        let err = client(XdsOptions {
            tls: Some(XdsTls {
                client_cert: Some(PathBuf::from("/nonexistent/cert.pem")),
                ..XdsTls::default()
            }),
            ..XdsOptions::default()
        })
        .unwrap_err();
        assert!(matches!(err, XdsError::HalfIdentity), "{err}");
        assert!(client(XdsOptions::default()).is_ok());
    }
}
