//! Writes of an evaluation: opening a proposal, bringing one in line with what its hosts
//! need (only what differs is written), and the hosts of a release upgrade.

use entities::scope::Untenanted;
use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use entities::{
    json::{HostImpact, ImpactSummary, JsonText, ReleaseUpgrade, Unwritable},
    proposal_changes, proposal_hosts, proposal_impacts, proposals,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, Set,
    sea_query::OnConflict,
};
use uuid::Uuid;

use super::{
    change_key::ChangeKey,
    grouping::{Change, Desired},
    plan::{HostDiff, StoredHost, diff_changes, diff_hosts, encode},
    rules::Rules,
    summary::Summary,
};
use crate::{
    proposals::{go_ahead, next_number, record},
    status::{ProposalKind, ProposalStatus},
};

/// Rows written per statement.
const WRITE_CHUNK: usize = 200;

/// A release upgrade to open a proposal for: its key, what it is, its hosts.
pub type ReleaseToOpen<'a> = (&'a str, &'a ReleaseUpgrade, &'a BTreeSet<Uuid>);

/// Opens a proposal for `desired` (a package proposal) or `release`. Under rules that need
/// no approval it goes ahead at once.
pub async fn open(
    txn: &DatabaseTransaction,
    rules: &Rules,
    desired: &Desired,
    summary: &Summary,
    release: Option<ReleaseToOpen<'_>>,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DbErr> {
    let number = next_number(txn, rules.org_id).await?;
    let proposal = proposals::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(rules.org_id),
        number: Set(number),
        policy_id: Set(Some(rules.policy_id)),
        policy_name: Set(Some(rules.name.clone())),
        policy_version: Set(Some(rules.version)),
        release_key: Set(release.map(|(key, ..)| key.to_owned())),
        kind: Set(summary.kind.clone().into()),
        status: Set(ProposalStatus::Open.to_string()),
        title: Set(summary.title.clone()),
        required: Set(rules.required),
        approvals: Set(0),
        apply: Set(rules.apply.clone()),
        window: Set(rules.window.clone()),
        reboot: Set(rules.reboot.clone()),
        auto_merge: Set(rules.auto_merge),
        known_exploited: Set(summary.known_exploited),
        max_severity: Set(summary.max_severity.clone()),
        hosts: Set(summary.hosts),
        packages: Set(summary.packages),
        release_upgrade: Set(release
            .map(|(_, what, _)| JsonText::new(what))
            .transpose()?),
        created_at: Set(now),
        updated_at: Set(now),
        closed_at: Set(None),
        scheduled_for: Set(None),
        snoozed_until: Set(None),
        superseded_by: Set(None),
        rollout: Set(rules.rollout.clone()),
    }
    .insert(txn)
    .await?;
    match release {
        Some((_, _, hosts)) => {
            let rows = hosts.iter().map(|h| host_row(proposal.id, *h, &[], None));
            insert_hosts(txn, rows.collect::<Result<_, _>>()?).await?;
        }
        None => {
            let rows: Vec<proposal_changes::ActiveModel> = desired
                .keys
                .iter()
                .zip(&desired.changes)
                .enumerate()
                .map(|(i, (key, change))| {
                    change_row(
                        proposal.id,
                        i32::try_from(i).unwrap_or(i32::MAX),
                        key,
                        change,
                    )
                })
                .collect::<Result<_, _>>()?;
            for chunk in rows.chunks(WRITE_CHUNK) {
                proposal_changes::Entity::insert_many(chunk.to_vec())
                    .exec(txn)
                    .await?;
            }
            let rows = desired.hosts.iter().map(|(host, list)| {
                host_row(
                    proposal.id,
                    *host,
                    &encode(list.iter().map(|i| *i as i32)),
                    desired.impacts.get(host).map(|kept| kept.text.clone()),
                )
            });
            insert_hosts(txn, rows.collect::<Result<_, _>>()?).await?;
        }
    }
    if let Some(impact) = &summary.impact {
        write_impact(txn, proposal.id, impact).await?;
    }
    record(
        txn,
        &proposal,
        "proposal.opened",
        None,
        serde_json::json!({"number": proposal.number, "hosts": proposal.hosts}),
        now,
    )
    .await?;
    if proposal.required <= 0 {
        return go_ahead(txn, proposal, None, now).await;
    }
    Ok(proposal)
}

fn change_row(
    proposal_id: Uuid,
    position: i32,
    key: &ChangeKey,
    change: &Change,
) -> Result<proposal_changes::ActiveModel, Unwritable> {
    Ok(proposal_changes::ActiveModel {
        proposal_id: Set(proposal_id),
        position: Set(position),
        package: Set(key.package.clone()),
        ecosystem: Set(key.ecosystem.clone()),
        from_version: Set(key.from_version.clone()),
        to_version: Set(key.to_version.clone()),
        source_name: Set(change.source_name.clone()),
        distro: Set(change.distro.clone()),
        hosts: Set(change.hosts),
        advisories: Set(JsonText::new(&change.advisory_list())?),
    })
}

fn host_row(
    proposal_id: Uuid,
    host_id: Uuid,
    changes: &[i32],
    impact: Option<JsonText<HostImpact>>,
) -> Result<proposal_hosts::ActiveModel, Unwritable> {
    Ok(proposal_hosts::ActiveModel {
        proposal_id: Set(proposal_id),
        host_id: Set(host_id),
        changes: Set(JsonText::new(&changes.to_vec())?),
        impact: Set(impact),
        wave: Set(None),
    })
}

/// Writes (or rewrites) the proposal's impact summary.
async fn write_impact(
    txn: &DatabaseTransaction,
    proposal_id: Uuid,
    impact: &ImpactSummary,
) -> Result<(), DbErr> {
    proposal_impacts::Entity::insert(proposal_impacts::ActiveModel {
        proposal_id: Set(proposal_id),
        summary: Set(JsonText::new(impact)?),
    })
    .on_conflict(
        OnConflict::column(proposal_impacts::Column::ProposalId)
            .update_column(proposal_impacts::Column::Summary)
            .to_owned(),
    )
    .exec(txn)
    .await?;
    Ok(())
}

async fn insert_hosts(
    txn: &DatabaseTransaction,
    rows: Vec<proposal_hosts::ActiveModel>,
) -> Result<(), DbErr> {
    for chunk in rows.chunks(WRITE_CHUNK) {
        proposal_hosts::Entity::insert_many(chunk.to_vec())
            .exec(txn)
            .await?;
    }
    Ok(())
}

async fn remove_hosts(
    txn: &DatabaseTransaction,
    proposal_id: Uuid,
    hosts: &[Uuid],
) -> Result<(), DbErr> {
    for chunk in hosts.chunks(WRITE_CHUNK) {
        proposal_hosts::Entity::delete_rows()
            .filter(proposal_hosts::Column::ProposalId.eq(proposal_id))
            .filter(proposal_hosts::Column::HostId.is_in(chunk.to_vec()))
            .exec(txn)
            .await?;
    }
    Ok(())
}

/// What bringing an undecided package proposal in line with `desired` (following it, or
/// merging new updates into it) writes: only what differs. Worked out from what the proposal
/// stores ([`Update::plan`]), written by [`Update::write`]; one that is
/// [empty](Update::is_empty) writes nothing.
#[derive(Debug)]
pub struct Update {
    current: proposals::Model,
    /// Kept changes whose counts, advisories or source differ.
    rewritten: Vec<proposal_changes::ActiveModel>,
    /// Positions of changes that leave.
    removed: Vec<i32>,
    added: Vec<proposal_changes::ActiveModel>,
    hosts: HostDiff,
    summary: Summary,
    /// The impact summary as stored; `None` when there is none or it cannot be read.
    stored_impact: Option<Box<ImpactSummary>>,
}

impl Update {
    /// `existing`, `stored_hosts` and `stored_impact` are what the proposal stores (its
    /// changes; each host's change list and impact; its impact summary).
    pub fn plan(
        current: proposals::Model,
        existing: Vec<proposal_changes::Model>,
        stored_hosts: HashMap<Uuid, StoredHost>,
        stored_impact: Option<ImpactSummary>,
        desired: &Desired,
        summary: Summary,
    ) -> Result<Update, Unwritable> {
        let stored: Vec<(i32, ChangeKey)> = existing
            .iter()
            .map(|c| (c.position, super::needs::key_of(c)))
            .collect();
        let changes = diff_changes(&stored, desired);
        let mut rows: HashMap<i32, proposal_changes::Model> =
            existing.into_iter().map(|c| (c.position, c)).collect();
        let mut rewritten = Vec::new();
        for (position, i) in &changes.kept {
            let (Some(row), Some((_, change))) = (rows.remove(position), desired.change(*i)) else {
                continue;
            };
            let advisories = change.advisory_list();
            // Compared by meaning, not text; a stored list that cannot be read is written again.
            if row.hosts != change.hosts
                || row.advisories.read().ok().as_ref() != Some(&advisories)
                || row.source_name != change.source_name
                || row.distro != change.distro
            {
                let mut active: proposal_changes::ActiveModel = row.into();
                active.hosts = Set(change.hosts);
                active.advisories = Set(JsonText::new(&advisories)?);
                active.source_name = Set(change.source_name.clone());
                active.distro = Set(change.distro.clone());
                rewritten.push(active);
            }
        }
        let added = changes
            .added
            .iter()
            .filter_map(|(position, i)| {
                let (key, change) = desired.change(*i)?;
                Some(change_row(current.id, *position, key, change))
            })
            .collect::<Result<_, _>>()?;
        let hosts = diff_hosts(stored_hosts, desired, &changes.positions);
        Ok(Update {
            current,
            rewritten,
            removed: changes.removed,
            added,
            hosts,
            summary,
            stored_impact: stored_impact.map(Box::new),
        })
    }

    fn touches_rows(&self) -> bool {
        !(self.rewritten.is_empty()
            && self.removed.is_empty()
            && self.added.is_empty()
            && self.hosts == HostDiff::default())
    }

    fn same_summary(&self) -> bool {
        let (current, summary) = (&self.current, &self.summary);
        ProposalKind::from(current.kind.as_str()) == summary.kind
            && current.title == summary.title
            && current.hosts == summary.hosts
            && current.packages == summary.packages
            && current.max_severity == summary.max_severity
            && current.known_exploited == summary.known_exploited
            && self.stored_impact == summary.impact
    }

    /// Whether the proposal already is what `desired` asks.
    pub fn is_empty(&self) -> bool {
        !self.touches_rows() && self.same_summary()
    }

    pub async fn write(self, txn: &DatabaseTransaction, now: DateTime<Utc>) -> Result<(), DbErr> {
        if self.is_empty() {
            return Ok(());
        }
        let id = self.current.id;
        for row in self.rewritten {
            row.update(txn).await?;
        }
        for chunk in self.removed.chunks(WRITE_CHUNK) {
            proposal_changes::Entity::delete_rows()
                .filter(proposal_changes::Column::ProposalId.eq(id))
                .filter(proposal_changes::Column::Position.is_in(chunk.to_vec()))
                .exec(txn)
                .await?;
        }
        for chunk in self.added.chunks(WRITE_CHUNK) {
            proposal_changes::Entity::insert_many(chunk.to_vec())
                .exec(txn)
                .await?;
        }
        let HostDiff {
            added,
            changed,
            removed,
        } = self.hosts;
        if !changed.is_empty() {
            // Rewritten a chunk at a time (a delete and an insert), not a statement per host.
            let ids: Vec<Uuid> = changed.iter().map(|(host, ..)| *host).collect();
            remove_hosts(txn, id, &ids).await?;
            let rows = changed
                .into_iter()
                .map(|(host, list, impact)| host_row(id, host, &list, impact));
            insert_hosts(txn, rows.collect::<Result<_, _>>()?).await?;
        }
        if !added.is_empty() {
            let rows = added
                .into_iter()
                .map(|(host, list, impact)| host_row(id, host, &list, impact));
            insert_hosts(txn, rows.collect::<Result<_, _>>()?).await?;
        }
        remove_hosts(txn, id, &removed).await?;

        let summary = self.summary;
        if let Some(impact) = summary.impact.as_deref()
            && self.stored_impact.as_deref() != Some(impact)
        {
            write_impact(txn, id, impact).await?;
        }
        let mut active: proposals::ActiveModel = self.current.into();
        active.kind = Set(summary.kind.clone().into());
        active.title = Set(summary.title);
        active.hosts = Set(summary.hosts);
        active.packages = Set(summary.packages);
        active.max_severity = Set(summary.max_severity);
        active.known_exploited = Set(summary.known_exploited);
        active.updated_at = Set(now);
        active.update(txn).await?;
        Ok(())
    }
}

/// A release upgrade proposal follows the hosts that are offered its upgrade: what joins and
/// what leaves, worked out from its stored hosts.
#[derive(Debug)]
pub struct ReleaseHosts {
    proposal: proposals::Model,
    added: Vec<Uuid>,
    left: Vec<Uuid>,
    count: i64,
}

impl ReleaseHosts {
    pub fn plan(
        proposal: proposals::Model,
        stored: &BTreeSet<Uuid>,
        hosts: &BTreeSet<Uuid>,
    ) -> ReleaseHosts {
        ReleaseHosts {
            proposal,
            added: hosts.difference(stored).copied().collect(),
            left: stored.difference(hosts).copied().collect(),
            count: i64::try_from(hosts.len()).unwrap_or(i64::MAX),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.left.is_empty()
    }

    pub async fn write(self, txn: &DatabaseTransaction, now: DateTime<Utc>) -> Result<(), DbErr> {
        if self.is_empty() {
            return Ok(());
        }
        let id = self.proposal.id;
        let added: Vec<_> = self
            .added
            .iter()
            .map(|h| host_row(id, *h, &[], None))
            .collect::<Result<_, _>>()?;
        insert_hosts(txn, added).await?;
        remove_hosts(txn, id, &self.left).await?;
        let mut active: proposals::ActiveModel = self.proposal.into();
        active.hosts = Set(self.count);
        active.updated_at = Set(now);
        active.update(txn).await?;
        Ok(())
    }
}
