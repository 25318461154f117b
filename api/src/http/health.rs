//! Liveness and readiness, outside `/v1` (decisions §11).

use poem_openapi::{ApiResponse, OpenApi, payload::PlainText};

use crate::{
    http::error::{ApiError, Errors, Unavailable},
    http::tags::Tag,
    state::AppState,
};

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
