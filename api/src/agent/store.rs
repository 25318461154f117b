//! What enrolment and check-ins write: the host and its facts, its inventory, the billable day,
//! and the enrollment token's use on the host's first check-in.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use domain::billing::Plan;
use entities::{
    enrollment_tokens, host_days, host_keys, host_labels, host_packages, host_updates, hosts,
    json::{Advisory, JsonText},
    organizations,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait,
    PaginatorTrait, QueryFilter, QuerySelect, Set,
    sea_query::{Expr, ExprTrait},
};
use uuid::Uuid;

use super::facts::{CheckIn, Facts};
use crate::{
    fleet::hosts::record_event,
    http::error::ApiError,
    http::scope::{OrgScope, Untenanted},
};

/// How often agents are asked to check in.
pub const CHECK_IN_INTERVAL_S: i32 = 300;
/// Rows inserted per statement when an inventory is replaced.
const CHUNK: usize = 500;
/// Rows a single delete names (each by name and architecture).
const DELETE_CHUNK: usize = 200;

/// A fact stored as the agent reported it, whatever its shape: any JSON reads as a `Value`.
fn fact<T: serde::Serialize>(value: &T) -> Result<JsonText<serde_json::Value>, ApiError> {
    let text = JsonText::new(value)?;
    Ok(JsonText::from_stored(text.as_str()))
}

/// Copies the agent-reported facts onto a host row.
pub fn apply_facts(host: &mut hosts::ActiveModel, facts: &Facts) -> Result<(), ApiError> {
    host.hostname = Set(facts.hostname.clone());
    host.distro = Set(facts.distro.clone());
    host.distro_version = Set(facts.distro_version.clone());
    host.distro_codename = Set(facts.distro_codename.clone());
    host.os_family = Set(facts.os_family.clone());
    host.arch = Set(facts.arch.clone());
    host.kernel_version = Set(facts.kernel_version.clone());
    host.virtualization = Set(facts.virtualization.clone());
    host.agent_version = Set(facts.agent_version.clone());
    host.agent_mode = Set(facts.agent_mode.clone());
    host.agent_permissions = Set(facts
        .agent_permissions
        .as_ref()
        .map(JsonText::new)
        .transpose()?);
    host.agent_install = Set(facts.agent_install.as_ref().map(fact).transpose()?);
    host.cloud = Set(facts.cloud.as_ref().map(fact).transpose()?);
    host.frozen = Set(facts.frozen.as_ref().map(fact).transpose()?);
    host.snapshots = Set(facts.snapshots.as_ref().map(fact).transpose()?);
    Ok(())
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
/// token). A host that has checked in and is not decommissioned: 409 `conflict`, since
/// otherwise anyone holding an enrollment token and the host's (visible) machine id could take
/// it over.
///
/// A machine that would add to the organization's hosts that are not decommissioned (a new
/// one, or a decommissioned host revived) must fit the plan's host cap (decisions §17: the free
/// plan's sixth host is 403 `plan-required`); the plan is looked up here, on every enrolment.
pub async fn enrol_host(
    txn: &DatabaseTransaction,
    token: &enrollment_tokens::Model,
    facts: &Facts,
    now: DateTime<Utc>,
    default_plan: &Plan,
) -> Result<hosts::Model, ApiError> {
    let scope = OrgScope::of(token.org_id);
    let existing = scope
        .rows::<hosts::Entity>()
        .filter(hosts::Column::MachineId.eq(facts.machine_id.as_str()))
        .one(txn)
        .await?;
    if let Some(host) = &existing
        && host.decommissioned_at.is_none()
        && host.last_seen_at.is_some()
    {
        return Err(ApiError::Conflict(
            "A host with this machine_id has checked in and is not decommissioned. \
             Decommission it first to enrol the machine again; a running agent renews its \
             certificate with its current key instead."
                .into(),
        ));
    }
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
        apply_facts(&mut changed, facts)?;
        changed.decommissioned_at = Set(None);
        changed.status = Set(domain::HostStatus::Pending.to_string());
        changed.last_seen_at = Set(None);
        changed.enrollment_token_id = Set(Some(token.id));
        changed.updated_at = Set(now);
        let host = changed.update(txn).await?;
        record_event(
            txn,
            &host,
            "enrolled",
            Some(serde_json::json!({"again": true})),
            now,
        )
        .await?;
        domain::notifications::outbox::host(
            txn,
            &host,
            domain::notifications::EventKind::HostEnrolled,
            now,
        )
        .await?;
        return Ok(host);
    }
    // A token whose labels cannot be read enrols nobody (500): a host never starts out
    // without the labels its token promises.
    let labels = token.labels.read()?;
    let id = platform::ids::new_uuid();
    let mut host = hosts::ActiveModel {
        id: Set(id),
        org_id: Set(token.org_id),
        machine_id: Set(facts.machine_id.clone()),
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
        status: Set(domain::HostStatus::Pending.to_string()),
        enrollment_token_id: Set(Some(token.id)),
        inventory_digest: Set(None),
        check_in_interval_s: Set(CHECK_IN_INTERVAL_S),
        enrolled_at: Set(now),
        last_seen_at: Set(None),
        last_inventory_at: Set(None),
        cert_expires_at: Set(None),
        decommissioned_at: Set(None),
        updated_at: Set(now),
        ..Default::default()
    };
    apply_facts(&mut host, facts)?;
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
    record_event(
        txn,
        &host,
        "enrolled",
        Some(serde_json::json!({"hostname": host.hostname})),
        now,
    )
    .await?;
    domain::notifications::outbox::host(
        txn,
        &host,
        domain::notifications::EventKind::HostEnrolled,
        now,
    )
    .await?;
    Ok(host)
}

/// Refuses one more host that is not decommissioned when the plan caps them and the cap is
/// reached. On Postgres the organization's row is locked first, so concurrent enrolments
/// count one after the other (SQLite's write transactions already do).
async fn within_host_cap(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    default_plan: &Plan,
) -> Result<(), ApiError> {
    let plan = domain::billing::plan_of(txn, scope.org_id(), default_plan).await?;
    if domain::billing::host_cap(&plan).is_none() {
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
    domain::billing::check_enrolment(&plan, counted)?;
    Ok(())
}

/// Charges the host's enrollment token one use, unless it is revoked or used up; `false`
/// when it cannot be charged. One conditional update, so concurrent first check-ins can never
/// push `uses` past `max_uses`.
pub async fn charge_token(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    token_id: Uuid,
) -> Result<bool, ApiError> {
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

/// Records the host's UTC day once (an upsert on the primary key, not a row per check-in).
pub async fn record_day<C: ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    host_days::Entity::insert(host_days::ActiveModel {
        host_id: Set(host.id),
        day: Set(now.date_naive()),
        org_id: Set(host.org_id),
    })
    .on_conflict_do_nothing()
    .exec(db)
    .await?;
    Ok(())
}

/// Brings the host's stored packages and updates in line with a reported inventory, writing
/// only the rows that differ: a host whose inventory moved by a few packages costs a few rows,
/// not a delete and re-insert of hundreds.
pub async fn replace_inventory(
    txn: &DatabaseTransaction,
    host_id: Uuid,
    check_in: &CheckIn,
) -> Result<(), ApiError> {
    if let Some(packages) = &check_in.packages {
        let mut wanted: BTreeMap<(String, String), host_packages::ActiveModel> = BTreeMap::new();
        for p in packages {
            wanted
                .entry((p.name.clone(), p.arch.clone()))
                .or_insert_with(|| host_packages::ActiveModel {
                    host_id: Set(host_id),
                    name: Set(p.name.clone()),
                    arch: Set(p.arch.clone()),
                    version: Set(p.version.clone()),
                    source_name: Set(p.source_name.clone()),
                    source_version: Set(p.source_version.clone()),
                });
        }
        let stored = host_packages::Entity::rows()
            .filter(host_packages::Column::HostId.eq(host_id))
            .all(txn)
            .await?;
        let mut gone = Vec::new();
        for row in stored {
            let key = (row.name.clone(), row.arch.clone());
            let same = wanted.get(&key).is_some_and(|w| {
                w.version.as_ref() == &row.version
                    && w.source_name.as_ref() == &row.source_name
                    && w.source_version.as_ref() == &row.source_version
            });
            if same {
                wanted.remove(&key);
            } else {
                // Gone, or changed (re-inserted below).
                gone.push(key);
            }
        }
        for chunk in gone.chunks(DELETE_CHUNK) {
            let mut which = sea_orm::Condition::any();
            for (name, arch) in chunk {
                which = which.add(
                    sea_orm::Condition::all()
                        .add(host_packages::Column::Name.eq(name.as_str()))
                        .add(host_packages::Column::Arch.eq(arch.as_str())),
                );
            }
            host_packages::Entity::delete_rows()
                .filter(host_packages::Column::HostId.eq(host_id))
                .filter(which)
                .exec(txn)
                .await?;
        }
        let rows: Vec<host_packages::ActiveModel> = wanted.into_values().collect();
        for chunk in rows.chunks(CHUNK) {
            host_packages::Entity::insert_many(chunk.to_vec())
                .exec(txn)
                .await?;
        }
    }
    if let Some(updates) = &check_in.updates {
        let mut wanted: BTreeMap<(String, String), host_updates::ActiveModel> = BTreeMap::new();
        for u in updates {
            if wanted.contains_key(&(u.name.clone(), u.arch.clone())) {
                continue;
            }
            wanted.insert(
                (u.name.clone(), u.arch.clone()),
                host_updates::ActiveModel {
                    host_id: Set(host_id),
                    name: Set(u.name.clone()),
                    arch: Set(u.arch.clone()),
                    from_version: Set(u.from_version.clone()),
                    to_version: Set(u.to_version.clone()),
                    ecosystem: Set(u.ecosystem.clone()),
                    source_name: Set(u.source_name.clone()),
                    security: Set(u.security),
                    requires_reboot: Set(u.requires_reboot),
                    advisories: Set(JsonText::new(
                        &u.advisories
                            .iter()
                            .cloned()
                            .map(Advisory::from)
                            .collect::<Vec<_>>(),
                    )?),
                },
            );
        }
        let stored = host_updates::Entity::rows()
            .filter(host_updates::Column::HostId.eq(host_id))
            .all(txn)
            .await?;
        let mut gone = Vec::new();
        for row in stored {
            let key = (row.name.clone(), row.arch.clone());
            let same = wanted.get(&key).is_some_and(|w| {
                w.from_version.as_ref() == &row.from_version
                    && w.to_version.as_ref() == &row.to_version
                    && w.ecosystem.as_ref() == &row.ecosystem
                    && w.source_name.as_ref() == &row.source_name
                    && w.security.as_ref() == &row.security
                    && w.requires_reboot.as_ref() == &row.requires_reboot
                    && w.advisories.as_ref() == &row.advisories
            });
            if same {
                wanted.remove(&key);
            } else {
                gone.push(key);
            }
        }
        for chunk in gone.chunks(DELETE_CHUNK) {
            let mut which = sea_orm::Condition::any();
            for (name, arch) in chunk {
                which = which.add(
                    sea_orm::Condition::all()
                        .add(host_updates::Column::Name.eq(name.as_str()))
                        .add(host_updates::Column::Arch.eq(arch.as_str())),
                );
            }
            host_updates::Entity::delete_rows()
                .filter(host_updates::Column::HostId.eq(host_id))
                .filter(which)
                .exec(txn)
                .await?;
        }
        let rows: Vec<host_updates::ActiveModel> = wanted.into_values().collect();
        for chunk in rows.chunks(CHUNK) {
            host_updates::Entity::insert_many(chunk.to_vec())
                .exec(txn)
                .await?;
        }
    }
    Ok(())
}

/// Whether the host had been silent for longer than three intervals before `now`.
pub fn after_gap(host: &hosts::Model, now: DateTime<Utc>) -> bool {
    host.last_seen_at
        .is_some_and(|seen| now - seen > Duration::seconds(3 * i64::from(host.check_in_interval_s)))
}
