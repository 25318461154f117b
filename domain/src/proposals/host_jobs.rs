//! The host jobs an approved proposal hands to agents: one per host of a wave as the wave
//! begins, carrying that host's own changes, and never asking for a reboot the host's agent
//! does not permit or a window that cannot be read. A host decommissioned by then gets its job
//! `cancelled` at once: it left the proposal.

use entities::scope::{AllOrgs, Untenanted};
use std::collections::{HashMap, HashSet};

use crate::window::WindowSpec;
use chrono::{DateTime, Utc};
use entities::{
    host_jobs, hosts,
    json::{JobChange, JobPayload, JsonText},
    proposal_changes, proposal_hosts, proposals,
};
use platform::ids::{HostId, ProposalId};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};
use uuid::Uuid;

use crate::{
    status::{HostJobStatus, JobKind, ProposalKind, Reboot},
    window,
};

const JOB_CHUNK: usize = 500;

/// `SELECT host_id FROM proposal_hosts WHERE proposal_id = …`, to filter hosts by.
pub fn hosts_of(proposal_id: Uuid) -> sea_orm::sea_query::SelectStatement {
    proposal_hosts::Entity::column_of(proposal_hosts::Column::HostId)
        .and_where(proposal_hosts::Column::ProposalId.eq(proposal_id))
        .to_owned()
}

/// The change positions a `proposal_hosts.changes` column lists. The column is written only
/// by evaluation; should it not read, the host is given no change (and the fact is logged),
/// never another host's. Preflight fails such a host before approval.
pub fn positions(proposal_id: Uuid, host_id: Uuid, column: &JsonText<Vec<i32>>) -> Vec<i32> {
    column.read().unwrap_or_else(|err| {
        tracing::error!(
            proposal_id = %ProposalId::from(proposal_id),
            host_id = %HostId::from(host_id),
            error = %err,
            "a proposal host's change list cannot be read"
        );
        Vec::new()
    })
}

/// The reboot a job asks for and the window it names. A reboot that waits for the window
/// becomes `never` when the window cannot be read: the agent must not pick an hour itself.
fn reboot_and_window(proposal: &proposals::Model) -> (String, Option<WindowSpec>) {
    if Reboot::from(proposal.reboot.as_str()) != Reboot::InWindow {
        return (proposal.reboot.clone(), None);
    }
    match window::of_proposal(proposal.window.as_ref()) {
        Ok(Some(w)) => (proposal.reboot.clone(), Some(w.rule)),
        Ok(None) => (proposal.reboot.clone(), None),
        Err(err) => {
            tracing::error!(
                proposal_id = %ProposalId::from(proposal.id),
                error = %err,
                "maintenance window cannot be read: the proposal's jobs do not reboot"
            );
            (Reboot::Never.into(), None)
        }
    }
}

/// The kind of a job that applies `proposal`'s changes.
pub fn apply_kind(proposal: &proposals::Model) -> JobKind {
    if ProposalKind::from(proposal.kind.as_str()) == ProposalKind::DistUpgrade {
        JobKind::DistUpgrade
    } else {
        JobKind::ApplyUpdates
    }
}

/// One `pending` job per host of wave `wave` of the proposal, carrying that host's own
/// changes (`cancelled` for a host decommissioned by now). Returns how many jobs are pending.
pub async fn create_jobs<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    wave: i32,
    now: DateTime<Utc>,
) -> Result<u64, DbErr> {
    let changes: HashMap<i32, JobChange> = proposal_changes::Entity::rows()
        .filter(proposal_changes::Column::ProposalId.eq(proposal.id))
        .all(txn)
        .await?
        .into_iter()
        .map(|c| {
            (
                c.position,
                JobChange {
                    package: c.package,
                    ecosystem: c.ecosystem,
                    from_version: c.from_version,
                    to_version: c.to_version,
                },
            )
        })
        .collect();
    let targets: Vec<(Uuid, JsonText<Vec<i32>>)> = proposal_hosts::Entity::rows()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .column(proposal_hosts::Column::Changes)
        .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
        .filter(proposal_hosts::Column::Wave.eq(wave))
        .order_by_asc(proposal_hosts::Column::HostId)
        .into_tuple()
        .all(txn)
        .await?;
    if targets.is_empty() {
        return Ok(0);
    }
    let (reboot, window) = reboot_and_window(proposal);
    let release_upgrade = proposal
        .release_upgrade
        .as_ref()
        .map(JsonText::read)
        .transpose()?;
    // The agent's permissions are a ceiling: a job never asks for a reboot the host's own
    // configuration does not permit (an agent too old to report permissions is asked as is;
    // permissions that cannot be read permit no reboot).
    let wave_hosts = proposal_hosts::Entity::column_of(proposal_hosts::Column::HostId)
        .and_where(proposal_hosts::Column::ProposalId.eq(proposal.id))
        .and_where(proposal_hosts::Column::Wave.eq(wave))
        .to_owned();
    /// A host's agent permissions and when it was decommissioned.
    type Facts = (Uuid, Option<JsonText<Vec<String>>>, Option<DateTime<Utc>>);
    let facts: Vec<Facts> = AllOrgs::rows::<hosts::Entity>()
        .select_only()
        .column(hosts::Column::Id)
        .column(hosts::Column::AgentPermissions)
        .column(hosts::Column::DecommissionedAt)
        .filter(hosts::Column::Id.in_subquery(wave_hosts))
        .into_tuple()
        .all(txn)
        .await?;
    let gone: HashSet<Uuid> = facts
        .iter()
        .filter(|(_, _, decommissioned)| decommissioned.is_some())
        .map(|(id, ..)| *id)
        .collect();
    let may_not_reboot: HashSet<Uuid> = facts
        .into_iter()
        .filter_map(|(id, permissions, _)| {
            let permitted = permissions?.read().map_or_else(
                |err| {
                    tracing::error!(
                        host_id = %HostId::from(id),
                        error = %err,
                        "a host's agent permissions cannot be read: its job does not reboot"
                    );
                    false
                },
                |list| list.iter().any(|p| p == "reboot"),
            );
            (!permitted).then_some(id)
        })
        .collect();
    let mut rows = Vec::with_capacity(targets.len());
    let mut pending = 0;
    for (host_id, list) in targets {
        let left = gone.contains(&host_id);
        pending += u64::from(!left);
        let payload = JobPayload {
            proposal_id: ProposalId::from(proposal.id).to_string(),
            proposal_number: proposal.number,
            kind: proposal.kind.clone(),
            reboot: if may_not_reboot.contains(&host_id) {
                Reboot::Never.into()
            } else {
                reboot.clone()
            },
            changes: positions(proposal.id, host_id, &list)
                .iter()
                .filter_map(|p| changes.get(p).cloned())
                .collect(),
            release_upgrade: release_upgrade.clone(),
            window: window.clone(),
            deferred_reboot: None,
        };
        rows.push(host_jobs::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(proposal.org_id),
            host_id: Set(host_id),
            proposal_id: Set(Some(proposal.id)),
            kind: Set(apply_kind(proposal).into()),
            payload: Set(JsonText::new(&payload)?),
            status: Set(if left {
                HostJobStatus::Cancelled.to_string()
            } else {
                HostJobStatus::Pending.to_string()
            }),
            log: Set(left.then(|| LEFT_DECOMMISSIONED.to_owned())),
            rebooted: Set(None),
            created_at: Set(now),
            dispatched_at: Set(None),
            finished_at: Set(left.then_some(now)),
            wave: Set(Some(wave)),
        });
    }
    for chunk in rows.chunks(JOB_CHUNK) {
        host_jobs::Entity::insert_many(chunk.to_vec())
            .exec(txn)
            .await?;
    }
    Ok(pending)
}

/// The log of a job withdrawn because its host was decommissioned.
pub const LEFT_DECOMMISSIONED: &str =
    "withdrawn before it ran: the host was decommissioned, so it left the proposal";
/// The log of a job withdrawn because its host no longer needs the change.
pub const LEFT_NOT_NEEDED: &str = "withdrawn before it ran: the host no longer reports any of \
     these packages as upgradable (or the release upgrade as offered), so it left the proposal";
