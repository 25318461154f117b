//! What the api, worker and scheduler binaries share: configuration, the database and its
//! migrations, job payloads and the queue, identifiers and the clock. No product rule lives
//! here: those are `domain`'s.

pub mod agent_ca;
pub mod backup;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod db;
pub mod dns;
pub mod every;
pub mod identity_changes;
pub mod ids;
pub mod jobs;
pub mod metrics;
pub mod oidc_http;
pub mod outbound;
pub mod payment_signature;
pub mod payments_api;
pub mod queue_schema;
pub mod runtime;
pub mod secrets;
