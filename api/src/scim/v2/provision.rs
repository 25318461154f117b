//! What provisioning does to the organization: a provisioned user is a member exactly while
//! they are `active` and their groups (or the SSO connection's `default_role`) give them a
//! role; their role is the highest their groups' `displayName`s map to through the SSO
//! connection's `role_mappings`, else `default_role`. An owner stays owner whatever the groups
//! say, but deactivating or deleting them removes them like anybody else, unless they are the
//! last owner (refused, nothing changed).
//!
//! The provider reaches only what the organization controls (decisions §18): an address at one
//! of its verified domains becomes a member directly; anybody else is sent an invitation
//! (listed as pending, accepted by the person, with the role their groups give then). Whoever
//! loses their membership loses it at once: their API tokens here are revoked, an owner's SCIM
//! token stops working, and their sessions are ended when the address is at a verified domain
//! (an identity the organization controls; anybody else's sessions are their own).

use std::{collections::BTreeSet, sync::Mutex};

use chrono::{DateTime, Utc};
use entities::{
    accounts, invitations, memberships, scim_group_members, scim_groups, scim_tokens, scim_users,
    sessions, sso_connections, sso_domains,
};
use platform::ids::{AccountId, InvitationId};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseTransaction, QueryFilter, Set, sea_query::Expr,
};
use uuid::Uuid;

use super::wire::ScimError;
use crate::{AppState, http::rights::Role, identity::audit::Entry};
use entities::scope::{OrgScope, Untenanted};

/// How groups become roles (the SSO connection's mappings and default), which addresses the
/// organization controls (its verified domains), on whose authority invitations are sent (the
/// SCIM token's issuer), and the invitations a change sent, to email once it commits.
#[derive(Debug, Default)]
pub struct RoleRules {
    pub mappings: Vec<domain::sso::RoleMapping>,
    pub default_role: Option<domain::sso::SsoRole>,
    /// The organization's verified domains.
    pub verified_domains: Vec<String>,
    /// Who issued the live SCIM token: the inviter of the invitations provisioning sends.
    pub issuer: Option<Uuid>,
    invited: Mutex<Vec<Uuid>>,
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

    /// Whether the organization controls `email`: it is at one of its verified domains.
    pub fn controls(&self, email: &str) -> bool {
        domain::sso::email_domain(email).is_some_and(|d| self.verified_domains.contains(&d))
    }

    /// Emails the invitations this change sent; call once it has committed.
    pub async fn send_invitations(&self, state: &AppState) -> Result<(), ScimError> {
        let invited = std::mem::take(&mut *self.invited.lock().unwrap_or_else(|e| e.into_inner()));
        for invitation_id in invited {
            state
                .queue
                .push(domain::notifications::jobs::SendLink::Invitation { invitation_id })
                .await
                .map_err(ScimError::internal)?;
        }
        Ok(())
    }

    fn invited(&self, invitation_id: Uuid) {
        self.invited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(invitation_id);
    }
}

/// The organization's role rules, from its SSO connection (enabled or not: the mappings say
/// what the provider's groups mean); none saved: nobody gets a role from a group.
pub async fn role_rules(
    txn: &DatabaseTransaction,
    scope: OrgScope,
) -> Result<RoleRules, ScimError> {
    let verified_domains = scope
        .rows::<sso_domains::Entity>()
        .filter(sso_domains::Column::VerifiedAt.is_not_null())
        .all(txn)
        .await?
        .into_iter()
        .map(|claim| claim.domain)
        .collect();
    let issuer = scope
        .rows::<scim_tokens::Entity>()
        .filter(scim_tokens::Column::RevokedAt.is_null())
        .one(txn)
        .await?
        .map(|token| token.issued_by);
    let Some(connection) = scope.rows::<sso_connections::Entity>().one(txn).await? else {
        return Ok(RoleRules {
            verified_domains,
            issuer,
            ..RoleRules::default()
        });
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
        verified_domains,
        issuer,
        invited: Mutex::default(),
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

/// The role `account_id`'s SCIM user should have now: none unless it is provisioned and
/// active; else what its groups give.
pub async fn desired_role(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    account_id: Uuid,
) -> Result<(bool, Option<Role>), ScimError> {
    let user = scope
        .rows::<scim_users::Entity>()
        .filter(scim_users::Column::AccountId.eq(account_id))
        .one(txn)
        .await?;
    let active = user.as_ref().is_some_and(|u| u.active);
    if !active {
        return Ok((false, None));
    }
    let names = group_names(txn, scope, account_id).await?;
    Ok((true, rules.role_for(&names)))
}

async fn sync(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    account_id: Uuid,
    now: DateTime<Utc>,
    keep_unmapped: bool,
) -> Result<(), ScimError> {
    let (active, desired) = desired_role(txn, scope, rules, account_id).await?;
    let current = scope.member(AccountId::from(account_id)).one(txn).await?;
    let email = accounts::Entity::row(account_id)
        .one(txn)
        .await?
        .map(|a| a.email)
        .unwrap_or_default();
    let controlled = rules.controls(&email);
    let org_id = scope.org_id().uuid();
    match (current, desired) {
        (None, None) => {
            withdraw_invitation(txn, scope, &email, now).await?;
        }
        (None, Some(role)) if controlled => {
            memberships::ActiveModel {
                org_id: Set(org_id),
                account_id: Set(account_id),
                role: Set(role.as_str().to_owned()),
                created_at: Set(now),
            }
            .insert(txn)
            .await?;
            withdraw_invitation(txn, scope, &email, now).await?;
            Entry::new("scim.member_added")
                .org(org_id)
                .target(AccountId::from(account_id))
                .details(serde_json::json!({ "role": role.as_str() }))
                .write(txn, now)
                .await?;
        }
        // An account keyed by a `userName` that is not an address cannot be emailed an
        // invitation: it stays provisioned and outside the organization.
        (None, Some(role)) if crate::http::input::Email::parse("email", &email).is_ok() => {
            invite(txn, scope, rules, account_id, &email, role, now).await?;
        }
        (None, Some(_)) => {}
        (Some(member), Some(role)) => {
            let held = Role::stored(&member.role);
            if held != Some(Role::Owner) && held != Some(role) {
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
            if Role::stored(&member.role) == Some(Role::Owner) {
                if active {
                    // An owner stays owner whatever their groups say.
                    return Ok(());
                }
                if crate::identity::members::owners(txn, scope).await? <= 1 {
                    return Err(ScimError::last_owner());
                }
            }
            remove_member(txn, scope, account_id, &member.role, controlled, now).await?;
        }
    }
    Ok(())
}

/// The pending SCIM invitation of `email` in the organization, if any.
async fn pending_invitation(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    email: &str,
    now: DateTime<Utc>,
) -> Result<Option<invitations::Model>, ScimError> {
    Ok(scope
        .rows::<invitations::Entity>()
        .filter(invitations::Column::Email.eq(email))
        .filter(invitations::Column::ViaScim.eq(true))
        .filter(invitations::Column::AcceptedAt.is_null())
        .filter(invitations::Column::RevokedAt.is_null())
        .filter(invitations::Column::ExpiresAt.gt(now))
        .one(txn)
        .await?)
}

/// Invites an address the organization does not control, with the role its groups give now
/// (a pending invitation keeps its link and takes the new role). The email goes out once the
/// change commits ([`RoleRules::send_invitations`]).
async fn invite(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    rules: &RoleRules,
    account_id: Uuid,
    email: &str,
    role: Role,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    if let Some(pending) = pending_invitation(txn, scope, email, now).await? {
        if Role::stored(&pending.role) != Some(role) {
            let mut changed: invitations::ActiveModel = pending.into();
            changed.role = Set(role.as_str().to_owned());
            changed.update(txn).await?;
        }
        return Ok(());
    }
    let issuer = rules
        .issuer
        .ok_or_else(|| ScimError::internal(anyhow::anyhow!("provisioning without a SCIM token")))?;
    // The worker mints the real token when it sends the email; until then the row holds the
    // hash of a value nobody has.
    let placeholder = platform::secrets::mint("");
    let row = invitations::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(scope.org_id().uuid()),
        email: Set(email.to_owned()),
        role: Set(role.as_str().to_owned()),
        token_hash: Set(placeholder.hash),
        invited_by: Set(issuer),
        created_at: Set(now),
        expires_at: Set(now + domain::invitations::INVITATION_TTL),
        accepted_at: Set(None),
        revoked_at: Set(None),
        revoked_reason: Set(None),
        via_scim: Set(true),
    }
    .insert(txn)
    .await?;
    Entry::new("scim.member_invited")
        .org(scope.org_id().uuid())
        .target(AccountId::from(account_id))
        .details(serde_json::json!({
            "invitation": InvitationId::from(row.id).to_string(),
            "email": email,
            "role": role.as_str(),
        }))
        .write(txn, now)
        .await?;
    rules.invited(row.id);
    Ok(())
}

/// Revokes the pending SCIM invitation of `email`, if any: the provider no longer gives the
/// person a role.
async fn withdraw_invitation(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    email: &str,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    scope
        .update_rows::<invitations::Entity>()
        .col_expr(invitations::Column::RevokedAt, Expr::value(now))
        .col_expr(
            invitations::Column::RevokedReason,
            Expr::value("The identity provider no longer provisions this person."),
        )
        .filter(invitations::Column::Email.eq(email))
        .filter(invitations::Column::ViaScim.eq(true))
        .filter(invitations::Column::AcceptedAt.is_null())
        .filter(invitations::Column::RevokedAt.is_null())
        .exec(txn)
        .await?;
    Ok(())
}

/// Removes the membership, revokes the member's API tokens here (and their SCIM token, for an
/// owner) and, when the organization controls the address, ends their sessions.
async fn remove_member(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    account_id: Uuid,
    role: &str,
    controlled: bool,
    now: DateTime<Utc>,
) -> Result<(), ScimError> {
    crate::identity::members::end_membership(txn, scope, account_id, role, now).await?;
    // Sessions belong to the person, not to one organization: only an identity the
    // organization controls (at its verified domains) is signed out everywhere, so that
    // nobody's provider can sign strangers out.
    if controlled {
        sessions::Entity::delete_rows()
            .filter(sessions::Column::AccountId.eq(account_id))
            .exec(txn)
            .await?;
    }
    Entry::new("scim.member_removed")
        .org(scope.org_id().uuid())
        .target(AccountId::from(account_id))
        .details(serde_json::json!({ "role": role, "sessions_ended": controlled }))
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
            ..RoleRules::default()
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

    #[test]
    fn the_organization_controls_only_addresses_at_its_verified_domains() {
        let rules = RoleRules {
            verified_domains: vec!["acme.test".into()],
            ..RoleRules::default()
        };
        assert!(rules.controls("ann@acme.test"));
        assert!(rules.controls("Ann@ACME.test"));
        assert!(!rules.controls("ann@sub.acme.test"));
        assert!(!rules.controls("ann@acme.test.evil.test"));
        assert!(!rules.controls("ann"));
    }
}
