//! Who is calling a SCIM endpoint: the organization whose SCIM token is presented
//! (`Authorization: Bearer scim_…`). A missing, unknown, revoked or replaced token is 401; the
//! organization's plan must include SCIM (403); the provider's requests count against the
//! organization's request limit (its own share, like a person's). Every row the SCIM handlers
//! reach is then in this organization's scope: an id of another organization is simply not
//! found.

use chrono::Duration;
use entities::scim_tokens;
use platform::ids::{AccountId, OrgId};
use poem::Request;
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions, SecurityScheme, auth::Bearer,
    registry::Registry,
};
use sea_orm::{ColumnTrait, QueryFilter, sea_query::Expr};

use super::wire::ScimError;
use crate::{
    AppState,
    http::access::limit_org_for,
    http::rights::Role,
    scim::token::{SCIM_TOKEN_PREFIX, check_plan},
};
use entities::scope::{Credential, OrgScope};

/// `last_used_at` is written at most this often.
const TOUCH_EVERY: Duration = Duration::seconds(60);

/// SCIM token: `Authorization: Bearer scim_…`, issued by an owner of the organization
/// (`POST /v1/orgs/{org}/scim/token`). It reaches only the SCIM protocol, and only its own
/// organization, and only while whoever issued it is an owner there.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "scim_…")]
pub struct ScimToken(#[allow(dead_code)] Bearer);

/// The organization a SCIM request acts for.
pub struct Provider {
    pub org_id: OrgId,
}

impl Provider {
    pub fn scope(&self) -> OrgScope {
        OrgScope::of(self.org_id)
    }
}

fn bearer(req: &Request) -> Option<&str> {
    let value = req.header("authorization")?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

async fn authenticate(req: &Request) -> Result<Provider, ScimError> {
    let state = req
        .data::<AppState>()
        .ok_or_else(|| ScimError::internal(anyhow::anyhow!("the application state is missing")))?;
    let token = bearer(req).ok_or_else(ScimError::unauthorized)?;
    if !platform::secrets::well_formed(SCIM_TOKEN_PREFIX, token) {
        return Err(ScimError::unauthorized());
    }
    let record = scim_tokens::Entity::by_credential(platform::secrets::hash(token))
        .filter(scim_tokens::Column::RevokedAt.is_null())
        .one(&state.db.orm)
        .await?
        .ok_or_else(ScimError::unauthorized)?;
    let org_id = OrgId::from(record.org_id);
    // The token belongs to the owner who issued it (decisions §18). Every change through the
    // API that unmakes an owner revokes it in the same transaction; this also holds for a
    // change made behind the API's back (an account deleted by hand, say).
    let issuer_is_owner = OrgScope::of(record.org_id)
        .member(AccountId::from(record.issued_by))
        .one(&state.db.orm)
        .await?
        .is_some_and(|m| Role::stored(&m.role) == Some(Role::Owner));
    if !issuer_is_owner {
        let txn = state.db.begin_write().await?;
        crate::scim::token::revoke_issued_by(
            &txn,
            OrgScope::of(record.org_id),
            record.issued_by,
            state.clock.now(),
        )
        .await?;
        txn.commit().await?;
        return Err(ScimError::unauthorized());
    }
    limit_org_for(
        req,
        state,
        record.org_id,
        &format!("caller:{}:scim", record.org_id),
    )
    .await?;
    check_plan(state, org_id).await?;
    let now = state.clock.now();
    if record
        .last_used_at
        .is_none_or(|used| now - used >= TOUCH_EVERY)
    {
        // By the hash too: a token replaced meanwhile is not touched.
        OrgScope::of(record.org_id)
            .update_rows::<scim_tokens::Entity>()
            .col_expr(scim_tokens::Column::LastUsedAt, Expr::value(now))
            .filter(scim_tokens::Column::TokenHash.eq(record.token_hash))
            .exec(&state.db.orm)
            .await?;
    }
    Ok(Provider { org_id })
}

impl<'a> ApiExtractor<'a> for Provider {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::SecurityScheme];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        ScimToken::register(registry);
    }

    fn security_schemes() -> Vec<&'static str> {
        ScimToken::security_schemes()
    }

    async fn from_request(
        req: &'a Request,
        _body: &mut poem::RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        Ok(authenticate(req).await?)
    }
}
