//! Notification channels (`nch_`): slack, teams, email, ntfy, pagerduty and webhook. A
//! configuration is checked per kind, its URLs against the guard on private destinations,
//! sealed with AES-256-GCM under `SECRETS_KEY` (a fresh nonce on every write) and never
//! returned; `display` tells channels apart. A webhook's `whsec_` signing secret is generated
//! here and shown only in the answer that creates or replaces the configuration.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use domain::notifications::{
    ChannelKind, EventKind,
    config::{self, ChannelConfig},
    outbox,
};
use entities::{json::JsonText, notification_channels, notification_events};
use platform::ids::{ChannelId, OrgId};
use poem_openapi::{
    ApiResponse, Enum, Object, OpenApi, param::Path, payload::Json, types::MaybeUndefined,
};
use sea_orm::{ActiveModelTrait, QueryOrder, Set};
use serde_json::json;

use crate::{
    AppState,
    http::access::org,
    http::error::{
        ApiError, BadRequest, Conflict, Errors, Forbidden, NotConfigured, NotFound, OrgReadErrors,
        TooManyRequests, Unauthorized,
    },
    http::input,
    http::rights::Manage,
    http::tags::Tag,
    http::text::Name,
    identity::audit::Entry,
};

/// A kind of channel.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename = "NotificationChannelKind", rename_all = "lowercase")]
pub enum Kind {
    Slack,
    Teams,
    Email,
    Ntfy,
    Pagerduty,
    Webhook,
}

impl From<Kind> for ChannelKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Slack => ChannelKind::Slack,
            Kind::Teams => ChannelKind::Teams,
            Kind::Email => ChannelKind::Email,
            Kind::Ntfy => ChannelKind::Ntfy,
            Kind::Pagerduty => ChannelKind::Pagerduty,
            Kind::Webhook => ChannelKind::Webhook,
        }
    }
}

/// An event type a channel can ask for.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename = "NotificationEventType")]
pub enum EventType {
    #[oai(rename = "proposal.opened")]
    ProposalOpened,
    #[oai(rename = "proposal.approved")]
    ProposalApproved,
    #[oai(rename = "proposal.scheduled")]
    ProposalScheduled,
    #[oai(rename = "proposal.applied")]
    ProposalApplied,
    #[oai(rename = "proposal.failed")]
    ProposalFailed,
    /// A rollout halted (decisions §20): its failure budget was reached, a wave's results fell
    /// below its `success_percent`, or someone halted it. PagerDuty: a `trigger`.
    #[oai(rename = "proposal.halted")]
    ProposalHalted,
    #[oai(rename = "host.enrolled")]
    HostEnrolled,
    #[oai(rename = "host.offline")]
    HostOffline,
    #[oai(rename = "advisory.known_exploited")]
    AdvisoryKnownExploited,
}

impl From<EventType> for EventKind {
    fn from(kind: EventType) -> Self {
        match kind {
            EventType::ProposalOpened => EventKind::ProposalOpened,
            EventType::ProposalApproved => EventKind::ProposalApproved,
            EventType::ProposalScheduled => EventKind::ProposalScheduled,
            EventType::ProposalApplied => EventKind::ProposalApplied,
            EventType::ProposalFailed => EventKind::ProposalFailed,
            EventType::ProposalHalted => EventKind::ProposalHalted,
            EventType::HostEnrolled => EventKind::HostEnrolled,
            EventType::HostOffline => EventKind::HostOffline,
            EventType::AdvisoryKnownExploited => EventKind::AdvisoryKnownExploited,
        }
    }
}

#[derive(Object)]
#[oai(rename = "NewNotificationChannel", deny_unknown_fields)]
pub struct NewChannel {
    pub kind: Kind,
    /// Unique in the organization (1–255 characters).
    #[oai(validator(max_length = 255))]
    pub name: Name,
    /// The kind's fields (written, sealed, never returned): slack and teams `{webhook_url}`;
    /// email `{to: [addresses]}` (1–50); ntfy `{topic_url, token?}`; pagerduty
    /// `{routing_key}`; webhook `{url}` (its signing secret is generated, never supplied).
    /// URLs must be https (ntfy may be http only where `OUTBOUND_ALLOW_PRIVATE` is set) and
    /// must not resolve to a loopback, private or link-local address. Unknown fields are
    /// refused.
    pub config: BTreeMap<String, serde_json::Value>,
    /// The event types to send; absent or null is every event.
    pub events: Option<Vec<EventType>>,
}

#[derive(Object)]
#[oai(rename = "NotificationChannelPatch", deny_unknown_fields)]
pub struct ChannelPatch {
    /// New name; absent or null leaves it.
    #[oai(validator(max_length = 255))]
    pub name: Option<Name>,
    /// A whole new configuration replacing the old (no merging); absent or null leaves it.
    /// Replacing a webhook's configuration generates a new signing secret, returned once.
    pub config: Option<BTreeMap<String, serde_json::Value>>,
    /// The event types to send; null is every event; absent leaves the filter.
    pub events: MaybeUndefined<Vec<EventType>>,
}

/// A notification channel, without its configuration.
#[derive(Object)]
#[oai(rename = "NotificationChannel")]
pub struct Channel {
    /// `nch_` id.
    pub id: ChannelId,
    /// slack, teams, email, ntfy, pagerduty or webhook.
    pub kind: String,
    pub name: String,
    /// Enough to tell channels apart, never enough to use one: the host of a URL, masked
    /// addresses, the last characters of a key.
    pub display: String,
    /// The event types it is sent; null is every event.
    #[oai(nullable)]
    pub events: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The webhook's `whsec_` signing secret: only in the answer that creates the channel or
    /// replaces its configuration, never again. Receivers verify `webhook-signature` with it
    /// (Standard Webhooks).
    #[oai(skip_serializing_if_is_none)]
    pub signing_secret: Option<String>,
}

pub fn channel_view(row: notification_channels::Model, signing_secret: Option<String>) -> Channel {
    Channel {
        id: ChannelId::from(row.id),
        events: domain::notifications::routing::parse_filter(row.events.as_ref()),
        kind: row.kind,
        name: row.name,
        display: row.display,
        created_at: row.created_at,
        updated_at: row.updated_at,
        signing_secret,
    }
}

#[derive(ApiResponse)]
pub enum Created {
    /// Created. A webhook's `signing_secret` is shown here only: store it now.
    #[oai(status = 201)]
    Created(Json<Channel>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted, with its delivery log.
    #[oai(status = 204)]
    Deleted,
}

#[derive(ApiResponse)]
pub enum Queued {
    /// A `test` event is queued for this channel only; its delivery appears in the log.
    #[oai(status = 202)]
    Queued,
}

/// The stored filter for `events`: null for every event.
fn filter_json(events: Option<&[EventType]>) -> Result<Option<JsonText<Vec<String>>>, ApiError> {
    match events {
        None => Ok(None),
        Some(list) => {
            let names: Vec<String> = list
                .iter()
                .map(|e| EventKind::from(*e).as_str().to_owned())
                .collect();
            let kinds = config::check_events(&names).map_err(|e| ApiError::invalid(e.0))?;
            let names: Vec<String> = kinds.iter().map(|k| k.as_str().to_owned()).collect();
            Ok(Some(JsonText::new(&names)?))
        }
    }
}

/// Checks the configuration's URLs against the guard on private destinations (resolving them
/// now; the guard holds again on every connect) and seals it.
async fn sealed(
    state: &AppState,
    config: &ChannelConfig,
    key: &[u8; 32],
) -> Result<String, ApiError> {
    let allow_private = state.config.outbound_allow_private;
    for url in config.urls() {
        let parsed = url::Url::parse(url).map_err(|_| ApiError::invalid("config: not a URL"))?;
        platform::outbound::check_destination(&parsed, allow_private)
            .await
            .map_err(|e| ApiError::invalid(format!("config: {e}")))?;
    }
    let json = config.to_json().map_err(anyhow::Error::from)?;
    Ok(platform::crypto::seal(
        key,
        json.as_bytes(),
        config::SEALED_PURPOSE,
    ))
}

/// Tests of one channel allowed in any window of [`TEST_WINDOW_S`] (decisions §18).
const TESTS_PER_HOUR: u64 = 10;
const TEST_WINDOW_S: i64 = 3600;

/// An email channel sends only to the organization's members and to addresses at its verified
/// domains (decisions §18): 400 naming the first address that is neither.
async fn recipients_allowed<C: sea_orm::ConnectionTrait>(
    db: &C,
    org_id: uuid::Uuid,
    config: &ChannelConfig,
) -> Result<(), ApiError> {
    let ChannelConfig::Email { to } = config else {
        return Ok(());
    };
    let refused = domain::notifications::recipients::refused(db, org_id, to).await?;
    match refused.first() {
        None => Ok(()),
        Some(address) => Err(ApiError::invalid(format!(
            "config.to: {address} is neither a member of this organization nor at one of its \
             verified domains; an email channel sends only to those{}",
            match refused.len() {
                1 => String::new(),
                n => format!(" ({n} addresses are refused: {})", refused.join(", ")),
            }
        ))),
    }
}

type ReadErrors = OrgReadErrors;
type WriteErrors = Errors<(
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    TooManyRequests,
    NotConfigured,
)>;

pub struct ChannelsApi;

#[OpenApi(tag = "Tag::Notifications")]
impl ChannelsApi {
    /// The organization's notification channels, ordered by name, without their configuration.
    #[oai(
        path = "/v1/orgs/:org/notification-channels",
        method = "get",
        operation_id = "listNotificationChannels"
    )]
    async fn list(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<Vec<Channel>>, ReadErrors> {
        let rows = org
            .scope()
            .rows::<notification_channels::Entity>()
            .order_by_asc(notification_channels::Column::Name)
            .order_by_asc(notification_channels::Column::Id)
            .all(&state.db.orm)
            .await?;
        Ok(Json(
            rows.into_iter().map(|r| channel_view(r, None)).collect(),
        ))
    }

    /// Create a notification channel. 400 `invalid-request` for no name, an unknown kind, a
    /// configuration the kind does not accept (unknown or missing fields, a URL that is not
    /// https or resolves to a private address, a supplied webhook secret, more than 50
    /// addresses, an address that is neither a member's nor at one of the organization's
    /// verified domains, named in `detail`); 403 `plan-required` when the organization's plan lacks the kind (slack,
    /// teams, ntfy and pagerduty need team or above, webhook business or above; email is on
    /// every plan); 409 `conflict` when a channel has that name; 503 `not-configured` when the
    /// deployment has no `SECRETS_KEY` to encrypt credentials with. A webhook channel's
    /// `signing_secret` is in this answer only. After a downgrade a channel of a kind the plan
    /// lacks is kept, but its deliveries are recorded as `skipped` (reason `plan`).
    #[oai(
        path = "/v1/orgs/:org/notification-channels",
        method = "post",
        operation_id = "createNotificationChannel"
    )]
    async fn create(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        body: Json<NewChannel>,
    ) -> Result<Created, WriteErrors> {
        let body = body.0;
        let name = input::name("name", &body.name)?;
        let kind = ChannelKind::from(body.kind);
        let events = filter_json(body.events.as_deref())?;
        // Checked before the plan and the key so a bad request says what is wrong with it.
        let raw = serde_json::Value::Object(body.config.into_iter().collect());
        let config = ChannelConfig::check(kind, &raw, state.config.outbound_allow_private)
            .map_err(|e| ApiError::invalid(e.0))?;
        recipients_allowed(&state.db.orm, org.org_id(), &config).await?;
        let plan = domain::billing::plan_of(
            &state.db.orm,
            OrgId::from(org.org_id()),
            &domain::billing::default_plan(&state.config),
        )
        .await?;
        domain::billing::check_channel(&plan, kind.as_str()).map_err(ApiError::from)?;
        let key = state.sealing_key("channel credentials")?;
        let sealed = sealed(&state, &config, &key).await?;
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = notification_channels::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            kind: Set(kind.as_str().to_owned()),
            name: Set(name.clone()),
            display: Set(config.display()),
            config: Set(sealed),
            events: Set(events),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(|e| ApiError::name_taken(e, "notification channel", &name))?;
        Entry::new("notification_channel.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(ChannelId::from(row.id))
            .details(json!({ "name": row.name, "kind": row.kind, "display": row.display }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        let secret = config.signing_secret().map(str::to_owned);
        Ok(Created::Created(Json(channel_view(row, secret))))
    }

    /// Rename a channel, replace its whole configuration (no merging) or change its events.
    /// Replacing a webhook's configuration answers a new `signing_secret`, here only. Errors as
    /// for create; 404 `not-found` for a channel of another organization.
    #[oai(
        path = "/v1/orgs/:org/notification-channels/:channel_id",
        method = "patch",
        operation_id = "updateNotificationChannel"
    )]
    async fn patch(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The channel's id (`nch_`).
        channel_id: Path<ChannelId>,
        body: Json<ChannelPatch>,
    ) -> Result<Json<Channel>, WriteErrors> {
        let body = body.0;
        let name = body
            .name
            .as_deref()
            .map(|n| input::name("name", n))
            .transpose()?;
        let events = match &body.events {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(list) => Some(filter_json(Some(list))?),
        };
        let row = org.scope().get(&state.db.orm, *channel_id).await?;
        let kind: ChannelKind = row.kind.parse().map_err(|()| {
            ApiError::Internal(anyhow::anyhow!("a stored channel kind is unknown"))
        })?;
        let replaced = match &body.config {
            Some(fields) => {
                let raw = serde_json::Value::Object(fields.clone().into_iter().collect());
                let config = ChannelConfig::check(kind, &raw, state.config.outbound_allow_private)
                    .map_err(|e| ApiError::invalid(e.0))?;
                recipients_allowed(&state.db.orm, org.org_id(), &config).await?;
                let key = state.sealing_key("channel credentials")?;
                let sealed = sealed(&state, &config, &key).await?;
                Some((config, sealed))
            }
            None => None,
        };
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *channel_id).await?;
        let mut changed: notification_channels::ActiveModel = row.clone().into();
        if let Some(name) = &name {
            changed.name = Set(name.clone());
        }
        if let Some(events) = events {
            changed.events = Set(events);
        }
        let mut secret = None;
        if let Some((config, sealed)) = &replaced {
            changed.config = Set(sealed.clone());
            changed.display = Set(config.display());
            secret = config.signing_secret().map(str::to_owned);
        }
        changed.updated_at = Set(now);
        let updated = changed.update(&txn).await.map_err(|e| {
            ApiError::name_taken(
                e,
                "notification channel",
                name.as_deref().unwrap_or_default(),
            )
        })?;
        Entry::new("notification_channel.updated")
            .org(org.org_id())
            .by(&org.caller)
            .target(ChannelId::from(row.id))
            .details(json!({
                "name": updated.name,
                "config_replaced": replaced.is_some(),
                "display": updated.display,
            }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Json(channel_view(updated, secret)))
    }

    /// Delete a channel and its delivery log. Deliveries not yet made are not made.
    #[oai(
        path = "/v1/orgs/:org/notification-channels/:channel_id",
        method = "delete",
        operation_id = "deleteNotificationChannel"
    )]
    async fn delete(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The channel's id (`nch_`).
        channel_id: Path<ChannelId>,
    ) -> Result<Deleted, ReadErrors> {
        use sea_orm::{ColumnTrait, QueryFilter};
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *channel_id).await?;
        org.scope()
            .delete_rows::<notification_channels::Entity>()
            .filter(notification_channels::Column::Id.eq(row.id))
            .exec(&txn)
            .await?;
        Entry::new("notification_channel.deleted")
            .org(org.org_id())
            .by(&org.caller)
            .target(ChannelId::from(row.id))
            .details(json!({ "name": row.name, "kind": row.kind }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Deleted::Deleted)
    }

    /// Send a `test` event to this channel only (whatever its `events` filter says). 202: the
    /// delivery is made by a worker and appears in the channel's delivery log. At most 10 tests
    /// per channel in any hour: the 11th is 429 `rate-limited`, with `Retry-After` saying when
    /// the hour's oldest test leaves the window.
    #[oai(
        path = "/v1/orgs/:org/notification-channels/:channel_id/test",
        method = "post",
        operation_id = "testNotificationChannel"
    )]
    async fn test(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The channel's id (`nch_`).
        channel_id: Path<ChannelId>,
    ) -> Result<Queued, ReadErrors> {
        use sea_orm::{ColumnTrait, QueryFilter, QuerySelect};
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *channel_id).await?;
        // Tests of one channel take turns (SQLite's writers already do), so that two at once
        // cannot both find the hour's last place free.
        if state.db.kind() == platform::config::DatabaseKind::Postgres {
            org.scope()
                .rows::<notification_channels::Entity>()
                .filter(notification_channels::Column::Id.eq(row.id))
                .lock_exclusive()
                .one(&txn)
                .await?;
        }
        let window = now - chrono::Duration::seconds(TEST_WINDOW_S);
        let recent: Vec<chrono::DateTime<chrono::Utc>> = org
            .scope()
            .rows::<notification_events::Entity>()
            .select_only()
            .column(notification_events::Column::CreatedAt)
            .filter(notification_events::Column::ChannelId.eq(row.id))
            .filter(notification_events::Column::Kind.eq(EventKind::Test.as_str()))
            .filter(notification_events::Column::CreatedAt.gt(window))
            .order_by_asc(notification_events::Column::CreatedAt)
            .limit(TESTS_PER_HOUR)
            .into_tuple()
            .all(&txn)
            .await?;
        if recent.len() as u64 >= TESTS_PER_HOUR {
            // A place frees when the oldest test of the hour leaves it.
            let frees = recent[0] + chrono::Duration::seconds(TEST_WINDOW_S) - now;
            return Err(ApiError::RateLimited {
                retry_after_s: u64::try_from(frees.num_seconds()).unwrap_or(0).max(1),
                limit: TESTS_PER_HOUR as u32,
            }
            .into());
        }
        let id = ChannelId::from(row.id).to_string();
        outbox::emit(
            &txn,
            org.org_id(),
            EventKind::Test,
            Some(id.clone()),
            Some(row.id),
            json!({
                "channel": {"id": id, "name": row.name, "kind": row.kind},
                "message": "A test notification: this channel works.",
            }),
            now,
        )
        .await?;
        txn.commit().await?;
        domain::notifications::jobs::dispatch_soon(&state.queue).await;
        Ok(Queued::Queued)
    }
}
