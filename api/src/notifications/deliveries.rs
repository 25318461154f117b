//! A channel's delivery log: one entry per event sent to it (`dlv_`, the `webhook-id` of a
//! webhook delivery), newest first, each with every attempt (time, HTTP status or error,
//! duration).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entities::{notification_attempts, notification_deliveries};
use platform::ids::{ChannelId, DeliveryId};
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
    payload::Json,
};
use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::OrgInputErrors,
    http::paging::{Order, Page, Paging},
    http::rights::Manage,
    http::tags::Tag,
};
use entities::scope::Untenanted;

/// One try at a delivery.
#[derive(Object)]
#[oai(rename = "NotificationAttempt")]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: i32,
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status; null when there was no answer (a timeout, a refused
    /// destination) or for email.
    #[oai(nullable)]
    pub status_code: Option<i32>,
    /// What went wrong; null when it was delivered.
    #[oai(nullable)]
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// One event sent to one channel.
#[derive(Object)]
#[oai(rename = "NotificationDelivery")]
pub struct Delivery {
    /// `dlv_` id; a webhook receives it as `webhook-id`, the same on every attempt.
    pub id: DeliveryId,
    /// The event type, e.g. `proposal.approved`.
    pub event: String,
    /// `pending` (retried with backoff from 10 s, at most hourly, for 24 hours), `delivered`
    /// (a 2xx answer), `failed` (24 hours of failures, or a 410 from the receiver) or
    /// `skipped` (the organization's plan lacks the channel's kind: `reason` is `plan`).
    pub status: String,
    /// Why it failed or was skipped; the last error while pending.
    #[oai(nullable)]
    pub reason: Option<String>,
    /// When the next attempt is due, while pending.
    #[oai(nullable)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    #[oai(nullable)]
    pub finished_at: Option<DateTime<Utc>>,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
}

pub struct DeliveriesApi;

#[OpenApi(tag = "Tag::Notifications")]
impl DeliveriesApi {
    /// A channel's deliveries, newest first, each with its attempts.
    #[oai(
        path = "/v1/orgs/:org/notification-channels/:channel_id/deliveries",
        method = "get",
        operation_id = "listNotificationDeliveries"
    )]
    async fn list(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The channel's id (`nch_`).
        channel_id: Path<ChannelId>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Delivery>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let db = &state.db.orm;
        let channel = org.scope().get(db, *channel_id).await?;
        let rows = org
            .scope()
            .rows::<notification_deliveries::Entity>()
            .filter(notification_deliveries::Column::ChannelId.eq(channel.id));
        let rows = paging.fetch(db, rows, Order::NewestFirst).await?;
        let ids: Vec<Uuid> = rows.rows.iter().map(|r| r.id).collect();
        let mut attempts: HashMap<Uuid, Vec<Attempt>> = HashMap::new();
        if !ids.is_empty() {
            for row in notification_attempts::Entity::rows()
                .filter(notification_attempts::Column::DeliveryId.is_in(ids))
                .order_by_asc(notification_attempts::Column::Number)
                .all(db)
                .await?
            {
                attempts.entry(row.delivery_id).or_default().push(Attempt {
                    number: row.number,
                    at: row.at,
                    status_code: row.status_code,
                    error: row.error,
                    duration_ms: row.duration_ms,
                });
            }
        }
        Ok(Json(rows.page(|row| Delivery {
            id: DeliveryId::from(row.id),
            attempts: attempts.remove(&row.id).unwrap_or_default(),
            event: row.event_kind,
            status: row.status,
            reason: row.reason,
            next_attempt_at: row.next_attempt_at,
            created_at: row.created_at,
            finished_at: row.finished_at,
        })))
    }
}
