//! Rocky, Alma, RHEL and Fedora: rpm's database and dnf's resolution (decisions §19).

use std::time::Duration;

use super::{Installed, Simulation, dnf, rpm, stamp};
use crate::{output::Tail, system::System};

/// dnf may take this long to read its metadata and resolve.
const RESOLVE: Duration = Duration::from_secs(600);

pub async fn installed(system: &System) -> anyhow::Result<Vec<Installed>> {
    let out = system
        .run("rpm", &["-qa", "--queryformat", rpm::QUERY_FORMAT], RESOLVE)
        .await?;
    if !out.success() {
        anyhow::bail!("rpm -qa failed ({:?}): {}", out.code, out.stderr.trim());
    }
    Ok(rpm::parse_query(&out.stdout)
        .into_iter()
        .map(|p| Installed {
            name: p.name,
            version: p.version,
            arch: p.arch,
            source_name: p.source_name,
            source_version: p.source_version,
            held: false,
        })
        .collect())
}

/// The updates dnf resolves (`dnf check-update`: exit status 100 when there are some, 0 when
/// none).
pub async fn available(system: &System) -> anyhow::Result<Vec<dnf::Available>> {
    let out = system.run("dnf", &["-q", "check-update"], RESOLVE).await?;
    match out.code {
        Some(0) => Ok(Vec::new()),
        Some(100) => Ok(dnf::parse_check_update(&out.stdout)),
        code => anyhow::bail!("dnf check-update failed ({code:?}): {}", out.stderr.trim()),
    }
}

/// The advisories of the available updates (`dnf updateinfo`); none when the repositories
/// publish no updateinfo or dnf cannot say.
pub async fn notices(system: &System) -> Vec<dnf::Notice> {
    let list = system
        .run("dnf", &["-q", "updateinfo", "list", "--updates"], RESOLVE)
        .await;
    let info = system
        .run("dnf", &["-q", "updateinfo", "info", "--updates"], RESOLVE)
        .await;
    match (list, info) {
        (Ok(list), Ok(info)) if list.success() => dnf::parse_updateinfo(&list.stdout, &info.stdout),
        (Ok(list), _) => {
            tracing::warn!("dnf updateinfo failed: {}", list.stderr.trim());
            Vec::new()
        }
        (Err(err), _) => {
            tracing::warn!("dnf updateinfo: {err:#}");
            Vec::new()
        }
    }
}

/// Packages held by dnf's versionlock plugin; none without the plugin.
pub async fn held(system: &System) -> Vec<String> {
    match system
        .run("dnf", &["-q", "versionlock", "list"], RESOLVE)
        .await
    {
        Ok(out) if out.success() => dnf::parse_versionlock(&out.stdout),
        Ok(out) => {
            tracing::debug!("dnf versionlock list: {}", out.stderr.trim());
            Vec::new()
        }
        Err(err) => {
            tracing::debug!("dnf versionlock list: {err:#}");
            Vec::new()
        }
    }
}

/// `dnf needs-restarting -r`: 1 when a reboot is needed, 0 when not; otherwise unknown.
pub async fn reboot_required(system: &System) -> Option<bool> {
    match system
        .run("dnf", &["-q", "needs-restarting", "-r"], RESOLVE)
        .await
    {
        Ok(out) => match out.code {
            Some(0) => Some(false),
            Some(1) => Some(true),
            _ => None,
        },
        Err(_) => None,
    }
}

/// What upgrading `name` to `evr` alone would do (`dnf --assumeno upgrade`); `None` when dnf
/// cannot resolve it.
pub async fn simulate(
    system: &System,
    name: &str,
    evr: &str,
) -> anyhow::Result<Option<Simulation>> {
    let target = target(name, evr);
    let out = system
        .run("dnf", &["--assumeno", "upgrade", &target], RESOLVE)
        .await?;
    let transaction = dnf::parse_transaction(&out.stdout);
    if transaction.upgrades.is_empty() {
        return Ok(None);
    }
    Ok(Some(Simulation {
        upgrades: transaction.upgrades,
        installs: transaction.installs,
        removes: transaction.removes,
    }))
}

/// The files rpm installed for a package.
pub async fn files(system: &System, name: &str) -> Vec<String> {
    match system.run("rpm", &["-ql", name], RESOLVE).await {
        Ok(out) if out.success() => out
            .stdout
            .lines()
            .filter(|l| l.starts_with('/'))
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Where rpm keeps its database (`%{_dbpath}`: `/var/lib/rpm` on the RHEL family).
pub async fn database(system: &System) -> String {
    match system.run("rpm", &["--eval", "%{_dbpath}"], RESOLVE).await {
        Ok(out) if out.success() && out.stdout.trim().starts_with('/') => {
            out.stdout.trim().to_owned()
        }
        _ => "/var/lib/rpm".to_owned(),
    }
}

/// What the inventory is computed from: rpm's database (its files, not the shared-memory file
/// a reader touches), the metadata dnf last fetched (each repository's `repomd.xml`), locks and
/// repositories.
pub fn inputs(system: &System, database: &str) -> String {
    let mut paths: Vec<String> = [
        "rpmdb.sqlite",
        "rpmdb.sqlite-wal",
        "Packages",
        "Packages.db",
    ]
    .iter()
    .map(|file| format!("{database}/{file}"))
    .collect();
    if let Ok(entries) = std::fs::read_dir(system.path("/var/cache/dnf")) {
        let mut caches: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| {
                format!(
                    "/var/cache/dnf/{}/repodata/repomd.xml",
                    e.file_name().to_string_lossy()
                )
            })
            .collect();
        caches.sort();
        paths.extend(caches);
    }
    paths.extend(
        [
            "/etc/dnf/plugins/versionlock.list",
            "/etc/yum.repos.d",
            "/etc/dnf/dnf.conf",
        ]
        .iter()
        .map(|p| (*p).to_owned()),
    );
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    stamp(system, &refs)
}

/// `dnf makecache`.
pub async fn refresh(system: &System, log: &mut Tail) -> anyhow::Result<bool> {
    let code = system
        .run_logged("dnf", &["-q", "makecache"], RESOLVE, log)
        .await?;
    Ok(code == Some(0))
}

/// Upgrades exactly `targets` (`name-[epoch:]version-release`), answering yes.
pub async fn apply(
    system: &System,
    targets: &[String],
    limit: Duration,
    log: &mut Tail,
) -> anyhow::Result<Option<i32>> {
    let mut args = vec!["-y", "upgrade"];
    args.extend(targets.iter().map(String::as_str));
    system.run_logged("dnf", &args, limit, log).await
}

/// `name-[epoch:]version-release` for dnf.
pub fn target(name: &str, evr: &str) -> String {
    format!("{name}-{evr}")
}
