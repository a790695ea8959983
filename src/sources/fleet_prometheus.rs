//! Reads the fleet's findings from Prometheus's HTTP API (`GET /api/v1/query`), for
//! clusters where the agents' metrics already flow there: no API server request and
//! no pod proxy, only network access to Prometheus.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::decode::prometheus::parse_vector;
use crate::heart::views::fleet::prometheus::{PromAnswers, Sample};

/// Where Prometheus is, and which scrape job is the agents'.
#[derive(Debug, Clone)]
pub struct PromQuery {
    /// `http(s)://host:port[/prefix]`.
    pub url: String,
    /// The `job` label of the agents' targets.
    pub job: String,
    /// How long each query may take.
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error("cannot start the HTTP client: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("--prometheus {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("cannot load the system's CA certificates: {0}")]
    Roots(#[source] std::io::Error),
    #[error("Prometheus at {url}: {query}: {why}")]
    Query { url: String, query: String, why: String },
}

/// The series the view needs, each in one instant query.
pub fn query_prometheus(query: &PromQuery) -> Result<PromAnswers, PromError> {
    let base = query.url.trim_end_matches('/').to_string();
    let uri_of = |promql: &str| -> Result<http::Uri, PromError> {
        format!("{base}/api/v1/query?query={}", percent_encode(promql))
            .parse()
            .map_err(|e: http::uri::InvalidUri| PromError::Url {
                url: query.url.clone(),
                why: e.to_string(),
            })
    };
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(PromError::Url {
            url: query.url.clone(),
            why: "expected an http:// or https:// URL".into(),
        });
    }
    let job = query.job.replace('\\', "\\\\").replace('"', "\\\"");
    let selector = format!("{{job=\"{job}\"}}");
    let promql = |metric: &str| format!("{metric}{selector}");
    let queries = [
        promql("up"),
        promql("portdrift_coverage_complete"),
        promql("portdrift_findings_by_severity"),
        promql("portdrift_finding"),
        promql("portdrift_findings_not_detailed"),
    ];
    let uris = queries.iter().map(|q| uri_of(q)).collect::<Result<Vec<_>, _>>()?;
    crate::sources::block_on(async {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(PromError::Roots)?
            .https_or_http()
            .enable_http1()
            .build();
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
        let asked = uris.into_iter().zip(&queries).map(|(uri, promql)| {
            let client = client.clone();
            async move {
                let failed = |why: String| PromError::Query {
                    url: query.url.clone(),
                    query: promql.clone(),
                    why,
                };
                let fetch = async {
                    let answer = client.get(uri).await.map_err(|e| describe(&e))?;
                    let code = answer.status();
                    let body = answer
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| e.to_string())?
                        .to_bytes();
                    // Prometheus answers bad queries with 400/422 and a JSON error:
                    // parse_vector words those.
                    if !code.is_success() && !matches!(code.as_u16(), 400 | 422 | 503) {
                        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                        return Err(format!("HTTP {code}: {text}"));
                    }
                    parse_vector(&body).map_err(|e| e.to_string())
                };
                match tokio::time::timeout(query.timeout, fetch).await {
                    Err(_) => Err(failed(format!("no answer within {:?}", query.timeout))),
                    Ok(Err(why)) => Err(failed(why)),
                    Ok(Ok(samples)) => Ok(samples),
                }
            }
        });
        let mut results: Vec<Vec<Sample>> = Vec::with_capacity(queries.len());
        for result in futures::future::join_all(asked).await {
            results.push(result?);
        }
        let mut results = results.into_iter();
        let mut next = || results.next().unwrap_or_default();
        Ok(PromAnswers {
            up: next(),
            coverage_complete: next(),
            by_severity: next(),
            details: next(),
            not_detailed: next(),
        })
    })
    .map_err(PromError::Runtime)?
}

/// A client error with its causes (hyper's own text is only "client error (Connect)").
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Percent-encodes a query parameter's value (everything but RFC 3986's unreserved).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
