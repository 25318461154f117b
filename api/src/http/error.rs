//! The error policy (decisions §1), in one place.
//!
//! Every failure becomes an [`ApiError`], and every `ApiError` is answered as
//! `application/problem+json` with `type`, `title`, `status` and `detail`:
//!
//! | variant | status | `type` |
//! |---|---|---|
//! | `InvalidRequest` | 400 | `invalid-request` |
//! | `Unauthenticated` | 401 | `unauthenticated` |
//! | `Forbidden` | 403 | `forbidden` |
//! | `PlanRequired` | 403 | `plan-required` |
//! | `SsoRequired` | 403 | `sso-required` |
//! | `NotFound` | 404 | `not-found` |
//! | `InvalidToken` | 404 | `invalid-token` |
//! | `MethodNotAllowed` | 405 | `method-not-allowed` |
//! | `State` | 409 | `already-decided`, `not-decidable`, `preflight-failed`, `not-executable`, `invalid-state` |
//! | `Conflict` | 409 | `conflict` |
//! | `PayloadTooLarge` | 413 | `payload-too-large` |
//! | `RateLimited` | 429 | `rate-limited` (with `Retry-After` and `RateLimit-Limit`) |
//! | `NotConfigured` | 503 | `not-configured` |
//! | `Unavailable` | 503 | `unavailable` (not ready: the database does not answer) |
//! | `ServiceUnavailable` | 503 | `service-unavailable` (with `Retry-After`): the database cannot serve the request now (no connection came free within 5 s, it cannot be reached, its disk is full); logged as a warning, counted in `fleet_db_unavailable_total` |
//! | `Internal` | 500 | `internal` (detail: the request id only; the cause is logged): a database error, a stored JSON value that cannot be read |
//!
//! poem's own errors (unknown route, wrong method, unparsable body, size limit, panics) are
//! turned into the same variants by [`problem_for_poem_error`], which the router installs as its
//! catch-all. Handlers return `Result<_, Errors<(…)>>` whose type parameter lists the statuses
//! the operation can answer, so the OpenAPI document shows each operation's errors.

use std::marker::PhantomData;

use poem::{IntoResponse, Response, http::StatusCode};
use poem_openapi::{
    ApiResponse, Object,
    registry::{MetaHeader, MetaMediaType, MetaResponse, MetaResponses, MetaSchemaRef, Registry},
    types::{ToJSON, Type},
};

pub const PROBLEM_JSON: &str = "application/problem+json";

/// The problem body of every error response (RFC 9457).
#[derive(Object, Debug, Clone, PartialEq)]
pub struct Problem {
    /// A short slug that clients switch on, such as `not-found` or `rate-limited`.
    #[oai(rename = "type")]
    pub kind: String,
    /// A human-readable summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: i32,
    /// What was wrong, in words a person can act on.
    pub detail: Option<String>,
}

/// Refusals of a decision because of the proposal's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRefusal {
    AlreadyDecided,
    NotDecidable,
    PreflightFailed,
    NotExecutable,
    InvalidState,
}

impl StateRefusal {
    fn slug(self) -> &'static str {
        match self {
            StateRefusal::AlreadyDecided => "already-decided",
            StateRefusal::NotDecidable => "not-decidable",
            StateRefusal::PreflightFailed => "preflight-failed",
            StateRefusal::NotExecutable => "not-executable",
            StateRefusal::InvalidState => "invalid-state",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unauthenticated")]
    Unauthenticated,
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("plan required: {0}")]
    PlanRequired(String),
    #[error("single sign-on required")]
    SsoRequired,
    #[error("not found")]
    NotFound,
    #[error("invalid or expired token")]
    InvalidToken,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("refused in the current state: {detail}")]
    State { kind: StateRefusal, detail: String },
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("payload too large")]
    PayloadTooLarge,
    #[error("rate limited")]
    RateLimited { retry_after_s: u64, limit: u32 },
    #[error("not configured: {0}")]
    NotConfigured(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("service unavailable: {}", .0.describe())]
    ServiceUnavailable(platform::db::Unavailable),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    /// A unique violation on the name of a `what` (a group, a policy, a notification channel)
    /// is 409 `conflict` naming it; any other database error stays what it is.
    pub fn name_taken(err: sea_orm::DbErr, what: &str, name: &str) -> Self {
        if matches!(
            err.sql_err(),
            Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
        ) {
            ApiError::Conflict(format!("A {what} named {name:?} exists."))
        } else {
            err.into()
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        ApiError::InvalidRequest(detail.into())
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        ApiError::Forbidden(detail.into())
    }

    pub fn state(kind: StateRefusal, detail: impl Into<String>) -> Self {
        ApiError::State {
            kind,
            detail: detail.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::PlanRequired(_) | ApiError::SsoRequired => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotFound | ApiError::InvalidToken => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::State { .. } | ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotConfigured(_)
            | ApiError::Unavailable(_)
            | ApiError::ServiceUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The problem body. `request_id` goes into the detail of internal errors only.
    pub fn problem(&self, request_id: Option<&str>) -> Problem {
        let (kind, title, detail): (&str, &str, Option<String>) = match self {
            ApiError::InvalidRequest(d) => ("invalid-request", "Invalid request", Some(d.clone())),
            ApiError::Unauthenticated => (
                "unauthenticated",
                "Not signed in",
                Some("This operation needs a valid session or API token.".into()),
            ),
            ApiError::Forbidden(d) => ("forbidden", "Not permitted", Some(d.clone())),
            ApiError::PlanRequired(d) => ("plan-required", "Plan required", Some(d.clone())),
            ApiError::SsoRequired => (
                "sso-required",
                "Single sign-on required",
                Some("This organization requires signing in through its identity provider.".into()),
            ),
            ApiError::NotFound => (
                "not-found",
                "Not found",
                Some("No such resource here.".into()),
            ),
            ApiError::InvalidToken => (
                "invalid-token",
                "Invalid token",
                Some("The token is unknown, already used or expired. Request a new one.".into()),
            ),
            ApiError::MethodNotAllowed => (
                "method-not-allowed",
                "Method not allowed",
                Some("This path does not accept that method.".into()),
            ),
            ApiError::State { kind, detail } => (
                kind.slug(),
                "Refused in the current state",
                Some(detail.clone()),
            ),
            ApiError::Conflict(d) => ("conflict", "Conflict", Some(d.clone())),
            ApiError::PayloadTooLarge => (
                "payload-too-large",
                "Payload too large",
                Some("The request body is over the size limit.".into()),
            ),
            ApiError::RateLimited { retry_after_s, .. } => (
                "rate-limited",
                "Too many requests",
                Some(format!(
                    "Over the request limit; retry in {retry_after_s} s."
                )),
            ),
            ApiError::NotConfigured(d) => ("not-configured", "Not configured", Some(d.clone())),
            ApiError::Unavailable(d) => ("unavailable", "Unavailable", Some(d.clone())),
            ApiError::ServiceUnavailable(why) => (
                "service-unavailable",
                "Service unavailable",
                Some(format!(
                    "The service cannot answer now ({}); retry in {SERVICE_RETRY_AFTER_S} s.",
                    why.describe()
                )),
            ),
            ApiError::Internal(_) => (
                "internal",
                "Internal error",
                Some(match request_id {
                    Some(id) => format!("request id {id}"),
                    None => "unexpected error".into(),
                }),
            ),
        };
        Problem {
            kind: kind.to_owned(),
            title: title.to_owned(),
            status: i32::from(self.status().as_u16()),
            detail,
        }
    }
}

/// The `Retry-After` of a 503 `service-unavailable`, in seconds.
pub const SERVICE_RETRY_AFTER_S: u64 = 5;

impl ApiError {
    /// An unexpected failure: 503 `service-unavailable` when it is the database being unable to
    /// serve now ([`database_unavailable`]), else 500 `internal`.
    pub fn failure(err: anyhow::Error) -> ApiError {
        match database_unavailable(&err) {
            Some(why) => ApiError::ServiceUnavailable(why),
            None => ApiError::Internal(err),
        }
    }
}

/// Whether `err` is the database being unable to serve now; if so it is logged as a warning
/// with its reason and counted (`fleet_db_unavailable_total`, and a pool wait that gave up in
/// `fleet_db_pool_acquire_timeouts_total`).
pub fn database_unavailable(err: &anyhow::Error) -> Option<platform::db::Unavailable> {
    let why = platform::db::unavailable(err.as_ref())?;
    if why == platform::db::Unavailable::PoolTimedOut {
        platform::metrics::pool_timed_out();
    }
    platform::metrics::metrics().database_unavailable.inc();
    tracing::warn!(
        error = %format!("{err:#}"),
        reason = why.describe(),
        "the database cannot serve the request: answering 503"
    );
    Some(why)
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(err: sea_orm::DbErr) -> Self {
        ApiError::failure(err.into())
    }
}

/// A row another organization holds is answered as one that does not exist.
impl From<entities::scope::RowError> for ApiError {
    fn from(err: entities::scope::RowError) -> Self {
        match err {
            entities::scope::RowError::NotFound => ApiError::NotFound,
            entities::scope::RowError::Db(err) => err.into(),
        }
    }
}

impl From<domain::billing::PlanRequired> for ApiError {
    fn from(refusal: domain::billing::PlanRequired) -> Self {
        ApiError::PlanRequired(refusal.detail)
    }
}

/// A stored JSON value that cannot be read is the service's fault, never the caller's: 500,
/// with the cause (the type it was read as, where the text fails) logged.
impl From<entities::json::Unreadable> for ApiError {
    fn from(err: entities::json::Unreadable) -> Self {
        ApiError::Internal(err.into())
    }
}

impl From<entities::json::Unwritable> for ApiError {
    fn from(err: entities::json::Unwritable) -> Self {
        ApiError::Internal(err.into())
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(err: anyhow::Error) -> Self {
        ApiError::failure(err)
    }
}

impl poem::error::ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        ApiError::status(self)
    }

    fn as_response(&self) -> Response {
        // The request id is added by the request-id middleware, which also fills it into the
        // detail of internal errors (see `crate::http::middleware`).
        problem_response(self, None)
    }
}

/// Builds the problem response for `err`.
pub fn problem_response(err: &ApiError, request_id: Option<&str>) -> Response {
    let problem = err.problem(request_id);
    let body = problem.to_json_string();
    let mut response = Response::builder()
        .status(err.status())
        .content_type(PROBLEM_JSON)
        .body(body);
    if let ApiError::RateLimited {
        retry_after_s,
        limit,
    } = err
    {
        let headers = response.headers_mut();
        headers.insert("retry-after", (*retry_after_s).into());
        headers.insert("ratelimit-limit", (*limit).into());
    }
    if let ApiError::ServiceUnavailable(_) = err {
        response
            .headers_mut()
            .insert("retry-after", SERVICE_RETRY_AFTER_S.into());
    }
    response
}

/// Maps an error that is not an [`ApiError`] (poem's own: routing, parsing, auth extractors) to
/// a problem response.
pub fn problem_for_poem_error(err: poem::Error) -> Response {
    if let Some(api) = err.downcast_ref::<ApiError>() {
        return problem_response(api, None);
    }
    problem_response(&api_error_for_poem_error(&err), None)
}

/// The [`ApiError`] a poem error (not itself an `ApiError`) stands for.
pub fn api_error_for_poem_error(err: &poem::Error) -> ApiError {
    use poem::error::{MethodNotAllowedError, NotFoundError, ReadBodyError};
    use poem_openapi::error::{
        AuthorizationError, ContentTypeError, ParseParamError, ParsePathError,
        ParseRequestPayloadError,
    };

    if err.is::<NotFoundError>() || err.is::<ParsePathError>() {
        // An id of the wrong shape in a path is simply not found (decisions §2).
        ApiError::NotFound
    } else if err.is::<MethodNotAllowedError>() {
        ApiError::MethodNotAllowed
    } else if err.is::<AuthorizationError>() {
        ApiError::Unauthenticated
    } else if let Some(e) = err.downcast_ref::<ParseRequestPayloadError>() {
        ApiError::InvalidRequest(format!("The request body is not acceptable: {}", e.reason))
    } else if err.is::<ContentTypeError>() {
        ApiError::invalid("The request body must be JSON (Content-Type: application/json).")
    } else if err.is::<ParseParamError>() {
        ApiError::InvalidRequest(err.to_string())
    } else if matches!(
        err.downcast_ref::<ReadBodyError>(),
        Some(ReadBodyError::PayloadTooLarge)
    ) || err.status() == StatusCode::PAYLOAD_TOO_LARGE
    {
        ApiError::PayloadTooLarge
    } else {
        match err.status() {
            StatusCode::NOT_FOUND => ApiError::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed,
            StatusCode::UNAUTHORIZED => ApiError::Unauthenticated,
            StatusCode::FORBIDDEN => ApiError::forbidden("Not permitted."),
            s if s.is_client_error() => ApiError::InvalidRequest(describe_bad_request(err)),
            status => {
                tracing::error!(error = %err, %status, "request failed");
                ApiError::Internal(anyhow::anyhow!("{err}"))
            }
        }
    }
}

/// Words for a request poem could not parse.
fn describe_bad_request(err: &poem::Error) -> String {
    let text = err.to_string();
    if text.is_empty() {
        "The request could not be understood.".to_owned()
    } else {
        text
    }
}

// ---------------------------------------------------------------------------------------------
// Per-operation error documentation.

/// One documented error status.
pub trait ErrorStatus {
    const STATUS: u16;
    const DESCRIPTION: &'static str;
    fn headers() -> Vec<MetaHeader> {
        Vec::new()
    }
}

macro_rules! error_status {
    ($name:ident, $status:literal, $description:literal) => {
        #[doc = $description]
        pub struct $name;
        impl ErrorStatus for $name {
            const STATUS: u16 = $status;
            const DESCRIPTION: &'static str = $description;
        }
    };
}

error_status!(
    BadRequest,
    400,
    "`invalid-request`: the body or a parameter is not acceptable; nothing was changed."
);
error_status!(
    Unauthorized,
    401,
    "`unauthenticated`: no valid session or API token."
);
error_status!(
    Forbidden,
    403,
    "`forbidden`: the caller's role lacks the right, a session-authenticated mutation lacks the `X-Service-Csrf` header, or an API token calls an operation that needs a person; `plan-required` or `sso-required` where the operation says so."
);
error_status!(
    NotFound,
    404,
    "`not-found`: no such resource here. A resource of another organization gives the same answer."
);
error_status!(
    Conflict,
    409,
    "`conflict`, or a refusal in the current state (`already-decided`, `not-decidable`, `preflight-failed`, `not-executable`, `invalid-state`)."
);
error_status!(
    NotConfigured,
    503,
    "`not-configured`: the deployment lacks the configuration this operation needs."
);
error_status!(
    Unavailable,
    503,
    "`unavailable`: the service is not ready (its database does not answer or is not migrated)."
);

/// 503 `service-unavailable` with `Retry-After`: every operation that reads or writes the
/// database may answer it ([`crate::http::openapi::Documented`] adds it to each).
pub struct ServiceUnavailable;
impl ErrorStatus for ServiceUnavailable {
    const STATUS: u16 = 503;
    const DESCRIPTION: &'static str = SERVICE_UNAVAILABLE;
    fn headers() -> Vec<MetaHeader> {
        vec![retry_after()]
    }
}

fn retry_after() -> MetaHeader {
    MetaHeader {
        name: "Retry-After".into(),
        description: Some("Whole seconds to wait before retrying.".into()),
        required: true,
        deprecated: false,
        schema: u64::schema_ref(),
    }
}

const SERVICE_UNAVAILABLE: &str = "`service-unavailable`: the database cannot serve the request now (no connection came free within 5 s, it cannot be reached, or its disk is full); nothing was changed. `Retry-After` says when to retry.";

/// What a 503 says on an operation that may also answer `not-configured`.
pub const NOT_CONFIGURED_OR_SERVICE_UNAVAILABLE: &str = "`not-configured`: the deployment lacks the configuration this operation needs; or `service-unavailable`: the database cannot serve the request now (no connection came free within 5 s, it cannot be reached, or its disk is full), nothing was changed, and `Retry-After` says when to retry.";
/// What a 503 says on an operation that may also answer `unavailable`.
pub const UNAVAILABLE_OR_SERVICE_UNAVAILABLE: &str = "`unavailable`: the service is not ready (its database does not answer or is not migrated); or `service-unavailable`: the database cannot serve the request now, and `Retry-After` says when to retry.";

/// Adds 503 `service-unavailable` to an operation's documented answers, merged into a 503 it
/// documents already.
pub fn document_service_unavailable(responses: &mut MetaResponses) {
    match responses
        .responses
        .iter_mut()
        .find(|r| r.status == Some(ServiceUnavailable::STATUS))
    {
        None => document::<ServiceUnavailable>(responses),
        Some(existing) => {
            if existing.description == NotConfigured::DESCRIPTION {
                existing.description = NOT_CONFIGURED_OR_SERVICE_UNAVAILABLE;
            } else if existing.description == Unavailable::DESCRIPTION {
                existing.description = UNAVAILABLE_OR_SERVICE_UNAVAILABLE;
            }
            if !existing.headers.iter().any(|h| h.name == "Retry-After") {
                existing.headers.push(MetaHeader {
                    required: false,
                    ..retry_after()
                });
            }
        }
    }
}

error_status!(
    PayloadTooLarge,
    413,
    "`payload-too-large`: the request body is over the size limit; nothing was read further or changed."
);

/// 429 with its headers.
pub struct TooManyRequests;
impl ErrorStatus for TooManyRequests {
    const STATUS: u16 = 429;
    const DESCRIPTION: &'static str = "`rate-limited`: over the caller's share of the organization's request limit, the organization's limit, or a per-address limit. `Retry-After` says when to retry.";
    fn headers() -> Vec<MetaHeader> {
        vec![
            MetaHeader {
                name: "Retry-After".into(),
                description: Some("Whole seconds to wait before retrying.".into()),
                required: true,
                deprecated: false,
                schema: u64::schema_ref(),
            },
            MetaHeader {
                name: "RateLimit-Limit".into(),
                description: Some("The burst: requests allowed at once.".into()),
                required: true,
                deprecated: false,
                schema: u32::schema_ref(),
            },
        ]
    }
}

/// A set of documented error statuses: a tuple of [`ErrorStatus`] types.
pub trait ErrorSet {
    fn responses() -> Vec<MetaResponse>;
}

/// Adds `E` to an operation's documented answers, in status order, unless it is there already.
pub fn document<E: ErrorStatus>(responses: &mut MetaResponses) {
    let list = &mut responses.responses;
    if list.iter().any(|r| r.status == Some(E::STATUS)) {
        return;
    }
    let at = list
        .iter()
        .position(|r| r.status.is_some_and(|s| s > E::STATUS))
        .unwrap_or(list.len());
    list.insert(at, meta_response::<E>());
}

fn meta_response<E: ErrorStatus>() -> MetaResponse {
    MetaResponse {
        description: E::DESCRIPTION,
        status: Some(E::STATUS),
        status_range: None,
        content: vec![MetaMediaType {
            content_type: PROBLEM_JSON,
            schema: MetaSchemaRef::Reference(Problem::name().into_owned()),
        }],
        headers: E::headers(),
    }
}

macro_rules! error_set_tuple {
    ($($t:ident),+) => {
        impl<$($t: ErrorStatus),+> ErrorSet for ($($t,)+) {
            fn responses() -> Vec<MetaResponse> {
                vec![$(meta_response::<$t>()),+]
            }
        }
    };
}
error_set_tuple!(A);
error_set_tuple!(A, B);
error_set_tuple!(A, B, C);
error_set_tuple!(A, B, C, D);
error_set_tuple!(A, B, C, D, E);
error_set_tuple!(A, B, C, D, E, F);
error_set_tuple!(A, B, C, D, E, F, G);
error_set_tuple!(A, B, C, D, E, F, G, H);

/// The answers of a read of an organization's resource: no session, not permitted, no such
/// organization (or resource), rate limited.
pub type OrgReadErrors = Errors<(Unauthorized, Forbidden, NotFound, TooManyRequests)>;
/// [`OrgReadErrors`] and 400 for input refused (a body, a query parameter, a cursor).
pub type OrgInputErrors = Errors<(
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    TooManyRequests,
)>;
/// [`OrgInputErrors`] and 409 for a change that conflicts with what is stored.
pub type OrgConflictErrors = Errors<(
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    TooManyRequests,
)>;

/// An [`ApiError`] as the error half of an operation's result; `S` documents its statuses.
/// Every operation may also answer 500 `internal`, which is documented for all.
pub struct Errors<S>(pub ApiError, PhantomData<S>);

impl<S> std::fmt::Debug for Errors<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<S> From<ApiError> for Errors<S> {
    fn from(err: ApiError) -> Self {
        Errors(err, PhantomData)
    }
}

impl<S> From<sea_orm::DbErr> for Errors<S> {
    fn from(err: sea_orm::DbErr) -> Self {
        Errors(err.into(), PhantomData)
    }
}

impl<S> From<entities::scope::RowError> for Errors<S> {
    fn from(err: entities::scope::RowError) -> Self {
        Errors(err.into(), PhantomData)
    }
}

impl<S> From<entities::json::Unreadable> for Errors<S> {
    fn from(err: entities::json::Unreadable) -> Self {
        Errors(err.into(), PhantomData)
    }
}

impl<S> From<entities::json::Unwritable> for Errors<S> {
    fn from(err: entities::json::Unwritable) -> Self {
        Errors(err.into(), PhantomData)
    }
}

impl<S> From<anyhow::Error> for Errors<S> {
    fn from(err: anyhow::Error) -> Self {
        Errors(err.into(), PhantomData)
    }
}

impl<S> From<Errors<S>> for poem::Error {
    fn from(err: Errors<S>) -> Self {
        poem::Error::from(err.0)
    }
}

/// 500, documented on every operation.
struct Internal;
impl ErrorStatus for Internal {
    const STATUS: u16 = 500;
    const DESCRIPTION: &'static str =
        "`internal`: an unexpected failure; the detail carries the request id to quote.";
}

impl<S: ErrorSet> ApiResponse for Errors<S> {
    fn meta() -> MetaResponses {
        let mut responses = S::responses();
        responses.push(meta_response::<Internal>());
        MetaResponses { responses }
    }

    fn register(registry: &mut Registry) {
        Problem::register(registry);
    }
}

impl<S: Send> IntoResponse for Errors<S> {
    fn into_response(self) -> Response {
        problem_response(&self.0, None)
    }
}

error_status!(
    PaymentsUnavailable,
    503,
    "`not-configured`: the deployment takes no payments (no `PAYMENTS_API_URL` or no `PAYMENTS_WEBHOOK_SECRET`); `unavailable`: the payment processor did not answer or failed, try again later."
);
