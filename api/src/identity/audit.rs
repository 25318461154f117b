//! The audit log: an append-only record of who did what, when, from where, to which object,
//! written in the same transaction as the change it records; and its listing for admins.

use chrono::{DateTime, Utc};
use entities::{audit_events, json::JsonText};
use platform::ids::{
    AccountId, ApiTokenId, AuditEventId, ChannelId, CommentId, EnrollmentTokenId, GroupId, HostId,
    InvitationId, PolicyId, ProposalId,
};
use poem_openapi::{Object, OpenApi, param::Query, payload::Json};
use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};
use uuid::Uuid;

use crate::http::error::OrgInputErrors;
use crate::{
    AppState,
    http::access::{Caller, org},
    http::error::ApiError,
    http::paging::{Order, Page, Paging},
    http::rights::Administer,
    http::tags::Tag,
};

/// An id an entry can name as its target, with the `target_kind` it is recorded under.
pub trait Target: std::fmt::Display {
    const KIND: &'static str;
}

macro_rules! targets {
    ($($id:ty => $kind:literal),* $(,)?) => {
        $(impl Target for $id {
            const KIND: &'static str = $kind;
        })*
    };
}

targets!(
    HostId => "host",
    GroupId => "group",
    PolicyId => "policy",
    ProposalId => "proposal",
    CommentId => "comment",
    AccountId => "member",
    ApiTokenId => "api_token",
    EnrollmentTokenId => "enrollment_token",
    InvitationId => "invitation",
    ChannelId => "notification_channel",
);

/// One entry to record.
pub struct Entry<'a> {
    pub org_id: Option<Uuid>,
    pub action: &'static str,
    pub target_kind: Option<&'static str>,
    pub target_id: Option<String>,
    pub details: Option<serde_json::Value>,
    pub caller: Option<&'a Caller>,
    /// For actions without a signed-in caller yet (sign-up, sign-in): who it was.
    pub account_id: Option<Uuid>,
    pub ip: Option<String>,
}

impl<'a> Entry<'a> {
    pub fn new(action: &'static str) -> Self {
        Entry {
            org_id: None,
            action,
            target_kind: None,
            target_id: None,
            details: None,
            caller: None,
            account_id: None,
            ip: None,
        }
    }

    pub fn org(mut self, org_id: Uuid) -> Self {
        self.org_id = Some(org_id);
        self
    }

    pub fn by(mut self, caller: &'a Caller) -> Self {
        self.ip = caller.ip.clone();
        self.caller = Some(caller);
        self
    }

    pub fn account(mut self, account_id: Uuid, ip: Option<String>) -> Self {
        self.account_id = Some(account_id);
        self.ip = ip;
        self
    }

    /// What the entry is about, named by its id (the kind follows from the id's type).
    pub fn target<T: Target>(mut self, id: T) -> Self {
        self.target_kind = Some(T::KIND);
        self.target_id = Some(id.to_string());
        self
    }

    /// The organization itself, named by its slug (it has no public id).
    pub fn target_organization(mut self, slug: &str) -> Self {
        self.target_kind = Some("organization");
        self.target_id = Some(slug.to_owned());
        self
    }

    pub fn details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Writes the entry on `db`, which should be the transaction making the change.
    pub async fn write<C: ConnectionTrait>(
        self,
        db: &C,
        at: DateTime<Utc>,
    ) -> Result<(), sea_orm::DbErr> {
        audit_events::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(self.org_id),
            actor_account_id: Set(self.caller.map(Caller::account_id).or(self.account_id)),
            actor_api_token_id: Set(self.caller.and_then(Caller::api_token_id)),
            action: Set(self.action.to_owned()),
            target_kind: Set(self.target_kind.map(str::to_owned)),
            target_id: Set(self.target_id),
            ip: Set(self.ip),
            details: Set(self.details.as_ref().map(JsonText::new).transpose()?),
            created_at: Set(at),
        }
        .insert(db)
        .await
        .map(|_| ())
    }
}

/// An audit event.
#[derive(Object)]
pub struct AuditEvent {
    /// The event's id.
    pub id: AuditEventId,
    /// What happened, such as `member.role_changed` or `api_token.created`.
    pub action: String,
    /// The account that acted (`usr_`), absent for the service itself.
    #[oai(nullable)]
    pub actor_id: Option<AccountId>,
    /// The API token it acted through (`atk_`), when it was one.
    #[oai(nullable)]
    pub actor_api_token_id: Option<ApiTokenId>,
    /// The kind of object acted on, such as `member` or `invitation`.
    #[oai(nullable)]
    pub target_kind: Option<String>,
    /// The object's id.
    #[oai(nullable)]
    pub target_id: Option<String>,
    /// The client's address.
    #[oai(nullable)]
    pub ip: Option<String>,
    /// Particulars of the change.
    #[oai(nullable)]
    pub details: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
}

pub struct AuditApi;

#[OpenApi(tag = "Tag::Audit")]
impl AuditApi {
    /// The organization's audit log, newest first. Owners and admins only.
    #[oai(
        path = "/v1/orgs/:org/audit-events",
        method = "get",
        operation_id = "listAuditEvents"
    )]
    async fn list(
        &self,
        org: org::Path<Administer>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<AuditEvent>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let rows = org.scope().rows::<audit_events::Entity>();
        let rows = paging
            .fetch(&state.db.orm, rows, Order::NewestFirst)
            .await?;
        let page = rows.try_page(|row| {
            Ok::<_, ApiError>(AuditEvent {
                id: row.id.into(),
                action: row.action,
                actor_id: row.actor_account_id.map(AccountId::from),
                actor_api_token_id: row.actor_api_token_id.map(ApiTokenId::from),
                target_kind: row.target_kind,
                target_id: row.target_id,
                ip: row.ip,
                details: row.details.as_ref().map(JsonText::read).transpose()?,
                created_at: row.created_at,
            })
        })?;
        Ok(Json(page))
    }
}
