//! The proposal lifecycle: numbering, going ahead (straight away or at the window's next
//! opening), opening windows, closing, superseding, and the audit record of each move.
//! Decisions by people are in [`decide`], the checks before approval in [`preflight`], the
//! waves it goes out in in [`rollout`], the jobs it hands to agents in [`host_jobs`] and which
//! of them a check-in gets in [`dispatch`], its end in [`settle`].
//!
//! Every function here runs inside the caller's write transaction, so a move and its
//! consequences commit together or not at all. Moves that may race (a timer and a decision)
//! are conditional on the status they move from.

pub mod decide;
pub mod dispatch;
pub mod host_jobs;
pub mod jobs;
pub mod preflight;
pub mod rollout;
pub mod settle;

use chrono::{DateTime, Utc};
use entities::scope::{AllOrgs, OrgScope};
use entities::{audit_events, json::JsonText, organizations, proposals};
use platform::ids::ProposalId;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, QueryFilter, QuerySelect, Set,
    sea_query::Expr,
};
use uuid::Uuid;

pub use entities::json::{JobChange, JobPayload};
pub use host_jobs::{create_jobs, hosts_of};
pub use settle::{outcome, settle};

use crate::{
    status::{Apply, ProposalStatus},
    window::{self, UnreadableWindow},
};

/// Approvals still needed: zero for a final proposal, one going ahead, and once there are
/// enough.
pub fn outstanding(proposal: &proposals::Model) -> i64 {
    let status = ProposalStatus::of(proposal);
    if status.is_final() || status.is_in_flight() {
        0
    } else {
        i64::from(proposal.required.saturating_sub(proposal.approvals).max(0))
    }
}

/// Hands out the organization's next proposal number. The counter row stays locked until the
/// transaction ends, so numbers are gap-free (a rollback returns the number) and never reused.
pub async fn next_number<C: ConnectionTrait>(txn: &C, org_id: Uuid) -> Result<i64, DbErr> {
    AllOrgs::update_rows::<organizations::Entity>()
        .col_expr(
            organizations::Column::ProposalSeq,
            sea_orm::sea_query::ExprTrait::add(Expr::col(organizations::Column::ProposalSeq), 1),
        )
        .filter(organizations::Column::Id.eq(org_id))
        .exec(txn)
        .await?;
    let seq: Option<i64> = OrgScope::of(org_id)
        .rows::<organizations::Entity>()
        .select_only()
        .column(organizations::Column::ProposalSeq)
        .into_tuple()
        .one(txn)
        .await?;
    seq.ok_or_else(|| DbErr::RecordNotFound("organization".into()))
}

/// Records a proposal's lifecycle event in the organization's audit log and, for the moves
/// notifications announce (opened, approved, scheduled, applied, failed, halted), in the
/// notification outbox: both in the caller's transaction, so neither outlives a rollback.
pub async fn record<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    action: &str,
    actor: Option<Uuid>,
    details: serde_json::Value,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    if let Some(kind) = crate::notifications::outbox::proposal_event(action) {
        let status = details
            .get("status")
            .and_then(|s| s.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| match kind {
                crate::notifications::EventKind::ProposalOpened => proposal.status.clone(),
                _ => action.trim_start_matches("proposal.").to_owned(),
            });
        let scheduled_for = details
            .get("scheduled_for")
            .and_then(|v| serde_json::from_value::<DateTime<Utc>>(v.clone()).ok());
        let extra = (kind == crate::notifications::EventKind::ProposalHalted).then(|| {
            (
                "rollout",
                serde_json::json!({
                    "reason": details.get("reason"),
                    "wave": details.get("wave"),
                    "wave_name": details.get("wave_name"),
                    "by_hand": details.get("by_hand"),
                }),
            )
        });
        crate::notifications::outbox::proposal(
            txn,
            proposal,
            kind,
            &status,
            scheduled_for,
            extra,
            now,
        )
        .await?;
    }
    audit_events::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(Some(proposal.org_id)),
        actor_account_id: Set(actor),
        actor_api_token_id: Set(None),
        action: Set(action.to_owned()),
        target_kind: Set(Some("proposal".into())),
        target_id: Set(Some(ProposalId::from(proposal.id).to_string())),
        ip: Set(None),
        details: Set(Some(JsonText::new(&details)?)),
        created_at: Set(now),
    }
    .insert(txn)
    .await?;
    Ok(())
}

/// Where an approved proposal goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `approved`: its host jobs are created now.
    Approved,
    /// `scheduled` for the window's next opening.
    Scheduled(DateTime<Utc>),
}

/// Where an approved proposal goes: `approved` now, or `scheduled` for its window's next
/// opening when its rule says `asap_in_window` and the window is shut at `now`. A window
/// that cannot be read is an error: the proposal must not go ahead as if it had none.
pub fn destination(
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<Destination, UnreadableWindow> {
    if Apply::from(proposal.apply.as_str()) != Apply::AsapInWindow {
        return Ok(Destination::Approved);
    }
    let Some(window) = window::of_proposal(proposal.window.as_ref())? else {
        // A policy with `asap_in_window` always has a window (the api refuses one without).
        return Err(UnreadableWindow::Missing);
    };
    let window = window::parse(&window)?;
    if window.is_open(now) {
        return Ok(Destination::Approved);
    }
    Ok(match window.next_opening(now) {
        Some(at) => Destination::Scheduled(at),
        // A window that never opens again cannot hold the change back for ever.
        None => Destination::Approved,
    })
}

/// Moves a proposal that has enough approvals on: to `approved` (its hosts cut into waves, the
/// first wave's jobs created) or to `scheduled` (cut into waves, waiting for the window).
/// `actor` is whoever tipped it over. Returns the proposal as it now is.
///
/// A proposal whose window cannot be read stays where it is (fails closed) and the error is
/// logged; [`decide::approve`] refuses before it gets here.
pub async fn go_ahead<C: ConnectionTrait>(
    txn: &C,
    proposal: proposals::Model,
    actor: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DbErr> {
    let destination = match destination(&proposal, now) {
        Ok(destination) => destination,
        Err(err) => {
            tracing::error!(
                proposal_id = %ProposalId::from(proposal.id),
                error = %err,
                "proposal not going ahead: its maintenance window cannot be read"
            );
            return Ok(proposal);
        }
    };
    let (status, scheduled_for) = match destination {
        Destination::Approved => (ProposalStatus::Approved, None),
        Destination::Scheduled(at) => (ProposalStatus::Scheduled, Some(at)),
    };
    let mut active: proposals::ActiveModel = proposal.into();
    active.status = Set(status.to_string());
    active.scheduled_for = Set(scheduled_for);
    active.snoozed_until = Set(None);
    active.updated_at = Set(now);
    let proposal = active.update(txn).await?;
    rollout::plan(txn, &proposal, now).await?;
    if scheduled_for.is_none() {
        record(
            txn,
            &proposal,
            "proposal.approved",
            actor,
            serde_json::json!({}),
            now,
        )
        .await?;
        rollout::start(txn, &proposal, now).await?;
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

/// A scheduled proposal whose window opened: `approved`, its first wave begun (unless its
/// rollout was halted meanwhile). Conditional on the proposal still being scheduled, so two
/// runs for the same instant move it once.
/// Returns whether this call moved it.
pub async fn open_window<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let moved = move_if(
        txn,
        proposal.id,
        ProposalStatus::Scheduled,
        ProposalStatus::Approved,
        now,
    )
    .await?;
    if moved {
        record(
            txn,
            proposal,
            "proposal.approved",
            None,
            serde_json::json!({"window_opened": true}),
            now,
        )
        .await?;
        rollout::start(txn, proposal, now).await?;
    }
    Ok(moved)
}

/// An agent picked up one of an approved proposal's jobs: `applying`. Conditional on the
/// proposal being `approved`, so later jobs (or a settled proposal) leave it as it is.
pub async fn begin_applying<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    move_if(
        txn,
        proposal_id,
        ProposalStatus::Approved,
        ProposalStatus::Applying,
        now,
    )
    .await
}

/// A snoozed proposal whose snooze ran out: `open` again. Conditional on it still being
/// snoozed; returns whether this call moved it.
pub async fn reopen<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let moved = AllOrgs::update_rows::<proposals::Entity>()
        .col_expr(proposals::Column::Status, Expr::value(ProposalStatus::Open))
        .col_expr(
            proposals::Column::SnoozedUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(proposals::Column::UpdatedAt, Expr::value(now))
        .filter(proposals::Column::Id.eq(proposal.id))
        .filter(proposals::Column::Status.eq(ProposalStatus::Snoozed))
        .exec(txn)
        .await?
        .rows_affected
        == 1;
    if moved {
        record(
            txn,
            proposal,
            "proposal.reopened",
            None,
            serde_json::json!({}),
            now,
        )
        .await?;
    }
    Ok(moved)
}

/// Moves proposal `id` from `from` to `to`; whether it was still `from`.
async fn move_if<C: ConnectionTrait>(
    txn: &C,
    id: Uuid,
    from: ProposalStatus,
    to: ProposalStatus,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    Ok(AllOrgs::update_rows::<proposals::Entity>()
        .col_expr(proposals::Column::Status, Expr::value(to))
        .col_expr(proposals::Column::UpdatedAt, Expr::value(now))
        .filter(proposals::Column::Id.eq(id))
        .filter(proposals::Column::Status.eq(from))
        .exec(txn)
        .await?
        .rows_affected
        == 1)
}

/// Nothing is left to go ahead with: `closed`.
pub async fn close<C: ConnectionTrait>(
    txn: &C,
    proposal: proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut active: proposals::ActiveModel = proposal.clone().into();
    active.status = Set(ProposalStatus::Closed.to_string());
    active.closed_at = Set(Some(now));
    active.snoozed_until = Set(None);
    active.updated_at = Set(now);
    active.update(txn).await?;
    record(
        txn,
        &proposal,
        "proposal.closed",
        None,
        serde_json::json!({}),
        now,
    )
    .await
}

/// `old` is replaced by `by`, which carries everything it did: `superseded`.
pub async fn supersede<C: ConnectionTrait>(
    txn: &C,
    old: proposals::Model,
    by: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut active: proposals::ActiveModel = old.clone().into();
    active.status = Set(ProposalStatus::Superseded.to_string());
    active.superseded_by = Set(Some(by.id));
    active.closed_at = Set(Some(now));
    active.updated_at = Set(now);
    active.update(txn).await?;
    record(
        txn,
        &old,
        "proposal.superseded",
        None,
        serde_json::json!({"superseded_by": ProposalId::from(by.id)}),
        now,
    )
    .await
}
