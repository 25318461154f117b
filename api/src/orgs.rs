//! Organizations: the caller's, and one by slug.

use chrono::{DateTime, Utc};
use entities::{memberships, organizations};
use poem_openapi::{Object, OpenApi, param::Query, payload::Json};
use sea_orm::{ColumnTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::{
    AppState,
    access::{Signed, org},
    error::{BadRequest, Errors, NotFound, TooManyRequests, Unauthorized},
    paging::{Cursor, Page, page_limit},
    roles::ReadFleet,
    scope,
    tags::Tag,
};

#[derive(Object)]
pub struct Organization {
    /// The slug that addresses it in paths.
    pub slug: String,
    pub name: String,
    /// free, team, business or enterprise.
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
        let limit = page_limit(limit.0)?;
        let caller = caller.0;
        let mut query = scope::edge::memberships_of(caller.account_id().into(), caller.token_org())
            .order_by_asc(memberships::Column::OrgId)
            .limit(u64::from(limit) + 1);
        if let Some(after) = Cursor::decode(cursor.0.as_deref())? {
            query = query.filter(memberships::Column::OrgId.gt(after));
        }
        let rows = query
            .find_also_related(organizations::Entity)
            .all(&state.db.orm)
            .await?;
        let rows: Vec<_> = rows
            .into_iter()
            .filter_map(|(m, org)| org.map(|org| (m, org)))
            .collect();
        Ok(Json(Page::from_rows(
            rows,
            limit,
            |(m, _)| m.org_id,
            |(m, org)| Organization {
                slug: org.slug,
                name: org.name,
                plan: org.plan,
                role: m.role,
                sso_enforced: org.sso_enforced,
                created_at: org.created_at,
            },
        )))
    }

    /// One organization the caller belongs to.
    #[oai(
        path = "/v1/orgs/:org",
        method = "get",
        operation_id = "getOrganization"
    )]
    async fn get(
        &self,
        org: org::Path<ReadFleet>,
    ) -> Result<Json<Organization>, Errors<(Unauthorized, NotFound, TooManyRequests)>> {
        Ok(Json(Organization {
            role: org.role.as_str().to_owned(),
            slug: org.org.slug,
            name: org.org.name,
            plan: org.org.plan,
            sso_enforced: org.org.sso_enforced,
            created_at: org.org.created_at,
        }))
    }
}
