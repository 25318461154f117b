//! Which jobs a check-in hands its host (decisions §20): jobs already handed out again, until
//! they report; a pending job only while its proposal's rollout is not halted, its wave is the
//! current one and fewer than `max_in_flight` of the wave's jobs are out; a job that may reboot
//! only with a free slot of the organization's reboot budget, else without the reboot (a
//! separate `reboot` job follows its success); a `reboot` job once the host's earlier jobs are
//! done, with a free slot, inside the window when it reboots only there. A host that no longer
//! needs the change leaves the proposal instead (its job `cancelled`).
//!
//! Runs in the check-in's write transaction. On Postgres the host's row is taken first (two
//! check-ins of one host take turns), then the rollout's row (shared; exclusive when the
//! rollout caps jobs in flight, so counts and hand-outs take turns), then the organization's
//! when a reboot slot is taken: the same order as the job-result path (host, rollout).

use entities::scope::{AllOrgs, OrgScope, Untenanted};
use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use entities::{
    host_jobs, host_updates, hosts,
    json::{JobPayload, JsonText},
    organizations, proposal_rollouts, proposals,
};
use platform::ids::HostJobId;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, sea_query::Expr,
};
use uuid::Uuid;

use super::{
    begin_applying,
    host_jobs::LEFT_NOT_NEEDED,
    rollout::{self, rule::Rules},
};
use crate::{
    status::{HostJobStatus, JobKind, Reboot, RolloutState},
    window,
};

/// Most jobs one check-in answer carries.
pub const MAX_JOBS_PER_CHECK_IN: u64 = 20;
/// A reboot slot is held at most this long from the job handed out.
pub const REBOOT_SLOT: Duration = Duration::minutes(30);

/// A job handed out, with what it asks.
#[derive(Clone, Debug)]
pub struct Handed {
    pub job: host_jobs::Model,
    pub payload: JobPayload,
}

/// Whether a job asks for a reboot (and so needs a reboot slot when there is a budget).
pub fn may_reboot(kind: &JobKind, payload: &JobPayload) -> bool {
    *kind == JobKind::Reboot || Reboot::from(payload.reboot.as_str()) != Reboot::Never
}

/// Whether the host's check-in at `now` frees the reboot slot it holds: its job's result is in
/// (this is the next check-in after it), or the slot's time is up.
pub fn frees_reboot_slot(host: &hosts::Model, now: DateTime<Utc>) -> bool {
    host.reboot_slot_until
        .is_some_and(|until| host.reboot_slot_job.is_none() || until <= now)
}

/// Takes the host's row for the transaction (Postgres; SQLite's write transactions take
/// turns): what a check-in handing out jobs and a job's result take first, before the rollout's.
pub async fn take_host<C: ConnectionTrait>(db: &C, host_id: Uuid) -> Result<(), DbErr> {
    if db.get_database_backend() == DatabaseBackend::Postgres {
        AllOrgs::row::<hosts::Entity>(host_id)
            .select_only()
            .column(hosts::Column::Id)
            .lock_exclusive()
            .into_tuple::<Uuid>()
            .one(db)
            .await?;
    }
    Ok(())
}

/// What a proposal's pending jobs are held to in this check-in.
struct Gate {
    /// The rollout lets no job out (halted, or its proposal is not going out yet).
    closed: bool,
    /// The wave whose jobs may go out.
    wave: i32,
    /// Jobs of the wave out now, and the cap.
    in_flight: u64,
    cap: Option<u64>,
    proposal: Option<proposals::Model>,
}

async fn gate<C: ConnectionTrait>(db: &C, proposal_id: Uuid) -> Result<Gate, DbErr> {
    let proposal = AllOrgs::row::<proposals::Entity>(proposal_id)
        .one(db)
        .await?;
    let rules = match &proposal {
        Some(p) => Rules::of(rollout::store::spec_of(p)?.as_ref()),
        None => Rules::of(None),
    };
    let mut row = AllOrgs::row::<proposal_rollouts::Entity>(proposal_id);
    if db.get_database_backend() == DatabaseBackend::Postgres {
        row = if rules.max_in_flight.is_some() {
            row.lock_exclusive()
        } else {
            row.lock_shared()
        };
    }
    let Some(row) = row.one(db).await? else {
        // A proposal that never went ahead has no jobs to hand out; nothing holds one back.
        return Ok(Gate {
            closed: false,
            wave: 0,
            in_flight: 0,
            cap: None,
            proposal,
        });
    };
    let state = RolloutState::from(row.state.as_str());
    let wave = row.begun.saturating_sub(1).max(0);
    let cap = rules.max_in_flight.map(u64::from);
    let in_flight = if cap.is_some() {
        AllOrgs::rows::<host_jobs::Entity>()
            .filter(host_jobs::Column::ProposalId.eq(proposal_id))
            .filter(host_jobs::Column::Wave.eq(wave))
            .filter(host_jobs::Column::Status.eq(HostJobStatus::Dispatched))
            .count(db)
            .await?
    } else {
        0
    };
    Ok(Gate {
        closed: row.begun == 0 || matches!(state, RolloutState::Halted),
        wave,
        in_flight,
        cap,
        proposal,
    })
}

/// Whether the host still needs what `job` carries: a package of it still upgradable in its
/// last inventory, or the release upgrade still offered.
async fn still_needed<C: ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    job: &host_jobs::Model,
    payload: &JobPayload,
) -> Result<bool, DbErr> {
    if JobKind::from(job.kind.as_str()) == JobKind::DistUpgrade {
        return Ok(host.release_upgrade.is_some());
    }
    if payload.changes.is_empty() {
        return Ok(true);
    }
    let names: Vec<String> = payload.changes.iter().map(|c| c.package.clone()).collect();
    Ok(host_updates::Entity::rows()
        .select_only()
        .column(host_updates::Column::Name)
        .filter(host_updates::Column::HostId.eq(host.id))
        .filter(host_updates::Column::Name.is_in(names))
        .limit(1)
        .into_tuple::<String>()
        .one(db)
        .await?
        .is_some())
}

/// Takes one of the organization's reboot slots for `job` of `host` when one is free (or there
/// is no budget); whether it could.
async fn take_reboot_slot<C: ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    job_id: Uuid,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let mut org = OrgScope::of(host.org_id).rows::<organizations::Entity>();
    let budget = org
        .clone()
        .one(db)
        .await?
        .and_then(|o| o.max_concurrent_reboots);
    let Some(budget) = budget else {
        return Ok(true);
    };
    if db.get_database_backend() == DatabaseBackend::Postgres {
        // Slots are counted and taken one check-in at a time.
        org = org.lock_exclusive();
        org.one(db).await?;
    }
    let rebooting = OrgScope::of(host.org_id)
        .rows::<hosts::Entity>()
        .filter(hosts::Column::RebootSlotUntil.gt(now))
        .filter(hosts::Column::Id.ne(host.id))
        .count(db)
        .await?;
    if rebooting >= u64::try_from(budget.max(0)).unwrap_or(0) {
        return Ok(false);
    }
    OrgScope::of(host.org_id)
        .update_rows::<hosts::Entity>()
        .col_expr(
            hosts::Column::RebootSlotUntil,
            Expr::value(Some(now + REBOOT_SLOT)),
        )
        .col_expr(hosts::Column::RebootSlotJob, Expr::value(Some(job_id)))
        .filter(hosts::Column::Id.eq(host.id))
        .exec(db)
        .await?;
    Ok(true)
}

/// Whether a reboot job that reboots only inside its proposal's window may go out now.
fn reboot_window_open(
    proposal: Option<&proposals::Model>,
    payload: &JobPayload,
    now: DateTime<Utc>,
) -> bool {
    if Reboot::from(payload.reboot.as_str()) != Reboot::InWindow {
        return true;
    }
    let Some(proposal) = proposal else {
        return false;
    };
    match window::of_proposal(proposal.window.as_ref())
        .and_then(|w| w.map(|w| window::parse(&w)).transpose())
    {
        Ok(Some(w)) => w.is_open(now),
        _ => false,
    }
}

/// Marks `job` handed out (from pending, so a job goes out once), with `payload` when the
/// reboot budget changed what it asks.
async fn hand_out<C: ConnectionTrait>(
    db: &C,
    job: &host_jobs::Model,
    payload: Option<&JobPayload>,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let mut update = OrgScope::of(job.org_id)
        .update_rows::<host_jobs::Entity>()
        .col_expr(
            host_jobs::Column::Status,
            Expr::value(HostJobStatus::Dispatched),
        )
        .col_expr(host_jobs::Column::DispatchedAt, Expr::value(Some(now)));
    if let Some(payload) = payload {
        update = update.col_expr(
            host_jobs::Column::Payload,
            Expr::value(JsonText::new(payload)?),
        );
    }
    Ok(update
        .filter(host_jobs::Column::Id.eq(job.id))
        .filter(host_jobs::Column::Status.eq(HostJobStatus::Pending))
        .exec(db)
        .await?
        .rows_affected
        == 1)
}

/// The host's jobs for its check-in at `now`, oldest first (at most
/// [`MAX_JOBS_PER_CHECK_IN`]); see the module's documentation for which. A job whose stored
/// payload cannot be read is neither handed out nor marked (logged): the agent is never told to
/// do something other than what was approved.
pub async fn dispatch<C: ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    now: DateTime<Utc>,
) -> Result<Vec<Handed>, DbErr> {
    let rows = OrgScope::of(host.org_id)
        .rows::<host_jobs::Entity>()
        .filter(host_jobs::Column::HostId.eq(host.id))
        .filter(host_jobs::Column::Status.is_in(HostJobStatus::UNFINISHED))
        .order_by_asc(host_jobs::Column::Id)
        .limit(MAX_JOBS_PER_CHECK_IN)
        .all(db)
        .await?;
    let pending = rows
        .iter()
        .any(|r| HostJobStatus::from(r.status.as_str()) == HostJobStatus::Pending);
    if pending {
        take_host(db, host.id).await?;
    }
    let mut gates: HashMap<Uuid, Gate> = HashMap::new();
    let mut handed = Vec::with_capacity(rows.len());
    // A reboot comes after every earlier job of the host has reported.
    let mut earlier_unfinished = false;
    for job in rows {
        let mut payload = match job.payload.read() {
            Ok(payload) => payload,
            Err(err) => {
                tracing::error!(
                    job_id = %HostJobId::from(job.id),
                    error = %err,
                    "a host job's stored payload cannot be read: it is not handed out"
                );
                earlier_unfinished = true;
                continue;
            }
        };
        if HostJobStatus::from(job.status.as_str()) != HostJobStatus::Pending {
            handed.push(Handed { job, payload });
            earlier_unfinished = true;
            continue;
        }
        if JobKind::from(job.kind.as_str()) != JobKind::Reboot
            && !still_needed(db, host, &job, &payload).await?
        {
            OrgScope::of(host.org_id)
                .update_rows::<host_jobs::Entity>()
                .col_expr(
                    host_jobs::Column::Status,
                    Expr::value(HostJobStatus::Cancelled),
                )
                .col_expr(
                    host_jobs::Column::Log,
                    Expr::value(Some(LEFT_NOT_NEEDED.to_owned())),
                )
                .col_expr(host_jobs::Column::FinishedAt, Expr::value(Some(now)))
                .filter(host_jobs::Column::Id.eq(job.id))
                .filter(host_jobs::Column::Status.eq(HostJobStatus::Pending))
                .exec(db)
                .await?;
            if let Some(proposal_id) = job.proposal_id {
                gates.remove(&proposal_id);
                rollout::advance(db, proposal_id, now).await?;
            }
            continue;
        }
        let gate = match job.proposal_id {
            Some(proposal_id) => {
                if let std::collections::hash_map::Entry::Vacant(entry) = gates.entry(proposal_id) {
                    entry.insert(gate(db, proposal_id).await?);
                }
                gates.get_mut(&proposal_id)
            }
            None => None,
        };
        if let Some(gate) = &gate
            && (gate.closed
                || job.wave.is_some_and(|w| w != gate.wave)
                || gate.cap.is_some_and(|cap| gate.in_flight >= cap))
        {
            earlier_unfinished = true;
            continue;
        }
        let proposal = gate.as_ref().and_then(|g| g.proposal.as_ref());
        let mut changed = None;
        let kind = JobKind::from(job.kind.as_str());
        if kind == JobKind::Reboot {
            if earlier_unfinished
                || !reboot_window_open(proposal, &payload, now)
                || !take_reboot_slot(db, host, job.id, now).await?
            {
                earlier_unfinished = true;
                continue;
            }
        } else if may_reboot(&kind, &payload) && !take_reboot_slot(db, host, job.id, now).await? {
            // Over the budget: it installs now, and its reboot waits for a slot.
            payload.deferred_reboot =
                Some(std::mem::replace(&mut payload.reboot, Reboot::Never.into()));
            changed = Some(payload.clone());
        }
        if !hand_out(db, &job, changed.as_ref(), now).await? {
            continue;
        }
        if let Some(proposal_id) = job.proposal_id {
            begin_applying(db, proposal_id, now).await?;
        }
        if let Some(proposal_id) = job.proposal_id
            && let Some(gate) = gates.get_mut(&proposal_id)
        {
            gate.in_flight += 1;
        }
        earlier_unfinished = true;
        handed.push(Handed {
            job: host_jobs::Model {
                status: HostJobStatus::Dispatched.to_string(),
                dispatched_at: Some(now),
                payload: JsonText::new(&payload)?,
                ..job
            },
            payload,
        });
    }
    Ok(handed)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn payload(reboot: &str) -> JobPayload {
        JobPayload {
            proposal_id: "prp_x".into(),
            proposal_number: 1,
            kind: "package_update".into(),
            reboot: reboot.into(),
            changes: Vec::new(),
            release_upgrade: None,
            window: None,
            deferred_reboot: None,
        }
    }

    #[test]
    fn a_job_needs_a_reboot_slot_when_it_may_reboot() {
        assert!(!may_reboot(&JobKind::ApplyUpdates, &payload("never")));
        assert!(may_reboot(&JobKind::ApplyUpdates, &payload("immediate")));
        assert!(may_reboot(&JobKind::DistUpgrade, &payload("in_window")));
        assert!(may_reboot(&JobKind::Reboot, &payload("never")));
    }

    #[test]
    fn a_slot_is_freed_at_the_check_in_after_the_result_or_after_thirty_minutes() {
        let now = Utc
            .with_ymd_and_hms(2026, 11, 2, 9, 0, 0)
            .single()
            .unwrap_or_default();
        let mut host = hosts::Model {
            id: Uuid::nil(),
            org_id: Uuid::nil(),
            machine_id: String::new(),
            hostname: String::new(),
            display_name: None,
            notes: None,
            labels: JsonText::from_stored("{}"),
            distro: None,
            distro_version: None,
            distro_codename: None,
            os_family: None,
            arch: None,
            kernel_version: None,
            virtualization: None,
            agent_version: None,
            agent_mode: None,
            agent_permissions: None,
            agent_install: None,
            cloud: None,
            frozen: None,
            snapshots: None,
            reboot_required: None,
            services_need_restart: JsonText::from_stored("[]"),
            held_packages: JsonText::from_stored("[]"),
            updates_total: None,
            updates_security: None,
            updates_requiring_reboot: None,
            advisory_coverage: String::new(),
            status: String::new(),
            enrollment_token_id: None,
            inventory_digest: None,
            check_in_interval_s: 300,
            enrolled_at: now,
            last_seen_at: None,
            last_inventory_at: None,
            cert_expires_at: None,
            decommissioned_at: None,
            updated_at: now,
            release_upgrade: None,
            updates_seq: 0,
            reboot_slot_until: None,
            reboot_slot_job: None,
        };
        assert!(!frees_reboot_slot(&host, now), "holds none");
        host.reboot_slot_until = Some(now + REBOOT_SLOT);
        host.reboot_slot_job = Some(Uuid::from_u128(1));
        assert!(!frees_reboot_slot(&host, now), "its job has no result yet");
        assert!(frees_reboot_slot(&host, now + REBOOT_SLOT), "time is up");
        host.reboot_slot_job = None;
        assert!(frees_reboot_slot(&host, now), "the result is in");
    }
}
