//! The agent protocol of decisions §6, once: the JSON the agent and the service exchange
//! ([`wire`]) and the RFC 9421 HTTP Message Signatures with RFC 9530 `Content-Digest` that
//! authenticate every agent call after enrolment ([`signature`]: the signature base is built in
//! exactly one place, for signing and for verifying).
//!
//! The api, `fleet-sim` and `fleet-agent` all use this crate. It links no service code (no
//! database, web or job crate), so the agent stays small; the api turns on the `openapi`
//! feature, which derives the poem-openapi schemas of the wire types, so the OpenAPI document
//! describes exactly these types.

pub mod signature;
pub mod wire;
