//! Debian and Ubuntu: dpkg's database and apt's resolution (decisions §19).

use std::{io::BufReader, time::Duration};

use anyhow::Context;

use super::{Installed, Simulation, apt, dpkg, stamp};
use crate::{output::Tail, system::System};

/// apt may take this long to read its lists and resolve.
const RESOLVE: Duration = Duration::from_secs(600);

pub fn installed(system: &System) -> anyhow::Result<Vec<Installed>> {
    let path = system.path("/var/lib/dpkg/status");
    let file = std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(dpkg::read_status(BufReader::new(file))
        .with_context(|| format!("reading {}", path.display()))?
        .into_iter()
        .map(|p| Installed {
            name: p.name,
            version: p.version,
            arch: p.arch,
            source_name: Some(p.source_name),
            source_version: Some(p.source_version),
            held: p.held,
        })
        .collect())
}

/// The upgrades apt would make (`apt-get -s dist-upgrade`), as it resolves them.
pub async fn upgrades(system: &System) -> anyhow::Result<Vec<apt::Step>> {
    let out = system
        .run(
            "apt-get",
            &["-s", "-q", "-o", "Debug::NoLocking=1", "dist-upgrade"],
            RESOLVE,
        )
        .await?;
    if !out.success() {
        anyhow::bail!(
            "apt-get -s dist-upgrade failed ({:?}): {}",
            out.code,
            out.stderr.trim()
        );
    }
    Ok(apt::parse_simulation(&out.stdout).upgrades)
}

/// What upgrading `name` to `version` alone would do (`apt-get -s install --only-upgrade`);
/// `None` when apt cannot resolve it.
pub async fn simulate(
    system: &System,
    name: &str,
    version: &str,
) -> anyhow::Result<Option<Simulation>> {
    let target = format!("{name}={version}");
    let out = system
        .run(
            "apt-get",
            &[
                "-s",
                "-q",
                "-o",
                "Debug::NoLocking=1",
                "install",
                "--only-upgrade",
                &target,
            ],
            RESOLVE,
        )
        .await?;
    if !out.success() {
        return Ok(None);
    }
    let sim = apt::parse_simulation(&out.stdout);
    Ok(Some(Simulation {
        upgrades: sim.upgrades.into_iter().map(|s| (s.name, s.to)).collect(),
        installs: sim.installs.into_iter().map(|s| (s.name, s.to)).collect(),
        removes: sim.removes,
    }))
}

/// The files dpkg installed for a package.
pub fn files(system: &System, name: &str, arch: &str) -> Vec<String> {
    dpkg::list_files(name, arch)
        .iter()
        .find_map(|list| system.read_to_string(list).ok())
        .map(|text| {
            text.lines()
                .filter(|l| l.starts_with('/'))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub fn reboot_required(system: &System) -> Option<bool> {
    Some(system.exists("/run/reboot-required"))
}

/// What the inventory is computed from: dpkg's database, apt's lists, sources and pins.
pub fn inputs(system: &System) -> String {
    stamp(
        system,
        &[
            "/var/lib/dpkg/status",
            "/var/lib/apt/lists",
            "/var/lib/apt/extended_states",
            "/etc/apt/sources.list",
            "/etc/apt/sources.list.d",
            "/etc/apt/preferences",
            "/etc/apt/preferences.d",
            "/run/reboot-required",
        ],
    )
}

/// `apt-get update`.
pub async fn refresh(system: &System, log: &mut Tail) -> anyhow::Result<bool> {
    let code = system
        .run_logged("apt-get", &["update", "-q"], RESOLVE, log)
        .await?;
    Ok(code == Some(0))
}

/// Upgrades exactly `targets` (`name=version`): non-interactive, configuration files kept,
/// waiting up to 10 minutes for another package manager to finish.
pub async fn apply(
    system: &System,
    targets: &[String],
    limit: Duration,
    log: &mut Tail,
) -> anyhow::Result<Option<i32>> {
    let mut args = vec![
        "install",
        "--only-upgrade",
        "-y",
        "-q",
        "-o",
        "Dpkg::Options::=--force-confold",
        "-o",
        "DPkg::Lock::Timeout=600",
    ];
    args.extend(targets.iter().map(String::as_str));
    system.run_logged("apt-get", &args, limit, log).await
}

/// `name=version` for apt.
pub fn target(name: &str, version: &str) -> String {
    format!("{name}={version}")
}
