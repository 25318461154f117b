//! What the api, the worker and the scheduler share about proposals: statuses, severities,
//! gap-free numbering, going ahead (straight away or at the window's next opening), and the
//! host jobs an approved proposal hands to agents.
//!
//! Every function here runs inside the caller's write transaction, so a decision and its
//! consequences commit together or not at all.

use chrono::{DateTime, Utc};
use entities::{
    audit_events, host_jobs, organizations, proposal_changes, proposal_hosts, proposals,
};
use platform::window::{Window, WindowSpec};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set, sea_query::Expr,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub const OPEN: &str = "open";
pub const APPROVED: &str = "approved";
pub const SCHEDULED: &str = "scheduled";
pub const APPLYING: &str = "applying";
pub const APPLIED: &str = "applied";
pub const PARTIALLY_APPLIED: &str = "partially_applied";
pub const FAILED: &str = "failed";
pub const REJECTED: &str = "rejected";
pub const SNOOZED: &str = "snoozed";
pub const SUPERSEDED: &str = "superseded";
pub const CLOSED: &str = "closed";

/// Statuses a proposal never leaves.
pub const FINAL: [&str; 6] = [
    APPLIED,
    PARTIALLY_APPLIED,
    FAILED,
    REJECTED,
    SUPERSEDED,
    CLOSED,
];

/// Statuses whose hosts and changes evaluation still maintains.
pub const UNDECIDED: [&str; 2] = [OPEN, SNOOZED];

/// Statuses of a proposal that is going ahead: its changes are no longer proposed again.
pub const IN_FLIGHT: [&str; 3] = [APPROVED, SCHEDULED, APPLYING];

pub fn is_final(status: &str) -> bool {
    FINAL.contains(&status)
}

/// Approvals still needed: zero for a final proposal and once there are enough.
pub fn outstanding(proposal: &proposals::Model) -> i64 {
    if is_final(&proposal.status) || IN_FLIGHT.contains(&proposal.status.as_str()) {
        0
    } else {
        i64::from(proposal.required.saturating_sub(proposal.approvals).max(0))
    }
}

/// Severities in increasing order, as the service names them. Advisory sources use several
/// vocabularies; [`severity_rank`] maps them onto this one.
pub const SEVERITIES: [&str; 4] = ["low", "medium", "high", "critical"];

/// The rank (0 = low … 3 = critical) of a severity as an advisory source wrote it; `None` for
/// a value that rates nothing (absent, `unknown`, `none`, anything unrecognised).
pub fn severity_rank(severity: &str) -> Option<u8> {
    match severity.trim().to_ascii_lowercase().as_str() {
        "low" | "negligible" => Some(0),
        "medium" | "moderate" => Some(1),
        "high" | "important" => Some(2),
        "critical" => Some(3),
        _ => None,
    }
}

pub fn severity_name(rank: u8) -> &'static str {
    SEVERITIES[usize::from(rank.min(3))]
}

/// A maintenance window as stored on a policy and copied onto its proposals: the spec and the
/// instant it counts from when its RRULE has no DTSTART (the policy's creation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredWindow {
    pub rrule: String,
    pub duration_minutes: u32,
    pub time_zone: String,
    pub created: DateTime<Utc>,
}

impl StoredWindow {
    pub fn spec(&self) -> WindowSpec {
        WindowSpec {
            rrule: self.rrule.clone(),
            duration_minutes: self.duration_minutes,
            time_zone: self.time_zone.clone(),
        }
    }

    pub fn window(&self) -> Option<Window> {
        Window::parse(&self.spec(), self.created).ok()
    }

    pub fn from_json(text: Option<&str>) -> Option<StoredWindow> {
        text.and_then(|t| serde_json::from_str(t).ok())
    }
}

/// Hands out the organization's next proposal number. The counter row stays locked until the
/// transaction ends, so numbers are gap-free (a rollback returns the number) and never reused.
pub async fn next_number<C: ConnectionTrait>(txn: &C, org_id: Uuid) -> Result<i64, DbErr> {
    organizations::Entity::update_many()
        .col_expr(
            organizations::Column::ProposalSeq,
            sea_orm::sea_query::ExprTrait::add(Expr::col(organizations::Column::ProposalSeq), 1),
        )
        .filter(organizations::Column::Id.eq(org_id))
        .exec(txn)
        .await?;
    let seq: Option<i64> = organizations::Entity::find_by_id(org_id)
        .select_only()
        .column(organizations::Column::ProposalSeq)
        .into_tuple()
        .one(txn)
        .await?;
    seq.ok_or_else(|| DbErr::RecordNotFound("organization".into()))
}

/// Records a proposal's lifecycle event in the organization's audit log.
pub async fn record<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    action: &str,
    actor: Option<Uuid>,
    details: serde_json::Value,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    audit_events::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(Some(proposal.org_id)),
        actor_account_id: Set(actor),
        actor_api_token_id: Set(None),
        action: Set(action.to_owned()),
        target_kind: Set(Some("proposal".into())),
        target_id: Set(Some(platform::ids::format_id("prp", proposal.id))),
        ip: Set(None),
        details: Set(Some(details.to_string())),
        created_at: Set(now),
    }
    .insert(txn)
    .await?;
    Ok(())
}

/// Where an approved proposal goes: `approved` now, or `scheduled` for its window's next
/// opening when its rule says `asap_in_window` and the window is shut at `now`.
pub fn destination(
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> (&'static str, Option<DateTime<Utc>>) {
    if proposal.apply != "asap_in_window" {
        return (APPROVED, None);
    }
    let Some(window) = StoredWindow::from_json(proposal.window.as_deref()).and_then(|w| w.window())
    else {
        return (APPROVED, None);
    };
    if window.is_open(now) {
        return (APPROVED, None);
    }
    match window.next_opening(now) {
        Some(at) => (SCHEDULED, Some(at)),
        // A window that never opens again cannot hold the change back for ever.
        None => (APPROVED, None),
    }
}

/// Moves a proposal that has enough approvals on: to `approved` (creating its host jobs) or to
/// `scheduled`. `actor` is whoever tipped it over. Returns the proposal as it now is.
pub async fn go_ahead<C: ConnectionTrait>(
    txn: &C,
    proposal: proposals::Model,
    actor: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DbErr> {
    let (status, scheduled_for) = destination(&proposal, now);
    let mut active: proposals::ActiveModel = proposal.into();
    active.status = Set(status.to_owned());
    active.scheduled_for = Set(scheduled_for);
    active.snoozed_until = Set(None);
    active.updated_at = Set(now);
    let proposal = active.update(txn).await?;
    if status == APPROVED {
        create_jobs(txn, &proposal, now).await?;
        record(
            txn,
            &proposal,
            "proposal.approved",
            actor,
            serde_json::json!({}),
            now,
        )
        .await?;
    } else {
        record(
            txn,
            &proposal,
            "proposal.scheduled",
            actor,
            serde_json::json!({ "scheduled_for": scheduled_for }),
            now,
        )
        .await?;
    }
    Ok(proposal)
}

/// A scheduled proposal whose window opened: `approved`, with its host jobs. Conditional on
/// the proposal still being scheduled, so two runs for the same instant move it once.
/// Returns whether this call moved it.
pub async fn open_window<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let moved = proposals::Entity::update_many()
        .col_expr(proposals::Column::Status, Expr::value(APPROVED))
        .col_expr(proposals::Column::UpdatedAt, Expr::value(now))
        .filter(proposals::Column::Id.eq(proposal.id))
        .filter(proposals::Column::Status.eq(SCHEDULED))
        .exec(txn)
        .await?
        .rows_affected
        == 1;
    if moved {
        create_jobs(txn, proposal, now).await?;
        record(
            txn,
            proposal,
            "proposal.approved",
            None,
            serde_json::json!({"window_opened": true}),
            now,
        )
        .await?;
    }
    Ok(moved)
}

/// What an agent is asked to do for one proposal.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobPayload {
    pub proposal_id: String,
    pub proposal_number: i64,
    pub kind: String,
    /// never, immediate or in_window; the agent reboots only if its own configuration permits.
    pub reboot: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<JobChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_upgrade: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<JobWindow>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobChange {
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobWindow {
    pub rrule: String,
    pub duration_minutes: u32,
    pub time_zone: String,
}

const JOB_CHUNK: usize = 500;

/// `SELECT host_id FROM proposal_hosts WHERE proposal_id = …`, to filter hosts by.
pub fn hosts_of(proposal_id: Uuid) -> sea_orm::sea_query::SelectStatement {
    sea_orm::sea_query::Query::select()
        .column(proposal_hosts::Column::HostId)
        .from(proposal_hosts::Entity)
        .and_where(proposal_hosts::Column::ProposalId.eq(proposal_id))
        .to_owned()
}

/// One `pending` job per host of the proposal, carrying that host's own changes.
pub async fn create_jobs<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let changes: std::collections::HashMap<i32, JobChange> = proposal_changes::Entity::find()
        .filter(proposal_changes::Column::ProposalId.eq(proposal.id))
        .all(txn)
        .await?
        .into_iter()
        .map(|c| {
            (
                c.position,
                JobChange {
                    package: c.package,
                    ecosystem: c.ecosystem,
                    from_version: c.from_version,
                    to_version: c.to_version,
                },
            )
        })
        .collect();
    let hosts: Vec<(Uuid, String)> = proposal_hosts::Entity::find()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .column(proposal_hosts::Column::Changes)
        .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
        .order_by_asc(proposal_hosts::Column::HostId)
        .into_tuple()
        .all(txn)
        .await?;
    let window = StoredWindow::from_json(proposal.window.as_deref())
        .filter(|_| proposal.reboot == "in_window")
        .map(|w| JobWindow {
            rrule: w.rrule,
            duration_minutes: w.duration_minutes,
            time_zone: w.time_zone,
        });
    let release_upgrade = proposal
        .release_upgrade
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok());
    // The agent's permissions are a ceiling: a job never asks for a reboot the host's own
    // configuration does not permit (an agent too old to report permissions is asked as is).
    let may_not_reboot: std::collections::HashSet<Uuid> = entities::hosts::Entity::find()
        .select_only()
        .column(entities::hosts::Column::Id)
        .column(entities::hosts::Column::AgentPermissions)
        .filter(entities::hosts::Column::Id.in_subquery(hosts_of(proposal.id)))
        .into_tuple::<(Uuid, Option<String>)>()
        .all(txn)
        .await?
        .into_iter()
        .filter_map(|(id, permissions)| {
            let list: Vec<String> = serde_json::from_str(permissions.as_deref()?).ok()?;
            (!list.iter().any(|p| p == "reboot")).then_some(id)
        })
        .collect();
    let mut rows = Vec::with_capacity(hosts.len());
    for (host_id, positions) in hosts {
        let positions: Vec<i32> = serde_json::from_str(&positions).unwrap_or_default();
        let payload = JobPayload {
            proposal_id: platform::ids::format_id("prp", proposal.id),
            proposal_number: proposal.number,
            kind: proposal.kind.clone(),
            reboot: if may_not_reboot.contains(&host_id) {
                "never".to_owned()
            } else {
                proposal.reboot.clone()
            },
            changes: positions
                .iter()
                .filter_map(|p| changes.get(p).cloned())
                .collect(),
            release_upgrade: release_upgrade.clone(),
            window: window.clone(),
        };
        rows.push(host_jobs::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(proposal.org_id),
            host_id: Set(host_id),
            proposal_id: Set(Some(proposal.id)),
            kind: Set(if proposal.kind == "dist_upgrade" {
                "dist_upgrade".into()
            } else {
                "apply_updates".into()
            }),
            payload: Set(serde_json::to_string(&payload).unwrap_or_default()),
            status: Set("pending".into()),
            log: Set(None),
            rebooted: Set(None),
            created_at: Set(now),
            dispatched_at: Set(None),
            finished_at: Set(None),
        });
    }
    for chunk in rows.chunks(JOB_CHUNK) {
        host_jobs::Entity::insert_many(chunk.to_vec())
            .exec(txn)
            .await?;
    }
    Ok(())
}

/// After a job finished: when every job of its proposal has, the proposal becomes `applied`
/// (all succeeded), `failed` (none did) or `partially_applied`.
pub async fn settle<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let statuses: Vec<String> = host_jobs::Entity::find()
        .select_only()
        .column(host_jobs::Column::Status)
        .filter(host_jobs::Column::ProposalId.eq(proposal_id))
        .into_tuple()
        .all(txn)
        .await?;
    if statuses.is_empty() || statuses.iter().any(|s| s == "pending" || s == "dispatched") {
        return Ok(());
    }
    let succeeded = statuses.iter().filter(|s| *s == "succeeded").count();
    let status = if succeeded == statuses.len() {
        APPLIED
    } else if succeeded == 0 {
        FAILED
    } else {
        PARTIALLY_APPLIED
    };
    let Some(proposal) = proposals::Entity::find_by_id(proposal_id).one(txn).await? else {
        return Ok(());
    };
    let moved = proposals::Entity::update_many()
        .col_expr(proposals::Column::Status, Expr::value(status))
        .col_expr(proposals::Column::ClosedAt, Expr::value(Some(now)))
        .col_expr(proposals::Column::UpdatedAt, Expr::value(now))
        .filter(proposals::Column::Id.eq(proposal_id))
        .filter(proposals::Column::Status.is_in(IN_FLIGHT))
        .exec(txn)
        .await?
        .rows_affected
        == 1;
    if moved {
        let action = if status == FAILED {
            "proposal.failed"
        } else {
            "proposal.applied"
        };
        record(
            txn,
            &proposal,
            action,
            None,
            serde_json::json!({ "status": status, "succeeded": succeeded, "jobs": statuses.len() }),
            now,
        )
        .await?;
    }
    Ok(())
}
