//! The store part of the rollout rule: reads what [`super::rule::decide`] needs and does what
//! it says, inside the caller's write transaction.
//!
//! Every move of a rollout first takes its row (`FOR UPDATE` on Postgres; SQLite's write
//! transactions already take turns), so results arriving at once on several api replicas, and
//! the scheduler's timers on several workers, are judged one after the other, each seeing what
//! the others committed. A promotion is also a compare-and-set on the number of waves begun,
//! so a wave never begins twice and none is skipped.

use entities::scope::{AllOrgs, Untenanted};
use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use entities::{
    host_jobs, hosts,
    json::{JsonText, Labels, PlannedWave, RolloutSpec},
    proposal_hosts, proposal_rollouts, proposals,
};
use platform::ids::ProposalId;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Set, sea_query::Expr,
};
use uuid::Uuid;

use super::rule::{self, Candidate, Progress, Rules, Step, Window};
use crate::{
    proposals::{host_jobs::create_jobs, record, settle},
    status::{Apply, HostJobStatus, JobKind, ProposalStatus, RolloutState},
    window,
};

/// Rows written per statement.
const CHUNK: usize = 500;

/// The proposal's rollout as stored, `None` when it has none (one wave of every host). A stored
/// rollout that cannot be read is an error: the proposal must not go out all at once as if it
/// had none.
pub fn spec_of(proposal: &proposals::Model) -> Result<Option<RolloutSpec>, DbErr> {
    Ok(proposal.rollout.as_ref().map(JsonText::read).transpose()?)
}

/// The rollout row of `proposal_id`, taken for this transaction.
pub async fn lock<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
) -> Result<Option<proposal_rollouts::Model>, DbErr> {
    let mut query = AllOrgs::row::<proposal_rollouts::Entity>(proposal_id);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await
}

/// When a proposal goes ahead (approved or scheduled): its hosts are cut into waves in the
/// policy's stable order, each host's wave stored, and the rollout row written, `waiting`.
/// A proposal that has a rollout row already keeps it.
pub async fn plan<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    if AllOrgs::row::<proposal_rollouts::Entity>(proposal.id)
        .one(txn)
        .await?
        .is_some()
    {
        return Ok(());
    }
    let rules = Rules::of(spec_of(proposal)?.as_ref());
    let ids: Vec<Uuid> = proposal_hosts::Entity::rows()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
        .into_tuple()
        .all(txn)
        .await?;
    let mut labels: HashMap<Uuid, Option<Labels>> = HashMap::new();
    if rules.waves.iter().any(|w| w.selector.is_some()) {
        for chunk in ids.chunks(CHUNK) {
            let rows: Vec<(Uuid, JsonText<Labels>)> = AllOrgs::rows::<hosts::Entity>()
                .select_only()
                .column(hosts::Column::Id)
                .column(hosts::Column::Labels)
                .filter(hosts::Column::Id.is_in(chunk.to_vec()))
                .into_tuple()
                .all(txn)
                .await?;
            labels.extend(rows.into_iter().map(|(id, l)| (id, l.read().ok())));
        }
    }
    let candidates: Vec<Candidate> = ids
        .iter()
        .map(|id| Candidate {
            id: *id,
            labels: labels.remove(id).flatten(),
        })
        .collect();
    let seed = proposal.policy_id.unwrap_or(proposal.id);
    let cuts = rule::assign(&rules.waves, seed, &candidates);
    for (index, cut) in cuts.iter().enumerate() {
        let index = i32::try_from(index).unwrap_or(i32::MAX);
        for chunk in cut.hosts.chunks(CHUNK) {
            proposal_hosts::Entity::update_rows()
                .col_expr(proposal_hosts::Column::Wave, Expr::value(Some(index)))
                .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
                .filter(proposal_hosts::Column::HostId.is_in(chunk.to_vec()))
                .exec(txn)
                .await?;
        }
    }
    let planned: Vec<PlannedWave> = cuts
        .iter()
        .map(|cut| PlannedWave {
            name: cut.name.clone(),
            hosts: cut.hosts.len() as u64,
        })
        .collect();
    proposal_rollouts::ActiveModel {
        proposal_id: Set(proposal.id),
        org_id: Set(proposal.org_id),
        state: Set(RolloutState::Waiting.to_string()),
        begun: Set(0),
        waves: Set(JsonText::new(&planned)?),
        halted_reason: Set(None),
        halted_at: Set(None),
        due_at: Set(None),
        failures_forgiven: Set(0),
        forgiven_wave: Set(None),
        forgiven_in_wave: Set(0),
        updated_at: Set(now),
    }
    .insert(txn)
    .await?;
    Ok(())
}

/// The proposal goes out now (approved, or its window opened): its first wave begins, unless
/// its rollout was halted while it waited (a resume begins it then).
pub async fn start<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    plan(txn, proposal, now).await?;
    let Some(row) = lock(txn, proposal.id).await? else {
        return Ok(());
    };
    if row.begun != 0 || RolloutState::from(row.state.as_str()) != RolloutState::Waiting {
        return Ok(());
    }
    if begin_wave(txn, proposal, &row, now).await? {
        advance_locked(txn, proposal, now).await?;
    }
    Ok(())
}

/// Begins the wave after the `row.begun` begun so far: its jobs, `running`. A compare-and-set on
/// `begun`, so two callers never begin the same wave; whether this one did.
async fn begin_wave<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    row: &proposal_rollouts::Model,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let moved = AllOrgs::update_rows::<proposal_rollouts::Entity>()
        .col_expr(
            proposal_rollouts::Column::Begun,
            Expr::value(row.begun.saturating_add(1)),
        )
        .col_expr(
            proposal_rollouts::Column::State,
            Expr::value(RolloutState::Running),
        )
        .col_expr(
            proposal_rollouts::Column::DueAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(proposal_rollouts::Column::UpdatedAt, Expr::value(now))
        .filter(proposal_rollouts::Column::ProposalId.eq(row.proposal_id))
        .filter(proposal_rollouts::Column::Begun.eq(row.begun))
        .exec(txn)
        .await?
        .rows_affected
        == 1;
    if !moved {
        return Ok(false);
    }
    let wave = row.begun;
    let pending = create_jobs(txn, proposal, wave, now).await?;
    let waves = row.waves.read()?;
    let name = usize::try_from(wave)
        .ok()
        .and_then(|w| waves.get(w))
        .map(|w| w.name.clone())
        .unwrap_or_default();
    record(
        txn,
        proposal,
        "proposal.wave_started",
        None,
        serde_json::json!({ "wave": wave, "name": name, "jobs": pending }),
        now,
    )
    .await?;
    Ok(true)
}

/// Judges the proposal's rollout again (a result arrived, a host left, the scheduler found a
/// soak over or a window open) and does what the rule says. A proposal without a rollout row
/// (it never went ahead) is only settled.
pub async fn advance<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    if lock(txn, proposal_id).await?.is_none() {
        return settle(txn, proposal_id, now).await;
    }
    let Some(proposal) = AllOrgs::row::<proposals::Entity>(proposal_id)
        .one(txn)
        .await?
    else {
        return Ok(());
    };
    advance_locked(txn, &proposal, now).await
}

/// [`advance`], the row already taken by this transaction.
async fn advance_locked<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let rules = Rules::of(spec_of(proposal)?.as_ref());
    // Each promotion begins one wave; there are never more steps than waves.
    for _ in 0..=rule::MAX_WAVES + 1 {
        let Some(row) = AllOrgs::row::<proposal_rollouts::Entity>(proposal.id)
            .one(txn)
            .await?
        else {
            return Ok(());
        };
        let state = RolloutState::from(row.state.as_str());
        if row.begun == 0 || matches!(state, RolloutState::Halted | RolloutState::Done) {
            return Ok(());
        }
        let progress = progress(txn, proposal, &row).await?;
        let window = window_now(proposal, now);
        match rule::decide(&rules, &progress, window, now) {
            Step::Continue => set_state(txn, &row, RolloutState::Running, None, now).await?,
            Step::Soak(until) => {
                set_state(txn, &row, RolloutState::Soaking, Some(until), now).await?
            }
            Step::Wait(opens) => {
                set_state(txn, &row, RolloutState::Waiting, Some(opens), now).await?
            }
            Step::Halt(reason) => {
                halt_row(txn, proposal, &row, &reason, None, now).await?;
            }
            Step::Done => {
                set_state(txn, &row, RolloutState::Done, None, now).await?;
                settle(txn, proposal.id, now).await?;
            }
            Step::Promote(_) => {
                if begin_wave(txn, proposal, &row, now).await? {
                    continue;
                }
            }
        }
        return Ok(());
    }
    Ok(())
}

async fn set_state<C: ConnectionTrait>(
    txn: &C,
    row: &proposal_rollouts::Model,
    state: RolloutState,
    due_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    if RolloutState::from(row.state.as_str()) == state && row.due_at == due_at {
        return Ok(());
    }
    AllOrgs::update_rows::<proposal_rollouts::Entity>()
        .col_expr(proposal_rollouts::Column::State, Expr::value(state))
        .col_expr(proposal_rollouts::Column::DueAt, Expr::value(due_at))
        .col_expr(proposal_rollouts::Column::UpdatedAt, Expr::value(now))
        .filter(proposal_rollouts::Column::ProposalId.eq(row.proposal_id))
        .filter(proposal_rollouts::Column::Begun.eq(row.begun))
        .exec(txn)
        .await?;
    Ok(())
}

/// Halts the rollout of `row` (conditional on its state as read, so it halts once) and
/// announces it: `proposal.halted`, to every channel that wants it.
async fn halt_row<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    row: &proposal_rollouts::Model,
    reason: &str,
    actor: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let moved = AllOrgs::update_rows::<proposal_rollouts::Entity>()
        .col_expr(
            proposal_rollouts::Column::State,
            Expr::value(RolloutState::Halted),
        )
        .col_expr(
            proposal_rollouts::Column::HaltedReason,
            Expr::value(Some(reason.to_owned())),
        )
        .col_expr(proposal_rollouts::Column::HaltedAt, Expr::value(Some(now)))
        .col_expr(
            proposal_rollouts::Column::DueAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(proposal_rollouts::Column::UpdatedAt, Expr::value(now))
        .filter(proposal_rollouts::Column::ProposalId.eq(row.proposal_id))
        .filter(proposal_rollouts::Column::State.eq(row.state.as_str()))
        .filter(proposal_rollouts::Column::Begun.eq(row.begun))
        .exec(txn)
        .await?
        .rows_affected
        == 1;
    if moved {
        let waves = row.waves.read()?;
        let wave = current_wave(row);
        tracing::warn!(
            proposal_id = %ProposalId::from(proposal.id),
            wave,
            reason,
            by_hand = actor.is_some(),
            "rollout halted"
        );
        record(
            txn,
            proposal,
            "proposal.halted",
            actor,
            serde_json::json!({
                "status": "halted",
                "reason": reason,
                "wave": wave,
                "wave_name": waves.get(wave).map(|w| w.name.clone()),
                "by_hand": actor.is_some(),
            }),
            now,
        )
        .await?;
    }
    Ok(moved)
}

/// The wave in progress (or last begun; the first before any has).
pub fn current_wave(row: &proposal_rollouts::Model) -> usize {
    usize::try_from(row.begun.saturating_sub(1).max(0)).unwrap_or(0)
}

/// The window of a window-bound proposal now. One that cannot be read holds the next wave back
/// (fails closed) and is looked at again in an hour.
fn window_now(proposal: &proposals::Model, now: DateTime<Utc>) -> Window {
    if Apply::from(proposal.apply.as_str()) != Apply::AsapInWindow {
        return Window::Unbound;
    }
    let parsed = window::of_proposal(proposal.window.as_ref())
        .and_then(|w| w.map(|w| window::parse(&w)).transpose());
    match parsed {
        Ok(None) => Window::Unbound,
        Ok(Some(w)) if w.is_open(now) => Window::Open,
        Ok(Some(w)) => Window::Shut(w.next_opening(now)),
        Err(err) => {
            tracing::error!(
                proposal_id = %ProposalId::from(proposal.id),
                error = %err,
                "maintenance window cannot be read: the next wave waits"
            );
            Window::Shut(Some(now + Duration::hours(1)))
        }
    }
}

fn unfinished() -> [HostJobStatus; 2] {
    HostJobStatus::UNFINISHED
}

/// Failed results across the proposal's begun waves, less those a resume forgave.
async fn failures<C: ConnectionTrait>(
    txn: &C,
    row: &proposal_rollouts::Model,
) -> Result<u64, DbErr> {
    let failed = AllOrgs::rows::<host_jobs::Entity>()
        .filter(host_jobs::Column::ProposalId.eq(row.proposal_id))
        .filter(host_jobs::Column::Wave.is_in(0..row.begun.max(1)))
        .filter(host_jobs::Column::Status.eq(HostJobStatus::Failed))
        .count(txn)
        .await?;
    Ok(failed.saturating_sub(u64::try_from(row.failures_forgiven).unwrap_or(0)))
}

/// Where the current wave of `row` stands. Cheap while the wave runs (is any of its jobs
/// unfinished: one index probe); the wave's results are read whole once, when it is done.
async fn progress<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    row: &proposal_rollouts::Model,
) -> Result<Progress, DbErr> {
    let waves = row.waves.read()?;
    let wave = current_wave(row);
    let wave_i32 = row.begun.saturating_sub(1).max(0);
    let failures = failures(txn, row).await?;
    let running = AllOrgs::rows::<host_jobs::Entity>()
        .select_only()
        .column(host_jobs::Column::Id)
        .filter(host_jobs::Column::ProposalId.eq(proposal.id))
        .filter(host_jobs::Column::Wave.eq(wave_i32))
        .filter(host_jobs::Column::Status.is_in(unfinished()))
        .limit(1)
        .into_tuple::<Uuid>()
        .one(txn)
        .await?
        .is_some();
    let mut progress = Progress {
        wave,
        name: waves.get(wave).map(|w| w.name.clone()).unwrap_or_default(),
        waves: waves.len().max(1),
        unfinished: u64::from(running),
        succeeded: 0,
        failed: 0,
        last_result_at: None,
        failures,
        hosts: u64::try_from(proposal.hosts).unwrap_or(0),
    };
    if running {
        return Ok(progress);
    }
    let tally = tallies(txn, proposal.id, Some(wave_i32), &waves)
        .await?
        .into_iter()
        .next()
        .unwrap_or_default();
    progress.succeeded = tally.succeeded;
    // Failed results a resume of this wave set aside no longer count against it.
    let forgiven = if row.forgiven_wave == Some(wave_i32) {
        u64::try_from(row.forgiven_in_wave).unwrap_or(0)
    } else {
        0
    };
    progress.failed = tally.failed.saturating_sub(forgiven);
    progress.last_result_at = AllOrgs::rows::<host_jobs::Entity>()
        .select_only()
        .column(host_jobs::Column::FinishedAt)
        .filter(host_jobs::Column::ProposalId.eq(proposal.id))
        .filter(host_jobs::Column::Wave.eq(wave_i32))
        .filter(host_jobs::Column::Status.is_in([HostJobStatus::Succeeded, HostJobStatus::Failed]))
        .order_by_desc(host_jobs::Column::FinishedAt)
        .limit(1)
        .into_tuple::<Option<DateTime<Utc>>>()
        .one(txn)
        .await?
        .flatten();
    Ok(progress)
}

/// A wave's hosts by where they stand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub hosts: u64,
    /// No job handed out yet (the wave has not begun, or the host has not checked in since).
    pub pending: u64,
    /// A job handed out without a result, or a reboot to come after its changes.
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Left the proposal (decommissioned, or no longer needing the change) before its job ran.
    pub left: u64,
}

/// The tallies of the proposal's waves (of `only` that wave, when given), in wave order: from
/// the counts of its jobs by kind and status. A host has at most one job applying the change
/// and, after it succeeded, at most one reboot.
pub async fn tallies<C: ConnectionTrait>(
    db: &C,
    proposal_id: Uuid,
    only: Option<i32>,
    waves: &[PlannedWave],
) -> Result<Vec<Tally>, DbErr> {
    let mut query = AllOrgs::rows::<host_jobs::Entity>()
        .select_only()
        .column(host_jobs::Column::Wave)
        .column(host_jobs::Column::Kind)
        .column(host_jobs::Column::Status)
        .column_as(host_jobs::Column::Id.count(), "n")
        .filter(host_jobs::Column::ProposalId.eq(proposal_id))
        .group_by(host_jobs::Column::Wave)
        .group_by(host_jobs::Column::Kind)
        .group_by(host_jobs::Column::Status);
    if let Some(wave) = only {
        query = query.filter(host_jobs::Column::Wave.eq(wave));
    }
    let counts: Vec<(Option<i32>, String, String, i64)> = query.into_tuple().all(db).await?;
    let indexes: Vec<usize> = match only {
        Some(w) => vec![usize::try_from(w).unwrap_or(0)],
        None => (0..waves.len()).collect(),
    };
    Ok(indexes
        .into_iter()
        .map(|w| {
            let count = |reboot: bool, statuses: &[HostJobStatus]| -> u64 {
                counts
                    .iter()
                    .filter(|(wave, kind, status, _)| {
                        wave.and_then(|x| usize::try_from(x).ok()) == Some(w)
                            && (JobKind::from(kind.as_str()) == JobKind::Reboot) == reboot
                            && statuses.contains(&HostJobStatus::from(status.as_str()))
                    })
                    .map(|(.., n)| u64::try_from(*n).unwrap_or(0))
                    .sum()
            };
            use HostJobStatus::*;
            let hosts = waves.get(w).map_or(0, |p| p.hosts);
            let applied = count(false, &[Pending, Dispatched, Succeeded, Failed, Cancelled]);
            let reboot_waiting = count(true, &[Pending, Dispatched]);
            let reboot_failed = count(true, &[Failed]);
            Tally {
                hosts,
                pending: hosts.saturating_sub(applied) + count(false, &[Pending]),
                running: count(false, &[Dispatched]) + reboot_waiting,
                succeeded: count(false, &[Succeeded])
                    .saturating_sub(reboot_waiting + reboot_failed),
                failed: count(false, &[Failed]) + reboot_failed,
                left: count(false, &[Cancelled]),
            }
        })
        .collect())
}

/// Why a halt or a resume is refused (409 `invalid-state`); `Display` is the detail a person
/// reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "Proposal #{number} is {status}: only a proposal that has gone ahead (approved, \
         scheduled or applying) has a rollout to halt or resume."
    )]
    NotGoingAhead { number: i64, status: ProposalStatus },
    #[error("Nothing to halt: the rollout is {0} already.")]
    NothingToHalt(RolloutState),
    #[error("Nothing to resume: the rollout is {0}, not halted.")]
    NotHalted(RolloutState),
}

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// The rollout row of a proposal that has gone ahead, taken; refused otherwise.
async fn going_ahead<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
) -> Result<proposal_rollouts::Model, RolloutError> {
    let status = ProposalStatus::of(proposal);
    let refused = || Refusal::NotGoingAhead {
        number: proposal.number,
        status: status.clone(),
    };
    if !status.is_in_flight() {
        return Err(refused().into());
    }
    Ok(lock(txn, proposal.id).await?.ok_or_else(refused)?)
}

/// Halts a rollout by hand, for `reason`: no new jobs; jobs already handed out finish and are
/// recorded. Refused when the proposal has not gone ahead, or the rollout is halted or done.
pub async fn halt<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    reason: &str,
    actor: Uuid,
    now: DateTime<Utc>,
) -> Result<proposal_rollouts::Model, RolloutError> {
    let row = going_ahead(txn, proposal).await?;
    let state = RolloutState::from(row.state.as_str());
    if matches!(state, RolloutState::Halted | RolloutState::Done) {
        return Err(Refusal::NothingToHalt(state).into());
    }
    halt_row(txn, proposal, &row, reason, Some(actor), now).await?;
    reread(txn, proposal.id).await
}

/// Resumes a halted rollout from the wave it halted in; failures so far are set aside (the
/// failure budget counts afresh, and the wave's success percentage no longer counts its
/// failures so far). Refused when it is not halted.
pub async fn resume<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    actor: Uuid,
    now: DateTime<Utc>,
) -> Result<proposal_rollouts::Model, RolloutError> {
    let row = going_ahead(txn, proposal).await?;
    let state = RolloutState::from(row.state.as_str());
    if state != RolloutState::Halted {
        return Err(Refusal::NotHalted(state).into());
    }
    let failed = failures(txn, &row).await?;
    let forgiven = row
        .failures_forgiven
        .saturating_add(i64::try_from(failed).unwrap_or(i64::MAX));
    let wave = row.begun.saturating_sub(1).max(0);
    let in_wave = if row.begun == 0 {
        0
    } else {
        AllOrgs::rows::<host_jobs::Entity>()
            .filter(host_jobs::Column::ProposalId.eq(proposal.id))
            .filter(host_jobs::Column::Wave.eq(wave))
            .filter(host_jobs::Column::Status.eq(HostJobStatus::Failed))
            .count(txn)
            .await?
    };
    let next = if row.begun == 0 {
        RolloutState::Waiting
    } else {
        RolloutState::Running
    };
    AllOrgs::update_rows::<proposal_rollouts::Entity>()
        .col_expr(proposal_rollouts::Column::State, Expr::value(next))
        .col_expr(
            proposal_rollouts::Column::FailuresForgiven,
            Expr::value(forgiven),
        )
        .col_expr(
            proposal_rollouts::Column::ForgivenWave,
            Expr::value(Some(wave)),
        )
        .col_expr(
            proposal_rollouts::Column::ForgivenInWave,
            Expr::value(i64::try_from(in_wave).unwrap_or(i64::MAX)),
        )
        .col_expr(proposal_rollouts::Column::UpdatedAt, Expr::value(now))
        .filter(proposal_rollouts::Column::ProposalId.eq(proposal.id))
        .exec(txn)
        .await?;
    record(
        txn,
        proposal,
        "proposal.resumed",
        Some(actor),
        serde_json::json!({ "wave": current_wave(&row), "failures_set_aside": failed }),
        now,
    )
    .await?;
    if row.begun == 0 {
        // Halted while it waited for its window: it goes out now if the window has opened.
        if ProposalStatus::of(proposal) != ProposalStatus::Scheduled {
            start(txn, proposal, now).await?;
        }
    } else {
        advance_locked(txn, proposal, now).await?;
    }
    reread(txn, proposal.id).await
}

async fn reread<C: ConnectionTrait>(
    txn: &C,
    proposal_id: Uuid,
) -> Result<proposal_rollouts::Model, RolloutError> {
    AllOrgs::row::<proposal_rollouts::Entity>(proposal_id)
        .one(txn)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("proposal rollout".into()).into())
}

/// A host left every proposal it had jobs in (it was decommissioned): its unfinished jobs are
/// withdrawn (`cancelled`, with `why` as their log), the reboot slot it held is freed, and each
/// of those proposals' rollouts is judged again (its wave may be done now).
pub async fn host_left<C: ConnectionTrait>(
    txn: &C,
    host_id: Uuid,
    why: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let proposals: Vec<Option<Uuid>> = AllOrgs::rows::<host_jobs::Entity>()
        .select_only()
        .column(host_jobs::Column::ProposalId)
        .filter(host_jobs::Column::HostId.eq(host_id))
        .filter(host_jobs::Column::Status.is_in(unfinished()))
        .into_tuple()
        .all(txn)
        .await?;
    AllOrgs::update_rows::<host_jobs::Entity>()
        .col_expr(
            host_jobs::Column::Status,
            Expr::value(HostJobStatus::Cancelled),
        )
        .col_expr(host_jobs::Column::Log, Expr::value(Some(why.to_owned())))
        .col_expr(host_jobs::Column::FinishedAt, Expr::value(Some(now)))
        .filter(host_jobs::Column::HostId.eq(host_id))
        .filter(host_jobs::Column::Status.is_in(unfinished()))
        .exec(txn)
        .await?;
    AllOrgs::update_rows::<hosts::Entity>()
        .col_expr(
            hosts::Column::RebootSlotUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(
            hosts::Column::RebootSlotJob,
            Expr::value(Option::<Uuid>::None),
        )
        .filter(hosts::Column::Id.eq(host_id))
        .filter(hosts::Column::RebootSlotUntil.is_not_null())
        .exec(txn)
        .await?;
    let mut seen = std::collections::BTreeSet::new();
    for proposal_id in proposals.into_iter().flatten() {
        if seen.insert(proposal_id) {
            advance(txn, proposal_id, now).await?;
        }
    }
    Ok(())
}

/// Rollouts whose soak ended or whose window opened by `now` (at most `limit`): the scheduler
/// queues a timers run while there are any.
pub async fn due<C: ConnectionTrait>(
    db: &C,
    now: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<Uuid>, DbErr> {
    AllOrgs::rows::<proposal_rollouts::Entity>()
        .select_only()
        .column(proposal_rollouts::Column::ProposalId)
        .filter(proposal_rollouts::Column::DueAt.lte(now))
        .filter(
            proposal_rollouts::Column::State.is_in([RolloutState::Soaking, RolloutState::Waiting]),
        )
        .limit(limit)
        .into_tuple()
        .all(db)
        .await
}

/// The rollout of a proposal as its detail shows it: the row and each wave's tally.
pub async fn view<C: ConnectionTrait>(
    db: &C,
    proposal_id: Uuid,
) -> Result<Option<(proposal_rollouts::Model, Vec<(PlannedWave, Tally)>)>, DbErr> {
    let Some(row) = AllOrgs::row::<proposal_rollouts::Entity>(proposal_id)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let waves = row.waves.read()?;
    let tallies = tallies(db, proposal_id, None, &waves).await?;
    Ok(Some((row, waves.into_iter().zip(tallies).collect())))
}
