//! `fleet-agent status`: the host id, the server, the last check-in, and what the agent would
//! report now (its facts and the inventory of its last scan), as JSON.

use serde_json::json;

use crate::{
    config::{Config, Permission},
    facts::Host,
    inventory::Inventory,
    state::{INVENTORY_FILE, StateDir},
    system::System,
};

pub async fn print(config: &Config, system: &System, state_dir: &StateDir) -> anyhow::Result<()> {
    let state = state_dir.load()?;
    let host = Host::read(system, config).await?;
    let enrollment = state.enrollment.as_ref();
    let inventory: Option<Inventory> = if config.allows(Permission::ReadInventory) {
        state_dir
            .read(INVENTORY_FILE)?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
    } else {
        None
    };
    let scan = state.scan.as_ref();
    let status = json!({
        "host_id": enrollment.map(|e| e.host_id.as_str()),
        "server": config.server.as_deref().or(enrollment.map(|e| e.server.as_str())),
        "key_id": enrollment.map(|e| e.key_id.as_str()),
        "certificate_expires_at": enrollment.map(|e| e.certificate_expires_at),
        "last_check_in": state.last_check_in,
        "last_error": state.last_error,
        "permissions": config.permission_names(),
        "results_to_report": state.owed.iter().map(|o| json!({"job_id": o.job_id, "status": o.result.status})).collect::<Vec<_>>(),
        "job_in_progress": state.running_job.as_ref().map(|r| r.job_id.as_str()),
        "would_report": {
            "facts": host.facts(system, config, "daemon"),
            "inventory_digest": scan.map(|s| s.digest.as_str()),
            "inventory_read_at": scan.map(|s| s.at),
            "packages": inventory.as_ref().map(|i| i.packages.len()),
            "updates": inventory.as_ref().map(|i| &i.updates),
            "held_packages": scan.map(|s| &s.held),
            "reboot_required": scan.and_then(|s| s.reboot_required),
            "services_need_restart": scan.map(|s| &s.services_need_restart),
        },
    });
    println!("{}", serde_json::to_string_pretty(&status)?);
    Ok(())
}
