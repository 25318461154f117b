//! Impact before approval (decisions §19, §21): for each available update, what the package
//! manager's own simulation of upgrading it alone would install and remove, whether the host
//! then needs a reboot, and which systemd units would restart (units whose running processes
//! map files the upgraded packages ship).
//!
//! An update the package manager cannot resolve, or whose impact exceeds the protocol's
//! bounds, gets no `impact`: the service keeps that as unknown, never as "no impact".

use std::collections::BTreeSet;

use protocol::wire::{Impact, ImpactInstall, MAX_IMPACT_ENTRIES, Update};

use crate::{
    inventory::{Backend, needs_reboot},
    procs::Running,
    system::System,
};

/// Works out each update's impact, and marks the updates that need a reboot.
pub async fn compute(system: &System, backend: Backend, updates: &mut [Update], running: &Running) {
    for update in updates.iter_mut() {
        update.impact = match one(system, backend, update, running).await {
            Ok(impact) => impact,
            Err(err) => {
                tracing::warn!(
                    package = %update.name,
                    "the impact of the update cannot be worked out: {err:#}"
                );
                None
            }
        };
        if update.impact.as_ref().is_some_and(|i| i.reboot) {
            update.requires_reboot = true;
        }
    }
}

async fn one(
    system: &System,
    backend: Backend,
    update: &Update,
    running: &Running,
) -> anyhow::Result<Option<Impact>> {
    let Some(simulation) = backend
        .simulate(system, &update.name, &update.to_version)
        .await?
    else {
        tracing::info!(
            package = %update.name,
            version = %update.to_version,
            "the package manager cannot resolve the update alone: its impact is unknown"
        );
        return Ok(None);
    };
    let mut restarts = BTreeSet::new();
    for (name, _) in &simulation.upgrades {
        let files = backend.files(system, name, &update.arch).await;
        restarts.extend(running.units_using(files.iter().map(String::as_str)));
    }
    let reboot = update.requires_reboot
        || simulation.upgrades.iter().any(|(n, _)| needs_reboot(n))
        || simulation.installs.iter().any(|(n, _)| needs_reboot(n));
    let mut installs: Vec<ImpactInstall> = simulation
        .installs
        .into_iter()
        .map(|(name, version)| ImpactInstall { name, version })
        .collect();
    installs.sort();
    installs.dedup();
    let mut removes = simulation.removes;
    removes.sort();
    removes.dedup();
    let impact = Impact {
        reboot,
        restarts: restarts.into_iter().collect(),
        installs,
        removes,
    };
    if impact.restarts.len() > MAX_IMPACT_ENTRIES
        || impact.installs.len() > MAX_IMPACT_ENTRIES
        || impact.removes.len() > MAX_IMPACT_ENTRIES
    {
        tracing::warn!(
            package = %update.name,
            "the update's impact is larger than the protocol carries: reported as unknown"
        );
        return Ok(None);
    }
    Ok(Some(impact))
}
