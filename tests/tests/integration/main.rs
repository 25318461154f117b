//! One integration-test binary; a module per feature.

mod foundation;
mod openapi;
mod queue;
