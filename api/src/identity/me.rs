//! The signed-in person: who they are, their organizations and roles, their profile.

use entities::{accounts, organizations};
use platform::ids::AccountId;
use poem_openapi::{Object, OpenApi, payload::Json};
use sea_orm::{ActiveModelTrait, Set};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::Signed,
    http::error::{ApiError, BadRequest, Errors, Forbidden, Unauthorized},
    http::identity_cache::MineAnswer,
    http::input,
    http::tags::Tag,
    http::text::{Name, Text},
};
use entities::scope::AllOrgs;

/// An organization the person belongs to, with their role there.
#[derive(Object)]
pub struct MyOrganization {
    pub slug: String,
    pub name: String,
    /// owner, admin, operator or viewer.
    pub role: String,
    /// free, team, business or enterprise: the plan in force now.
    pub plan: String,
}

#[derive(Object)]
pub struct Me {
    /// The account's id (`usr_`).
    pub id: AccountId,
    pub email: String,
    #[oai(nullable)]
    pub name: Option<String>,
    /// IANA time zone; digests arrive at 08:00 in it.
    pub time_zone: String,
    pub organizations: Vec<MyOrganization>,
    /// The session's CSRF token, to echo in `X-Service-Csrf`; absent when called with an API
    /// token (which needs none).
    #[oai(nullable)]
    pub csrf_token: Option<String>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct MePatch {
    /// New name (1–255 characters); absent leaves it.
    #[oai(validator(max_length = 255))]
    pub name: Option<Name>,
    /// New IANA time zone such as `Europe/London`; absent leaves it.
    #[oai(validator(max_length = 64))]
    pub time_zone: Option<Text>,
}

pub struct MeApi;

async fn me(state: &AppState, caller: &crate::http::access::Caller) -> Result<Me, ApiError> {
    let account = &caller.account;
    let shelf = &state.identity.mine;
    let key = (account.id, caller.token_org().map(Uuid::from));
    let mine = match shelf.get(caller.mark, &key) {
        Some(kept) => kept,
        None => {
            // One query: the memberships and their organizations; one for their plans.
            let memberships = AllOrgs::memberships_of(account.id.into(), caller.token_org())
                .find_also_related(organizations::Entity)
                .all(&state.db.orm)
                .await?
                .into_iter()
                .filter_map(|(membership, org)| org.map(|org| (membership, org)))
                .collect::<Vec<_>>();
            let plans = domain::billing::plans_of(
                &state.db.orm,
                memberships.iter().map(|(membership, _)| membership.org_id),
                &domain::billing::default_plan(&state.config),
            )
            .await?;
            shelf.keep(caller.mark, key, MineAnswer { memberships, plans })
        }
    };
    let mut organizations: Vec<MyOrganization> = mine
        .memberships
        .iter()
        .map(|(membership, org)| MyOrganization {
            slug: org.slug.clone(),
            name: org.name.clone(),
            role: membership.role.clone(),
            plan: mine.plans.get(org.id).to_string(),
        })
        .collect();
    organizations.sort_by(|a, b| a.slug.cmp(&b.slug));
    let csrf_token = caller.csrf_token().map(str::to_owned);
    Ok(Me {
        id: AccountId::from(account.id),
        email: account.email.clone(),
        name: account.name.clone(),
        time_zone: account.time_zone.clone(),
        organizations,
        csrf_token,
    })
}

#[OpenApi(tag = "Tag::Me")]
impl MeApi {
    /// Who is signed in: the account, their organizations with roles, and the session's CSRF
    /// token.
    #[oai(path = "/v1/me", method = "get", operation_id = "getMe")]
    async fn get(
        &self,
        state: poem::web::Data<&AppState>,
        caller: Signed,
    ) -> Result<Json<Me>, Errors<(Unauthorized,)>> {
        Ok(Json(me(&state, &caller.0).await?))
    }

    /// Change one's name or time zone (validated against the IANA database).
    #[oai(path = "/v1/me", method = "patch", operation_id = "updateMe")]
    async fn patch(
        &self,
        state: poem::web::Data<&AppState>,
        caller: Signed,
        body: Json<MePatch>,
    ) -> Result<Json<Me>, Errors<(BadRequest, Unauthorized, Forbidden)>> {
        let name = body
            .name
            .as_deref()
            .map(|n| input::name("name", n))
            .transpose()?;
        let time_zone = body
            .time_zone
            .as_deref()
            .map(|z| input::time_zone("time_zone", z))
            .transpose()?;
        let mut caller = caller.0;
        if name.is_some() || time_zone.is_some() {
            let mut account: accounts::ActiveModel = caller.account.clone().into();
            if let Some(name) = name {
                account.name = Set(Some(name));
            }
            if let Some(time_zone) = time_zone {
                account.time_zone = Set(time_zone);
            }
            account.updated_at = Set(state.clock.now());
            caller.account = account.update(&state.db.orm).await?;
        }
        Ok(Json(me(&state, &caller).await?))
    }
}
