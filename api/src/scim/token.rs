//! The SCIM provisioning token: one per organization, `scim_…`, shown once, only its hash kept;
//! issuing again replaces it; revoking refuses the provider's next request and leaves the
//! provisioned members as they are. The owner only, in person (decisions §3, §4, §18: the token
//! provisions anyone at the verified domains); issuing and reading need the enterprise plan
//! (`plan-required`); revoking works on any plan, so a downgraded organization can still cut
//! its provider off. The token belongs to the owner who issued it: it is revoked (recorded,
//! audited `scim.token_revoked` with the reason) as soon as they are no longer an owner.

use chrono::{DateTime, Utc};
use entities::scim_tokens;
use platform::ids::{AccountId, OrgId};
use poem_openapi::{ApiResponse, Object, OpenApi, payload::Json};
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter,
    sea_query::{Expr, OnConflict},
};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::{OrgAccess, org},
    http::error::{ApiError, OrgReadErrors},
    http::rights::IdentityProviderInPerson,
    http::tags::Tag,
    identity::audit::Entry,
};
use entities::scope::OrgScope;

/// The prefix of a SCIM provisioning token's value.
pub const SCIM_TOKEN_PREFIX: &str = "scim_";

/// SCIM token status: whether the organization has a provisioning token, and where the
/// provider sends its requests.
#[derive(Object)]
pub struct ScimTokenStatus {
    /// Where the provider sends SCIM requests: `{SERVICE_BASE_URL}/scim/v2`.
    pub base_url: String,
    pub issued: bool,
    #[oai(nullable)]
    pub issued_at: Option<DateTime<Utc>>,
    /// When the provider last used it (written at most once a minute).
    #[oai(nullable)]
    pub last_used_at: Option<DateTime<Utc>>,
    /// When the token stopped working without being replaced or revoked by hand: its issuer
    /// is no longer an owner (decisions §18). Null while it works and after a new one is
    /// issued.
    #[oai(nullable)]
    pub revoked_at: Option<DateTime<Utc>>,
    /// Why it stopped working, in words.
    #[oai(nullable)]
    pub revoked_reason: Option<String>,
    /// The `scim_…` value: in the issue answer only, shown once; only its hash is kept.
    #[oai(skip_serializing_if_is_none)]
    pub token: Option<String>,
}

#[derive(ApiResponse)]
pub enum Issued {
    /// Issued (any earlier token stops working). Store `token` now: it is never shown again.
    #[oai(status = 201)]
    Issued(Json<ScimTokenStatus>),
}

#[derive(ApiResponse)]
pub enum Revoked {
    /// Revoked: the provider's next request is refused; members stay as they are.
    #[oai(status = 204)]
    Revoked,
}

/// `{SERVICE_BASE_URL}/scim/v2`.
pub fn base_url(state: &AppState) -> String {
    format!(
        "{}/scim/v2",
        state.config.base_url.as_str().trim_end_matches('/')
    )
}

fn status(
    state: &AppState,
    row: Option<scim_tokens::Model>,
    token: Option<String>,
) -> ScimTokenStatus {
    ScimTokenStatus {
        base_url: base_url(state),
        issued: row.as_ref().is_some_and(|r| r.revoked_at.is_none()),
        issued_at: row.as_ref().map(|r| r.issued_at),
        last_used_at: row.as_ref().and_then(|r| r.last_used_at),
        revoked_at: row.as_ref().and_then(|r| r.revoked_at),
        revoked_reason: row.and_then(|r| r.revoked_reason),
        token,
    }
}

/// Why a token is revoked when its issuer stops being an owner.
pub const ISSUER_NOT_OWNER: &str =
    "Whoever issued it is no longer an owner of the organization; an owner must issue a new one.";

/// Revokes the organization's SCIM token if `account_id` issued it (decisions §18: the token
/// belongs to the owner who issued it), recording and auditing the reason. Called in the
/// transaction that makes them no longer an owner (a role change, a removal, deprovisioning),
/// after which nothing of theirs provisions anybody.
pub async fn revoke_issued_by(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    account_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let revoked = scope
        .update_rows::<scim_tokens::Entity>()
        .col_expr(scim_tokens::Column::RevokedAt, Expr::value(now))
        .col_expr(
            scim_tokens::Column::RevokedReason,
            Expr::value(ISSUER_NOT_OWNER),
        )
        .filter(scim_tokens::Column::IssuedBy.eq(account_id))
        .filter(scim_tokens::Column::RevokedAt.is_null())
        .exec(txn)
        .await?;
    if revoked.rows_affected > 0 {
        Entry::new("scim.token_revoked")
            .org(scope.org_id().uuid())
            .target(AccountId::from(account_id))
            .details(serde_json::json!({
                "reason": ISSUER_NOT_OWNER,
                "issued_by": AccountId::from(account_id).to_string(),
            }))
            .write(txn, now)
            .await?;
    }
    Ok(())
}

/// Refuses with `plan-required` unless the organization's plan includes SCIM.
pub async fn check_plan(state: &AppState, org_id: OrgId) -> Result<(), ApiError> {
    let plan = domain::billing::plan_of(
        &state.db.orm,
        org_id,
        &domain::billing::default_plan(&state.config),
    )
    .await?;
    domain::billing::check_scim(&plan)?;
    Ok(())
}

async fn gate<R>(state: &AppState, org: &OrgAccess<R>) -> Result<(), ApiError> {
    check_plan(state, OrgId::from(org.org_id())).await
}

pub struct ScimTokenApi;

#[OpenApi(tag = "Tag::Scim")]
impl ScimTokenApi {
    /// The SCIM token's status and the SCIM base URL. Needs the enterprise plan (403
    /// `plan-required`).
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/scim/token",
        method = "get",
        operation_id = "getScimToken"
    )]
    async fn get(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<ScimTokenStatus>, OrgReadErrors> {
        gate(&state, &org).await?;
        let row = org
            .scope()
            .rows::<scim_tokens::Entity>()
            .one(&state.db.orm)
            .await?;
        Ok(Json(status(&state, row, None)))
    }

    /// Issue the SCIM token (`scim_…`), shown once; issuing again replaces the previous one,
    /// which stops working at once. Needs the enterprise plan (403 `plan-required`).
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/scim/token",
        method = "post",
        operation_id = "issueScimToken"
    )]
    async fn issue(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Issued, OrgReadErrors> {
        gate(&state, &org).await?;
        let token = platform::secrets::mint(SCIM_TOKEN_PREFIX);
        let now = state.clock.now();
        let row = scim_tokens::Model {
            org_id: org.org_id(),
            token_hash: token.hash.clone(),
            issued_by: org.caller.account_id(),
            issued_at: now,
            last_used_at: None,
            revoked_at: None,
            revoked_reason: None,
        };
        let txn = state.db.begin_write().await?;
        let replaced = org
            .scope()
            .rows::<scim_tokens::Entity>()
            .one(&txn)
            .await?
            .is_some_and(|r| r.revoked_at.is_none());
        scim_tokens::Entity::insert(scim_tokens::ActiveModel {
            org_id: Set(row.org_id),
            token_hash: Set(row.token_hash.clone()),
            issued_by: Set(row.issued_by),
            issued_at: Set(row.issued_at),
            last_used_at: Set(None),
            revoked_at: Set(None),
            revoked_reason: Set(None),
        })
        .on_conflict(
            OnConflict::column(scim_tokens::Column::OrgId)
                .update_columns([
                    scim_tokens::Column::TokenHash,
                    scim_tokens::Column::IssuedBy,
                    scim_tokens::Column::IssuedAt,
                    scim_tokens::Column::LastUsedAt,
                    scim_tokens::Column::RevokedAt,
                    scim_tokens::Column::RevokedReason,
                ])
                .to_owned(),
        )
        .exec(&txn)
        .await?;
        Entry::new("scim_token.issued")
            .org(org.org_id())
            .by(&org.caller)
            .details(serde_json::json!({ "replaced": replaced }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Issued::Issued(Json(status(
            &state,
            Some(row),
            Some(token.value),
        ))))
    }

    /// Revoke the SCIM token: the provider's next request is refused (401); provisioned members
    /// stay as they are. 404 `not-found` when no token is issued. Works on every plan.
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/scim/token",
        method = "delete",
        operation_id = "revokeScimToken"
    )]
    async fn revoke(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Revoked, OrgReadErrors> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        // A token revoked already (its issuer is no longer an owner) is not there to revoke.
        let deleted = org
            .scope()
            .delete_rows::<scim_tokens::Entity>()
            .filter(scim_tokens::Column::RevokedAt.is_null())
            .exec(&txn)
            .await?;
        if deleted.rows_affected != 1 {
            return Err(ApiError::NotFound.into());
        }
        Entry::new("scim_token.revoked")
            .org(org.org_id())
            .by(&org.caller)
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Revoked::Revoked)
    }
}
