//! One integration-test binary; a module per feature.

mod access_walk;
mod agent_checkin;
mod agent_impact;
mod agent_security;
mod agents;
mod auth;
mod billing;
mod client_address;
mod comments;
mod email_links;
mod enrollment_tokens;
mod foundation;
mod hosts_groups;
mod intelligence;
mod members;
mod notifications;
mod openapi;
mod people_only;
mod policy_scope;
mod proposals;
mod queue;
mod rate_limits;
mod replicas;
mod scim;
mod sso;
mod streaming;
