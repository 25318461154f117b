//! Billing's jobs: a day's usage rolled up and reported to the payment processor.

use serde::{Deserialize, Serialize};

/// Roll up one UTC day's billable host-days into active hosts per organization. Idempotent:
/// running it again rewrites the same numbers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RollupUsage {
    /// `YYYY-MM-DD`.
    pub day: chrono::NaiveDate,
}

platform::job!(RollupUsage, "billing.rollup", retries = 5);

/// Report usage to the payment processor (decisions §17). Without `org_id`: the daily run the
/// scheduler queues after 00:10 UTC for yesterday, which queues one job per organization with a
/// live subscription (and again for any of its days of the last 30 not reported yet). With
/// `org_id`: that organization's day, sent once (identifier and `Idempotency-Key`
/// `<org>:<day>`) and marked `reported` only after the processor accepted it; a failure
/// retries with backoff.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BillingReport {
    pub day: chrono::NaiveDate,
    #[serde(default)]
    pub org_id: Option<uuid::Uuid>,
}

// With backoff from 1 s to 60 s: about eight minutes of retries before the job fails;
// the next daily run queues the day again.
platform::job!(BillingReport, "billing.report", retries = 12);
