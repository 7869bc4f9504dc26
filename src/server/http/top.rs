//! `GET /top`: the hottest and most-limited descriptors of a domain, and
//! `GET /`: the live page that shows them with the rules in force, the
//! request rate, the share over limit and the store's health.

use super::AppState;
use crate::config::Redactor;
use crate::insight::top::TOP_K;
use crate::insight::{By, TopItem, Window};
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde::Serialize;

/// The page: one self-contained HTML file (inline style and script, no
/// external resource), refreshed every second from `/top` and `/metrics`.
pub(crate) const PAGE: &str = include_str!("../page.html");

/// Items a `/top` answer lists when `n` is not given.
const DEFAULT_N: usize = 10;

#[derive(Debug, Serialize)]
struct JsonTop<'a> {
    domain: &'a str,
    by: &'static str,
    window: &'static str,
    items: Vec<JsonItem>,
}

#[derive(Debug, Serialize)]
struct JsonItem {
    entries: Vec<JsonEntry>,
    count: u64,
    error: u64,
}

#[derive(Debug, Serialize)]
struct JsonEntry {
    key: String,
    value: String,
}

#[derive(Debug, Serialize)]
struct JsonDomains {
    domains: Vec<String>,
}

impl JsonItem {
    /// `item` as the view shows it: secret values (`keys` are the domain's
    /// secret keys) as their tags.
    fn shown(item: TopItem, redactor: &Redactor, keys: &[Box<str>]) -> Self {
        Self {
            entries: item
                .entries
                .into_iter()
                .map(|(key, value)| {
                    let value = redactor.show(keys, &key, &value).into_owned();
                    JsonEntry { key, value }
                })
                .collect(),
            count: item.count,
            error: item.error,
        }
    }
}

/// What `/top` was asked.
#[derive(Debug, PartialEq, Eq)]
struct TopQuery {
    domain: Option<String>,
    by: By,
    window: Window,
    n: usize,
}

/// Reads `domain`, `by` (`hits` | `over_limit`, default `hits`), `window`
/// (`1m` | `1h`, default `1m`) and `n` (1..=[`TOP_K`], default 10).
fn parse_query(query: &str) -> Result<TopQuery, String> {
    let mut parsed = TopQuery {
        domain: None,
        by: By::Hits,
        window: Window::Minute,
        n: DEFAULT_N,
    };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*name {
            "domain" => parsed.domain = Some(value.into_owned()),
            "by" => {
                parsed.by = By::parse(&value)
                    .ok_or_else(|| format!("by must be hits or over_limit, not '{value}'"))?;
            }
            "window" => {
                parsed.window = Window::parse(&value)
                    .ok_or_else(|| format!("window must be 1m or 1h, not '{value}'"))?;
            }
            "n" => {
                parsed.n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=TOP_K).contains(n))
                    .ok_or_else(|| {
                        format!("n must be a number from 1 to {TOP_K}, not '{value}'")
                    })?;
            }
            other => return Err(format!("unknown parameter '{other}'")),
        }
    }
    Ok(parsed)
}

fn json_answer(status: StatusCode, body: &impl Serialize) -> HttpResponse {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(err) => {
            tracing::error!(
                error = &err as &dyn std::error::Error,
                "cannot encode top list"
            );
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// `GET /top?domain=D&by=hits|over_limit&window=1m|1h&n=N`: the domain's
/// top list, heaviest first. Without `domain`: `{"domains": [...]}`, the
/// domains a rule file declares. 400 for a bad parameter, 404 for a domain
/// no rule file declares.
pub(super) async fn top(State(state): State<AppState>, RawQuery(query): RawQuery) -> HttpResponse {
    let query = match parse_query(query.as_deref().unwrap_or_default()) {
        Ok(query) => query,
        Err(reason) => return super::bad_request(&reason),
    };
    let limiter = &state.limiter;
    let Some(domain) = query.domain else {
        let domains = limiter
            .rules()
            .load()
            .summaries()
            .into_iter()
            .map(|s| s.domain)
            .collect();
        return json_answer(StatusCode::OK, &JsonDomains { domains });
    };
    if !limiter.rules().load().has_domain(&domain) {
        return (
            StatusCode::NOT_FOUND,
            format!("no rule file declares domain '{domain}'\n"),
        )
            .into_response();
    }
    let index = limiter.rules().load();
    let keys = index.secret_keys(&domain);
    let items = limiter
        .top()
        .top(
            &domain,
            query.by,
            query.window,
            query.n,
            limiter.clock().now(),
        )
        .into_iter()
        .map(|item| JsonItem::shown(item, limiter.redactor(), keys))
        .collect();
    json_answer(
        StatusCode::OK,
        &JsonTop {
            domain: &domain,
            by: query.by.as_str(),
            window: query.window.as_str(),
            items,
        },
    )
}

/// `GET /`: the live page.
pub(super) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Only this origin: the page loads nothing from elsewhere.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; connect-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:",
            ),
        ],
        PAGE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_defaults_and_errors() {
        assert_eq!(
            parse_query("domain=edge").unwrap(),
            TopQuery {
                domain: Some("edge".into()),
                by: By::Hits,
                window: Window::Minute,
                n: DEFAULT_N
            }
        );
        let q = parse_query("domain=a%20b&by=over_limit&window=1h&n=3").unwrap();
        assert_eq!(
            (q.domain.as_deref(), q.by, q.window, q.n),
            (Some("a b"), By::OverLimit, Window::Hour, 3)
        );
        assert!(
            parse_query("by=most")
                .unwrap_err()
                .contains("hits or over_limit")
        );
        assert!(parse_query("window=1d").unwrap_err().contains("1m or 1h"));
        assert!(parse_query("n=0").is_err() && parse_query("n=65").is_err());
        assert!(
            parse_query("domian=x")
                .unwrap_err()
                .contains("unknown parameter")
        );
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for needle in ["http://", "https://", "//cdn", "src=\"/"] {
            assert!(!PAGE.contains(needle), "page contains {needle}");
        }
        assert!(PAGE.contains("/top") && PAGE.contains("/metrics"));
    }
}
