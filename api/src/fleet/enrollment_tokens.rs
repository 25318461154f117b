//! Enrollment tokens: the `enr_` credentials hosts enrol with. The value is shown once and only
//! its hash kept; a use is charged on a host's first check-in, never at enrolment.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use entities::{enrollment_tokens, json::JsonText};
use platform::ids::EnrollmentTokenId;
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
};
use sea_orm::{ActiveModelTrait, Set};

use crate::{
    AppState,
    http::access::org,
    http::error::ApiError,
    http::error::{OrgInputErrors, OrgReadErrors},
    http::input,
    http::paging::{Order, Page, Paging},
    http::rights::Manage,
    http::tags::Tag,
    http::text::{Name, Text},
    identity::audit::Entry,
    identity::revoke::revoke,
};

pub const TOKEN_PREFIX: &str = "enr_";

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct NewEnrollmentToken {
    /// What the token is for (1–255 characters).
    #[oai(validator(max_length = 255))]
    pub name: Name,
    /// Put on every host that enrols with it: at most 64; keys 1–63 letters, digits, `-`, `_`,
    /// `.`, `/`; values at most 255 characters.
    #[oai(default)]
    pub labels: BTreeMap<String, Text>,
    /// At least 1; absent or null is unlimited.
    #[oai(validator(minimum(value = "1")))]
    pub max_uses: Option<i32>,
    /// Not in the past; absent or null never expires.
    pub expires_at: Option<DateTime<Utc>>,
}

/// An enrollment token record.
#[derive(Object)]
pub struct EnrollmentToken {
    /// `etk_` id: the record, not the credential.
    pub id: EnrollmentTokenId,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Absent is unlimited.
    #[oai(skip_serializing_if_is_none)]
    pub max_uses: Option<i32>,
    /// Hosts that enrolled and then checked in; charged on first check-in.
    pub uses: i32,
    /// Absent never expires.
    #[oai(skip_serializing_if_is_none)]
    pub expires_at: Option<DateTime<Utc>>,
    #[oai(nullable)]
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// True when not revoked, not expired and not used up.
    pub usable: bool,
    /// The `enr_` value: in the create answer only, shown once; only its hash is kept.
    #[oai(skip_serializing_if_is_none)]
    pub token: Option<String>,
}

#[derive(ApiResponse)]
pub enum Created {
    /// Created. Store `token` now: it is never shown again.
    #[oai(status = 201)]
    Created(Json<EnrollmentToken>),
}

#[derive(ApiResponse)]
pub enum Revoked {
    /// Revoked; hosts it already enrolled are unaffected.
    #[oai(status = 204)]
    Revoked,
}

/// Whether a token can admit a host at `now`.
pub fn usable(row: &enrollment_tokens::Model, now: DateTime<Utc>) -> bool {
    row.revoked_at.is_none()
        && row.expires_at.is_none_or(|at| at > now)
        && row.max_uses.is_none_or(|max| row.uses < max)
}

fn record(
    row: enrollment_tokens::Model,
    now: DateTime<Utc>,
    token: Option<String>,
) -> Result<EnrollmentToken, ApiError> {
    Ok(EnrollmentToken {
        id: EnrollmentTokenId::from(row.id),
        usable: usable(&row, now),
        labels: row.labels.read()?,
        name: row.name,
        max_uses: row.max_uses,
        uses: row.uses,
        expires_at: row.expires_at,
        revoked_at: row.revoked_at,
        created_at: row.created_at,
        token,
    })
}

type ReadErrors = OrgReadErrors;

pub struct EnrollmentTokensApi;

#[OpenApi(tag = "Tag::EnrollmentTokens")]
impl EnrollmentTokensApi {
    /// Create an enrollment token. 400 `invalid-request` for no name, a limit below one, an
    /// expiry in the past, or invalid labels.
    #[oai(
        path = "/v1/orgs/:org/enrollment-tokens",
        method = "post",
        operation_id = "createEnrollmentToken"
    )]
    async fn create(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        body: Json<NewEnrollmentToken>,
    ) -> Result<Created, OrgInputErrors> {
        let name = input::name("name", &body.name)?;
        let labels = input::labels("labels", &body.labels)?;
        if body.max_uses.is_some_and(|n| n < 1) {
            return Err(
                ApiError::invalid("max_uses must be at least 1, or absent for unlimited").into(),
            );
        }
        let now = state.clock.now();
        let expires_at = input::future("expires_at", body.expires_at, now)?;
        let token = platform::secrets::mint(TOKEN_PREFIX);
        let labels_json = JsonText::new(&labels)?;
        let txn = state.db.begin_write().await?;
        let row = enrollment_tokens::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            name: Set(name),
            labels: Set(labels_json),
            token_hash: Set(token.hash.clone()),
            max_uses: Set(body.max_uses),
            uses: Set(0),
            expires_at: Set(expires_at),
            revoked_at: Set(None),
            created_by: Set(org.caller.account_id()),
            created_at: Set(now),
        }
        .insert(&txn)
        .await?;
        Entry::new("enrollment_token.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(EnrollmentTokenId::from(row.id))
            .details(serde_json::json!({ "name": row.name, "max_uses": row.max_uses }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Created::Created(Json(record(row, now, Some(token.value))?)))
    }

    /// The organization's enrollment tokens, newest first, without their values.
    #[oai(
        path = "/v1/orgs/:org/enrollment-tokens",
        method = "get",
        operation_id = "listEnrollmentTokens"
    )]
    async fn list(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<EnrollmentToken>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let rows = org.scope().rows::<enrollment_tokens::Entity>();
        let rows = paging
            .fetch(&state.db.orm, rows, Order::NewestFirst)
            .await?;
        let now = state.clock.now();
        Ok(Json(rows.try_page(|r| record(r, now, None))?))
    }

    /// One enrollment token record, without its value.
    #[oai(
        path = "/v1/orgs/:org/enrollment-tokens/:token_id",
        method = "get",
        operation_id = "getEnrollmentToken"
    )]
    async fn get(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The record's id (`etk_`).
        token_id: Path<EnrollmentTokenId>,
    ) -> Result<Json<EnrollmentToken>, ReadErrors> {
        let row = org.scope().get(&state.db.orm, *token_id).await?;
        Ok(Json(record(row, state.clock.now(), None)?))
    }

    /// Revoke an enrollment token; hosts it already enrolled are unaffected. An already revoked
    /// token, or one of another organization, is 404 `not-found`.
    #[oai(
        path = "/v1/orgs/:org/enrollment-tokens/:token_id",
        method = "delete",
        operation_id = "revokeEnrollmentToken"
    )]
    async fn revoke(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The record's id (`etk_`).
        token_id: Path<EnrollmentTokenId>,
    ) -> Result<Revoked, ReadErrors> {
        revoke(&state, &org, *token_id).await?;
        Ok(Revoked::Revoked)
    }
}
