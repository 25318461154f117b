//! A payment processor event already received, by its id: the record that makes the webhook
//! handle each event at most once. Written in the same transaction as the event's effect.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payment_events")]
pub struct Model {
    /// The processor's event id (`evt_…`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The event's type, e.g. `customer.subscription.updated`.
    pub kind: String,
    /// The customer the event is about, when it names one.
    pub customer_id: Option<String>,
    /// The event's `created` (Unix seconds).
    pub created: i64,
    /// The organization it applied to; none when it was about nobody known (yet).
    pub org_id: Option<Uuid>,
    /// The event, kept only while it waits for its customer: a subscription event that
    /// arrived before the checkout that links the customer, applied when that checkout comes.
    pub payload: Option<String>,
    pub received_at: DateTimeUtc,
}

crate::no_relations!();
