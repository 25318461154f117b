//! The host's inventory (decisions §6, §19): installed packages with their source package, the
//! updates the package manager would make (with `security` and advisories), held packages,
//! whether a reboot is required, units running replaced code, and `inventory_digest`, so that
//! an unchanged host sends one small request.
//!
//! [`Backend`] is the one place the agent tells dpkg/apt and rpm/dnf apart.

pub mod apt;
pub mod debian;
pub mod dnf;
pub mod dpkg;
pub mod os_release;
pub mod rhel;
pub mod rpm;

use std::{collections::HashMap, time::Duration};

use protocol::wire::{Advisory, Package, Update};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub use os_release::{Family, OsRelease};

use crate::{output::Tail, procs::Running, system::System};

/// An installed package, as either database records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub version: String,
    pub arch: String,
    pub source_name: Option<String>,
    pub source_version: Option<String>,
    pub held: bool,
}

/// What a package manager's simulation of one upgrade says it would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simulation {
    /// (name, version) of installed packages it upgrades (the update's own among them).
    pub upgrades: Vec<(String, String)>,
    /// (name, version) of packages it newly installs.
    pub installs: Vec<(String, String)>,
    pub removes: Vec<String>,
}

/// Packages whose upgrade means a reboot (decisions §19): kernels, boot loaders, libc,
/// systemd, dbus, microcode and firmware.
pub fn needs_reboot(name: &str) -> bool {
    let prefixes = [
        "linux-image",
        "linux-modules",
        "linux-firmware",
        "linux-signed",
        "kernel",
        "grub",
        "shim",
        "systemd",
        "libsystemd",
        "dbus",
        "firmware-",
    ];
    let exact = ["libc6", "glibc", "linux-generic", "linux-base"];
    prefixes.iter().any(|p| name.starts_with(p))
        || exact.contains(&name)
        || name.ends_with("-microcode")
        || name == "microcode_ctl"
        || name.starts_with("glibc-")
}

/// Modification times and sizes of `paths` (whichever exist): when none changed, neither did
/// the inventory computed from them.
pub fn stamp(system: &System, paths: &[&str]) -> String {
    let mut text = String::new();
    for path in paths {
        if let Ok(meta) = std::fs::metadata(system.path(path)) {
            let modified = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            text.push_str(&format!("{path}:{modified}:{};", meta.len()));
        }
    }
    text
}

/// The package manager of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    pub family: Family,
}

impl Backend {
    /// The host's package manager: from os-release, else from which database exists.
    pub fn detect(system: &System, os: &OsRelease) -> anyhow::Result<Backend> {
        let family = os.family().or_else(|| {
            if system.exists("/var/lib/dpkg/status") {
                Some(Family::Debian)
            } else if system.exists("/var/lib/rpm") {
                Some(Family::Rhel)
            } else {
                None
            }
        });
        match family {
            Some(family) => Ok(Backend { family }),
            None => anyhow::bail!(
                "this host ({}) has neither dpkg/apt nor rpm/dnf: fleet-agent supports Debian, \
                 Ubuntu and the RHEL family",
                os.id
            ),
        }
    }

    pub fn ecosystem(self) -> &'static str {
        self.family.ecosystem()
    }

    pub async fn installed(self, system: &System) -> anyhow::Result<Vec<Installed>> {
        match self.family {
            Family::Debian => debian::installed(system),
            Family::Rhel => {
                let mut installed = rhel::installed(system).await?;
                let held = rhel::held(system).await;
                for package in &mut installed {
                    package.held = held.contains(&package.name);
                }
                Ok(installed)
            }
        }
    }

    /// Where the package database is (dpkg's status file; rpm's `%{_dbpath}`).
    pub async fn database(self, system: &System) -> String {
        match self.family {
            Family::Debian => "/var/lib/dpkg/status".to_owned(),
            Family::Rhel => rhel::database(system).await,
        }
    }

    /// What the inventory is computed from (`database` from [`Backend::database`]).
    pub fn inputs(self, system: &System, database: &str) -> String {
        match self.family {
            Family::Debian => debian::inputs(system),
            Family::Rhel => rhel::inputs(system, database),
        }
    }

    /// Refreshes the package lists; whether it worked (what went wrong is in `log`).
    pub async fn refresh(self, system: &System, log: &mut Tail) -> anyhow::Result<bool> {
        match self.family {
            Family::Debian => debian::refresh(system, log).await,
            Family::Rhel => rhel::refresh(system, log).await,
        }
    }

    pub async fn reboot_required(self, system: &System) -> Option<bool> {
        match self.family {
            Family::Debian => debian::reboot_required(system),
            Family::Rhel => rhel::reboot_required(system).await,
        }
    }

    /// The available updates of the `installed` packages, as the package manager resolves them
    /// (without impact: [`crate::impact`]).
    pub async fn updates(
        self,
        system: &System,
        installed: &[Installed],
    ) -> anyhow::Result<Vec<Update>> {
        let by_name: HashMap<&str, &Installed> =
            installed.iter().map(|p| (p.name.as_str(), p)).collect();
        let mut updates = Vec::new();
        match self.family {
            Family::Debian => {
                for step in debian::upgrades(system).await? {
                    let Some(current) = by_name.get(step.name.as_str()) else {
                        continue;
                    };
                    updates.push(Update {
                        security: step.security(),
                        requires_reboot: needs_reboot(&step.name),
                        name: step.name,
                        arch: current.arch.clone(),
                        from_version: step.from.unwrap_or_else(|| current.version.clone()),
                        to_version: step.to,
                        ecosystem: self.ecosystem().to_owned(),
                        source_name: current.source_name.clone(),
                        advisories: Vec::new(),
                        impact: None,
                    });
                }
            }
            Family::Rhel => {
                let notices = rhel::notices(system).await;
                for available in rhel::available(system).await? {
                    let Some(current) = by_name.get(available.name.as_str()) else {
                        continue;
                    };
                    let fixing: Vec<&dnf::Notice> = notices
                        .iter()
                        .filter(|n| n.packages.contains(&available.name))
                        .collect();
                    updates.push(Update {
                        security: fixing.iter().any(|n| n.kind == "security"),
                        requires_reboot: needs_reboot(&available.name),
                        advisories: fixing.iter().map(|n| advisory(n)).collect(),
                        name: available.name,
                        arch: available.arch,
                        from_version: current.version.clone(),
                        to_version: available.evr,
                        ecosystem: self.ecosystem().to_owned(),
                        source_name: current.source_name.clone(),
                        impact: None,
                    });
                }
            }
        }
        updates.sort_by(|a, b| (&a.name, &a.arch).cmp(&(&b.name, &b.arch)));
        updates.dedup_by(|a, b| a.name == b.name && a.arch == b.arch);
        Ok(updates)
    }

    /// What upgrading `name` to `version` alone would do; `None` when the package manager
    /// cannot resolve it.
    pub async fn simulate(
        self,
        system: &System,
        name: &str,
        version: &str,
    ) -> anyhow::Result<Option<Simulation>> {
        match self.family {
            Family::Debian => debian::simulate(system, name, version).await,
            Family::Rhel => rhel::simulate(system, name, version).await,
        }
    }

    /// The files an installed package ships.
    pub async fn files(self, system: &System, name: &str, arch: &str) -> Vec<String> {
        match self.family {
            Family::Debian => debian::files(system, name, arch),
            Family::Rhel => rhel::files(system, name).await,
        }
    }

    /// How the package manager names `name` at `version` on its command line.
    pub fn target(self, name: &str, version: &str) -> String {
        match self.family {
            Family::Debian => debian::target(name, version),
            Family::Rhel => rhel::target(name, version),
        }
    }

    /// Upgrades exactly `targets` (from [`Backend::target`]); the package manager's exit code.
    pub async fn apply(
        self,
        system: &System,
        targets: &[String],
        limit: Duration,
        log: &mut Tail,
    ) -> anyhow::Result<Option<i32>> {
        match self.family {
            Family::Debian => debian::apply(system, targets, limit, log).await,
            Family::Rhel => rhel::apply(system, targets, limit, log).await,
        }
    }
}

fn advisory(notice: &dnf::Notice) -> Advisory {
    Advisory {
        external_id: notice.id.clone(),
        source: notice
            .id
            .split(['-', ':'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase(),
        severity: notice.severity.clone(),
        title: notice.title.clone(),
        url: None,
        cves: notice.cves.clone(),
    }
}

/// What the agent reports of the host's packages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub packages: Vec<Package>,
    pub updates: Vec<Update>,
    pub held: Vec<String>,
}

impl Inventory {
    pub fn new(installed: Vec<Installed>, updates: Vec<Update>) -> Inventory {
        let mut held: Vec<String> = installed
            .iter()
            .filter(|p| p.held)
            .map(|p| p.name.clone())
            .collect();
        held.sort();
        held.dedup();
        let mut packages: Vec<Package> = installed
            .into_iter()
            .map(|p| Package {
                name: p.name,
                version: p.version,
                arch: p.arch,
                source_name: p.source_name,
                source_version: p.source_version,
            })
            .collect();
        packages.sort_by(|a, b| (&a.name, &a.arch).cmp(&(&b.name, &b.arch)));
        Inventory {
            packages,
            updates,
            held,
        }
    }

    /// `sha256:<hex>` of the packages and updates (with their impact) as sent: what the
    /// service stores with them.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for package in &self.packages {
            if let Ok(json) = serde_json::to_vec(package) {
                hasher.update(&json);
                hasher.update(b"\n");
            }
        }
        hasher.update(b"--\n");
        for update in &self.updates {
            if let Ok(json) = serde_json::to_vec(update) {
                hasher.update(&json);
                hasher.update(b"\n");
            }
        }
        let digest = hasher.finalize();
        let mut text = String::from("sha256:");
        for byte in digest {
            text.push_str(&format!("{byte:02x}"));
        }
        text
    }

    /// The installed version of `name`, if it is installed.
    pub fn version_of(&self, name: &str) -> Option<&str> {
        self.packages
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.version.as_str())
    }
}

/// Units running replaced code: for `services_need_restart`.
pub fn services_need_restart(system: &System) -> Vec<String> {
    Running::scan(system).stale_units()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reboot_packages() {
        for name in [
            "linux-image-6.1.0-27-amd64",
            "linux-image-generic",
            "kernel-core",
            "grub-efi-amd64",
            "grub2-tools",
            "shim-x64",
            "libc6",
            "glibc",
            "glibc-common",
            "systemd",
            "libsystemd0",
            "dbus",
            "intel-microcode",
            "amd64-microcode",
            "microcode_ctl",
            "firmware-linux-free",
            "linux-firmware",
        ] {
            assert!(needs_reboot(name), "{name}");
        }
        for name in ["openssl", "nginx", "libc-bin", "fleet-hello", "bash"] {
            assert!(!needs_reboot(name), "{name}");
        }
    }

    #[test]
    fn the_digest_moves_with_what_is_sent_and_only_with_it() {
        let installed = vec![Installed {
            name: "a".into(),
            version: "1".into(),
            arch: "all".into(),
            source_name: None,
            source_version: None,
            held: true,
        }];
        let one = Inventory::new(installed.clone(), Vec::new());
        assert_eq!(one.held, ["a"]);
        let again = Inventory::new(installed.clone(), Vec::new());
        assert_eq!(one.digest(), again.digest());
        assert!(one.digest().starts_with("sha256:") && one.digest().len() == 71);
        let mut newer = installed;
        newer[0].version = "2".into();
        assert_ne!(Inventory::new(newer, Vec::new()).digest(), one.digest());
    }
}
