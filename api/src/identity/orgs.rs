//! Organizations: the caller's, and one by slug.

use chrono::{DateTime, Utc};
use entities::{memberships, organizations};
use poem_openapi::{Object, OpenApi, param::Query, payload::Json};

use crate::{
    AppState,
    http::access::{Signed, org},
    http::error::{BadRequest, Errors, NotFound, TooManyRequests, Unauthorized},
    http::paging::{Order, Page, Paging},
    http::scope,
    http::tags::Tag,
    identity::roles::ReadFleet,
};

#[derive(Object)]
pub struct Organization {
    /// The slug that addresses it in paths.
    pub slug: String,
    pub name: String,
    /// free, team, business or enterprise: the plan in force now (its subscription's, else the
    /// deployment's default plan).
    pub plan: String,
    /// The caller's role in it.
    pub role: String,
    /// Whether members must sign in through single sign-on.
    pub sso_enforced: bool,
    pub created_at: DateTime<Utc>,
}

pub struct OrgsApi;

#[OpenApi(tag = "Tag::Organizations")]
impl OrgsApi {
    /// The organizations the caller belongs to (with an API token: its own), oldest first.
    #[oai(path = "/v1/orgs", method = "get", operation_id = "listOrganizations")]
    async fn list(
        &self,
        state: poem::web::Data<&AppState>,
        caller: Signed,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Organization>>, Errors<(BadRequest, Unauthorized)>> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let caller = caller.0;
        let query = paging.apply(
            scope::edge::memberships_of(caller.account_id().into(), caller.token_org()),
            memberships::Column::OrgId,
            Order::OldestFirst,
        );
        let rows: Vec<_> = query
            .find_also_related(organizations::Entity)
            .all(&state.db.orm)
            .await?
            .into_iter()
            .filter_map(|(m, org)| org.map(|org| (m, org)))
            .collect();
        let rows = paging.cut(rows, |(m, _)| m.org_id);
        let plans = domain::billing::plans_of(
            &state.db.orm,
            rows.rows.iter().map(|(m, _)| m.org_id),
            &domain::billing::default_plan(&state.config),
        )
        .await?;
        Ok(Json(rows.page(|(m, org)| Organization {
            plan: plans.get(org.id).to_string(),
            slug: org.slug,
            name: org.name,
            role: m.role,
            sso_enforced: org.sso_enforced,
            created_at: org.created_at,
        })))
    }

    /// One organization the caller belongs to.
    #[oai(
        path = "/v1/orgs/:org",
        method = "get",
        operation_id = "getOrganization"
    )]
    async fn get(
        &self,
        state: poem::web::Data<&AppState>,
        org: org::Path<ReadFleet>,
    ) -> Result<Json<Organization>, Errors<(Unauthorized, NotFound, TooManyRequests)>> {
        let plan = state
            .identity
            .plan_of(&state, org.caller.mark, org.org.id)
            .await?;
        Ok(Json(Organization {
            role: org.role.as_str().to_owned(),
            slug: org.org.slug,
            name: org.org.name,
            plan: plan.to_string(),
            sso_enforced: org.org.sso_enforced,
            created_at: org.org.created_at,
        }))
    }
}
