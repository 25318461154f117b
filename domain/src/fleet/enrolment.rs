//! Enrolment (decisions §6, §17, §18): which host a machine becomes, within its token's
//! `max_uses` and its plan's host cap, and the token's use charged at the host's first
//! check-in. What the agent reports is the api's to read (`protocol`); it arrives here as the
//! machine's id and a function that writes its facts onto the host row.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use entities::{
    enrollment_tokens, host_keys, host_labels, hosts,
    json::{JsonText, Unreadable, Unwritable},
    organizations,
    scope::OrgScope,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait,
    PaginatorTrait, QueryFilter, QuerySelect, Set,
    sea_query::{Expr, ExprTrait},
};
use uuid::Uuid;

use super::events::record_event;
use crate::{HostEventKind, billing::Plan};

/// A machine asking to enrol: its id, and what writes the facts it reported onto a host row.
pub struct Machine<'a> {
    pub machine_id: &'a str,
    pub facts: &'a (dyn Fn(&mut hosts::ActiveModel) -> Result<(), Unwritable> + Sync),
}

/// Why a machine is not enrolled.
#[derive(Debug, thiserror::Error)]
pub enum EnrolRefusal {
    /// The machine's host has checked in and is not decommissioned.
    #[error(
        "A host with this machine_id has checked in and is not decommissioned. Decommission it \
         first to enrol the machine again; a running agent renews its certificate with its \
         current key instead."
    )]
    CheckedIn,
    /// The token is used up (counting the hosts still pending under it); said as for any
    /// unusable token.
    #[error("This enrollment token cannot enrol hosts.")]
    TokenCannotEnrol,
    /// The token's labels and the host's together are too many.
    #[error(
        "labels: the token's and the host's together are more than {}",
        super::MAX_LABELS
    )]
    TooManyLabels,
    /// The plan's host cap is reached.
    #[error(transparent)]
    PlanRequired(#[from] crate::billing::PlanRequired),
    /// The token's stored labels cannot be read: a host never starts out without the labels
    /// its token promises.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    #[error(transparent)]
    Unwritable(#[from] Unwritable),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Revokes every live key of the host at once (re-binding, decommissioning).
pub async fn revoke_keys<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    scope
        .update_rows::<host_keys::Entity>()
        .col_expr(host_keys::Column::RevokedAt, Expr::value(Some(now)))
        .filter(host_keys::Column::HostId.eq(host_id))
        .filter(host_keys::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}

/// The host for `machine_id` in the organization (decisions §6). A new machine: a new pending
/// host, labelled from the token. A host that never checked in, or was decommissioned: the
/// same host, re-bound (every earlier key revoked, facts refreshed, pending again under the new
/// token). A host that has checked in and is not decommissioned: refused
/// ([`EnrolRefusal::CheckedIn`]), since
/// otherwise anyone holding an enrollment token and the host's (visible) machine id could take
/// it over.
///
/// A new host gets the token's labels and, where the token names no such key, those the agent
/// asked for (`asked_labels`, checked by the caller).
///
/// A machine that would add to the organization's hosts that are not decommissioned (a new
/// one, or a decommissioned host revived) must fit the plan's host cap (decisions §17: the free
/// plan's sixth host is 403 `plan-required`); the plan is looked up here, on every enrolment.
pub async fn enrol_host(
    txn: &DatabaseTransaction,
    token: &enrollment_tokens::Model,
    machine: &Machine<'_>,
    asked_labels: &BTreeMap<String, String>,
    now: DateTime<Utc>,
    default_plan: &Plan,
) -> Result<hosts::Model, EnrolRefusal> {
    let scope = OrgScope::of(token.org_id);
    let mut existing = scope
        .rows::<hosts::Entity>()
        .filter(hosts::Column::MachineId.eq(machine.machine_id));
    if txn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        // The host's row, held to the commit: a first check-in in flight (which writes this row)
        // finishes first and is seen below, and none can start until this enrolment is done.
        // Read without the lock, a pending host whose check-in was committing would be re-bound.
        existing = existing.lock_exclusive();
    }
    let existing = existing.one(txn).await?;
    if let Some(host) = &existing
        && host.decommissioned_at.is_none()
        && host.last_seen_at.is_some()
    {
        return Err(EnrolRefusal::CheckedIn);
    }
    within_max_uses(txn, scope, token, existing.as_ref().map(|h| h.id)).await?;
    let counted_already = existing
        .as_ref()
        .is_some_and(|host| host.decommissioned_at.is_none());
    if !counted_already {
        within_host_cap(txn, scope, default_plan).await?;
    }
    if let Some(host) = existing {
        revoke_keys(txn, scope, host.id, now).await?;
        // A new admission: pending until its first check-in, which charges the new token.
        let mut changed: hosts::ActiveModel = host.into();
        (machine.facts)(&mut changed)?;
        changed.decommissioned_at = Set(None);
        changed.status = Set(crate::HostStatus::Pending.to_string());
        changed.last_seen_at = Set(None);
        changed.enrollment_token_id = Set(Some(token.id));
        changed.updated_at = Set(now);
        let host = changed.update(txn).await?;
        enrolled(txn, &host, serde_json::json!({"again": true}), now).await?;
        return Ok(host);
    }
    // A token whose labels cannot be read enrols nobody (500): a host never starts out
    // without the labels its token promises.
    let mut labels = token.labels.read()?;
    for (key, value) in asked_labels {
        labels.entry(key.clone()).or_insert_with(|| value.clone());
    }
    if labels.len() > super::MAX_LABELS {
        return Err(EnrolRefusal::TooManyLabels);
    }
    let id = platform::ids::new_uuid();
    let mut host = hosts::ActiveModel {
        id: Set(id),
        org_id: Set(token.org_id),
        machine_id: Set(machine.machine_id.to_owned()),
        display_name: Set(None),
        notes: Set(None),
        labels: Set(JsonText::new(&labels)?),
        reboot_required: Set(None),
        services_need_restart: Set(JsonText::new(&Vec::new())?),
        held_packages: Set(JsonText::new(&Vec::new())?),
        updates_total: Set(None),
        updates_security: Set(None),
        updates_requiring_reboot: Set(None),
        advisory_coverage: Set("unknown_release".into()),
        status: Set(crate::HostStatus::Pending.to_string()),
        enrollment_token_id: Set(Some(token.id)),
        inventory_digest: Set(None),
        check_in_interval_s: Set(super::check_in::CHECK_IN_INTERVAL_S),
        enrolled_at: Set(now),
        last_seen_at: Set(None),
        last_inventory_at: Set(None),
        cert_expires_at: Set(None),
        decommissioned_at: Set(None),
        updated_at: Set(now),
        ..Default::default()
    };
    (machine.facts)(&mut host)?;
    let host = host.insert(txn).await?;
    if !labels.is_empty() {
        host_labels::Entity::insert_many(labels.iter().map(|(k, v)| host_labels::ActiveModel {
            org_id: Set(token.org_id),
            host_id: Set(id),
            key: Set(k.clone()),
            value: Set(v.clone()),
        }))
        .exec(txn)
        .await?;
    }
    let details = serde_json::json!({"hostname": host.hostname});
    enrolled(txn, &host, details, now).await?;
    Ok(host)
}

/// The host's `enrolled` event and the `host.enrolled` notification.
async fn enrolled(
    txn: &DatabaseTransaction,
    host: &hosts::Model,
    details: serde_json::Value,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    record_event(txn, host, HostEventKind::Enrolled, Some(details), now).await?;
    crate::notifications::outbox::host(
        txn,
        host,
        crate::notifications::EventKind::HostEnrolled,
        now,
    )
    .await?;
    Ok(())
}

/// A token's `max_uses` bounds the enrolments still pending plus the uses already charged
/// (decisions §18), so that a leaked single-use token enrols one host, not any number of
/// pending ones. `rebinding` is a pending host of the same machine enrolling again: not a
/// second enrolment. The caller holds the token's row (Postgres), so enrolments of one token
/// count one after the other. Refused like any unusable token: 403 without saying why.
async fn within_max_uses(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    token: &enrollment_tokens::Model,
    rebinding: Option<Uuid>,
) -> Result<(), EnrolRefusal> {
    let Some(max_uses) = token.max_uses else {
        return Ok(());
    };
    let mut pending = scope
        .rows::<hosts::Entity>()
        .filter(hosts::Column::EnrollmentTokenId.eq(token.id))
        .filter(hosts::Column::LastSeenAt.is_null())
        .filter(hosts::Column::DecommissionedAt.is_null());
    if let Some(host_id) = rebinding {
        pending = pending.filter(hosts::Column::Id.ne(host_id));
    }
    let pending = i64::try_from(pending.count(txn).await?).unwrap_or(i64::MAX);
    if i64::from(token.uses).saturating_add(pending) >= i64::from(max_uses) {
        return Err(EnrolRefusal::TokenCannotEnrol);
    }
    Ok(())
}

/// Refuses one more host that is not decommissioned when the plan caps them and the cap is
/// reached. On Postgres the organization's row is locked first, so concurrent enrolments
/// count one after the other (SQLite's write transactions already do).
async fn within_host_cap(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    default_plan: &Plan,
) -> Result<(), EnrolRefusal> {
    let plan = crate::billing::plan_of(txn, scope.org_id(), default_plan).await?;
    if crate::billing::host_cap(&plan).is_none() {
        return Ok(());
    }
    if txn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        scope
            .rows::<organizations::Entity>()
            .lock_exclusive()
            .one(txn)
            .await?;
    }
    let counted = scope
        .rows::<hosts::Entity>()
        .filter(hosts::Column::DecommissionedAt.is_null())
        .count(txn)
        .await?;
    crate::billing::check_enrolment(&plan, counted)?;
    Ok(())
}

/// Charges the host's enrollment token one use, unless it is revoked or used up; `false`
/// when it cannot be charged. One conditional update, so concurrent first check-ins can never
/// push `uses` past `max_uses`.
pub async fn charge_token(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    token_id: Uuid,
) -> Result<bool, DbErr> {
    let charged = scope
        .update_rows::<enrollment_tokens::Entity>()
        .col_expr(
            enrollment_tokens::Column::Uses,
            Expr::col(enrollment_tokens::Column::Uses).add(1),
        )
        .filter(enrollment_tokens::Column::Id.eq(token_id))
        .filter(enrollment_tokens::Column::RevokedAt.is_null())
        .filter(
            sea_orm::Condition::any()
                .add(enrollment_tokens::Column::MaxUses.is_null())
                .add(
                    Expr::col(enrollment_tokens::Column::Uses)
                        .lt(Expr::col(enrollment_tokens::Column::MaxUses)),
                ),
        )
        .exec(txn)
        .await?;
    Ok(charged.rows_affected == 1)
}
