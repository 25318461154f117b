//! The one authorization mechanism. Handlers never read cookies or headers: they declare what
//! they need by the type of one argument, and this module answers for them.
//!
//! - [`Signed`]: any signed-in caller (session cookie or API token).
//! - [`OrgAccess<R>`]: an organization-scoped operation needing requirement `R`
//!   ([`crate::http::rights::Requirement`]). Its argument is the `{org}` path parameter, so the
//!   document states the requirement beside it.
//!
//! Order of checks, each with its answer (decisions §1): credentials (401 `unauthenticated`),
//! CSRF header on a session mutation (403 `forbidden`), membership of the organization — a
//! missing organization and somebody else's give the same 404 `not-found` — then the caller's
//! share of the organization's rate limit and the organization's limit itself (429
//! `rate-limited`), then the API-token rule (operations that need a person) and the role
//! (403 `forbidden`).

use std::marker::PhantomData;

use chrono::{DateTime, Duration, Utc};
use entities::{accounts, api_tokens, organizations, sessions};
use platform::{identity_changes::Mark, ids::OrgId};
use poem::{Request, http::HeaderValue};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions, SecurityScheme,
    auth::{ApiKey, Bearer},
    registry::{MetaParamIn, MetaSchema, MetaSchemaRef, Registry},
};
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set};
use uuid::Uuid;

use crate::{
    AppState,
    http::error::ApiError,
    http::identity_cache::{SessionAnswer, TokenAnswer},
    http::middleware::ExtraHeaders,
    http::rate_limit::{self, Limit},
    http::rights::{Requirement, Role},
};
use entities::scope::{AllOrgs, Credential, OrgScope, Untenanted};

pub const SESSION_COOKIE: &str = "service_session";
pub const CSRF_HEADER: &str = "x-service-csrf";
pub const API_TOKEN_PREFIX: &str = "sat_";
/// A session ends after this long without use…
pub const SESSION_IDLE: Duration = Duration::days(7);
/// …and at the latest this long after sign-in.
pub const SESSION_LIFETIME: Duration = Duration::days(30);
/// `last_seen_at` / `last_used_at` are written at most this often, not on every request.
const TOUCH_EVERY: Duration = Duration::seconds(60);

/// Session cookie `service_session` (HttpOnly, SameSite=Lax), set by the verify operations and
/// by accepting an invitation. Every POST, PUT, PATCH or DELETE made with it must also send the
/// session's `csrf_token` in the `X-Service-Csrf` header, or it is refused 403 `forbidden`.
/// Sessions end after 7 days without use and 30 days after sign-in.
#[derive(SecurityScheme)]
#[oai(ty = "api_key", key_name = "service_session", key_in = "cookie")]
pub struct SessionCookie(#[allow(dead_code)] ApiKey);

/// API token: `Authorization: Bearer sat_…`, created by an admin of the organization, with a
/// role no higher than its creator's. Needs no CSRF header. Refused (403 `forbidden`) wherever a
/// person is needed: billing, SSO, the SCIM token, creating or revoking API tokens, every
/// invitation operation and changing or removing members.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "sat_…")]
pub struct ApiToken(#[allow(dead_code)] Bearer);

/// How the caller proved who they are.
#[derive(Clone, Debug)]
pub enum Via {
    Session {
        session_id: Uuid,
        /// Never printed: `Secret` hides it from `Debug`.
        csrf_token: platform::config::Secret<String>,
    },
    ApiToken {
        token_id: Uuid,
        org_id: Uuid,
        role: Role,
    },
}

/// A signed-in person (or an API token acting for its creator).
#[derive(Clone, Debug)]
pub struct Caller {
    pub account: accounts::Model,
    pub via: Via,
    pub ip: Option<String>,
    /// The generation of who-may-do-what this request began in: what this request reads of it
    /// from memory must have been read in the same one (`crate::http::identity_cache`).
    pub mark: Option<Mark>,
}

impl Caller {
    pub fn account_id(&self) -> Uuid {
        self.account.id
    }

    /// The organization an API token belongs to (it can reach no other); none for a session.
    pub fn token_org(&self) -> Option<OrgId> {
        match self.via {
            Via::ApiToken { org_id, .. } => Some(org_id.into()),
            Via::Session { .. } => None,
        }
    }

    pub fn api_token_id(&self) -> Option<Uuid> {
        match self.via {
            Via::ApiToken { token_id, .. } => Some(token_id),
            Via::Session { .. } => None,
        }
    }

    pub fn session_id(&self) -> Option<Uuid> {
        match self.via {
            Via::Session { session_id, .. } => Some(session_id),
            Via::ApiToken { .. } => None,
        }
    }

    /// The session's CSRF token (none for an API token).
    pub fn csrf_token(&self) -> Option<&str> {
        match &self.via {
            Via::Session { csrf_token, .. } => Some(csrf_token.expose()),
            Via::ApiToken { .. } => None,
        }
    }
}

/// The client's address, as the audit log records it (see [`crate::http::client_address`]).
pub use crate::http::client_address::client_ip;

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie_value<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers()
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|header| header.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
}

fn state(req: &Request) -> Result<&AppState, ApiError> {
    AppState::of(req)
}

/// Resolves the caller from the request's credentials, enforcing CSRF on session mutations.
pub async fn authenticate(req: &Request) -> Result<Caller, ApiError> {
    let state = state(req)?;
    let now = state.clock.now();
    let ip = client_ip(req);
    if let Some(authorization) = req.header("authorization") {
        let token = authorization
            .strip_prefix("Bearer ")
            .map(str::trim)
            .ok_or(ApiError::Unauthenticated)?;
        if !platform::secrets::well_formed(API_TOKEN_PREFIX, token) {
            return Err(ApiError::Unauthenticated);
        }
        let mark = state.db.identity.mark().await;
        return authenticate_token(state, mark, token, now, ip).await;
    }
    let cookie = cookie_value(req, SESSION_COOKIE).ok_or(ApiError::Unauthenticated)?;
    if !platform::secrets::well_formed("", cookie) {
        return Err(ApiError::Unauthenticated);
    }
    let mark = state.db.identity.mark().await;
    let (session, account) = find_session(state, mark, cookie, now).await?;
    if !req.method().is_safe() {
        let sent = req.header(CSRF_HEADER).unwrap_or("");
        if !platform::secrets::equal(sent, &session.csrf_token) {
            return Err(ApiError::forbidden(
                "This change needs the session's csrf_token in the X-Service-Csrf header.",
            ));
        }
    }
    Ok(Caller {
        account,
        via: Via::Session {
            session_id: session.id,
            csrf_token: platform::config::Secret::new(session.csrf_token),
        },
        ip,
        mark,
    })
}

/// The live session for a cookie value, touched at most once a minute.
async fn find_session(
    state: &AppState,
    mark: Option<Mark>,
    cookie: &str,
    now: DateTime<Utc>,
) -> Result<(sessions::Model, accounts::Model), ApiError> {
    let hash = platform::secrets::hash(cookie);
    let shelf = &state.identity.sessions;
    let answer = match shelf.get(mark, &hash) {
        Some(kept) => kept,
        None => {
            // One query: the session and its account.
            let (session, account) = sessions::Entity::rows()
                .filter(sessions::Column::TokenHash.eq(hash.clone()))
                .find_also_related(accounts::Entity)
                .one(&state.db.orm)
                .await?
                .and_then(|(session, account)| account.map(|account| (session, account)))
                .ok_or(ApiError::Unauthenticated)?;
            shelf.keep(mark, hash.clone(), SessionAnswer { session, account })
        }
    };
    let SessionAnswer { session, account } = answer.as_ref();
    if session.expires_at <= now || session.last_seen_at + SESSION_IDLE <= now {
        return Err(ApiError::Unauthenticated);
    }
    let due = now - session.last_seen_at >= TOUCH_EVERY;
    // One request at a time writes it; the others meanwhile go on with the session as kept.
    if due && let Some(_writing) = state.identity.touches.claim(&hash) {
        // Only `last_seen_at` is written (and it is no change to who the caller is).
        let mut touched: sessions::ActiveModel = session.clone().into();
        touched.last_seen_at = Set(now);
        let session = touched.update(&state.db.orm).await?;
        let account = account.clone();
        shelf.keep(
            mark,
            hash,
            SessionAnswer {
                session: session.clone(),
                account: account.clone(),
            },
        );
        return Ok((session, account));
    }
    Ok((session.clone(), account.clone()))
}

async fn authenticate_token(
    state: &AppState,
    mark: Option<Mark>,
    token: &str,
    now: DateTime<Utc>,
    ip: Option<String>,
) -> Result<Caller, ApiError> {
    let hash = platform::secrets::hash(token);
    let shelf = &state.identity.tokens;
    let answer = match shelf.get(mark, &hash) {
        Some(kept) => kept,
        None => {
            let answer = read_token(state, hash.clone()).await?;
            shelf.keep(mark, hash.clone(), answer)
        }
    };
    let TokenAnswer {
        token: record,
        account,
        creator_role,
    } = answer.as_ref();
    if record.revoked_at.is_some() || record.expires_at.is_some_and(|at| at <= now) {
        return Err(ApiError::Unauthenticated);
    }
    let token_role: Role = record
        .role
        .parse()
        .map_err(|()| ApiError::Internal(anyhow::anyhow!("unknown stored role")))?;
    let due = record
        .last_used_at
        .is_none_or(|used| now - used >= TOUCH_EVERY);
    // One request at a time writes it; the others meanwhile go on with the token as kept.
    if due && let Some(_writing) = state.identity.touches.claim(&hash) {
        let mut touched: api_tokens::ActiveModel = record.clone().into();
        touched.last_used_at = Set(Some(now));
        let token = touched.update(&state.db.orm).await?;
        shelf.keep(
            mark,
            hash,
            TokenAnswer {
                token,
                account: account.clone(),
                creator_role: *creator_role,
            },
        );
    }
    Ok(Caller {
        account: account.clone(),
        via: Via::ApiToken {
            token_id: record.id,
            org_id: record.org_id,
            // A token acts for its creator and can never do more than the creator may now.
            role: token_role.min(*creator_role),
        },
        ip,
        mark,
    })
}

/// The API token with hash `hash`, its creator and the creator's role in its organization; a
/// token whose creator is no longer a member is no credential.
async fn read_token(state: &AppState, hash: Vec<u8>) -> Result<TokenAnswer, ApiError> {
    let token = api_tokens::Entity::by_credential(hash)
        .one(&state.db.orm)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    let membership = OrgScope::of(token.org_id)
        .member(token.created_by.into())
        .one(&state.db.orm)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    let creator_role: Role = membership
        .role
        .parse()
        .map_err(|()| ApiError::Internal(anyhow::anyhow!("unknown stored role")))?;
    let account = accounts::Entity::row(token.created_by)
        .one(&state.db.orm)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    Ok(TokenAnswer {
        token,
        account,
        creator_role,
    })
}

/// Any signed-in caller.
pub struct Signed(pub Caller);

impl<'a> ApiExtractor<'a> for Signed {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::SecurityScheme];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        SessionCookie::register(registry);
        ApiToken::register(registry);
    }

    fn security_schemes() -> Vec<&'static str> {
        let mut names = SessionCookie::security_schemes();
        names.extend(ApiToken::security_schemes());
        names
    }

    async fn from_request(
        req: &'a Request,
        _body: &mut poem::RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        Ok(Signed(authenticate(req).await?))
    }
}

/// The form handlers write the organization argument in: `org: org::Path<Operate>`.
///
/// poem-openapi numbers path parameters (`param0`, `param1`, …) by position, counting only
/// arguments whose type path has a segment named `Path`. This alias makes the organization
/// extractor count, so `{org}` and any later path parameter each read their own value.
pub mod org {
    pub type Path<R> = super::OrgAccess<R>;
}

/// A caller admitted to an organization for requirement `R`.
pub struct OrgAccess<R> {
    pub caller: Caller,
    pub org: organizations::Model,
    /// The effective role (an API token's is capped by its creator's).
    pub role: Role,
    _requirement: PhantomData<R>,
}

impl<R> OrgAccess<R> {
    pub fn org_id(&self) -> Uuid {
        self.org.id
    }

    /// The organization's handle on its rows: the only way a handler reaches them.
    pub fn scope(&self) -> OrgScope {
        OrgScope::of(self.org.id)
    }
}

/// Finds the organization `slug` if the caller belongs to it; otherwise the same `not-found`
/// whether it exists or not.
async fn membership(
    state: &AppState,
    caller: &Caller,
    slug: &str,
) -> Result<(organizations::Model, Role), ApiError> {
    let mark = caller.mark;
    match &caller.via {
        Via::ApiToken { org_id, role, .. } => {
            let shelf = &state.identity.organizations;
            let org = match shelf.get(mark, &slug.to_owned()) {
                Some(kept) => kept,
                None => {
                    let org = AllOrgs::organization_by_slug(slug)
                        .one(&state.db.orm)
                        .await?
                        .ok_or(ApiError::NotFound)?;
                    shelf.keep(mark, slug.to_owned(), org)
                }
            };
            if *org_id == org.id {
                Ok((org.as_ref().clone(), *role))
            } else {
                Err(ApiError::NotFound)
            }
        }
        Via::Session { .. } => {
            let shelf = &state.identity.places;
            let key = (caller.account.id, slug.to_owned());
            if let Some(kept) = shelf.get(mark, &key) {
                return Ok(kept.as_ref().clone());
            }
            // One query: the caller's membership of the organization with that slug.
            let (member, org) = AllOrgs::memberships_of(caller.account.id.into(), None)
                .find_also_related(organizations::Entity)
                .filter(organizations::Column::Slug.eq(slug))
                .one(&state.db.orm)
                .await?
                .and_then(|(member, org)| org.map(|org| (member, org)))
                .ok_or(ApiError::NotFound)?;
            let role = member
                .role
                .parse()
                .map_err(|()| ApiError::Internal(anyhow::anyhow!("unknown stored role")))?;
            Ok(shelf.keep(mark, key, (org, role)).as_ref().clone())
        }
    }
}

/// The share a caller takes from in one organization: a person's (all their sessions), or the
/// one all the organization's API tokens share (decisions §18: one admin minting a second
/// token must not get a second half of the organization's limit).
fn caller_bucket(org_id: Uuid, caller: &Caller) -> String {
    match &caller.via {
        Via::ApiToken { .. } => format!("caller:{org_id}:api-tokens"),
        Via::Session { .. } => format!("caller:{org_id}:usr:{}", caller.account.id),
    }
}

fn rate_limit_headers(req: &Request, decision: &rate_limit::Decision) {
    if let Some(extra) = req.extensions().get::<ExtraHeaders>() {
        extra.push("ratelimit-limit", HeaderValue::from(decision.limit));
        extra.push("ratelimit-remaining", HeaderValue::from(decision.remaining));
        extra.push("ratelimit-reset", HeaderValue::from(decision.reset_s));
    }
}

fn refused(decision: &rate_limit::Decision) -> ApiError {
    ApiError::RateLimited {
        retry_after_s: decision.retry_after_s,
        limit: decision.limit,
    }
}

/// Takes one request from the caller's share, then from the organization's limit, adding the
/// `RateLimit-*` headers of whichever of the two is nearer to running out.
///
/// The share (half the organization's burst and rate, [`Limit::share`]) keeps one member, or
/// the organization's API tokens together, from spending the whole organization's limit; a
/// request refused by the share takes nothing from the organization.
async fn limit_org(
    req: &Request,
    state: &AppState,
    org_id: Uuid,
    caller: &Caller,
) -> Result<(), ApiError> {
    limit_org_for(req, state, org_id, &caller_bucket(org_id, caller)).await
}

/// [`limit_org`] for a caller that is not a person or an API token (the organization's SCIM
/// provider), whose share is the bucket `bucket`.
pub async fn limit_org_for(
    req: &Request,
    state: &AppState,
    org_id: Uuid,
    bucket: &str,
) -> Result<(), ApiError> {
    let limit = Limit {
        burst: state.config.rate_limit_burst,
        per_second: state.config.rate_limit_per_second,
    };
    let now = state.clock.now();
    let org_bucket = format!("org:{org_id}");
    let own = rate_limit::take_configured(state, bucket, limit.share(), now).await?;
    if !own.allowed {
        rate_limit_headers(req, &own);
        return Err(refused(&own));
    }
    let org = rate_limit::take_configured(state, &org_bucket, limit, now).await?;
    if !org.allowed {
        rate_limit_headers(req, &org);
        return Err(refused(&org));
    }
    rate_limit_headers(
        req,
        if org.remaining < own.remaining {
            &org
        } else {
            &own
        },
    );
    Ok(())
}

impl<R: Requirement> OrgAccess<R> {
    async fn resolve(req: &Request, slug: &str) -> Result<Self, ApiError> {
        let caller = authenticate(req).await?;
        let state = state(req)?;
        let (org, role) = membership(state, &caller, slug).await?;
        limit_org(req, state, org.id, &caller).await?;
        if !R::API_TOKENS && caller.api_token_id().is_some() {
            return Err(ApiError::forbidden(
                "This operation needs a person: sign in. API tokens cannot be used for it.",
            ));
        }
        if !R::RIGHT.allowed_to(role) {
            return Err(ApiError::forbidden(format!(
                "This needs the role {} or above; yours is {role}.",
                R::RIGHT.minimum_role()
            )));
        }
        Ok(OrgAccess {
            caller,
            org,
            role,
            _requirement: PhantomData,
        })
    }
}

impl<'a, R: Requirement> ApiExtractor<'a> for OrgAccess<R> {
    const TYPES: &'static [ApiExtractorType] = &[
        ApiExtractorType::Parameter,
        ApiExtractorType::SecurityScheme,
    ];
    const PARAM_IS_REQUIRED: bool = true;
    type ParamType = String;
    type ParamRawType = String;

    fn register(registry: &mut Registry) {
        Signed::register(registry);
    }

    fn security_schemes() -> Vec<&'static str> {
        Signed::security_schemes()
    }

    fn param_in() -> Option<MetaParamIn> {
        Some(MetaParamIn::Path)
    }

    fn param_schema_ref() -> Option<MetaSchemaRef> {
        Some(MetaSchemaRef::Inline(Box::new(MetaSchema {
            description: Some(R::DOC),
            ..MetaSchema::new("string")
        })))
    }

    async fn from_request(
        req: &'a Request,
        _body: &mut poem::RequestBody,
        opts: ExtractParamOptions<String>,
    ) -> poem::Result<Self> {
        let slug = req.raw_path_param(opts.name).unwrap_or_default().to_owned();
        Ok(Self::resolve(req, &slug).await?)
    }
}
