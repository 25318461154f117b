//! The shared changelog cache: which changes need a `changelog.fetch`, and what a fetch found.
//!
//! A row per distribution × source package × target version. A change whose changelog has no
//! row yet gets one (`pending`) and a fetch job keyed `changelog:{distro}:{source}:{version}`,
//! so however many organizations and evaluations ask at once, one fetch runs.

use crate::intel::jobs::FetchChangelog;
use entities::scope::{AllOrgs, Untenanted};
use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use entities::{
    changelogs,
    json::{ChangelogEntry, JsonText},
    proposal_changes, proposals,
};
use platform::{db::Database, jobs::Queue};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect, Set, sea_query::OnConflict};
use uuid::Uuid;

use super::changelog::{self, ChangelogStatus};
use crate::status::{Ecosystem, ProposalStatus};

/// What identifies one cached changelog.
pub type Key = (String, String, String);

/// A `pending` changelog untouched for this long has no fetch coming: its job was lost (the
/// database failed it through every retry) or its retry was never queued. Retries wait at most
/// 30 minutes, so an hour leaves room for a busy queue.
pub const STRANDED_AFTER: chrono::Duration = chrono::Duration::hours(1);

/// The idempotency key of a fetch (attempt 0) or of a retry.
pub fn job_key(job: &FetchChangelog) -> String {
    format!(
        "changelog:{}:{}:{}:{}",
        job.distro, job.source, job.version, job.attempt
    )
}

/// Queues a fetch for every changelog the policy's undecided proposals show that has no cache
/// row yet. Returns how many were queued.
pub async fn queue_for_policy(
    db: &Database,
    policy_id: Uuid,
    now: DateTime<Utc>,
) -> anyhow::Result<usize> {
    let ids: Vec<Uuid> = AllOrgs::rows::<proposals::Entity>()
        .select_only()
        .column(proposals::Column::Id)
        .filter(proposals::Column::PolicyId.eq(policy_id))
        .filter(proposals::Column::Status.is_in(ProposalStatus::UNDECIDED))
        .into_tuple()
        .all(&db.orm)
        .await?;
    let mut wanted: BTreeSet<Key> = BTreeSet::new();
    for chunk in ids.chunks(200) {
        let rows: Vec<(Option<String>, Option<String>, String)> = proposal_changes::Entity::rows()
            .select_only()
            .column(proposal_changes::Column::Distro)
            .column(proposal_changes::Column::SourceName)
            .column(proposal_changes::Column::ToVersion)
            .filter(proposal_changes::Column::ProposalId.is_in(chunk.to_vec()))
            .filter(proposal_changes::Column::Ecosystem.eq(Ecosystem::Deb))
            .filter(proposal_changes::Column::SourceName.is_not_null())
            .filter(proposal_changes::Column::Distro.is_in(["ubuntu", "debian"]))
            .into_tuple()
            .all(&db.orm)
            .await?;
        for (distro, source, version) in rows {
            if let (Some(distro), Some(source)) = (distro, source) {
                wanted.insert((distro, source, version));
            }
        }
    }
    queue_missing(db, wanted, now).await
}

/// Queues a fetch for each of `wanted` that has no cache row yet.
pub async fn queue_missing(
    db: &Database,
    wanted: BTreeSet<Key>,
    now: DateTime<Utc>,
) -> anyhow::Result<usize> {
    if wanted.is_empty() {
        return Ok(0);
    }
    let sources: Vec<String> = wanted
        .iter()
        .map(|(_, s, _)| s.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut cached: HashSet<Key> = HashSet::new();
    for chunk in sources.chunks(500) {
        let rows: Vec<Key> = changelogs::Entity::rows()
            .select_only()
            .column(changelogs::Column::Distro)
            .column(changelogs::Column::Source)
            .column(changelogs::Column::Version)
            .filter(changelogs::Column::Source.is_in(chunk.to_vec()))
            .into_tuple()
            .all(&db.orm)
            .await?;
        cached.extend(rows);
    }
    let missing: Vec<Key> = wanted.into_iter().filter(|k| !cached.contains(k)).collect();
    if missing.is_empty() {
        return Ok(0);
    }
    // The jobs first: a job that finds no row makes it, so a failure between the two steps
    // never leaves a row pending with no fetch coming.
    let jobs: Vec<(String, FetchChangelog)> = missing
        .iter()
        .map(|(distro, source, version)| {
            let job = FetchChangelog {
                distro: distro.clone(),
                source: source.clone(),
                version: version.clone(),
                attempt: 0,
            };
            (job_key(&job), job)
        })
        .collect();
    Queue::new(db).push_unique_many(jobs).await?;
    let rows: Vec<changelogs::ActiveModel> = missing
        .iter()
        .map(|(distro, source, version)| pending_row(distro, source, version, now))
        .collect::<Result<_, _>>()?;
    for chunk in rows.chunks(200) {
        changelogs::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::columns([
                    changelogs::Column::Distro,
                    changelogs::Column::Source,
                    changelogs::Column::Version,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(&db.orm)
            .await?;
    }
    Ok(missing.len())
}

fn pending_row(
    distro: &str,
    source: &str,
    version: &str,
    now: DateTime<Utc>,
) -> Result<changelogs::ActiveModel, entities::json::Unwritable> {
    Ok(changelogs::ActiveModel {
        distro: Set(distro.to_owned()),
        source: Set(source.to_owned()),
        version: Set(version.to_owned()),
        status: Set(ChangelogStatus::Pending.into()),
        url: Set(None),
        entries: Set(JsonText::new(&Vec::<ChangelogEntry>::new())?),
        attempts: Set(0),
        first_attempt_at: Set(None),
        fetched_at: Set(None),
        updated_at: Set(now),
    })
}

/// Queues again the fetch of every stranded changelog ([`STRANDED_AFTER`]; at most 1,000 a
/// run), at the attempt it had reached, under a key of this hour: a job of that attempt still
/// coming after all finds the attempt made and does nothing. Returns how many were queued.
pub async fn requeue_stranded(db: &Database, now: DateTime<Utc>) -> anyhow::Result<usize> {
    let stranded: Vec<(String, String, String, i32)> = changelogs::Entity::rows()
        .select_only()
        .column(changelogs::Column::Distro)
        .column(changelogs::Column::Source)
        .column(changelogs::Column::Version)
        .column(changelogs::Column::Attempts)
        .filter(changelogs::Column::Status.eq(ChangelogStatus::Pending))
        .filter(changelogs::Column::UpdatedAt.lt(now - STRANDED_AFTER))
        .limit(1000)
        .into_tuple()
        .all(&db.orm)
        .await?;
    let hour = now.timestamp().div_euclid(3600);
    let jobs: Vec<(String, FetchChangelog)> = stranded
        .into_iter()
        .map(|(distro, source, version, attempt)| {
            let job = FetchChangelog {
                distro,
                source,
                version,
                attempt,
            };
            (format!("{}:again:{hour}", job_key(&job)), job)
        })
        .collect();
    let queued = jobs.len();
    if queued > 0 {
        Queue::new(db).push_unique_many(jobs).await?;
    }
    Ok(queued)
}

/// The cache row of `job`, made pending when there is none.
pub async fn row_for(
    db: &Database,
    job: &FetchChangelog,
    now: DateTime<Utc>,
) -> anyhow::Result<changelogs::Model> {
    let key = (job.distro.clone(), job.source.clone(), job.version.clone());
    if let Some(row) = changelogs::Entity::row(key.clone()).one(&db.orm).await? {
        return Ok(row);
    }
    changelogs::Entity::insert(pending_row(&job.distro, &job.source, &job.version, now)?)
        .on_conflict(
            OnConflict::columns([
                changelogs::Column::Distro,
                changelogs::Column::Source,
                changelogs::Column::Version,
            ])
            .do_nothing()
            .to_owned(),
        )
        .exec_without_returning(&db.orm)
        .await?;
    changelogs::Entity::row(key)
        .one(&db.orm)
        .await?
        .ok_or_else(|| anyhow::anyhow!("changelog cache row vanished"))
}

/// The cached changelogs of `keys`, for showing changes.
pub async fn lookup<C: sea_orm::ConnectionTrait>(
    db: &C,
    keys: &BTreeSet<Key>,
) -> Result<Vec<changelogs::Model>, sea_orm::DbErr> {
    let sources: Vec<String> = keys
        .iter()
        .map(|(_, s, _)| s.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let versions: Vec<String> = keys
        .iter()
        .map(|(_, _, v)| v.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut found = Vec::new();
    for chunk in sources.chunks(500) {
        let rows = changelogs::Entity::rows()
            .filter(changelogs::Column::Source.is_in(chunk.to_vec()))
            .filter(changelogs::Column::Version.is_in(versions.clone()))
            .all(db)
            .await?;
        found.extend(
            rows.into_iter().filter(|r| {
                keys.contains(&(r.distro.clone(), r.source.clone(), r.version.clone()))
            }),
        );
    }
    Ok(found)
}

/// Whether a change shows a changelog at all (see [`changelog::has_changelog`]).
pub fn key_of(c: &proposal_changes::Model) -> Option<Key> {
    if !changelog::has_changelog(&c.ecosystem, c.distro.as_deref(), c.source_name.as_deref()) {
        return None;
    }
    Some((
        c.distro.clone()?,
        c.source_name.clone()?,
        c.to_version.clone(),
    ))
}
