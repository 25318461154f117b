//! Single sign-on (decisions §15): an organization's OpenID Connect connection
//! (`GET`/`PUT /orgs/{org}/sso`), its domain claims verified by a DNS TXT record
//! (`/orgs/{org}/sso/domains`), sign-in through the provider (`/auth/sso/start`,
//! `/auth/sso/callback`), and enforcement: a verified domain of an organization that enforces
//! is refused magic-link sign-in (`enforce`).
//!
//! The connection's client secret and each sign-in's PKCE verifier are sealed under
//! `SECRETS_KEY`; the provider is reached only through the one outbound client, its discovery
//! document and key set cached per issuer ([`provider::Providers`]).

pub mod connection;
pub mod domains;
pub mod enforce;
pub mod provider;
pub mod sign_in;

use chrono::{DateTime, Utc};
use entities::{sso_connections, sso_domains};
use platform::ids::OrgId;
use poem_openapi::Object;
use sea_orm::{ConnectionTrait, QueryOrder};

use crate::{AppState, http::error::ApiError};
use entities::scope::OrgScope;

/// The associated data the client secret is sealed with (`platform::crypto`).
pub const SECRET_PURPOSE: &[u8] = b"sso-client-secret";
/// The associated data a sign-in's PKCE verifier is sealed with.
pub const VERIFIER_PURPOSE: &[u8] = b"sso-pkce-verifier";

/// The path of the callback, under `SERVICE_BASE_URL`.
pub const CALLBACK_PATH: &str = "/v1/auth/sso/callback";

/// The address to register at the provider as the sign-in redirect.
pub fn redirect_uri(state: &AppState) -> String {
    format!(
        "{}{CALLBACK_PATH}",
        state.config.base_url.as_str().trim_end_matches('/')
    )
}

/// 403 `plan-required` unless the organization's plan includes single sign-on.
pub async fn check_plan<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    org_id: uuid::Uuid,
) -> Result<(), ApiError> {
    let plan = domain::billing::plan_of(
        db,
        OrgId::from(org_id),
        &domain::billing::default_plan(&state.config),
    )
    .await?;
    domain::billing::check_sso(&plan)?;
    Ok(())
}

/// An SSO domain claim.
#[derive(Object)]
#[oai(rename = "SsoDomainClaim")]
pub struct DomainClaim {
    /// The domain, lowercase.
    pub domain: String,
    /// Name of the TXT record to publish: `_service-challenge.<domain>`.
    pub txt_name: String,
    /// Value of that TXT record: `service-domain-verification=<32 base32 characters>`.
    pub txt_value: String,
    /// Whether the TXT record was found; addresses at the domain sign in through the
    /// connection only once it is.
    pub verified: bool,
    #[oai(nullable)]
    pub verified_at: Option<DateTime<Utc>>,
}

impl From<sso_domains::Model> for DomainClaim {
    fn from(row: sso_domains::Model) -> Self {
        DomainClaim {
            txt_name: domain::sso::txt_name(&row.domain),
            verified: row.verified_at.is_some(),
            domain: row.domain,
            txt_value: row.txt_value,
            verified_at: row.verified_at,
        }
    }
}

/// The organization's claims, by domain.
pub async fn claims_of<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
) -> Result<Vec<sso_domains::Model>, ApiError> {
    Ok(scope
        .rows::<sso_domains::Entity>()
        .order_by_asc(sso_domains::Column::Domain)
        .all(db)
        .await?)
}

/// The organization's connection, if one was saved.
pub async fn connection_of<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
) -> Result<Option<sso_connections::Model>, ApiError> {
    Ok(scope.rows::<sso_connections::Entity>().one(db).await?)
}
