//! The end of a proposal that went ahead: once every one of its host jobs has reported (its
//! rollout done), it is `applied`, `partially_applied` or `failed`, judged per host: a host
//! succeeded when every job it ran (its changes, and a reboot the reboot budget held back)
//! succeeded. Hosts that left the proposal (their jobs `cancelled`) count neither way; when
//! every host left, nothing was left to do: `closed`.

use entities::scope::AllOrgs;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entities::{host_jobs, proposals};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, QueryFilter, QuerySelect, sea_query::Expr};
use uuid::Uuid;

use super::record;
use crate::status::{HostJobStatus, ProposalStatus};

/// How a proposal ends once every one of its jobs has: `applied` (every host succeeded),
/// `failed` (none did), `partially_applied`, or `closed` (every host left); `None` while a job
/// is unfinished or there is none. `jobs` are (host, status) pairs.
pub fn outcome(jobs: &[(Uuid, HostJobStatus)]) -> Option<ProposalStatus> {
    if jobs.is_empty()
        || jobs
            .iter()
            .any(|(_, s)| HostJobStatus::UNFINISHED.contains(s))
    {
        return None;
    }
    let mut hosts: HashMap<Uuid, bool> = HashMap::new();
    for (host, status) in jobs {
        if *status == HostJobStatus::Cancelled {
            continue;
        }
        let ok = hosts.entry(*host).or_insert(true);
        *ok &= *status == HostJobStatus::Succeeded;
    }
    if hosts.is_empty() {
        return Some(ProposalStatus::Closed);
    }
    let succeeded = hosts.values().filter(|ok| **ok).count();
    Some(if succeeded == hosts.len() {
        ProposalStatus::Applied
    } else if succeeded == 0 {
        ProposalStatus::Failed
    } else {
        ProposalStatus::PartiallyApplied
    })
}

/// When every job of the proposal has finished, the proposal takes its [`outcome`].
/// Conditional on the proposal still going ahead, so it settles once.
pub async fn settle<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let jobs: Vec<(Uuid, HostJobStatus)> = AllOrgs::rows::<host_jobs::Entity>()
        .select_only()
        .column(host_jobs::Column::HostId)
        .column(host_jobs::Column::Status)
        .filter(host_jobs::Column::ProposalId.eq(proposal_id))
        .into_tuple::<(Uuid, String)>()
        .all(txn)
        .await?
        .into_iter()
        .map(|(host, status)| (host, HostJobStatus::from(status)))
        .collect();
    let Some(status) = outcome(&jobs) else {
        return Ok(());
    };
    let mut hosts: HashMap<Uuid, bool> = HashMap::new();
    for (host, s) in &jobs {
        if *s != HostJobStatus::Cancelled {
            *hosts.entry(*host).or_insert(true) &= *s == HostJobStatus::Succeeded;
        }
    }
    let succeeded = hosts.values().filter(|ok| **ok).count();
    let Some(proposal) = AllOrgs::row::<proposals::Entity>(proposal_id)
        .one(txn)
        .await?
    else {
        return Ok(());
    };
    let moved = AllOrgs::update_rows::<proposals::Entity>()
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
        let action = match status {
            ProposalStatus::Failed => "proposal.failed",
            ProposalStatus::Closed => "proposal.closed",
            _ => "proposal.applied",
        };
        record(
            txn,
            &proposal,
            action,
            None,
            serde_json::json!({ "status": status, "succeeded": succeeded, "hosts": hosts.len() }),
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

    fn on(statuses: &[(u128, HostJobStatus)]) -> Option<ProposalStatus> {
        let jobs: Vec<(Uuid, HostJobStatus)> = statuses
            .iter()
            .map(|(h, s)| (Uuid::from_u128(*h), s.clone()))
            .collect();
        outcome(&jobs)
    }

    #[test]
    fn a_proposal_settles_only_when_every_job_has_finished() {
        assert_eq!(on(&[]), None);
        assert_eq!(on(&[(1, Succeeded), (2, Pending)]), None);
        assert_eq!(on(&[(1, Failed), (2, Dispatched)]), None);
        assert_eq!(
            on(&[(1, Succeeded), (2, Succeeded)]),
            Some(ProposalStatus::Applied)
        );
        assert_eq!(
            on(&[(1, Failed), (2, Failed)]),
            Some(ProposalStatus::Failed)
        );
        assert_eq!(
            on(&[(1, Succeeded), (2, Failed)]),
            Some(ProposalStatus::PartiallyApplied)
        );
    }

    #[test]
    fn a_job_status_this_build_does_not_know_counts_as_finished_but_not_succeeded() {
        assert_eq!(
            on(&[(1, Succeeded), (2, Other("skipped".into()))]),
            Some(ProposalStatus::PartiallyApplied)
        );
    }

    #[test]
    fn hosts_that_left_count_neither_way_and_a_failed_reboot_fails_its_host() {
        assert_eq!(
            on(&[(1, Succeeded), (2, Cancelled)]),
            Some(ProposalStatus::Applied)
        );
        assert_eq!(
            on(&[(1, Cancelled), (2, Cancelled)]),
            Some(ProposalStatus::Closed)
        );
        // Host 1 installed, then its separate reboot failed.
        assert_eq!(
            on(&[(1, Succeeded), (1, Failed), (2, Succeeded)]),
            Some(ProposalStatus::PartiallyApplied)
        );
        assert_eq!(
            on(&[(1, Succeeded), (1, Pending)]),
            None,
            "a reboot still to come"
        );
    }
}
