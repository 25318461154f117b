//! Decisions by people: approve, reject, snooze (decisions §7). Each takes the proposal as
//! the caller locked it in its write transaction, refuses what the state table refuses, and
//! records the decision; approval with enough approvals goes ahead.

use chrono::{DateTime, Utc};
use entities::scope::Untenanted;
use entities::{proposal_decisions, proposals};
use platform::ids::ProposalId;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, QueryFilter, Set};
use uuid::Uuid;

use super::{destination, go_ahead, preflight::preflight, record};
use crate::status::{Decision, ProposalKind, ProposalStatus};

/// Release upgrades agents can carry out today (decisions §7).
pub const EXECUTABLE_RELEASE_UPGRADES: [&str; 1] = ["ubuntu"];

/// Why a decision is refused in the proposal's current state. `Display` is the detail a
/// person reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("You have already approved this proposal.")]
    AlreadyDecided,
    #[error("Proposal #{number} is {status}; it can no longer be decided.")]
    NotDecidable { number: i64, status: ProposalStatus },
    #[error("{0}")]
    NotExecutable(String),
    /// One problem per failing host.
    #[error("{}", preflight_detail(.0))]
    PreflightFailed(Vec<String>),
}

fn preflight_detail(problems: &[String]) -> String {
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    let more = problems.len().saturating_sub(shown.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "Preflight fails on {} host(s): {}{tail}.",
        problems.len(),
        shown.join("; ")
    )
}

#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Db(#[from] DbErr),
}

fn not_decidable(p: &proposals::Model) -> DecisionError {
    Refusal::NotDecidable {
        number: p.number,
        status: ProposalStatus::of(p),
    }
    .into()
}

/// Approves `p` for `account_id`. Each person approves once; only an open proposal can be
/// approved; a release upgrade no agent carries out, a window that cannot be read, or a
/// failing preflight refuses. With enough approvals the proposal goes ahead.
pub async fn approve<C: ConnectionTrait>(
    txn: &C,
    p: proposals::Model,
    account_id: Uuid,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DecisionError> {
    let approved_before = proposal_decisions::Entity::rows()
        .filter(proposal_decisions::Column::ProposalId.eq(p.id))
        .filter(proposal_decisions::Column::ApprovalOf.eq(account_id))
        .one(txn)
        .await?
        .is_some();
    if approved_before {
        return Err(Refusal::AlreadyDecided.into());
    }
    if ProposalStatus::of(&p) != ProposalStatus::Open {
        return Err(not_decidable(&p));
    }
    if ProposalKind::from(p.kind.as_str()) == ProposalKind::DistUpgrade {
        let distro = match &p.release_upgrade {
            Some(column) => column.read().map_err(DbErr::from)?.distro,
            None => String::new(),
        };
        if !EXECUTABLE_RELEASE_UPGRADES.contains(&distro.as_str()) {
            return Err(Refusal::NotExecutable(format!(
                "No agent carries out release upgrades of {distro:?} yet."
            ))
            .into());
        }
    }
    if let Err(err) = destination(&p, now) {
        tracing::error!(
            proposal_id = %ProposalId::from(p.id),
            error = %err,
            "approval refused: the proposal's maintenance window cannot be read"
        );
        return Err(Refusal::NotExecutable(
            "The proposal's maintenance window cannot be read, so it cannot go ahead; change \
             the policy's window to open a new proposal."
                .into(),
        )
        .into());
    }
    let problems = preflight(txn, &p, now).await?;
    if !problems.is_empty() {
        return Err(Refusal::PreflightFailed(problems).into());
    }
    record_decision(txn, &p, account_id, Decision::Approved, None, now).await?;
    let approvals = p.approvals.saturating_add(1);
    let mut changed: proposals::ActiveModel = p.into();
    changed.approvals = Set(approvals);
    changed.updated_at = Set(now);
    let p = changed.update(txn).await?;
    if approvals >= p.required {
        return Ok(go_ahead(txn, p, Some(account_id), now).await?);
    }
    Ok(p)
}

/// Rejects `p` with a reason; it keeps the approvals it had. An open or scheduled proposal
/// can be rejected.
pub async fn reject<C: ConnectionTrait>(
    txn: &C,
    p: proposals::Model,
    account_id: Uuid,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DecisionError> {
    let status = ProposalStatus::of(&p);
    if status != ProposalStatus::Open && status != ProposalStatus::Scheduled {
        return Err(not_decidable(&p));
    }
    record_decision(txn, &p, account_id, Decision::Rejected, reason.clone(), now).await?;
    let mut changed: proposals::ActiveModel = p.into();
    changed.status = Set(ProposalStatus::Rejected.to_string());
    changed.closed_at = Set(Some(now));
    changed.scheduled_for = Set(None);
    changed.updated_at = Set(now);
    let p = changed.update(txn).await?;
    record(
        txn,
        &p,
        "proposal.rejected",
        Some(account_id),
        serde_json::json!({"reason": reason}),
        now,
    )
    .await?;
    Ok(p)
}

/// Snoozes an open `p` until `until` (the caller checked it lies ahead); it reopens then.
pub async fn snooze<C: ConnectionTrait>(
    txn: &C,
    p: proposals::Model,
    account_id: Uuid,
    until: DateTime<Utc>,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DecisionError> {
    if ProposalStatus::of(&p) != ProposalStatus::Open {
        return Err(not_decidable(&p));
    }
    record_decision(txn, &p, account_id, Decision::Snoozed, reason.clone(), now).await?;
    let mut changed: proposals::ActiveModel = p.into();
    changed.status = Set(ProposalStatus::Snoozed.to_string());
    changed.snoozed_until = Set(Some(until));
    changed.updated_at = Set(now);
    let p = changed.update(txn).await?;
    record(
        txn,
        &p,
        "proposal.snoozed",
        Some(account_id),
        serde_json::json!({"until": until, "reason": reason}),
        now,
    )
    .await?;
    Ok(p)
}

/// Writes the decision row; a second approval by the same person (a unique index) is
/// `AlreadyDecided`, whichever transaction got there first.
async fn record_decision<C: ConnectionTrait>(
    txn: &C,
    p: &proposals::Model,
    account_id: Uuid,
    decision: Decision,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<(), DecisionError> {
    let inserted = proposal_decisions::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        proposal_id: Set(p.id),
        account_id: Set(account_id),
        approval_of: Set((decision == Decision::Approved).then_some(account_id)),
        decision: Set(decision.to_string()),
        reason: Set(reason),
        at: Set(now),
    }
    .insert(txn)
    .await;
    match inserted {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.sql_err(),
                Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
            ) =>
        {
            Err(Refusal::AlreadyDecided.into())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preflight_refusal_names_five_hosts_and_counts_the_rest() {
        let problems: Vec<String> = (1..=7)
            .map(|i| format!("web-{i} is decommissioned"))
            .collect();
        let detail = Refusal::PreflightFailed(problems).to_string();
        assert!(detail.starts_with("Preflight fails on 7 host(s): web-1 is decommissioned;"));
        assert!(detail.contains("web-5"));
        assert!(!detail.contains("web-6"));
        assert!(detail.ends_with(" and 2 more."));
    }

    #[test]
    fn not_decidable_names_the_number_and_the_status_as_stored() {
        let refusal = Refusal::NotDecidable {
            number: 4,
            status: ProposalStatus::from("rolling_back"),
        };
        assert_eq!(
            refusal.to_string(),
            "Proposal #4 is rolling_back; it can no longer be decided."
        );
    }
}
