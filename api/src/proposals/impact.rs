//! Impact before approval (decisions §21): what a proposal's changes would do to its hosts, as
//! their agents worked it out. The summary and warnings are part of the proposal detail (read
//! from one stored row, written when the evaluation writes the proposal's hosts); this module
//! has their shapes and the per-host view, paged.

use std::collections::HashMap;

use entities::{
    hosts,
    json::{HostImpact, ImpactCount, ImpactSummary, JsonText},
    proposal_hosts, proposal_impacts, proposals,
};
use platform::ids::{HostId, ProposalId};
use poem_openapi::{Object, OpenApi, param::Path, param::Query, payload::Json, types::Example};
use sea_orm::{ColumnTrait, ConnectionTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgInputErrors},
    http::paging::{Order, Page, Paging},
    http::rights::ReadFleet,
    http::tags::Tag,
};
use entities::scope::{OrgScope, Untenanted};

/// A systemd unit and on how many of the proposal's hosts it would restart.
#[derive(Object)]
pub struct UnitRestarts {
    /// e.g. `nginx.service`.
    pub unit: String,
    pub hosts: i64,
}

/// A package and on how many of the proposal's hosts it would be installed or removed.
#[derive(Object)]
pub struct PackageHosts {
    pub name: String,
    pub hosts: i64,
}

/// What approving the proposal would do to its hosts, as their agents worked it out before
/// approval (decisions §21): each agent simulates every update with its package manager
/// (`apt-get -s`, `dnf --assumeno`) and looks for units whose running processes use the files
/// a package ships. Worked out whenever the proposal's hosts are (each check-in that changes a
/// host's updates), so it is as fresh as the proposal's host list.
///
/// A host whose agent did not say what some change would do (an older or third-party agent,
/// or a simulation it could not run) counts in `hosts_unknown`, never as "no impact"; what it
/// did say still counts, so a host may be both rebooting and unknown. A release upgrade
/// (`dist_upgrade`) has no impact worked out: every host is unknown.
#[derive(Object)]
#[oai(example)]
pub struct ImpactSummaryView {
    /// The proposal's hosts (the same as the proposal's `hosts`).
    pub hosts: i64,
    /// Hosts that would reboot: a change's impact says so, or its update was reported
    /// `requires_reboot`.
    pub hosts_rebooting: i64,
    /// Hosts whose agents did not say what every change would do.
    pub hosts_unknown: i64,
    /// Units that would restart, most hosts first (then by name); at most 100.
    pub restarts: Vec<UnitRestarts>,
    /// Packages the upgrade would newly install, most hosts first; at most 100.
    pub installs: Vec<PackageHosts>,
    /// Packages the upgrade would remove, most hosts first; at most 100.
    pub removes: Vec<PackageHosts>,
    /// Distinct units in all (`restarts` shows the first 100).
    pub restarts_total: i64,
    /// Distinct packages installed in all.
    pub installs_total: i64,
    /// Distinct packages removed in all.
    pub removes_total: i64,
}

impl Example for ImpactSummaryView {
    fn example() -> Self {
        ImpactSummaryView {
            hosts: 40,
            hosts_rebooting: 12,
            hosts_unknown: 3,
            restarts: vec![
                UnitRestarts {
                    unit: "ssh.service".into(),
                    hosts: 37,
                },
                UnitRestarts {
                    unit: "nginx.service".into(),
                    hosts: 18,
                },
            ],
            installs: vec![PackageHosts {
                name: "libssl3t64".into(),
                hosts: 37,
            }],
            removes: vec![PackageHosts {
                name: "libssl3".into(),
                hosts: 37,
            }],
            restarts_total: 2,
            installs_total: 1,
            removes_total: 1,
        }
    }
}

fn counts<T>(list: Vec<ImpactCount>, make: impl Fn(String, i64) -> T) -> Vec<T> {
    list.into_iter().map(|c| make(c.name, c.hosts)).collect()
}

impl From<ImpactSummary> for ImpactSummaryView {
    fn from(s: ImpactSummary) -> ImpactSummaryView {
        ImpactSummaryView {
            hosts: s.hosts,
            hosts_rebooting: s.hosts_rebooting,
            hosts_unknown: s.hosts_unknown,
            restarts: counts(s.restarts, |unit, hosts| UnitRestarts { unit, hosts }),
            installs: counts(s.installs, |name, hosts| PackageHosts { name, hosts }),
            removes: counts(s.removes, |name, hosts| PackageHosts { name, hosts }),
            restarts_total: s.restarts_total,
            installs_total: s.installs_total,
            removes_total: s.removes_total,
        }
    }
}

/// A package the upgrade would newly install on the host.
#[derive(Object)]
pub struct InstallView {
    pub name: String,
    pub version: String,
}

/// What the proposal's changes would do to one host, as its agent said (decisions §21).
#[derive(Object)]
#[oai(example)]
pub struct HostImpactView {
    /// The agent said what every change would do to the host. `false`: for some it did not
    /// (unknown, never "no impact"); the lists hold what it did say.
    pub known: bool,
    /// The host would reboot (a change's impact says so, or its update was reported
    /// `requires_reboot`).
    pub reboot: bool,
    /// systemd units that would restart, by name; at most 1,000.
    pub restarts: Vec<String>,
    /// Packages the upgrade would newly install, by name; at most 1,000.
    pub installs: Vec<InstallView>,
    /// Packages the upgrade would remove, by name; at most 1,000.
    pub removes: Vec<String>,
}

impl Example for HostImpactView {
    fn example() -> Self {
        HostImpactView {
            known: true,
            reboot: false,
            restarts: vec!["nginx.service".into(), "ssh.service".into()],
            installs: vec![InstallView {
                name: "libssl3t64".into(),
                version: "3.0.13-0ubuntu3.4".into(),
            }],
            removes: vec!["libssl3".into()],
        }
    }
}

impl HostImpactView {
    /// Nothing known: a host whose impact was never worked out.
    pub fn unknown() -> HostImpactView {
        HostImpactView::from(HostImpact::default())
    }

    /// The stored impact; none, or one that cannot be read, is unknown.
    pub fn of(stored: Option<&JsonText<HostImpact>>) -> HostImpactView {
        stored
            .and_then(|text| {
                text.read()
                    .inspect_err(|err| {
                        tracing::warn!(error = %err, "a host's stored impact cannot be read: shown as unknown");
                    })
                    .ok()
            })
            .map_or_else(HostImpactView::unknown, HostImpactView::from)
    }
}

impl From<HostImpact> for HostImpactView {
    fn from(i: HostImpact) -> HostImpactView {
        HostImpactView {
            known: i.known,
            reboot: i.reboot,
            restarts: i.restarts,
            installs: i
                .installs
                .into_iter()
                .map(|i| InstallView {
                    name: i.name,
                    version: i.version,
                })
                .collect(),
            removes: i.removes,
        }
    }
}

/// A proposal's impact summary and warnings: as stored, or every host unknown when none is
/// (a release upgrade; a proposal not evaluated since impacts were kept) or it cannot be read.
pub async fn summary<C: ConnectionTrait>(
    db: &C,
    p: &proposals::Model,
) -> Result<(ImpactSummaryView, Vec<String>), ApiError> {
    let stored = proposal_impacts::Entity::rows()
        .filter(proposal_impacts::Column::ProposalId.eq(p.id))
        .one(db)
        .await?
        .and_then(|row| {
            row.summary
                .read()
                .inspect_err(|err| {
                    tracing::warn!(error = %err, "a proposal's stored impact cannot be read: shown as unknown");
                })
                .ok()
        });
    let mut summary = stored.unwrap_or_else(|| domain::policy::impact::unknown(p.hosts));
    let warnings = std::mem::take(&mut summary.warnings);
    Ok((summary.into(), warnings))
}

/// One host of a proposal and what the proposal's changes would do to it.
#[derive(Object)]
#[oai(example)]
pub struct HostImpactItem {
    /// `hst_` id.
    pub id: HostId,
    pub hostname: String,
    #[oai(nullable)]
    pub display_name: Option<String>,
    pub impact: HostImpactView,
}

impl Example for HostImpactItem {
    fn example() -> Self {
        HostImpactItem {
            id: HostId::from(Uuid::from_u128(0x0193_6f2a_1c00_7000_8000_0000_0000_0001)),
            hostname: "web-01".into(),
            display_name: Some("web-01 (eu-west)".into()),
            impact: HostImpactView::example(),
        }
    }
}

pub struct ImpactApi;

#[OpenApi(tag = "Tag::Proposals")]
impl ImpactApi {
    /// What the proposal's changes would do to each of its hosts (decisions §21), by host id,
    /// paged (`limit` default 50, at most 500; `cursor` from `next_cursor`). `impact.known` is
    /// false for a host whose agent did not say what every change would do: unknown, never
    /// "no impact". The proposal detail has the summary of this list.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/impact",
        method = "get",
        operation_id = "listProposalImpact"
    )]
    async fn list(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<HostImpactItem>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let scope = org.scope();
        let db = &state.db.orm;
        let p = scope.get(db, *proposal_id).await?;
        let query = proposal_hosts::Entity::rows()
            .select_only()
            .column(proposal_hosts::Column::HostId)
            .column(proposal_hosts::Column::Impact)
            .filter(proposal_hosts::Column::ProposalId.eq(p.id));
        let rows: Vec<(Uuid, Option<JsonText<HostImpact>>)> = paging
            .apply(query, proposal_hosts::Column::HostId, Order::OldestFirst)
            .into_tuple()
            .all(db)
            .await?;
        let rows = paging.cut(rows, |(host, _)| *host);
        let mut names = host_names(db, scope, rows.rows.iter().map(|(host, _)| *host)).await?;
        Ok(Json(rows.page(|(host, impact)| {
            let (hostname, display_name) = names.remove(&host).unwrap_or_default();
            HostImpactItem {
                id: HostId::from(host),
                hostname,
                display_name,
                impact: HostImpactView::of(impact.as_ref()),
            }
        })))
    }
}

/// The hostname and display name of each of `ids` still in the organization.
pub(crate) async fn host_names<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    ids: impl IntoIterator<Item = Uuid>,
) -> Result<HashMap<Uuid, (String, Option<String>)>, sea_orm::DbErr> {
    Ok(scope
        .rows::<hosts::Entity>()
        .select_only()
        .columns([
            hosts::Column::Id,
            hosts::Column::Hostname,
            hosts::Column::DisplayName,
        ])
        .filter(hosts::Column::Id.is_in(ids))
        .into_tuple::<(Uuid, String, Option<String>)>()
        .all(db)
        .await?
        .into_iter()
        .map(|(id, hostname, display)| (id, (hostname, display)))
        .collect())
}
