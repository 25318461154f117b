//! SCIM Groups: list (optionally `filter=displayName eq "…"`), create, get, replace, PATCH
//! (`members` add, remove — by value list or `members[value eq "…"]` — and replace;
//! `displayName`; path-less replace with a value object), delete. A group's members are users
//! provisioned in the same organization, named by `id` (`usr_`); any change recomputes the
//! roles of the members it touches (and of all members when the name changes).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use entities::{scim_group_members, scim_groups, scim_users};
use platform::ids::{AccountId, ScimGroupId};
use scim_v2::filter::{AttrExp, CompValue, CompareOp, PatchPath, ValFilter};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, Set,
};
use uuid::Uuid;

use super::{
    provision,
    resources::{
        GROUP_SCHEMA, Group, GroupInput, GroupList, LIST_SCHEMA, Meta, PatchOperation, Reference,
    },
    users::{Paging, eq_filter, key_taken, text, user_location},
    wire::ScimError,
};
use crate::AppState;
use entities::scope::OrgScope;

fn location(state: &AppState, id: Uuid) -> String {
    format!(
        "{}/Groups/{}",
        crate::scim::token::base_url(state),
        ScimGroupId::from(id)
    )
}

async fn find<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    id: &str,
) -> Result<scim_groups::Model, ScimError> {
    let not_found = || ScimError::not_found("group");
    let group_id = ScimGroupId::parse(id).ok_or_else(not_found)?;
    scope
        .rows::<scim_groups::Entity>()
        .filter(scim_groups::Column::Id.eq(group_id))
        .one(db)
        .await?
        .ok_or_else(not_found)
}

async fn resources<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    scope: OrgScope,
    rows: Vec<scim_groups::Model>,
) -> Result<Vec<Group>, ScimError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = rows.iter().map(|g| g.id).collect();
    let places = scope
        .rows::<scim_group_members::Entity>()
        .filter(scim_group_members::Column::GroupId.is_in(ids))
        .order_by_asc(scim_group_members::Column::AccountId)
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| Group {
            schemas: vec![GROUP_SCHEMA.to_owned()],
            id: ScimGroupId::from(row.id).to_string(),
            members: places
                .iter()
                .filter(|p| p.group_id == row.id)
                .map(|p| Reference {
                    value: AccountId::from(p.account_id).to_string(),
                    display: None,
                    reference: Some(user_location(state, p.account_id)),
                })
                .collect(),
            display_name: row.display_name,
            external_id: row.external_id,
            meta: Meta {
                resource_type: "Group".to_owned(),
                created: row.created_at,
                last_modified: row.updated_at,
                location: location(state, row.id),
            },
        })
        .collect())
}

async fn one<C: ConnectionTrait>(
    state: &AppState,
    db: &C,
    scope: OrgScope,
    row: scim_groups::Model,
) -> Result<Group, ScimError> {
    resources(state, db, scope, vec![row])
        .await?
        .pop()
        .ok_or_else(|| ScimError::internal(anyhow::anyhow!("a group resource went missing")))
}

pub async fn get(state: &AppState, scope: OrgScope, id: &str) -> Result<Group, ScimError> {
    let row = find(&state.db.orm, scope, id).await?;
    one(state, &state.db.orm, scope, row).await
}

/// `GET /Groups`.
pub async fn list(
    state: &AppState,
    scope: OrgScope,
    filter: Option<&str>,
    paging: Paging,
) -> Result<GroupList, ScimError> {
    let mut query = scope.rows::<scim_groups::Entity>();
    if let Some(raw) = filter.map(str::trim).filter(|f| !f.is_empty()) {
        let name = eq_filter(raw, "displayName", GROUP_SCHEMA)?;
        query = query.filter(scim_groups::Column::DisplayNameKey.eq(name.to_lowercase()));
    }
    let db = &state.db.orm;
    let (total, rows) = paging
        .fetch(
            db,
            query,
            [scim_groups::Column::CreatedAt, scim_groups::Column::Id],
        )
        .await?;
    let resources = resources(state, db, scope, rows).await?;
    Ok(GroupList {
        schemas: vec![LIST_SCHEMA.to_owned()],
        total_results: total,
        start_index: paging.start_index,
        items_per_page: resources.len() as u64,
        resources,
    })
}

/// The users named by `references`: each must be a user provisioned in this organization.
async fn members(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    references: impl IntoIterator<Item = String>,
) -> Result<BTreeSet<Uuid>, ScimError> {
    let mut ids = BTreeSet::new();
    for value in references {
        let id = AccountId::parse(value.trim()).ok_or_else(|| {
            ScimError::value(format!("{value:?} is not a user of this organization"))
        })?;
        ids.insert(id.uuid());
    }
    if ids.is_empty() {
        return Ok(ids);
    }
    let known = scope
        .rows::<scim_users::Entity>()
        .filter(scim_users::Column::AccountId.is_in(ids.clone()))
        .count(txn)
        .await?;
    if known != ids.len() as u64 {
        return Err(ScimError::value(
            "A member is not a user provisioned in this organization.",
        ));
    }
    Ok(ids)
}

fn reference_values(value: &serde_json::Value) -> Result<Vec<String>, ScimError> {
    let items = match value {
        serde_json::Value::Array(items) => items.clone(),
        serde_json::Value::Object(_) => vec![value.clone()],
        serde_json::Value::Null => Vec::new(),
        _ => return Err(ScimError::value("members must be a list of {value}")),
    };
    items
        .iter()
        .map(|item| {
            item.get("value")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .ok_or_else(|| ScimError::value("Each member needs a value (the user's id)."))
        })
        .collect()
}

/// The ids a `members[value eq "…"]` (or an `or` of such) names.
fn filtered_values(filter: &ValFilter) -> Result<Vec<String>, ScimError> {
    match filter {
        ValFilter::Attr(AttrExp::Comparison(path, CompareOp::Eq, CompValue::Str(value)))
            if path.name.eq_ignore_ascii_case("value") =>
        {
            Ok(vec![value.clone()])
        }
        ValFilter::Or(items) => {
            let mut all = Vec::new();
            for item in items.as_slice() {
                all.extend(filtered_values(item)?);
            }
            Ok(all)
        }
        _ => Err(ScimError::path(
            "Only members[value eq \"…\"] selects members.",
        )),
    }
}

/// A group's editable state while a change is worked out.
struct Draft {
    display_name: String,
    external_id: Option<String>,
    members: BTreeSet<String>,
}

impl Draft {
    fn string(field: &str, value: Option<&serde_json::Value>) -> Result<Option<String>, ScimError> {
        match value {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(serde_json::Value::String(s)) => text(field, s).map(Some),
            Some(_) => Err(ScimError::value(format!("{field} must be a string"))),
        }
    }

    fn set(
        &mut self,
        kind: &str,
        attr: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<(), ScimError> {
        match attr.to_ascii_lowercase().as_str() {
            "displayname" => match (kind, Self::string("displayName", value)?) {
                ("remove", _) | (_, None) => {
                    return Err(ScimError::new(
                        poem::http::StatusCode::BAD_REQUEST,
                        Some("mutability"),
                        "displayName is required",
                    ));
                }
                (_, Some(name)) => self.display_name = name,
            },
            "externalid" => {
                self.external_id = if kind == "remove" {
                    None
                } else {
                    Self::string("externalId", value)?
                };
            }
            "members" => {
                let values = match value {
                    Some(v) => reference_values(v)?,
                    None => Vec::new(),
                };
                match kind {
                    "add" => self.members.extend(values),
                    "replace" => self.members = values.into_iter().collect(),
                    _ if value.is_none() => self.members.clear(),
                    _ => {
                        for v in values {
                            self.members.remove(&v);
                        }
                    }
                }
            }
            // id, schemas, meta and other schemas' attributes: nothing to change.
            _ => {}
        }
        Ok(())
    }

    fn apply(&mut self, op: &PatchOperation) -> Result<(), ScimError> {
        let kind = op.op.to_ascii_lowercase();
        if !matches!(kind.as_str(), "add" | "replace" | "remove") {
            return Err(ScimError::value(format!(
                "op must be add, remove or replace, not {:?}",
                op.op
            )));
        }
        let Some(path) = op.path.as_deref().map(str::trim).filter(|p| !p.is_empty()) else {
            if kind == "remove" {
                return Err(ScimError::new(
                    poem::http::StatusCode::BAD_REQUEST,
                    Some("noTarget"),
                    "remove needs a path",
                ));
            }
            return match &op.value {
                Some(serde_json::Value::Object(values)) => {
                    for (key, value) in values {
                        self.set(&kind, key, Some(value))?;
                    }
                    Ok(())
                }
                _ => Err(ScimError::value(
                    "Without a path, value must be an object of attributes",
                )),
            };
        };
        let parsed: PatchPath = path
            .parse()
            .map_err(|e| ScimError::path(format!("The path cannot be read: {e}")))?;
        if kind != "remove" && op.value.is_none() {
            return Err(ScimError::value(format!("{kind} needs a value")));
        }
        match parsed {
            PatchPath::Attr(attr) => {
                if attr.sub_attr.is_some() {
                    return Err(ScimError::path(format!("{path} is not a group attribute")));
                }
                self.set(&kind, &attr.name, op.value.as_ref())
            }
            PatchPath::Value(selected) if selected.attr.name.eq_ignore_ascii_case("members") => {
                if kind != "remove" || selected.sub_attr.is_some() {
                    return Err(ScimError::path(
                        "members[…] can only be removed; add or replace members by value.",
                    ));
                }
                for value in filtered_values(&selected.filter)? {
                    self.members.remove(&value);
                }
                Ok(())
            }
            PatchPath::Value(_) => Err(ScimError::path(format!("{path} is not a group attribute"))),
        }
    }
}

async fn current_members(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    group_id: Uuid,
) -> Result<BTreeSet<Uuid>, ScimError> {
    Ok(scope
        .rows::<scim_group_members::Entity>()
        .filter(scim_group_members::Column::GroupId.eq(group_id))
        .all(txn)
        .await?
        .into_iter()
        .map(|m| m.account_id)
        .collect())
}

/// Writes the group's new state and its members, then recomputes the roles it touches.
async fn store(
    state: &AppState,
    txn: DatabaseTransaction,
    scope: OrgScope,
    row: scim_groups::Model,
    draft: Draft,
    now: DateTime<Utc>,
) -> Result<Group, ScimError> {
    let wanted = members(&txn, scope, draft.members).await?;
    let key = draft.display_name.to_lowercase();
    if key != row.display_name_key
        && key_taken::<scim_groups::Entity>(
            &txn,
            scope,
            scim_groups::Column::DisplayNameKey,
            &key,
            Some((scim_groups::Column::Id, row.id)),
        )
        .await?
    {
        return Err(ScimError::uniqueness(
            "A group with that displayName exists.",
        ));
    }
    let renamed = draft.display_name != row.display_name;
    let group_id = row.id;
    let before = current_members(&txn, scope, group_id).await?;
    let mut changed: scim_groups::ActiveModel = row.into();
    changed.display_name = Set(draft.display_name);
    changed.display_name_key = Set(key);
    changed.external_id = Set(draft.external_id);
    changed.updated_at = Set(now);
    let row = changed.update(&txn).await?;
    let gone: Vec<Uuid> = before.difference(&wanted).copied().collect();
    if !gone.is_empty() {
        scope
            .delete_rows::<scim_group_members::Entity>()
            .filter(scim_group_members::Column::GroupId.eq(group_id))
            .filter(scim_group_members::Column::AccountId.is_in(gone))
            .exec(&txn)
            .await?;
    }
    let added: Vec<scim_group_members::ActiveModel> = wanted
        .difference(&before)
        .map(|account_id| scim_group_members::ActiveModel {
            org_id: Set(scope.org_id().uuid()),
            group_id: Set(group_id),
            account_id: Set(*account_id),
        })
        .collect();
    if !added.is_empty() {
        scim_group_members::Entity::insert_many(added)
            .exec(&txn)
            .await?;
    }
    let touched: BTreeSet<Uuid> = if renamed {
        before.union(&wanted).copied().collect()
    } else {
        before.symmetric_difference(&wanted).copied().collect()
    };
    let rules = provision::role_rules(&txn, scope).await?;
    provision::sync_members(&txn, scope, &rules, &touched, now).await?;
    let group = one(state, &txn, scope, row).await?;
    txn.commit().await?;
    rules.send_invitations(state).await?;
    Ok(group)
}

fn draft_of(input: &GroupInput) -> Result<Draft, ScimError> {
    Ok(Draft {
        display_name: text("displayName", &input.display_name)?,
        external_id: Draft::string(
            "externalId",
            input
                .external_id
                .as_ref()
                .map(|s| serde_json::Value::String(s.clone()))
                .as_ref(),
        )?,
        members: input
            .members
            .iter()
            .flatten()
            .map(|m| m.value.clone())
            .collect(),
    })
}

/// `POST /Groups`.
pub async fn create(
    state: &AppState,
    scope: OrgScope,
    input: GroupInput,
) -> Result<Group, ScimError> {
    let draft = draft_of(&input)?;
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let key = draft.display_name.to_lowercase();
    if key_taken::<scim_groups::Entity>(
        &txn,
        scope,
        scim_groups::Column::DisplayNameKey,
        &key,
        None,
    )
    .await?
    {
        return Err(ScimError::uniqueness(
            "A group with that displayName exists.",
        ));
    }
    let row = scim_groups::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(scope.org_id().uuid()),
        display_name: Set(draft.display_name.clone()),
        display_name_key: Set(key),
        external_id: Set(draft.external_id.clone()),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    store(state, txn, scope, row, draft, now).await
}

/// `PUT /Groups/{id}`.
pub async fn replace(
    state: &AppState,
    scope: OrgScope,
    id: &str,
    input: GroupInput,
) -> Result<Group, ScimError> {
    let draft = draft_of(&input)?;
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let row = find(&txn, scope, id).await?;
    store(state, txn, scope, row, draft, now).await
}

/// `PATCH /Groups/{id}`: every operation applies, or none does.
pub async fn patch(
    state: &AppState,
    scope: OrgScope,
    id: &str,
    operations: &[PatchOperation],
) -> Result<Group, ScimError> {
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let row = find(&txn, scope, id).await?;
    let mut draft = Draft {
        display_name: row.display_name.clone(),
        external_id: row.external_id.clone(),
        members: current_members(&txn, scope, row.id)
            .await?
            .into_iter()
            .map(|id| AccountId::from(id).to_string())
            .collect(),
    };
    for op in operations {
        draft.apply(op)?;
    }
    store(state, txn, scope, row, draft, now).await
}

/// `DELETE /Groups/{id}`: its members' roles are recomputed without it.
pub async fn delete(state: &AppState, scope: OrgScope, id: &str) -> Result<(), ScimError> {
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let row = find(&txn, scope, id).await?;
    let before = current_members(&txn, scope, row.id).await?;
    scope
        .delete_rows::<scim_group_members::Entity>()
        .filter(scim_group_members::Column::GroupId.eq(row.id))
        .exec(&txn)
        .await?;
    scope
        .delete_rows::<scim_groups::Entity>()
        .filter(scim_groups::Column::Id.eq(row.id))
        .exec(&txn)
        .await?;
    let rules = provision::role_rules(&txn, scope).await?;
    provision::sync_members(&txn, scope, &rules, &before, now).await?;
    txn.commit().await?;
    rules.send_invitations(state).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(json: serde_json::Value) -> PatchOperation {
        serde_json::from_value(json).expect("an operation")
    }

    fn draft(members: &[&str]) -> Draft {
        Draft {
            display_name: "ops".into(),
            external_id: None,
            members: members.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    #[test]
    fn member_operations_as_okta_and_entra_send_them() {
        let mut d = draft(&["a"]);
        // Entra: Add with a list of values.
        d.apply(&op(serde_json::json!({"op": "Add", "path": "members", "value": [{"value": "b"}, {"value": "c"}]})))
            .expect("add");
        assert_eq!(d.members.len(), 3);
        // Okta: remove by filter.
        d.apply(&op(
            serde_json::json!({"op": "remove", "path": "members[value eq \"b\"]"}),
        ))
        .expect("remove by filter");
        // Entra: Remove with a value list.
        d.apply(&op(
            serde_json::json!({"op": "Remove", "path": "members", "value": [{"value": "a"}]}),
        ))
        .expect("remove by value");
        assert_eq!(d.members.iter().collect::<Vec<_>>(), vec!["c"]);
        // Okta: replace members and rename in one path-less replace.
        d.apply(&op(serde_json::json!({"op": "replace", "value": {"id": "x", "displayName": "admins", "members": [{"value": "d"}]}})))
            .expect("path-less replace");
        assert_eq!(d.display_name, "admins");
        assert_eq!(d.members.iter().collect::<Vec<_>>(), vec!["d"]);
        d.apply(&op(serde_json::json!({"op": "remove", "path": "members"})))
            .expect("remove all");
        assert!(d.members.is_empty());
        let err = d
            .apply(&op(
                serde_json::json!({"op": "remove", "path": "displayName"}),
            ))
            .expect_err("displayName is required");
        assert_eq!(err.scim_type, Some("mutability"));
    }
}
