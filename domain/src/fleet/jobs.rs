//! The fleet's jobs: a host or a group evaluated again, and the minute's upkeep.

use serde::{Deserialize, Serialize};

/// Re-evaluate one host: label-group membership now; updates and proposals as they come.
/// Idempotent: evaluating the same state twice changes nothing.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvaluateHost {
    pub host_id: uuid::Uuid,
}

platform::job!(EvaluateHost, "host.evaluate", retries = 3);

/// Recompute which hosts a group's selector picks, after the selector changed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvaluateGroup {
    pub group_id: uuid::Uuid,
}

platform::job!(EvaluateGroup, "group.evaluate", retries = 3);

/// Fleet upkeep, queued every minute by the scheduler: hosts silent for three check-in
/// intervals go offline (with a `went_offline` event), stale nonces are forgotten.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FleetUpkeep {
    /// The minute this run belongs to (RFC 3339); also its idempotency key.
    pub minute: String,
}

platform::job!(FleetUpkeep, "fleet.upkeep", retries = 2);

/// How long an agent request's nonce is remembered: the signature's own window (5 minutes)
/// plus the allowed clock skew. The fleet upkeep forgets older ones.
pub const NONCE_TTL_S: i64 = 600;
