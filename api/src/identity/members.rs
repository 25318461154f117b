//! Members of an organization: list, change a role, remove. Only an owner may make or unmake
//! an owner, and the last owner can be neither removed nor demoted. Changing and removing
//! members need a person, never an API token.

use chrono::{DateTime, Utc};
use entities::{accounts, api_tokens, memberships, organizations};
use platform::ids::AccountId;
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseTransaction, PaginatorTrait, QueryFilter, QuerySelect,
    Set, sea_query::Expr,
};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, StateRefusal},
    http::error::{OrgConflictErrors, OrgInputErrors},
    http::input,
    http::paging::{Order, Page, Paging},
    http::rights::{Administer, AdministerInPerson, MemberInPerson, Right, Role},
    http::tags::Tag,
    http::text::RoleText,
    identity::audit::Entry,
};
use entities::scope::{OrgScope, Untenanted};

#[derive(Object)]
pub struct Member {
    /// The account's id (`usr_`).
    pub id: AccountId,
    pub email: String,
    #[oai(nullable)]
    pub name: Option<String>,
    /// owner, admin, operator or viewer.
    pub role: String,
    pub joined_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct RoleChange {
    /// owner, admin, operator or viewer. Only an owner may grant or take away owner.
    #[oai(validator(max_length = 16))]
    pub role: RoleText,
}

#[derive(ApiResponse)]
pub enum Removed {
    /// Removed; their API tokens for this organization are revoked.
    #[oai(status = 204)]
    Removed,
}

type MemberErrors = OrgConflictErrors;

fn member(account: accounts::Model, membership: memberships::Model) -> Member {
    Member {
        id: AccountId::from(account.id),
        email: account.email,
        name: account.name,
        role: membership.role,
        joined_at: membership.created_at,
    }
}

/// Locks the organization's memberships against concurrent role changes (Postgres; SQLite
/// transactions already serialize writers) so two demotions cannot leave it without an owner.
pub async fn lock_org(
    state: &AppState,
    txn: &DatabaseTransaction,
    scope: OrgScope,
) -> Result<(), ApiError> {
    if state.db.kind() == platform::config::DatabaseKind::Postgres {
        scope
            .rows::<organizations::Entity>()
            .lock_exclusive()
            .one(txn)
            .await?;
    }
    Ok(())
}

/// Ends a membership held as `role`: the membership, the member's API tokens here and, for an
/// owner, the SCIM token they issued.
pub(crate) async fn end_membership(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    account_id: Uuid,
    role: &str,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
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
    if Role::stored(role) == Some(Role::Owner) {
        crate::scim::token::revoke_issued_by(txn, scope, account_id, now).await?;
    }
    Ok(())
}

/// How many owners the organization has (it must keep one).
pub(crate) async fn owners(
    txn: &DatabaseTransaction,
    scope: OrgScope,
) -> Result<u64, sea_orm::DbErr> {
    scope
        .rows::<memberships::Entity>()
        .filter(memberships::Column::Role.eq(Role::Owner.as_str()))
        .count(txn)
        .await
}

pub struct MembersApi;

#[OpenApi(tag = "Tag::Members")]
impl MembersApi {
    /// The organization's members, in the order they joined.
    #[oai(
        path = "/v1/orgs/:org/members",
        method = "get",
        operation_id = "listMembers"
    )]
    async fn list(
        &self,
        org: org::Path<Administer>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Member>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let query = paging.apply(
            org.scope().rows::<memberships::Entity>(),
            memberships::Column::AccountId,
            Order::OldestFirst,
        );
        let rows: Vec<_> = query
            .find_also_related(accounts::Entity)
            .all(&state.db.orm)
            .await?
            .into_iter()
            .filter_map(|(m, a)| a.map(|a| (m, a)))
            .collect();
        let rows = paging.cut(rows, |(m, _)| m.account_id);
        Ok(Json(rows.page(|(m, a)| member(a, m))))
    }

    /// Change a member's role. Only an owner may grant owner or change an owner's role; the last
    /// owner cannot be demoted (409 `invalid-state`).
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/members/:member_id",
        method = "patch",
        operation_id = "updateMember"
    )]
    async fn update(
        &self,
        org: org::Path<AdministerInPerson>,
        state: poem::web::Data<&AppState>,
        /// The member's account id (`usr_`).
        member_id: Path<AccountId>,
        body: Json<RoleChange>,
    ) -> Result<Json<Member>, MemberErrors> {
        let account_id = *member_id;
        let role = input::role("role", &body.role)?;
        let now = state.clock.now();
        let scope = org.scope();
        let txn = state.db.begin_write().await?;
        lock_org(&state, &txn, scope).await?;
        let current = scope
            .member(account_id)
            .one(&txn)
            .await?
            .ok_or(ApiError::NotFound)?;
        let current_role = input::role("role", &current.role)?;
        if (role == Role::Owner || current_role == Role::Owner) && org.role != Role::Owner {
            return Err(ApiError::forbidden("Only an owner may grant or take away owner.").into());
        }
        if current_role == Role::Owner && role != Role::Owner && owners(&txn, scope).await? <= 1 {
            return Err(ApiError::state(
                StateRefusal::InvalidState,
                "This is the last owner: make somebody else owner first.",
            )
            .into());
        }
        let mut changed: memberships::ActiveModel = current.clone().into();
        changed.role = Set(role.as_str().to_owned());
        let updated = changed.update(&txn).await?;
        if current_role == Role::Owner && role != Role::Owner {
            crate::scim::token::revoke_issued_by(&txn, scope, account_id.uuid(), now).await?;
        }
        Entry::new("member.role_changed")
            .org(org.org_id())
            .by(&org.caller)
            .target(account_id)
            .details(serde_json::json!({ "from": current.role, "to": role.as_str() }))
            .write(&txn, now)
            .await?;
        let account = accounts::Entity::row(account_id)
            .one(&txn)
            .await?
            .ok_or(ApiError::NotFound)?;
        txn.commit().await?;
        Ok(Json(member(account, updated)))
    }

    /// Remove a member, or leave: any member may remove themselves (the last owner may not);
    /// removing anybody else needs admin or above (403 `forbidden` otherwise), and only an owner
    /// may remove an owner. The last owner cannot be removed (409 `invalid-state`). Their API
    /// tokens here are revoked; an owner's SCIM token stops working. Audited as
    /// `member.removed`, or `member.left` for oneself.
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/members/:member_id",
        method = "delete",
        operation_id = "removeMember"
    )]
    async fn remove(
        &self,
        org: org::Path<MemberInPerson>,
        state: poem::web::Data<&AppState>,
        /// The member's account id (`usr_`).
        member_id: Path<AccountId>,
    ) -> Result<Removed, MemberErrors> {
        let account_id = *member_id;
        let leaving = account_id.uuid() == org.caller.account_id();
        if !leaving && !Right::Administer.allowed_to(org.role) {
            return Err(ApiError::forbidden(
                "Removing another member needs role admin or above; any member may leave.",
            )
            .into());
        }
        let now = state.clock.now();
        let scope = org.scope();
        let txn = state.db.begin_write().await?;
        lock_org(&state, &txn, scope).await?;
        let current = scope
            .member(account_id)
            .one(&txn)
            .await?
            .ok_or(ApiError::NotFound)?;
        if Role::stored(&current.role) == Some(Role::Owner) {
            if org.role != Role::Owner {
                return Err(ApiError::forbidden("Only an owner may remove an owner.").into());
            }
            if owners(&txn, scope).await? <= 1 {
                return Err(ApiError::state(
                    StateRefusal::InvalidState,
                    "This is the last owner: make somebody else owner first.",
                )
                .into());
            }
        }
        end_membership(&txn, scope, account_id.uuid(), &current.role, now).await?;
        Entry::new(if leaving {
            "member.left"
        } else {
            "member.removed"
        })
        .org(org.org_id())
        .by(&org.caller)
        .target(account_id)
        .details(serde_json::json!({ "role": current.role }))
        .write(&txn, now)
        .await?;
        txn.commit().await?;
        Ok(Removed::Removed)
    }
}
