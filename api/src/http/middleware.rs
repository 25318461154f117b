//! The edge of every request: request id, tracing span, body size limit, panic catching, and
//! the one place where any error becomes a problem response.
//!
//! The body limit holds whatever the headers say: a `Content-Length` over it is refused before
//! anything is read, and every body is counted as it streams in (HTTP/2 needs neither
//! `Content-Length` nor `Transfer-Encoding`), so whoever reads it stops at the first byte past
//! the limit and the answer is 413. Nothing is buffered here: a body is read only by the
//! operation that wants it, after its own checks (agent calls after their signature).

use std::{
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use futures::{FutureExt, StreamExt};
use poem::{
    Body, Endpoint, IntoResponse, Middleware, Request, Response, Result, http::HeaderValue,
};
use tracing::Instrument;

use crate::http::error::{ApiError, problem_for_poem_error, problem_response};

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Largest request body the member API accepts (decisions §1: over it is 413).
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Largest raw body a signed agent call may send (its check-in may carry a large inventory,
/// gzip or not); read only once the signature over the request's head is verified.
pub const AGENT_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Largest enrolment body: a token, a CSR and the facts need a few KiB.
pub const ENROLMENT_BODY_LIMIT: usize = 64 * 1024;

/// The body limit of a path.
pub fn body_limit(path: &str) -> usize {
    if path == "/v1/agent/enroll" {
        ENROLMENT_BODY_LIMIT
    } else if path.starts_with("/v1/agent/") {
        AGENT_BODY_LIMIT
    } else {
        BODY_LIMIT
    }
}

/// The request's id, readable by handlers through `Data<&RequestId>` or the request extensions.
#[derive(Clone, Debug)]
pub struct RequestId(pub Arc<str>);

/// Response headers that inner layers ask the edge to add to the final answer (for example the
/// rate-limit state), even when the inner layer answers with an error.
#[derive(Clone, Debug, Default)]
pub struct ExtraHeaders(pub Arc<std::sync::Mutex<Vec<(&'static str, HeaderValue)>>>);

impl ExtraHeaders {
    pub fn push(&self, name: &'static str, value: HeaderValue) {
        if let Ok(mut headers) = self.0.lock() {
            headers.push((name, value));
        }
    }
}

pub struct Edge;

impl<E: Endpoint> Middleware<E> for Edge {
    type Output = EdgeEndpoint<E>;

    fn transform(&self, ep: E) -> Self::Output {
        EdgeEndpoint { inner: ep }
    }
}

pub struct EdgeEndpoint<E> {
    inner: E,
}

fn acceptable_request_id(value: &str) -> bool {
    (1..=128).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

impl<E: Endpoint> Endpoint for EdgeEndpoint<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> Result<Self::Output> {
        let started = Instant::now();
        let request_id: Arc<str> = match req.header(REQUEST_ID_HEADER) {
            Some(v) if acceptable_request_id(v) => v.into(),
            _ => uuid::Uuid::now_v7().to_string().into(),
        };
        let extra = ExtraHeaders::default();
        req.extensions_mut().insert(RequestId(request_id.clone()));
        req.extensions_mut().insert(extra.clone());
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let span = tracing::info_span!("request", %method, %path, request_id = %request_id);

        let outcome = async {
            let over_limit = limit_body(&mut req, body_limit(&path))?;
            let outcome = match AssertUnwindSafe(self.inner.call(req)).catch_unwind().await {
                Ok(Ok(output)) => Ok(output.into_response()),
                Ok(Err(err)) => Err(err),
                Err(_) => {
                    tracing::error!("handler panicked");
                    Err(ApiError::Internal(anyhow::anyhow!("handler panicked")).into())
                }
            };
            // Whoever read the body failed on its limit, whatever error it made of that.
            if over_limit.load(Ordering::Relaxed) {
                return Err(ApiError::PayloadTooLarge.into());
            }
            outcome
        }
        .instrument(span.clone())
        .await;

        let mut response = match outcome {
            Ok(response) => response,
            Err(err) if crate::scim::v2::wire::is_scim_path(&path) => {
                span.in_scope(|| scim_error_response(err))
            }
            Err(err) => span.in_scope(|| error_response(err, &request_id)),
        };
        let headers = response.headers_mut();
        if let Ok(value) = HeaderValue::from_str(&request_id) {
            headers.insert(REQUEST_ID_HEADER, value);
        }
        if let Ok(extra) = extra.0.lock() {
            for (name, value) in extra.iter() {
                headers.insert(*name, value.clone());
            }
        }
        span.in_scope(|| {
            tracing::info!(
                status = response.status().as_u16(),
                elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                "answered"
            )
        });
        Ok(response)
    }
}

fn error_response(err: poem::Error, request_id: &str) -> Response {
    match err.downcast_ref::<ApiError>() {
        Some(api @ ApiError::Internal(cause)) => {
            tracing::error!(error = ?cause, "request failed");
            problem_response(api, Some(request_id))
        }
        Some(api) => problem_response(api, Some(request_id)),
        None if err.status().is_server_error() => {
            tracing::error!(error = %err, "request failed");
            problem_response(
                &ApiError::Internal(anyhow::anyhow!("{err}")),
                Some(request_id),
            )
        }
        None => problem_for_poem_error(err),
    }
}

/// The SCIM protocol's errors are SCIM's own error messages, whatever raised them (the
/// handler, the access code, poem's routing and parsing, the body limit, a panic).
fn scim_error_response(err: poem::Error) -> Response {
    use crate::scim::v2::wire::ScimError;
    if let Some(scim) = err.downcast_ref::<ScimError>() {
        return poem::error::ResponseError::as_response(scim);
    }
    let scim = match err.downcast_ref::<ApiError>() {
        Some(ApiError::Internal(cause)) => ScimError::internal(anyhow::anyhow!("{cause:#}")),
        Some(api) => ScimError::from_api(api),
        None if err.status().is_server_error() => ScimError::internal(anyhow::anyhow!("{err}")),
        None => {
            let api = crate::http::error::api_error_for_poem_error(&err);
            match api {
                ApiError::Internal(cause) => ScimError::internal(cause),
                api => ScimError::from_api(&api),
            }
        }
    };
    poem::IntoResponse::into_response(scim)
}

/// Puts the body under `limit`: a `Content-Length` over it is 413 at once; otherwise the body
/// is counted as it is read and fails at the first byte past the limit, raising the flag this
/// returns.
fn limit_body(req: &mut Request, limit: usize) -> Result<Arc<AtomicBool>> {
    let over_limit = Arc::new(AtomicBool::new(false));
    if req
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|length| length > limit as u64)
    {
        return Err(ApiError::PayloadTooLarge.into());
    }
    let body = req.take_body();
    if body.is_empty() {
        req.set_body(body);
        return Ok(over_limit);
    }
    let flag = over_limit.clone();
    let mut seen = 0usize;
    let counted = body.into_bytes_stream().map(move |piece| {
        let piece = piece?;
        seen = seen.saturating_add(piece.len());
        if seen > limit {
            flag.store(true, Ordering::Relaxed);
            return Err(std::io::Error::other(
                "the request body is over the size limit",
            ));
        }
        Ok(piece)
    });
    req.set_body(Body::from_bytes_stream(counted));
    Ok(over_limit)
}
