//! Revoking a credential's record (an API token, an enrollment token, an invitation): one
//! conditional update in the organization's scope, so that a record already revoked (or an
//! invitation already accepted), an unknown one and another organization's all answer 404
//! `not-found`; its audit entry is written in the same transaction.

use entities::{api_tokens, enrollment_tokens, invitations};
use platform::ids::{ApiTokenId, EnrollmentTokenId, InvitationId};
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, sea_query::Expr};

use crate::{
    AppState,
    http::access::OrgAccess,
    http::error::ApiError,
    identity::audit::{Entry, Target},
};
use entities::scope::RowId;

/// A record that is revoked by setting its `revoked_at`.
pub trait Revocable: RowId + Target {
    /// The audit action, `<kind>.revoked`.
    const ACTION: &'static str;
    const REVOKED_AT: <Self::Entity as EntityTrait>::Column;

    /// What else must hold for the record to be revocable.
    fn live() -> Condition {
        Condition::all()
    }
}

impl Revocable for ApiTokenId {
    const ACTION: &'static str = "api_token.revoked";
    const REVOKED_AT: api_tokens::Column = api_tokens::Column::RevokedAt;
}

impl Revocable for EnrollmentTokenId {
    const ACTION: &'static str = "enrollment_token.revoked";
    const REVOKED_AT: enrollment_tokens::Column = enrollment_tokens::Column::RevokedAt;
}

impl Revocable for InvitationId {
    const ACTION: &'static str = "invitation.revoked";
    const REVOKED_AT: invitations::Column = invitations::Column::RevokedAt;

    /// An accepted invitation has done its work: there is nothing left to revoke.
    fn live() -> Condition {
        Condition::all().add(invitations::Column::AcceptedAt.is_null())
    }
}

/// Revokes the organization's record `id` from now on; `not-found` unless it is one of the
/// organization's records and still live.
pub async fn revoke<I: Revocable, R>(
    state: &AppState,
    org: &OrgAccess<R>,
    id: I,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let txn = state.db.begin_write().await?;
    let revoked = org
        .scope()
        .update_rows::<I::Entity>()
        .col_expr(I::REVOKED_AT, Expr::value(now))
        .filter(I::COLUMN.eq(id))
        .filter(I::REVOKED_AT.is_null())
        .filter(I::live())
        .exec(&txn)
        .await?;
    if revoked.rows_affected != 1 {
        return Err(ApiError::NotFound);
    }
    Entry::new(I::ACTION)
        .org(org.org_id())
        .by(&org.caller)
        .target(id)
        .write(&txn, now)
        .await?;
    txn.commit().await?;
    Ok(())
}
