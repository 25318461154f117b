//! Groups of hosts: static members (replaced whole by `PUT …/hosts`) and label-selected members
//! (from the group's selector, kept current by host evaluation).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use entities::{group_hosts, groups, hosts};
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
    types::MaybeUndefined,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set,
};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::ApiError,
    http::error::{OrgConflictErrors, OrgInputErrors, OrgReadErrors},
    http::input,
    http::paging::{Order, Page, Paging},
    http::rights::{Operate, ReadFleet},
    http::tags::Tag,
    http::text::{Name, Text},
    identity::audit::Entry,
};
use domain::fleet::selector::Selector;
use entities::scope::Untenanted;
use platform::ids::{GroupId, HostId};

const STATIC: &str = "static";
const LABEL: &str = "label";
/// Most hosts one `PUT …/hosts` may name.
pub const MAX_STATIC_HOSTS: usize = 10_000;

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct NewGroup {
    /// Unique in the organization (1–255 characters).
    #[oai(validator(max_length = 255))]
    pub name: Name,
    /// Label selector: `key=value`, `key!=value`, `key in (a,b)`, `key` (exists), AND-ed with
    /// commas. Hosts it picks are members besides the static ones.
    pub selector: Option<Text>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct GroupPatch {
    /// New name; absent leaves it.
    #[oai(validator(max_length = 255))]
    pub name: Option<Name>,
    /// New selector; null removes it (no label-selected members); absent leaves it.
    pub selector: MaybeUndefined<Text>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct StaticHosts {
    /// The whole static member set, as `hst_` ids of this organization.
    pub hosts: Vec<Text>,
}

/// The group host membership result.
#[derive(Object)]
pub struct StaticHostsResult {
    pub static_hosts: i64,
}

#[derive(Object)]
pub struct Group {
    /// `grp_` id.
    pub id: GroupId,
    pub name: String,
    #[oai(nullable)]
    pub selector: Option<String>,
    /// Hosts set by `PUT …/hosts`.
    pub static_hosts: i64,
    /// Hosts the selector picks (as of the last evaluation).
    pub label_hosts: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum Created {
    /// Created; label-selected members are computed in the background.
    #[oai(status = 201)]
    Created(Json<Group>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted; its hosts are untouched.
    #[oai(status = 204)]
    Deleted,
}

/// Member counts per group and source, for all of `group_ids` in one grouped query.
async fn counts<C: ConnectionTrait>(
    db: &C,
    group_ids: Vec<Uuid>,
) -> Result<HashMap<(Uuid, String), i64>, ApiError> {
    let rows: Vec<(Uuid, String, i64)> = group_hosts::Entity::rows()
        .select_only()
        .column(group_hosts::Column::GroupId)
        .column(group_hosts::Column::Source)
        .column_as(group_hosts::Column::HostId.count(), "members")
        .filter(group_hosts::Column::GroupId.is_in(group_ids))
        .group_by(group_hosts::Column::GroupId)
        .group_by(group_hosts::Column::Source)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows.into_iter().map(|(g, s, n)| ((g, s), n)).collect())
}

fn group_view(row: groups::Model, counts: &HashMap<(Uuid, String), i64>) -> Group {
    let count = |source: &str| {
        counts
            .get(&(row.id, source.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    Group {
        id: GroupId::from(row.id),
        static_hosts: count(STATIC),
        label_hosts: count(LABEL),
        name: row.name,
        selector: row.selector,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

async fn view<C: ConnectionTrait>(db: &C, row: groups::Model) -> Result<Group, ApiError> {
    let counts = counts(db, vec![row.id]).await?;
    Ok(group_view(row, &counts))
}

fn selector(raw: Option<&str>) -> Result<Option<String>, ApiError> {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(text) => Selector::parse(text)
            .map(|_| Some(text.to_owned()))
            .map_err(|e| ApiError::invalid(format!("selector: {e}"))),
    }
}

/// Policies scoped by groups follow a membership change (coalesced per policy).
async fn policies_follow(state: &AppState, org_id: Uuid) -> Result<(), ApiError> {
    domain::policy::mark_dirty(&state.db, org_id, state.clock.now())
        .await
        .map_err(ApiError::Internal)
}

type Mutation = OrgConflictErrors;

pub struct GroupsApi;

#[OpenApi(tag = "Tag::Groups")]
impl GroupsApi {
    /// Create a group. A name in use is 409 `conflict`; a malformed selector 400.
    #[oai(
        path = "/v1/orgs/:org/groups",
        method = "post",
        operation_id = "createGroup"
    )]
    async fn create(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        body: Json<NewGroup>,
    ) -> Result<Created, Mutation> {
        let name = input::name("name", &body.name)?;
        let selector = selector(body.selector.as_deref())?;
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = groups::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            name: Set(name.clone()),
            selector: Set(selector.clone()),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(|e| ApiError::name_taken(e, "group", &name))?;
        Entry::new("group.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(GroupId::from(row.id))
            .details(serde_json::json!({ "name": name, "selector": selector }))
            .write(&txn, now)
            .await?;
        let group = view(&txn, row.clone()).await?;
        txn.commit().await?;
        if row.selector.is_some() {
            state
                .queue
                .push(domain::fleet::jobs::EvaluateGroup { group_id: row.id })
                .await?;
        }
        Ok(Created::Created(Json(group)))
    }

    /// The organization's groups, by name.
    #[oai(
        path = "/v1/orgs/:org/groups",
        method = "get",
        operation_id = "listGroups"
    )]
    async fn list(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Group>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let rows = org.scope().rows::<groups::Entity>();
        let rows = paging
            .fetch(&state.db.orm, rows, Order::OldestFirst)
            .await?;
        let counts = counts(&state.db.orm, rows.rows.iter().map(|g| g.id).collect()).await?;
        Ok(Json(rows.page(|row| group_view(row, &counts))))
    }

    /// One group.
    #[oai(
        path = "/v1/orgs/:org/groups/:group_id",
        method = "get",
        operation_id = "getGroup"
    )]
    async fn get(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The group's id (`grp_`).
        group_id: Path<GroupId>,
    ) -> Result<Json<Group>, OrgReadErrors> {
        let row = org.scope().get(&state.db.orm, *group_id).await?;
        Ok(Json(view(&state.db.orm, row).await?))
    }

    /// Rename a group or change its selector (which re-evaluates its label-selected members).
    #[oai(
        path = "/v1/orgs/:org/groups/:group_id",
        method = "patch",
        operation_id = "updateGroup"
    )]
    async fn patch(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The group's id (`grp_`).
        group_id: Path<GroupId>,
        body: Json<GroupPatch>,
    ) -> Result<Json<Group>, Mutation> {
        let body = body.0;
        let name = body
            .name
            .as_deref()
            .map(|n| input::name("name", n))
            .transpose()?;
        let new_selector = match &body.selector {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(text) => Some(selector(Some(text))?),
        };
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *group_id).await?;
        let mut changed: groups::ActiveModel = row.clone().into();
        if let Some(name) = &name {
            changed.name = Set(name.clone());
        }
        let selector_changed = new_selector.as_ref().is_some_and(|s| *s != row.selector);
        if let Some(selector) = new_selector {
            changed.selector = Set(selector);
        }
        changed.updated_at = Set(now);
        let updated = changed
            .update(&txn)
            .await
            .map_err(|e| ApiError::name_taken(e, "group", name.as_deref().unwrap_or_default()))?;
        Entry::new("group.updated")
            .org(org.org_id())
            .by(&org.caller)
            .target(GroupId::from(row.id))
            .details(serde_json::json!({ "name": updated.name, "selector": updated.selector }))
            .write(&txn, now)
            .await?;
        let group = view(&txn, updated).await?;
        txn.commit().await?;
        if selector_changed {
            state
                .queue
                .push(domain::fleet::jobs::EvaluateGroup { group_id: row.id })
                .await?;
        }
        Ok(Json(group))
    }

    /// Delete a group; its hosts are untouched.
    #[oai(
        path = "/v1/orgs/:org/groups/:group_id",
        method = "delete",
        operation_id = "deleteGroup"
    )]
    async fn delete(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The group's id (`grp_`).
        group_id: Path<GroupId>,
    ) -> Result<Deleted, OrgReadErrors> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let row = org.scope().get(&txn, *group_id).await?;
        group_hosts::Entity::delete_rows()
            .filter(group_hosts::Column::GroupId.eq(row.id))
            .exec(&txn)
            .await?;
        org.scope()
            .delete_rows::<groups::Entity>()
            .filter(groups::Column::Id.eq(row.id))
            .exec(&txn)
            .await?;
        Entry::new("group.deleted")
            .org(org.org_id())
            .by(&org.caller)
            .target(GroupId::from(row.id))
            .details(serde_json::json!({ "name": row.name }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        policies_follow(&state, org.org_id()).await?;
        Ok(Deleted::Deleted)
    }

    /// Replace the group's whole static member set; label-selected members are unaffected. An
    /// id that is not a host of this organization is 400 `invalid-request` and nothing is
    /// changed. At most 10,000 ids; duplicates count once.
    #[oai(
        path = "/v1/orgs/:org/groups/:group_id/hosts",
        method = "put",
        operation_id = "setGroupHosts"
    )]
    async fn set_hosts(
        &self,
        org: org::Path<Operate>,
        state: poem::web::Data<&AppState>,
        /// The group's id (`grp_`).
        group_id: Path<GroupId>,
        body: Json<StaticHosts>,
    ) -> Result<Json<StaticHostsResult>, OrgInputErrors> {
        if body.hosts.len() > MAX_STATIC_HOSTS {
            return Err(ApiError::invalid(format!("hosts: at most {MAX_STATIC_HOSTS} ids")).into());
        }
        let mut wanted = BTreeSet::new();
        for raw in &body.hosts {
            let id = HostId::parse(raw).map(HostId::uuid).ok_or_else(|| {
                ApiError::invalid(format!(
                    "hosts: {:?} is not a host of this organization",
                    raw.0
                ))
            })?;
            wanted.insert(id);
        }
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let group = org.scope().get(&txn, *group_id).await?;
        let ids: Vec<Uuid> = wanted.iter().copied().collect();
        let mut known = BTreeSet::new();
        for chunk in ids.chunks(500) {
            let found: Vec<Uuid> = org
                .scope()
                .rows::<hosts::Entity>()
                .select_only()
                .column(hosts::Column::Id)
                .filter(hosts::Column::Id.is_in(chunk.to_vec()))
                .into_tuple()
                .all(&txn)
                .await?;
            known.extend(found);
        }
        if let Some(missing) = wanted.difference(&known).next() {
            return Err(ApiError::invalid(format!(
                "hosts: {} is not a host of this organization; nothing was changed",
                HostId::from(*missing)
            ))
            .into());
        }
        group_hosts::Entity::delete_rows()
            .filter(group_hosts::Column::GroupId.eq(group.id))
            .filter(group_hosts::Column::Source.eq(STATIC))
            .exec(&txn)
            .await?;
        for chunk in ids.chunks(500) {
            group_hosts::Entity::insert_many(chunk.iter().map(|host_id| {
                group_hosts::ActiveModel {
                    group_id: Set(group.id),
                    source: Set(STATIC.to_owned()),
                    host_id: Set(*host_id),
                }
            }))
            .exec(&txn)
            .await?;
        }
        Entry::new("group.hosts_set")
            .org(org.org_id())
            .by(&org.caller)
            .target(GroupId::from(group.id))
            .details(serde_json::json!({ "static_hosts": ids.len() }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        policies_follow(&state, org.org_id()).await?;
        Ok(Json(StaticHostsResult {
            static_hosts: ids.len() as i64,
        }))
    }
}
