//! What every handler can reach: configuration, the database, the job queue and the clock.

use std::sync::Arc;

use platform::{
    agent_ca::AgentCa, clock::SharedClock, config::Config, db::Database, jobs::Queue,
    outbound::Outbound,
};

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub db: Database,
    pub queue: Queue,
    pub clock: SharedClock,
    /// Certifies agents' keys.
    pub agent_ca: Arc<AgentCa>,
    /// The one outbound HTTP client (decisions §13): the payment processor, and every other
    /// peer the service calls.
    pub outbound: Outbound,
    /// Identity providers' discovery documents and key sets, cached per issuer.
    pub sso: Arc<crate::sso::provider::Providers>,
    /// Who is calling, kept between requests (trusted only while nothing it depends on changed).
    pub identity: Arc<crate::http::identity_cache::IdentityCache>,
    /// Organizations' request limits, when this replica keeps them (`RATE_LIMIT_STORE=memory`).
    pub buckets: Arc<crate::http::rate_limit::Buckets>,
    /// Certified agent keys this process has seen (what never changes about them).
    pub agent_keys: Arc<crate::agent::keys::KeyCache>,
}
