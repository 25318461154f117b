//! The end of a proposal that went ahead: once every one of its host jobs has reported, it
//! is `applied`, `partially_applied` or `failed`.

use chrono::{DateTime, Utc};
use entities::{host_jobs, proposals};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, sea_query::Expr,
};
use uuid::Uuid;

use super::record;
use crate::status::{HostJobStatus, ProposalStatus};

/// How a proposal ends once every one of its jobs has: `applied` (all succeeded), `failed`
/// (none did) or `partially_applied`; `None` while a job is unfinished or there is none.
pub fn outcome(jobs: &[HostJobStatus]) -> Option<ProposalStatus> {
    if jobs.is_empty() || jobs.iter().any(|s| HostJobStatus::UNFINISHED.contains(s)) {
        return None;
    }
    let succeeded = jobs
        .iter()
        .filter(|s| **s == HostJobStatus::Succeeded)
        .count();
    Some(if succeeded == jobs.len() {
        ProposalStatus::Applied
    } else if succeeded == 0 {
        ProposalStatus::Failed
    } else {
        ProposalStatus::PartiallyApplied
    })
}

/// After a job finished: when every job of its proposal has, the proposal takes its
/// [`outcome`]. Conditional on the proposal still going ahead, so it settles once.
pub async fn settle<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let statuses: Vec<HostJobStatus> = host_jobs::Entity::find()
        .select_only()
        .column(host_jobs::Column::Status)
        .filter(host_jobs::Column::ProposalId.eq(proposal_id))
        .into_tuple::<String>()
        .all(txn)
        .await?
        .into_iter()
        .map(HostJobStatus::from)
        .collect();
    let Some(status) = outcome(&statuses) else {
        return Ok(());
    };
    let succeeded = statuses
        .iter()
        .filter(|s| **s == HostJobStatus::Succeeded)
        .count();
    let Some(proposal) = proposals::Entity::find_by_id(proposal_id).one(txn).await? else {
        return Ok(());
    };
    let moved = proposals::Entity::update_many()
        .col_expr(proposals::Column::Status, Expr::value(status.clone()))
        .col_expr(proposals::Column::ClosedAt, Expr::value(Some(now)))
        .col_expr(proposals::Column::UpdatedAt, Expr::value(now))
        .filter(proposals::Column::Id.eq(proposal_id))
        .filter(proposals::Column::Status.is_in(ProposalStatus::IN_FLIGHT))
        .exec(txn)
        .await?
        .rows_affected
        == 1;
    if moved {
        let action = if status == ProposalStatus::Failed {
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

#[cfg(test)]
mod tests {
    use super::*;
    use HostJobStatus::*;

    #[test]
    fn a_proposal_settles_only_when_every_job_has_finished() {
        assert_eq!(outcome(&[]), None);
        assert_eq!(outcome(&[Succeeded, Pending]), None);
        assert_eq!(outcome(&[Failed, Dispatched]), None);
        assert_eq!(
            outcome(&[Succeeded, Succeeded]),
            Some(ProposalStatus::Applied)
        );
        assert_eq!(outcome(&[Failed, Failed]), Some(ProposalStatus::Failed));
        assert_eq!(
            outcome(&[Succeeded, Failed]),
            Some(ProposalStatus::PartiallyApplied)
        );
    }

    #[test]
    fn a_job_status_this_build_does_not_know_counts_as_finished_but_not_succeeded() {
        assert_eq!(
            outcome(&[Succeeded, Other("cancelled".into())]),
            Some(ProposalStatus::PartiallyApplied)
        );
    }
}
