//! The host facts of every check-in (decisions §6 `facts`): names, distribution, kernel, and
//! how the agent is installed and what it may do.

use std::time::Duration;

use anyhow::Context;
use protocol::wire::{AgentInstall, Facts};

use crate::{
    config::Config,
    inventory::{Backend, Family, OsRelease},
    system::System,
};

/// The package the agent is shipped as (`.deb` and `.rpm`).
pub const PACKAGE: &str = "fleet-agent";

/// What does not change while the agent runs.
#[derive(Debug, Clone)]
pub struct Host {
    pub os: OsRelease,
    pub backend: Backend,
    pub machine_id: String,
    pub install: AgentInstall,
    /// Where the package database is.
    pub database: String,
}

impl Host {
    pub async fn read(system: &System, config: &Config) -> anyhow::Result<Host> {
        let text = system
            .read_to_string("/etc/os-release")
            .or_else(|_| system.read_to_string("/usr/lib/os-release"))
            .context("reading /etc/os-release")?;
        let os = crate::inventory::os_release::parse(&text);
        let backend = Backend::detect(system, &os)?;
        let machine_id = system
            .read_to_string("/etc/machine-id")
            .map(|id| id.trim().to_owned())
            .unwrap_or_default();
        if machine_id.is_empty() || machine_id == "uninitialized" {
            anyhow::bail!(
                "{} holds no machine id: the host's identity (run systemd-machine-id-setup)",
                system.path("/etc/machine-id").display()
            );
        }
        let method = match backend.family {
            Family::Debian if system.exists(&format!("/var/lib/dpkg/info/{PACKAGE}.list")) => "apt",
            Family::Rhel
                if system
                    .run("rpm", &["-q", "--quiet", PACKAGE], Duration::from_secs(60))
                    .await
                    .is_ok_and(|out| out.success()) =>
            {
                "dnf"
            }
            _ => "binary",
        };
        let install = AgentInstall {
            method: method.to_owned(),
            channel: Some(
                config
                    .channel
                    .clone()
                    .unwrap_or_else(|| "stable".to_owned()),
            ),
        };
        let database = backend.database(system).await;
        Ok(Host {
            os,
            backend,
            machine_id,
            install,
            database,
        })
    }

    /// The facts as of now; `mode` is `daemon` or `once`.
    pub fn facts(&self, system: &System, config: &Config, mode: &str) -> Facts {
        let kernel = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let hostname = if system.is_host() {
            kernel("hostname")
        } else {
            system
                .read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .or_else(|| kernel("hostname"))
        }
        .unwrap_or_else(|| "localhost".to_owned());
        Facts {
            hostname,
            machine_id: self.machine_id.clone(),
            distro: Some(self.os.id.clone()),
            distro_version: self.os.version_id.clone(),
            distro_codename: self.os.codename.clone(),
            os_family: Some(self.backend.family.as_str().to_owned()),
            arch: Some(std::env::consts::ARCH.to_owned()),
            kernel_version: kernel("osrelease"),
            virtualization: None,
            agent_version: Some(crate::VERSION.to_owned()),
            agent_mode: Some(mode.to_owned()),
            agent_permissions: Some(config.permission_names()),
            agent_install: Some(self.install.clone()),
            cloud: None,
            frozen: None,
            snapshots: None,
        }
    }
}
