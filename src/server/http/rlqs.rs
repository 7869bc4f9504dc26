//! `GET /rlqs?domain=D&bucket=k1=v1,k2=v2`: how floodgate splits one RLQS
//! bucket now, as JSON: the matched rule (or the blanket answer and why),
//! and per reporting Envoy its measured demand, its share and the token
//! bucket that share gives. Reads the rules and the demand registry; counts
//! nothing.

use crate::rlqs::state::bucket_key;
use crate::rlqs::{RlqsOptions, Sources};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

#[derive(Debug, Clone)]
struct ViewState {
    sources: Sources,
    options: RlqsOptions,
}

/// The router of `GET /rlqs`, merged into the HTTP router.
pub(crate) fn router(sources: Sources, options: RlqsOptions) -> Router {
    Router::new()
        .route("/rlqs", get(view))
        .with_state(ViewState { sources, options })
}

fn bad_request(reason: &str) -> Response {
    (StatusCode::BAD_REQUEST, format!("bad request: {reason}\n")).into_response()
}

/// The `domain` and the `bucket` pairs (`k1=v1,k2=v2`) of the query.
/// A domain and the pairs of a bucket id.
type Query = (String, Vec<(String, String)>);

fn query(uri: &Uri) -> Result<Query, &'static str> {
    let mut domain = None;
    let mut bucket = None;
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match &*name {
            "domain" => domain = Some(value.into_owned()),
            "bucket" => bucket = Some(value.into_owned()),
            _ => {}
        }
    }
    let domain = domain.filter(|d| !d.is_empty()).ok_or("missing domain")?;
    let bucket = bucket.ok_or("missing bucket (k1=v1,k2=v2)")?;
    let pairs = bucket
        .split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or("bucket pairs are key=value, separated by commas")
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((domain, pairs))
}

async fn view(State(state): State<ViewState>, uri: Uri) -> Response {
    let (domain, pairs) = match query(&uri) {
        Ok(parsed) => parsed,
        Err(reason) => return bad_request(reason),
    };
    if domain.len() > state.options.bounds.max_domain_bytes {
        return bad_request("domain is too long");
    }
    let key = match bucket_key(pairs.into_iter(), &state.options.bounds) {
        Ok(key) => key,
        Err(err) => return bad_request(&err.to_string()),
    };
    match crate::rlqs::explain(&state.sources, &state.options, &domain, &key).await {
        Ok(view) => match serde_json::to_vec(&view) {
            Ok(body) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response(),
            Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        },
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "rate limit store unavailable\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_domain_and_bucket_pairs() {
        let uri: Uri = "/rlqs?domain=edge&bucket=user%3Dal%20ice,plan=free"
            .parse()
            .unwrap();
        assert_eq!(
            query(&uri),
            Ok((
                "edge".to_owned(),
                vec![
                    ("user".to_owned(), "al ice".to_owned()),
                    ("plan".to_owned(), "free".to_owned())
                ]
            ))
        );
        let uri: Uri = "/rlqs?bucket=a=b".parse().unwrap();
        assert_eq!(query(&uri), Err("missing domain"));
        let uri: Uri = "/rlqs?domain=d&bucket=ab".parse().unwrap();
        assert!(query(&uri).is_err());
    }
}
