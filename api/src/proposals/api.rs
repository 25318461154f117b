//! Update proposals: the list, the full detail, and the decisions (approve, reject, snooze),
//! each answering the approval summary.
//!
//! Decisions run in one write transaction that locks the proposal first (a row lock on
//! Postgres; SQLite's single writer), so concurrent approvals by several people are counted
//! one at a time: none is lost, none counts twice, and the status moves exactly once.

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use domain::{
    ProposalKind, ProposalStatus,
    proposals::{
        self as lifecycle,
        decide::{self, DecisionError, Refusal},
    },
    severity,
};
use entities::{
    accounts,
    json::{self, Advisory, HostImpact, JsonText},
    known_exploited, proposal_changes, proposal_decisions, proposal_hosts, proposals,
};
use platform::ids::{AccountId, HostId, PolicyId, ProposalId};
use poem_openapi::{Enum, Object, OpenApi, param::Path, param::Query, payload::Json};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::impact::{HostImpactView, ImpactSummaryView};
use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, StateRefusal},
    http::error::{OrgConflictErrors, OrgInputErrors, OrgReadErrors},
    http::paging::{Order, Page, Paging},
    http::rights::{Operate, ReadFleet},
    http::tags::Tag,
    http::text::{Reason, Text},
    identity::audit::Entry,
};
use entities::scope::{OrgScope, Untenanted};

/// Most hosts the detail lists in `targets`.
pub const MAX_TARGETS: u64 = 100;
/// Longest reason a decision may carry.
pub const MAX_REASON: usize = 2_000;
/// Furthest ahead a snooze may reach.
pub const MAX_SNOOZE_DAYS: i64 = 365;

/// The organization's proposal `id`, locked for a decision (a row lock on Postgres; SQLite's
/// write transaction already excludes other writers); `not-found` for any other.
async fn lock_proposal(
    state: &AppState,
    txn: &DatabaseTransaction,
    scope: OrgScope,
    id: ProposalId,
) -> Result<proposals::Model, ApiError> {
    let mut query = scope.row(id);
    if state.db.kind() == platform::config::DatabaseKind::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await?.ok_or(ApiError::NotFound)
}

/// The approval summary: what approve, reject and snooze answer.
#[derive(Object)]
pub struct ApprovalSummary {
    /// `prp_` id.
    pub id: ProposalId,
    /// The proposal's status now: `open`, `approved`, `scheduled`, `applying`, `applied`,
    /// `partially_applied`, `failed`, `rejected`, `snoozed`, `superseded` or `closed`; values
    /// this build does not know are passed through.
    pub status: String,
    /// Distinct people who approved. A rejected proposal keeps the count it had.
    pub approvals: i64,
    /// Approvals the policy asks for.
    pub required: i64,
    /// Approvals still needed: zero once there are enough, and zero for a final proposal.
    pub outstanding: i64,
    /// When the window opens; present only when status is `scheduled`.
    #[oai(skip_serializing_if_is_none)]
    pub scheduled_for: Option<DateTime<Utc>>,
}

fn summary(p: &proposals::Model) -> ApprovalSummary {
    ApprovalSummary {
        id: ProposalId::from(p.id),
        status: p.status.clone(),
        approvals: i64::from(p.approvals),
        required: i64::from(p.required),
        outstanding: lifecycle::outstanding(p),
        scheduled_for: (ProposalStatus::of(p) == ProposalStatus::Scheduled)
            .then_some(p.scheduled_for)
            .flatten(),
    }
}

/// The policy a proposal was opened under, at the version it had then.
#[derive(Object)]
pub struct PolicyRef {
    /// `pol_` id.
    pub id: PolicyId,
    pub name: String,
    pub version: i32,
}

/// A proposal in a list.
#[derive(Object)]
pub struct ProposalItem {
    pub id: ProposalId,
    pub number: i64,
    /// `package_update`, `security_update` (every change fixes an advisory) or `dist_upgrade`.
    pub kind: String,
    pub status: String,
    pub title: String,
    pub approvals: i64,
    pub required: i64,
    pub outstanding: i64,
    pub hosts: i64,
    pub packages: i64,
    pub known_exploited: bool,
    /// Null when nothing in the proposal was rated (not the same as harmless).
    #[oai(nullable)]
    pub max_severity: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub scheduled_for: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub snoozed_until: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub policy: Option<PolicyRef>,
}

fn policy_ref(p: &proposals::Model) -> Option<PolicyRef> {
    Some(PolicyRef {
        id: PolicyId::from(p.policy_id?),
        name: p.policy_name.clone()?,
        version: p.policy_version?,
    })
}

fn item(p: proposals::Model) -> ProposalItem {
    let status = ProposalStatus::of(&p);
    ProposalItem {
        id: ProposalId::from(p.id),
        outstanding: lifecycle::outstanding(&p),
        policy: policy_ref(&p),
        number: p.number,
        kind: p.kind,
        title: p.title,
        approvals: i64::from(p.approvals),
        required: i64::from(p.required),
        hosts: p.hosts,
        packages: p.packages,
        known_exploited: p.known_exploited,
        max_severity: p.max_severity,
        created_at: p.created_at,
        updated_at: p.updated_at,
        scheduled_for: (status == ProposalStatus::Scheduled)
            .then_some(p.scheduled_for)
            .flatten(),
        snoozed_until: (status == ProposalStatus::Snoozed)
            .then_some(p.snoozed_until)
            .flatten(),
        status: p.status,
    }
}

#[derive(Object)]
pub struct ProposalRelease {
    #[oai(nullable)]
    pub codename: Option<String>,
    #[oai(nullable)]
    pub version: Option<String>,
}

/// A release upgrade: the distribution (lowercase, as on a host) and both releases.
#[derive(Object)]
pub struct ProposalReleaseUpgrade {
    pub distro: String,
    pub from: ProposalRelease,
    pub to: ProposalRelease,
}

#[derive(Object)]
pub struct AdvisoryView {
    /// `source:external_id`, stable across proposals.
    pub id: String,
    pub external_id: String,
    pub source: String,
    /// low, medium, high or critical; null when the advisory is not rated.
    #[oai(nullable)]
    pub severity: Option<String>,
    #[oai(nullable)]
    pub title: Option<String>,
    #[oai(nullable)]
    pub url: Option<String>,
    pub cves: Vec<String>,
    /// A CVE it lists is on a public known-exploited catalogue (never raises severity).
    pub known_exploited: bool,
}

/// One changelog entry, as the archive's changelog states it (interface.md's fields, with the
/// CVE ids the text names).
#[derive(Object)]
#[oai(rename = "ChangelogEntry")]
pub struct ChangelogEntryView {
    /// The Debian version the entry is for.
    pub version: String,
    /// From the entry's trailer; null when it has none that can be read.
    #[oai(nullable)]
    pub date: Option<DateTime<Utc>>,
    /// The distributions the entry's header names (`noble-security`), space-separated; null
    /// when it names none.
    #[oai(nullable)]
    pub distribution: Option<String>,
    /// `Name <email>` from the trailer; null when it has none.
    #[oai(nullable)]
    pub maintainer: Option<String>,
    /// low, medium, high, emergency or critical; null when not stated.
    #[oai(nullable)]
    pub urgency: Option<String>,
    /// The entry's text (its change lines).
    pub changes: String,
    /// CVE ids the text names, each once.
    pub cves: Vec<String>,
}

/// Whether a change's changelog has been read (interface.md, decisions §16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum ChangelogStatus {
    /// Read; `entries` holds what changed.
    Found,
    /// Not fetched yet (a fetch failing with a 5xx or a timeout is retried for six hours).
    Pending,
    /// The archive has none for this version, or it could not be read.
    Missing,
}

/// A change's Debian-family changelog (decisions §16), fetched once per distribution, source
/// package and target version for every organization. `status` is `found`, `pending` (not
/// fetched yet; a fetch that fails with a 5xx or a timeout is retried for six hours) or
/// `missing` (the archive has none for this version, or it could not be read). `url` is the
/// address it was read from (null unless found). `entries`: those newer than `from_version` up
/// to and including `to_version` (dpkg order), newest first, at most 15; empty unless found.
#[derive(Object)]
pub struct Changelog {
    pub status: ChangelogStatus,
    /// Where it was read from; null unless `found`.
    #[oai(nullable)]
    pub url: Option<String>,
    pub entries: Vec<ChangelogEntryView>,
}

impl Changelog {
    fn of(cached: Option<&entities::changelogs::Model>, from: &str, to: &str) -> Changelog {
        use domain::intel::changelog::{ChangelogStatus as Stored, between};
        let Some(row) = cached else {
            return Changelog {
                status: ChangelogStatus::Pending,
                url: None,
                entries: Vec::new(),
            };
        };
        let status = Stored::from(row.status.as_str());
        let entries = if status == Stored::Found {
            // A cached list that cannot be read shows nothing rather than failing the detail.
            between(row.entries.read().unwrap_or_default(), from, to)
        } else {
            Vec::new()
        };
        Changelog {
            url: (status == Stored::Found).then(|| row.url.clone()).flatten(),
            status: match status {
                Stored::Found => ChangelogStatus::Found,
                Stored::Pending => ChangelogStatus::Pending,
                _ => ChangelogStatus::Missing,
            },
            entries: entries
                .into_iter()
                .map(|e| ChangelogEntryView {
                    date: e
                        .date
                        .as_deref()
                        .and_then(|d| DateTime::parse_from_rfc3339(d).ok())
                        .map(|d| d.with_timezone(&Utc)),
                    version: e.version,
                    distribution: e.distribution,
                    maintainer: e.author,
                    urgency: e.urgency,
                    changes: e.text,
                    cves: e.cves,
                })
                .collect(),
        }
    }
}

/// One change: a package from one version to another, on `hosts` of the proposal's hosts.
#[derive(Object)]
pub struct ChangeView {
    pub package: String,
    /// deb, rpm, apk or pacman.
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
    pub hosts: i64,
    pub advisories: Vec<AdvisoryView>,
    /// Absent where there is none to fetch: no source package reported, or a distribution
    /// without published changelogs (Ubuntu and Debian packages have one).
    #[oai(skip_serializing_if_is_none)]
    pub changelog: Option<Changelog>,
}

#[derive(Object)]
pub struct Person {
    /// `usr_` id.
    pub id: AccountId,
    pub email: String,
    #[oai(nullable)]
    pub name: Option<String>,
}

#[derive(Object)]
pub struct DecisionView {
    pub at: DateTime<Utc>,
    pub by: Person,
    /// approved, rejected or snoozed.
    pub decision: String,
    /// Why, as given; empty when no reason was given.
    pub reason: String,
}

#[derive(Object)]
pub struct Target {
    /// `hst_` id.
    pub id: HostId,
    pub hostname: String,
    #[oai(nullable)]
    pub display_name: Option<String>,
    /// What the proposal's changes would do to this host (decisions §21).
    pub impact: HostImpactView,
    /// The rollout wave the host is in (0-based, into `rollout.waves`); null until the proposal
    /// goes ahead (decisions §20).
    #[oai(nullable)]
    pub wave: Option<u32>,
}

/// A proposal in full.
#[derive(Object)]
pub struct ProposalDetail {
    pub id: ProposalId,
    /// Human-facing, per organization, gap-free, never reused.
    pub number: i64,
    /// `package_update`, `security_update` (every change fixes an advisory) or `dist_upgrade`.
    pub kind: String,
    /// A status this build does not know is passed through as stored.
    pub status: String,
    pub title: String,
    pub approvals: i64,
    pub required: i64,
    /// Zero for any final proposal.
    pub outstanding: i64,
    /// Exact count of hosts.
    pub hosts: i64,
    /// Distinct packages.
    pub packages: i64,
    pub auto_merge: bool,
    /// Something it fixes is on a public known-exploited catalogue; shown beside severity,
    /// never raising it.
    pub known_exploited: bool,
    /// Null means nothing in the proposal was rated (which is not the same as harmless).
    #[oai(nullable)]
    pub max_severity: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub closed_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub scheduled_for: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub snoozed_until: Option<DateTime<Utc>>,
    /// The proposal that replaced this one.
    #[oai(skip_serializing_if_is_none)]
    pub superseded_by: Option<ProposalId>,
    /// never, immediate (reboot hosts that need it) or in_window (the same, only inside the
    /// maintenance window), as the rule said when opened. An agent reboots only if its own
    /// local configuration permits.
    pub reboot: String,
    #[oai(skip_serializing_if_is_none)]
    pub policy: Option<PolicyRef>,
    /// Present for kind `dist_upgrade` only.
    #[oai(skip_serializing_if_is_none)]
    pub release_upgrade: Option<ProposalReleaseUpgrade>,
    /// Grouped by package and both versions.
    pub changes: Vec<ChangeView>,
    /// Oldest first.
    pub decisions: Vec<DecisionView>,
    /// At most 100 hosts; `hosts` is always exact.
    pub targets: Vec<Target>,
    /// Whether `targets` lists every host.
    pub targets_complete: bool,
    /// What approving would do to the hosts (decisions §21): how many reboot, which units
    /// restart and which packages are installed or removed, on how many hosts each; hosts
    /// whose agents did not say are counted in `hosts_unknown`. Each host's own is in
    /// `targets` and `GET …/proposals/{proposal_id}/impact`.
    pub impact: ImpactSummaryView,
    /// What an approver should not miss (decisions §21), one sentence each: every package a
    /// change would remove, and every unit that would restart on more than half the
    /// proposal's hosts at once (at most 10 of each named, then one line with how many
    /// more). Empty when there is nothing to call out, or nothing is known. For example
    /// `["Removes the package libssl3 on 37 of 40 hosts.", "Restarts ssh.service on 37 of 40
    /// hosts, more than half of them at once."]`.
    pub warnings: Vec<String>,
    /// Why approving now would fail preflight (decisions §7), one line per host that cannot
    /// take the change (held package, offline too long, decommissioned, agent without
    /// `apply_updates`); empty when it would pass, and for a proposal that is no longer open
    /// or snoozed.
    pub preflight: Vec<String>,
    /// How it goes out (decisions §20): its waves and where each stands, once it has gone
    /// ahead (approved or scheduled); absent before. A proposal whose policy had no rollout
    /// goes out as one wave, `rest`, of every host.
    #[oai(skip_serializing_if_is_none)]
    pub rollout: Option<super::rollouts::ProposalRollout>,
}

impl From<json::Release> for ProposalRelease {
    fn from(r: json::Release) -> ProposalRelease {
        ProposalRelease {
            codename: r.codename,
            version: r.version,
        }
    }
}

impl From<json::ReleaseUpgrade> for ProposalReleaseUpgrade {
    fn from(r: json::ReleaseUpgrade) -> ProposalReleaseUpgrade {
        ProposalReleaseUpgrade {
            distro: r.distro,
            from: r.from.into(),
            to: r.to.into(),
        }
    }
}

impl AdvisoryView {
    /// A stored advisory as shown; `exploited` holds the CVEs on the known-exploited
    /// catalogue.
    pub(crate) fn new(a: Advisory, exploited: &HashSet<String>) -> AdvisoryView {
        AdvisoryView {
            id: format!("{}:{}", a.source, a.external_id),
            known_exploited: a.cves.iter().any(|cve| exploited.contains(cve)),
            severity: a
                .severity
                .as_deref()
                .and_then(severity::rank)
                .map(|r| severity::name(r).to_owned()),
            external_id: a.external_id,
            source: a.source,
            title: a.title,
            url: a.url,
            cves: a.cves,
        }
    }
}

/// The shared cache's changelogs of `keys` (distribution, source package, version).
async fn cached_changelogs<C: ConnectionTrait>(
    db: &C,
    keys: &BTreeSet<domain::intel::cache::Key>,
) -> Result<HashMap<domain::intel::cache::Key, entities::changelogs::Model>, ApiError> {
    let rows = domain::intel::cache::lookup(db, keys).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            (
                (row.distro.clone(), row.source.clone(), row.version.clone()),
                row,
            )
        })
        .collect())
}

async fn detail<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    p: proposals::Model,
    now: DateTime<Utc>,
) -> Result<ProposalDetail, ApiError> {
    let preflight = if ProposalStatus::UNDECIDED.contains(&ProposalStatus::of(&p)) {
        domain::proposals::preflight::preflight(db, &p, now).await?
    } else {
        Vec::new()
    };
    let changes = proposal_changes::Entity::rows()
        .filter(proposal_changes::Column::ProposalId.eq(p.id))
        .order_by_asc(proposal_changes::Column::Package)
        .order_by_asc(proposal_changes::Column::FromVersion)
        .order_by_asc(proposal_changes::Column::ToVersion)
        .all(db)
        .await?;
    let parsed: Vec<Vec<Advisory>> = changes
        .iter()
        .map(|c| c.advisories.read())
        .collect::<Result<_, _>>()?;
    let cves: BTreeSet<String> = parsed
        .iter()
        .flatten()
        .flat_map(|a| a.cves.iter().cloned())
        .collect();
    let mut exploited = HashSet::new();
    let cves: Vec<String> = cves.into_iter().collect();
    for chunk in cves.chunks(500) {
        let found: Vec<String> = known_exploited::Entity::rows()
            .select_only()
            .column(known_exploited::Column::Cve)
            .filter(known_exploited::Column::Cve.is_in(chunk.to_vec()))
            .into_tuple()
            .all(db)
            .await?;
        exploited.extend(found);
    }
    let keys: BTreeSet<domain::intel::cache::Key> = changes
        .iter()
        .filter_map(domain::intel::cache::key_of)
        .collect();
    let cached = cached_changelogs(db, &keys).await?;
    let changes = changes
        .into_iter()
        .zip(parsed)
        .map(|(c, advisories)| ChangeView {
            changelog: domain::intel::cache::key_of(&c)
                .map(|key| Changelog::of(cached.get(&key), &c.from_version, &c.to_version)),
            package: c.package,
            ecosystem: c.ecosystem,
            from_version: c.from_version,
            to_version: c.to_version,
            hosts: c.hosts,
            advisories: advisories
                .into_iter()
                .map(|a| AdvisoryView::new(a, &exploited))
                .collect(),
        })
        .collect();

    let decided = proposal_decisions::Entity::rows()
        .filter(proposal_decisions::Column::ProposalId.eq(p.id))
        .order_by_asc(proposal_decisions::Column::At)
        .order_by_asc(proposal_decisions::Column::Id)
        .all(db)
        .await?;
    let people: HashMap<Uuid, accounts::Model> = accounts::Entity::rows()
        .filter(accounts::Column::Id.is_in(decided.iter().map(|d| d.account_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|a| (a.id, a))
        .collect();
    let decisions = decided
        .into_iter()
        .map(|d| {
            let account = people.get(&d.account_id);
            DecisionView {
                at: d.at,
                by: Person {
                    id: AccountId::from(d.account_id),
                    email: account.map(|a| a.email.clone()).unwrap_or_default(),
                    name: account.and_then(|a| a.name.clone()),
                },
                decision: d.decision,
                reason: d.reason.unwrap_or_default(),
            }
        })
        .collect();

    let target_rows: Vec<(Uuid, Option<JsonText<HostImpact>>, Option<i32>)> =
        proposal_hosts::Entity::rows()
            .select_only()
            .column(proposal_hosts::Column::HostId)
            .column(proposal_hosts::Column::Impact)
            .column(proposal_hosts::Column::Wave)
            .filter(proposal_hosts::Column::ProposalId.eq(p.id))
            .order_by_asc(proposal_hosts::Column::HostId)
            .limit(MAX_TARGETS + 1)
            .into_tuple()
            .all(db)
            .await?;
    let targets_complete = target_rows.len() as u64 <= MAX_TARGETS;
    let mut impacts: HashMap<Uuid, Option<JsonText<HostImpact>>> = HashMap::new();
    let mut waves: HashMap<Uuid, Option<i32>> = HashMap::new();
    let listed: Vec<Uuid> = target_rows
        .into_iter()
        .take(MAX_TARGETS as usize)
        .map(|(id, impact, wave)| {
            impacts.insert(id, impact);
            waves.insert(id, wave);
            id
        })
        .collect();
    let mut names = super::impact::host_names(db, scope, listed.iter().copied()).await?;
    let targets = listed
        .into_iter()
        .filter_map(|id| {
            let (hostname, display_name) = names.remove(&id)?;
            Some(Target {
                id: HostId::from(id),
                hostname,
                display_name,
                impact: HostImpactView::of(impacts.get(&id).and_then(Option::as_ref)),
                wave: waves
                    .get(&id)
                    .copied()
                    .flatten()
                    .and_then(|w| u32::try_from(w).ok()),
            })
        })
        .collect();
    let (impact, warnings) = super::impact::summary(db, &p).await?;
    let rollout = domain::proposals::rollout::view(db, p.id)
        .await?
        .map(|(row, waves)| super::rollouts::view(&row, waves));

    Ok(ProposalDetail {
        id: ProposalId::from(p.id),
        outstanding: lifecycle::outstanding(&p),
        policy: policy_ref(&p),
        release_upgrade: match (
            &p.release_upgrade,
            ProposalKind::from(p.kind.as_str()) == ProposalKind::DistUpgrade,
        ) {
            (Some(column), true) => Some(column.read()?.into()),
            _ => None,
        },
        superseded_by: p.superseded_by.map(ProposalId::from),
        scheduled_for: (ProposalStatus::of(&p) == ProposalStatus::Scheduled)
            .then_some(p.scheduled_for)
            .flatten(),
        snoozed_until: (ProposalStatus::of(&p) == ProposalStatus::Snoozed)
            .then_some(p.snoozed_until)
            .flatten(),
        number: p.number,
        kind: p.kind,
        title: p.title,
        approvals: i64::from(p.approvals),
        required: i64::from(p.required),
        hosts: p.hosts,
        packages: p.packages,
        auto_merge: p.auto_merge,
        known_exploited: p.known_exploited,
        max_severity: p.max_severity,
        created_at: p.created_at,
        updated_at: p.updated_at,
        closed_at: p.closed_at,
        reboot: p.reboot,
        status: p.status,
        changes,
        decisions,
        targets,
        targets_complete,
        impact,
        warnings,
        preflight,
        rollout,
    })
}

fn reason(raw: Option<&Text>, required: bool) -> Result<Option<String>, ApiError> {
    let text = raw.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    match text {
        None if required => Err(ApiError::invalid("reason is required")),
        Some(t) if t.chars().count() > MAX_REASON => Err(ApiError::invalid(format!(
            "reason must be at most {MAX_REASON} characters"
        ))),
        other => Ok(other),
    }
}

/// A refused decision as the problem it answers (decisions §1).
fn refused(err: DecisionError) -> ApiError {
    match err {
        DecisionError::Db(err) => err.into(),
        DecisionError::Refused(refusal) => {
            let kind = match &refusal {
                Refusal::AlreadyDecided => StateRefusal::AlreadyDecided,
                Refusal::NotDecidable { .. } => StateRefusal::NotDecidable,
                Refusal::NotExecutable(_) => StateRefusal::NotExecutable,
                Refusal::PreflightFailed(_) => StateRefusal::PreflightFailed,
            };
            ApiError::state(kind, refusal.to_string())
        }
    }
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct RejectBody {
    /// Why (1–2,000 characters).
    pub reason: Reason,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct SnoozeBody {
    /// When the proposal reopens: in the future, at most a year ahead.
    pub until: DateTime<Utc>,
    /// Why (at most 2,000 characters).
    pub reason: Option<Text>,
}

/// Filter on the list: proposals at least this severe.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum SeverityFilter {
    Low,
    Medium,
    High,
    Critical,
}

type Decision = OrgConflictErrors;

pub struct ProposalsApi;

#[OpenApi(tag = "Tag::Proposals")]
impl ProposalsApi {
    /// The organization's proposals, newest first. Filters combine (AND): `status`, `kind`,
    /// `severity` (proposals whose `max_severity` is at least this), `known_exploited`,
    /// `host` (proposals that include this `hst_` host), `policy` (`pol_`). An id filter
    /// that is not an id of this organization matches nothing.
    #[oai(
        path = "/v1/orgs/:org/proposals",
        method = "get",
        operation_id = "listProposals"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// Only proposals with this status.
        status: Query<Option<String>>,
        /// Only proposals of this kind.
        kind: Query<Option<String>>,
        /// Only proposals at least this severe.
        severity: Query<Option<SeverityFilter>>,
        /// Only proposals that are (or are not) known-exploited.
        known_exploited: Query<Option<bool>>,
        /// Only proposals that include this host (`hst_`).
        host: Query<Option<String>>,
        /// Only proposals of this policy (`pol_`).
        policy: Query<Option<String>>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<ProposalItem>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let mut query = org.scope().rows::<proposals::Entity>();
        if let Some(status) = status.0.as_deref() {
            query = query.filter(proposals::Column::Status.eq(status));
        }
        if let Some(kind) = kind.0.as_deref() {
            query = query.filter(proposals::Column::Kind.eq(kind));
        }
        if let Some(severity) = severity.0 {
            let at_least: Vec<&str> = match severity {
                SeverityFilter::Low => vec!["low", "medium", "high", "critical"],
                SeverityFilter::Medium => vec!["medium", "high", "critical"],
                SeverityFilter::High => vec!["high", "critical"],
                SeverityFilter::Critical => vec!["critical"],
            };
            query = query.filter(proposals::Column::MaxSeverity.is_in(at_least));
        }
        if let Some(known) = known_exploited.0 {
            query = query.filter(proposals::Column::KnownExploited.eq(known));
        }
        if let Some(raw) = host.0.as_deref() {
            let host_id = HostId::parse(raw).map_or(Uuid::nil(), HostId::uuid);
            query = query.filter(
                proposals::Column::Id.in_subquery(
                    proposal_hosts::Entity::column_of(proposal_hosts::Column::ProposalId)
                        .and_where(proposal_hosts::Column::HostId.eq(host_id))
                        .to_owned(),
                ),
            );
        }
        if let Some(raw) = policy.0.as_deref() {
            let policy_id = PolicyId::parse(raw).map_or(Uuid::nil(), PolicyId::uuid);
            query = query.filter(proposals::Column::PolicyId.eq(policy_id));
        }
        let rows = paging
            .fetch(&state.db.orm, query, Order::NewestFirst)
            .await?;
        Ok(Json(rows.page(item)))
    }

    /// A proposal in full: its changes grouped by package and both versions, with advisories;
    /// who decided what; what approving would do to its hosts (`impact`, `warnings`); up to
    /// 100 of its hosts, each with its own impact and rollout wave; and, once it has gone
    /// ahead, its rollout (decisions §20).
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id",
        method = "get",
        operation_id = "getProposal"
    )]
    async fn get(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
    ) -> Result<Json<ProposalDetail>, OrgReadErrors> {
        let scope = org.scope();
        let p = scope.get(&state.db.orm, *proposal_id).await?;
        Ok(Json(
            detail(&state.db.orm, scope, p, state.clock.now()).await?,
        ))
    }

    /// Approve a proposal. No body, and no schedule or rollout field is accepted (a request
    /// with a body is 400 `invalid-request`). Each person
    /// approves once (`already-decided` the second time, from any session or token); a
    /// proposal that is final, snoozed or already going ahead is `not-decidable`; a host that
    /// cannot take the change fails `preflight-failed`; a release upgrade on a distribution
    /// no agent carries out yet is `not-executable`. With enough approvals the proposal goes
    /// ahead: `approved`, or `scheduled` for the window's next opening when its rule says
    /// `asap_in_window` and the window is shut (approving agrees to the change, not the hour).
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/approve",
        method = "post",
        operation_id = "approveProposal"
    )]
    async fn approve(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        request: &poem::Request,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
    ) -> Result<Json<ApprovalSummary>, OrgConflictErrors> {
        let declares_body = request.header("transfer-encoding").is_some()
            || request
                .header("content-length")
                .is_some_and(|n| n.trim() != "0");
        if declares_body {
            return Err(ApiError::invalid(
                "approve takes no body: no schedule or rollout field is accepted",
            )
            .into());
        }
        let now = state.clock.now();
        let account_id = org.caller.account_id();
        let txn = state.db.begin_write().await?;
        let p = lock_proposal(&state, &txn, org.scope(), *proposal_id).await?;
        let p = decide::approve(&txn, p, account_id, now)
            .await
            .map_err(refused)?;
        Entry::new("proposal.approval_given")
            .org(org.org_id())
            .by(&org.caller)
            .target(ProposalId::from(p.id))
            .details(serde_json::json!({ "approvals": p.approvals, "status": p.status }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        if domain::ProposalStatus::from(p.status.as_str()) != domain::ProposalStatus::Open {
            domain::notifications::jobs::dispatch_soon(&state.queue).await;
        }
        Ok(Json(summary(&p)))
    }

    /// Reject a proposal with a reason. It keeps the approvals it had. An open or scheduled
    /// proposal can be rejected; one that is final, snoozed or already applying is
    /// `not-decidable`.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/reject",
        method = "post",
        operation_id = "rejectProposal"
    )]
    async fn reject(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
        body: Json<RejectBody>,
    ) -> Result<Json<ApprovalSummary>, Decision> {
        let why = reason(Some(&body.reason.0), true)?;
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let p = lock_proposal(&state, &txn, org.scope(), *proposal_id).await?;
        let p = decide::reject(&txn, p, org.caller.account_id(), why, now)
            .await
            .map_err(refused)?;
        txn.commit().await?;
        Ok(Json(summary(&p)))
    }

    /// Snooze an open proposal until a time in the future (at most a year ahead); it reopens
    /// then. A time in the past is 400 `invalid-request`; a proposal that is not open is
    /// `not-decidable`.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/snooze",
        method = "post",
        operation_id = "snoozeProposal"
    )]
    async fn snooze(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
        body: Json<SnoozeBody>,
    ) -> Result<Json<ApprovalSummary>, Decision> {
        let now = state.clock.now();
        if body.until <= now {
            return Err(ApiError::invalid("until must be in the future").into());
        }
        if body.until > now + Duration::days(MAX_SNOOZE_DAYS) {
            return Err(ApiError::invalid("until must be at most a year ahead").into());
        }
        let why = reason(body.reason.as_ref(), false)?;
        let txn = state.db.begin_write().await?;
        let p = lock_proposal(&state, &txn, org.scope(), *proposal_id).await?;
        let p = decide::snooze(&txn, p, org.caller.account_id(), body.until, why, now)
            .await
            .map_err(refused)?;
        txn.commit().await?;
        Ok(Json(summary(&p)))
    }
}
