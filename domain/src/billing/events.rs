//! The payment processor's events (decisions §17), each handled at most once.
//!
//! Every event is recorded by its id in `payment_events` in the same transaction as its
//! effect; a second delivery finds the record and changes nothing (also when two deliveries
//! race: the second insert waits for the first transaction and then finds the key taken).
//! Events about nobody this service knows are recorded and ignored, except a subscription
//! event whose customer no checkout has linked yet: it is kept and applied when the checkout
//! arrives, so that order of delivery does not matter. Of two subscription events, the newer
//! `created` wins whatever order they arrive in.

use chrono::{DateTime, NaiveDate, Utc};
use entities::scope::{AllOrgs, OrgScope, Untenanted};
use entities::{organizations, payment_events, subscriptions};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait,
    QueryFilter, QueryOrder, Set,
};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::Plan;

/// A processor event as received: its envelope, with the object it is about.
#[derive(Clone, Debug, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Unix seconds.
    pub created: i64,
    pub data: EventData,
}

#[derive(Clone, Debug, Deserialize)]
pub struct EventData {
    pub object: Value,
}

impl Event {
    /// Parses an event; `None` when the bytes are not an event (not JSON, or no id, type,
    /// created or data.object).
    pub fn parse(bytes: &[u8]) -> Option<Event> {
        serde_json::from_slice::<Event>(bytes)
            .ok()
            .filter(|e| !e.id.is_empty() && !e.kind.is_empty() && e.data.object.is_object())
    }

    /// The customer the event's object names (a string, or an expanded object's id).
    pub fn customer(&self) -> Option<String> {
        match self.data.object.get("customer") {
            Some(Value::String(id)) => Some(id.clone()),
            Some(Value::Object(expanded)) => expanded
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        }
    }

    fn text(&self, field: &str) -> Option<String> {
        self.data
            .object
            .get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    }

    fn seconds(&self, field: &str) -> Option<i64> {
        self.data.object.get(field).and_then(Value::as_i64)
    }
}

/// A subscription object's particulars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionFacts {
    pub id: String,
    pub status: Option<String>,
    /// The first item's price `lookup_key`.
    pub plan: Option<String>,
    pub current_period_end: Option<DateTime<Utc>>,
    pub billable_from: Option<NaiveDate>,
}

fn instant(seconds: Option<i64>) -> Option<DateTime<Utc>> {
    seconds.and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
}

/// The subscription an event's object is; `None` without an id.
pub fn subscription_facts(event: &Event) -> Option<SubscriptionFacts> {
    let first_item = event
        .data
        .object
        .pointer("/items/data/0")
        .cloned()
        .unwrap_or(Value::Null);
    let plan = first_item
        .pointer("/price/lookup_key")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    // Newer processor versions keep the period on the item.
    let period_end = event
        .seconds("current_period_end")
        .or_else(|| first_item.get("current_period_end").and_then(Value::as_i64));
    Some(SubscriptionFacts {
        id: event.text("id")?,
        status: event.text("status"),
        plan,
        current_period_end: instant(period_end),
        billable_from: instant(event.seconds("start_date")).map(|t| t.date_naive()),
    })
}

/// What became of an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its effect is written (in the caller's transaction).
    Applied { org_id: Uuid },
    /// Received before: nothing done again.
    Duplicate,
    /// Not about a customer or subscription of this service, of a kind not handled, or older
    /// than what is already applied: recorded, nothing changed.
    Ignored,
    /// A subscription event for a customer no checkout has linked yet: kept, and applied
    /// when the checkout arrives.
    Waiting,
}

/// What the caller does after committing: email the owners of this organization that a
/// payment failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub outcome: Outcome,
    pub payment_failed: Option<Uuid>,
}

impl Received {
    fn just(outcome: Outcome) -> Received {
        Received {
            outcome,
            payment_failed: None,
        }
    }
}

/// Handles `event` (whose exact bytes are `raw`) in `txn`, once per event id. The caller
/// commits (also for a duplicate or an ignored event, which only records it).
pub async fn receive(
    txn: &DatabaseTransaction,
    event: &Event,
    raw: &[u8],
    now: DateTime<Utc>,
) -> Result<Received, DbErr> {
    let customer = event.customer();
    let recorded = payment_events::Entity::insert(payment_events::ActiveModel {
        id: Set(event.id.clone()),
        kind: Set(event.kind.clone()),
        customer_id: Set(customer.clone()),
        created: Set(event.created),
        org_id: Set(None),
        payload: Set(None),
        received_at: Set(now),
    })
    .on_conflict_do_nothing()
    .exec_without_returning(txn)
    .await?;
    if !matches!(recorded, sea_orm::TryInsertResult::Inserted(rows) if rows > 0) {
        return Ok(Received::just(Outcome::Duplicate));
    }
    let received = match event.kind.as_str() {
        "checkout.session.completed" => checkout_completed(txn, event, customer, now).await?,
        "customer.subscription.created"
        | "customer.subscription.updated"
        | "customer.subscription.deleted" => {
            match customer.as_deref().map(|c| by_customer(txn, c)) {
                None => Received::just(Outcome::Ignored),
                Some(found) => match found.await? {
                    Some(row) => Received::just(apply_subscription(txn, row, event, now).await?),
                    None => {
                        // Kept until a checkout links the customer.
                        set_event(txn, &event.id, None, Some(raw)).await?;
                        Received::just(Outcome::Waiting)
                    }
                },
            }
        }
        "invoice.payment_failed" => payment_failed(txn, event, customer, now).await?,
        _ => Received::just(Outcome::Ignored),
    };
    if let Outcome::Applied { org_id } = received.outcome {
        set_event(txn, &event.id, Some(org_id), None).await?;
    }
    Ok(received)
}

/// The subscription row of `customer`, locked for the rest of the transaction on Postgres so
/// that two events about one subscription decide "newer wins" one after the other (SQLite's
/// write transactions already do).
async fn by_customer<C: ConnectionTrait>(
    db: &C,
    customer: &str,
) -> Result<Option<subscriptions::Model>, DbErr> {
    locked(
        db,
        AllOrgs::rows::<subscriptions::Entity>()
            .filter(subscriptions::Column::CustomerId.eq(customer)),
    )
    .one(db)
    .await
}

fn locked<C: ConnectionTrait>(
    db: &C,
    query: sea_orm::Select<subscriptions::Entity>,
) -> sea_orm::Select<subscriptions::Entity> {
    use sea_orm::QuerySelect;
    if db.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        query.lock_exclusive()
    } else {
        query
    }
}

async fn set_event<C: ConnectionTrait>(
    db: &C,
    id: &str,
    org_id: Option<Uuid>,
    payload: Option<&[u8]>,
) -> Result<(), DbErr> {
    payment_events::Entity::update_rows()
        .col_expr(
            payment_events::Column::OrgId,
            sea_orm::sea_query::Expr::value(org_id),
        )
        .col_expr(
            payment_events::Column::Payload,
            sea_orm::sea_query::Expr::value(
                payload.map(|p| String::from_utf8_lossy(p).into_owned()),
            ),
        )
        .filter(payment_events::Column::Id.eq(id))
        .exec(db)
        .await?;
    Ok(())
}

/// `checkout.session.completed`: links the customer to the organization whose slug is the
/// session's `client_reference_id`, then applies the subscription events that waited for it.
async fn checkout_completed(
    txn: &DatabaseTransaction,
    event: &Event,
    customer: Option<String>,
    now: DateTime<Utc>,
) -> Result<Received, DbErr> {
    let (Some(customer), Some(slug)) = (customer, event.text("client_reference_id")) else {
        return Ok(Received::just(Outcome::Ignored));
    };
    let Some(org) = AllOrgs::rows::<organizations::Entity>()
        .filter(organizations::Column::Slug.eq(slug.as_str()))
        .one(txn)
        .await?
    else {
        return Ok(Received::just(Outcome::Ignored));
    };
    if let Some(linked) = by_customer(txn, &customer).await?
        && linked.org_id != org.id
    {
        tracing::warn!(event = %event.id, "checkout names a customer linked to another organization; ignored");
        return Ok(Received::just(Outcome::Ignored));
    }
    let row = match locked(txn, OrgScope::of(org.id).rows::<subscriptions::Entity>())
        .one(txn)
        .await?
    {
        Some(row) => {
            let mut linked: subscriptions::ActiveModel = row.into();
            linked.customer_id = Set(Some(customer.clone()));
            linked.updated_at = Set(now);
            linked.update(txn).await?
        }
        None => {
            subscriptions::ActiveModel {
                customer_id: Set(Some(customer.clone())),
                ..super::lookup::unlinked(org.id, now)
            }
            .insert(txn)
            .await?
        }
    };
    // The subscription events that arrived first, oldest first (the newest wins anyway).
    let waiting = payment_events::Entity::rows()
        .filter(payment_events::Column::CustomerId.eq(customer.as_str()))
        .filter(payment_events::Column::OrgId.is_null())
        .filter(payment_events::Column::Payload.is_not_null())
        .order_by_asc(payment_events::Column::Created)
        .all(txn)
        .await?;
    let mut row = row;
    for kept in waiting {
        let parsed = kept
            .payload
            .as_deref()
            .and_then(|p| Event::parse(p.as_bytes()));
        if let Some(parsed) = parsed {
            apply_subscription(txn, row.clone(), &parsed, now).await?;
            row = OrgScope::of(org.id)
                .rows::<subscriptions::Entity>()
                .one(txn)
                .await?
                .unwrap_or(row);
        }
        set_event(txn, &kept.id, Some(org.id), None).await?;
    }
    Ok(Received::just(Outcome::Applied { org_id: org.id }))
}

/// Whether an event created at `created` is older than what the row already holds.
fn stale(row: &subscriptions::Model, created: i64) -> bool {
    row.event_created.is_some_and(|applied| created < applied)
}

/// `customer.subscription.created|updated|deleted` for a linked customer.
async fn apply_subscription(
    txn: &DatabaseTransaction,
    row: subscriptions::Model,
    event: &Event,
    now: DateTime<Utc>,
) -> Result<Outcome, DbErr> {
    let Some(facts) = subscription_facts(event) else {
        return Ok(Outcome::Ignored);
    };
    if stale(&row, event.created) {
        return Ok(Outcome::Ignored);
    }
    let deleted = event.kind == "customer.subscription.deleted";
    if deleted
        && row
            .subscription_id
            .as_deref()
            .is_some_and(|current| current != facts.id)
    {
        // The end of a subscription the organization has since replaced.
        return Ok(Outcome::Ignored);
    }
    let org_id = row.org_id;
    let mut changed: subscriptions::ActiveModel = row.into();
    if deleted {
        changed.plan = Set(Some(Plan::Free.to_string()));
        changed.status = Set(Some(facts.status.unwrap_or_else(|| "canceled".into())));
    } else {
        if let Some(plan) = facts.plan {
            changed.plan = Set(Some(plan));
        }
        changed.status = Set(facts.status);
        changed.billable_from = Set(facts.billable_from);
    }
    changed.subscription_id = Set(Some(facts.id));
    changed.current_period_end = Set(facts.current_period_end);
    changed.event_created = Set(Some(event.created));
    changed.updated_at = Set(now);
    changed.update(txn).await?;
    Ok(Outcome::Applied { org_id })
}

/// `invoice.payment_failed`: the subscription is `past_due` (unless a newer event said
/// otherwise) and the owners are told.
async fn payment_failed(
    txn: &DatabaseTransaction,
    event: &Event,
    customer: Option<String>,
    now: DateTime<Utc>,
) -> Result<Received, DbErr> {
    let Some(row) = (match customer {
        Some(customer) => by_customer(txn, &customer).await?,
        None => None,
    }) else {
        return Ok(Received::just(Outcome::Ignored));
    };
    let org_id = row.org_id;
    if !stale(&row, event.created) {
        let mut changed: subscriptions::ActiveModel = row.into();
        changed.status = Set(Some("past_due".into()));
        changed.event_created = Set(Some(event.created));
        changed.updated_at = Set(now);
        changed.update(txn).await?;
    }
    Ok(Received {
        outcome: Outcome::Applied { org_id },
        payment_failed: Some(org_id),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_needs_an_id_a_type_a_time_and_an_object() {
        assert!(Event::parse(b"not json").is_none());
        assert!(Event::parse(br#"{"id":"evt_1","type":"x","created":1}"#).is_none());
        assert!(
            Event::parse(br#"{"id":"","type":"x","created":1,"data":{"object":{}}}"#).is_none()
        );
        assert!(
            Event::parse(br#"{"id":"evt_1","type":"x","created":"1","data":{"object":{}}}"#)
                .is_none()
        );
        let event =
            Event::parse(br#"{"id":"evt_1","type":"x","created":1,"data":{"object":{"customer":{"id":"cus_9"}}}}"#)
                .expect("an event");
        assert_eq!(event.customer().as_deref(), Some("cus_9"));
    }

    #[test]
    fn a_subscription_object_gives_plan_status_period_and_start_day() {
        let event = Event::parse(include_bytes!(
            "../../../platform/testdata/payment-signature-body.json"
        ))
        .expect("the vector's event");
        let facts = subscription_facts(&event).expect("a subscription");
        assert_eq!(facts.id, "sub_1QxExample");
        assert_eq!(facts.plan.as_deref(), Some("business"));
        assert_eq!(facts.status.as_deref(), Some("active"));
        assert_eq!(
            facts.current_period_end.map(|t| t.timestamp()),
            Some(1769904000)
        );
        assert_eq!(
            facts.billable_from.map(|d| d.to_string()).as_deref(),
            Some("2026-01-01")
        );
    }
}
