//! Host jobs: an approved proposal becomes one job per host of each wave as the wave begins,
//! handed to the agent in its check-in answer, and the agent reports the result. Each result
//! is judged by the rollout's rule (decisions §20: promote, halt); when every wave is done the
//! proposal is `applied`, `partially_applied` or `failed`.

use chrono::{DateTime, Utc};
use domain::fleet::events::record_event;
use domain::{HostEventKind, HostJobStatus, proposals::JobPayload};
use entities::{host_jobs, hosts};
use platform::ids::{HostId, HostJobId, ProposalId};
use poem_openapi::{ApiResponse, OpenApi, param::Path};
use protocol::wire::{Job, JobChange, JobResult, JobStatus};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, QueryFilter, Set};

use super::{limits::HostRateLimited, signed::Signed};
use crate::{
    AppState,
    http::error::{ApiError, BadRequest, Conflict, Errors, NotFound, StateRefusal, Unauthorized},
    http::tags::Tag,
    proposals::policies::window_rule,
};
use entities::scope::OrgScope;

/// The longest log kept per job; a longer one keeps its last part.
pub const MAX_LOG_BYTES: usize = protocol::wire::MAX_LOG_BYTES;

fn job_view(row: &host_jobs::Model, payload: JobPayload) -> Result<Job, DbErr> {
    let release_upgrade = payload
        .release_upgrade
        .map(|r| serde_json::to_value(r).map_err(|e| DbErr::Json(e.to_string())))
        .transpose()?;
    Ok(Job {
        id: HostJobId::from(row.id).to_string(),
        kind: row.kind.clone(),
        proposal_id: payload.proposal_id,
        proposal_number: payload.proposal_number,
        reboot: payload.reboot,
        changes: payload
            .changes
            .into_iter()
            .map(|c| JobChange {
                package: c.package,
                ecosystem: c.ecosystem,
                from_version: c.from_version,
                to_version: c.to_version,
            })
            .collect(),
        release_upgrade,
        window: payload.window.map(window_rule),
    })
}

/// The host's jobs for this check-in (the rule is `domain::proposals::dispatch`: jobs handed
/// out before until they report, pending ones as the rollout and the reboot budget allow), as
/// the agent protocol carries them. Runs in the check-in's write transaction.
pub async fn dispatch<C: ConnectionTrait>(
    txn: &C,
    host: &hosts::Model,
    now: DateTime<Utc>,
) -> Result<Vec<Job>, DbErr> {
    domain::proposals::dispatch::dispatch(txn, host, now)
        .await?
        .into_iter()
        .map(|handed| job_view(&handed.job, handed.payload))
        .collect()
}

#[derive(ApiResponse)]
pub enum Reported {
    /// Recorded (or already recorded with the same status: reporting again is harmless).
    #[oai(status = 204)]
    Recorded,
}

fn tail(log: &str) -> String {
    if log.len() <= MAX_LOG_BYTES {
        return log.to_owned();
    }
    let mut start = log.len() - MAX_LOG_BYTES;
    while !log.is_char_boundary(start) {
        start += 1;
    }
    log[start..].to_owned()
}

pub struct AgentJobsApi;

#[OpenApi(tag = "Tag::Agent")]
impl AgentJobsApi {
    /// Report a job's result (signed like every agent call). The host's event list gains a
    /// `job_ran` event, and the proposal's rollout is judged (decisions §20): failed results
    /// reaching `halt_after_failures` halt it (`proposal.halted`); the wave's last result
    /// promotes the next wave at once when it needs no soak and no window. A job of a change
    /// whose reboot the reboot budget held back is followed by a `reboot` job. When every wave
    /// is done the proposal becomes `applied` (every host succeeded), `failed` (none did) or
    /// `partially_applied`. A job of another host is 404; reporting a different status for a
    /// job already reported (or withdrawn: `cancelled`) is 409 `invalid-state`.
    #[oai(
        path = "/v1/agent/jobs/:job_id/result",
        method = "post",
        operation_id = "agentReportJobResult"
    )]
    async fn report(
        &self,
        state: poem::web::Data<&AppState>,
        // Before the id: a request that is not signed is 401 whatever its path.
        request: Signed<JobResult>,
        /// The job's id (`job_`).
        job_id: Path<HostJobId>,
    ) -> Result<
        Reported,
        Errors<(
            BadRequest,
            Unauthorized,
            NotFound,
            Conflict,
            HostRateLimited,
        )>,
    > {
        let scope = request.scope();
        let Signed { host, body, .. } = request;
        let now = state.clock.now();
        let status = match body.status {
            JobStatus::Succeeded => HostJobStatus::Succeeded,
            JobStatus::Failed => HostJobStatus::Failed,
        };
        let txn = state.db.begin_write().await?;
        // The host's row first, as a check-in takes it (the rollout's row comes after).
        domain::proposals::dispatch::take_host(&txn, host.id).await?;
        let job = scope
            .row(*job_id)
            .filter(host_jobs::Column::HostId.eq(host.id))
            .one(&txn)
            .await?
            .ok_or(ApiError::NotFound)?;
        if job.finished_at.is_some() {
            return if HostJobStatus::from(job.status.as_str()) == status {
                Ok(Reported::Recorded)
            } else {
                Err(ApiError::state(
                    StateRefusal::InvalidState,
                    format!("The job was already reported as {}.", job.status),
                )
                .into())
            };
        }
        let finished_at = body.finished_at.min(now);
        let mut changed: host_jobs::ActiveModel = job.clone().into();
        changed.status = Set(status.to_string());
        changed.log = Set(body.log.as_deref().map(tail));
        changed.rebooted = Set(body.rebooted);
        changed.finished_at = Set(Some(finished_at));
        changed.dispatched_at = Set(job.dispatched_at.or(Some(now)));
        changed.update(&txn).await?;
        let host_row: Option<hosts::Model> = scope.row(HostId::from(host.id)).one(&txn).await?;
        if let Some(host_row) = host_row {
            record_event(
                &txn,
                &host_row,
                HostEventKind::JobRan,
                Some(serde_json::json!({
                    "job_id": HostJobId::from(job.id),
                    "proposal_id": job.proposal_id.map(ProposalId::from),
                    "status": status,
                    "rebooted": body.rebooted,
                })),
                finished_at,
            )
            .await?;
        }
        domain::proposals::rollout::after_result(&txn, &job, &status, now).await?;
        txn.commit().await?;
        if job.proposal_id.is_some() {
            crate::notifications::kick(&state, OrgScope::of(job.org_id)).await;
        }
        Ok(Reported::Recorded)
    }
}
