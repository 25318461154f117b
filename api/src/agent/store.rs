//! What an agent's reports become in rows: the host's facts, and its inventory (packages and
//! updates, written only where they changed). The fleet's rules for enrolment and check-ins
//! are the domain's (`domain::fleet::enrolment`, `domain::fleet::check_in`).

use std::collections::BTreeMap;

use entities::{
    host_inventories,
    host_inventories::Fingerprints,
    host_packages, host_updates, hosts,
    json::{self, Advisory, JsonText, Unwritable},
};
use sea_orm::{
    ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter, Set, sea_query::OnConflict,
};
use uuid::Uuid;

use crate::http::error::ApiError;
use entities::scope::Untenanted;
use protocol::wire::{self, CheckIn, Facts};

/// Rows inserted per statement when an inventory is replaced.
const CHUNK: usize = 500;
/// Rows a single delete names (each by name and architecture).
const DELETE_CHUNK: usize = 200;

/// A fact stored as the agent reported it, whatever its shape: any JSON reads as a `Value`.
fn fact<T: serde::Serialize>(value: &T) -> Result<JsonText<serde_json::Value>, Unwritable> {
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
pub fn apply_facts(host: &mut hosts::ActiveModel, facts: &Facts) -> Result<(), Unwritable> {
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
