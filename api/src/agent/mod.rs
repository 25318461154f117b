//! The agent protocol (decisions §6): `/v1/agent/*`, no session and no organization rate
//! limit; every call but enrolment is signed with the key the service certified (RFC 9421).

pub mod api;
pub mod body;
pub mod ca;
pub mod jobs;
pub mod keys;
pub mod limits;
pub mod signed;
pub mod store;
pub mod validate;
