//! The `.deb` and the `.rpm` (decisions §19): built from the workspace with cargo-deb and
//! cargo-generate-rpm (of the agent binary these tests run, so no second build), installed and
//! removed with apt and dnf in throwaway roots. Installed, the agent reports `agent_install`
//! with the package manager that installed it; removed, nothing of it is left but what the
//! package managers keep on purpose (a `.deb`'s conffile until it is purged).

use std::{path::PathBuf, process::Command};

use serde_json::Value;

use crate::{roots::Root, service::Agent};

/// The workspace's target directory and the profile the tests' agent was built with.
fn built() -> (PathBuf, String) {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_fleet-agent"));
    let profile_dir = binary.parent().expect("the profile directory");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a profile name")
        .to_owned();
    let target = profile_dir
        .parent()
        .expect("the target directory")
        .to_owned();
    // Cargo names the dev profile's directory `debug`.
    let profile = if profile == "debug" {
        "dev".to_owned()
    } else {
        profile
    };
    (target, profile)
}

fn cargo(tool: &str, args: &[&str]) -> String {
    let (target, profile) = built();
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned();
    let out = Command::new("cargo")
        .arg(tool)
        .args(["-p", "agent", "--profile", &profile])
        .args(args)
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&workspace)
        .output()
        .unwrap_or_else(|e| panic!("cargo {tool}: {e}"));
    assert!(
        out.status.success(),
        "cargo {tool} failed (is it installed? .ci/run installs it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn reported_install(root: &Root) -> Value {
    let agent = Agent::new(root.path(), "");
    let status = agent.run(&["status"]).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let status: Value = serde_json::from_str(&status.stdout).expect("status is JSON");
    status["would_report"]["facts"]["agent_install"].clone()
}

#[tokio::test]
async fn the_deb_installs_reports_apt_and_removes_cleanly() {
    let out = tempfile::tempdir().expect("an output directory");
    cargo(
        "deb",
        &[
            "--no-build",
            "--fast",
            "-o",
            &out.path().display().to_string(),
        ],
    );
    let deb = std::fs::read_dir(out.path())
        .expect("the output")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb");
    let root = Root::debian();
    assert_eq!(reported_install(&root).await["method"], "binary");
    std::fs::copy(&deb, root.file("/tmp/fleet-agent.deb")).expect("copy the package in");
    root.must("apt-get", &["install", "-y", "-q", "/tmp/fleet-agent.deb"]);
    let version = root.must("fleet-agent", &["--version"]);
    assert!(version.starts_with("fleet-agent "), "{version}");
    assert!(
        root.file("/usr/lib/systemd/system/fleet-agent.service")
            .exists()
    );
    assert!(
        root.read("/etc/fleet-agent/agent.toml")
            .contains("permissions = [\"read_inventory\"]")
    );
    let conffiles = root.must("dpkg-query", &["-W", "-f", "${Conffiles}", "fleet-agent"]);
    assert!(
        conffiles.contains("/etc/fleet-agent/agent.toml"),
        "{conffiles}"
    );
    let install = reported_install(&root).await;
    assert_eq!(install["method"], "apt", "{install}");
    assert_eq!(install["channel"], "stable", "{install}");

    std::fs::create_dir_all(root.file("/var/lib/fleet-agent")).expect("state");
    root.write("/var/lib/fleet-agent/state.json", "{}");
    root.must("apt-get", &["remove", "-y", "-q", "fleet-agent"]);
    assert!(!root.file("/usr/bin/fleet-agent").exists());
    assert!(
        !root
            .file("/usr/lib/systemd/system/fleet-agent.service")
            .exists()
    );
    assert!(
        root.file("/etc/fleet-agent/agent.toml").exists(),
        "a conffile stays until purged"
    );
    root.must("apt-get", &["purge", "-y", "-q", "fleet-agent"]);
    assert!(!root.file("/etc/fleet-agent/agent.toml").exists());
    assert!(
        !root.file("/var/lib/fleet-agent").exists(),
        "purging forgets the host's state"
    );
    let gone = root.run("dpkg-query", &["-W", "-f", "${Status}", "fleet-agent"]);
    assert_ne!(gone.stdout, "install ok installed");
}

#[tokio::test]
async fn the_rpm_installs_reports_dnf_and_removes_cleanly() {
    let out = tempfile::tempdir().expect("an output directory");
    cargo("generate-rpm", &["-o", &out.path().display().to_string()]);
    let rpm = std::fs::read_dir(out.path())
        .expect("the output")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "rpm"))
        .expect("an .rpm");
    let root = crate::rhel::rocky_root();
    // This root's rpm database holds only the tests' packages; its C library and shell, which
    // dpkg installed, are declared to rpm by a package providing exactly what the agent's
    // package requires of the system (as glibc and bash do on a RHEL-family host).
    let required = Command::new("rpm")
        .args(["-qp", "--requires"])
        .arg(&rpm)
        .output()
        .expect("rpm -qp --requires");
    let provides: Vec<String> = String::from_utf8_lossy(&required.stdout)
        .lines()
        .map(str::trim)
        .filter(|r| !r.is_empty() && !r.starts_with("rpmlib("))
        .map(|r| r.split(' ').next().unwrap_or(r).to_owned())
        .collect();
    assert!(
        provides.iter().any(|p| p.starts_with("libc.so.6")),
        "the package requires the C library it links: {provides:?}"
    );
    let repo = root.file("/srv/rpmrepo");
    crate::packages::rpm(
        &crate::packages::Spec::new("fleet-root-base", "1.0").provides(provides),
        "1",
        None,
        &repo,
    );
    crate::packages::dnf_repo(&repo, None);
    root.must(
        "dnf",
        &["-y", "-q", "--refresh", "install", "fleet-root-base"],
    );
    std::fs::copy(&rpm, root.file("/tmp/fleet-agent.rpm")).expect("copy the package in");
    root.must("dnf", &["-y", "-q", "install", "/tmp/fleet-agent.rpm"]);
    let version = root.must("fleet-agent", &["--version"]);
    assert!(version.starts_with("fleet-agent "), "{version}");
    assert!(
        root.file("/usr/lib/systemd/system/fleet-agent.service")
            .exists()
    );
    assert!(root.file("/etc/fleet-agent/agent.toml").exists());
    let install = reported_install(&root).await;
    assert_eq!(install["method"], "dnf", "{install}");
    root.must("dnf", &["-y", "-q", "remove", "fleet-agent"]);
    assert!(!root.file("/usr/bin/fleet-agent").exists());
    assert!(
        !root
            .file("/usr/lib/systemd/system/fleet-agent.service")
            .exists()
    );
    assert!(
        !root.file("/etc/fleet-agent/agent.toml").exists(),
        "an unchanged config goes with it"
    );
    let gone = root.run("rpm", &["-q", "fleet-agent"]);
    assert_ne!(gone.code, Some(0), "{}", gone.stdout);
}
