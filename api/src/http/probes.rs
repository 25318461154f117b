//! The probes' paths (decisions §11), which the edge treats apart: logged at `debug`, and the
//! liveness probe served before the OpenAPI service (`http::health`).

/// The liveness probe's path.
pub const LIVENESS_PATH: &str = "/healthz";
/// The readiness probe's path.
pub const READINESS_PATH: &str = "/readyz";

/// The probe `path` is, if it is one.
pub fn probe(path: &str) -> Option<&'static str> {
    match path {
        LIVENESS_PATH => Some(LIVENESS_PATH),
        READINESS_PATH => Some(READINESS_PATH),
        _ => None,
    }
}
