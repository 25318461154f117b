//! Organizations: the caller's, one by slug, and its settings (the reboot budget,
//! decisions §20).

use chrono::{DateTime, Utc};
use entities::{memberships, organizations};
use poem_openapi::{Object, OpenApi, param::Query, payload::Json, types::MaybeUndefined};
use sea_orm::{QuerySelect, sea_query::Expr};

use crate::{
    AppState,
    http::access::{Signed, org},
    http::error::{
        ApiError, BadRequest, Errors, NotFound, OrgInputErrors, TooManyRequests, Unauthorized,
    },
    http::paging::{Order, Page, Paging},
    http::rights::{OrgSettings, ReadFleet},
    http::tags::Tag,
    identity::audit::Entry,
};
use entities::scope::{AllOrgs, OrgScope};

/// The largest reboot budget: far beyond any fleet's wish, well inside the column.
pub const MAX_CONCURRENT_REBOOTS: u32 = 1_000_000;

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
    /// At most this many of its hosts reboot at once (decisions §20); null: no limit. A host is
    /// rebooting from a job that may reboot handed out until its first check-in after the
    /// job's result, at most 30 minutes.
    #[oai(nullable)]
    pub max_concurrent_reboots: Option<u32>,
    pub created_at: DateTime<Utc>,
}

/// Changes to an organization's settings; an absent field is left as it is.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct OrganizationPatch {
    /// At most this many hosts reboot at once (1–1,000,000); null: no limit. A job that may
    /// reboot is handed out only while fewer hosts are rebooting; a host over the budget
    /// installs its change at once and gets a separate `reboot` job when a slot frees.
    #[oai(validator(minimum(value = "1"), maximum(value = "1000000")))]
    pub max_concurrent_reboots: MaybeUndefined<u32>,
}

fn budget(stored: Option<i32>) -> Option<u32> {
    stored.and_then(|n| u32::try_from(n).ok())
}

/// The organization's reboot budget as stored now (the organization the access check found
/// may be one this replica remembers from before a change).
async fn stored_budget<C: sea_orm::ConnectionTrait>(
    db: &C,
    scope: OrgScope,
) -> Result<Option<u32>, sea_orm::DbErr> {
    let stored: Option<Option<i32>> = scope
        .rows::<organizations::Entity>()
        .select_only()
        .column(organizations::Column::MaxConcurrentReboots)
        .into_tuple()
        .one(db)
        .await?;
    Ok(budget(stored.flatten()))
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
            AllOrgs::memberships_of(caller.account_id().into(), caller.token_org()),
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
            max_concurrent_reboots: budget(org.max_concurrent_reboots),
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
        let max_concurrent_reboots = stored_budget(&state.db.orm, org.scope()).await?;
        Ok(Json(Organization {
            role: org.role.as_str().to_owned(),
            slug: org.org.slug,
            name: org.org.name,
            plan: plan.to_string(),
            sso_enforced: org.org.sso_enforced,
            max_concurrent_reboots,
            created_at: org.org.created_at,
        }))
    }

    /// Change the organization's settings: `max_concurrent_reboots`, the reboot budget
    /// (decisions §20). Admin and above; audited as `organization.updated`. A value outside
    /// 1–1,000,000 is 400 `invalid-request`; null lifts the limit; absent leaves it.
    #[oai(
        path = "/v1/orgs/:org",
        method = "patch",
        operation_id = "updateOrganization"
    )]
    async fn update(
        &self,
        state: poem::web::Data<&AppState>,
        org: org::Path<OrgSettings>,
        body: Json<OrganizationPatch>,
    ) -> Result<Json<Organization>, OrgInputErrors> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let change = match body.0.max_concurrent_reboots {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(n) if (1..=MAX_CONCURRENT_REBOOTS).contains(&n) => {
                Some(Some(i32::try_from(n).map_err(|_| {
                    ApiError::invalid("max_concurrent_reboots is too large")
                })?))
            }
            MaybeUndefined::Value(_) => {
                return Err(ApiError::invalid(format!(
                    "max_concurrent_reboots must be between 1 and {MAX_CONCURRENT_REBOOTS}, or \
                     null for no limit"
                ))
                .into());
            }
        };
        if let Some(value) = change {
            org.scope()
                .update_rows::<organizations::Entity>()
                .col_expr(
                    organizations::Column::MaxConcurrentReboots,
                    Expr::value(value),
                )
                .exec(&txn)
                .await?;
            Entry::new("organization.updated")
                .org(org.org.id)
                .by(&org.caller)
                .target_organization(&org.org.slug)
                .details(serde_json::json!({ "max_concurrent_reboots": value }))
                .write(&txn, now)
                .await?;
        }
        let max_concurrent_reboots = stored_budget(&txn, org.scope()).await?;
        txn.commit().await?;
        let plan = state
            .identity
            .plan_of(&state, org.caller.mark, org.org.id)
            .await?;
        Ok(Json(Organization {
            role: org.role.as_str().to_owned(),
            slug: org.org.slug.clone(),
            name: org.org.name.clone(),
            plan: plan.to_string(),
            sso_enforced: org.org.sso_enforced,
            max_concurrent_reboots,
            created_at: org.org.created_at,
        }))
    }
}
