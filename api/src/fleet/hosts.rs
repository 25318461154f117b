//! Hosts for members: list with filters, detail, edit (display name, notes, labels),
//! decommission, and the host's event history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use domain::fleet::events::record_event;
use domain::{HostEventKind, ProposalStatus};
use entities::{
    group_hosts, groups, host_events, host_labels, hosts,
    json::{JsonText, Unreadable},
    proposal_hosts, proposals,
};
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
    types::MaybeUndefined,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::{
        ApiError, Conflict, Errors, Forbidden, NotFound, StateRefusal, TooManyRequests,
        Unauthorized,
    },
    http::error::{OrgInputErrors, OrgReadErrors},
    http::input,
    http::paging::{Order, Page, Paging},
    http::rights::{Operate, ReadFleet},
    http::tags::Tag,
    http::text::{DisplayNameText, NotesText, Text},
    identity::audit::Entry,
};
use domain::fleet::selector::{Requirement, Selector};
use entities::scope::{OrgScope, Untenanted};
use platform::ids::{GroupId, HostEventId, HostId, ProposalId};

pub const MAX_DISPLAY_NAME: usize = 255;
pub const MAX_NOTES: usize = 10_000;

/// Update counts; null on the host means never evaluated (not zero).
#[derive(Object)]
pub struct UpdateCounts {
    pub total: i64,
    pub security: i64,
    /// Updates that will leave the host needing a reboot.
    pub requiring_reboot: i64,
}

#[derive(Object)]
pub struct GroupRef {
    /// `grp_` id.
    pub id: GroupId,
    pub name: String,
}

#[derive(Object)]
pub struct ProposalRef {
    /// `prp_` id.
    pub id: ProposalId,
    pub number: i64,
    pub status: String,
    pub title: String,
}

/// A host. Fields the agent has not reported are null; JSON-shaped facts are passed through as
/// the agent reported them.
#[derive(Object)]
pub struct Host {
    /// `hst_` id.
    pub id: HostId,
    pub hostname: String,
    #[oai(nullable)]
    pub display_name: Option<String>,
    #[oai(nullable)]
    pub notes: Option<String>,
    /// Identity within the organization; hostnames change and repeat.
    pub machine_id: String,
    /// A label is a selector, so the type matters: string to string.
    pub labels: BTreeMap<String, String>,
    #[oai(nullable)]
    pub distro: Option<String>,
    #[oai(nullable)]
    pub distro_version: Option<String>,
    #[oai(nullable)]
    pub os_family: Option<String>,
    #[oai(nullable)]
    pub arch: Option<String>,
    #[oai(nullable)]
    pub kernel_version: Option<String>,
    #[oai(nullable)]
    pub virtualization: Option<String>,
    #[oai(nullable)]
    pub agent_version: Option<String>,
    #[oai(nullable)]
    pub agent_mode: Option<String>,
    /// A ceiling set by the host's own agent configuration; the server may narrow it, never
    /// widen it.
    pub agent_permissions: Vec<String>,
    /// `{method, channel?}`; absent for an agent too old to say.
    #[oai(skip_serializing_if_is_none)]
    pub agent_install: Option<Value>,
    /// The agent release channel the host follows (`agent_install.channel`, stable when it
    /// does not say) holds a newer build than `agent_version` (semantic version order). False
    /// until the release manifest has been read, or when either version is not a semantic
    /// version.
    pub agent_update_available: bool,
    /// pending (enrolled, never checked in), online, offline (no check-in for 3 intervals),
    /// decommissioned; unknown values pass through.
    pub status: String,
    pub enrolled_at: DateTime<Utc>,
    /// The host's last check-in, to within a minute (a check-in writes it at most once a
    /// minute); null before the first.
    #[oai(nullable)]
    pub last_seen_at: Option<DateTime<Utc>>,
    #[oai(nullable)]
    pub last_inventory_at: Option<DateTime<Utc>>,
    #[oai(nullable)]
    pub cert_expires_at: Option<DateTime<Utc>>,
    #[oai(nullable)]
    pub decommissioned_at: Option<DateTime<Utc>>,
    /// Null means the host cannot say, which is not false.
    #[oai(nullable)]
    pub reboot_required: Option<bool>,
    pub services_need_restart: Vec<String>,
    /// An update for a held package will not install.
    pub held_packages: Vec<String>,
    /// Null means never evaluated, not zero.
    #[oai(nullable)]
    pub updates: Option<UpdateCounts>,
    /// covered, no_feed (every update unrated, which is not safe) or unknown_release.
    pub advisory_coverage: String,
    /// `{kind, pinned, latest?, behind}`: package sources pinned in time, so zero updates on a
    /// frozen host is not patched.
    #[oai(nullable)]
    pub frozen: Option<Value>,
    /// `{provider?, reason}`; null means an agent too old to say.
    #[oai(nullable)]
    pub snapshots: Option<Value>,
    /// `{provider, region, instance_id}`.
    #[oai(nullable)]
    pub cloud: Option<Value>,
    pub groups: Vec<GroupRef>,
    /// Open proposals only, newest first.
    pub proposals: Vec<ProposalRef>,
}

/// A host as shown. A stored JSON column that cannot be read is an error (500), never shown
/// as empty: a host whose labels read as `{}` would look unlabelled while selectors treat it
/// otherwise.
pub fn host_view(
    row: hosts::Model,
    groups: Vec<GroupRef>,
    proposals: Vec<ProposalRef>,
    releases: &[entities::agent_releases::Model],
) -> Result<Host, Unreadable> {
    let updates = match (
        row.updates_total,
        row.updates_security,
        row.updates_requiring_reboot,
    ) {
        (Some(total), Some(security), Some(requiring_reboot)) => Some(UpdateCounts {
            total: total.into(),
            security: security.into(),
            requiring_reboot: requiring_reboot.into(),
        }),
        _ => None,
    };
    let value = |column: &Option<JsonText<Value>>| column.as_ref().map(JsonText::read).transpose();
    let agent_install = value(&row.agent_install)?;
    let channel = agent_install
        .as_ref()
        .and_then(|i| i.get("channel"))
        .and_then(Value::as_str);
    let agent_update_available =
        domain::intel::releases::update_available(releases, row.agent_version.as_deref(), channel);
    Ok(Host {
        agent_update_available,
        id: HostId::from(row.id),
        labels: row.labels.read()?,
        // An agent too old to report its permissions shows none.
        agent_permissions: row
            .agent_permissions
            .as_ref()
            .map(JsonText::read)
            .transpose()?
            .unwrap_or_default(),
        agent_install,
        services_need_restart: row.services_need_restart.read()?,
        held_packages: row.held_packages.read()?,
        frozen: value(&row.frozen)?,
        snapshots: value(&row.snapshots)?,
        cloud: value(&row.cloud)?,
        hostname: row.hostname,
        display_name: row.display_name,
        notes: row.notes,
        machine_id: row.machine_id,
        distro: row.distro,
        distro_version: row.distro_version,
        os_family: row.os_family,
        arch: row.arch,
        kernel_version: row.kernel_version,
        virtualization: row.virtualization,
        agent_version: row.agent_version,
        agent_mode: row.agent_mode,
        status: row.status,
        enrolled_at: row.enrolled_at,
        last_seen_at: row.last_seen_at,
        last_inventory_at: row.last_inventory_at,
        cert_expires_at: row.cert_expires_at,
        decommissioned_at: row.decommissioned_at,
        reboot_required: row.reboot_required,
        updates,
        advisory_coverage: row.advisory_coverage,
        groups,
        proposals,
    })
}

/// The groups a host belongs to (static or by label), by name.
async fn groups_of<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host_id: Uuid,
) -> Result<Vec<GroupRef>, ApiError> {
    let ids: Vec<Uuid> = group_hosts::Entity::rows()
        .filter(group_hosts::Column::HostId.eq(host_id))
        .all(db)
        .await?
        .into_iter()
        .map(|m| m.group_id)
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut found: Vec<GroupRef> = scope
        .rows::<groups::Entity>()
        .filter(groups::Column::Id.is_in(ids))
        .order_by_asc(groups::Column::Name)
        .all(db)
        .await?
        .into_iter()
        .map(|g| GroupRef {
            id: GroupId::from(g.id),
            name: g.name,
        })
        .collect();
    found.dedup_by(|a, b| a.id == b.id);
    Ok(found)
}

/// The host's open proposals, newest first.
async fn open_proposals<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host_id: Uuid,
) -> Result<Vec<ProposalRef>, ApiError> {
    Ok(open_for_hosts(db, scope, &[host_id])
        .await?
        .remove(&host_id)
        .unwrap_or_default())
}

/// Rewrites a host's indexed label rows to match `labels`.
pub async fn store_labels<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host_id: Uuid,
    labels: &BTreeMap<String, String>,
) -> Result<(), sea_orm::DbErr> {
    scope
        .delete_rows::<host_labels::Entity>()
        .filter(host_labels::Column::HostId.eq(host_id))
        .exec(db)
        .await?;
    if !labels.is_empty() {
        host_labels::Entity::insert_many(labels.iter().map(|(key, value)| {
            host_labels::ActiveModel {
                org_id: Set(scope.org_id().uuid()),
                host_id: Set(host_id),
                key: Set(key.clone()),
                value: Set(value.clone()),
            }
        }))
        .exec(db)
        .await?;
    }
    Ok(())
}

/// Open (not final) proposals of each of `host_ids`, newest first, for host views: two
/// queries however many hosts.
pub async fn open_for_hosts<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host_ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<ProposalRef>>, ApiError> {
    // The hosts' proposal rows by the host index, then those proposals by primary key: no
    // scan of the organization's (ever growing) proposal history.
    let pairs: Vec<(Uuid, Uuid)> = proposal_hosts::Entity::rows()
        .select_only()
        .column(proposal_hosts::Column::HostId)
        .column(proposal_hosts::Column::ProposalId)
        .filter(proposal_hosts::Column::HostId.is_in(host_ids.iter().copied()))
        .into_tuple()
        .all(db)
        .await?;
    if pairs.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: BTreeSet<Uuid> = pairs.iter().map(|(_, p)| *p).collect();
    let found: HashMap<Uuid, proposals::Model> = scope
        .rows::<proposals::Entity>()
        .filter(proposals::Column::Id.is_in(ids))
        .filter(proposals::Column::Status.is_not_in(ProposalStatus::FINAL))
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    let mut by_host: HashMap<Uuid, Vec<&proposals::Model>> = HashMap::new();
    for (host, proposal) in &pairs {
        if let Some(p) = found.get(proposal) {
            by_host.entry(*host).or_default().push(p);
        }
    }
    Ok(by_host
        .into_iter()
        .map(|(host, mut list)| {
            list.sort_by_key(|p| std::cmp::Reverse(p.number));
            let refs = list
                .into_iter()
                .map(|p| ProposalRef {
                    id: ProposalId::from(p.id),
                    number: p.number,
                    status: p.status.clone(),
                    title: p.title.clone(),
                })
                .collect();
            (host, refs)
        })
        .collect())
}

/// A condition selecting the organization's hosts whose labels satisfy `selector`.
pub(crate) fn selector_condition(scope: OrgScope, selector: &Selector) -> Condition {
    let mut condition = Condition::all();
    let labelled = |key: &str, values: Option<Vec<String>>| {
        let mut sub = scope.column_of::<host_labels::Entity>(host_labels::Column::HostId);
        sub.and_where(host_labels::Column::Key.eq(key));
        if let Some(values) = values {
            sub.and_where(host_labels::Column::Value.is_in(values));
        }
        sub.to_owned()
    };
    for requirement in &selector.0 {
        condition = condition.add(match requirement {
            Requirement::Equals(k, v) => {
                hosts::Column::Id.in_subquery(labelled(k, Some(vec![v.clone()])))
            }
            Requirement::NotEquals(k, v) => {
                hosts::Column::Id.not_in_subquery(labelled(k, Some(vec![v.clone()])))
            }
            Requirement::In(k, vs) => hosts::Column::Id.in_subquery(labelled(k, Some(vs.clone()))),
            Requirement::Exists(k) => hosts::Column::Id.in_subquery(labelled(k, None)),
        });
    }
    condition
}

/// The filters of the host list (and its count), as given.
struct HostFilters {
    selector: Option<String>,
    group: Option<String>,
    group_source: Option<GroupSource>,
    status: Option<String>,
    distro: Option<String>,
    q: Option<String>,
    reboot_required: Option<bool>,
    has_security_updates: Option<bool>,
    advisory_coverage: Option<String>,
}

impl HostFilters {
    /// The organization's hosts these filters select; 400 for a selector or group that is not one.
    fn query(self, scope: OrgScope) -> Result<sea_orm::Select<hosts::Entity>, ApiError> {
        let mut query = scope.rows::<hosts::Entity>();
        if let Some(text) = self.selector.as_deref().filter(|s| !s.trim().is_empty()) {
            let parsed =
                Selector::parse(text).map_err(|e| ApiError::invalid(format!("selector: {e}")))?;
            query = query.filter(selector_condition(scope, &parsed));
        }
        if let Some(group) = self.group.as_deref() {
            let group_id = GroupId::parse(group)
                .ok_or_else(|| ApiError::invalid("group must be a grp_ id"))?;
            let mut members = group_hosts::Entity::column_of(group_hosts::Column::HostId);
            members.and_where(group_hosts::Column::GroupId.eq(group_id));
            if let Some(source) = self.group_source {
                members.and_where(group_hosts::Column::Source.eq(source.as_str()));
            }
            query = query.filter(hosts::Column::Id.in_subquery(members.to_owned()));
        } else if self.group_source.is_some() {
            return Err(ApiError::invalid("group_source needs group"));
        }
        if let Some(status) = self.status {
            query = query.filter(hosts::Column::Status.eq(status));
        }
        if let Some(distro) = self.distro {
            query = query.filter(hosts::Column::Distro.eq(distro));
        }
        if let Some(text) = self.q.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            query = query.filter(
                Condition::any()
                    .add(hosts::Column::Hostname.contains(text))
                    .add(hosts::Column::DisplayName.contains(text)),
            );
        }
        if let Some(flag) = self.reboot_required {
            query = query.filter(hosts::Column::RebootRequired.eq(flag));
        }
        if let Some(flag) = self.has_security_updates {
            query = query.filter(if flag {
                hosts::Column::UpdatesSecurity.gt(0)
            } else {
                hosts::Column::UpdatesSecurity.eq(0)
            });
        }
        if let Some(coverage) = self.advisory_coverage {
            query = query.filter(hosts::Column::AdvisoryCoverage.eq(coverage));
        }
        Ok(query)
    }
}

/// Which of a group's members a host list keeps.
#[derive(poem_openapi::Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum GroupSource {
    Static,
    Label,
}

impl GroupSource {
    fn as_str(self) -> &'static str {
        match self {
            GroupSource::Static => "static",
            GroupSource::Label => "label",
        }
    }
}

/// How many hosts a filter selects.
#[derive(Object)]
pub struct HostCount {
    pub count: u64,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct HostPatch {
    /// At most 255 characters, no control characters or direction overrides; null clears it;
    /// absent leaves it.
    pub display_name: MaybeUndefined<DisplayNameText>,
    /// At most 10,000 characters, no control characters but line feeds and tabs, no direction
    /// overrides; null clears them; absent leaves them.
    pub notes: MaybeUndefined<NotesText>,
    /// Replaces the whole set (never merges): at most 64; keys 1–63 letters, digits, `-`, `_`,
    /// `.`, `/`; values at most 255 characters. A change queues the host for evaluation.
    pub labels: Option<BTreeMap<String, Text>>,
}

/// A host event.
#[derive(Object)]
pub struct HostEvent {
    /// `evt_` id.
    pub id: HostEventId,
    /// enrolled, checked_in_after_gap, labels_changed, went_offline, decommissioned, job_ran, …
    pub kind: String,
    #[oai(nullable)]
    pub details: Option<Value>,
    pub at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum Decommissioned {
    /// Decommissioned: its certificate stops working at once and it no longer counts for
    /// billing.
    #[oai(status = 200)]
    Ok(Json<Host>),
}

type HostErrors = OrgReadErrors;

/// A text field people set and others are shown: bounded, and free of control characters
/// (`multiline` text may hold line feeds and tabs).
fn optional_text<T: std::ops::Deref<Target = str>>(
    field: &str,
    value: MaybeUndefined<T>,
    max: usize,
    multiline: bool,
) -> Result<MaybeUndefined<String>, ApiError> {
    Ok(match value {
        MaybeUndefined::Undefined => MaybeUndefined::Undefined,
        MaybeUndefined::Null => MaybeUndefined::Null,
        MaybeUndefined::Value(text) => {
            if text.chars().count() > max {
                return Err(ApiError::invalid(format!(
                    "{field} must be at most {max} characters"
                )));
            }
            input::showable(field, &text, multiline)?;
            let trimmed = text.trim();
            if trimmed.is_empty() {
                MaybeUndefined::Null
            } else {
                MaybeUndefined::Value(trimmed.to_owned())
            }
        }
    })
}

pub struct HostsApi;

#[OpenApi(tag = "Tag::Hosts")]
impl HostsApi {
    /// The organization's hosts, oldest enrolment first. Filters combine: `selector` (label
    /// selector such as `env=prod,tier in (web,db)`), `group` (`grp_` id), `status`, `distro`,
    /// `q` (text in hostname or display name), `reboot_required`, `has_security_updates`,
    /// `advisory_coverage`. `countHosts` counts what the same filters select.
    #[oai(
        path = "/v1/orgs/:org/hosts",
        method = "get",
        operation_id = "listHosts"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        selector: Query<Option<String>>,
        #[oai(validator(pattern = "^grp_[0-7][0-9a-hjkmnp-tv-z]{25}$"))] group: Query<
            Option<String>,
        >,
        /// With `group`: only its static members (`static`, set by `setGroupHosts`) or only
        /// those its selector picks (`label`).
        group_source: Query<Option<GroupSource>>,
        status: Query<Option<String>>,
        distro: Query<Option<String>>,
        q: Query<Option<String>>,
        reboot_required: Query<Option<bool>>,
        has_security_updates: Query<Option<bool>>,
        /// covered, no_feed or unknown_release.
        advisory_coverage: Query<Option<String>>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Host>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let query = HostFilters {
            selector: selector.0,
            group: group.0,
            group_source: group_source.0,
            status: status.0,
            distro: distro.0,
            q: q.0,
            reboot_required: reboot_required.0,
            has_security_updates: has_security_updates.0,
            advisory_coverage: advisory_coverage.0,
        }
        .query(org.scope())?;
        let rows = paging
            .fetch(&state.db.orm, query, Order::OldestFirst)
            .await?;
        // Group names for the page in one query.
        let ids: Vec<Uuid> = rows.rows.iter().map(|h| h.id).collect();
        let memberships = group_hosts::Entity::rows()
            .filter(group_hosts::Column::HostId.is_in(ids.iter().copied()))
            .all(&state.db.orm)
            .await?;
        let group_ids: Vec<Uuid> = memberships.iter().map(|m| m.group_id).collect();
        let names: BTreeMap<Uuid, String> = org
            .scope()
            .rows::<groups::Entity>()
            .filter(groups::Column::Id.is_in(group_ids))
            .all(&state.db.orm)
            .await?
            .into_iter()
            .map(|g| (g.id, g.name))
            .collect();
        let mut open = open_for_hosts(&state.db.orm, org.scope(), &ids).await?;
        let releases = super::agent_releases::channels(&state.db.orm).await?;
        Ok(Json(rows.try_page(|h| {
            let mut refs: Vec<GroupRef> = memberships
                .iter()
                .filter(|m| m.host_id == h.id)
                .filter_map(|m| {
                    names.get(&m.group_id).map(|name| GroupRef {
                        id: GroupId::from(m.group_id),
                        name: name.clone(),
                    })
                })
                .collect();
            refs.sort_by(|a, b| a.name.cmp(&b.name));
            refs.dedup_by(|a, b| a.id == b.id);
            let proposals = open.remove(&h.id).unwrap_or_default();
            host_view(h, refs, proposals, &releases)
        })?))
    }

    /// How many hosts the host list's filters select (the same parameters as `listHosts`,
    /// without paging): for a live count beside a search, a group's selector or a policy's
    /// scope while it is written.
    #[oai(
        path = "/v1/orgs/:org/hosts/count",
        method = "get",
        operation_id = "countHosts"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn count(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        selector: Query<Option<String>>,
        #[oai(validator(pattern = "^grp_[0-7][0-9a-hjkmnp-tv-z]{25}$"))] group: Query<
            Option<String>,
        >,
        /// With `group`: only its static members (`static`, set by `setGroupHosts`) or only
        /// those its selector picks (`label`).
        group_source: Query<Option<GroupSource>>,
        status: Query<Option<String>>,
        distro: Query<Option<String>>,
        q: Query<Option<String>>,
        reboot_required: Query<Option<bool>>,
        has_security_updates: Query<Option<bool>>,
        /// covered, no_feed or unknown_release.
        advisory_coverage: Query<Option<String>>,
    ) -> Result<Json<HostCount>, OrgInputErrors> {
        let query = HostFilters {
            selector: selector.0,
            group: group.0,
            group_source: group_source.0,
            status: status.0,
            distro: distro.0,
            q: q.0,
            reboot_required: reboot_required.0,
            has_security_updates: has_security_updates.0,
            advisory_coverage: advisory_coverage.0,
        }
        .query(org.scope())?;
        let count = query.count(&state.db.orm).await?;
        Ok(Json(HostCount { count }))
    }

    /// One host, with its groups and open proposals.
    #[oai(
        path = "/v1/orgs/:org/hosts/:host_id",
        method = "get",
        operation_id = "getHost"
    )]
    async fn get(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The host's id (`hst_`).
        host_id: Path<HostId>,
    ) -> Result<Json<Host>, HostErrors> {
        let scope = org.scope();
        let host = scope.get(&state.db.orm, *host_id).await?;
        let groups = groups_of(&state.db.orm, scope, host.id).await?;
        let proposals = open_proposals(&state.db.orm, scope, host.id).await?;
        let releases = super::agent_releases::channels(&state.db.orm).await?;
        Ok(Json(host_view(host, groups, proposals, &releases)?))
    }

    /// Edit a host: every field optional, an absent field left alone. `labels` replaces the
    /// whole set, never merges, and queues the host for evaluation so its proposals and label
    /// groups catch up. 400 for too many labels, an empty key, a display name (over 255) or
    /// notes (over 10,000 characters) that are too long, or control characters or Unicode
    /// direction overrides in either (notes may hold line feeds and tabs).
    #[oai(
        path = "/v1/orgs/:org/hosts/:host_id",
        method = "patch",
        operation_id = "updateHost"
    )]
    async fn patch(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The host's id (`hst_`).
        host_id: Path<HostId>,
        body: Json<HostPatch>,
    ) -> Result<Json<Host>, OrgInputErrors> {
        let body = body.0;
        let display_name =
            optional_text("display_name", body.display_name, MAX_DISPLAY_NAME, false)?;
        let notes = optional_text("notes", body.notes, MAX_NOTES, true)?;
        let labels = body
            .labels
            .as_ref()
            .map(|l| input::labels("labels", l))
            .transpose()?;
        let now = state.clock.now();
        let scope = org.scope();
        let txn = state.db.begin_write().await?;
        let host = scope.get(&txn, *host_id).await?;
        // Labels that cannot be read are replaced by new ones like any others (the event says
        // `from: null`); without new ones, showing the host fails below and nothing changes.
        let old_labels = host.labels.read().ok();
        let mut changed: hosts::ActiveModel = host.clone().into();
        match display_name {
            MaybeUndefined::Undefined => {}
            MaybeUndefined::Null => changed.display_name = Set(None),
            MaybeUndefined::Value(v) => changed.display_name = Set(Some(v)),
        }
        match notes {
            MaybeUndefined::Undefined => {}
            MaybeUndefined::Null => changed.notes = Set(None),
            MaybeUndefined::Value(v) => changed.notes = Set(Some(v)),
        }
        let labels_changed = labels
            .as_ref()
            .is_some_and(|l| old_labels.as_ref() != Some(l));
        if let Some(labels) = &labels {
            changed.labels = Set(JsonText::new(labels)?);
        }
        changed.updated_at = Set(now);
        let updated = changed.update(&txn).await?;
        if let (true, Some(labels)) = (labels_changed, &labels) {
            store_labels(&txn, scope, host.id, labels).await?;
            record_event(
                &txn,
                &updated,
                HostEventKind::LabelsChanged,
                Some(serde_json::json!({"from": old_labels, "to": labels})),
                now,
            )
            .await?;
        }
        Entry::new("host.updated")
            .org(org.org_id())
            .by(&org.caller)
            .target(HostId::from(host.id))
            .write(&txn, now)
            .await?;
        let groups = groups_of(&txn, scope, host.id).await?;
        let proposals = open_proposals(&txn, scope, host.id).await?;
        let releases = super::agent_releases::channels(&txn).await?;
        let view = host_view(updated, groups, proposals, &releases)?;
        txn.commit().await?;
        if labels_changed {
            state
                .queue
                .push(domain::fleet::jobs::EvaluateHost { host_id: host.id })
                .await?;
        }
        Ok(Json(view))
    }

    /// Decommission a host: every key it was certified for is revoked at once and it stops
    /// counting for billing; enrolling the machine again binds it to a new key. Its jobs not
    /// reported yet are withdrawn (`cancelled`): it leaves the proposals going ahead, whose
    /// waves may be done without it (decisions §20). An already decommissioned host is 409
    /// `invalid-state`.
    #[oai(
        path = "/v1/orgs/:org/hosts/:host_id/decommission",
        method = "post",
        operation_id = "decommissionHost"
    )]
    async fn decommission(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The host's id (`hst_`).
        host_id: Path<HostId>,
    ) -> Result<
        Decommissioned,
        Errors<(Unauthorized, Forbidden, NotFound, Conflict, TooManyRequests)>,
    > {
        let now = state.clock.now();
        let scope = org.scope();
        let txn = state.db.begin_write().await?;
        let host = scope.get(&txn, *host_id).await?;
        if host.decommissioned_at.is_some() {
            return Err(ApiError::state(
                StateRefusal::InvalidState,
                "The host is already decommissioned.",
            )
            .into());
        }
        let mut changed: hosts::ActiveModel = host.clone().into();
        changed.decommissioned_at = Set(Some(now));
        changed.status = Set(domain::HostStatus::Decommissioned.to_string());
        changed.updated_at = Set(now);
        let updated = changed.update(&txn).await?;
        // Every key at once, pending renewals included: should the machine come back, only an
        // enrolment with a new key admits it again.
        domain::fleet::enrolment::revoke_keys(&txn, scope, host.id, now).await?;
        // It leaves every proposal it had jobs in: their rollouts may move on without it.
        domain::proposals::rollout::host_left(
            &txn,
            host.id,
            domain::proposals::host_jobs::LEFT_DECOMMISSIONED,
            now,
        )
        .await?;
        record_event(&txn, &updated, HostEventKind::Decommissioned, None, now).await?;
        Entry::new("host.decommissioned")
            .org(org.org_id())
            .by(&org.caller)
            .target(HostId::from(host.id))
            .write(&txn, now)
            .await?;
        let groups = groups_of(&txn, scope, host.id).await?;
        let proposals = open_proposals(&txn, scope, host.id).await?;
        let releases = super::agent_releases::channels(&txn).await?;
        let view = host_view(updated, groups, proposals, &releases)?;
        txn.commit().await?;
        state.agent_keys.forget_host(host.id);
        state
            .queue
            .push(domain::fleet::jobs::EvaluateHost { host_id: host.id })
            .await?;
        Ok(Decommissioned::Ok(Json(view)))
    }

    /// What happened to a host, newest first.
    #[oai(
        path = "/v1/orgs/:org/hosts/:host_id/events",
        method = "get",
        operation_id = "listHostEvents"
    )]
    async fn events(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The host's id (`hst_`).
        host_id: Path<HostId>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<HostEvent>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let scope = org.scope();
        let host = scope.get(&state.db.orm, *host_id).await?;
        let events = scope
            .rows::<host_events::Entity>()
            .filter(host_events::Column::HostId.eq(host.id));
        let rows = paging
            .fetch(&state.db.orm, events, Order::NewestFirst)
            .await?;
        let page = rows.try_page(|e| {
            Ok::<_, Unreadable>(HostEvent {
                id: e.id.into(),
                kind: e.kind,
                details: e.details.as_ref().map(JsonText::read).transpose()?,
                at: e.created_at,
            })
        })?;
        Ok(Json(page))
    }
}
