//! API tokens (`atk_` records, `sat_…` values): created by an admin with a role no higher than
//! their own, shown once, stored as a hash, revocable. Creating and revoking need a person: an
//! API token can neither mint another (a leaked short-lived one would make itself permanent)
//! nor revoke one.

use chrono::{DateTime, Utc};
use entities::api_tokens;
use platform::ids::ApiTokenId;
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
};
use sea_orm::{ActiveModelTrait, Set};

use crate::{
    AppState,
    http::access::{API_TOKEN_PREFIX, org},
    http::error::ApiError,
    http::error::{OrgInputErrors, OrgReadErrors},
    http::input,
    http::paging::{Order, Page, Paging},
    http::rights::{Administer, AdministerInPerson},
    http::tags::Tag,
    http::text::{Name, RoleText},
    identity::audit::Entry,
    identity::revoke::revoke,
};

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct NewApiToken {
    /// What the token is for.
    #[oai(validator(max_length = 255))]
    pub name: Name,
    /// owner, admin, operator or viewer; no higher than the creator's own role.
    #[oai(validator(max_length = 16))]
    pub role: RoleText,
    /// When it stops working; absent never expires. Must be in the future.
    pub expires_at: Option<DateTime<Utc>>,
}

/// An API token record; the value itself only in the create answer.
#[derive(Object)]
pub struct ApiTokenRecord {
    /// `atk_` id: the record, not the credential.
    pub id: ApiTokenId,
    pub name: String,
    pub role: String,
    /// The `sat_…` value: shown once, in the create answer only; only its hash is kept.
    #[oai(skip_serializing_if_is_none)]
    pub token: Option<String>,
    pub created_at: DateTime<Utc>,
    #[oai(nullable)]
    pub expires_at: Option<DateTime<Utc>>,
    #[oai(nullable)]
    pub last_used_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(ApiResponse)]
pub enum Created {
    /// Created. Store `token` now: it is never shown again.
    #[oai(status = 201)]
    Created(Json<ApiTokenRecord>),
}

#[derive(ApiResponse)]
pub enum Revoked {
    /// Revoked: refused from the next request on.
    #[oai(status = 204)]
    Revoked,
}

fn record(row: api_tokens::Model, token: Option<String>) -> ApiTokenRecord {
    ApiTokenRecord {
        id: ApiTokenId::from(row.id),
        name: row.name,
        role: row.role,
        token,
        created_at: row.created_at,
        expires_at: row.expires_at,
        last_used_at: row.last_used_at,
        revoked_at: row.revoked_at,
    }
}

pub struct ApiTokensApi;

#[OpenApi(tag = "Tag::ApiTokens")]
impl ApiTokensApi {
    /// Create an API token. Its role may be no higher than the caller's (403 `forbidden`); the
    /// value is shown once.
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/api-tokens",
        method = "post",
        operation_id = "createApiToken"
    )]
    async fn create(
        &self,
        org: org::Path<AdministerInPerson>,
        state: poem::web::Data<&AppState>,
        body: Json<NewApiToken>,
    ) -> Result<Created, OrgInputErrors> {
        let name = input::name("name", &body.name)?;
        let role = input::role("role", &body.role)?;
        let now = state.clock.now();
        let expires_at = input::future("expires_at", body.expires_at, now)?;
        if !org.role.at_least(role) {
            return Err(ApiError::forbidden(format!(
                "A token's role can be no higher than yours ({}).",
                org.role
            ))
            .into());
        }
        let token = platform::secrets::mint(API_TOKEN_PREFIX);
        let txn = state.db.begin_write().await?;
        let row = api_tokens::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            name: Set(name),
            role: Set(role.as_str().to_owned()),
            token_hash: Set(token.hash.clone()),
            created_by: Set(org.caller.account_id()),
            created_at: Set(now),
            expires_at: Set(expires_at),
            last_used_at: Set(None),
            revoked_at: Set(None),
        }
        .insert(&txn)
        .await?;
        Entry::new("api_token.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(ApiTokenId::from(row.id))
            .details(serde_json::json!({ "name": row.name, "role": row.role }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Created::Created(Json(record(row, Some(token.value)))))
    }

    /// The organization's API tokens, newest first, without their values.
    #[oai(
        path = "/v1/orgs/:org/api-tokens",
        method = "get",
        operation_id = "listApiTokens"
    )]
    async fn list(
        &self,
        org: org::Path<Administer>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<ApiTokenRecord>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let rows = org.scope().rows::<api_tokens::Entity>();
        let rows = paging
            .fetch(&state.db.orm, rows, Order::NewestFirst)
            .await?;
        Ok(Json(rows.page(|r| record(r, None))))
    }

    /// Revoke an API token: refused from the next request on. An already revoked token is 404
    /// `not-found`.
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/api-tokens/:api_token_id",
        method = "delete",
        operation_id = "revokeApiToken"
    )]
    async fn revoke(
        &self,
        org: org::Path<AdministerInPerson>,
        state: poem::web::Data<&AppState>,
        /// The token's record id (`atk_`).
        api_token_id: Path<ApiTokenId>,
    ) -> Result<Revoked, OrgReadErrors> {
        revoke(&state, &org, *api_token_id).await?;
        Ok(Revoked::Revoked)
    }
}
