//! The edge of every request: request id, tracing span, body size limit, panic catching, and
//! the one place where any error becomes a problem response.

use std::{panic::AssertUnwindSafe, sync::Arc, time::Instant};

use futures::FutureExt;
use poem::{
    Body, Endpoint, IntoResponse, Middleware, Request, Response, Result, http::HeaderValue,
};
use tracing::Instrument;

use crate::error::{ApiError, problem_for_poem_error, problem_response};

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Largest request body the member API accepts (decisions §1: over it is 413).
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Largest raw body an agent may send (its check-in may carry a large inventory, gzip or not).
pub const AGENT_BODY_LIMIT: usize = 16 * 1024 * 1024;

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
            let limit = if path.starts_with("/v1/agent/") {
                AGENT_BODY_LIMIT
            } else {
                BODY_LIMIT
            };
            limit_body(&mut req, limit).await?;
            match AssertUnwindSafe(self.inner.call(req)).catch_unwind().await {
                Ok(Ok(output)) => Ok(output.into_response()),
                Ok(Err(err)) => Err(err),
                Err(_) => {
                    tracing::error!("handler panicked");
                    Err(ApiError::Internal(anyhow::anyhow!("handler panicked")).into())
                }
            }
        }
        .instrument(span.clone())
        .await;

        let mut response = match outcome {
            Ok(response) => response,
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

/// Reads the body up to `limit` bytes (413 past it, with or without `Content-Length`) and puts
/// it back for the extractors.
async fn limit_body(req: &mut Request, limit: usize) -> Result<()> {
    if let Some(length) = req
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok())
    {
        if length > limit as u64 {
            return Err(ApiError::PayloadTooLarge.into());
        }
        if length == 0 {
            return Ok(());
        }
    } else if req.header("transfer-encoding").is_none() {
        // No body at all.
        return Ok(());
    }
    let body = req.take_body();
    let bytes = body.into_bytes_limit(limit).await.map_err(|e| match e {
        poem::error::ReadBodyError::PayloadTooLarge => ApiError::PayloadTooLarge,
        other => ApiError::invalid(format!("the request body could not be read: {other}")),
    })?;
    req.set_body(Body::from(bytes));
    Ok(())
}
