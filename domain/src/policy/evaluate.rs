//! One evaluation of a policy: read what its hosts need ([`super::needs`]), decide what becomes of its undecided proposals ([`super::plan`]) and
//! write that ([`super::store`]).
//!
//! The writes are one transaction that first locks the policy (and its undecided proposals),
//! so two runs of one policy, or a run and a decision, never interleave. What hosts report is
//! read only for hosts whose updates changed since this process last read them
//! ([`Reports`]); the rest of a run (scope, grouping, the proposals' difference) is computed
//! anew each time, in memory.
//!
//! On SQLite, where the process's writes take turns on one connection and a check-in waits
//! behind every turn asked for before it, everything is read and worked out ahead, in one
//! read transaction (a snapshot), and the write turn only checks that the policy, its
//! undecided proposals and those going ahead are still the snapshot's before writing the
//! difference; a run that finds nothing to write takes no turn at all. Host changes after
//! the snapshot are not checked for: each marks the policy dirty again (after this run
//! claimed the mark), which queues the next run, as a change after the write would.

use entities::scope::{AllOrgs, OrgScope, Untenanted};
use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use entities::{
    json::{HostImpact, JsonText},
    policies, policy_dirty, proposal_changes, proposal_hosts, proposal_impacts, proposals,
};
use platform::{config::DatabaseKind, db::Database, ids::PolicyId};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};
use uuid::Uuid;

use super::{
    change_key::ChangeKey,
    grouping::Desired,
    needs,
    plan::{Current, PackagePlan, plan_packages, plan_releases},
    reported::Reports,
    rules::Rules,
    store::{self, ReleaseHosts, Update},
    summary::{Summary, release_summary, summarize},
};
use crate::{
    proposals::{close, supersede},
    status::ProposalStatus,
};

/// Whether an evaluation ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluated {
    Done,
    /// Another evaluation of the policy is running; nothing was read or written.
    Busy,
}

/// One evaluation of `policy_id` at `now` (what the `policy.evaluate` job runs), reading
/// hosts' updates through `reports` (one per process, kept between runs).
///
/// One run per policy at a time: within a process by [`Reports::claim`], and on Postgres
/// across processes by a transaction-scoped advisory lock keyed by the policy. A run that
/// finds either taken gives up at once (`Busy`) instead of waiting, so a burst of host changes
/// costs one running and one waiting evaluation per policy. The dirty mark is claimed only
/// once the policy is. On SQLite the write transaction keeps runs of several processes apart.
///
/// A policy whose scope or window cannot be read covers no host: its undecided proposals
/// close and none opens, and the evaluation logs an error naming the policy.
///
/// It runs on a thread of the blocking pool, whatever the database: it decodes up to a whole
/// fleet's reported updates (chunks of 125,000 rows), hundreds of milliseconds of CPU a chunk,
/// and on a thread of the async runtime that held back the tasks woken there meanwhile. On
/// SQLite one of them was a task whose turn on the writing connection had just come, so the
/// writer stood idle while everyone queued behind it (a host evaluation's turn of three small
/// reads held it up to 1.2 s, BENCHMARKS.md "The job queue on the writing connection"). Once
/// started it runs to its end even if the caller stops waiting.
pub async fn evaluate_policy(
    db: &Database,
    reports: &Reports,
    policy_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Evaluated, DbErr> {
    let (db, reports) = (db.clone(), reports.clone());
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(evaluate(&db, &reports, policy_id, now)))
        .await
        .map_err(|err| DbErr::Custom(format!("the policy's evaluation stopped: {err}")))?
}

async fn evaluate(
    db: &Database,
    reports: &Reports,
    policy_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Evaluated, DbErr> {
    let postgres = db.kind() == DatabaseKind::Postgres;
    let Some(_claim) = reports.claim(policy_id) else {
        return Ok(Evaluated::Busy);
    };
    let mut ahead = None;
    if !postgres {
        // The mark is claimed when there is one: a run without (a retry, a direct call) that
        // finds nothing to write writes nothing at all.
        if policy_dirty::Entity::row(policy_id)
            .one(&db.orm)
            .await?
            .is_some()
        {
            policy_dirty::Entity::delete_rows()
                .filter(policy_dirty::Column::PolicyId.eq(policy_id))
                .exec(db.writer())
                .await?;
        }
        match read_ahead(db, policy_id, reports).await? {
            Ahead::NothingToWrite => return Ok(Evaluated::Done),
            Ahead::Writes(snapshot) => ahead = Some(*snapshot),
            Ahead::InTheTurn => {}
        }
    }
    let txn = db.begin_write().await?;
    if postgres {
        let key = i64::from_be_bytes(policy_id.as_bytes()[8..16].try_into().unwrap_or([0; 8]));
        if !platform::db::try_lock_for_transaction(&txn, key).await? {
            return Ok(Evaluated::Busy);
        }
        // Claimed outside this transaction, so marking stays a non-blocking insert.
        policy_dirty::Entity::delete_rows()
            .filter(policy_dirty::Column::PolicyId.eq(policy_id))
            .exec(&db.orm)
            .await?;
    }
    let Some(policy) = AllOrgs::row::<policies::Entity>(policy_id)
        .one(&txn)
        .await?
    else {
        return Ok(Evaluated::Done); // Deleted: its proposals were closed with it.
    };
    let undecided = undecided(&txn, policy.id, postgres).await?;
    let rules = match Rules::of(&policy) {
        Ok(rules) => rules,
        Err(err) => {
            tracing::error!(
                policy_id = %PolicyId::from(policy.id),
                error = %err,
                "policy's maintenance window cannot be read: it covers no host until it is saved again"
            );
            for proposal in undecided {
                close(&txn, proposal, now).await?;
            }
            txn.commit().await?;
            return Ok(Evaluated::Done);
        }
    };
    let snapshot = match ahead {
        Some(snapshot)
            if snapshot.policy == policy
                && snapshot.undecided == undecided
                && snapshot.going == needs::going(&txn, policy.id).await? =>
        {
            snapshot
        }
        // Moved since the snapshot (or none taken): worked out here, on what the turn reads.
        _ => Snapshot::read(&txn, policy, undecided, reports).await?,
    };
    snapshot.reconciliation.write(&txn, &rules, now).await?;
    if let Some((proposal, cves)) = unannounced(&txn, &snapshot.policy, &snapshot.kev).await? {
        announce_known_exploited(&txn, &snapshot.policy, &proposal, cves, now).await?;
    }
    txn.commit().await?;
    Ok(Evaluated::Done)
}

/// The policy's undecided proposals, oldest first; on Postgres locked for the transaction.
async fn undecided<C: ConnectionTrait>(
    db: &C,
    policy_id: Uuid,
    lock: bool,
) -> Result<Vec<proposals::Model>, DbErr> {
    let mut undecided = AllOrgs::rows::<proposals::Entity>()
        .filter(proposals::Column::PolicyId.eq(policy_id))
        .filter(proposals::Column::Status.is_in(ProposalStatus::UNDECIDED))
        .order_by_asc(proposals::Column::Number);
    if lock {
        undecided = undecided.lock_exclusive();
    }
    undecided.all(db).await
}

/// What an evaluation read ahead of its write turn (SQLite).
enum Ahead {
    /// The proposals already are what the hosts need (or the policy is gone).
    NothingToWrite,
    Writes(Box<Snapshot>),
    /// The policy cannot be read as rules: the turn deals with it.
    InTheTurn,
}

/// Reads and works out the evaluation in one read transaction (a snapshot), before taking a
/// write turn.
async fn read_ahead(db: &Database, policy_id: Uuid, reports: &Reports) -> Result<Ahead, DbErr> {
    let txn = db.orm.begin().await?;
    let Some(policy) = AllOrgs::row::<policies::Entity>(policy_id)
        .one(&txn)
        .await?
    else {
        return Ok(Ahead::NothingToWrite);
    };
    if Rules::of(&policy).is_err() {
        return Ok(Ahead::InTheTurn);
    }
    let undecided = undecided(&txn, policy.id, false).await?;
    let snapshot = Snapshot::read(&txn, policy, undecided, reports).await?;
    let announce = unannounced(&txn, &snapshot.policy, &snapshot.kev).await?;
    txn.rollback().await?;
    if snapshot.reconciliation.is_empty() && announce.is_none() {
        return Ok(Ahead::NothingToWrite);
    }
    Ok(Ahead::Writes(Box::new(snapshot)))
}

/// An evaluation worked out on what one transaction reads: what it was computed from (the
/// policy and its proposals, undecided and going ahead) and what it writes.
struct Snapshot {
    policy: policies::Model,
    undecided: Vec<proposals::Model>,
    going: Vec<proposals::Model>,
    kev: HashSet<String>,
    reconciliation: Reconciliation,
}

impl Snapshot {
    async fn read<C: ConnectionTrait + sea_orm::StreamTrait>(
        db: &C,
        policy: policies::Model,
        undecided: Vec<proposals::Model>,
        reports: &Reports,
    ) -> Result<Snapshot, DbErr> {
        let going = needs::going(db, policy.id).await?;
        let desired = needs::desired(db, &policy, &going, reports).await?;
        let kev = needs::known_exploited_cves(db, &desired).await?;
        let reconciliation = Reconciliation::plan(db, undecided.clone(), desired, &kev).await?;
        Ok(Snapshot {
            policy,
            undecided,
            going,
            kev,
            reconciliation,
        })
    }
}

/// What an evaluation writes: the undecided proposals brought in line with what the hosts
/// need ([`plan_packages`], [`plan_releases`]), worked out from what they store.
struct Reconciliation {
    desired: Desired,
    /// Undecided package proposals besides the newest: only one is kept, should an older one
    /// linger it closes.
    stale: Vec<proposals::Model>,
    package: PackageStep,
    releases: Vec<ReleaseStep>,
    /// Upgrades no proposal offers yet: one opens for each.
    open_releases: Vec<String>,
}

enum PackageStep {
    Nothing,
    Close(proposals::Model),
    Open(Summary),
    Supersede(proposals::Model, Summary),
    Update(Update),
}

enum ReleaseStep {
    Follow(ReleaseHosts),
    Close(proposals::Model),
}

impl Reconciliation {
    async fn plan<C: ConnectionTrait>(
        db: &C,
        undecided: Vec<proposals::Model>,
        desired: Desired,
        kev: &HashSet<String>,
    ) -> Result<Reconciliation, DbErr> {
        let (packages, releases): (Vec<_>, Vec<_>) =
            undecided.into_iter().partition(|p| p.release_key.is_none());
        let mut packages = packages.into_iter();
        let current = packages.next();
        let stale = packages.collect();
        let package = plan_package(db, current, &desired, kev).await?;
        let keys: Vec<Option<String>> = releases.iter().map(|p| p.release_key.clone()).collect();
        let plan = plan_releases(&keys, &desired.releases);
        let follow: HashMap<usize, String> = plan.follow.into_iter().collect();
        let mut steps = Vec::with_capacity(releases.len());
        for (i, proposal) in releases.into_iter().enumerate() {
            steps.push(
                match follow.get(&i).and_then(|key| desired.releases.get(key)) {
                    Some((_, hosts)) => {
                        let stored = release_hosts(db, proposal.id).await?;
                        ReleaseStep::Follow(ReleaseHosts::plan(proposal, &stored, hosts))
                    }
                    None => ReleaseStep::Close(proposal),
                },
            );
        }
        Ok(Reconciliation {
            desired,
            stale,
            package,
            releases: steps,
            open_releases: plan.open,
        })
    }

    /// Whether the proposals already are what the hosts need.
    fn is_empty(&self) -> bool {
        self.stale.is_empty()
            && self.open_releases.is_empty()
            && match &self.package {
                PackageStep::Nothing => true,
                PackageStep::Update(update) => update.is_empty(),
                _ => false,
            }
            && self.releases.iter().all(|step| match step {
                ReleaseStep::Follow(hosts) => hosts.is_empty(),
                ReleaseStep::Close(_) => false,
            })
    }

    async fn write(
        self,
        txn: &DatabaseTransaction,
        rules: &Rules,
        now: DateTime<Utc>,
    ) -> Result<(), DbErr> {
        let desired = &self.desired;
        for stale in self.stale {
            close(txn, stale, now).await?;
        }
        match self.package {
            PackageStep::Nothing => {}
            PackageStep::Close(current) => close(txn, current, now).await?,
            PackageStep::Open(summary) => {
                store::open(txn, rules, desired, &summary, None, now).await?;
            }
            PackageStep::Supersede(current, summary) => {
                let opened = store::open(txn, rules, desired, &summary, None, now).await?;
                supersede(txn, current, &opened, now).await?;
            }
            PackageStep::Update(update) => update.write(txn, now).await?,
        }
        for step in self.releases {
            match step {
                ReleaseStep::Follow(hosts) => hosts.write(txn, now).await?,
                ReleaseStep::Close(proposal) => close(txn, proposal, now).await?,
            }
        }
        for key in self.open_releases {
            let Some((what, hosts)) = desired.releases.get(&key) else {
                continue;
            };
            let summary = release_summary(what, hosts.len());
            store::open(
                txn,
                rules,
                &Desired::default(),
                &summary,
                Some((&key, what, hosts)),
                now,
            )
            .await?;
        }
        Ok(())
    }
}

/// What becomes of the policy's package proposal ([`plan_packages`]); following or merging
/// reads what it stores.
async fn plan_package<C: ConnectionTrait>(
    db: &C,
    current: Option<proposals::Model>,
    desired: &Desired,
    kev: &HashSet<String>,
) -> Result<PackageStep, DbErr> {
    let existing: Vec<proposal_changes::Model> = match &current {
        Some(current) if !desired.hosts.is_empty() => {
            proposal_changes::Entity::rows()
                .filter(proposal_changes::Column::ProposalId.eq(current.id))
                .all(db)
                .await?
        }
        _ => Vec::new(),
    };
    let keys: Vec<ChangeKey> = existing.iter().map(needs::key_of).collect();
    let plan = plan_packages(
        current.as_ref().map(|c| Current {
            auto_merge: c.auto_merge,
            changes: &keys,
        }),
        desired,
    );
    let summary = || summarize(desired, kev);
    Ok(match (plan, current) {
        (PackagePlan::Close, Some(current)) => PackageStep::Close(current),
        (PackagePlan::Open, _) => PackageStep::Open(summary()),
        (PackagePlan::Supersede, Some(current)) => PackageStep::Supersede(current, summary()),
        (PackagePlan::Merge | PackagePlan::Follow, Some(current)) => {
            type Row = (Uuid, JsonText<Vec<i32>>, Option<JsonText<HostImpact>>);
            let stored_hosts = proposal_hosts::Entity::rows()
                .select_only()
                .column(proposal_hosts::Column::HostId)
                .column(proposal_hosts::Column::Changes)
                .column(proposal_hosts::Column::Impact)
                .filter(proposal_hosts::Column::ProposalId.eq(current.id))
                .into_tuple::<Row>()
                .all(db)
                .await?
                .into_iter()
                .map(|(host, changes, impact)| (host, (changes, impact)))
                .collect();
            // A summary that cannot be read is written again.
            let stored_impact = proposal_impacts::Entity::row(current.id)
                .one(db)
                .await?
                .and_then(|row| row.summary.read().ok());
            PackageStep::Update(Update::plan(
                current,
                existing,
                stored_hosts,
                stored_impact,
                desired,
                summary(),
            )?)
        }
        _ => PackageStep::Nothing,
    })
}

/// The hosts a release upgrade proposal stores.
async fn release_hosts<C: ConnectionTrait>(
    db: &C,
    proposal_id: Uuid,
) -> Result<BTreeSet<Uuid>, DbErr> {
    Ok(proposal_hosts::Entity::rows()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .filter(proposal_hosts::Column::ProposalId.eq(proposal_id))
        .into_tuple()
        .all(db)
        .await?
        .into_iter()
        .collect())
}

/// The policy's open package proposal and the known-exploited CVEs it fixes that its
/// organization has not been told of yet; `None` when there are none.
async fn unannounced<C: ConnectionTrait>(
    db: &C,
    policy: &policies::Model,
    kev: &HashSet<String>,
) -> Result<Option<(proposals::Model, Vec<String>)>, DbErr> {
    use crate::notifications::EventKind;
    use entities::notification_events;
    if kev.is_empty() {
        return Ok(None);
    }
    let Some(proposal) = OrgScope::of(policy.org_id)
        .rows::<proposals::Entity>()
        .filter(proposals::Column::PolicyId.eq(policy.id))
        .filter(proposals::Column::Status.eq(ProposalStatus::Open))
        .filter(proposals::Column::ReleaseKey.is_null())
        .order_by_desc(proposals::Column::Number)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let mut cves: Vec<&String> = kev.iter().collect();
    cves.sort();
    let mut left = Vec::new();
    for cve in cves {
        let announced = OrgScope::of(policy.org_id)
            .rows::<notification_events::Entity>()
            .filter(
                notification_events::Column::Kind.eq(EventKind::AdvisoryKnownExploited.as_str()),
            )
            .filter(notification_events::Column::Subject.eq(cve.as_str()))
            .one(db)
            .await?
            .is_some();
        if !announced {
            left.push(cve.clone());
        }
    }
    Ok((!left.is_empty()).then_some((proposal, left)))
}

/// Each known-exploited CVE that the policy's open package proposal fixes is announced
/// (`advisory.known_exploited`) once per organization and CVE, in this transaction.
async fn announce_known_exploited(
    txn: &DatabaseTransaction,
    policy: &policies::Model,
    proposal: &proposals::Model,
    cves: Vec<String>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    use crate::notifications::{EventKind, outbox};
    for cve in cves {
        let mut data = outbox::proposal_data(proposal, &proposal.status, None);
        data["cve"] = serde_json::json!(cve);
        outbox::emit(
            txn,
            policy.org_id,
            EventKind::AdvisoryKnownExploited,
            Some(cve),
            None,
            data,
            now,
        )
        .await?;
    }
    Ok(())
}
