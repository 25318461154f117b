//! Invitations: an admin invites an address with a role (never owner); the emailed token,
//! accepted without a session, creates the account if needed, adds the membership and signs
//! the person in. Creating, listing and revoking need a person (never an API token), and an
//! invitation holds only while its inviter may still invite that role.

use chrono::{DateTime, Utc};
use domain::notifications::jobs::SendLink;
use entities::{accounts, invitations, memberships, organizations};
use platform::ids::{AccountId, InvitationId};
use poem::Request;
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseTransaction, QueryFilter, Set, sea_query::Expr,
};

use crate::{
    AppState,
    http::access::{self, org},
    http::error::{
        ApiError, BadRequest, Conflict, Errors, Forbidden, NotFound, StateRefusal, TooManyRequests,
    },
    http::error::{OrgConflictErrors, OrgInputErrors, OrgReadErrors},
    http::input::{self, Email},
    http::paging::{Order, Page, Paging},
    http::rights::{AdministerInPerson, Right, Role},
    http::tags::Tag,
    http::text::{EmailText, InvitedRoleText},
    identity::audit::Entry,
    identity::auth::{SignedIn, VerifyRequest, limit_anonymous, sso_required, start_session},
    identity::members::lock_org,
    identity::revoke::revoke,
};
use entities::scope::{Credential, OrgScope, Untenanted};

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct NewInvitation {
    #[oai(validator(max_length = 254))]
    pub email: EmailText,
    /// admin, operator or viewer; an invitation never grants owner.
    #[oai(validator(max_length = 16))]
    pub role: InvitedRoleText,
}

#[derive(Object)]
pub struct Invitation {
    /// `inv_` id.
    pub id: InvitationId,
    pub email: String,
    pub role: String,
    /// pending, accepted, revoked or expired.
    pub status: String,
    /// Why it was revoked when nobody revoked it by hand: its inviter may no longer invite,
    /// or the identity provider no longer provisions the person. Null otherwise.
    #[oai(nullable)]
    pub revoked_reason: Option<String>,
    /// Sent by SCIM provisioning to an address outside the organization's verified domains:
    /// the person becomes a member by accepting it, with the role their groups give then.
    pub via_scim: bool,
    /// Who invited (`usr_`).
    pub invited_by: AccountId,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum Created {
    /// Created; the invitation email is on its way.
    #[oai(status = 201)]
    Created(Json<Invitation>),
}

#[derive(ApiResponse)]
pub enum Revoked {
    /// Revoked: its link no longer works.
    #[oai(status = 204)]
    Revoked,
}

fn invitation(row: invitations::Model, now: DateTime<Utc>) -> Invitation {
    let status = if row.accepted_at.is_some() {
        "accepted"
    } else if row.revoked_at.is_some() {
        "revoked"
    } else if row.expires_at <= now {
        "expired"
    } else {
        "pending"
    };
    Invitation {
        id: InvitationId::from(row.id),
        email: row.email,
        role: row.role,
        status: status.to_owned(),
        invited_by: AccountId::from(row.invited_by),
        revoked_reason: row.revoked_reason,
        via_scim: row.via_scim,
        created_at: row.created_at,
        expires_at: row.expires_at,
    }
}

/// Why an invitation no longer holds: words for the person, and the reason recorded on it.
type Refusal = (&'static str, &'static str);

/// The role an invitation gives when it is accepted now, or why it no longer holds:
/// - one an admin sent holds only while whoever sent it is still a member whose role may
///   invite that role (decisions §4: admins and owners; never above their own role);
/// - one SCIM sent (an address outside the verified domains, decisions §18) holds while the
///   provider still provisions the person, with a live token, and gives the role their groups
///   give now.
async fn authority(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    invitation: &invitations::Model,
) -> Result<Result<Role, Refusal>, ApiError> {
    if invitation.via_scim {
        let rules = crate::scim::v2::provision::role_rules(txn, scope)
            .await
            .map_err(|e| {
                ApiError::Internal(anyhow::Error::from(e).context("reading the role rules"))
            })?;
        let account = accounts::Entity::rows()
            .filter(accounts::Column::Email.eq(invitation.email.as_str()))
            .one(txn)
            .await?;
        let role = match (&rules.issuer, account) {
            (Some(_), Some(account)) => {
                crate::scim::v2::provision::desired_role(txn, scope, &rules, account.id)
                    .await
                    .map_err(|e| {
                        ApiError::Internal(
                            anyhow::Error::from(e).context("reading the provisioned role"),
                        )
                    })?
                    .1
            }
            _ => None,
        };
        return Ok(role.ok_or((
            "The organization's identity provider no longer gives you a role there; ask one of \
             its owners.",
            "The identity provider no longer provisions this person.",
        )));
    }
    let invited: Role = invitation
        .role
        .parse()
        .map_err(|()| ApiError::Internal(anyhow::anyhow!("unknown stored role")))?;
    let inviter = scope
        .member(invitation.invited_by.into())
        .one(txn)
        .await?
        .and_then(|m| m.role.parse::<Role>().ok());
    Ok(match inviter {
        Some(role) if Right::Administer.allowed_to(role) && role.at_least(invited) => Ok(invited),
        _ => Err((
            "Whoever sent this invitation can no longer invite to this organization; ask one of \
             its admins for a new invitation.",
            "Whoever sent it can no longer invite to this organization (the inviter was removed \
             or given a lower role).",
        )),
    })
}

pub struct InvitationsApi;

#[OpenApi(tag = "Tag::Invitations")]
impl InvitationsApi {
    /// Invite an address with a role (admin, operator or viewer; never owner). The email links
    /// to `{SERVICE_BASE_URL}/invitations/accept?token=…`, valid 7 days. An address that is
    /// already a member is a 409 `conflict`.
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/invitations",
        method = "post",
        operation_id = "createInvitation"
    )]
    async fn create(
        &self,
        org: org::Path<AdministerInPerson>,
        state: poem::web::Data<&AppState>,
        body: Json<NewInvitation>,
    ) -> Result<Created, OrgConflictErrors> {
        let email = Email::parse("email", &body.email)?;
        let role = input::role("role", &body.role)?;
        if role == Role::Owner {
            return Err(ApiError::invalid("role: an invitation can never grant owner").into());
        }
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let existing = accounts::Entity::rows()
            .filter(accounts::Column::Email.eq(email.as_str()))
            .one(&txn)
            .await?;
        if let Some(account) = existing
            && org
                .scope()
                .member(account.id.into())
                .one(&txn)
                .await?
                .is_some()
        {
            return Err(
                ApiError::Conflict(format!("{} is already a member.", email.as_str())).into(),
            );
        }
        // The worker mints the real token when it sends the email (no credential in the
        // queue); until then the row holds the hash of a value nobody has.
        let placeholder = platform::secrets::mint("");
        let row = invitations::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            email: Set(email.as_str().to_owned()),
            role: Set(role.as_str().to_owned()),
            token_hash: Set(placeholder.hash),
            invited_by: Set(org.caller.account_id()),
            created_at: Set(now),
            expires_at: Set(now + domain::invitations::INVITATION_TTL),
            accepted_at: Set(None),
            revoked_at: Set(None),
            revoked_reason: Set(None),
            via_scim: Set(false),
        }
        .insert(&txn)
        .await?;
        Entry::new("invitation.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(InvitationId::from(row.id))
            .details(serde_json::json!({ "email": row.email, "role": row.role }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;
        state
            .queue
            .push(SendLink::Invitation {
                invitation_id: row.id,
            })
            .await?;
        Ok(Created::Created(Json(invitation(row, now))))
    }

    /// The organization's invitations, newest first.
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/invitations",
        method = "get",
        operation_id = "listInvitations"
    )]
    async fn list(
        &self,
        org: org::Path<AdministerInPerson>,
        state: poem::web::Data<&AppState>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<Invitation>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let rows = org.scope().rows::<invitations::Entity>();
        let rows = paging
            .fetch(&state.db.orm, rows, Order::NewestFirst)
            .await?;
        let now = state.clock.now();
        Ok(Json(rows.page(|r| invitation(r, now))))
    }

    /// Revoke an invitation: its link stops working. An invitation already accepted or revoked,
    /// or of another organization, is 404 `not-found`.
    ///
    /// Needs a person: a signed-in session. An API token is refused with 403 `forbidden`.
    #[oai(
        path = "/v1/orgs/:org/invitations/:invitation_id",
        method = "delete",
        operation_id = "revokeInvitation"
    )]
    async fn revoke(
        &self,
        org: org::Path<AdministerInPerson>,
        state: poem::web::Data<&AppState>,
        /// The invitation's id (`inv_`).
        invitation_id: Path<InvitationId>,
    ) -> Result<Revoked, OrgReadErrors> {
        revoke(&state, &org, *invitation_id).await?;
        Ok(Revoked::Revoked)
    }

    /// Accept an invitation. Needs no session: the account is created if there is none, the
    /// membership is added, and the answer signs the person in like the verify operations. An
    /// unknown, used, revoked or expired token gets one answer, 404 `invalid-token`; an
    /// organization that enforces single sign-on 403 `sso-required`.
    ///
    /// An invitation carries its inviter's authority: when the inviter is no longer a member,
    /// or no longer has a role that may invite that role, it is refused with 409
    /// `invalid-state` (ask an admin for a new one) and listed as `revoked` with its
    /// `revoked_reason` from then on. An invitation SCIM sent gives the role the identity
    /// provider's groups give at acceptance, and is refused the same way once the provider no
    /// longer provisions the person.
    #[oai(
        path = "/v1/invitations/accept",
        method = "post",
        operation_id = "acceptInvitation",
        tag = "Tag::Auth"
    )]
    async fn accept(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        body: Json<VerifyRequest>,
    ) -> Result<SignedIn, Errors<(BadRequest, Forbidden, NotFound, Conflict, TooManyRequests)>>
    {
        limit_anonymous(&state, req).await?;
        let token = body.token.trim();
        if !platform::secrets::well_formed("", token) {
            return Err(ApiError::InvalidToken.into());
        }
        let now = state.clock.now();
        let hash = platform::secrets::hash(token);
        let txn = state.db.begin_write().await?;
        // The token names the invitation, and so its organization: no scope is known yet.
        let Some(row) = invitations::Entity::by_credential(hash).one(&txn).await? else {
            return Err(ApiError::InvalidToken.into());
        };
        let scope = OrgScope::of(row.org_id);
        let accepted = scope
            .update_rows::<invitations::Entity>()
            .col_expr(invitations::Column::AcceptedAt, Expr::value(now))
            .filter(invitations::Column::Id.eq(row.id))
            .filter(invitations::Column::AcceptedAt.is_null())
            .filter(invitations::Column::RevokedAt.is_null())
            .filter(invitations::Column::ExpiresAt.gt(now))
            .exec(&txn)
            .await?;
        if accepted.rows_affected != 1 {
            return Err(ApiError::InvalidToken.into());
        }
        let org = scope
            .rows::<organizations::Entity>()
            .one(&txn)
            .await?
            .ok_or(ApiError::InvalidToken)?;
        // Serializes with role changes and removals, so the inviter checked is the one that
        // stands when the membership is added.
        lock_org(&state, &txn, scope).await?;
        let role = match authority(&txn, scope, &row).await? {
            Ok(role) => role,
            Err(refusal) => {
                // Over for good: the list says so, and the link stays dead.
                drop(txn);
                let (message, reason) = refusal;
                let txn = state.db.begin_write().await?;
                scope
                    .update_rows::<invitations::Entity>()
                    .col_expr(invitations::Column::RevokedAt, Expr::value(now))
                    .col_expr(invitations::Column::RevokedReason, Expr::value(reason))
                    .filter(invitations::Column::Id.eq(row.id))
                    .filter(invitations::Column::AcceptedAt.is_null())
                    .filter(invitations::Column::RevokedAt.is_null())
                    .exec(&txn)
                    .await?;
                Entry::new("invitation.refused")
                    .org(row.org_id)
                    .target(InvitationId::from(row.id))
                    .details(serde_json::json!({ "email": row.email, "reason": reason }))
                    .write(&txn, now)
                    .await?;
                txn.commit().await?;
                return Err(ApiError::state(StateRefusal::InvalidState, message).into());
            }
        };
        // An address at an enforcing organization's verified domain joins through its provider.
        if sso_required(&state, &txn, &row.email).await? {
            return Err(ApiError::SsoRequired.into());
        }
        let (account, _) = domain::accounts::for_address(&txn, &row.email, None, now).await?;
        let ip = access::client_ip(req);
        let already = scope.member(account.id.into()).one(&txn).await?;
        if already.is_none() {
            memberships::ActiveModel {
                org_id: Set(org.id),
                account_id: Set(account.id),
                role: Set(role.as_str().to_owned()),
                created_at: Set(now),
            }
            .insert(&txn)
            .await?;
        }
        Entry::new("invitation.accepted")
            .org(org.id)
            .account(account.id, ip)
            .target(InvitationId::from(row.id))
            .details(serde_json::json!({ "email": account.email, "role": role.as_str(), "already_member": already.is_some(), "via_scim": row.via_scim }))
            .write(&txn, now)
            .await?;
        let session = start_session(&state, &txn, account.id, now).await?;
        txn.commit().await?;
        Ok(session.answer())
    }
}
