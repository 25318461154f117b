//! Where the OpenAPI document is built, and made to say exactly what the service does.
//!
//! [`Documented`] wraps all operations and adds what the edge does to every one of them, so no
//! handler has to repeat it:
//! - every operation that takes a request body may answer 413 `payload-too-large`: the edge
//!   reads bodies through a size limit before any handler runs (`crate::http::middleware`);
//! - every operation but the liveness probe may answer 503 `service-unavailable` with
//!   `Retry-After`: the database could not serve it (decisions §1, `ApiError::failure`);
//! - `limit` and `cursor` query parameters are the paged lists' (decisions §5): 1 to 500, and
//!   a cursor the service gave out (or nothing): an id's 26 base32 characters, unless the
//!   operation states its own pattern (lists keyed by a name, such as a host's packages).
//!
//! [`exact`] then states in the JSON what poem-openapi's metadata cannot express:
//! - a request field that may be absent also accepts `null` (poem-openapi reads `null` as
//!   absent: `None` for `Option`, the default for `#[oai(default)]`), so it is `nullable`;
//! - member-API request bodies deny unknown fields (`#[oai(deny_unknown_fields)]` on every one
//!   of them), so their objects say `additionalProperties: false`. Agent bodies do not: an
//!   agent newer than the service may send fields it does not know yet. Nor do SCIM bodies:
//!   providers send extension attributes this service ignores (RFC 7643 §3.3).
//!
//! Response fields that are sent as `null` say so themselves (`#[oai(nullable)]`), beside the
//! field; fields that are left out instead (`skip_serializing_if_is_none`) are simply optional.
//!
//! [`AllowedMethods`] adds the `Allow` header RFC 9110 requires on every 405.

use std::collections::{BTreeSet, HashMap};

use poem::{
    Endpoint, Middleware, Request, Result,
    endpoint::BoxEndpoint,
    error::MethodNotAllowedError,
    http::{HeaderValue, Method},
};
use poem_openapi::{
    OpenApi,
    registry::{MetaApi, MetaParamIn, MetaSchema, Registry},
};
use serde_json::{Map, Value};

use crate::{
    http::error::{self, PayloadTooLarge},
    http::middleware::ExtraHeaders,
    http::middleware::OwnErrors,
    http::paging::MAX_LIMIT,
};

/// What `crate::http::paging::Cursor::decode` accepts: nothing, or 26 base32 characters of an id.
const CURSOR_PATTERN: &str = "^([0-7][0-9a-hjkmnp-tv-z]{25})?$";

/// All operations, with the answers the edge adds to them documented.
/// `P`'s paths document their own errors ([`OwnErrors`]): the edge adds none to them.
pub struct Documented<T, P = ()>(pub T, pub std::marker::PhantomData<P>);

impl<T: OpenApi, P: OwnErrors> Documented<T, P> {
    pub fn new(apis: T) -> Self {
        Documented(apis, std::marker::PhantomData)
    }
}

impl<T: OpenApi, P: OwnErrors> OpenApi for Documented<T, P> {
    fn meta() -> Vec<MetaApi> {
        let mut apis = T::meta();
        for path in apis.iter_mut().flat_map(|api| api.paths.iter_mut()) {
            // The liveness probe reads no database; a protocol with its own errors (SCIM)
            // documents them.
            let liveness = path.path == crate::http::probes::LIVENESS_PATH || P::covers(&path.path);
            for operation in path.operations.iter_mut() {
                if operation.request.is_some() {
                    error::document::<PayloadTooLarge>(&mut operation.responses);
                }
                // Every operation but the liveness probe reads the database.
                if !liveness {
                    error::document_service_unavailable(&mut operation.responses);
                }
                for param in &mut operation.params {
                    if param.in_type != MetaParamIn::Query {
                        continue;
                    }
                    let shape = match param.name.as_str() {
                        "limit" => MetaSchema {
                            minimum: Some(1.0),
                            maximum: Some(f64::from(MAX_LIMIT)),
                            ..MetaSchema::ANY
                        },
                        // A list keyed by something other than an id states its own pattern.
                        "cursor" if has_pattern(&param.schema) => continue,
                        "cursor" => MetaSchema {
                            pattern: Some(CURSOR_PATTERN.to_owned()),
                            ..MetaSchema::ANY
                        },
                        _ => continue,
                    };
                    param.schema = param.schema.clone().merge(shape);
                }
            }
        }
        apis
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
        <error::Problem as poem_openapi::types::Type>::register(registry);
    }

    fn add_routes(self, route_table: &mut HashMap<String, HashMap<Method, BoxEndpoint<'static>>>) {
        self.0.add_routes(route_table);
    }
}

/// Whether a parameter's schema already states a pattern.
fn has_pattern(schema: &poem_openapi::registry::MetaSchemaRef) -> bool {
    match schema {
        poem_openapi::registry::MetaSchemaRef::Inline(schema) => schema.pattern.is_some(),
        poem_openapi::registry::MetaSchemaRef::Reference(_) => false,
    }
}

/// The generated document (JSON text) made exact, as described in the module docs.
pub fn exact(document: &str) -> String {
    let Ok(mut doc) = serde_json::from_str::<Value>(document) else {
        return document.to_owned();
    };
    let schemas = doc["components"]["schemas"]
        .as_object()
        .cloned()
        .unwrap_or_default();

    // The object schemas request bodies reach, and whether their operation denies unknown
    // fields (every member-API operation does; agent operations do not).
    let mut request_schemas: HashMap<String, bool> = HashMap::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let closed = !path.starts_with("/v1/agent/") && !path.starts_with("/scim/");
        for operation in item.as_object().into_iter().flatten().map(|(_, op)| op) {
            let mut names = BTreeSet::new();
            references(&operation["requestBody"], &mut names);
            let mut stack: Vec<String> = names.into_iter().collect();
            while let Some(name) = stack.pop() {
                if request_schemas.insert(name.clone(), closed).is_some() {
                    continue;
                }
                let mut inner = BTreeSet::new();
                references(&schemas.get(&name).cloned().unwrap_or_default(), &mut inner);
                stack.extend(inner);
            }
        }
    }

    if let Some(components) = doc
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut)
    {
        for (name, closed) in &request_schemas {
            if let Some(schema) = components.get_mut(name).and_then(Value::as_object_mut) {
                request_object(schema, *closed);
            }
        }
    }
    // Inline request bodies (rare) get the same treatment.
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let closed = !path.starts_with("/v1/agent/") && !path.starts_with("/scim/");
            for operation in item.as_object_mut().into_iter().flatten().map(|(_, op)| op) {
                // `get_mut`, not indexing: indexing a missing key would insert `null`.
                if let Some(content) = operation
                    .get_mut("requestBody")
                    .and_then(|body| body.get_mut("content"))
                    .and_then(Value::as_object_mut)
                {
                    for media in content.values_mut() {
                        if let Some(schema) = media.get_mut("schema").and_then(Value::as_object_mut)
                            && schema.get("type").and_then(Value::as_str) == Some("object")
                        {
                            request_object(schema, closed);
                        }
                    }
                }
            }
        }
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| document.to_owned())
}

/// An object schema read from a request body: optional fields accept `null`, and a closed one
/// accepts no other fields.
fn request_object(schema: &mut Map<String, Value>, closed: bool) {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return;
    }
    let required: BTreeSet<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, property) in properties.iter_mut() {
            // `null` is read as absent, also where absent means a default.
            if !required.contains(name) {
                nullable(property);
            }
        }
    }
    if closed && !schema.contains_key("additionalProperties") {
        schema.insert("additionalProperties".into(), Value::Bool(false));
    }
}

/// Marks a property schema nullable. OpenAPI 3.0 ignores siblings of `$ref`, so a reference
/// becomes `allOf: [$ref]` beside `nullable`.
fn nullable(property: &mut Value) {
    let Some(object) = property.as_object_mut() else {
        return;
    };
    if let Some(reference) = object.remove("$ref") {
        let mut wrapped = Map::new();
        wrapped.insert("$ref".into(), reference);
        object.insert("allOf".into(), Value::Array(vec![Value::Object(wrapped)]));
    }
    object.insert("nullable".into(), Value::Bool(true));
}

/// The component schema names `value` refers to.
fn references(value: &Value, names: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "$ref" {
                    if let Some(name) = inner
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    {
                        names.insert(name.to_owned());
                    }
                } else {
                    references(inner, names);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, names)),
        _ => {}
    }
}

/// The `Allow` header of a 405 (RFC 9110 §15.5.6): the methods the path's operations accept,
/// `HEAD` wherever `GET` is (poem answers it).
#[derive(Clone)]
pub struct AllowedMethods {
    paths: std::sync::Arc<Vec<(Vec<Segment>, HeaderValue)>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Parameter,
}

fn segments(template: &str) -> Vec<Segment> {
    template
        .split('/')
        .map(|s| {
            if s.starts_with('{') && s.ends_with('}') {
                Segment::Parameter
            } else {
                Segment::Literal(s.to_owned())
            }
        })
        .collect()
}

impl AllowedMethods {
    /// The table for the operations of a generated document (JSON text).
    pub fn from_document(document: &str) -> AllowedMethods {
        const ORDER: [&str; 8] = [
            "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
        ];
        let doc: Value = serde_json::from_str(document).unwrap_or_default();
        let paths = doc["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(path, item)| {
                let mut declared: BTreeSet<String> = item
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(method, _)| method.to_ascii_uppercase())
                    .collect();
                if declared.contains("GET") {
                    declared.insert("HEAD".into());
                }
                let list: Vec<&str> = ORDER
                    .into_iter()
                    .filter(|m| declared.contains(*m))
                    .collect();
                HeaderValue::from_str(&list.join(", "))
                    .ok()
                    .map(|value| (segments(path), value))
            })
            .collect();
        AllowedMethods {
            paths: std::sync::Arc::new(paths),
        }
    }

    /// The `Allow` value for a request path, if an operation's path matches it.
    pub fn allow(&self, path: &str) -> Option<&HeaderValue> {
        let parts: Vec<&str> = path.split('/').collect();
        self.paths.iter().find_map(|(template, value)| {
            let matches = template.len() == parts.len()
                && template.iter().zip(&parts).all(|(t, p)| match t {
                    Segment::Literal(l) => l == p,
                    Segment::Parameter => !str::is_empty(p),
                });
            matches.then_some(value)
        })
    }
}

impl<E: Endpoint> Middleware<E> for AllowedMethods {
    type Output = AllowedMethodsEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        AllowedMethodsEndpoint {
            inner,
            table: self.clone(),
        }
    }
}

pub struct AllowedMethodsEndpoint<E> {
    inner: E,
    table: AllowedMethods,
}

impl<E: Endpoint> Endpoint for AllowedMethodsEndpoint<E> {
    type Output = E::Output;

    // The `Allow` header travels with the 405 error as its data (`ExtraHeaders`), which the
    // edge applies to whatever answer it makes of the error.
    async fn call(&self, req: Request) -> Result<Self::Output> {
        // A `Uri` clone shares its bytes: nothing is copied for the requests that get no 405.
        let uri = req.uri().clone();
        match self.inner.call(req).await {
            Err(mut err) if err.is::<MethodNotAllowedError>() => {
                if let Some(allow) = self.table.allow(uri.path()) {
                    err.set_data(ExtraHeaders::one("allow", allow.clone()));
                }
                Err(err)
            }
            outcome => outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_request_fields_accept_null_and_closed_bodies_refuse_unknown_fields() {
        let document = serde_json::json!({
            "paths": {
                "/v1/things": {"post": {"requestBody": {"content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/NewThing"}}}}}},
                "/v1/agent/check-in": {"post": {"requestBody": {"content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/CheckIn"}}}}}},
            },
            "components": {"schemas": {
                "NewThing": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "note": {"type": "string"},
                    "tags": {"type": "array", "default": []},
                    "inner": {"$ref": "#/components/schemas/Inner"},
                }},
                "Inner": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "CheckIn": {"type": "object", "properties": {"y": {"type": "string"}}},
                "Answer": {"type": "object", "properties": {"z": {"type": "string"}}},
            }},
        });
        let exact: Value = serde_json::from_str(&exact(&document.to_string())).expect("JSON");
        let schemas = &exact["components"]["schemas"];
        assert_eq!(schemas["NewThing"]["additionalProperties"], false);
        assert_eq!(
            schemas["NewThing"]["properties"]["name"].get("nullable"),
            None
        );
        assert_eq!(schemas["NewThing"]["properties"]["note"]["nullable"], true);
        assert_eq!(schemas["NewThing"]["properties"]["tags"]["nullable"], true);
        assert_eq!(
            schemas["NewThing"]["properties"]["inner"],
            serde_json::json!({"allOf": [{"$ref": "#/components/schemas/Inner"}], "nullable": true})
        );
        assert_eq!(schemas["Inner"]["additionalProperties"], false);
        assert_eq!(schemas["CheckIn"].get("additionalProperties"), None);
        assert_eq!(schemas["CheckIn"]["properties"]["y"]["nullable"], true);
        assert_eq!(schemas["Answer"].get("additionalProperties"), None);
        assert_eq!(schemas["Answer"]["properties"]["z"].get("nullable"), None);
    }

    #[test]
    fn allow_matches_path_templates() {
        let table = AllowedMethods {
            paths: std::sync::Arc::new(vec![
                (
                    segments("/v1/orgs/{org}/hosts"),
                    HeaderValue::from_static("GET, HEAD"),
                ),
                (
                    segments("/v1/orgs/{org}/hosts/{host_id}"),
                    HeaderValue::from_static("GET, HEAD, PATCH"),
                ),
            ]),
        };
        assert_eq!(
            table
                .allow("/v1/orgs/acme/hosts/hst_1")
                .map(|v| v.as_bytes()),
            Some(&b"GET, HEAD, PATCH"[..])
        );
        assert_eq!(
            table.allow("/v1/orgs/acme/hosts").map(|v| v.as_bytes()),
            Some(&b"GET, HEAD"[..])
        );
        assert_eq!(table.allow("/v1/orgs//hosts"), None);
        assert!(table.allow("/v1/orgs/acme/groups").is_none());
    }
}
