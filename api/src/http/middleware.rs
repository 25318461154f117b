//! The edge of every request: request id, tracing span, body size limit, panic catching, and
//! the one place where any error becomes a problem response.
//!
//! The body limit holds whatever the headers say: a `Content-Length` over it is refused before
//! anything is read, and every body is counted as it streams in (HTTP/2 needs neither
//! `Content-Length` nor `Transfer-Encoding`), so whoever reads it stops at the first byte past
//! the limit and the answer is 413. Nothing is buffered here: a body is read only by the
//! operation that wants it, after its own checks (agent calls after their signature).

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use futures::{FutureExt, StreamExt, future::BoxFuture};
use poem::{
    Body, Endpoint, IntoResponse, Middleware, PathPattern, Request, Response, Result,
    http::HeaderValue,
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

/// The request's id: the client's `X-Request-Id` when it is acceptable (echoed), a new UUIDv7
/// otherwise. The edge answers it as `X-Request-Id`, puts it in the request's span and in every
/// problem body; handlers log inside that span, so none reads it (it is not in the request's
/// extensions).
///
/// Kept as the header value it is answered with, so that echoing or generating it costs no
/// more than one copy of its bytes.
#[derive(Clone, Debug)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The id of `req`.
    pub fn of(req: &Request) -> RequestId {
        match req.headers().get(REQUEST_ID_HEADER) {
            Some(value) if acceptable_request_id(value.as_bytes()) => RequestId(value.clone()),
            _ => RequestId::generate(),
        }
    }

    fn generate() -> RequestId {
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = uuid::Uuid::now_v7().hyphenated().encode_lower(&mut text);
        // Hex digits and hyphens are always a valid header value.
        RequestId(
            HeaderValue::from_str(text)
                .unwrap_or_else(|_| HeaderValue::from_static("unknown-request-id")),
        )
    }

    pub fn as_str(&self) -> &str {
        // Only visible ASCII gets here (`acceptable_request_id` or a UUID).
        self.0.to_str().unwrap_or_default()
    }

    /// The value of the `X-Request-Id` response header.
    pub fn header_value(&self) -> &HeaderValue {
        &self.0
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Response headers that inner layers ask the edge to add to the final answer, even when the
/// inner layer answers with an error: pushed to the one in the request's extensions (the
/// rate-limit state), or set as an error's data (`poem::Error::set_data`: the `Allow` of a 405),
/// which the edge applies to the answer it makes of that error.
#[derive(Clone, Debug, Default)]
pub struct ExtraHeaders(pub Arc<std::sync::Mutex<Vec<(&'static str, HeaderValue)>>>);

impl ExtraHeaders {
    /// Just `name: value`.
    pub fn one(name: &'static str, value: HeaderValue) -> ExtraHeaders {
        ExtraHeaders(Arc::new(std::sync::Mutex::new(vec![(name, value)])))
    }

    pub fn push(&self, name: &'static str, value: HeaderValue) {
        if let Ok(mut headers) = self.0.lock() {
            headers.push((name, value));
        }
    }

    /// Adds the pushed headers to `response`.
    pub fn apply(&self, response: &mut Response) {
        if let Ok(extra) = self.0.lock() {
            let headers = response.headers_mut();
            for (name, value) in extra.iter() {
                headers.insert(*name, value.clone());
            }
        }
    }
}

/// A protocol served beside the JSON API that answers in its own error format and documents
/// its own errors (SCIM): which paths are its, and its answer to any error raised on them (by
/// its handlers, the access code, routing and parsing, the body limit, a panic).
pub trait OwnErrors: Send + Sync + 'static {
    fn covers(path: &str) -> bool;
    fn response(err: poem::Error) -> Response;
}

/// No such protocol: every path answers problem+json.
impl OwnErrors for () {
    fn covers(_path: &str) -> bool {
        false
    }

    fn response(err: poem::Error) -> Response {
        error_response(err, "")
    }
}

/// The edge of the service: request ids, body limits, problem+json for every error (or the
/// error format of the protocol `P` on its paths), the request's log line and metrics.
pub struct Edge<P = ()>(std::marker::PhantomData<P>);

impl<P> Default for Edge<P> {
    fn default() -> Self {
        Edge(std::marker::PhantomData)
    }
}

impl<E: Endpoint, P: OwnErrors> Middleware<E> for Edge<P> {
    type Output = EdgeEndpoint<E, P>;

    fn transform(&self, ep: E) -> Self::Output {
        EdgeEndpoint {
            inner: ep,
            own: std::marker::PhantomData,
        }
    }
}

pub struct EdgeEndpoint<E, P = ()> {
    inner: E,
    own: std::marker::PhantomData<P>,
}

fn acceptable_request_id(value: &[u8]) -> bool {
    (1..=128).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// The method as a metric label: the standard ones, anything else `OTHER` (a client may send
/// any token as a method; labels must stay few).
fn metric_method(method: &poem::http::Method) -> &'static str {
    use poem::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The route label of a request no route matched: the web console's pages (any path outside
/// the API's prefixes), or `unmatched`.
fn unrouted_label(path: &str) -> &'static str {
    if path.starts_with("/v1") || path.starts_with("/scim") {
        "unmatched"
    } else {
        "console"
    }
}

/// The route label of a matched route: its template as the router knows it (poem-openapi names
/// path parameters by position: `/v1/orgs/:param0/hosts/:param1`), so never an id; a
/// rest-of-path match (`*`) is cut at its star. The catch-all nest's own pattern (empty) is no
/// route: such a request is labelled as unrouted.
fn metric_route(pattern: &str) -> String {
    pattern.split('*').next().unwrap_or(pattern).to_owned()
}

/// An answer on its way, and the flag its request body's limit raises.
type Begun<'a, T> = (BoxFuture<'a, Result<T>>, Option<Arc<AtomicBool>>);

impl<E: Endpoint, P> EdgeEndpoint<E, P> {
    /// The inner endpoint's answer to `req`, boxed, and the flag its body's limit raises.
    fn begin(&self, mut req: Request, limit: usize) -> Result<Begun<'_, E::Output>> {
        let over_limit = limit_body(&mut req, limit)?;
        Ok((Box::pin(self.inner.call(req)), over_limit))
    }
}

impl<E: Endpoint, P: OwnErrors> Endpoint for EdgeEndpoint<E, P> {
    type Output = Response;

    // Not an `async fn`: a future is moved whole each time a layer wraps or boxes it, and an
    // `async fn` taking the request would hold it (and then the inner future beside it) in its
    // own. Here the request is handed on first and the inner future boxed once, so what the
    // outer layers and the server move is only what this edge keeps.
    fn call(&self, mut req: Request) -> impl Future<Output = Result<Self::Output>> + Send {
        let started = Instant::now();
        let request_id = RequestId::of(&req);
        let path = req.uri().path();
        let limit = body_limit(path);
        let own_errors = P::covers(path);
        // Probes are polled every few seconds by whatever runs the service: their lines are
        // `debug` (a failing probe's answer is still logged at `info`).
        let probe = crate::http::probes::probe(path);
        let unrouted = unrouted_label(path);
        let span = if probe.is_some() {
            tracing::debug_span!("request", method = %req.method(), %path, %request_id)
        } else {
            tracing::info_span!("request", method = %req.method(), %path, %request_id)
        };
        // Nothing on the liveness probe's path pushes headers (a 405 carries its `Allow` as the
        // error's data), so its requests go without extensions: no map to allocate per probe.
        let extra = (path != crate::http::probes::LIVENESS_PATH).then(|| {
            let extra = ExtraHeaders::default();
            req.extensions_mut().insert(extra.clone());
            extra
        });
        let method = metric_method(req.method());
        // Until the answer is made, a stop leaves this request's connection open.
        let answering = crate::http::connections::answering(req.local_addr(), req.remote_addr());
        let begun = span.in_scope(|| self.begin(req, limit));

        async move {
            let outcome = match begun {
                Ok((answer, over_limit)) => {
                    let outcome = catch_panic(answer).instrument(span.clone()).await;
                    // Whoever read the body failed on its limit, whatever error it made of that.
                    if over_limit.is_some_and(|flag| flag.load(Ordering::Relaxed)) {
                        Err(ApiError::PayloadTooLarge.into())
                    } else {
                        outcome
                    }
                }
                Err(err) => Err(err),
            };
            let route = match &outcome {
                Ok(response) => response.data::<PathPattern>(),
                Err(err) => err.data::<PathPattern>(),
            }
            .map(|pattern| metric_route(&pattern.0))
            .filter(|route| !route.is_empty() && route != "/")
            .unwrap_or_else(|| unrouted.to_owned());
            let mut response = match outcome {
                Ok(response) => response,
                Err(err) => {
                    let carried = err.data::<ExtraHeaders>().cloned();
                    let mut response = if own_errors {
                        span.in_scope(|| P::response(err))
                    } else {
                        span.in_scope(|| error_response(err, request_id.as_str()))
                    };
                    if let Some(carried) = carried {
                        carried.apply(&mut response);
                    }
                    response
                }
            };
            let status = response.status();
            drop(answering);
            platform::metrics::metrics().http_request(
                method,
                &route,
                status.as_u16(),
                started.elapsed(),
            );
            // A field's value is worked out only when its event is logged.
            let elapsed_ms = || started.elapsed().as_secs_f64() * 1000.0;
            span.in_scope(|| match probe {
                None => tracing::info!(
                    status = status.as_u16(),
                    elapsed_ms = elapsed_ms(),
                    "answered"
                ),
                Some(_) if status.is_success() => {
                    tracing::debug!(
                        status = status.as_u16(),
                        elapsed_ms = elapsed_ms(),
                        "answered"
                    )
                }
                // The probe's span may be off at `info`: this line says which request it was.
                Some(path) => tracing::info!(
                    status = status.as_u16(),
                    elapsed_ms = elapsed_ms(),
                    path,
                    %request_id,
                    "answered"
                ),
            });
            response
                .headers_mut()
                .insert(REQUEST_ID_HEADER, request_id.0);
            if let Some(extra) = extra {
                extra.apply(&mut response);
            }
            Ok(response)
        }
    }
}

/// `answer`'s outcome as a response, a panic in it an internal error.
pub async fn catch_panic<T: IntoResponse>(
    answer: impl Future<Output = Result<T>>,
) -> Result<Response> {
    match AssertUnwindSafe(answer).catch_unwind().await {
        Ok(Ok(output)) => Ok(output.into_response()),
        Ok(Err(err)) => Err(err),
        Err(_) => {
            tracing::error!("handler panicked");
            Err(ApiError::Internal(anyhow::anyhow!("handler panicked")).into())
        }
    }
}

fn error_response(err: poem::Error, request_id: &str) -> Response {
    match err.downcast_ref::<ApiError>() {
        // Made without `ApiError::failure` (a handler's own `Internal`): still a 503 when the
        // database is what failed.
        Some(ApiError::Internal(cause)) if platform::db::unavailable(cause.as_ref()).is_some() => {
            let why = crate::http::error::database_unavailable(cause);
            let api = why.map_or_else(
                || ApiError::Internal(anyhow::anyhow!("{cause:#}")),
                ApiError::ServiceUnavailable,
            );
            problem_response(&api, Some(request_id))
        }
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

/// Puts the body under `limit`: a `Content-Length` over it is 413 at once; otherwise the body
/// is counted as it is read and fails at the first byte past the limit, raising the flag this
/// returns (none for an empty body, which has nothing to count).
pub fn limit_body(req: &mut Request, limit: usize) -> Result<Option<Arc<AtomicBool>>> {
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
        return Ok(None);
    }
    let over_limit = Arc::new(AtomicBool::new(false));
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
    Ok(Some(over_limit))
}
