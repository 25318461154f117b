//! The edge: errors, extractors (who is calling, with which role), paging,
//! input checks, rate limits, middleware, the OpenAPI document and the server. No feature lives here.

pub mod access;
pub mod client_address;
pub mod connections;
pub mod console;
pub mod error;
pub mod health;
pub mod identity_cache;
pub mod input;
pub mod middleware;
pub mod openapi;
pub mod paging;
pub mod probes;
pub mod rate_limit;
pub mod rights;
pub mod server;
pub mod tags;
pub mod text;
