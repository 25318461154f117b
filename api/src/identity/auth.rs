//! Sign-up and sign-in by emailed one-time token, the two verify operations, sign-out, and the
//! session they start (decisions §3).

use chrono::{DateTime, Utc};
use domain::email_limits::LinkKind;
use domain::notifications::jobs::SendLink;
use entities::{accounts, email_tokens, memberships, organizations, sessions};
use platform::ids::AccountId;
use poem::Request;
use poem_openapi::{ApiResponse, Object, OpenApi, payload::Json};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, QueryFilter, Set, sea_query::Expr};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::{self, SESSION_COOKIE, SESSION_LIFETIME, Signed},
    http::client_address,
    http::error::{
        ApiError, BadRequest, Conflict, Errors, Forbidden, NotFound, TooManyRequests, Unauthorized,
    },
    http::input::{self, Email, Slug},
    http::rate_limit::{self, Limit},
    http::rights::Role,
    http::tags::Tag,
    http::text::{EmailText, Name, SlugText, Text},
    identity::audit::Entry,
};
use entities::scope::{AllOrgs, Untenanted};

/// Per client address, across the unauthenticated operations.
const PER_IP: Limit = Limit {
    burst: 20,
    per_second: 0.2,
};
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct MagicLinkRequest {
    /// The address to send the sign-in link to.
    #[oai(validator(max_length = 254))]
    pub email: EmailText,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct NewOrganization {
    /// Display name.
    #[oai(validator(max_length = 255))]
    pub name: Name,
    /// 3–40 lowercase letters, digits and hyphens; unique.
    #[oai(validator(max_length = 40))]
    pub slug: SlugText,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct SignUpRequest {
    #[oai(validator(max_length = 254))]
    pub email: EmailText,
    /// The person's name.
    #[oai(validator(max_length = 255))]
    pub name: Name,
    pub organization: NewOrganization,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The token from the emailed link.
    #[oai(validator(max_length = 256))]
    pub token: Text,
}

/// The session result.
#[derive(Object)]
pub struct SessionResult {
    /// Echo it in the `X-Service-Csrf` header on every mutation made with this session.
    pub csrf_token: String,
}

#[derive(ApiResponse)]
pub enum Accepted {
    /// Accepted. An email is on its way if the request can be served; the answer is the same
    /// whether or not the address has an account.
    #[oai(status = 202)]
    Accepted,
}

#[derive(ApiResponse)]
pub enum SignedIn {
    /// Signed in: the `service_session` cookie is set and the body holds the CSRF token.
    #[oai(status = 200)]
    Ok(
        Json<SessionResult>,
        /// The session cookie.
        #[oai(header = "Set-Cookie")]
        String,
    ),
}

#[derive(ApiResponse)]
pub enum SignedOut {
    /// Signed out: the session has ended and its cookie is cleared.
    #[oai(status = 204)]
    Ok(#[oai(header = "Set-Cookie")] String),
}

/// A started session: the cookie to set and the CSRF token to return.
pub struct NewSession {
    pub cookie: String,
    pub csrf_token: String,
}

impl NewSession {
    pub fn answer(self) -> SignedIn {
        SignedIn::Ok(
            Json(SessionResult {
                csrf_token: self.csrf_token,
            }),
            self.cookie,
        )
    }
}

fn cookie_header(state: &AppState, value: &str, max_age: i64) -> String {
    cookie(state, SESSION_COOKIE, value, "/", max_age)
}

/// A `Set-Cookie` value for one of the service's cookies: HttpOnly, SameSite=Lax, and Secure
/// unless the deployment is plain http on localhost.
pub fn cookie(state: &AppState, name: &str, value: &str, path: &str, max_age: i64) -> String {
    let url = &state.config.base_url;
    let local_http = url.scheme() == "http"
        && matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    let secure = if local_http { "" } else { "; Secure" };
    format!("{name}={value}; HttpOnly; SameSite=Lax; Path={path}; Max-Age={max_age}{secure}")
}

/// Starts a session for `account_id` on `db` (the caller's transaction).
pub async fn start_session<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    account_id: Uuid,
    now: DateTime<Utc>,
) -> Result<NewSession, ApiError> {
    let token = platform::secrets::mint("");
    let csrf = platform::secrets::mint("");
    sessions::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        token_hash: Set(token.hash),
        account_id: Set(account_id),
        csrf_token: Set(csrf.value.clone()),
        created_at: Set(now),
        last_seen_at: Set(now),
        expires_at: Set(now + SESSION_LIFETIME),
    }
    .insert(db)
    .await?;
    Ok(NewSession {
        cookie: cookie_header(state, &token.value, SESSION_LIFETIME.num_seconds()),
        csrf_token: csrf.value,
    })
}

/// Whether `email` must sign in through its organization's identity provider: its domain is
/// verified by an organization that enforces single sign-on (`crate::sso::enforce`).
pub async fn sso_required<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    email: &str,
) -> Result<bool, ApiError> {
    crate::sso::enforce::required_for(state, db, email).await
}

/// Applies the per-client-address limit of the unauthenticated operations (the address of
/// [`client_address`]: `X-Forwarded-For` counts only from a trusted proxy).
pub async fn limit_anonymous(state: &AppState, req: &Request) -> Result<(), ApiError> {
    let now = state.clock.now();
    let key = format!("auth-ip:{}", client_address::limit_key(req));
    let decision = rate_limit::take(&state.db, &key, PER_IP, now).await?;
    if !decision.allowed {
        return Err(ApiError::RateLimited {
            retry_after_s: decision.retry_after_s,
            limit: decision.limit,
        });
    }
    Ok(())
}

/// Whether a link of `kind` may be emailed to `email` now (decisions §18: 1 a minute and 5 an
/// hour per address and kind); when it may, its place is taken.
async fn may_email(state: &AppState, kind: LinkKind, email: &Email) -> Result<bool, ApiError> {
    let txn = state.db.begin_write().await?;
    let allowed = domain::email_limits::take(&txn, kind, email.as_str(), state.clock.now()).await?;
    txn.commit().await?;
    if !allowed {
        tracing::info!(
            kind = ?kind,
            "an emailed link was asked for again too soon: answered 202, nothing sent"
        );
    }
    Ok(allowed)
}

/// Marks an unused, unexpired token of `purpose` used and returns it; `invalid-token` for any
/// other token, with one answer for unknown, used and expired.
async fn consume_token<C: ConnectionTrait>(
    db: &C,
    purpose: &str,
    token: &str,
    now: DateTime<Utc>,
) -> Result<email_tokens::Model, ApiError> {
    if !platform::secrets::well_formed("", token) {
        return Err(ApiError::InvalidToken);
    }
    let hash = platform::secrets::hash(token);
    let consumed = email_tokens::Entity::update_rows()
        .col_expr(email_tokens::Column::UsedAt, Expr::value(now))
        .filter(email_tokens::Column::TokenHash.eq(hash.clone()))
        .filter(email_tokens::Column::Purpose.eq(purpose))
        .filter(email_tokens::Column::UsedAt.is_null())
        .filter(email_tokens::Column::ExpiresAt.gt(now))
        .exec(db)
        .await?;
    if consumed.rows_affected != 1 {
        return Err(ApiError::InvalidToken);
    }
    email_tokens::Entity::rows()
        .filter(email_tokens::Column::TokenHash.eq(hash))
        .one(db)
        .await?
        .ok_or(ApiError::InvalidToken)
}

pub struct AuthApi;

type AnonErrors = Errors<(BadRequest, TooManyRequests)>;
type VerifyErrors = Errors<(BadRequest, Forbidden, NotFound, Conflict, TooManyRequests)>;

#[OpenApi(tag = "Tag::Auth")]
impl AuthApi {
    /// Request a sign-up email. Always 202 whether or not the address has an account; the
    /// emailed link (`{SERVICE_BASE_URL}/sign-up/verify?token=…`) is valid once, for 15
    /// minutes. Limited per client address (429 `rate-limited`); an address is sent at most one
    /// sign-up link a minute and five an hour, and a request beyond that is still answered 202
    /// (nothing is sent).
    #[oai(path = "/v1/auth/sign-up", method = "post", operation_id = "signUp")]
    async fn sign_up(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        body: Json<SignUpRequest>,
    ) -> Result<Accepted, AnonErrors> {
        let email = Email::parse("email", &body.email)?;
        let name = input::name("name", &body.name)?;
        let org_name = input::name("organization.name", &body.organization.name)?;
        let slug = Slug::parse("organization.slug", &body.organization.slug)?;
        limit_anonymous(&state, req).await?;
        if !may_email(&state, LinkKind::SignUp, &email).await? {
            return Ok(Accepted::Accepted);
        }
        // The worker mints the token when it sends the email: no credential in the queue.
        state
            .queue
            .push(SendLink::SignUp {
                email: email.as_str().to_owned(),
                name,
                organization_name: org_name,
                organization_slug: slug.as_str().to_owned(),
            })
            .await?;
        Ok(Accepted::Accepted)
    }

    /// Request a sign-in email. Always 202 whether or not the address has an account; only an
    /// existing account is sent a link (`{SERVICE_BASE_URL}/sign-in/verify?token=…`), valid
    /// once, for 15 minutes. Limited per client address (429 `rate-limited`); an address is
    /// sent at most one sign-in link a minute and five an hour (a sign-up link does not count),
    /// and a request beyond that is still answered 202 (nothing is sent).
    #[oai(
        path = "/v1/auth/magic-link",
        method = "post",
        operation_id = "requestMagicLink"
    )]
    async fn magic_link(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        body: Json<MagicLinkRequest>,
    ) -> Result<Accepted, AnonErrors> {
        let email = Email::parse("email", &body.email)?;
        limit_anonymous(&state, req).await?;
        // The same work whether or not the address has an account (the answer's timing tells
        // nothing): the limit is counted, and the worker looks the account up, mints the token
        // and sends the link.
        if !may_email(&state, LinkKind::SignIn, &email).await? {
            return Ok(Accepted::Accepted);
        }
        state
            .queue
            .push(SendLink::SignIn {
                email: email.as_str().to_owned(),
            })
            .await?;
        Ok(Accepted::Accepted)
    }

    /// Exchange a sign-in token for a session. An unknown, used or expired token gets one
    /// answer, 404 `invalid-token`; an address at a verified domain of an organization that
    /// enforces single sign-on gets 403 `sso-required` (it signs in through
    /// `GET /v1/auth/sso/start`).
    #[oai(
        path = "/v1/auth/magic-link/verify",
        method = "post",
        operation_id = "verifyMagicLink"
    )]
    async fn verify_magic_link(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        body: Json<VerifyRequest>,
    ) -> Result<SignedIn, VerifyErrors> {
        limit_anonymous(&state, req).await?;
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let token = consume_token(&txn, "sign_in", body.token.trim(), now).await?;
        let account = accounts::Entity::rows()
            .filter(accounts::Column::Email.eq(token.email.as_str()))
            .one(&txn)
            .await?
            .ok_or(ApiError::InvalidToken)?;
        if sso_required(&state, &txn, &account.email).await? {
            return Err(ApiError::SsoRequired.into());
        }
        let session = start_session(&state, &txn, account.id, now).await?;
        let ip = access::client_ip(req);
        for membership in AllOrgs::memberships_of(account.id.into(), None)
            .all(&txn)
            .await?
        {
            Entry::new("auth.signed_in")
                .org(membership.org_id)
                .account(account.id, ip.clone())
                .target(AccountId::from(account.id))
                .write(&txn, now)
                .await?;
        }
        txn.commit().await?;
        Ok(session.answer())
    }

    /// Exchange a sign-up token for a session: the account (if new) and its organization are
    /// created, the person is its owner, on the free plan. An unknown, used or expired token
    /// gets 404 `invalid-token`; a slug taken meanwhile 409 `conflict`; an address at a
    /// verified domain of an organization that enforces single sign-on 403 `sso-required`.
    #[oai(
        path = "/v1/auth/sign-up/verify",
        method = "post",
        operation_id = "verifySignUp"
    )]
    async fn verify_sign_up(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        body: Json<VerifyRequest>,
    ) -> Result<SignedIn, VerifyErrors> {
        limit_anonymous(&state, req).await?;
        let now = state.clock.now();
        let ip = access::client_ip(req);
        let txn = state.db.begin_write().await?;
        let token = consume_token(&txn, "sign_up", body.token.trim(), now).await?;
        // A sign-up token always carries what sign-up asked for; one that cannot be read is
        // the service's fault (500), not the caller's.
        let payload = token
            .payload
            .as_ref()
            .ok_or(ApiError::InvalidToken)?
            .read()?;

        // Nobody at an enforcing organization's domain signs up around its provider.
        if sso_required(&state, &txn, &token.email).await? {
            return Err(ApiError::SsoRequired.into());
        }
        let (account, _) =
            domain::accounts::for_address(&txn, &token.email, Some(payload.name.clone()), now)
                .await?;
        let slug_taken = AllOrgs::organization_by_slug(&payload.organization_slug)
            .one(&txn)
            .await?
            .is_some();
        if slug_taken {
            return Err(ApiError::Conflict(format!(
                "The slug {} was taken since you signed up; sign up again with another.",
                payload.organization_slug
            ))
            .into());
        }
        let org = organizations::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            slug: Set(payload.organization_slug.clone()),
            name: Set(payload.organization_name.clone()),
            plan: Set("free".into()),
            sso_enforced: Set(false),
            created_at: Set(now),
            proposal_seq: Set(0),
            max_concurrent_reboots: Set(None),
        }
        .insert(&txn)
        .await
        .map_err(|e| unique_slug(e, &payload.organization_slug))?;
        memberships::ActiveModel {
            org_id: Set(org.id),
            account_id: Set(account.id),
            role: Set(Role::Owner.as_str().into()),
            created_at: Set(now),
        }
        .insert(&txn)
        .await?;
        let session = start_session(&state, &txn, account.id, now).await?;
        Entry::new("auth.signed_up")
            .org(org.id)
            .account(account.id, ip)
            .target_organization(&org.slug)
            .details(serde_json::json!({ "email": account.email, "role": "owner", "plan": "free" }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(session.answer())
    }

    /// End the current session and clear its cookie. With an API token there is no session to
    /// end: revoke the token instead; the answer is the same.
    #[oai(path = "/v1/auth/sign-out", method = "post", operation_id = "signOut")]
    async fn sign_out(
        &self,
        state: poem::web::Data<&AppState>,
        caller: Signed,
    ) -> Result<SignedOut, Errors<(Unauthorized, Forbidden)>> {
        if let Some(session_id) = caller.0.session_id() {
            sessions::Entity::delete_rows()
                .filter(sessions::Column::Id.eq(session_id))
                .exec(&state.db.orm)
                .await?;
        }
        Ok(SignedOut::Ok(cookie_header(&state, "", 0)))
    }
}

/// A unique violation on the slug (a concurrent sign-up won the race) is a conflict.
fn unique_slug(err: sea_orm::DbErr, slug: &str) -> ApiError {
    if matches!(
        err.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    ) {
        ApiError::Conflict(format!("The slug {slug} is taken."))
    } else {
        err.into()
    }
}
