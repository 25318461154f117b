//! One integration-test binary; a module per feature.

mod access_walk;
mod foundation;
mod openapi;
mod queue;
mod rate_limits;
