//! One event sent to one channel (`dlv_`): pending until delivered, failed (after 24 hours of
//! retries, or a 410 from the receiver) or skipped (the plan lacks the channel's kind).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub channel_id: Uuid,
    pub event_id: Uuid,
    pub event_kind: String,
    /// pending, delivered, failed or skipped.
    pub status: String,
    /// Attempts made so far.
    pub attempts: i32,
    /// When the next attempt is due (pending only).
    pub next_attempt_at: Option<DateTimeUtc>,
    /// The attempt number (0-based) a job has been queued for; null when none yet.
    pub queued_attempt: Option<i32>,
    /// Why it ended as it did: `plan` for a skip, the last error for a failure.
    pub reason: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
}

crate::no_relations!();
