//! The CISA known-exploited-vulnerabilities catalogue (decisions §16): the snapshot the
//! repository ships (`domain/data/kev/`, public domain), loaded on first start so it works offline,
//! and the daily refresh from `KEV_URL`. A CVE on it marks what fixes it `known_exploited`
//! (never raising severity); a CVE newly on it makes the policies of open proposals that fix
//! it evaluate again, which announces `advisory.known_exploited` once per organization and CVE
//! (`policy::evaluate`).

use entities::scope::{AllOrgs, Untenanted};
use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use entities::{json::Advisory, known_exploited, proposal_changes, proposals};
use platform::db::Database;
use sea_orm::{
    ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set, sea_query::OnConflict,
};
use uuid::Uuid;

use crate::status::ProposalStatus;

/// The snapshot shipped with the service.
pub const SNAPSHOT: &[u8] = include_bytes!("../../data/kev/known_exploited_vulnerabilities.json");

/// The most of a feed that is read.
pub const MAX_FEED_BYTES: usize = 32 * 1024 * 1024;

/// One catalogue record as kept: the CVE and the day it was added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub cve: String,
    pub added_at: DateTime<Utc>,
}

/// Why a catalogue could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum BadCatalogue {
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("no `vulnerabilities` array")]
    NoList,
}

fn valid_cve(id: &str) -> bool {
    let mut parts = id.split('-');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some("CVE"), Some(year), Some(number), None)
            if year.len() == 4
                && year.bytes().all(|b| b.is_ascii_digit())
                && (4..=19).contains(&number.len())
                && number.bytes().all(|b| b.is_ascii_digit())
    )
}

/// The records of a catalogue (the CISA JSON feed). A record without a valid `cveID` or
/// `dateAdded` is skipped with a warning; the rest are kept.
pub fn parse(body: &[u8]) -> Result<Vec<Record>, BadCatalogue> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(BadCatalogue::NotJson)?;
    let list = value
        .get("vulnerabilities")
        .and_then(|v| v.as_array())
        .ok_or(BadCatalogue::NoList)?;
    let mut records = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let cve = item.get("cveID").and_then(|v| v.as_str()).map(str::trim);
        let added = item
            .get("dateAdded")
            .and_then(|v| v.as_str())
            .and_then(|d| NaiveDate::parse_from_str(d.trim(), "%Y-%m-%d").ok())
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| Utc.from_utc_datetime(&d));
        match (cve, added) {
            (Some(cve), Some(added_at)) if valid_cve(cve) => records.push(Record {
                cve: cve.to_owned(),
                added_at,
            }),
            _ => tracing::warn!(
                index,
                cve = cve.unwrap_or("-"),
                "known-exploited catalogue record skipped: no valid cveID or dateAdded"
            ),
        }
    }
    Ok(records)
}

/// Whether the catalogue has never been loaded.
pub async fn is_empty(db: &Database) -> anyhow::Result<bool> {
    Ok(known_exploited::Entity::rows()
        .limit(1)
        .count(&db.orm)
        .await?
        == 0)
}

/// Stores the records not stored yet and answers their CVEs.
pub async fn store(db: &Database, records: Vec<Record>) -> anyhow::Result<BTreeSet<String>> {
    let mut known: HashSet<String> = HashSet::new();
    let ids: Vec<String> = records.iter().map(|r| r.cve.clone()).collect();
    for chunk in ids.chunks(500) {
        let found: Vec<String> = known_exploited::Entity::rows()
            .select_only()
            .column(known_exploited::Column::Cve)
            .filter(known_exploited::Column::Cve.is_in(chunk.to_vec()))
            .into_tuple()
            .all(&db.orm)
            .await?;
        known.extend(found);
    }
    let mut added = BTreeSet::new();
    let rows: Vec<known_exploited::ActiveModel> = records
        .into_iter()
        .filter(|r| !known.contains(&r.cve) && added.insert(r.cve.clone()))
        .map(|r| known_exploited::ActiveModel {
            cve: Set(r.cve),
            added_at: Set(r.added_at),
        })
        .collect();
    for chunk in rows.chunks(500) {
        known_exploited::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::column(known_exploited::Column::Cve)
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&db.orm)
            .await?;
    }
    Ok(added)
}

/// Loads the shipped snapshot when the catalogue is empty; answers the CVEs added.
pub async fn load_snapshot_if_empty(db: &Database) -> anyhow::Result<BTreeSet<String>> {
    if !is_empty(db).await? {
        return Ok(BTreeSet::new());
    }
    let records = parse(SNAPSHOT)?;
    let added = store(db, records).await?;
    tracing::info!(
        cves = added.len(),
        "loaded the shipped known-exploited catalogue snapshot"
    );
    Ok(added)
}

/// The policies whose undecided proposals fix one of `cves`: they evaluate again, so the
/// proposals show `known_exploited` and the event is announced.
pub async fn policies_fixing(db: &Database, cves: &BTreeSet<String>) -> anyhow::Result<Vec<Uuid>> {
    if cves.is_empty() {
        return Ok(Vec::new());
    }
    let open: Vec<(Uuid, Option<Uuid>)> = AllOrgs::rows::<proposals::Entity>()
        .select_only()
        .column(proposals::Column::Id)
        .column(proposals::Column::PolicyId)
        .filter(proposals::Column::Status.is_in(ProposalStatus::UNDECIDED))
        .into_tuple()
        .all(&db.orm)
        .await?;
    let mut policies = BTreeSet::new();
    for chunk in open.chunks(200) {
        let ids: Vec<Uuid> = chunk.iter().map(|(id, _)| *id).collect();
        let rows: Vec<(Uuid, entities::json::JsonText<Vec<Advisory>>)> =
            proposal_changes::Entity::rows()
                .select_only()
                .column(proposal_changes::Column::ProposalId)
                .column(proposal_changes::Column::Advisories)
                .filter(proposal_changes::Column::ProposalId.is_in(ids))
                .into_tuple()
                .all(&db.orm)
                .await?;
        for (proposal, advisories) in rows {
            let Ok(advisories) = advisories.read() else {
                continue;
            };
            let hit = advisories
                .iter()
                .any(|a| a.cves.iter().any(|c| cves.contains(c)));
            if hit && let Some((_, Some(policy))) = chunk.iter().find(|(id, _)| *id == proposal) {
                policies.insert(*policy);
            }
        }
    }
    Ok(policies.into_iter().collect())
}
