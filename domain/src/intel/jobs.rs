//! Update intelligence's jobs: a changelog fetched, the known-exploited catalogue and the agent
//! release manifest read.

use serde::{Deserialize, Serialize};

/// Fetch one changelog into the shared cache (decisions §16): one per distribution × source
/// package × target version, for every organization. `attempt` counts the retries before it
/// (5xx, timeout), each queued with backoff under the key
/// `changelog:{distro}:{source}:{version}:{attempt}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FetchChangelog {
    pub distro: String,
    pub source: String,
    pub version: String,
    #[serde(default)]
    pub attempt: i32,
}

// Only for the database failing: the archive's failures are retried by the job itself
// over six hours.
platform::job!(FetchChangelog, "changelog.fetch", retries = 3);

/// Load the shipped known-exploited catalogue if none is loaded, then read `KEV_URL` when
/// set. Queued by the scheduler daily with the key `kev:{day}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RefreshKev {
    /// `YYYY-MM-DD`.
    pub day: String,
}

platform::job!(RefreshKev, "kev.refresh", retries = 3);

/// Read the agent release manifest at `AGENT_MANIFEST_URL`. Queued by the scheduler hourly
/// (and so at start) with the key `manifest:{hour}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadAgentManifest {
    /// The hour this run belongs to (RFC 3339).
    pub hour: String,
}

platform::job!(ReadAgentManifest, "agent.manifest", retries = 3);
