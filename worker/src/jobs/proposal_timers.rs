//! `proposal.timers`: scheduled proposals whose window opened go ahead, and snoozed ones
//! whose snooze ran out reopen. Each move is conditional on the status it moves from, so a
//! second run (another replica, a retry) moves nothing twice.

use apalis::prelude::{BoxDynError, Data};
use domain::{
    ProposalStatus,
    proposals::{open_window, reopen},
};
use entities::proposals;
use platform::jobs::ProposalTimers;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};

use crate::Deps;

/// Proposals moved per status and run; the scheduler queues another run while more are due.
const BATCH: u64 = 1000;

pub async fn run(_job: ProposalTimers, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let due_windows = proposals::Entity::find()
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
    let due_snoozes = proposals::Entity::find()
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
    crate::jobs::notify_dispatch::kick(&deps).await;
    Ok(())
}
