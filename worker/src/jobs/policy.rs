//! `policy.evaluate`: turn the available updates of a policy's hosts into proposals, and
//! `proposal.timers`: open windows and end snoozes.
//!
//! A policy has at most one undecided (open or snoozed) package proposal and one per release
//! upgrade it offers. Evaluation computes what the policy's hosts need now (leaving out what a
//! proposal that is already going ahead carries) and brings that proposal in line:
//!
//! - nothing needed: the proposal closes (`closed`, nothing outstanding);
//! - nothing new (every needed package and target version is already in it): hosts join and
//!   leave it, its changes and counts follow, it stays undecided;
//! - new updates with `auto_merge`: the proposal absorbs them;
//! - new updates without: a new proposal opens with everything needed, which covers the old
//!   one's packages, so the old one is `superseded` by it.
//!
//! Changes are grouped by package, ecosystem and both versions, so a fleet on two starting
//! versions of a package gives two changes. Evaluating the same inventory twice writes nothing.
//! The whole run is one write transaction that first locks the policy (and its undecided
//! proposals), so two runs of one policy, or a run and a decision, never interleave.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use apalis::prelude::{BoxDynError, Data};
use chrono::{DateTime, Utc};
use entities::{
    group_hosts, host_updates, hosts, known_exploited, policies, policy_dirty, proposal_changes,
    proposal_hosts, proposals,
};
use platform::{
    config::DatabaseKind,
    jobs::{EvaluatePolicy, ProposalTimers},
    selector::Selector,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    Deps,
    proposals::{self as p, CLOSED, IN_FLIGHT, OPEN, SNOOZED, SUPERSEDED, StoredWindow, UNDECIDED},
};

/// Hosts read per query.
const HOST_CHUNK: usize = 500;
/// Rows written per statement.
const WRITE_CHUNK: usize = 200;

/// An advisory as agents report it and proposals show it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Advisory {
    pub external_id: String,
    pub source: String,
    #[serde(default)]
    pub severity: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub cves: Vec<String>,
}

/// What makes two changes the same change.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeKey {
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
}

impl ChangeKey {
    /// The update itself, whatever version a host starts from.
    fn target(&self) -> (&str, &str, &str) {
        (&self.package, &self.ecosystem, &self.to_version)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Change {
    hosts: i64,
    source_name: Option<String>,
    /// By (source, external id).
    advisories: BTreeMap<(String, String), Advisory>,
}

impl Change {
    fn advisories_json(&self) -> String {
        let list: Vec<&Advisory> = self.advisories.values().collect();
        serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
    }

    fn max_rank(&self) -> Option<u8> {
        self.advisories
            .values()
            .filter_map(|a| a.severity.as_deref().and_then(p::severity_rank))
            .max()
    }
}

/// What a policy's hosts need now.
#[derive(Default)]
struct Desired {
    keys: Vec<ChangeKey>,
    index: HashMap<ChangeKey, u32>,
    changes: Vec<Change>,
    /// Host → indexes into `keys`, ascending.
    hosts: BTreeMap<Uuid, Vec<u32>>,
    /// Release upgrades: `distro/from/to` → (what it is, hosts).
    releases: BTreeMap<String, (serde_json::Value, BTreeSet<Uuid>)>,
}

impl Desired {
    fn intern(&mut self, key: ChangeKey) -> u32 {
        if let Some(i) = self.index.get(&key) {
            return *i;
        }
        let i = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
        self.index.insert(key.clone(), i);
        self.keys.push(key);
        self.changes.push(Change::default());
        i
    }
}

/// A host in scope, with what evaluation needs of it.
struct ScopeHost {
    id: Uuid,
    distro: Option<String>,
    distro_version: Option<String>,
    distro_codename: Option<String>,
    release_upgrade: Option<String>,
}

pub async fn evaluate(job: EvaluatePolicy, deps: Data<Deps>) -> Result<(), BoxDynError> {
    if evaluate_policy(&deps, job.policy_id).await? == Evaluated::Busy {
        // Another run holds the policy: come back once it is likely done. The mark stays, so
        // host changes meanwhile queue nothing more; this one job carries them all.
        platform::jobs::Queue::new(&deps.db)
            .push_after(job, RETRY_WHEN_BUSY)
            .await?;
    }
    Ok(())
}

/// How long a run that found its policy busy waits before trying again.
const RETRY_WHEN_BUSY: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether an evaluation ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluated {
    Done,
    /// Another evaluation of the policy is running (Postgres); nothing was read or written.
    Busy,
}

/// One evaluation of `policy_id` (what the job runs).
///
/// On Postgres a transaction-scoped advisory lock keyed by the policy admits one run at a
/// time; a run that finds it taken gives up at once (`Busy`) instead of waiting with a
/// connection held, so a burst of host changes costs one running and one waiting evaluation
/// per policy. The dirty mark is claimed only once the lock is held. On SQLite the write
/// transaction is the lock.
pub async fn evaluate_policy(deps: &Deps, policy_id: Uuid) -> Result<Evaluated, DbErr> {
    let postgres = deps.db.kind() == DatabaseKind::Postgres;
    if !postgres {
        policy_dirty::Entity::delete_by_id(policy_id)
            .exec(&deps.db.orm)
            .await?;
    }
    let now = deps.clock.now();
    let txn = deps.db.begin_write().await?;
    if postgres {
        let key = i64::from_be_bytes(policy_id.as_bytes()[8..16].try_into().unwrap_or([0; 8]));
        let locked = txn
            .query_one_raw(sea_orm::Statement::from_sql_and_values(
                sea_orm::DatabaseBackend::Postgres,
                "SELECT pg_try_advisory_xact_lock($1) AS locked",
                [key.into()],
            ))
            .await?
            .map(|row| row.try_get::<bool>("", "locked"))
            .transpose()?
            .unwrap_or(false);
        if !locked {
            return Ok(Evaluated::Busy);
        }
        // Claimed outside this transaction, so marking stays a non-blocking insert.
        policy_dirty::Entity::delete_by_id(policy_id)
            .exec(&deps.db.orm)
            .await?;
    }
    let Some(policy) = policies::Entity::find_by_id(policy_id).one(&txn).await? else {
        return Ok(Evaluated::Done); // Deleted: its proposals were closed with it.
    };
    let mut undecided = proposals::Entity::find()
        .filter(proposals::Column::PolicyId.eq(policy.id))
        .filter(proposals::Column::Status.is_in(UNDECIDED))
        .order_by_asc(proposals::Column::Number);
    if postgres {
        undecided = undecided.lock_exclusive();
    }
    let undecided = undecided.all(&txn).await?;
    let desired = desired(&txn, &policy).await?;
    let kev = known_exploited_cves(&txn, &desired).await?;

    let (packages, releases): (Vec<_>, Vec<_>) =
        undecided.into_iter().partition(|p| p.release_key.is_none());
    let mut packages = packages.into_iter();
    let current = packages.next();
    // Only one undecided package proposal is kept; should an older one linger, it closes.
    for stale in packages {
        close(&txn, stale, now).await?;
    }
    let rules = Rules::of(&policy);
    reconcile_packages(&txn, &rules, current, &desired, &kev, now).await?;
    reconcile_releases(&txn, &rules, releases, &desired, now).await?;
    txn.commit().await?;
    Ok(Evaluated::Done)
}

/// The rules a new proposal is opened under, copied from the policy.
struct Rules {
    org_id: Uuid,
    policy_id: Uuid,
    name: String,
    version: i32,
    required: i32,
    apply: String,
    window: Option<String>,
    reboot: String,
    auto_merge: bool,
}

impl Rules {
    fn of(policy: &policies::Model) -> Rules {
        let window = policy.window.as_deref().and_then(|text| {
            #[derive(Deserialize)]
            struct Spec {
                rrule: String,
                duration_minutes: u32,
                time_zone: String,
            }
            let spec: Spec = serde_json::from_str(text).ok()?;
            serde_json::to_string(&StoredWindow {
                rrule: spec.rrule,
                duration_minutes: spec.duration_minutes,
                time_zone: spec.time_zone,
                created: policy.created_at,
            })
            .ok()
        });
        Rules {
            org_id: policy.org_id,
            policy_id: policy.id,
            name: policy.name.clone(),
            version: policy.version,
            required: policy.required_approvals,
            apply: policy.apply.clone(),
            window,
            reboot: policy.reboot.clone(),
            auto_merge: policy.auto_merge,
        }
    }
}

/// The hosts a policy covers: live hosts of its organization that are in one of its groups
/// (any host when it names none) and match its selector (when it has one).
async fn scope(
    txn: &DatabaseTransaction,
    policy: &policies::Model,
) -> Result<Vec<ScopeHost>, DbErr> {
    let groups: Vec<Uuid> = serde_json::from_str(&policy.scope_groups).unwrap_or_default();
    let selector = policy
        .selector
        .as_deref()
        .and_then(|s| Selector::parse(s).ok());
    let mut query = hosts::Entity::find()
        .select_only()
        .columns([
            hosts::Column::Id,
            hosts::Column::Labels,
            hosts::Column::Distro,
            hosts::Column::DistroVersion,
            hosts::Column::DistroCodename,
            hosts::Column::ReleaseUpgrade,
        ])
        .filter(hosts::Column::OrgId.eq(policy.org_id))
        .filter(hosts::Column::DecommissionedAt.is_null())
        .order_by_asc(hosts::Column::Id);
    if !groups.is_empty() {
        query = query.filter(
            hosts::Column::Id.in_subquery(
                sea_orm::sea_query::Query::select()
                    .column(group_hosts::Column::HostId)
                    .from(group_hosts::Entity)
                    .and_where(group_hosts::Column::GroupId.is_in(groups))
                    .to_owned(),
            ),
        );
    }
    type Row = (
        Uuid,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Row> = query.into_tuple().all(txn).await?;
    Ok(rows
        .into_iter()
        .filter(|(_, labels, ..)| match &selector {
            Some(selector) => {
                let labels: BTreeMap<String, String> =
                    serde_json::from_str(labels).unwrap_or_default();
                selector.matches(&labels)
            }
            None => true,
        })
        .map(
            |(id, _, distro, distro_version, distro_codename, release_upgrade)| ScopeHost {
                id,
                distro,
                distro_version,
                distro_codename,
                release_upgrade,
            },
        )
        .collect())
}

/// What the policy's hosts need: their available updates that the policy covers, less what a
/// proposal already going ahead carries for them.
async fn desired(txn: &DatabaseTransaction, policy: &policies::Model) -> Result<Desired, DbErr> {
    let hosts = scope(txn, policy).await?;
    let (in_flight, in_flight_releases) = in_flight(txn, policy.id).await?;
    let security_only = policy.updates == "security";
    let min_rank = policy.min_severity.as_deref().and_then(p::severity_rank);
    let mut desired = Desired::default();
    // The advisories text last parsed for each change: hosts report the same text.
    let mut parsed: HashMap<u32, String> = HashMap::new();

    type Row = (
        Uuid,
        String,
        String,
        String,
        String,
        Option<String>,
        bool,
        String,
    );
    for chunk in hosts.chunks(HOST_CHUNK) {
        let ids: Vec<Uuid> = chunk.iter().map(|h| h.id).collect();
        let rows: Vec<Row> = host_updates::Entity::find()
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
            ])
            .filter(host_updates::Column::HostId.is_in(ids))
            .into_tuple()
            .all(txn)
            .await?;
        for (
            host_id,
            package,
            ecosystem,
            from_version,
            to_version,
            source_name,
            security,
            advisories_text,
        ) in rows
        {
            if !in_flight.is_empty()
                && in_flight.contains(&(
                    host_id,
                    package.clone(),
                    ecosystem.clone(),
                    to_version.clone(),
                ))
            {
                continue;
            }
            // Hosts report the same advisory text for the same update: parse it only when a
            // filter needs it or the change has not seen this text yet.
            let unrated = advisories_text.trim() == "[]";
            if security_only && !security && unrated {
                continue;
            }
            if let Some(min) = min_rank {
                let advisories: Vec<Advisory> =
                    serde_json::from_str(&advisories_text).unwrap_or_default();
                let rank = advisories
                    .iter()
                    .filter_map(|a| a.severity.as_deref().and_then(p::severity_rank))
                    .max();
                if rank.is_none_or(|r| r < min) {
                    continue;
                }
            }
            let i = desired.intern(ChangeKey {
                package,
                ecosystem,
                from_version,
                to_version,
            });
            let list = desired.hosts.entry(host_id).or_default();
            if list.last() == Some(&i) || list.contains(&i) {
                continue; // The same change for two architectures of one host.
            }
            list.push(i);
            let change = &mut desired.changes[i as usize];
            change.hosts += 1;
            if change.source_name.is_none() {
                change.source_name = source_name;
            }
            if !unrated && parsed.get(&i) != Some(&advisories_text) {
                let advisories: Vec<Advisory> =
                    serde_json::from_str(&advisories_text).unwrap_or_default();
                for advisory in advisories {
                    change
                        .advisories
                        .entry((advisory.source.clone(), advisory.external_id.clone()))
                        .or_insert(advisory);
                }
                parsed.insert(i, advisories_text);
            }
        }
    }
    for list in desired.hosts.values_mut() {
        list.sort_unstable();
    }

    if policy.updates == "all" && policy.min_severity.is_none() {
        for host in &hosts {
            let (Some(distro), Some(version), Some(upgrade)) =
                (&host.distro, &host.distro_version, &host.release_upgrade)
            else {
                continue;
            };
            let Ok(upgrade) = serde_json::from_str::<serde_json::Value>(upgrade) else {
                continue;
            };
            let to = upgrade.get("to").cloned().unwrap_or_default();
            let to_version = to
                .get("version")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            let to_codename = to
                .get("codename")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            if to_version.is_empty() && to_codename.is_empty() {
                continue;
            }
            let key = format!("{distro}/{version}/{to_version}/{to_codename}");
            if in_flight_releases.contains(&(host.id, key.clone())) {
                continue;
            }
            let what = serde_json::json!({
                "distro": distro,
                "from": {"codename": host.distro_codename, "version": version},
                "to": {"codename": to.get("codename"), "version": to.get("version")},
            });
            desired
                .releases
                .entry(key)
                .or_insert_with(|| (what, BTreeSet::new()))
                .1
                .insert(host.id);
        }
    }
    Ok(desired)
}

type InFlight = (
    HashSet<(Uuid, String, String, String)>,
    HashSet<(Uuid, String)>,
);

/// (host, package, ecosystem, target version) pairs, and (host, release key) pairs, that
/// proposals of the policy already going ahead carry.
async fn in_flight(txn: &DatabaseTransaction, policy_id: Uuid) -> Result<InFlight, DbErr> {
    let going: Vec<proposals::Model> = proposals::Entity::find()
        .filter(proposals::Column::PolicyId.eq(policy_id))
        .filter(proposals::Column::Status.is_in(IN_FLIGHT))
        .all(txn)
        .await?;
    let mut changes = HashSet::new();
    let mut releases = HashSet::new();
    for proposal in going {
        let hosts: Vec<(Uuid, String)> = proposal_hosts::Entity::find()
            .select_only()
            .column(proposal_hosts::Column::HostId)
            .column(proposal_hosts::Column::Changes)
            .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
            .into_tuple()
            .all(txn)
            .await?;
        if let Some(key) = &proposal.release_key {
            releases.extend(hosts.into_iter().map(|(h, _)| (h, key.clone())));
            continue;
        }
        let by_position: HashMap<i32, proposal_changes::Model> = proposal_changes::Entity::find()
            .filter(proposal_changes::Column::ProposalId.eq(proposal.id))
            .all(txn)
            .await?
            .into_iter()
            .map(|c| (c.position, c))
            .collect();
        for (host, positions) in hosts {
            let positions: Vec<i32> = serde_json::from_str(&positions).unwrap_or_default();
            for c in positions.iter().filter_map(|p| by_position.get(p)) {
                changes.insert((
                    host,
                    c.package.clone(),
                    c.ecosystem.clone(),
                    c.to_version.clone(),
                ));
            }
        }
    }
    Ok((changes, releases))
}

/// CVEs of the desired changes that are on the known-exploited catalogue.
async fn known_exploited_cves(
    txn: &DatabaseTransaction,
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
        let rows: Vec<String> = known_exploited::Entity::find()
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

/// The summary columns of a package proposal, from its changes.
struct Summary {
    kind: &'static str,
    title: String,
    hosts: i64,
    packages: i64,
    max_severity: Option<String>,
    known_exploited: bool,
}

fn summarize(desired: &Desired, kev: &HashSet<String>) -> Summary {
    let packages: BTreeSet<&str> = desired.keys.iter().map(|k| k.package.as_str()).collect();
    let max_rank = desired.changes.iter().filter_map(Change::max_rank).max();
    let security = desired.changes.iter().all(|c| !c.advisories.is_empty());
    let known_exploited = desired.changes.iter().any(|c| {
        c.advisories
            .values()
            .any(|a| a.cves.iter().any(|cve| kev.contains(cve)))
    });
    // Name the most severe packages first, then alphabetically.
    let mut ranked: BTreeMap<&str, Option<u8>> = BTreeMap::new();
    for (key, change) in desired.keys.iter().zip(&desired.changes) {
        let rank = ranked.entry(key.package.as_str()).or_default();
        *rank = (*rank).max(change.max_rank());
    }
    let mut names: Vec<(&str, Option<u8>)> = ranked.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let names: Vec<&str> = names.into_iter().map(|(n, _)| n).collect();
    let listed = match names.as_slice() {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [a, b] => format!("{a} and {b}"),
        [a, b, rest @ ..] => format!("{a}, {b} and {} more packages", rest.len()),
    };
    let title = if security {
        format!("Security updates: {listed}")
    } else {
        format!("Updates: {listed}")
    };
    Summary {
        kind: if security {
            "security_update"
        } else {
            "package_update"
        },
        title,
        hosts: i64::try_from(desired.hosts.len()).unwrap_or(i64::MAX),
        packages: i64::try_from(packages.len()).unwrap_or(i64::MAX),
        max_severity: max_rank.map(|r| p::severity_name(r).to_owned()),
        known_exploited,
    }
}

async fn reconcile_packages(
    txn: &DatabaseTransaction,
    rules: &Rules,
    current: Option<proposals::Model>,
    desired: &Desired,
    kev: &HashSet<String>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    if desired.hosts.is_empty() {
        if let Some(current) = current {
            close(txn, current, now).await?;
        }
        return Ok(());
    }
    let summary = summarize(desired, kev);
    let Some(current) = current else {
        open(txn, rules, desired, &summary, None, now).await?;
        return Ok(());
    };
    let existing: Vec<proposal_changes::Model> = proposal_changes::Entity::find()
        .filter(proposal_changes::Column::ProposalId.eq(current.id))
        .all(txn)
        .await?;
    let targets: HashSet<(&str, &str, &str)> = existing
        .iter()
        .map(|c| {
            (
                c.package.as_str(),
                c.ecosystem.as_str(),
                c.to_version.as_str(),
            )
        })
        .collect();
    let new_updates = desired.keys.iter().any(|k| !targets.contains(&k.target()));
    if new_updates && !current.auto_merge {
        let opened = open(txn, rules, desired, &summary, None, now).await?;
        let mut old: proposals::ActiveModel = current.clone().into();
        old.status = Set(SUPERSEDED.into());
        old.superseded_by = Set(Some(opened.id));
        old.closed_at = Set(Some(now));
        old.updated_at = Set(now);
        old.update(txn).await?;
        let by = platform::ids::format_id("prp", opened.id);
        p::record(
            txn,
            &current,
            "proposal.superseded",
            None,
            serde_json::json!({"superseded_by": by}),
            now,
        )
        .await?;
        return Ok(());
    }
    update_in_place(txn, current, existing, desired, &summary, now).await
}

/// Opens a proposal for `desired` (a package proposal) or a release upgrade.
async fn open(
    txn: &DatabaseTransaction,
    rules: &Rules,
    desired: &Desired,
    summary: &Summary,
    release: Option<(&str, &serde_json::Value, &BTreeSet<Uuid>)>,
    now: DateTime<Utc>,
) -> Result<proposals::Model, DbErr> {
    let number = p::next_number(txn, rules.org_id).await?;
    let proposal = proposals::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(rules.org_id),
        number: Set(number),
        policy_id: Set(Some(rules.policy_id)),
        policy_name: Set(Some(rules.name.clone())),
        policy_version: Set(Some(rules.version)),
        release_key: Set(release.map(|(key, ..)| key.to_owned())),
        kind: Set(summary.kind.to_owned()),
        status: Set(OPEN.into()),
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
        release_upgrade: Set(release.map(|(_, what, _)| what.to_string())),
        created_at: Set(now),
        updated_at: Set(now),
        closed_at: Set(None),
        scheduled_for: Set(None),
        snoozed_until: Set(None),
        superseded_by: Set(None),
    }
    .insert(txn)
    .await?;
    match release {
        Some((_, _, hosts)) => {
            let rows = hosts.iter().map(|h| host_row(proposal.id, *h, "[]".into()));
            insert_hosts(txn, rows.collect()).await?;
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
                .collect();
            for chunk in rows.chunks(WRITE_CHUNK) {
                proposal_changes::Entity::insert_many(chunk.to_vec())
                    .exec(txn)
                    .await?;
            }
            let rows = desired.hosts.iter().map(|(host, list)| {
                host_row(proposal.id, *host, encode(list.iter().map(|i| *i as i32)))
            });
            insert_hosts(txn, rows.collect()).await?;
        }
    }
    p::record(
        txn,
        &proposal,
        "proposal.opened",
        None,
        serde_json::json!({"number": proposal.number, "hosts": proposal.hosts}),
        now,
    )
    .await?;
    if proposal.required <= 0 {
        return p::go_ahead(txn, proposal, None, now).await;
    }
    Ok(proposal)
}

fn change_row(
    proposal_id: Uuid,
    position: i32,
    key: &ChangeKey,
    change: &Change,
) -> proposal_changes::ActiveModel {
    proposal_changes::ActiveModel {
        proposal_id: Set(proposal_id),
        position: Set(position),
        package: Set(key.package.clone()),
        ecosystem: Set(key.ecosystem.clone()),
        from_version: Set(key.from_version.clone()),
        to_version: Set(key.to_version.clone()),
        source_name: Set(change.source_name.clone()),
        hosts: Set(change.hosts),
        advisories: Set(change.advisories_json()),
    }
}

fn host_row(proposal_id: Uuid, host_id: Uuid, changes: String) -> proposal_hosts::ActiveModel {
    proposal_hosts::ActiveModel {
        proposal_id: Set(proposal_id),
        host_id: Set(host_id),
        changes: Set(changes),
    }
}

fn encode(positions: impl Iterator<Item = i32>) -> String {
    let mut list: Vec<i32> = positions.collect();
    list.sort_unstable();
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
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

/// Brings an undecided package proposal in line with `desired`, writing only what differs.
async fn update_in_place(
    txn: &DatabaseTransaction,
    current: proposals::Model,
    existing: Vec<proposal_changes::Model>,
    desired: &Desired,
    summary: &Summary,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut touched = false;
    let mut next = existing.iter().map(|c| c.position + 1).max().unwrap_or(0);
    let mut by_key: HashMap<ChangeKey, proposal_changes::Model> = existing
        .into_iter()
        .map(|c| {
            let key = ChangeKey {
                package: c.package.clone(),
                ecosystem: c.ecosystem.clone(),
                from_version: c.from_version.clone(),
                to_version: c.to_version.clone(),
            };
            (key, c)
        })
        .collect();
    // Position of each desired change: kept where it exists, appended where it is new.
    let mut positions = Vec::with_capacity(desired.keys.len());
    let mut inserts = Vec::new();
    for (key, change) in desired.keys.iter().zip(&desired.changes) {
        match by_key.remove(key) {
            Some(row) => {
                positions.push(row.position);
                let advisories = change.advisories_json();
                if row.hosts != change.hosts
                    || row.advisories != advisories
                    || row.source_name != change.source_name
                {
                    let mut active: proposal_changes::ActiveModel = row.into();
                    active.hosts = Set(change.hosts);
                    active.advisories = Set(advisories);
                    active.source_name = Set(change.source_name.clone());
                    active.update(txn).await?;
                    touched = true;
                }
            }
            None => {
                positions.push(next);
                inserts.push(change_row(current.id, next, key, change));
                next += 1;
            }
        }
    }
    let gone: Vec<i32> = by_key.values().map(|c| c.position).collect();
    for chunk in gone.chunks(WRITE_CHUNK) {
        touched = true;
        proposal_changes::Entity::delete_many()
            .filter(proposal_changes::Column::ProposalId.eq(current.id))
            .filter(proposal_changes::Column::Position.is_in(chunk.to_vec()))
            .exec(txn)
            .await?;
    }
    for chunk in inserts.chunks(WRITE_CHUNK) {
        touched = true;
        proposal_changes::Entity::insert_many(chunk.to_vec())
            .exec(txn)
            .await?;
    }

    let mut stored: HashMap<Uuid, String> = proposal_hosts::Entity::find()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .column(proposal_hosts::Column::Changes)
        .filter(proposal_hosts::Column::ProposalId.eq(current.id))
        .into_tuple::<(Uuid, String)>()
        .all(txn)
        .await?
        .into_iter()
        .collect();
    let mut added = Vec::new();
    for (host, list) in &desired.hosts {
        let changes = encode(list.iter().map(|i| positions[*i as usize]));
        match stored.remove(host) {
            Some(old) if old == changes => {}
            Some(_) => {
                touched = true;
                proposal_hosts::Entity::update(host_row(current.id, *host, changes))
                    .exec(txn)
                    .await?;
            }
            None => added.push(host_row(current.id, *host, changes)),
        }
    }
    if !added.is_empty() {
        touched = true;
        insert_hosts(txn, added).await?;
    }
    let left: Vec<Uuid> = stored.into_keys().collect();
    for chunk in left.chunks(WRITE_CHUNK) {
        touched = true;
        proposal_hosts::Entity::delete_many()
            .filter(proposal_hosts::Column::ProposalId.eq(current.id))
            .filter(proposal_hosts::Column::HostId.is_in(chunk.to_vec()))
            .exec(txn)
            .await?;
    }

    let same = current.kind == summary.kind
        && current.title == summary.title
        && current.hosts == summary.hosts
        && current.packages == summary.packages
        && current.max_severity == summary.max_severity
        && current.known_exploited == summary.known_exploited;
    if touched || !same {
        let mut active: proposals::ActiveModel = current.into();
        active.kind = Set(summary.kind.to_owned());
        active.title = Set(summary.title.clone());
        active.hosts = Set(summary.hosts);
        active.packages = Set(summary.packages);
        active.max_severity = Set(summary.max_severity.clone());
        active.known_exploited = Set(summary.known_exploited);
        active.updated_at = Set(now);
        active.update(txn).await?;
    }
    Ok(())
}

/// Release upgrades: one undecided proposal per upgrade offered; hosts join and leave it.
async fn reconcile_releases(
    txn: &DatabaseTransaction,
    rules: &Rules,
    current: Vec<proposals::Model>,
    desired: &Desired,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut seen = HashSet::new();
    for proposal in current {
        let key = proposal.release_key.clone().unwrap_or_default();
        match desired.releases.get(&key) {
            Some((_, hosts)) if seen.insert(key.clone()) => {
                set_release_hosts(txn, proposal, hosts, now).await?;
            }
            _ => close(txn, proposal, now).await?,
        }
    }
    for (key, (what, hosts)) in &desired.releases {
        if seen.contains(key) {
            continue;
        }
        let summary = Summary {
            kind: "dist_upgrade",
            title: release_title(what),
            hosts: i64::try_from(hosts.len()).unwrap_or(i64::MAX),
            packages: 0,
            max_severity: None,
            known_exploited: false,
        };
        open(
            txn,
            rules,
            &Desired::default(),
            &summary,
            Some((key, what, hosts)),
            now,
        )
        .await?;
    }
    Ok(())
}

fn release_title(what: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let side = |v: &serde_json::Value| {
        let version = text(&v["version"]);
        let codename = text(&v["codename"]);
        match (version.is_empty(), codename.is_empty()) {
            (false, false) => format!("{version} ({codename})"),
            (false, true) => version,
            _ => codename,
        }
    };
    format!(
        "Upgrade {} {} to {}",
        text(&what["distro"]),
        side(&what["from"]),
        side(&what["to"])
    )
}

async fn set_release_hosts(
    txn: &DatabaseTransaction,
    proposal: proposals::Model,
    hosts: &BTreeSet<Uuid>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let stored: BTreeSet<Uuid> = proposal_hosts::Entity::find()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
        .into_tuple()
        .all(txn)
        .await?
        .into_iter()
        .collect();
    if &stored == hosts {
        return Ok(());
    }
    let added: Vec<_> = hosts
        .difference(&stored)
        .map(|h| host_row(proposal.id, *h, "[]".into()))
        .collect();
    insert_hosts(txn, added).await?;
    let left: Vec<Uuid> = stored.difference(hosts).copied().collect();
    for chunk in left.chunks(WRITE_CHUNK) {
        proposal_hosts::Entity::delete_many()
            .filter(proposal_hosts::Column::ProposalId.eq(proposal.id))
            .filter(proposal_hosts::Column::HostId.is_in(chunk.to_vec()))
            .exec(txn)
            .await?;
    }
    let mut active: proposals::ActiveModel = proposal.into();
    active.hosts = Set(i64::try_from(hosts.len()).unwrap_or(i64::MAX));
    active.updated_at = Set(now);
    active.update(txn).await?;
    Ok(())
}

/// Nothing is left to go ahead with: `closed`.
pub async fn close<C: ConnectionTrait>(
    txn: &C,
    proposal: proposals::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut active: proposals::ActiveModel = proposal.clone().into();
    active.status = Set(CLOSED.into());
    active.closed_at = Set(Some(now));
    active.snoozed_until = Set(None);
    active.updated_at = Set(now);
    active.update(txn).await?;
    p::record(
        txn,
        &proposal,
        "proposal.closed",
        None,
        serde_json::json!({}),
        now,
    )
    .await
}

/// Opens due windows and ends due snoozes. Each move is conditional on the status it moves
/// from, so a second run (another replica, a retry) moves nothing twice.
pub async fn timers(_job: ProposalTimers, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let due_windows = proposals::Entity::find()
        .filter(proposals::Column::Status.eq(p::SCHEDULED))
        .filter(proposals::Column::ScheduledFor.lte(now))
        .limit(1000)
        .all(&deps.db.orm)
        .await?;
    for proposal in due_windows {
        let txn = deps.db.begin_write().await?;
        p::open_window(&txn, &proposal, now).await?;
        txn.commit().await?;
    }
    let due_snoozes = proposals::Entity::find()
        .filter(proposals::Column::Status.eq(SNOOZED))
        .filter(proposals::Column::SnoozedUntil.lte(now))
        .limit(1000)
        .all(&deps.db.orm)
        .await?;
    for proposal in due_snoozes {
        let txn = deps.db.begin_write().await?;
        let moved = proposals::Entity::update_many()
            .col_expr(
                proposals::Column::Status,
                sea_orm::sea_query::Expr::value(OPEN),
            )
            .col_expr(
                proposals::Column::SnoozedUntil,
                sea_orm::sea_query::Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                proposals::Column::UpdatedAt,
                sea_orm::sea_query::Expr::value(now),
            )
            .filter(proposals::Column::Id.eq(proposal.id))
            .filter(proposals::Column::Status.eq(SNOOZED))
            .exec(&txn)
            .await?
            .rows_affected
            == 1;
        if moved {
            p::record(
                &txn,
                &proposal,
                "proposal.reopened",
                None,
                serde_json::json!({}),
                now,
            )
            .await?;
        }
        txn.commit().await?;
    }
    Ok(())
}

/// Marks the organization's policies dirty and queues an evaluation for each one that was not
/// already waiting for one.
pub async fn mark_dirty(
    db: &platform::db::Database,
    org_id: Uuid,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let ids: Vec<Uuid> = policies::Entity::find()
        .select_only()
        .column(policies::Column::Id)
        .filter(policies::Column::OrgId.eq(org_id))
        .into_tuple()
        .all(&db.orm)
        .await?;
    mark_policies_dirty(db, &ids, now).await
}

/// How long a freshly marked policy waits before its evaluation runs.
const COALESCE_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Marks `policy_ids` dirty; queues an evaluation for each that was clean.
pub async fn mark_policies_dirty(
    db: &platform::db::Database,
    policy_ids: &[Uuid],
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let queue = platform::jobs::Queue::new(db);
    for id in policy_ids {
        let inserted = policy_dirty::Entity::insert(policy_dirty::ActiveModel {
            policy_id: Set(*id),
            since: Set(now),
        })
        .on_conflict(
            sea_orm::sea_query::OnConflict::column(policy_dirty::Column::PolicyId)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(&db.orm)
        .await?;
        if inserted == 1 {
            // A moment's delay lets a burst of host changes share one evaluation.
            queue
                .push_after(EvaluatePolicy { policy_id: *id }, COALESCE_DELAY)
                .await?;
        }
    }
    Ok(())
}
