//! One integration-test binary; a module per feature.

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

mod access_walk;
mod agent_checkin;
mod agent_impact;
mod agent_security;
mod agents;
mod auth;
mod backups;
mod billing;
mod client_address;
mod comments;
mod console;
mod email_links;
mod enrollment_tokens;
mod foundation;
mod hosts_groups;
mod impact_black_box;
mod intelligence;
mod members;
mod metrics;
mod notifications;
mod openapi;
mod people_only;
mod policy_scope;
mod proposal_impact;
mod proposals;
mod queue;
mod rate_limits;
mod reboots;
mod replicas;
mod retention;
mod rollout_black_box;
mod rollout_replicas;
mod rollouts;
mod scim;
mod shutdown;
mod sso;
mod streaming;
mod unavailable;
