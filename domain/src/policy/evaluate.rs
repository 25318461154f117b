//! One evaluation of a policy: read what its hosts need ([`super::needs`]), decide what becomes of its undecided proposals ([`super::plan`]) and
//! write that ([`super::store`]).
//!
//! The whole run is one write transaction that first locks the policy (and its undecided
//! proposals), so two runs of one policy, or a run and a decision, never interleave. What
//! hosts report is read only for hosts whose updates changed since this process last read
//! them ([`Reports`]); the rest of a run (scope, grouping, the proposals' difference) is
//! computed anew each time, in memory.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use entities::{policies, policy_dirty, proposal_changes, proposals};
use platform::{config::DatabaseKind, db::Database, ids::PolicyId};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use uuid::Uuid;

use super::{
    grouping::{ChangeKey, Desired},
    needs,
    plan::{Current, PackagePlan, plan_packages, plan_releases},
    reported::Reports,
    rules::Rules,
    store,
    summary::{release_summary, summarize},
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
pub async fn evaluate_policy(
    db: &Database,
    reports: &Reports,
    policy_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Evaluated, DbErr> {
    let postgres = db.kind() == DatabaseKind::Postgres;
    let Some(_claim) = reports.claim(policy_id) else {
        return Ok(Evaluated::Busy);
    };
    let mut prepared = None;
    if !postgres {
        policy_dirty::Entity::delete_by_id(policy_id)
            .exec(db.writer())
            .await?;
        // SQLite has one writer at a time: what the hosts need is read and grouped before the
        // write transaction, which only checks that nothing it was computed from has moved.
        if let Some(policy) = policies::Entity::find_by_id(policy_id).one(&db.orm).await? {
            prepared = Some(needs::prepare(&db.orm, policy, reports).await?);
        }
    }
    let txn = db.begin_write().await?;
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
            .exec(&db.orm)
            .await?;
    }
    let Some(policy) = policies::Entity::find_by_id(policy_id).one(&txn).await? else {
        return Ok(Evaluated::Done); // Deleted: its proposals were closed with it.
    };
    let mut undecided = proposals::Entity::find()
        .filter(proposals::Column::PolicyId.eq(policy.id))
        .filter(proposals::Column::Status.is_in(ProposalStatus::UNDECIDED))
        .order_by_asc(proposals::Column::Number);
    if postgres {
        undecided = undecided.lock_exclusive();
    }
    let undecided = undecided.all(&txn).await?;
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
    let desired = match prepared {
        Some(prepared) => needs::desired_as_prepared(&txn, &policy, prepared, reports).await?,
        None => needs::desired(&txn, &policy, reports).await?,
    };
    let kev = needs::known_exploited_cves(&txn, &desired).await?;

    let (packages, releases): (Vec<_>, Vec<_>) =
        undecided.into_iter().partition(|p| p.release_key.is_none());
    let mut packages = packages.into_iter();
    let current = packages.next();
    // Only one undecided package proposal is kept; should an older one linger, it closes.
    for stale in packages {
        close(&txn, stale, now).await?;
    }
    reconcile_packages(&txn, &rules, current, &desired, &kev, now).await?;
    reconcile_releases(&txn, &rules, releases, &desired, now).await?;
    if !kev.is_empty() {
        announce_known_exploited(&txn, &policy, &kev, now).await?;
    }
    txn.commit().await?;
    Ok(Evaluated::Done)
}

/// Each known-exploited CVE that the policy's open package proposal fixes is announced
/// (`advisory.known_exploited`) once per organization and CVE, in this transaction.
async fn announce_known_exploited(
    txn: &DatabaseTransaction,
    policy: &policies::Model,
    kev: &HashSet<String>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    use crate::notifications::{EventKind, outbox};
    let Some(proposal) = proposals::Entity::find()
        .filter(proposals::Column::PolicyId.eq(policy.id))
        .filter(proposals::Column::Status.eq(ProposalStatus::Open))
        .filter(proposals::Column::ReleaseKey.is_null())
        .order_by_desc(proposals::Column::Number)
        .one(txn)
        .await?
    else {
        return Ok(());
    };
    let mut cves: Vec<&String> = kev.iter().collect();
    cves.sort();
    for cve in cves {
        let announced = entities::notification_events::Entity::find()
            .filter(entities::notification_events::Column::OrgId.eq(policy.org_id))
            .filter(
                entities::notification_events::Column::Kind
                    .eq(EventKind::AdvisoryKnownExploited.as_str()),
            )
            .filter(entities::notification_events::Column::Subject.eq(cve.as_str()))
            .one(txn)
            .await?
            .is_some();
        if announced {
            continue;
        }
        let mut data = outbox::proposal_data(&proposal, &proposal.status, None);
        data["cve"] = serde_json::json!(cve);
        outbox::emit(
            txn,
            policy.org_id,
            EventKind::AdvisoryKnownExploited,
            Some(cve.clone()),
            None,
            data,
            now,
        )
        .await?;
    }
    Ok(())
}

/// Brings the policy's package proposal in line with `desired` ([`plan_packages`]).
async fn reconcile_packages(
    txn: &DatabaseTransaction,
    rules: &Rules,
    current: Option<proposals::Model>,
    desired: &Desired,
    kev: &HashSet<String>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let existing: Vec<proposal_changes::Model> = match &current {
        Some(current) if !desired.hosts.is_empty() => {
            proposal_changes::Entity::find()
                .filter(proposal_changes::Column::ProposalId.eq(current.id))
                .all(txn)
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
    match (plan, current) {
        (PackagePlan::Close, Some(current)) => close(txn, current, now).await,
        (PackagePlan::Open, _) => store::open(txn, rules, desired, &summary(), None, now)
            .await
            .map(|_| ()),
        (PackagePlan::Supersede, Some(current)) => {
            let opened = store::open(txn, rules, desired, &summary(), None, now).await?;
            supersede(txn, current, &opened, now).await
        }
        (PackagePlan::Merge | PackagePlan::Follow, Some(current)) => {
            store::update_in_place(txn, current, existing, desired, &summary(), now).await
        }
        _ => Ok(()),
    }
}

/// Release upgrades: one undecided proposal per upgrade offered; hosts join and leave it
/// ([`plan_releases`]).
async fn reconcile_releases(
    txn: &DatabaseTransaction,
    rules: &Rules,
    current: Vec<proposals::Model>,
    desired: &Desired,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let keys: Vec<Option<String>> = current.iter().map(|p| p.release_key.clone()).collect();
    let plan = plan_releases(&keys, &desired.releases);
    let follow: HashMap<usize, String> = plan.follow.into_iter().collect();
    for (i, proposal) in current.into_iter().enumerate() {
        match follow.get(&i).and_then(|key| desired.releases.get(key)) {
            Some((_, hosts)) => store::set_release_hosts(txn, proposal, hosts, now).await?,
            None => close(txn, proposal, now).await?,
        }
    }
    for key in plan.open {
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
