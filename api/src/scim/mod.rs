//! SCIM provisioning (decisions §15): the organization's provisioning token (issue, status,
//! revoke: [`token`]) and the SCIM 2.0 protocol an identity provider speaks at
//! `{SERVICE_BASE_URL}/scim/v2` with that token ([`v2`]).

pub mod token;
pub mod v2;
