//! What a policy's hosts need now, read from the database: the hosts its scope covers (none
//! when the scope cannot be read), their reported updates grouped into changes, less what a
//! proposal already going ahead carries; and which CVEs are known to be exploited.

use entities::scope::{AllOrgs, OrgScope, Untenanted};
use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use entities::{
    group_hosts, host_updates, hosts,
    json::{JsonText, Labels, OfferedUpgrade},
    known_exploited, policies, proposal_changes, proposal_hosts, proposals,
};
use platform::ids::PolicyId;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::{
    change_key::ChangeKey,
    grouping::{Coverage, Desired, Grouping, HostRelease, InFlight, Update},
    reported::{Reported, Reports},
    scope::Scope,
};
use crate::{proposals::host_jobs::positions, status::ProposalStatus};

/// Hosts read per query.
const HOST_CHUNK: usize = 500;

/// A host in scope, with what evaluation needs of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeHost {
    id: Uuid,
    /// `hosts.updates_seq`: where its updates stand.
    updates_seq: i64,
    release: HostRelease,
}

/// The live hosts of the policy's organization that its scope covers; none when the scope
/// cannot be read (logged).
pub async fn scope_hosts<C: ConnectionTrait>(
    db: &C,
    policy: &policies::Model,
) -> Result<Vec<ScopeHost>, DbErr> {
    let scope = match Scope::of(policy) {
        Ok(scope) => scope,
        Err(err) => {
            tracing::error!(
                policy_id = %PolicyId::from(policy.id),
                error = %err,
                "policy scope cannot be read: it covers no host until it is saved again"
            );
            return Ok(Vec::new());
        }
    };
    let mut query = OrgScope::of(policy.org_id)
        .rows::<hosts::Entity>()
        .select_only()
        .columns([
            hosts::Column::Id,
            hosts::Column::UpdatesSeq,
            hosts::Column::Labels,
            hosts::Column::Distro,
            hosts::Column::DistroVersion,
            hosts::Column::DistroCodename,
            hosts::Column::ReleaseUpgrade,
        ])
        .filter(hosts::Column::DecommissionedAt.is_null())
        .order_by_asc(hosts::Column::Id);
    if !scope.groups().is_empty() {
        query = query.filter(
            hosts::Column::Id.in_subquery(
                group_hosts::Entity::column_of(group_hosts::Column::HostId)
                    .and_where(group_hosts::Column::GroupId.is_in(scope.groups().to_vec()))
                    .to_owned(),
            ),
        );
    }
    type Row = (
        Uuid,
        i64,
        JsonText<Labels>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<JsonText<OfferedUpgrade>>,
    );
    let rows: Vec<Row> = query.into_tuple().all(db).await?;
    Ok(rows
        .into_iter()
        .filter(|(_, _, labels, ..)| scope.admits(labels))
        .map(
            |(id, updates_seq, _, distro, distro_version, distro_codename, release_upgrade)| {
                ScopeHost {
                    id,
                    updates_seq,
                    release: HostRelease {
                        distro,
                        distro_version,
                        distro_codename,
                        release_upgrade,
                    },
                }
            },
        )
        .collect())
}

/// The reported updates of `hosts`: those `reports` keeps at the hosts' current counts, the
/// rest read (and then kept). Hosts with nothing reported have an empty list.
pub async fn reported_updates<C: ConnectionTrait>(
    db: &C,
    hosts: &[ScopeHost],
    reports: &Reports,
) -> Result<Vec<(Uuid, Arc<[Arc<Reported>]>)>, DbErr> {
    let lookup = reports.lookup(hosts.iter().map(|h| (h.id, h.updates_seq)));
    let mut found: HashMap<Uuid, Arc<[Arc<Reported>]>> = lookup.found.into_iter().collect();
    for chunk in lookup.missing.chunks(HOST_CHUNK) {
        let ids: Vec<Uuid> = chunk.iter().map(|(id, _)| *id).collect();
        let rows: Vec<Update> = host_updates::Entity::rows()
            .select_only()
            .columns([
                host_updates::Column::HostId,
                host_updates::Column::Name,
                host_updates::Column::Ecosystem,
                host_updates::Column::FromVersion,
                host_updates::Column::ToVersion,
                host_updates::Column::SourceName,
                host_updates::Column::Security,
                host_updates::Column::Advisories,
                host_updates::Column::RequiresReboot,
                host_updates::Column::Impact,
            ])
            .filter(host_updates::Column::HostId.is_in(ids))
            .order_by_asc(host_updates::Column::HostId)
            .order_by_asc(host_updates::Column::Name)
            .order_by_asc(host_updates::Column::Arch)
            .into_model()
            .all(db)
            .await?;
        let mut by_host: HashMap<Uuid, Vec<Reported>> = HashMap::new();
        for row in rows {
            let (host, update) = row.split();
            by_host.entry(host).or_default().push(update);
        }
        for (host, seq) in chunk {
            let updates = by_host.remove(host).unwrap_or_default();
            found.insert(*host, reports.keep(*host, *seq, updates));
        }
    }
    Ok(hosts
        .iter()
        .filter_map(|h| found.remove(&h.id).map(|updates| (h.id, updates)))
        .collect())
}

/// What a policy's desired changes are computed from, besides its hosts' updates (which
/// their `updates_seq` stands for): its hosts in scope and what proposals going ahead carry.
#[derive(Debug)]
struct Basis {
    hosts: Vec<ScopeHost>,
    in_flight: InFlight,
}

async fn basis<C: ConnectionTrait>(
    db: &C,
    policy: &policies::Model,
    going: &[proposals::Model],
) -> Result<Basis, DbErr> {
    Ok(Basis {
        hosts: scope_hosts(db, policy).await?,
        in_flight: in_flight(db, going).await?,
    })
}

/// The desired changes of `policy` over `basis`, reading the updates `reports` does not keep.
/// The grouping is CPU work over every host's updates (hundreds of milliseconds at 10,000
/// hosts): the evaluation runs on a blocking thread for it ([`super::evaluate_policy`]).
async fn group<C: ConnectionTrait>(
    db: &C,
    policy: &policies::Model,
    basis: Basis,
    reports: &Reports,
) -> Result<Desired, DbErr> {
    let updates = reported_updates(db, &basis.hosts, reports).await?;
    let mut grouping = Grouping::new(Coverage::of(policy), &basis.in_flight);
    for host in &basis.hosts {
        grouping.host_distro(host.id, host.release.distro.as_deref());
    }
    for (host, updates) in &updates {
        grouping.add_host(*host, updates)?;
    }
    for host in &basis.hosts {
        grouping.add_release(host.id, &host.release)?;
    }
    Ok(grouping.finish())
}

/// What the policy's hosts need: their available updates that the policy covers, less what
/// `going` ([`going`], read on the same `db`) carry for them. Only the hosts whose updates
/// moved since `reports` kept them are read. A reported update or release offer that cannot be
/// read is an error (`DbErr::Json`): the policy is not evaluated until the host reports again.
pub async fn desired<C: ConnectionTrait>(
    db: &C,
    policy: &policies::Model,
    going: &[proposals::Model],
    reports: &Reports,
) -> Result<Desired, DbErr> {
    let basis = basis(db, policy, going).await?;
    group(db, policy, basis, reports).await
}

/// The policy's proposals going ahead, oldest first. What they carry for each host does not
/// change while they go ahead (only an undecided proposal follows its hosts), so these rows
/// stand for it.
pub async fn going<C: ConnectionTrait>(
    db: &C,
    policy_id: Uuid,
) -> Result<Vec<proposals::Model>, DbErr> {
    AllOrgs::rows::<proposals::Entity>()
        .filter(proposals::Column::PolicyId.eq(policy_id))
        .filter(proposals::Column::Status.is_in(ProposalStatus::IN_FLIGHT))
        .order_by_asc(proposals::Column::Number)
        .all(db)
        .await
}

/// What `going` carry, per host.
async fn in_flight<C: ConnectionTrait>(
    txn: &C,
    going: &[proposals::Model],
) -> Result<InFlight, DbErr> {
    let mut carried = InFlight::default();
    for proposal in going {
        let targets: Vec<(Uuid, JsonText<Vec<i32>>)> = proposal_hosts::Entity::rows()
            .select_only()
            .column(proposal_hosts::Column::HostId)
            .column(proposal_hosts::Column::Changes)
            .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
            .into_tuple()
            .all(txn)
            .await?;
        if let Some(key) = &proposal.release_key {
            carried
                .releases
                .extend(targets.into_iter().map(|(h, _)| (h, key.clone())));
            continue;
        }
        let by_position: HashMap<i32, proposal_changes::Model> = proposal_changes::Entity::rows()
            .filter(proposal_changes::Column::ProposalId.eq(proposal.id))
            .all(txn)
            .await?
            .into_iter()
            .map(|c| (c.position, c))
            .collect();
        for (host, list) in targets {
            for c in positions(proposal.id, host, &list)
                .iter()
                .filter_map(|p| by_position.get(p))
            {
                carried.changes.insert((
                    host,
                    c.package.clone(),
                    c.ecosystem.clone(),
                    c.to_version.clone(),
                ));
            }
        }
    }
    Ok(carried)
}

/// CVEs of the desired changes that are on the known-exploited catalogue.
pub async fn known_exploited_cves<C: ConnectionTrait>(
    txn: &C,
    desired: &Desired,
) -> Result<HashSet<String>, DbErr> {
    let cves: BTreeSet<&String> = desired
        .changes
        .iter()
        .flat_map(|c| c.advisories.values().flat_map(|a| a.cves.iter()))
        .collect();
    let mut found = HashSet::new();
    let cves: Vec<&String> = cves.into_iter().collect();
    for chunk in cves.chunks(500) {
        let rows: Vec<String> = known_exploited::Entity::rows()
            .select_only()
            .column(known_exploited::Column::Cve)
            .filter(known_exploited::Column::Cve.is_in(chunk.iter().map(|c| (*c).clone())))
            .into_tuple()
            .all(txn)
            .await?;
        found.extend(rows);
    }
    Ok(found)
}

pub fn key_of(c: &proposal_changes::Model) -> ChangeKey {
    ChangeKey {
        package: c.package.clone(),
        ecosystem: c.ecosystem.clone(),
        from_version: c.from_version.clone(),
        to_version: c.to_version.clone(),
    }
}
