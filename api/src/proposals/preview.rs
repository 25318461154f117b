//! A policy previewed while it is written (decisions §22): how many live hosts its scope
//! covers now, and when its window would next open. Nothing is stored.

use chrono::{DateTime, Utc};
use entities::{group_hosts, groups, hosts};
use platform::{
    ids::GroupId,
    selector::Selector,
    window::{Window, WindowSpec},
};
use poem_openapi::{Object, OpenApi, payload::Json};
use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter};
use uuid::Uuid;

use super::policies::{MAX_SCOPE_GROUPS, OPENINGS_SHOWN, Scope, WindowBody, openings};
use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgInputErrors},
    http::scope::{OrgScope, Untenanted},
    http::tags::Tag,
    identity::roles::ReadFleet,
};

/// A scope and window to preview, as a policy body writes them.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct PolicyPreviewBody {
    pub scope: Scope,
    pub window: Option<WindowBody>,
}

/// What a policy with this scope and window would cover now.
#[derive(Object)]
pub struct PolicyPreview {
    /// Live (not decommissioned) hosts the scope covers now.
    pub hosts: u64,
    /// The window's next five openings after now (a rule without DTSTART counts from now, as
    /// it would for a policy created now), soonest first; empty without a window.
    pub openings: Vec<DateTime<Utc>>,
}

/// The scope's groups as ids of this organization; 400 for anything else.
async fn scope_groups(
    state: &AppState,
    scope: OrgScope,
    wanted: &Scope,
) -> Result<Vec<Uuid>, ApiError> {
    if wanted.groups.len() > MAX_SCOPE_GROUPS {
        return Err(ApiError::invalid(format!(
            "scope.groups may name at most {MAX_SCOPE_GROUPS} groups"
        )));
    }
    let mut ids = Vec::with_capacity(wanted.groups.len());
    for raw in &wanted.groups {
        let id = GroupId::parse(raw).map(GroupId::uuid).ok_or_else(|| {
            ApiError::invalid(format!("scope.groups: {:?} is not a group id", raw.0))
        })?;
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    let found = scope
        .rows::<groups::Entity>()
        .filter(groups::Column::Id.is_in(ids.iter().copied()))
        .count(&state.db.orm)
        .await?;
    if found != ids.len() as u64 {
        return Err(ApiError::invalid(
            "scope.groups names a group that is not in this organization",
        ));
    }
    Ok(ids)
}

pub struct PolicyPreviewApi;

#[OpenApi(tag = "Tag::Policies")]
impl PolicyPreviewApi {
    /// Preview a policy's scope and window without saving anything: how many live hosts the
    /// scope covers now (hosts in at least one of `scope.groups`, every host when none is
    /// named, that also match `scope.selector`), and the window's next five openings. The
    /// same checks as `createPolicy` apply to these two fields (400 `invalid-request`).
    /// Every member may preview (it reads hosts and groups only).
    #[oai(
        path = "/v1/orgs/:org/policies/preview",
        method = "post",
        operation_id = "previewPolicy"
    )]
    async fn preview(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        body: Json<PolicyPreviewBody>,
    ) -> Result<Json<PolicyPreview>, OrgInputErrors> {
        let scope = org.scope();
        let now = state.clock.now();
        let groups = scope_groups(&state, scope, &body.scope).await?;
        let mut query = scope
            .rows::<hosts::Entity>()
            .filter(hosts::Column::DecommissionedAt.is_null());
        if !groups.is_empty() {
            let members = group_hosts::Entity::column_of(group_hosts::Column::HostId)
                .and_where(group_hosts::Column::GroupId.is_in(groups))
                .to_owned();
            query = query.filter(hosts::Column::Id.in_subquery(members));
        }
        if let Some(text) = body
            .scope
            .selector
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            let parsed = Selector::parse(text)
                .map_err(|e| ApiError::invalid(format!("scope.selector: {e}")))?;
            query = query.filter(crate::fleet::hosts::selector_condition(scope, &parsed));
        }
        let hosts = query.count(&state.db.orm).await?;
        let openings = match &body.window {
            None => Vec::new(),
            Some(w) => {
                let window = Window::parse(&WindowSpec::from(w), now)
                    .map_err(|e| ApiError::invalid(format!("window: {e}")))?;
                window
                    .check_fires(now)
                    .map_err(|e| ApiError::invalid(format!("window: {e}")))?;
                openings(&window, now, OPENINGS_SHOWN)
            }
        };
        Ok(Json(PolicyPreview { hosts, openings }))
    }
}
