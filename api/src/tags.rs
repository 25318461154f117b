//! OpenAPI tags: one per feature area.

use poem_openapi::Tags;

#[derive(Tags)]
pub enum Tag {
    /// Liveness and readiness of the service.
    Operations,
}
