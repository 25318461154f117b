//! Liveness and readiness, outside `/v1` (decisions §11).
//!
//! `GET /healthz` is polled far more often than anything else and does nothing, so the app
//! answers it with [`Liveness`], before the OpenAPI service's routing and parsing, with the
//! answer of the documented operation (`HealthApi::healthz`; a test compares the two). It still
//! crosses the edge like every request: request id, error answers, headers.

use std::future::Future;

use poem::{
    Endpoint, IntoResponse, Request, Response,
    error::MethodNotAllowedError,
    http::{HeaderValue, Method},
};
use poem_openapi::{ApiResponse, OpenApi, payload::PlainText};

use crate::{
    http::error::{ApiError, Errors, Unavailable},
    http::middleware::ExtraHeaders,
    http::tags::Tag,
    state::AppState,
};

/// `/healthz` without the OpenAPI service: what `HealthApi::healthz` answers, `GET` and `HEAD`
/// (no body, as poem answers a `HEAD`), and 405 with `Allow` otherwise.
pub struct Liveness;

impl Endpoint for Liveness {
    type Output = Response;

    // Answered before any future is made: the future holds the answer, not the request.
    fn call(&self, req: Request) -> impl Future<Output = poem::Result<Response>> + Send {
        std::future::ready(match *req.method() {
            Method::GET => Ok("ok".into_response()),
            Method::HEAD => {
                let mut response = "ok".into_response();
                response.set_body(());
                Ok(response)
            }
            _ => {
                let mut err = poem::Error::from(MethodNotAllowedError);
                err.set_data(ExtraHeaders::one(
                    "allow",
                    HeaderValue::from_static("GET, HEAD"),
                ));
                Err(err)
            }
        })
    }
}

pub struct HealthApi {
    pub state: AppState,
}

#[derive(ApiResponse)]
enum Ready {
    /// The database answers and every migration is applied.
    #[oai(status = 200)]
    Ready(PlainText<&'static str>),
}

#[OpenApi(tag = "Tag::Operations")]
impl HealthApi {
    /// The process is up.
    #[oai(path = "/healthz", method = "get", operation_id = "healthz")]
    async fn healthz(&self) -> PlainText<&'static str> {
        PlainText("ok")
    }

    /// The database is reachable and its migrations are applied; 503 `unavailable` otherwise.
    #[oai(path = "/readyz", method = "get", operation_id = "readyz")]
    async fn readyz(&self) -> Result<Ready, Errors<(Unavailable,)>> {
        if self.state.db.ready().await {
            Ok(Ready::Ready(PlainText("ready")))
        } else {
            Err(
                ApiError::Unavailable("the database is not reachable or not migrated".into())
                    .into(),
            )
        }
    }
}
