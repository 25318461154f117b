//! People and organizations: sign-in and sessions, the caller's own account, organizations,
//! members, invitations, API tokens and the audit log.

pub mod api_tokens;
pub mod audit;
pub mod auth;
pub mod invitations;
pub mod me;
pub mod members;
pub mod orgs;
pub mod revoke;
