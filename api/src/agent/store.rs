//! What enrolment and check-ins write: the host and its facts, its inventory, the billable day,
//! and the enrollment token's use on the host's first check-in.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use domain::{HostEventKind, billing::Plan};
use entities::{
    enrollment_tokens, host_days, host_inventories,
    host_inventories::Fingerprints,
    host_keys, host_labels, host_packages, host_updates, hosts,
    json::{self, Advisory, JsonText},
    organizations,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, Iterable,
    ModelTrait, PaginatorTrait, QueryFilter, QuerySelect, Set,
    sea_query::{Expr, ExprTrait, OnConflict},
};
use uuid::Uuid;

use crate::{fleet::events::record_event, http::error::ApiError};
use entities::scope::{OrgScope, Untenanted};
use protocol::wire::{self, CheckIn, Facts};

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

/// An advisory as it is stored.
fn stored_advisory(a: &wire::Advisory) -> Advisory {
    Advisory {
        external_id: a.external_id.clone(),
        source: a.source.clone(),
        severity: a.severity.clone(),
        title: a.title.clone(),
        url: a.url.clone(),
        cves: a.cves.clone(),
    }
}

/// An update's impact as it is stored.
fn stored_impact(impact: &wire::Impact) -> json::Impact {
    json::Impact {
        reboot: impact.reboot,
        restarts: impact.restarts.clone(),
        installs: impact
            .installs
            .iter()
            .map(|i| json::ImpactInstall {
                name: i.name.clone(),
                version: i.version.clone(),
            })
            .collect(),
        removes: impact.removes.clone(),
    }
}

/// A release upgrade on offer, as it is stored.
pub fn offered_upgrade(offer: wire::ReleaseUpgrade) -> json::OfferedUpgrade {
    json::OfferedUpgrade {
        to: json::Release {
            codename: offer.to.codename,
            version: offer.to.version,
        },
    }
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
/// A new host gets the token's labels and, where the token names no such key, those the agent
/// asked for (`asked_labels`, checked by the caller).
///
/// A machine that would add to the organization's hosts that are not decommissioned (a new
/// one, or a decommissioned host revived) must fit the plan's host cap (decisions §17: the free
/// plan's sixth host is 403 `plan-required`); the plan is looked up here, on every enrolment.
pub async fn enrol_host(
    txn: &DatabaseTransaction,
    token: &enrollment_tokens::Model,
    facts: &Facts,
    asked_labels: &BTreeMap<String, String>,
    now: DateTime<Utc>,
    default_plan: &Plan,
) -> Result<hosts::Model, ApiError> {
    let scope = OrgScope::of(token.org_id);
    let mut existing = scope
        .rows::<hosts::Entity>()
        .filter(hosts::Column::MachineId.eq(facts.machine_id.as_str()));
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
        return Err(ApiError::Conflict(
            "A host with this machine_id has checked in and is not decommissioned. \
             Decommission it first to enrol the machine again; a running agent renews its \
             certificate with its current key instead."
                .into(),
        ));
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
            HostEventKind::Enrolled,
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
    let mut labels = token.labels.read()?;
    for (key, value) in asked_labels {
        labels.entry(key.clone()).or_insert_with(|| value.clone());
    }
    if labels.len() > crate::http::input::MAX_LABELS {
        return Err(ApiError::invalid(format!(
            "labels: the token's and the host's together are more than {}",
            crate::http::input::MAX_LABELS
        )));
    }
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
        HostEventKind::Enrolled,
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
) -> Result<(), ApiError> {
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
        return Err(ApiError::forbidden(
            "This enrollment token cannot enrol hosts.",
        ));
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

/// A fingerprint of a stored row's columns besides its key: the first 128 bits of a SHA-256
/// over each part, length-prefixed (so that `("ab", "c")` is not `("a", "bc")`) and marked
/// absent or present (so that `None` is not `""`).
fn fingerprint(parts: &[Option<&str>]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut hasher = Sha256::new();
    for part in parts {
        match part {
            Some(text) => {
                hasher.update(b"s");
                hasher.update((text.len() as u64).to_be_bytes());
                hasher.update(text.as_bytes());
            }
            None => hasher.update(b"n"),
        }
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(32);
    for byte in &digest[..16] {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

fn package_fingerprint(
    version: &str,
    source_name: Option<&str>,
    source_version: Option<&str>,
) -> String {
    fingerprint(&[Some(version), source_name, source_version])
}

/// An update row's fingerprint. The impact is a part only when the agent reported one, so the
/// rows stored before impacts were kept keep their fingerprints.
#[allow(clippy::too_many_arguments)]
fn update_fingerprint(
    from_version: &str,
    to_version: &str,
    ecosystem: &str,
    source_name: Option<&str>,
    security: bool,
    requires_reboot: bool,
    advisories: &str,
    impact: Option<&str>,
) -> String {
    let flag = |b: bool| if b { "1" } else { "0" };
    let mut parts = vec![
        Some(from_version),
        Some(to_version),
        Some(ecosystem),
        source_name,
        Some(flag(security)),
        Some(flag(requires_reboot)),
        Some(advisories),
    ];
    if impact.is_some() {
        parts.push(impact);
    }
    fingerprint(&parts)
}

type Key = (String, String);

/// The stored fingerprints, when the host's inventory row has them readable.
fn known(stored: Option<&JsonText<Fingerprints>>) -> Option<BTreeMap<Key, String>> {
    let rows = stored?
        .read()
        .inspect_err(|err| {
            tracing::warn!(error = %err, "stored inventory fingerprints unreadable: rows read instead");
        })
        .ok()?;
    Some(rows.into_iter().map(|(n, a, f)| ((n, a), f)).collect())
}

/// The keys of `stored` to delete (gone, or changed and re-inserted), and removes from `wanted`
/// what is stored already.
fn difference<T>(
    wanted: &mut BTreeMap<Key, (String, T)>,
    stored: BTreeMap<Key, String>,
) -> Vec<Key> {
    let mut gone = Vec::new();
    for (key, stored_fingerprint) in stored {
        if wanted
            .get(&key)
            .is_some_and(|(fingerprint, _)| *fingerprint == stored_fingerprint)
        {
            wanted.remove(&key);
        } else {
            gone.push(key);
        }
    }
    gone
}

fn listed<T>(wanted: &BTreeMap<Key, (String, T)>) -> Fingerprints {
    wanted
        .iter()
        .map(|((n, a), (f, _))| (n.clone(), a.clone(), f.clone()))
        .collect()
}

/// Brings the host's stored packages and updates in line with a reported inventory, writing
/// only the rows that differ: a host whose inventory moved by a few packages costs a few rows,
/// not a delete and re-insert of hundreds. What is stored is known from the host's
/// `host_inventories` row (a fingerprint per stored row, written here with the rows), so the
/// rows themselves are read only when that is missing.
///
/// Concurrent check-ins of one host must not interleave here: the caller has already updated
/// the host's row in this transaction, which holds its lock until the commit (Postgres;
/// SQLite's write transactions are serial).
///
/// True when a `host_updates` row was written or deleted: the caller then moves the host's
/// `updates_seq`, which tells policy evaluations to read them again.
pub async fn replace_inventory(
    txn: &DatabaseTransaction,
    host_id: Uuid,
    check_in: &CheckIn,
) -> Result<bool, ApiError> {
    let mut updates_changed = false;
    let index = host_inventories::Entity::rows()
        .filter(host_inventories::Column::HostId.eq(host_id))
        .one(txn)
        .await?;
    let mut written = host_inventories::ActiveModel {
        host_id: Set(host_id),
        ..Default::default()
    };
    let mut columns = Vec::new();
    if let Some(packages) = &check_in.packages {
        let mut wanted: BTreeMap<Key, (String, host_packages::ActiveModel)> = BTreeMap::new();
        for p in packages {
            wanted
                .entry((p.name.clone(), p.arch.clone()))
                .or_insert_with(|| {
                    (
                        package_fingerprint(
                            &p.version,
                            p.source_name.as_deref(),
                            p.source_version.as_deref(),
                        ),
                        host_packages::ActiveModel {
                            host_id: Set(host_id),
                            name: Set(p.name.clone()),
                            arch: Set(p.arch.clone()),
                            version: Set(p.version.clone()),
                            source_name: Set(p.source_name.clone()),
                            source_version: Set(p.source_version.clone()),
                        },
                    )
                });
        }
        written.packages = Set(Some(JsonText::new(&listed(&wanted))?));
        columns.push(host_inventories::Column::Packages);
        let stored = match known(index.as_ref().and_then(|i| i.packages.as_ref())) {
            Some(stored) => stored,
            None => host_packages::Entity::rows()
                .filter(host_packages::Column::HostId.eq(host_id))
                .all(txn)
                .await?
                .into_iter()
                .map(|row| {
                    let fingerprint = package_fingerprint(
                        &row.version,
                        row.source_name.as_deref(),
                        row.source_version.as_deref(),
                    );
                    ((row.name, row.arch), fingerprint)
                })
                .collect(),
        };
        let gone = difference(&mut wanted, stored);
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
        let rows: Vec<host_packages::ActiveModel> =
            wanted.into_values().map(|(_, row)| row).collect();
        for chunk in rows.chunks(CHUNK) {
            host_packages::Entity::insert_many(chunk.to_vec())
                .exec(txn)
                .await?;
        }
    }
    if let Some(updates) = &check_in.updates {
        let mut wanted: BTreeMap<Key, (String, host_updates::ActiveModel)> = BTreeMap::new();
        for u in updates {
            let key = (u.name.clone(), u.arch.clone());
            if wanted.contains_key(&key) {
                continue;
            }
            let advisories =
                JsonText::new(&u.advisories.iter().map(stored_advisory).collect::<Vec<_>>())?;
            let impact = u
                .impact
                .as_ref()
                .map(|i| JsonText::new(&stored_impact(i)))
                .transpose()?;
            let fingerprint = update_fingerprint(
                &u.from_version,
                &u.to_version,
                &u.ecosystem,
                u.source_name.as_deref(),
                u.security,
                u.requires_reboot,
                advisories.as_str(),
                impact.as_ref().map(JsonText::as_str),
            );
            wanted.insert(
                key,
                (
                    fingerprint,
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
                        advisories: Set(advisories),
                        impact: Set(impact),
                    },
                ),
            );
        }
        written.updates = Set(Some(JsonText::new(&listed(&wanted))?));
        columns.push(host_inventories::Column::Updates);
        let stored = match known(index.as_ref().and_then(|i| i.updates.as_ref())) {
            Some(stored) => stored,
            None => host_updates::Entity::rows()
                .filter(host_updates::Column::HostId.eq(host_id))
                .all(txn)
                .await?
                .into_iter()
                .map(|row| {
                    let fingerprint = update_fingerprint(
                        &row.from_version,
                        &row.to_version,
                        &row.ecosystem,
                        row.source_name.as_deref(),
                        row.security,
                        row.requires_reboot,
                        row.advisories.as_str(),
                        row.impact.as_ref().map(JsonText::as_str),
                    );
                    ((row.name, row.arch), fingerprint)
                })
                .collect(),
        };
        let gone = difference(&mut wanted, stored);
        updates_changed = !gone.is_empty() || !wanted.is_empty();
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
        let rows: Vec<host_updates::ActiveModel> =
            wanted.into_values().map(|(_, row)| row).collect();
        for chunk in rows.chunks(CHUNK) {
            host_updates::Entity::insert_many(chunk.to_vec())
                .exec(txn)
                .await?;
        }
    }
    if !columns.is_empty() {
        host_inventories::Entity::insert(written)
            .on_conflict(
                OnConflict::column(host_inventories::Column::HostId)
                    .update_columns(columns)
                    .to_owned(),
            )
            .exec(txn)
            .await?;
    }
    Ok(updates_changed)
}

/// A check-in writes `last_seen_at` at most this often (and whenever the UTC day changes or
/// the host is not `online`), so the stored value is at most this far behind the host's last
/// check-in: far below the three intervals after which a host counts as offline.
pub const TOUCH_EVERY: Duration = Duration::seconds(60);

/// Whether a check-in at `now` must write `last_seen_at` (and `status` = `online`).
pub fn touch_due(host: &hosts::Model, now: DateTime<Utc>) -> bool {
    domain::HostStatus::from(host.status.as_str()) != domain::HostStatus::Online
        || host
            .last_seen_at
            .is_none_or(|seen| now - seen >= TOUCH_EVERY || seen.date_naive() != now.date_naive())
}

/// Writes the columns of `next` that differ from `host` (the row as read), in one statement;
/// nothing when none does. Columns nobody here changed (another writer's, such as the
/// evaluation's counts) are left alone.
pub async fn write_host<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host: &hosts::Model,
    next: &hosts::Model,
) -> Result<(), ApiError> {
    let mut changes: hosts::ActiveModel = host.clone().into();
    let mut any = false;
    for column in hosts::Column::iter() {
        let value = next.get(column);
        if value != host.get(column) {
            changes.try_set(column, value)?;
            any = true;
        }
    }
    if any {
        scope
            .update_rows::<hosts::Entity>()
            .set(changes)
            .filter(hosts::Column::Id.eq(host.id))
            .exec(db)
            .await?;
    }
    Ok(())
}

/// Whether the host had been silent for longer than three intervals before `now`.
pub fn after_gap(host: &hosts::Model, now: DateTime<Utc>) -> bool {
    host.last_seen_at
        .is_some_and(|seen| now - seen > Duration::seconds(3 * i64::from(host.check_in_interval_s)))
}
