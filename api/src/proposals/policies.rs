//! Update policies (`pol_`): which hosts and updates they cover, how many distinct approvals
//! their proposals need, and when approved changes may go out. Every change bumps `version`;
//! an open proposal keeps the version (and the rules) it was opened under.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use domain::{ProposalStatus, status};
use entities::{
    group_hosts, groups, hosts,
    json::{JsonText, RolloutSpec},
    policies, proposals,
};
use poem_openapi::{ApiResponse, Enum, Object, OpenApi, param::Path, param::Query, payload::Json};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, PaginatorTrait, QueryFilter, QuerySelect,
    Select, Set,
};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::ApiError,
    http::error::{OrgConflictErrors, OrgInputErrors, OrgReadErrors},
    http::input,
    http::paging::{Order, Page, Paging},
    http::rights::{Manage, ReadFleet},
    http::tags::Tag,
    http::text::{Name, Text},
    identity::audit::Entry,
    proposals::rollouts::{RolloutBody, RolloutView},
};
use domain::{
    fleet::selector::Selector,
    window::{Window, WindowSpec},
};
use entities::scope::{OrgScope, Untenanted};
use platform::ids::{GroupId, PolicyId};

/// Most approvals a policy may require.
pub const MAX_REQUIRED_APPROVALS: i32 = 20;
/// Most groups a policy's scope may name.
pub const MAX_SCOPE_GROUPS: usize = 100;

/// When approved changes go out.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum Apply {
    /// As soon as the proposal is approved.
    Asap,
    /// As soon as it is approved and the maintenance window is open; approving while the
    /// window is shut schedules the proposal for the window's next opening.
    AsapInWindow,
}

/// What approving lets a job do about reboots.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum Reboot {
    /// Never reboot.
    Never,
    /// Reboot hosts that need it right after applying.
    Immediate,
    /// Reboot hosts that need it, only inside the maintenance window.
    InWindow,
}

/// Which updates the policy proposes.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum Coverage {
    /// Every available update (and release upgrades).
    All,
    /// Only updates that fix an advisory or that the distribution marks as security.
    Security,
}

/// A severity, lowest first. Advisory sources' words map onto these (`moderate` is medium,
/// `important` is high, `negligible` is low).
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum Severity {
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

/// Which hosts a policy covers: live hosts in at least one of `groups` (every host of the
/// organization when `groups` is empty) that also match `selector` (when given).
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct Scope {
    /// `grp_` ids of this organization (at most 100).
    #[oai(default)]
    pub groups: Vec<Text>,
    /// Label selector the hosts must also match: `key=value`, `key!=value`,
    /// `key in (a,b)`, `key` (exists), AND-ed with commas.
    pub selector: Option<Text>,
}

/// A maintenance window: RFC 5545 RRULE text, a duration and an IANA time zone. Without a
/// DTSTART the rule counts from the policy's creation in `time_zone`; local times hold across
/// daylight-saving changes. Rules must repeat at most hourly (no SECONDLY or MINUTELY); a rule
/// that never fires again is refused.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct WindowBody {
    /// e.g. `FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0` (at most 1,000 characters).
    #[oai(validator(max_length = 1000))]
    pub rrule: Text,
    /// How long each opening lasts: 1 to 10,080 minutes (a week).
    #[oai(validator(minimum(value = "1"), maximum(value = "10080")))]
    pub duration_minutes: u32,
    /// IANA time zone, e.g. `Europe/Berlin`.
    #[oai(validator(max_length = 64))]
    pub time_zone: Text,
}

/// The rule as written, trimmed; [`Window::parse`] says whether it is one.
impl From<&WindowBody> for WindowSpec {
    fn from(body: &WindowBody) -> WindowSpec {
        WindowSpec {
            rrule: body.rrule.trim().to_owned(),
            duration_minutes: body.duration_minutes,
            time_zone: body.time_zone.trim().to_owned(),
        }
    }
}

/// A policy as written by `POST` and `PUT` (a `PUT` replaces the whole policy).
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct PolicyBody {
    /// Unique in the organization (1–255 characters).
    #[oai(validator(max_length = 255))]
    pub name: Name,
    pub scope: Scope,
    /// Distinct people who must approve a proposal (0 approves automatically; at most 20).
    #[oai(validator(minimum(value = "0"), maximum(value = "20")))]
    pub required_approvals: i32,
    pub apply: Apply,
    /// Required when `apply` is `asap_in_window` or `reboot` is `in_window`.
    pub window: Option<WindowBody>,
    pub reboot: Reboot,
    /// Fold new updates into the open proposal instead of opening another that supersedes it.
    #[oai(default)]
    pub auto_merge: bool,
    pub updates: Coverage,
    /// Propose only updates with an advisory at least this severe (unrated updates are left
    /// out). Release upgrades are proposed only when `updates` is `all` without a minimum.
    pub min_severity: Option<Severity>,
    /// How approved changes go out (decisions §20); absent: every host at once (one wave,
    /// `rest`). Checked as written (sizes of at least 1 host or 1–100 %, selectors that parse,
    /// distinct wave names) and against the hosts the scope covers now: more waves than hosts
    /// is 400 `invalid-request`.
    pub rollout: Option<RolloutBody>,
}

#[derive(Object)]
pub struct ScopeView {
    pub groups: Vec<GroupId>,
    #[oai(nullable)]
    pub selector: Option<String>,
}

/// A maintenance window's rule as answers show it (a policy's, a job's): the agent protocol's
/// `JobWindow`, where agents first met it.
pub use protocol::wire::JobWindow as WindowRule;

/// The rule of a stored window.
pub fn window_rule(spec: WindowSpec) -> WindowRule {
    WindowRule {
        rrule: spec.rrule,
        duration_minutes: spec.duration_minutes,
        time_zone: spec.time_zone,
    }
}

// A policy's window: its rule and when it next opens.
#[derive(Object)]
pub struct WindowView {
    #[oai(flatten)]
    pub rule: WindowRule,
    /// When the window next opens (now if it is open); absent when it never opens again.
    #[oai(nullable)]
    pub next_opening: Option<DateTime<Utc>>,
    /// The next five times the window opens (after now, soonest first; fewer when the rule
    /// ends), as instants: show them in `time_zone`.
    pub openings: Vec<DateTime<Utc>>,
}

/// How many openings a preview shows.
pub const OPENINGS_SHOWN: usize = 5;

/// The first `n` openings of `window` at or after `now`.
pub fn openings(window: &Window, now: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut found = Vec::with_capacity(n);
    let mut after = now;
    while found.len() < n {
        let Some(next) = window.next_opening(after) else {
            break;
        };
        found.push(next);
        // Rules repeat at most hourly (`Window::parse`), so a second on is past this one.
        let Some(later) = next.checked_add_signed(chrono::TimeDelta::seconds(1)) else {
            break;
        };
        after = later;
    }
    found
}

#[derive(Object)]
pub struct Policy {
    /// `pol_` id.
    pub id: PolicyId,
    /// Starts at 1; every change adds one.
    pub version: i32,
    pub name: String,
    pub scope: ScopeView,
    pub required_approvals: i32,
    pub apply: Apply,
    #[oai(nullable)]
    pub window: Option<WindowView>,
    pub reboot: Reboot,
    pub auto_merge: bool,
    pub updates: Coverage,
    #[oai(nullable)]
    pub min_severity: Option<Severity>,
    /// How approved changes go out, its defaults filled in; null: every host at once.
    #[oai(nullable)]
    pub rollout: Option<RolloutView>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum Created {
    /// Created; its proposals are computed in the background.
    #[oai(status = 201)]
    Created(Json<Policy>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted. Its open and snoozed proposals close; approved ones go ahead.
    #[oai(status = 204)]
    Deleted,
}

/// The validated columns of a policy.
struct Valid {
    name: String,
    groups: Vec<Uuid>,
    selector: Option<String>,
    required: i32,
    apply: status::Apply,
    window: Option<JsonText<WindowSpec>>,
    reboot: status::Reboot,
    auto_merge: bool,
    updates: status::Coverage,
    min_severity: Option<&'static str>,
    rollout: Option<JsonText<RolloutSpec>>,
}

async fn validate<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    body: &PolicyBody,
    created: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Valid, ApiError> {
    let name = input::name("name", &body.name)?;
    if !(0..=MAX_REQUIRED_APPROVALS).contains(&body.required_approvals) {
        return Err(ApiError::invalid(format!(
            "required_approvals must be between 0 and {MAX_REQUIRED_APPROVALS}"
        )));
    }
    if body.scope.groups.len() > MAX_SCOPE_GROUPS {
        return Err(ApiError::invalid(format!(
            "scope.groups may name at most {MAX_SCOPE_GROUPS} groups"
        )));
    }
    let mut groups_wanted = BTreeSet::new();
    for raw in &body.scope.groups {
        let id = GroupId::parse(raw).map(GroupId::uuid).ok_or_else(|| {
            ApiError::invalid(format!("scope.groups: {:?} is not a group id", raw.0))
        })?;
        groups_wanted.insert(id);
    }
    let found: Vec<Uuid> = scope
        .rows::<groups::Entity>()
        .select_only()
        .column(groups::Column::Id)
        .filter(groups::Column::Id.is_in(groups_wanted.iter().copied()))
        .into_tuple()
        .all(db)
        .await?;
    if found.len() != groups_wanted.len() {
        return Err(ApiError::invalid(
            "scope.groups names a group that is not in this organization",
        ));
    }
    let selector = match body.scope.selector.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => {
            Selector::parse(text).map_err(|e| ApiError::invalid(format!("scope.selector: {e}")))?;
            Some(text.to_owned())
        }
    };
    let window = match &body.window {
        None => None,
        Some(w) => {
            let spec = WindowSpec::from(w);
            let window = Window::parse(&spec, created)
                .map_err(|e| ApiError::invalid(format!("window: {e}")))?;
            window
                .check_fires(now)
                .map_err(|e| ApiError::invalid(format!("window: {e}")))?;
            Some(JsonText::new(&spec)?)
        }
    };
    if window.is_none() && body.apply == Apply::AsapInWindow {
        return Err(ApiError::invalid("apply asap_in_window needs a window"));
    }
    if window.is_none() && body.reboot == Reboot::InWindow {
        return Err(ApiError::invalid("reboot in_window needs a window"));
    }
    let rollout = match &body.rollout {
        None => None,
        Some(rollout) => {
            let spec = rollout.spec()?;
            let parsed = selector
                .as_deref()
                .map(Selector::parse)
                .transpose()
                .map_err(|e| ApiError::invalid(format!("scope.selector: {e}")))?;
            let covered = covered(
                scope,
                &groups_wanted.iter().copied().collect::<Vec<_>>(),
                parsed.as_ref(),
            )
            .count(db)
            .await?;
            domain::proposals::rollout::rule::fits(&spec, covered)
                .map_err(|e| ApiError::invalid(e.to_string()))?;
            Some(JsonText::new(&spec)?)
        }
    };
    Ok(Valid {
        name,
        groups: groups_wanted.into_iter().collect(),
        selector,
        required: body.required_approvals,
        apply: match body.apply {
            Apply::Asap => status::Apply::Asap,
            Apply::AsapInWindow => status::Apply::AsapInWindow,
        },
        window,
        reboot: match body.reboot {
            Reboot::Never => status::Reboot::Never,
            Reboot::Immediate => status::Reboot::Immediate,
            Reboot::InWindow => status::Reboot::InWindow,
        },
        auto_merge: body.auto_merge,
        updates: match body.updates {
            Coverage::All => status::Coverage::All,
            Coverage::Security => status::Coverage::Security,
        },
        min_severity: body.min_severity.map(Severity::as_str),
        rollout,
    })
}

fn severity(text: &str) -> Option<Severity> {
    match text {
        "low" => Some(Severity::Low),
        "medium" => Some(Severity::Medium),
        "high" => Some(Severity::High),
        "critical" => Some(Severity::Critical),
        _ => None,
    }
}

/// A policy as shown. A stored group list or window that cannot be read is an error (500),
/// never shown as "every host" or "no window"; a window whose rule no longer parses is shown
/// with no next opening.
fn view(row: policies::Model, now: DateTime<Utc>) -> Result<Policy, ApiError> {
    let groups = row.scope_groups.read()?;
    let rollout = row
        .rollout
        .as_ref()
        .map(JsonText::read)
        .transpose()?
        .map(RolloutView::from);
    let window = match &row.window {
        None => None,
        Some(column) => {
            let spec = column.read()?;
            let parsed = Window::parse(&spec, row.created_at).ok();
            let next_opening = parsed.as_ref().and_then(|w| {
                if w.is_open(now) {
                    Some(now)
                } else {
                    w.next_opening(now)
                }
            });
            let openings = parsed
                .as_ref()
                .map(|w| openings(w, now, OPENINGS_SHOWN))
                .unwrap_or_default();
            Some(WindowView {
                rule: window_rule(spec),
                next_opening,
                openings,
            })
        }
    };
    Ok(Policy {
        id: PolicyId::from(row.id),
        version: row.version,
        name: row.name,
        scope: ScopeView {
            groups: groups.into_iter().map(GroupId::from).collect(),
            selector: row.selector,
        },
        required_approvals: row.required_approvals,
        apply: match status::Apply::from(row.apply.as_str()) {
            status::Apply::AsapInWindow => Apply::AsapInWindow,
            _ => Apply::Asap,
        },
        window,
        reboot: match status::Reboot::from(row.reboot.as_str()) {
            status::Reboot::Immediate => Reboot::Immediate,
            status::Reboot::InWindow => Reboot::InWindow,
            _ => Reboot::Never,
        },
        auto_merge: row.auto_merge,
        updates: match status::Coverage::from(row.updates.as_str()) {
            status::Coverage::Security => Coverage::Security,
            _ => Coverage::All,
        },
        min_severity: row.min_severity.as_deref().and_then(severity),
        rollout,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

async fn evaluate_soon(state: &AppState, policy_id: Uuid) -> Result<(), ApiError> {
    domain::policy::mark_policies_dirty(&state.db, &[policy_id], state.clock.now())
        .await
        .map_err(ApiError::Internal)
}

type Mutation = OrgConflictErrors;

pub struct PoliciesApi;

#[OpenApi(tag = "Tag::Policies")]
impl PoliciesApi {
    /// Create a policy. Its proposals are computed in the background from the available
    /// updates of the hosts in its scope. A name in use is 409 `conflict`; a bad field (an
    /// unknown group, a malformed selector, an RRULE that never fires, an unknown time zone,
    /// `asap_in_window` without a window; a rollout wave of size 0, over 100 %, or neither a
    /// count nor a percentage, a wave selector that does not parse, more waves than the hosts
    /// the scope covers now) is 400 `invalid-request`, and nothing is stored.
    #[oai(
        path = "/v1/orgs/:org/policies",
        method = "post",
        operation_id = "createPolicy"
    )]
    async fn create(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        body: Json<PolicyBody>,
    ) -> Result<Created, Mutation> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let valid = validate(&txn, org.scope(), &body, now, now).await?;
        let row = policies::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            name: Set(valid.name.clone()),
            version: Set(1),
            scope_groups: Set(JsonText::new(&valid.groups)?),
            selector: Set(valid.selector),
            required_approvals: Set(valid.required),
            apply: Set(valid.apply.into()),
            window: Set(valid.window),
            reboot: Set(valid.reboot.into()),
            auto_merge: Set(valid.auto_merge),
            updates: Set(valid.updates.into()),
            min_severity: Set(valid.min_severity.map(Into::into)),
            rollout: Set(valid.rollout),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(|e| ApiError::name_taken(e, "policy", &valid.name))?;
        Entry::new("policy.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(PolicyId::from(row.id))
            .details(serde_json::json!({ "name": row.name, "version": row.version }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        evaluate_soon(&state, row.id).await?;
        Ok(Created::Created(Json(view(row, now)?)))
    }

    /// The organization's policies, oldest first.
    #[oai(
        path = "/v1/orgs/:org/policies",
        method = "get",
        operation_id = "listPolicies"
    )]
    async fn list(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Policy>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let rows = org.scope().rows::<policies::Entity>();
        let rows = paging
            .fetch(&state.db.orm, rows, Order::OldestFirst)
            .await?;
        let now = state.clock.now();
        Ok(Json(rows.try_page(|r| view(r, now))?))
    }

    /// One policy, with when its window next opens.
    #[oai(
        path = "/v1/orgs/:org/policies/:policy_id",
        method = "get",
        operation_id = "getPolicy"
    )]
    async fn get(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The policy's id (`pol_`).
        policy_id: Path<PolicyId>,
    ) -> Result<Json<Policy>, OrgReadErrors> {
        let row = org.scope().get(&state.db.orm, *policy_id).await?;
        Ok(Json(view(row, state.clock.now())?))
    }

    /// Replace a policy (every field, as on create); `version` goes up by one. Proposals
    /// already open keep the rules and version they were opened under; new ones use these.
    #[oai(
        path = "/v1/orgs/:org/policies/:policy_id",
        method = "put",
        operation_id = "replacePolicy"
    )]
    async fn replace(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The policy's id (`pol_`).
        policy_id: Path<PolicyId>,
        body: Json<PolicyBody>,
    ) -> Result<Json<Policy>, Mutation> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *policy_id).await?;
        let valid = validate(&txn, org.scope(), &body, row.created_at, now).await?;
        let version = row.version.saturating_add(1);
        let mut changed: policies::ActiveModel = row.into();
        changed.name = Set(valid.name.clone());
        changed.version = Set(version);
        changed.scope_groups = Set(JsonText::new(&valid.groups)?);
        changed.selector = Set(valid.selector);
        changed.required_approvals = Set(valid.required);
        changed.apply = Set(valid.apply.into());
        changed.window = Set(valid.window);
        changed.reboot = Set(valid.reboot.into());
        changed.auto_merge = Set(valid.auto_merge);
        changed.updates = Set(valid.updates.into());
        changed.min_severity = Set(valid.min_severity.map(Into::into));
        changed.rollout = Set(valid.rollout);
        changed.updated_at = Set(now);
        let row = changed
            .update(&txn)
            .await
            .map_err(|e| ApiError::name_taken(e, "policy", &valid.name))?;
        Entry::new("policy.updated")
            .org(org.org_id())
            .by(&org.caller)
            .target(PolicyId::from(row.id))
            .details(serde_json::json!({ "name": row.name, "version": row.version }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        evaluate_soon(&state, row.id).await?;
        Ok(Json(view(row, now)?))
    }

    /// Delete a policy. Its open and snoozed proposals close; proposals already approved or
    /// scheduled go ahead as agreed.
    #[oai(
        path = "/v1/orgs/:org/policies/:policy_id",
        method = "delete",
        operation_id = "deletePolicy"
    )]
    async fn delete(
        &self,
        org: org::Path<Manage>,
        state: poem::web::Data<&AppState>,
        /// The policy's id (`pol_`).
        policy_id: Path<PolicyId>,
    ) -> Result<Deleted, OrgReadErrors> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *policy_id).await?;
        let undecided = org
            .scope()
            .rows::<proposals::Entity>()
            .filter(proposals::Column::PolicyId.eq(row.id))
            .filter(proposals::Column::Status.is_in(ProposalStatus::UNDECIDED))
            .all(&txn)
            .await?;
        for proposal in undecided {
            domain::proposals::close(&txn, proposal, now).await?;
        }
        org.scope()
            .delete_rows::<policies::Entity>()
            .filter(policies::Column::Id.eq(row.id))
            .exec(&txn)
            .await?;
        Entry::new("policy.deleted")
            .org(org.org_id())
            .by(&org.caller)
            .target(PolicyId::from(row.id))
            .details(serde_json::json!({ "name": row.name }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        Ok(Deleted::Deleted)
    }
}

/// The live hosts of the organization in one of `groups` (any host when none) that match
/// `selector` (when given): the hosts a policy with that scope covers.
pub fn covered(
    scope: OrgScope,
    groups: &[Uuid],
    selector: Option<&Selector>,
) -> Select<hosts::Entity> {
    let mut query = scope
        .rows::<hosts::Entity>()
        .filter(hosts::Column::DecommissionedAt.is_null());
    if !groups.is_empty() {
        let members = group_hosts::Entity::column_of(group_hosts::Column::HostId)
            .and_where(group_hosts::Column::GroupId.is_in(groups.iter().copied()))
            .to_owned();
        query = query.filter(hosts::Column::Id.in_subquery(members));
    }
    if let Some(selector) = selector {
        query = query.filter(crate::fleet::hosts::selector_condition(scope, selector));
    }
    query
}
