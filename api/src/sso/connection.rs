//! `GET`/`PUT /orgs/{org}/sso`: the organization's OpenID Connect connection. A save checks
//! the issuer (https, its discovery document readable and naming exactly that issuer), seals
//! the client secret (kept when a later save leaves it out), and is audited as
//! `sso.connection_saved`; whether sign-in is enforced is kept on the organization.

use chrono::{DateTime, Utc};
use domain::sso::{RoleMapping as StoredMapping, SsoRole};
use entities::{json::JsonText, organizations, sso_connections};
use poem_openapi::{Object, OpenApi, payload::Json};
use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};
use serde_json::json;

use crate::{
    AppState,
    http::access::org,
    http::error::OrgReadErrors,
    http::error::{
        ApiError, BadRequest, Errors, Forbidden, NotConfigured, NotFound, TooManyRequests,
        Unauthorized,
    },
    http::rights::IdentityProviderInPerson,
    http::tags::Tag,
    http::text::{InvitedRoleText, Text},
    identity::audit::Entry,
    sso::{DomainClaim, SECRET_PURPOSE, check_plan, claims_of, connection_of, redirect_uri},
};
use entities::scope::OrgScope;

/// The groups claim when a save names none.
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";

/// One role mapping: members of `group` get `role`.
#[derive(Object, Clone)]
#[oai(rename = "SsoRoleMapping", deny_unknown_fields)]
pub struct RoleMapping {
    /// A value of the groups claim, matched exactly (case included).
    #[oai(validator(max_length = 256))]
    pub group: Text,
    /// admin, operator or viewer; never owner.
    #[oai(validator(max_length = 16))]
    pub role: InvitedRoleText,
}

/// An SSO connection, without its client secret.
#[derive(Object)]
#[oai(rename = "SsoConnection")]
pub struct Connection {
    pub client_id: String,
    /// Role for somebody no mapping matches; when absent such people are refused.
    #[oai(nullable)]
    pub default_role: Option<String>,
    pub enabled: bool,
    /// Magic-link sign-in is refused (`sso-required`) for addresses at the organization's
    /// verified domains.
    pub enforced: bool,
    /// The claim (of the ID token, else of userinfo) holding the member's groups.
    pub groups_claim: String,
    /// An https:// address, equal to the issuer its discovery document names.
    pub issuer: String,
    /// The highest role among the mappings whose group the member is in wins; else
    /// `default_role`.
    pub role_mappings: Vec<RoleMapping>,
    pub updated_at: DateTime<Utc>,
}

/// The organization's single sign-on: its connection (absent until one is saved), its domain
/// claims, and the redirect address to register at the provider.
#[derive(Object)]
#[oai(rename = "SsoSettings")]
pub struct SsoSettings {
    #[oai(skip_serializing_if_is_none)]
    pub connection: Option<Connection>,
    /// The claimed domains, by name.
    pub domains: Vec<DomainClaim>,
    /// The address to register at the provider as the sign-in redirect:
    /// `{SERVICE_BASE_URL}/v1/auth/sso/callback`.
    pub redirect_uri: String,
}

/// The body of `PUT /orgs/{org}/sso`.
#[derive(Object)]
#[oai(rename = "SsoConnectionInput", deny_unknown_fields)]
pub struct ConnectionInput {
    #[oai(validator(max_length = 512))]
    pub client_id: Text,
    /// Required on the first save and on any save that changes `issuer` or `client_id` (a
    /// stored secret is only ever sent to the issuer and client it was given for); absent or
    /// null on another save keeps the stored secret. Stored encrypted, never returned.
    #[oai(validator(max_length = 2048))]
    pub client_secret: Option<Text>,
    /// An https:// address whose `/.well-known/openid-configuration` names exactly this issuer.
    #[oai(validator(max_length = 2048))]
    pub issuer: Text,
    /// admin, operator or viewer; absent or null refuses people no mapping matches.
    #[oai(validator(max_length = 16))]
    pub default_role: Option<InvitedRoleText>,
    /// Absent keeps the current value (false on a first save).
    pub enabled: Option<bool>,
    /// Absent keeps the current value (false on a first save). Needs `enabled` and a
    /// verified domain.
    pub enforced: Option<bool>,
    /// Absent or null: `groups`.
    #[oai(validator(max_length = 256))]
    pub groups_claim: Option<Text>,
    /// Absent: none (an empty list).
    #[oai(validator(max_items = 200))]
    pub role_mappings: Option<Vec<RoleMapping>>,
}

/// A role a mapping or the default may name: admin, operator or viewer.
fn sso_role(field: &str, raw: &str) -> Result<SsoRole, ApiError> {
    if raw == "owner" {
        return Err(ApiError::invalid(format!(
            "{field}: single sign-on cannot make anybody an owner; use admin, operator or viewer"
        )));
    }
    SsoRole::parse(raw)
        .ok_or_else(|| ApiError::invalid(format!("{field} must be one of admin, operator, viewer")))
}

fn connection_view(row: &sso_connections::Model, enforced: bool) -> Result<Connection, ApiError> {
    let mappings = row.role_mappings.read()?;
    Ok(Connection {
        client_id: row.client_id.clone(),
        default_role: row.default_role.clone(),
        enabled: row.enabled,
        enforced,
        groups_claim: row.groups_claim.clone(),
        issuer: row.issuer.clone(),
        role_mappings: mappings
            .into_iter()
            .map(|m| RoleMapping {
                group: Text(m.group),
                role: InvitedRoleText(Text(m.role.as_str().to_owned())),
            })
            .collect(),
        updated_at: row.updated_at,
    })
}

/// The SSO answer of an organization, read on `db`.
pub async fn settings<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    org: &organizations::Model,
) -> Result<SsoSettings, ApiError> {
    let scope = OrgScope::of(org.id);
    let connection = connection_of(db, scope)
        .await?
        .map(|row| connection_view(&row, org.sso_enforced))
        .transpose()?;
    let domains = claims_of(db, scope)
        .await?
        .into_iter()
        .map(DomainClaim::from)
        .collect();
    Ok(SsoSettings {
        connection,
        domains,
        redirect_uri: redirect_uri(state),
    })
}

/// A connection as checked, ready to store.
struct Checked {
    client_id: String,
    issuer: String,
    default_role: Option<SsoRole>,
    groups_claim: String,
    mappings: Vec<StoredMapping>,
}

fn check_input(body: &ConnectionInput) -> Result<Checked, ApiError> {
    let client_id = body.client_id.trim();
    if client_id.is_empty() {
        return Err(ApiError::invalid("client_id must not be empty"));
    }
    let issuer = body.issuer.trim();
    let parsed = url::Url::parse(issuer)
        .map_err(|_| ApiError::invalid("issuer must be an https:// address"))?;
    if parsed.scheme() != "https" || parsed.host_str().is_none() {
        return Err(ApiError::invalid("issuer must be an https:// address"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(ApiError::invalid(
            "issuer must not have a query or fragment",
        ));
    }
    let default_role = body
        .default_role
        .as_deref()
        .map(|r| sso_role("default_role", r))
        .transpose()?;
    let groups_claim = match body.groups_claim.as_deref().map(str::trim) {
        None => DEFAULT_GROUPS_CLAIM.to_owned(),
        Some("") => return Err(ApiError::invalid("groups_claim must not be empty")),
        Some(name) => name.to_owned(),
    };
    let mut mappings = Vec::new();
    for (i, mapping) in body.role_mappings.iter().flatten().enumerate() {
        if mapping.group.is_empty() {
            return Err(ApiError::invalid(format!(
                "role_mappings[{i}].group must not be empty"
            )));
        }
        mappings.push(StoredMapping {
            group: mapping.group.0.clone(),
            role: sso_role(&format!("role_mappings[{i}].role"), &mapping.role)?,
        });
    }
    Ok(Checked {
        client_id: client_id.to_owned(),
        issuer: issuer.to_owned(),
        default_role,
        groups_claim,
        mappings,
    })
}

/// A stored client secret is only ever sent to the issuer and client it was given for
/// (decisions §18): a save that changes either must carry the secret again.
fn secret_still_fits(
    stored: &sso_connections::Model,
    checked: &Checked,
    secret_given: bool,
) -> Result<(), ApiError> {
    if secret_given || (stored.issuer == checked.issuer && stored.client_id == checked.client_id) {
        return Ok(());
    }
    Err(ApiError::invalid(
        "client_secret is required when issuer or client_id changes: the stored secret is only \
         ever sent to the issuer and client it was given for",
    ))
}

type SaveErrors = Errors<(
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    TooManyRequests,
    NotConfigured,
)>;

pub struct ConnectionApi;

#[OpenApi(tag = "Tag::Sso")]
impl ConnectionApi {
    /// The organization's single sign-on: its connection (absent until one is saved, never
    /// with the client secret), its domain claims and the redirect address to register at the
    /// provider.
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`
    /// (whoever configures the identity provider can sign in as anyone at the verified
    /// domains, owners included).
    #[oai(path = "/v1/orgs/:org/sso", method = "get", operation_id = "getSso")]
    async fn get(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<SsoSettings>, OrgReadErrors> {
        Ok(Json(settings(&state, &state.db.orm, &org.org).await?))
    }

    /// Save the OpenID Connect connection. The issuer's discovery document
    /// (`{issuer}/.well-known/openid-configuration`) is read over https through the
    /// deployment's outbound client and must name exactly this issuer. The client secret is
    /// stored encrypted and never returned; a later save without it keeps it while `issuer`
    /// and `client_id` stay the same. Audited as
    /// `sso.connection_saved`.
    ///
    /// 400 `invalid-request`: the issuer is not https, its discovery document cannot be read
    /// or names another issuer, or it resolves to a private address; no client secret on a
    /// first save or on a save that changes `issuer` or `client_id`; a mapping (or
    /// `default_role`) naming owner or an unknown role; `enforced` without `enabled` or without
    /// a verified domain. 403 `plan-required` when the plan lacks
    /// single sign-on (enterprise). 503 `not-configured` without `SECRETS_KEY`.
    ///
    /// The owner only, in person: an admin, or an API token, is refused with 403 `forbidden`
    /// (whoever configures the identity provider can sign in as anyone at the verified
    /// domains, owners included).
    #[oai(path = "/v1/orgs/:org/sso", method = "put", operation_id = "saveSso")]
    async fn put(
        &self,
        org: org::Path<IdentityProviderInPerson>,
        state: poem::web::Data<&AppState>,
        body: Json<ConnectionInput>,
    ) -> Result<Json<SsoSettings>, SaveErrors> {
        check_plan(&state, &state.db.orm, org.org_id()).await?;
        let key = state.sealing_key("SSO client secrets")?;
        let checked = check_input(&body)?;
        let scope = org.scope();
        let existing = connection_of(&state.db.orm, scope).await?;
        let secret = match (body.client_secret.as_deref(), &existing) {
            (Some(secret), _) if !secret.trim().is_empty() => Some(platform::crypto::seal(
                &key,
                secret.as_bytes(),
                SECRET_PURPOSE,
            )),
            (Some(_), _) => return Err(ApiError::invalid("client_secret must not be empty").into()),
            (None, Some(_)) => None,
            (None, None) => {
                return Err(
                    ApiError::invalid("client_secret is required on the first save").into(),
                );
            }
        };
        if let Some(row) = &existing {
            secret_still_fits(row, &checked, secret.is_some())?;
        }
        let enabled = body
            .enabled
            .unwrap_or_else(|| existing.as_ref().is_some_and(|c| c.enabled));
        let enforced = body.enforced.unwrap_or(org.org.sso_enforced);
        if enforced && !enabled {
            return Err(ApiError::invalid("enforced needs enabled: true").into());
        }
        // The guard on private destinations, then the discovery document itself.
        let issuer_url = url::Url::parse(&checked.issuer)
            .map_err(|_| ApiError::invalid("issuer must be an https:// address"))?;
        state
            .outbound
            .check_destination(&issuer_url)
            .await
            .map_err(|e| ApiError::invalid(format!("issuer: {e}")))?;
        let now = state.clock.now();
        state
            .sso
            .discover(&state.outbound, &checked.issuer, now)
            .await
            .map_err(|e| ApiError::invalid(format!("issuer: {e}")))?;

        let txn = state.db.begin_write().await?;
        // Saves of one organization's connection take turns (on Postgres by the organization's
        // row; SQLite's write transactions already do): two first saves at once would otherwise
        // both find none stored and insert, and the second fail on the key.
        crate::identity::members::lock_org(&state, &txn, scope).await?;
        // Checked in the transaction that sets it: deleting the last verified domain turns
        // enforcement off in its own.
        if enforced
            && !claims_of(&txn, scope)
                .await?
                .iter()
                .any(|c| c.verified_at.is_some())
        {
            return Err(ApiError::invalid(
                "enforced needs a verified domain: claim one and verify its TXT record first",
            )
            .into());
        }
        let stored = connection_of(&txn, scope).await?;
        if let Some(row) = &stored {
            // Again against what is stored now: a save in between may have moved it.
            secret_still_fits(row, &checked, secret.is_some())?;
        }
        let mappings = JsonText::new(&checked.mappings)?;
        let default_role = checked.default_role.map(|r| r.as_str().to_owned());
        let row = match stored {
            Some(row) => {
                let mut changed: sso_connections::ActiveModel = row.into();
                changed.enabled = Set(enabled);
                changed.issuer = Set(checked.issuer.clone());
                changed.client_id = Set(checked.client_id.clone());
                if let Some(sealed) = &secret {
                    changed.client_secret = Set(sealed.clone());
                }
                changed.groups_claim = Set(checked.groups_claim.clone());
                changed.role_mappings = Set(mappings);
                changed.default_role = Set(default_role);
                changed.updated_at = Set(now);
                changed.update(&txn).await?
            }
            None => {
                let Some(sealed) = secret.clone() else {
                    // A connection saved meanwhile by somebody else was deleted again: ask
                    // for the secret as on any first save.
                    return Err(
                        ApiError::invalid("client_secret is required on the first save").into(),
                    );
                };
                sso_connections::ActiveModel {
                    org_id: Set(org.org_id()),
                    enabled: Set(enabled),
                    issuer: Set(checked.issuer.clone()),
                    client_id: Set(checked.client_id.clone()),
                    client_secret: Set(sealed),
                    groups_claim: Set(checked.groups_claim.clone()),
                    role_mappings: Set(mappings),
                    default_role: Set(default_role),
                    created_at: Set(now),
                    updated_at: Set(now),
                }
                .insert(&txn)
                .await?
            }
        };
        let mut org_row: organizations::ActiveModel = org.org.clone().into();
        org_row.sso_enforced = Set(enforced);
        let org_row = org_row.update(&txn).await?;
        Entry::new("sso.connection_saved")
            .org(org.org_id())
            .by(&org.caller)
            .target_organization(&org.org.slug)
            .details(json!({
                "issuer": row.issuer,
                "client_id": row.client_id,
                "enabled": row.enabled,
                "enforced": enforced,
                "groups_claim": row.groups_claim,
                "role_mappings": checked.mappings.len(),
                "default_role": row.default_role,
                "client_secret_changed": secret.is_some(),
            }))
            .write(&txn, now)
            .await?;
        let answer = settings(&state, &txn, &org_row).await?;
        txn.commit().await?;
        Ok(Json(answer))
    }
}
