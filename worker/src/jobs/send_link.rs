//! `email.link`: mint a one-time credential and email its link (sign-in, sign-up, invitation).
//!
//! The api queues only what to send; this job mints the token, stores its hash and sends the
//! message, so no job payload ever holds a live credential. A retry mints a new token (the
//! one of a failed attempt never reached anybody); a refused address aborts at once.

use domain::notifications::emails;
use entities::scope::{AllOrgs, OrgScope, Untenanted};

use crate::{
    Deps,
    mailer::{Cause, DeliveryError},
};
use apalis::prelude::{AbortError, Attempt, BoxDynError, Data};
use chrono::{DateTime, Duration, Utc};
use domain::notifications::jobs::SendLink;
use entities::{
    accounts, email_tokens, invitations,
    json::{JsonText, SignUpPayload},
    organizations,
};
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set, sea_query::Expr};

/// One-time email tokens (sign-in, sign-up) expire after this long.
pub const EMAIL_TOKEN_TTL: Duration = Duration::minutes(15);

pub async fn run(job: SendLink, deps: Data<Deps>, attempt: Attempt) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let Some(email) = compose(&job, &deps, now).await? else {
        return Ok(());
    };
    match deps.mailer.deliver(&email).await {
        Ok(()) => {
            tracing::info!(id = %email.id, attempt = attempt.current(), "link emailed");
            Ok(())
        }
        Err(err @ DeliveryError::Permanent(_)) => {
            tracing::warn!(id = %email.id, error = %err, "link undeliverable, not retrying");
            Err(AbortError::new(err).into())
        }
        Err(err @ DeliveryError::Transient(_)) => {
            tracing::warn!(id = %email.id, attempt = attempt.current(), error = %err, "emailing a link failed");
            Err(err.into())
        }
    }
}

/// Mints the token and builds the message; `None` when there is nothing to send (no account
/// for a sign-in address, an invitation no longer pending).
async fn compose(
    job: &SendLink,
    deps: &Deps,
    now: DateTime<Utc>,
) -> Result<Option<domain::notifications::jobs::SendEmail>, BoxDynError> {
    let db = &deps.db.orm;
    let base = &deps.config.base_url;
    match job {
        SendLink::SignIn { email } => {
            let known = accounts::Entity::rows()
                .filter(accounts::Column::Email.eq(email.as_str()))
                .one(db)
                .await?
                .is_some();
            if !known {
                tracing::debug!("sign-in link asked for an address without an account");
                return Ok(None);
            }
            let token = email_token(deps, "sign_in", email, None, now).await?;
            Ok(Some(emails::sign_in(base, email, &token)))
        }
        SendLink::SignUp {
            email,
            name,
            organization_name,
            organization_slug,
        } => {
            let payload = JsonText::new(&SignUpPayload {
                name: name.clone(),
                organization_name: organization_name.clone(),
                organization_slug: organization_slug.clone(),
            })?;
            let token = email_token(deps, "sign_up", email, Some(payload), now).await?;
            Ok(Some(emails::sign_up(
                base,
                email,
                organization_name,
                &token,
            )))
        }
        SendLink::Invitation { invitation_id } => {
            let Some(invitation) = AllOrgs::row::<invitations::Entity>(*invitation_id)
                .one(db)
                .await?
            else {
                return Ok(None);
            };
            let pending = invitation.accepted_at.is_none()
                && invitation.revoked_at.is_none()
                && invitation.expires_at > now;
            if !pending {
                tracing::debug!("invitation no longer pending; no email");
                return Ok(None);
            }
            let org = OrgScope::of(invitation.org_id)
                .rows::<organizations::Entity>()
                .one(db)
                .await?
                .ok_or_else(|| {
                    AbortError::new(DeliveryError::Permanent(Cause::OrganizationGone))
                })?;
            let inviter = accounts::Entity::row(invitation.invited_by)
                .one(db)
                .await?
                .map(|a| a.name.unwrap_or(a.email))
                .unwrap_or_else(|| "An administrator".to_owned());
            let token = platform::secrets::mint("");
            // Only a still-pending invitation takes the new token.
            let updated = AllOrgs::update_rows::<invitations::Entity>()
                .col_expr(invitations::Column::TokenHash, Expr::value(token.hash))
                .filter(invitations::Column::Id.eq(invitation.id))
                .filter(invitations::Column::AcceptedAt.is_null())
                .filter(invitations::Column::RevokedAt.is_null())
                .exec(db)
                .await?;
            if updated.rows_affected != 1 {
                return Ok(None);
            }
            Ok(Some(emails::invitation(
                base,
                &invitation.email,
                &org.name,
                &invitation.role,
                &inviter,
                &token.value,
            )))
        }
    }
}

/// Stores a fresh sign-in or sign-up token's hash; returns the token for the link.
async fn email_token(
    deps: &Deps,
    purpose: &str,
    email: &str,
    payload: Option<JsonText<SignUpPayload>>,
    now: DateTime<Utc>,
) -> Result<String, BoxDynError> {
    let token = platform::secrets::mint("");
    email_tokens::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        token_hash: Set(token.hash),
        purpose: Set(purpose.to_owned()),
        email: Set(email.to_owned()),
        payload: Set(payload),
        created_at: Set(now),
        expires_at: Set(now + EMAIL_TOKEN_TTL),
        used_at: Set(None),
    }
    .insert(&deps.db.orm)
    .await?;
    Ok(token.value)
}
