//! Domain claims (decisions §15): an organization claims a domain, publishes the TXT record
//! `_service-challenge.<domain>` with the value it was given, and asks for verification, which
//! looks the record up through a real resolver (`DNS_RESOLVER`, else the system's). A domain is
//! verified by one organization at most. Deleting a claim releases the domain: its addresses no
//! longer sign in through the connection, and an organization left without a verified domain
//! stops enforcing.

use entities::{organizations, sso_domains};
use poem_openapi::{ApiResponse, Object, OpenApi, param::Path, payload::Json};
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set};
use serde_json::json;

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgConflictErrors, OrgReadErrors, StateRefusal},
    http::rights::IdentityProviderInPerson,
    http::tags::Tag,
    http::text::Text,
    identity::audit::Entry,
    sso::{DomainClaim, check_plan},
};
use entities::scope::{Credential, OrgScope};

#[derive(Object)]
#[oai(rename = "NewSsoDomainClaim", deny_unknown_fields)]
pub struct NewClaim {
    /// A domain name such as `example.com` (lowercased; a trailing dot is dropped).
    #[oai(validator(max_length = 253))]
    pub domain: Text,
}

#[derive(ApiResponse)]
pub enum Claimed {
    /// Claimed: publish `txt_value` as a TXT record at `txt_name`, then verify.
    #[oai(status = 201)]
    Created(Json<DomainClaim>),
}

#[derive(ApiResponse)]
pub enum Released {
    /// Released: addresses at the domain no longer sign in through the connection.
    #[oai(status = 204)]
    Released,
}

/// The claim of `domain` in `scope`, or `not-found`.
async fn claim_of<C: sea_orm::ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    domain: &str,
) -> Result<sso_domains::Model, ApiError> {
    let Some(domain) = domain::sso::normalize_domain(domain) else {
        return Err(ApiError::NotFound);
    };
    scope
        .rows::<sso_domains::Entity>()
        .filter(sso_domains::Column::Domain.eq(domain))
        .one(db)
        .await?
        .ok_or(ApiError::NotFound)
}

/// A unique violation on the verified domain: another organization verified it first.
fn taken(err: sea_orm::DbErr, domain: &str) -> ApiError {
    if matches!(
        err.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    ) {
        ApiError::Conflict(format!("{domain} is verified by another organization."))
    } else {
        err.into()
    }
}

/// Whether another organization has `domain` verified.
async fn verified_elsewhere<C: sea_orm::ConnectionTrait>(
    db: &C,
    org_id: uuid::Uuid,
    domain: &str,
) -> Result<bool, ApiError> {
    Ok(sso_domains::Entity::by_credential(domain)
        .one(db)
        .await?
        .is_some_and(|row| row.org_id != org_id))
}

pub struct DomainsApi;

#[OpenApi(tag = "Tag::Sso")]
impl DomainsApi {
    /// Claim a domain for single sign-on. The answer names the TXT record to publish
    /// (`_service-challenge.<domain>`) and its value; the claim counts once verified. 400
    /// `invalid-request` for a value that is not a domain name; 403 `plan-required` when the
    /// plan lacks single sign-on; 409 `conflict` when this organization has claimed it already
    /// or another organization has it verified.
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`
    /// (whoever configures the identity provider can sign in as anyone at the verified
    /// domains, owners included).
    #[oai(
        path = "/v1/orgs/:org/sso/domains",
        method = "post",
        operation_id = "claimSsoDomain"
    )]
    async fn claim(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
        body: Json<NewClaim>,
    ) -> Result<Claimed, OrgConflictErrors> {
        check_plan(&state, &state.db.orm, org.org_id()).await?;
        let domain = domain::sso::normalize_domain(&body.domain)
            .ok_or_else(|| ApiError::invalid("domain must be a domain name such as example.com"))?;
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        if verified_elsewhere(&txn, org.org_id(), &domain).await? {
            return Err(ApiError::Conflict(format!(
                "{domain} is verified by another organization."
            ))
            .into());
        }
        let exists = org
            .scope()
            .rows::<sso_domains::Entity>()
            .filter(sso_domains::Column::Domain.eq(domain.as_str()))
            .one(&txn)
            .await?
            .is_some();
        if exists {
            return Err(
                ApiError::Conflict(format!("{domain} is claimed by this organization.")).into(),
            );
        }
        let row = sso_domains::ActiveModel {
            org_id: Set(org.org_id()),
            domain: Set(domain.clone()),
            txt_value: Set(domain::sso::new_txt_value()),
            verified_at: Set(None),
            verified_domain: Set(None),
            created_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(|e| {
            if matches!(
                e.sql_err(),
                Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
            ) {
                ApiError::Conflict(format!("{domain} is claimed by this organization."))
            } else {
                e.into()
            }
        })?;
        Entry::new("sso.domain_claimed")
            .org(org.org_id())
            .by(&org.caller)
            .target_organization(&org.org.slug)
            .details(json!({ "domain": row.domain }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Claimed::Created(Json(row.into())))
    }

    /// Verify a claim: the TXT record `_service-challenge.<domain>` is looked up now and must
    /// hold the claim's `txt_value`. Answers the claim (verified). 409 `invalid-state` when the
    /// record is missing or holds another value (publish it and try again; DNS changes can take
    /// a while to be seen); 409 `conflict` when another organization has verified the domain;
    /// 403 `plan-required` when the plan lacks single sign-on; 404 `not-found` for a domain
    /// this organization has not claimed. A verified claim answers as it is.
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`
    /// (whoever configures the identity provider can sign in as anyone at the verified
    /// domains, owners included).
    #[oai(
        path = "/v1/orgs/:org/sso/domains/:domain/verify",
        method = "post",
        operation_id = "verifySsoDomain"
    )]
    async fn verify(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
        /// The claimed domain.
        domain: Path<String>,
    ) -> Result<Json<DomainClaim>, OrgConflictErrors> {
        check_plan(&state, &state.db.orm, org.org_id()).await?;
        let claim = claim_of(&state.db.orm, org.scope(), &domain).await?;
        if claim.verified_at.is_some() {
            return Ok(Json(claim.into()));
        }
        let name = domain::sso::txt_name(&claim.domain);
        let found = match platform::dns::txt_records(state.config.dns_resolver, &name).await {
            Ok(records) => records
                .iter()
                .any(|strings| domain::sso::txt_matches(strings, &claim.txt_value)),
            Err(err) => {
                tracing::info!(domain = %claim.domain, error = %err, "domain claim not verified");
                false
            }
        };
        if !found {
            return Err(ApiError::state(
                StateRefusal::InvalidState,
                format!(
                    "No TXT record at {name} holds {}: publish it and verify again (DNS changes can take a while to be seen).",
                    claim.txt_value
                ),
            )
            .into());
        }
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let claim = claim_of(&txn, org.scope(), &claim.domain).await?;
        if claim.verified_at.is_some() {
            txn.commit().await?;
            return Ok(Json(claim.into()));
        }
        if verified_elsewhere(&txn, org.org_id(), &claim.domain).await? {
            return Err(ApiError::Conflict(format!(
                "{} is verified by another organization.",
                claim.domain
            ))
            .into());
        }
        let domain_name = claim.domain.clone();
        let mut verified: sso_domains::ActiveModel = claim.into();
        verified.verified_at = Set(Some(now));
        verified.verified_domain = Set(Some(domain_name.clone()));
        let row = verified
            .update(&txn)
            .await
            .map_err(|e| taken(e, &domain_name))?;
        Entry::new("sso.domain_verified")
            .org(org.org_id())
            .by(&org.caller)
            .target_organization(&org.org.slug)
            .details(json!({ "domain": row.domain }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Json(row.into()))
    }

    /// Release a claimed domain: addresses at it no longer sign in through the connection. An
    /// organization left without a verified domain stops enforcing single sign-on. 404
    /// `not-found` for a domain this organization has not claimed.
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`
    /// (whoever configures the identity provider can sign in as anyone at the verified
    /// domains, owners included).
    #[oai(
        path = "/v1/orgs/:org/sso/domains/:domain",
        method = "delete",
        operation_id = "releaseSsoDomain"
    )]
    async fn release(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
        /// The claimed domain.
        domain: Path<String>,
    ) -> Result<Released, OrgReadErrors> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let claim = claim_of(&txn, org.scope(), &domain).await?;
        org.scope()
            .delete_rows::<sso_domains::Entity>()
            .filter(sso_domains::Column::Domain.eq(claim.domain.as_str()))
            .exec(&txn)
            .await?;
        let still_verified = org
            .scope()
            .rows::<sso_domains::Entity>()
            .filter(sso_domains::Column::VerifiedAt.is_not_null())
            .one(&txn)
            .await?
            .is_some();
        let stops_enforcing = org.org.sso_enforced && !still_verified;
        if stops_enforcing {
            let mut org_row: organizations::ActiveModel = org.org.clone().into();
            org_row.sso_enforced = Set(false);
            org_row.update(&txn).await?;
        }
        Entry::new("sso.domain_released")
            .org(org.org_id())
            .by(&org.caller)
            .target_organization(&org.org.slug)
            .details(json!({
                "domain": claim.domain,
                "was_verified": claim.verified_at.is_some(),
                "enforcement_ended": stops_enforcing,
            }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Released::Released)
    }
}
