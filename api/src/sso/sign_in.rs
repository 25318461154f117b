//! Sign-in through the identity provider (decisions §15).
//!
//! `GET /auth/sso/start?email=` finds the organization that has the address's domain verified
//! and an enabled connection, keeps a fresh `state` (hashed), `nonce` and PKCE verifier
//! (sealed) for ten minutes, and redirects (303) to the provider's authorization endpoint with
//! `login_hint`. `GET /auth/sso/callback?code&state` uses the `state` once, exchanges the code
//! (with the verifier), validates the ID token (signature by the provider's key set, `iss`,
//! `aud`, `exp`, `nonce`, `email_verified`), reads the groups claim (the ID token's, else
//! userinfo's), maps it to a role, creates the account and membership when missing (an owner
//! stays owner; anybody else gets the role the provider's groups give now), starts the same
//! session the verify operations start, and redirects to `{SERVICE_BASE_URL}/`.

use chrono::{DateTime, Duration, Utc};
use domain::sso::SsoRole;
use entities::{memberships, sso_connections, sso_logins};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, CsrfToken, IdTokenClaims, LoginHint, Nonce,
    OAuth2TokenResponse as _, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    SignatureVerificationError, TokenResponse as _,
    core::{CoreAuthenticationFlow, CoreGenderClaim, CoreProviderMetadata},
};
use platform::ids::AccountId;
use poem::Request;
use poem_openapi::{ApiResponse, OpenApi, param::Query};
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set};
use serde_json::json;

use crate::{
    AppState,
    http::access,
    http::error::{
        ApiError, BadRequest, Errors, Forbidden, NotConfigured, NotFound, TooManyRequests,
    },
    http::input::Email,
    http::rights::Role,
    http::tags::Tag,
    identity::audit::Entry,
    identity::auth::{limit_anonymous, start_session},
    sso::{
        SECRET_PURPOSE, VERIFIER_PURPOSE, check_plan, connection_of, enforce, provider,
        redirect_uri,
    },
};
use entities::scope::{OrgScope, Untenanted};

/// How long a started sign-in may take to come back.
pub const LOGIN_TTL: Duration = Duration::minutes(10);

/// Longest `state` and `code` accepted (providers' codes are far shorter).
const MAX_PARAM: usize = 4096;

/// The cookie that binds a sign-in to the browser that started it (decisions §18).
pub const BROWSER_COOKIE: &str = "service_sso";

#[derive(ApiResponse)]
pub enum ToProvider {
    /// To the identity provider's authorization endpoint (authorization code flow with PKCE
    /// S256, `state`, `nonce` and `login_hint`).
    #[oai(status = 303)]
    SeeOther(
        #[oai(header = "Location")] String,
        /// `service_sso`: binds the sign-in to this browser (HttpOnly, SameSite=Lax,
        /// Path=/v1/auth/sso, 10 minutes, Secure as the session cookie); the callback is
        /// refused without it.
        #[oai(header = "Set-Cookie")]
        String,
    ),
}

#[derive(ApiResponse)]
pub enum SignedIn {
    /// Signed in: the `service_session` cookie is set (as by the verify operations) and the
    /// browser goes to `{SERVICE_BASE_URL}/`. `GET /v1/me` gives the session's `csrf_token`.
    #[oai(status = 303)]
    SeeOther(
        #[oai(header = "Location")] String,
        /// The session cookie.
        #[oai(header = "Set-Cookie")]
        String,
    ),
}

type StartErrors = Errors<(BadRequest, NotFound, TooManyRequests, NotConfigured)>;
type CallbackErrors = Errors<(BadRequest, Forbidden, TooManyRequests, NotConfigured)>;

fn stale() -> ApiError {
    ApiError::invalid(
        "This sign-in is unknown, already used or older than 10 minutes: start again.",
    )
}

fn provider_failed(err: provider::ProviderError) -> ApiError {
    ApiError::invalid(format!("The identity provider cannot be used now: {err}."))
}

/// Words for an ID token that does not validate.
fn rejected(err: &ClaimsVerificationError) -> ApiError {
    let why = match err {
        ClaimsVerificationError::Expired(_) => "it has expired",
        ClaimsVerificationError::InvalidAudience(_) => "it is not meant for this client (aud)",
        ClaimsVerificationError::InvalidIssuer(_) => "it is from another issuer (iss)",
        ClaimsVerificationError::InvalidNonce(_) => "it does not carry this sign-in's nonce",
        ClaimsVerificationError::SignatureVerification(_) => {
            "its signature does not verify with the provider's keys"
        }
        _ => "it does not validate",
    };
    ApiError::invalid(format!(
        "The identity provider's ID token was refused: {why}."
    ))
}

/// The ID token's claims, checked against `metadata`'s keys and the connection's client.
fn verified_claims(
    state: &AppState,
    client: &provider::OidcClient,
    metadata: &CoreProviderMetadata,
    id_token: &provider::IdToken,
    nonce: &Nonce,
) -> Result<IdTokenClaims<provider::ExtraClaims, CoreGenderClaim>, ClaimsVerificationError> {
    let clock = state.clock.clone();
    let verifier = client
        .id_token_verifier()
        .set_allowed_algs(provider::allowed_algs(metadata))
        .set_time_fn(move || clock.now());
    id_token.claims(&verifier, nonce).cloned()
}

/// The role the member's groups give, under the connection's mappings.
fn role_of(
    connection: &sso_connections::Model,
    groups: &[String],
) -> Result<Option<SsoRole>, ApiError> {
    let mappings = connection.role_mappings.read()?;
    let default_role = connection.default_role.as_deref().and_then(SsoRole::parse);
    Ok(domain::sso::role_for(&mappings, default_role, groups))
}

pub struct SignInApi;

#[OpenApi(tag = "Tag::Sso")]
impl SignInApi {
    /// Start signing in through the organization's identity provider: 303 to its
    /// authorization endpoint. 404 `not-found` when no enabled connection has a verified claim
    /// on the address's domain; 400 `invalid-request` for an address that is not one, or a
    /// provider that cannot be reached. Limited per client address.
    #[oai(path = "/v1/auth/sso/start", method = "get", operation_id = "startSso")]
    async fn start(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        /// The address to sign in as (at most 254 characters); its domain picks the
        /// organization.
        #[oai(validator(max_length = 254))]
        email: Query<String>,
    ) -> Result<ToProvider, StartErrors> {
        let email = Email::parse("email", &email)?;
        limit_anonymous(&state, req).await?;
        let claim = enforce::organization_of(&state.db.orm, email.as_str())
            .await?
            .ok_or(ApiError::NotFound)?;
        let scope = OrgScope::of(claim.org_id);
        let connection = connection_of(&state.db.orm, scope)
            .await?
            .filter(|c| c.enabled)
            .ok_or(ApiError::NotFound)?;
        if check_plan(&state, &state.db.orm, claim.org_id)
            .await
            .is_err()
        {
            return Err(ApiError::NotFound.into());
        }
        let key = state.sealing_key("SSO client secrets")?;
        let now = state.clock.now();
        let metadata = state
            .sso
            .get(&state.outbound, &connection.issuer, now)
            .await
            .map_err(provider_failed)?;
        let redirect = RedirectUrl::new(redirect_uri(&state))
            .map_err(|_| ApiError::Internal(anyhow::anyhow!("SERVICE_BASE_URL is not a URL")))?;
        // The secret is not needed to build the authorization address.
        let client = provider::client(&metadata, &connection.client_id, String::new(), redirect);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, csrf, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .set_login_hint(LoginHint::new(email.as_str().to_owned()))
            .set_pkce_challenge(challenge)
            .url();

        // The browser's half of the sign-in: only its hash is kept beside the state.
        let browser = platform::secrets::mint("");
        let txn = state.db.begin_write().await?;
        // Sign-ins nobody finished are dropped as new ones start.
        sso_logins::Entity::delete_rows()
            .filter(sso_logins::Column::ExpiresAt.lte(now))
            .exec(&txn)
            .await?;
        sso_logins::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            state_hash: Set(platform::secrets::hash(csrf.secret())),
            org_id: Set(claim.org_id),
            email: Set(email.as_str().to_owned()),
            nonce: Set(nonce.secret().clone()),
            pkce_verifier: Set(platform::crypto::seal(
                &key,
                verifier.secret().as_bytes(),
                VERIFIER_PURPOSE,
            )),
            browser_hash: Set(Some(browser.hash)),
            created_at: Set(now),
            expires_at: Set(now + LOGIN_TTL),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        Ok(ToProvider::SeeOther(
            url.to_string(),
            crate::identity::auth::cookie(
                &state,
                BROWSER_COOKIE,
                &browser.value,
                "/v1/auth/sso",
                LOGIN_TTL.num_seconds(),
            ),
        ))
    }

    /// Where the identity provider sends the browser back. Uses the sign-in's `state` once;
    /// exchanges `code`; validates the ID token; maps the groups claim to a role (the highest
    /// among matching mappings, else `default_role`); creates the account and membership when
    /// missing (an owner stays owner; anybody else gets the mapped role); sets the session
    /// cookie and redirects (303) to `{SERVICE_BASE_URL}/`.
    ///
    /// 400 `invalid-request`: the provider reported an error, the `state` is unknown, used or
    /// stale, the browser does not hold the `service_sso` cookie its start set (the sign-in is
    /// bound to the browser that started it), the code exchange failed, or the ID token does not validate (signature, `iss`,
    /// `aud`, `exp`, `nonce`). 403 `forbidden`: the address is not verified by the provider
    /// (`email_verified`), it is not at a verified domain of the organization, or no mapping
    /// matches and there is no `default_role`. 403 `plan-required` when the plan no longer
    /// has single sign-on.
    #[oai(
        path = "/v1/auth/sso/callback",
        method = "get",
        operation_id = "ssoCallback"
    )]
    async fn callback(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        /// The authorization code.
        code: Query<Option<String>>,
        /// The `state` sent with the sign-in.
        #[oai(name = "state")]
        login_state: Query<Option<String>>,
        /// An error code from the provider instead of a code.
        error: Query<Option<String>>,
        /// The provider's words for that error.
        error_description: Query<Option<String>>,
    ) -> Result<SignedIn, CallbackErrors> {
        limit_anonymous(&state, req).await?;
        let now = state.clock.now();
        let login_state = login_state
            .0
            .filter(|s| !s.is_empty() && s.len() <= MAX_PARAM)
            .ok_or_else(stale)?;
        let browser = access::cookie_value(req, BROWSER_COOKIE).unwrap_or_default();
        let login = take_login(&state, &login_state, browser, now).await?;
        if let Some(error) = error.0 {
            let mut words: String = error
                .chars()
                .filter(|c| !c.is_control())
                .take(100)
                .collect();
            if let Some(description) = error_description.0 {
                words.push_str(": ");
                words.extend(description.chars().filter(|c| !c.is_control()).take(300));
            }
            return Err(ApiError::invalid(format!(
                "The identity provider did not sign you in ({words})."
            ))
            .into());
        }
        let code = code
            .0
            .filter(|c| !c.is_empty() && c.len() <= MAX_PARAM)
            .ok_or_else(|| ApiError::invalid("The identity provider sent no code."))?;

        let scope = OrgScope::of(login.org_id);
        let connection = connection_of(&state.db.orm, scope)
            .await?
            .filter(|c| c.enabled)
            .ok_or_else(|| {
                ApiError::invalid("Single sign-on is not enabled for this organization.")
            })?;
        check_plan(&state, &state.db.orm, login.org_id).await?;
        let key = state.sealing_key("SSO client secrets")?;
        let secret = open(&key, &connection.client_secret, SECRET_PURPOSE)?;
        let verifier = open(&key, &login.pkce_verifier, VERIFIER_PURPOSE)?;
        let redirect = RedirectUrl::new(redirect_uri(&state))
            .map_err(|_| ApiError::Internal(anyhow::anyhow!("SERVICE_BASE_URL is not a URL")))?;

        let mut metadata = state
            .sso
            .get(&state.outbound, &connection.issuer, now)
            .await
            .map_err(provider_failed)?;
        let client = provider::client(
            &metadata,
            &connection.client_id,
            secret.clone(),
            redirect.clone(),
        );
        let token = client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|_| ApiError::invalid("The identity provider has no token endpoint."))?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier))
            .request_async(&state.outbound)
            .await
            .map_err(|err| {
                use openidconnect::RequestTokenError as E;
                let why = match &err {
                    E::ServerResponse(answer) => answer.to_string(),
                    E::Request(outbound) => outbound.to_string(),
                    E::Parse(..) => "its answer is not a token response".to_owned(),
                    E::Other(other) => other.clone(),
                };
                ApiError::invalid(format!(
                    "The identity provider did not accept the sign-in code ({why})."
                ))
            })?;
        let id_token = token
            .id_token()
            .ok_or_else(|| ApiError::invalid("The identity provider sent no ID token."))?;
        let nonce = Nonce::new(login.nonce.clone());
        let claims = match verified_claims(&state, &client, &metadata, id_token, &nonce) {
            Ok(claims) => claims,
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                // A key the cached set does not hold: the provider may have rotated its keys.
                metadata = state
                    .sso
                    .refresh_keys(&state.outbound, &connection.issuer, &metadata, now)
                    .await
                    .map_err(provider_failed)?;
                let client = provider::client(&metadata, &connection.client_id, secret, redirect);
                verified_claims(&state, &client, &metadata, id_token, &nonce)
                    .map_err(|e| rejected(&e))?
            }
            Err(err) => return Err(rejected(&err).into()),
        };

        let email = claims
            .email()
            .ok_or_else(|| ApiError::invalid("The identity provider shared no email address."))?;
        let email = Email::parse("the provider's email", email.as_str())?;
        if claims.email_verified() != Some(true) {
            return Err(ApiError::forbidden(format!(
                "The identity provider has not verified {}; it cannot sign in.",
                email.as_str()
            ))
            .into());
        }
        let at_claimed_domain = enforce::organization_of(&state.db.orm, email.as_str())
            .await?
            .is_some_and(|claim| claim.org_id == login.org_id);
        if !at_claimed_domain {
            return Err(ApiError::forbidden(format!(
                "{} is not at a verified domain of this organization.",
                email.as_str()
            ))
            .into());
        }
        let groups = match claims.additional_claims().groups(&connection.groups_claim) {
            Some(groups) => groups,
            None => userinfo_groups(&state, &client, &token, &claims, &connection).await?,
        };
        let role = role_of(&connection, &groups)?.ok_or_else(|| {
            ApiError::forbidden(
                "None of your groups at the identity provider gives a role in this organization.",
            )
        })?;
        let name = claims
            .name()
            .and_then(|n| n.get(None))
            .map(|n| n.as_str().chars().take(255).collect::<String>());

        let ip = access::client_ip(req);
        let txn = state.db.begin_write().await?;
        let (account, created) =
            domain::accounts::for_address(&txn, email.as_str(), name, now).await?;
        let membership = scope.member(account.id.into()).one(&txn).await?;
        let given = Role::from(role);
        let (joined, final_role) = match membership {
            None => {
                memberships::ActiveModel {
                    org_id: Set(login.org_id),
                    account_id: Set(account.id),
                    role: Set(given.as_str().to_owned()),
                    created_at: Set(now),
                }
                .insert(&txn)
                .await?;
                (true, given.as_str().to_owned())
            }
            // An owner stays owner: the provider never makes or unmakes one.
            Some(member) if Role::stored(&member.role) == Some(Role::Owner) => (false, member.role),
            Some(member) if Role::stored(&member.role) != Some(given) => {
                let mut changed: memberships::ActiveModel = member.into();
                changed.role = Set(given.as_str().to_owned());
                changed.update(&txn).await?;
                (false, given.as_str().to_owned())
            }
            Some(member) => (false, member.role),
        };
        let session = start_session(&state, &txn, account.id, now).await?;
        Entry::new("auth.sso_signed_in")
            .org(login.org_id)
            .account(account.id, ip)
            .target(AccountId::from(account.id))
            .details(json!({
                "email": account.email,
                "role": final_role,
                "account_created": created,
                "joined": joined,
                "issuer": connection.issuer,
            }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        let home = format!("{}/", state.config.base_url.as_str().trim_end_matches('/'));
        Ok(SignedIn::SeeOther(home, session.cookie))
    }
}

/// Opens a value sealed under `SECRETS_KEY`; one that does not open is the service's fault.
fn open(key: &[u8; 32], sealed: &str, purpose: &[u8]) -> Result<String, ApiError> {
    let bytes = platform::crypto::open(key, sealed, purpose)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("a sealed SSO value: {e}")))?;
    String::from_utf8(bytes)
        .map_err(|_| ApiError::Internal(anyhow::anyhow!("a sealed SSO value is not text")))
}

/// Takes the sign-in `state` names, once: it is deleted whether or not what follows succeeds.
/// Uses the sign-in of `login_state` once, if `browser` (the `service_sso` cookie) is the one
/// its start set: a callback from any other browser (login CSRF: an attacker's own sign-in, its
/// last step sent to a victim) is refused and leaves the sign-in to its own browser.
async fn take_login(
    state: &AppState,
    login_state: &str,
    browser: &str,
    now: DateTime<Utc>,
) -> Result<sso_logins::Model, ApiError> {
    let login = sso_logins::Entity::rows()
        .filter(sso_logins::Column::StateHash.eq(platform::secrets::hash(login_state)))
        .one(&state.db.orm)
        .await?
        .ok_or_else(stale)?;
    let same_browser = !browser.is_empty()
        && login.browser_hash.as_deref().is_some_and(|kept| {
            platform::secrets::equal_bytes(kept, &platform::secrets::hash(browser))
        });
    if !same_browser {
        return Err(ApiError::invalid(
            "This sign-in was started in another browser: start again here.",
        ));
    }
    let taken = sso_logins::Entity::delete_rows()
        .filter(sso_logins::Column::Id.eq(login.id))
        .exec(&state.db.orm)
        .await?;
    if taken.rows_affected != 1 || login.expires_at <= now {
        return Err(stale());
    }
    Ok(login)
}

/// The groups claim from userinfo, for providers that leave it out of the ID token; none when
/// the provider has no userinfo endpoint.
async fn userinfo_groups(
    state: &AppState,
    client: &provider::OidcClient,
    token: &provider::TokenResponse,
    claims: &IdTokenClaims<provider::ExtraClaims, CoreGenderClaim>,
    connection: &sso_connections::Model,
) -> Result<Vec<String>, ApiError> {
    let Ok(request) =
        client.user_info(token.access_token().clone(), Some(claims.subject().clone()))
    else {
        return Ok(Vec::new());
    };
    let info: provider::UserInfo = request
        .request_async(&state.outbound)
        .await
        .map_err(|e| ApiError::invalid(format!("The identity provider's userinfo failed: {e}.")))?;
    Ok(info
        .additional_claims()
        .groups(&connection.groups_claim)
        .unwrap_or_default())
}
