//! A policy previewed while it is written (decisions §22): how many live hosts its scope
//! covers now, how many of them each rollout wave would take (decisions §20), and when its
//! window would next open. Nothing is stored.

use chrono::{DateTime, Utc};
use domain::{
    fleet::selector::Selector,
    window::{Window, WindowSpec},
};
use entities::{
    groups, hosts,
    json::{JsonText, Labels},
};
use platform::ids::GroupId;
use poem_openapi::{Object, OpenApi, payload::Json};
use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use super::{
    policies::{MAX_SCOPE_GROUPS, OPENINGS_SHOWN, Scope, WindowBody, covered, openings},
    rollouts::RolloutBody,
};
use domain::proposals::rollout::rule::{self, Candidate};

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgInputErrors},
    http::rights::ReadFleet,
    http::tags::Tag,
};
use entities::scope::OrgScope;

/// A scope, window and rollout to preview, as a policy body writes them.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct PolicyPreviewBody {
    pub scope: Scope,
    pub window: Option<WindowBody>,
    /// The rollout whose wave sizes to show for the hosts the scope covers now.
    pub rollout: Option<RolloutBody>,
}

/// How many of the hosts one wave would take.
#[derive(Object)]
pub struct WavePreview {
    /// As written; `rest` for the hosts left after the last.
    pub name: String,
    pub hosts: u64,
}

/// What a policy with this scope, window and rollout would cover now.
#[derive(Object)]
pub struct PolicyPreview {
    /// Live (not decommissioned) hosts the scope covers now.
    pub hosts: u64,
    /// The window's next five openings after now (a rule without DTSTART counts from now, as
    /// it would for a policy created now), soonest first; empty without a window.
    pub openings: Vec<DateTime<Utc>>,
    /// The rollout's waves with how many of those hosts each would take (canaries by their
    /// selectors first, then by size), `rest` last when hosts are left; without a rollout one
    /// wave, `rest`, of every host. A proposal's waves are cut from its own hosts (those that
    /// need its change) when it goes ahead, so they may be smaller.
    pub waves: Vec<WavePreview>,
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
    /// Preview a policy's scope, window and rollout without saving anything: how many live
    /// hosts the scope covers now (hosts in at least one of `scope.groups`, every host when
    /// none is named, that also match `scope.selector`), the window's next five openings, and
    /// how many of those hosts each rollout wave would take. The same checks as
    /// `createPolicy` apply to these three fields (400 `invalid-request`, more waves than
    /// hosts included). Every member may preview (it reads hosts and groups only).
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
        let selector = body
            .scope
            .selector
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(Selector::parse)
            .transpose()
            .map_err(|e| ApiError::invalid(format!("scope.selector: {e}")))?;
        let query = covered(scope, &groups, selector.as_ref());
        let hosts = query.clone().count(&state.db.orm).await?;
        let spec = body.rollout.as_ref().map(RolloutBody::spec).transpose()?;
        if let Some(spec) = &spec {
            rule::fits(spec, hosts).map_err(|e| ApiError::invalid(e.to_string()))?;
        }
        let waves_named = spec.as_ref().map(|s| s.waves.clone()).unwrap_or_default();
        let candidates: Vec<Candidate> = if waves_named.iter().any(|w| w.selector.is_some()) {
            query
                .select_only()
                .column(hosts::Column::Id)
                .column(hosts::Column::Labels)
                .into_tuple::<(Uuid, JsonText<Labels>)>()
                .all(&state.db.orm)
                .await?
                .into_iter()
                .map(|(id, labels)| Candidate {
                    id,
                    labels: labels.read().ok(),
                })
                .collect()
        } else {
            // Without canaries the sizes depend on the count alone.
            (0..hosts)
                .map(|i| Candidate {
                    id: Uuid::from_u128(u128::from(i)),
                    labels: None,
                })
                .collect()
        };
        let waves = rule::preview(&waves_named, &candidates)
            .into_iter()
            .map(|(name, hosts)| WavePreview { name, hosts })
            .collect();
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
        Ok(Json(PolicyPreview {
            hosts,
            openings,
            waves,
        }))
    }
}
