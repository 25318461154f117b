//! The policy's job: its proposals computed again.

use serde::{Deserialize, Serialize};

/// Recompute the proposals of one policy from its hosts' available updates. Coalesced: a
/// policy is marked dirty (one row however many hosts changed) and the job claims the mark
/// before reading, so a change during a run queues exactly one more run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvaluatePolicy {
    pub policy_id: uuid::Uuid,
}

platform::job!(EvaluatePolicy, "policy.evaluate", retries = 5);
