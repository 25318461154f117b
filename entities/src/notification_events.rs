//! The notification outbox: one row per event (`proposal.approved`, `host.offline`, …),
//! written in the transaction of the change it tells of, so an event is never lost and never
//! sent for a change that rolled back. Dispatching turns it into deliveries.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// The event type, e.g. `proposal.approved`.
    pub kind: String,
    /// The public id of what it is about (`prp_…`, `hst_…`, `nch_…`).
    pub subject: Option<String>,
    /// Only this channel (a `test` event); null routes by each channel's `events`.
    pub channel_id: Option<Uuid>,
    /// JSON object: the event's `data` as receivers get it.
    pub data: crate::json::JsonText<serde_json::Value>,
    pub created_at: DateTimeUtc,
    /// When its deliveries were made; null while waiting.
    pub dispatched_at: Option<DateTimeUtc>,
}

crate::no_relations!();
