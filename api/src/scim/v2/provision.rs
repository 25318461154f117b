//! What provisioning does to the organization: a provisioned user is a member exactly while
//! they are `active` and their groups (or the SSO connection's `default_role`) give them a
//! role; their role is the highest their groups' `displayName`s map to through the SSO
//! connection's `role_mappings`, else `default_role`. An owner stays owner whatever the groups
//! say, but deactivating or deleting them removes them like anybody else, unless they are the
//! last owner (refused, nothing changed). Whoever loses their membership loses it at once:
//! their API tokens here are revoked and their sessions ended, so their next request is
//! refused.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use entities::{
    api_tokens, memberships, scim_group_members, scim_groups, scim_users, sessions, sso_connections,
};
use platform::ids::AccountId;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseTransaction, PaginatorTrait, QueryFilter, Set,
    sea_query::Expr,
};
use uuid::Uuid;

use super::wire::ScimError;
use crate::{
    AppState,
    http::scope::{OrgScope, Untenanted},
    identity::audit::Entry,
    identity::roles::Role,
};

/// How groups become roles: the SSO connection's mappings and default.
#[derive(Debug, Clone, Default)]
pub struct RoleRules {
    pub mappings: Vec<domain::sso::RoleMapping>,
    pub default_role: Option<domain::sso::SsoRole>,
}

impl RoleRules {
    /// The highest role among the mappings of `groups` (matched exactly), else the default
    /// ([`domain::sso::role_for`], the rule single sign-on uses too). Never owner.
    pub fn role_for<G: AsRef<str>>(&self, groups: &[G]) -> Option<Role> {
        domain::sso::role_for(&self.mappings, self.default_role, groups).map(|role| match role {
            domain::sso::SsoRole::Admin => Role::Admin,
            domain::sso::SsoRole::Operator => Role::Operator,
            domain::sso::SsoRole::Viewer => Role::Viewer,
        })
    }
}

/// The organization's role rules, from its SSO connection (enabled or not: the mappings say
/// what the provider's groups mean); none saved: nobody gets a role from a group.
pub async fn role_rules(
    txn: &DatabaseTransaction,
    scope: OrgScope,
) -> Result<RoleRules, ScimError> {
    let Some(connection) = scope.rows::<sso_connections::Entity>().one(txn).await? else {
        return Ok(RoleRules::default());
    };
    let mappings = connection
        .role_mappings
        .read()
        .map_err(|e| ScimError::internal(e.into()))?;
    Ok(RoleRules {
        mappings,
        default_role: connection
            .default_role
            .as_deref()
            .and_then(domain::sso::SsoRole::parse),
    })
}

/// The display names of the SCIM groups `account_id` is in.
pub async fn group_names(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    account_id: Uuid,
) -> Result<Vec<String>, ScimError> {
    let ids: Vec<Uuid> = scope
        .rows::<scim_group_members::Entity>()
        .filter(scim_group_members::Column::AccountId.eq(account_id))
        .all(txn)
        .await?
        .into_iter()
        .map(|m| m.group_id)
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(scope
        .rows::<scim_groups::Entity>()
        .filter(scim_groups::Column::Id.is_in(ids))
        .all(txn)
        .await?
        .into_iter()
        .map(|g| g.display_name)
        .collect())
}

async fn owners(txn: &DatabaseTransaction, scope: OrgScope) -> Result<u64, ScimError> {
    Ok(scope
        .rows::<memberships::Entity>()
        .filter(memberships::Column::Role.eq(Role::Owner.as_str()))
        .count(txn)
        .await?)
}

/// Brings `account_id`'s membership in line with its SCIM user (absent: deleted) and groups.
pub async fn sync_member(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    account_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    sync(txn, scope, rules, account_id, now, false).await
}

/// [`sync_member`] for a user just provisioned: an existing member the provider links (found by
/// address) keeps their membership until the provider's groups give them a role or it
/// deactivates them, since providers create a user before they push its groups.
pub async fn sync_new_member(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    account_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    sync(txn, scope, rules, account_id, now, true).await
}

async fn sync(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    account_id: Uuid,
    now: DateTime<Utc>,
    keep_unmapped: bool,
) -> Result<(), ScimError> {
    let user = scope
        .rows::<scim_users::Entity>()
        .filter(scim_users::Column::AccountId.eq(account_id))
        .one(txn)
        .await?;
    let active = user.as_ref().is_some_and(|u| u.active);
    let desired = if active {
        let names = group_names(txn, scope, account_id).await?;
        rules.role_for(&names)
    } else {
        None
    };
    let current = scope.member(AccountId::from(account_id)).one(txn).await?;
    let org_id = scope.org_id().uuid();
    match (current, desired) {
        (None, None) => {}
        (None, Some(role)) => {
            memberships::ActiveModel {
                org_id: Set(org_id),
                account_id: Set(account_id),
                role: Set(role.as_str().to_owned()),
                created_at: Set(now),
            }
            .insert(txn)
            .await?;
            Entry::new("scim.member_added")
                .org(org_id)
                .target(AccountId::from(account_id))
                .details(serde_json::json!({ "role": role.as_str() }))
                .write(txn, now)
                .await?;
        }
        (Some(member), Some(role)) => {
            if member.role != Role::Owner.as_str() && member.role != role.as_str() {
                let from = member.role.clone();
                let mut changed: memberships::ActiveModel = member.into();
                changed.role = Set(role.as_str().to_owned());
                changed.update(txn).await?;
                Entry::new("scim.member_role_changed")
                    .org(org_id)
                    .target(AccountId::from(account_id))
                    .details(serde_json::json!({ "from": from, "to": role.as_str() }))
                    .write(txn, now)
                    .await?;
            }
        }
        (Some(_), None) if active && keep_unmapped => {}
        (Some(member), None) => {
            if member.role == Role::Owner.as_str() {
                if active {
                    // An owner stays owner whatever their groups say.
                    return Ok(());
                }
                if owners(txn, scope).await? <= 1 {
                    return Err(ScimError::last_owner());
                }
            }
            remove_member(txn, scope, account_id, &member.role, now).await?;
        }
    }
    Ok(())
}

/// Removes the membership, revokes the member's API tokens here and ends their sessions.
async fn remove_member(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    account_id: Uuid,
    role: &str,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    scope
        .delete_rows::<memberships::Entity>()
        .filter(memberships::Column::AccountId.eq(account_id))
        .exec(txn)
        .await?;
    scope
        .update_rows::<api_tokens::Entity>()
        .col_expr(api_tokens::Column::RevokedAt, Expr::value(now))
        .filter(api_tokens::Column::CreatedBy.eq(account_id))
        .filter(api_tokens::Column::RevokedAt.is_null())
        .exec(txn)
        .await?;
    // Sessions belong to the person, not to one organization: the provider that ends their
    // access here ends their sign-in, so the next request is refused at once.
    sessions::Entity::delete_rows()
        .filter(sessions::Column::AccountId.eq(account_id))
        .exec(txn)
        .await?;
    Entry::new("scim.member_removed")
        .org(scope.org_id().uuid())
        .target(AccountId::from(account_id))
        .details(serde_json::json!({ "role": role }))
        .write(txn, now)
        .await?;
    Ok(())
}

/// [`sync_member`] for each of `accounts`.
pub async fn sync_members(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    accounts: &BTreeSet<Uuid>,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    for account_id in accounts {
        sync_member(txn, scope, rules, *account_id, now).await?;
    }
    Ok(())
}

/// Opens the write transaction of a provisioning change, with the organization's memberships
/// locked (Postgres) so two changes cannot both remove "the other" owner.
pub async fn begin(state: &AppState, scope: OrgScope) -> Result<DatabaseTransaction, ScimError> {
    let txn = state.db.begin_write().await?;
    crate::identity::members::lock_org(state, &txn, scope).await?;
    Ok(txn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_mapped_role_wins_else_the_default() {
        use domain::sso::{RoleMapping, SsoRole};
        let mapping = |group: &str, role| RoleMapping {
            group: group.to_owned(),
            role,
        };
        let rules = RoleRules {
            mappings: vec![
                mapping("ops", SsoRole::Operator),
                mapping("admins", SsoRole::Admin),
                mapping("readers", SsoRole::Viewer),
            ],
            default_role: Some(SsoRole::Viewer),
        };
        assert_eq!(rules.role_for(&["readers", "ops"]), Some(Role::Operator));
        assert_eq!(rules.role_for(&["ops", "admins"]), Some(Role::Admin));
        assert_eq!(
            rules.role_for(&["Ops"]),
            Some(Role::Viewer),
            "exact match only"
        );
        let strict = RoleRules {
            default_role: None,
            ..rules
        };
        assert_eq!(strict.role_for(&["nobody"]), None);
    }
}
