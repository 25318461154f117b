//! Rollouts (decisions §20): an approved proposal goes out in waves that promote on success
//! and halt on failure. One rule, [`rule::decide`], pure; [`store`] reads what it needs and
//! does what it says, when a result arrives ([`after_result`]), when a host leaves
//! ([`store::host_left`]), when the scheduler finds a soak over or a window open
//! ([`store::due`], [`store::advance`]), and by hand ([`store::halt`], [`store::resume`]).
//! Which jobs a check-in hands out is [`crate::proposals::dispatch`].

pub mod rule;
pub mod store;

use chrono::{DateTime, Utc};
use entities::scope::AllOrgs;
use entities::{host_jobs, hosts, json::JsonText};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, QueryFilter, Set};
use uuid::Uuid;

pub use store::{
    Refusal, RolloutError, Tally, advance, current_wave, halt, host_left, plan, resume, start, view,
};

use crate::status::{HostJobStatus, JobKind};

/// After a job's result was recorded (`job` as it was before, `status` what it is now): a
/// change the reboot budget held a reboot back from gets its separate `reboot` job, the host's
/// reboot slot (if this job took it) is freed at its next check-in, and the proposal's rollout
/// is judged again.
pub async fn after_result<C: ConnectionTrait>(
    txn: &C,
    job: &host_jobs::Model,
    status: &HostJobStatus,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    if JobKind::from(job.kind.as_str()) != JobKind::Reboot && *status == HostJobStatus::Succeeded {
        let mut payload = job.payload.read()?;
        if let Some(reboot) = payload.deferred_reboot.take() {
            payload.reboot = reboot;
            payload.changes.clear();
            payload.release_upgrade = None;
            host_jobs::ActiveModel {
                id: Set(platform::ids::new_uuid()),
                org_id: Set(job.org_id),
                host_id: Set(job.host_id),
                proposal_id: Set(job.proposal_id),
                kind: Set(JobKind::Reboot.into()),
                payload: Set(JsonText::new(&payload)?),
                status: Set(HostJobStatus::Pending.to_string()),
                log: Set(None),
                rebooted: Set(None),
                created_at: Set(now),
                dispatched_at: Set(None),
                finished_at: Set(None),
                wave: Set(job.wave),
            }
            .insert(txn)
            .await?;
        }
    }
    // The result is in: the host holds the slot until its next check-in (and no longer than
    // the slot's 30 minutes).
    AllOrgs::update_rows::<hosts::Entity>()
        .col_expr(
            hosts::Column::RebootSlotJob,
            sea_orm::sea_query::Expr::value(Option::<Uuid>::None),
        )
        .filter(hosts::Column::Id.eq(job.host_id))
        .filter(hosts::Column::RebootSlotJob.eq(job.id))
        .exec(txn)
        .await?;
    if let Some(proposal_id) = job.proposal_id {
        advance(txn, proposal_id, now).await?;
    }
    Ok(())
}
