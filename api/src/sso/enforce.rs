//! Enforcement (interface.md, Authentication 5; decisions §15): an address at a verified
//! domain of an organization that enforces single sign-on signs in only through its identity
//! provider. The two verify operations and accepting an invitation ask [`required_for`] and
//! answer 403 `sso-required`. Enforcement lapses with the plan: an organization whose plan no
//! longer has single sign-on cannot lock its people out of both ways in.

use entities::{organizations, sso_domains};
use platform::ids::OrgId;
use sea_orm::ConnectionTrait;

use crate::{AppState, http::error::ApiError};
use entities::scope::{Credential, OrgScope};

/// The organization that has `email`'s domain verified, if any.
pub async fn organization_of<C: ConnectionTrait>(
    db: &C,
    email: &str,
) -> Result<Option<sso_domains::Model>, ApiError> {
    let Some(domain) = domain::sso::email_domain(email) else {
        return Ok(None);
    };
    Ok(sso_domains::Entity::by_credential(domain).one(db).await?)
}

/// Whether magic-link sign-in (and accepting an invitation) is refused for `email`.
pub async fn required_for<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    email: &str,
) -> Result<bool, ApiError> {
    let Some(claim) = organization_of(db, email).await? else {
        return Ok(false);
    };
    let enforced = OrgScope::of(claim.org_id)
        .rows::<organizations::Entity>()
        .one(db)
        .await?
        .is_some_and(|org| org.sso_enforced);
    if !enforced {
        return Ok(false);
    }
    let plan = domain::billing::plan_of(
        db,
        OrgId::from(claim.org_id),
        &domain::billing::default_plan(&state.config),
    )
    .await?;
    Ok(domain::billing::allows_sso(&plan))
}
