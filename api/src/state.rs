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

impl AppState {
    /// The state a request carries (the application adds it to every request).
    pub fn of(req: &poem::Request) -> Result<&AppState, crate::http::error::ApiError> {
        req.data::<AppState>().ok_or_else(|| {
            crate::http::error::ApiError::Internal(anyhow::anyhow!(
                "the application state is missing"
            ))
        })
    }

    /// The key that seals stored credentials (`what`), or 503 `not-configured`.
    pub fn sealing_key(&self, what: &str) -> Result<[u8; 32], crate::http::error::ApiError> {
        self.config
            .secrets_key
            .as_ref()
            .map(|k| *k.expose())
            .ok_or_else(|| {
                crate::http::error::ApiError::NotConfigured(format!(
                    "SECRETS_KEY is not set: this deployment cannot encrypt {what}."
                ))
            })
    }
}
