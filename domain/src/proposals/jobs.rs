//! The proposals' job: the timers of scheduled and snoozed proposals.

use serde::{Deserialize, Serialize};

/// Move proposals whose time has come: `scheduled` ones whose window opened go ahead, and
/// `snoozed` ones whose snooze ran out reopen. Queued by the scheduler when one is due.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProposalTimers {
    /// The second this run belongs to (RFC 3339); also its idempotency key.
    pub at: String,
}

platform::job!(ProposalTimers, "proposal.timers", retries = 5);
