//! SCIM on the wire (RFC 7644 §3.1, §3.12): bodies are `application/scim+json` (plain
//! `application/json` is accepted on input too), and every error, the edge's own included
//! (unknown path, wrong method, unreadable body, size limit), is SCIM's error message, never
//! problem+json:
//! `{"schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"], "status": "404", "detail": …}`,
//! with `scimType` where RFC 7644 §3.12 names one (`invalidFilter`, `invalidSyntax`,
//! `invalidValue`, `invalidPath`, `noTarget`, `uniqueness`, `mutability`).

use poem::{FromRequest, IntoResponse, Request, RequestBody, Response, http::StatusCode};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ApiResponse, ExtractParamOptions, Object,
    payload::{ParsePayload, Payload},
    registry::{MetaMediaType, MetaRequest, MetaResponse, MetaResponses, MetaSchemaRef, Registry},
    types::Type,
};
use serde::{Serialize, de::DeserializeOwned};

use crate::http::error::ApiError;

pub const SCIM_JSON: &str = "application/scim+json";
pub const ERROR_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:Error";

/// A SCIM body: `T`'s schema in the document, serde on the wire (SCIM providers send values
/// the strict JSON reader would refuse, such as `"active": "False"`; `T` decides what it takes).
pub struct ScimJson<T>(pub T);

impl<T: Type + Send> Payload for ScimJson<T> {
    const CONTENT_TYPE: &'static str = SCIM_JSON;

    fn check_content_type(content_type: &str) -> bool {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        essence == SCIM_JSON || essence == "application/json"
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type + DeserializeOwned + Send> ParsePayload for ScimJson<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let data = <Vec<u8> as FromRequest>::from_request(request, body).await?;
        serde_json::from_slice(&data)
            .map(ScimJson)
            .map_err(|err| ScimError::syntax(format!("The body is not acceptable: {err}")).into())
    }
}

impl<'a, T: Type + DeserializeOwned + Send> ApiExtractor<'a> for ScimJson<T> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <Self as Payload>::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: None,
            content: vec![MetaMediaType {
                content_type: SCIM_JSON,
                schema: <Self as Payload>::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        match request.content_type() {
            Some(content_type) if <Self as Payload>::check_content_type(content_type) => {
                <Self as ParsePayload>::from_request(request, body).await
            }
            _ => Err(ScimError::syntax(
                "The body must be SCIM JSON (Content-Type: application/scim+json).",
            )
            .into()),
        }
    }
}

impl<T: Serialize + Send> IntoResponse for ScimJson<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(body) => Response::builder().content_type(SCIM_JSON).body(body),
            Err(err) => {
                ScimError::internal(anyhow::anyhow!("serialize a SCIM body: {err}")).into_response()
            }
        }
    }
}

impl<T: Type + Serialize + Send> ApiResponse for ScimJson<T> {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The resource.",
                status: Some(200),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: SCIM_JSON,
                    schema: T::schema_ref(),
                }],
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

/// SCIM's error message (RFC 7644 §3.12).
#[derive(Object, Serialize, Debug, Clone)]
#[oai(rename = "ScimError")]
pub struct ScimErrorBody {
    /// Always `["urn:ietf:params:scim:api:messages:2.0:Error"]`.
    pub schemas: Vec<String>,
    /// The HTTP status, as a string.
    pub status: String,
    /// RFC 7644 §3.12's error keyword, for 400 (and 409 `uniqueness`).
    #[oai(rename = "scimType", skip_serializing_if_is_none)]
    #[serde(rename = "scimType", skip_serializing_if = "Option::is_none")]
    pub scim_type: Option<String>,
    pub detail: String,
}

/// A SCIM request refused.
#[derive(Debug, thiserror::Error)]
#[error("SCIM {status}: {detail}")]
pub struct ScimError {
    pub status: StatusCode,
    pub scim_type: Option<&'static str>,
    pub detail: String,
    /// For 429: whole seconds to wait (`Retry-After`).
    pub retry_after_s: Option<u64>,
}

impl ScimError {
    pub fn new(
        status: StatusCode,
        scim_type: Option<&'static str>,
        detail: impl Into<String>,
    ) -> Self {
        ScimError {
            status,
            scim_type,
            detail: detail.into(),
            retry_after_s: None,
        }
    }

    fn with_retry(mut self, retry_after_s: Option<u64>) -> Self {
        self.retry_after_s = retry_after_s;
        self
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            None,
            "A valid SCIM token is needed: Authorization: Bearer scim_…",
        )
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, None, format!("No such {what} here."))
    }

    pub fn syntax(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Some("invalidSyntax"), detail)
    }

    pub fn value(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Some("invalidValue"), detail)
    }

    pub fn path(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Some("invalidPath"), detail)
    }

    pub fn filter(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Some("invalidFilter"), detail)
    }

    pub fn uniqueness(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, Some("uniqueness"), detail)
    }

    /// The last owner would lose their membership.
    pub fn last_owner() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            None,
            "This is the organization's last owner: make somebody else owner first.",
        )
    }

    /// An unexpected failure: logged with its cause, answered 500 without it.
    pub fn internal(cause: anyhow::Error) -> Self {
        tracing::error!(error = ?cause, "SCIM request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "Unexpected error; the service logged it.",
        )
    }

    pub fn body(&self) -> ScimErrorBody {
        ScimErrorBody {
            schemas: vec![ERROR_SCHEMA.to_owned()],
            status: self.status.as_u16().to_string(),
            scim_type: self.scim_type.map(str::to_owned),
            detail: self.detail.clone(),
        }
    }

    /// The SCIM form of any other error of the edge or of the shared access code.
    pub fn from_api(err: &ApiError) -> Self {
        let status = err.status();
        let detail = err
            .problem(None)
            .detail
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
        match err {
            ApiError::Internal(_) => {
                Self::new(status, None, "Unexpected error; the service logged it.")
            }
            ApiError::InvalidRequest(_) => Self::new(status, Some("invalidSyntax"), detail),
            ApiError::Unauthenticated => Self::unauthorized(),
            ApiError::RateLimited { retry_after_s, .. } => ScimError {
                retry_after_s: Some(*retry_after_s),
                ..Self::new(status, None, detail)
            },
            ApiError::ServiceUnavailable(_) => ScimError {
                retry_after_s: Some(crate::http::error::SERVICE_RETRY_AFTER_S),
                ..Self::new(status, None, detail)
            },
            _ => Self::new(status, None, detail),
        }
    }
}

impl From<sea_orm::DbErr> for ScimError {
    fn from(err: sea_orm::DbErr) -> Self {
        ApiError::from(err).into()
    }
}

impl From<ApiError> for ScimError {
    fn from(err: ApiError) -> Self {
        if let ApiError::Internal(cause) = err {
            return ScimError::internal(cause);
        }
        ScimError::from_api(&err)
    }
}

impl IntoResponse for ScimError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = Response::builder()
            .status(self.status)
            .content_type(SCIM_JSON)
            .body(body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                "www-authenticate",
                poem::http::HeaderValue::from_static("Bearer"),
            );
        }
        if let Some(seconds) = self.retry_after_s {
            response.headers_mut().insert("retry-after", seconds.into());
        }
        response
    }
}

impl poem::error::ResponseError for ScimError {
    fn status(&self) -> StatusCode {
        self.status
    }

    fn as_response(&self) -> Response {
        ScimError {
            detail: self.detail.clone(),
            ..ScimError::new(self.status, self.scim_type, "")
        }
        .with_retry(self.retry_after_s)
        .into_response()
    }
}

/// The SCIM answers every SCIM operation may give, documented with SCIM's error schema.
pub struct ScimErrors(pub ScimError);

impl From<ScimError> for ScimErrors {
    fn from(err: ScimError) -> Self {
        ScimErrors(err)
    }
}

impl From<sea_orm::DbErr> for ScimErrors {
    fn from(err: sea_orm::DbErr) -> Self {
        ScimErrors(err.into())
    }
}

impl From<ApiError> for ScimErrors {
    fn from(err: ApiError) -> Self {
        ScimErrors(err.into())
    }
}

impl From<ScimErrors> for poem::Error {
    fn from(err: ScimErrors) -> Self {
        poem::Error::from(err.0)
    }
}

impl IntoResponse for ScimErrors {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

const ERROR_ANSWERS: [(u16, &str); 9] = [
    (
        400,
        "SCIM error: `invalidSyntax` (an unreadable body), `invalidValue` (a value refused), `invalidPath` or `noTarget` (a PATCH path), `invalidFilter` (any filter but `userName eq \"…\"`).",
    ),
    (
        401,
        "SCIM error: no SCIM token, or a revoked or replaced one (`WWW-Authenticate: Bearer`).",
    ),
    (
        403,
        "SCIM error: the organization's plan lacks SCIM provisioning (Enterprise).",
    ),
    (
        404,
        "SCIM error: no such resource in the token's organization (another organization's id gives the same answer).",
    ),
    (
        409,
        "SCIM error: `uniqueness` (the userName or displayName is taken), or the change would remove the organization's last owner.",
    ),
    (413, "SCIM error: the request body is over the size limit."),
    (
        429,
        "SCIM error: over the organization's request limit; `Retry-After` says when to retry.",
    ),
    (500, "SCIM error: an unexpected failure."),
    (
        503,
        "SCIM error: the database cannot serve the request now (no connection came free within 5 s, it cannot be reached, or its disk is full); nothing was changed, and `Retry-After` says when to retry.",
    ),
];

impl ApiResponse for ScimErrors {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: ERROR_ANSWERS
                .iter()
                .map(|&(status, description)| MetaResponse {
                    description,
                    status: Some(status),
                    status_range: None,
                    content: vec![MetaMediaType {
                        content_type: SCIM_JSON,
                        schema: MetaSchemaRef::Reference(ScimErrorBody::name().into_owned()),
                    }],
                    headers: vec![],
                })
                .collect(),
        }
    }

    fn register(registry: &mut Registry) {
        ScimErrorBody::register(registry);
    }
}

/// Whether `path` is one of the SCIM protocol's (its errors are SCIM's, not problems).
pub fn is_scim_path(path: &str) -> bool {
    path == "/scim/v2" || path.starts_with("/scim/v2/")
}

/// The SCIM protocol's paths, at the edge: SCIM's own error messages, whatever raised them (the
/// handler, the access code, poem's routing and parsing, the body limit, a panic), and SCIM's
/// own error documentation.
pub struct ScimPaths;

impl crate::http::middleware::OwnErrors for ScimPaths {
    fn covers(path: &str) -> bool {
        is_scim_path(path)
    }

    fn response(err: poem::Error) -> poem::Response {
        if let Some(scim) = err.downcast_ref::<ScimError>() {
            return poem::error::ResponseError::as_response(scim);
        }
        let scim = match err.downcast_ref::<ApiError>() {
            Some(ApiError::Internal(cause)) => ScimError::internal(anyhow::anyhow!("{cause:#}")),
            Some(api) => ScimError::from_api(api),
            None if err.status().is_server_error() => ScimError::internal(anyhow::anyhow!("{err}")),
            None => match crate::http::error::api_error_for_poem_error(&err) {
                ApiError::Internal(cause) => ScimError::internal(cause),
                api => ScimError::from_api(&api),
            },
        };
        poem::IntoResponse::into_response(scim)
    }
}

/// A resource (or a list of them) cut to the `attributes` / `excludedAttributes` a request
/// names (RFC 7644 §3.4.2.5, §3.9): `T`'s schema in the document, the cut JSON on the wire.
pub struct Projected<T> {
    value: serde_json::Value,
    _schema: std::marker::PhantomData<fn() -> T>,
}

/// Which attributes an answer keeps: `attributes` (only these, with `id` and `schemas`, which
/// are always returned) or `excludedAttributes` (all but these). Names are compared without
/// regard to case; `name.givenName` and the like select their top-level attribute, and a
/// URN-qualified name its last part.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    only: Option<Vec<String>>,
    without: Vec<String>,
}

fn attribute_names(list: Option<&str>) -> Vec<String> {
    list.unwrap_or_default()
        .split(',')
        .map(str::trim)
        // `str::is_empty`, not poem-openapi's `Type::is_empty` (in scope here, always false).
        .filter(|name| !str::is_empty(name))
        .map(|name| {
            let name = name.rsplit(':').next().unwrap_or(name);
            name.split('.').next().unwrap_or(name).to_ascii_lowercase()
        })
        .collect()
}

impl Selection {
    pub fn new(attributes: Option<&str>, excluded: Option<&str>) -> Self {
        let only = attribute_names(attributes);
        Selection {
            only: (!only.is_empty()).then_some(only),
            without: attribute_names(excluded),
        }
    }

    fn keeps(&self, key: &str) -> bool {
        let key = key.to_ascii_lowercase();
        if key == "id" || key == "schemas" {
            return true;
        }
        match &self.only {
            Some(only) => only.contains(&key),
            None => !self.without.contains(&key),
        }
    }

    fn cut(&self, value: &mut serde_json::Value) {
        if let serde_json::Value::Object(map) = value {
            map.retain(|key, _| self.keeps(key));
        }
    }
}

impl<T> Projected<T> {
    /// One resource, cut.
    pub fn one(resource: &T, selection: &Selection) -> Result<Self, ScimError>
    where
        T: Serialize,
    {
        let mut value = serde_json::to_value(resource)
            .map_err(|e| ScimError::internal(anyhow::anyhow!("serialize a resource: {e}")))?;
        selection.cut(&mut value);
        Ok(Projected {
            value,
            _schema: std::marker::PhantomData,
        })
    }

    /// A list response, each of its `Resources` cut.
    pub fn list(list: &T, selection: &Selection) -> Result<Self, ScimError>
    where
        T: Serialize,
    {
        let mut value = serde_json::to_value(list)
            .map_err(|e| ScimError::internal(anyhow::anyhow!("serialize a list: {e}")))?;
        if let Some(serde_json::Value::Array(resources)) = value.get_mut("Resources") {
            for resource in resources {
                selection.cut(resource);
            }
        }
        Ok(Projected {
            value,
            _schema: std::marker::PhantomData,
        })
    }
}

impl<T: Type> Payload for Projected<T> {
    const CONTENT_TYPE: &'static str = SCIM_JSON;

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T> IntoResponse for Projected<T> {
    fn into_response(self) -> Response {
        ScimJson(self.value).into_response()
    }
}

impl<T: Type> ApiResponse for Projected<T> {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The resource(s), with the attributes `attributes` or `excludedAttributes` select.",
                status: Some(200),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: SCIM_JSON,
                    schema: T::schema_ref(),
                }],
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_keeps_what_it_names_and_always_id_and_schemas() {
        let all = Selection::new(None, None);
        let mut value =
            serde_json::json!({"id": "x", "schemas": [], "userName": "a", "active": true});
        all.cut(&mut value);
        assert_eq!(value["userName"], "a", "{value}");
        let only = Selection::new(Some("userName,name.givenName"), None);
        let mut cut = serde_json::json!({"id": "x", "userName": "a", "name": {}, "active": true});
        only.cut(&mut cut);
        assert_eq!(
            cut,
            serde_json::json!({"id": "x", "userName": "a", "name": {}})
        );
        let without = Selection::new(None, Some("members"));
        let mut cut = serde_json::json!({"id": "x", "displayName": "a", "members": []});
        without.cut(&mut cut);
        assert_eq!(cut, serde_json::json!({"id": "x", "displayName": "a"}));
    }
}
