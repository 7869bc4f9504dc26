//! The access layer: the one place in front of every operator view
//! (`POST /explain`, `GET /top`, `GET /history`, `GET /`, `GET /rlqs`) and
//! the limit-table API (`/v1/`). A client in `ADMIN_TRUSTED_NETWORKS`
//! passes; any other must present a bearer token from `ADMIN_TOKENS_FILE`.
//! Every call let through carries a [`Caller`]: who it is, and whether it
//! may change tables (a trusted network, or a token with the `write`
//! scope). Probes, `/json`, `/metrics` and
//! `/rlconfig` never reach it (the reference's contract). Knows the peer
//! address (axum `ConnectInfo`) and the tokens, nothing of the views.

mod tokens;

use crate::metrics::{AdminResult, Metrics, View};
use arc_swap::ArcSwap;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
pub use tokens::{LineProblem, TokensError};
use tokens::{Scope, Tokens, User};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// How often the tokens file is read for changes: a removed token is
/// refused within this, well inside the 2 s operators are promised.
const TOKENS_POLL: Duration = Duration::from_millis(500);

/// Who may use the operator views.
#[derive(Debug, Clone)]
pub struct AccessOptions {
    /// Clients in these networks need no token.
    pub trusted_networks: Vec<IpNet>,
    /// `NAME:TOKEN` lines; without it only trusted networks are let in.
    pub tokens_file: Option<PathBuf>,
}

impl Default for AccessOptions {
    /// Loopback only (an operator's `kubectl port-forward` arrives there).
    fn default() -> Self {
        Self {
            trusted_networks: DEFAULT_TRUSTED
                .iter()
                .filter_map(|net| net.parse().ok())
                .collect(),
            tokens_file: None,
        }
    }
}

/// The default trusted networks.
const DEFAULT_TRUSTED: [&str; 2] = ["127.0.0.0/8", "::1/128"];

/// The access layer's state, shared by every view call.
#[derive(Debug)]
pub(crate) struct Access {
    trusted: Vec<IpNet>,
    file: Option<TokensFile>,
    metrics: Arc<Metrics>,
    /// Answered with a 401 for the page itself: it holds no data, and its
    /// script asks for the token and sends it on its own requests.
    page: &'static str,
}

#[derive(Debug)]
struct TokensFile {
    path: PathBuf,
    tokens: ArcSwap<Tokens>,
}

/// What the layer decided for one call.
enum Verdict {
    /// In a trusted network (`true`) or holding a valid token; the user if
    /// a valid token came.
    Pass(Option<User>, bool),
    /// No token, or not a valid one.
    Unauthenticated,
    /// Outside the trusted networks, and no tokens file to check against.
    Forbidden,
}

impl Access {
    /// Reads the tokens file, if any, and returns the layer with the bytes
    /// read (for [`Access::watch`]).
    ///
    /// # Errors
    ///
    /// [`TokensError`]: the file cannot be read, or a line is bad.
    pub(crate) fn new(
        options: &AccessOptions,
        metrics: Arc<Metrics>,
        page: &'static str,
    ) -> Result<(Self, Vec<u8>), TokensError> {
        let (file, bytes) = match &options.tokens_file {
            Some(path) => {
                let (tokens, bytes) = tokens::read(path)?;
                info!(admin.tokens_file = %path.display(), admin.tokens = tokens.len(), "admin tokens loaded");
                let file = TokensFile {
                    path: path.clone(),
                    tokens: ArcSwap::from_pointee(tokens),
                };
                (Some(file), bytes)
            }
            None => (None, Vec::new()),
        };
        let access = Self {
            trusted: options.trusted_networks.clone(),
            file,
            metrics,
            page,
        };
        Ok((access, bytes))
    }

    fn verdict(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Verdict {
        let user = bearer(headers).and_then(|presented| {
            self.file
                .as_ref()
                .and_then(|file| file.tokens.load().user(presented))
        });
        let trusted = peer.is_some_and(|ip| {
            let ip = ip.to_canonical();
            self.trusted.iter().any(|net| net.contains(&ip))
        });
        match (trusted, user, &self.file) {
            (true, user, _) => Verdict::Pass(user, true),
            (false, Some(user), _) => Verdict::Pass(Some(user), false),
            (false, None, Some(_)) => Verdict::Unauthenticated,
            (false, None, None) => Verdict::Forbidden,
        }
    }

    /// Reads the tokens file every [`TOKENS_POLL`] until `shutdown`; a
    /// changed file replaces the tokens, a bad one keeps the previous ones
    /// (logged at ERROR, naming the file and line).
    pub(crate) async fn watch(self: Arc<Self>, mut last: Vec<u8>, shutdown: CancellationToken) {
        let Some(file) = &self.file else { return };
        let mut tick = tokio::time::interval(TOKENS_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // An unreadable file is logged once, not on every poll.
        let mut unreadable = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let path = file.path.clone();
            let Ok(read) = tokio::task::spawn_blocking(move || std::fs::read(path)).await else {
                continue;
            };
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(source) => {
                    if !unreadable {
                        let err = TokensError::Read {
                            path: file.path.clone(),
                            source,
                        };
                        error!(
                            error = &err as &dyn std::error::Error,
                            "admin tokens file unreadable; the previous tokens stay in force"
                        );
                    }
                    unreadable = true;
                    continue;
                }
            };
            unreadable = false;
            if bytes == last {
                continue;
            }
            match tokens::parse_file(&file.path, &bytes) {
                Ok(tokens) => {
                    info!(admin.tokens_file = %file.path.display(), admin.tokens = tokens.len(), "admin tokens reloaded");
                    file.tokens.store(Arc::new(tokens));
                }
                Err(err) => error!(
                    error = &err as &dyn std::error::Error,
                    "admin tokens file rejected; the previous tokens stay in force"
                ),
            }
            last = bytes;
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value.get(7..))
        .flatten()
        .map(<[u8]>::trim_ascii)
}

/// Who a call let through is, as the access layer decided: put in the
/// request's extensions for the handlers that record or check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The token's name, else `trusted:<address>`: the audit trail's `who`.
    pub(crate) who: String,
    /// Whether it may change tables: a trusted network, or a `write` token.
    pub(crate) may_write: bool,
}

impl Caller {
    /// The caller a pass with `user` from `peer` (trusted when `trusted`).
    fn of(user: Option<&User>, peer: Option<IpAddr>, trusted: bool) -> Self {
        let who = match (user, peer) {
            (Some(user), _) => user.name.to_string(),
            (None, Some(ip)) => format!("trusted:{}", ip.to_canonical()),
            (None, None) => "trusted:".to_owned(),
        };
        let may_write = trusted || user.is_some_and(|user| user.scope == Scope::Write);
        Self { who, may_write }
    }
}

/// The view a path names (the layer sits only on the views' routes).
fn view_of(path: &str) -> View {
    match path {
        "/explain" => View::Explain,
        "/top" => View::Top,
        "/history" => View::History,
        "/rlqs" => View::Rlqs,
        _ if path.starts_with("/v1/") => View::Tables,
        _ => View::Page,
    }
}

/// The middleware: lets the call through, or refuses it with 401 (no or
/// wrong token) or 403 (outside the trusted networks, no tokens file);
/// counts and logs every call with the token's name, never the token.
pub(crate) async fn guard(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let view = view_of(request.uri().path());
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let (result, user, response) = match access.verdict(peer, request.headers()) {
        Verdict::Pass(user, trusted) => {
            let mut request = request;
            let caller = Caller::of(user.as_ref(), peer, trusted);
            request.extensions_mut().insert(caller);
            (AdminResult::Ok, user, next.run(request).await)
        }
        Verdict::Unauthenticated => (
            AdminResult::Unauthenticated,
            None,
            access.unauthenticated(view),
        ),
        Verdict::Forbidden => (AdminResult::Forbidden, None, forbidden()),
    };
    access.metrics.admin.record(view, result);
    info!(
        admin.user = %user.as_ref().map_or("", |u| &*u.name),
        admin.view = view.as_str(),
        admin.result = result.as_str(),
        admin.peer = %peer.map_or_else(String::new, |ip| ip.to_string()),
        http.status = response.status().as_u16(),
        "operator view"
    );
    response
}

impl Access {
    /// 401 with `WWW-Authenticate: Bearer`; for the page, the page itself
    /// (no data in it), whose script asks for the token.
    fn unauthenticated(&self, view: View) -> Response {
        let challenge = [(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"floodgate\""),
        )];
        if view == View::Page {
            return (
                StatusCode::UNAUTHORIZED,
                challenge,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                self.page,
            )
                .into_response();
        }
        (
            StatusCode::UNAUTHORIZED,
            challenge,
            "operator views need a token: send Authorization: Bearer TOKEN\n",
        )
            .into_response()
    }
}

fn forbidden() -> Response {
    (
        StatusCode::FORBIDDEN,
        "operator views are open to clients in ADMIN_TRUSTED_NETWORKS, and to others \
         with a token from ADMIN_TOKENS_FILE, which is not set\n",
    )
        .into_response()
}
