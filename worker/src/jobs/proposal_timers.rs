//! `proposal.timers`: scheduled proposals whose window opened go ahead, snoozed ones whose
//! snooze ran out reopen, and rollouts whose soak ended or whose window opened are judged again
//! (decisions §20: the next wave begins). Each move is conditional on the state it moves from
//! (a rollout's on its row, taken first), so a second run (another replica, a retry) moves
//! nothing twice.

use apalis::prelude::{BoxDynError, Data};
use domain::proposals::jobs::ProposalTimers;
use domain::{
    ProposalStatus,
    proposals::{open_window, reopen, rollout},
};
use entities::proposals;
use entities::scope::AllOrgs;
use sea_orm::{ColumnTrait, QueryFilter, QuerySelect};

use crate::Deps;

/// Proposals moved per status and run; the scheduler queues another run while more are due.
const BATCH: u64 = 1000;

pub async fn run(_job: ProposalTimers, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let due_windows = AllOrgs::rows::<proposals::Entity>()
        .filter(proposals::Column::Status.eq(ProposalStatus::Scheduled))
        .filter(proposals::Column::ScheduledFor.lte(now))
        .limit(BATCH)
        .all(&deps.db.orm)
        .await?;
    for proposal in due_windows {
        let txn = deps.db.begin_write().await?;
        open_window(&txn, &proposal, now).await?;
        txn.commit().await?;
    }
    let due_snoozes = AllOrgs::rows::<proposals::Entity>()
        .filter(proposals::Column::Status.eq(ProposalStatus::Snoozed))
        .filter(proposals::Column::SnoozedUntil.lte(now))
        .limit(BATCH)
        .all(&deps.db.orm)
        .await?;
    for proposal in due_snoozes {
        let txn = deps.db.begin_write().await?;
        reopen(&txn, &proposal, now).await?;
        txn.commit().await?;
    }
    for proposal_id in rollout::store::due(&deps.db.orm, now, BATCH).await? {
        let txn = deps.db.begin_write().await?;
        rollout::advance(&txn, proposal_id, now).await?;
        txn.commit().await?;
    }
    crate::jobs::notify_dispatch::kick(&deps).await;
    Ok(())
}
