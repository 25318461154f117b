//! The reference agent on a real Debian root (issue 28's acceptance): enrolled against a test
//! service, it reports the root's real dpkg database and apt's updates (security from the
//! security suite), each with the impact apt's simulation gives (and the proposal says so before
//! it is approved); an approved proposal is
//! applied with apt in the root and ends `applied`. A package held after approval is refused
//! with a clear log; a dependency gone from the repository fails the job with apt's output and
//! nothing half-applied.

use std::path::Path;

use entities::{host_labels, host_packages, host_updates, hosts};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::Value;

use crate::{
    packages::{Spec, apt_repo, deb},
    roots::Root,
    service::{Agent, Service},
    units::Daemon,
};

const CONFIG: &str = r#"permissions = ["read_inventory", "apply_updates"]
refresh_lists = true
"#;

/// A Debian root holding the tests' packages at 1.0, a security suite offering 1.1 of most, an
/// updates suite offering `fleet-plain` 1.1, and `fleet-daemon` running as a service.
pub struct DebianHost {
    pub root: Root,
    _daemon: Daemon,
}

impl DebianHost {
    pub fn new() -> DebianHost {
        let root = Root::debian();
        let base = root.file("/srv/repo/base");
        let security = root.file("/srv/repo/security");
        let updates = root.file("/srv/repo/updates");
        for dir in [&base, &security, &updates] {
            std::fs::create_dir_all(dir).expect("repository directory");
        }
        let sleep = root.file("/usr/bin/sleep");
        let daemon_file = "/usr/lib/fleet-daemon/fleet-sleep";
        for name in [
            "fleet-hello",
            "fleet-pulls",
            "fleet-held",
            "fleet-broken",
            "fleet-plain",
        ] {
            deb(&Spec::new(name, "1.0"), &base);
        }
        deb(
            &Spec::new("fleet-daemon", "1.0").file(daemon_file, &sleep),
            &base,
        );
        for name in ["fleet-hello", "fleet-held"] {
            deb(&Spec::new(name, "1.1"), &security);
        }
        deb(
            &Spec::new("fleet-pulls", "1.1").depends("fleet-dep-new"),
            &security,
        );
        deb(&Spec::new("fleet-dep-new", "1.0"), &security);
        deb(
            &Spec::new("fleet-broken", "1.1").depends("fleet-libx (>= 2)"),
            &security,
        );
        deb(&Spec::new("fleet-libx", "2.0"), &security);
        deb(
            &Spec::new("fleet-daemon", "1.1").file(daemon_file, &sleep),
            &security,
        );
        deb(&Spec::new("fleet-plain", "1.1"), &updates);
        apt_repo(&base, "bookworm", "Debian");
        apt_repo(&security, "bookworm-security", "Debian-Security");
        apt_repo(&updates, "bookworm-updates", "Debian");
        root.write(
            "/etc/apt/sources.list",
            "deb [trusted=yes] file:/srv/repo/base ./\n\
             deb [trusted=yes] file:/srv/repo/security ./\n\
             deb [trusted=yes] file:/srv/repo/updates ./\n",
        );
        root.write("/etc/hostname", "deb-host\n");
        root.must("apt-get", &["update", "-q"]);
        root.must(
            "apt-get",
            &[
                "install",
                "-y",
                "-q",
                "fleet-hello=1.0",
                "fleet-pulls=1.0",
                "fleet-held=1.0",
                "fleet-broken=1.0",
                "fleet-plain=1.0",
                "fleet-daemon=1.0",
            ],
        );
        let daemon = Daemon::start(root.path(), daemon_file, "fleet-daemon.service");
        DebianHost {
            root,
            _daemon: daemon,
        }
    }

    /// The version of `name` in the root's dpkg database.
    pub fn version(&self, name: &str) -> Option<String> {
        let out = self
            .root
            .run("dpkg-query", &["-W", "-f", "${Version}", name]);
        (out.code == Some(0)).then_some(out.stdout)
    }

    /// Takes `file` out of the security suite and indexes it again.
    pub fn withdraw(&self, file: &str) {
        let security = self.root.file("/srv/repo/security");
        std::fs::remove_file(security.join(file)).expect("withdraw a package");
        apt_repo(&security, "bookworm-security", "Debian-Security");
    }
}

fn uuid(host_id: &str) -> uuid::Uuid {
    platform::ids::HostId::parse(host_id)
        .map(platform::ids::HostId::uuid)
        .expect("a host id")
}

/// Enrols the real agent, checks it in once and approves the proposal the service opens: the
/// agent, its host id and the proposal's id.
async fn approved(service: &Service, root: &Path) -> (Agent, String, String) {
    let agent = Agent::new(root, CONFIG);
    let host_id = agent.enroll(service).await;
    let first = agent.run(&["run", "--once"]).await;
    assert_eq!(first.code, Some(0), "the first check-in: {}", first.stderr);
    let proposal = service.proposal().await;
    let id = proposal["id"].as_str().unwrap_or_default().to_owned();
    service.approve(&id).await;
    (agent, host_id, id)
}

#[tokio::test]
async fn a_debian_host_reports_its_real_packages_and_applies_an_approved_proposal() {
    let host = DebianHost::new();
    let service = Service::start().await;
    let db = &service.app.state.db.orm;
    let agent = Agent::new(host.root.path(), CONFIG);
    let host_id = agent.enroll(&service).await;
    assert!(host_id.starts_with("hst_"), "{host_id}");
    let first = agent.run(&["run", "--once"]).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);

    // The root's real dpkg database, with source packages.
    let packages = host_packages::Entity::find()
        .filter(host_packages::Column::HostId.eq(uuid(&host_id)))
        .all(db)
        .await
        .expect("packages");
    assert!(packages.len() > 80, "{} packages", packages.len());
    let hello = packages
        .iter()
        .find(|p| p.name == "fleet-hello")
        .expect("fleet-hello");
    assert_eq!(hello.version, "1.0");
    assert_eq!(hello.source_name.as_deref(), Some("fleet-hello-src"));
    let dpkg = packages.iter().find(|p| p.name == "dpkg").expect("dpkg");
    assert_eq!(dpkg.arch, "amd64");

    // apt's updates: security from the security suite, impact from its simulation.
    let updates = host_updates::Entity::find()
        .filter(host_updates::Column::HostId.eq(uuid(&host_id)))
        .all(db)
        .await
        .expect("updates");
    let update = |name: &str| {
        updates
            .iter()
            .find(|u| u.name == name)
            .unwrap_or_else(|| panic!("an update of {name} in {updates:#?}"))
    };
    let impact = |name: &str| -> Value {
        serde_json::from_str(update(name).impact.as_ref().expect("an impact").as_str())
            .expect("JSON")
    };
    assert_eq!(update("fleet-hello").to_version, "1.1");
    assert!(update("fleet-hello").security);
    assert!(
        !update("fleet-plain").security,
        "the updates suite is not a security suite"
    );
    assert_eq!(
        impact("fleet-pulls")["installs"],
        serde_json::json!([{"name": "fleet-dep-new", "version": "1.0"}])
    );
    assert_eq!(
        impact("fleet-daemon")["restarts"],
        serde_json::json!(["fleet-daemon.service"])
    );
    assert_eq!(impact("fleet-hello")["restarts"], serde_json::json!([]));
    assert_eq!(impact("fleet-hello")["reboot"], false);
    assert_eq!(updates.len(), 6, "{updates:#?}");

    let row = hosts::Entity::find_by_id(uuid(&host_id))
        .one(db)
        .await
        .expect("read")
        .expect("the host");
    assert_eq!(row.status, "online");
    assert_eq!(row.distro.as_deref(), Some("debian"));
    assert_eq!(row.os_family.as_deref(), Some("debian"));
    assert_eq!(row.hostname, "deb-host");
    assert_eq!(row.reboot_required, Some(false));
    let labels: Vec<(String, String)> = host_labels::Entity::find()
        .filter(host_labels::Column::HostId.eq(uuid(&host_id)))
        .all(db)
        .await
        .expect("labels")
        .into_iter()
        .map(|l| (l.key, l.value))
        .collect();
    assert!(
        labels.contains(&("role".into(), "web".into())),
        "{labels:?}"
    );

    // `status` says what it would report.
    let status = agent.run(&["status"]).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let status: Value = serde_json::from_str(&status.stdout).expect("status is JSON");
    assert_eq!(status["host_id"], host_id.as_str());
    assert_eq!(
        status["would_report"]["facts"]["machine_id"],
        host.root.read("/etc/machine-id").trim()
    );
    assert!(
        status["would_report"]["updates"]
            .as_array()
            .is_some_and(|u| u.len() == 6)
    );

    // Approve, having seen what it does (decisions §21): the proposal says what the agent
    // worked out, unit and new package included; the next run applies it in the root.
    let proposal = service.proposal().await;
    let impact = &proposal["impact"];
    assert_eq!(
        (
            &impact["hosts"],
            &impact["hosts_unknown"],
            &impact["hosts_rebooting"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(0),
            &serde_json::json!(0)
        ),
        "{impact:#}"
    );
    assert_eq!(
        impact["restarts"],
        serde_json::json!([{"unit": "fleet-daemon.service", "hosts": 1}])
    );
    assert!(
        impact["installs"]
            .as_array()
            .is_some_and(|i| i.contains(&serde_json::json!({"name": "fleet-dep-new", "hosts": 1}))),
        "{impact:#}"
    );
    assert_eq!(
        proposal["warnings"],
        serde_json::json!([
            "Restarts fleet-daemon.service on 1 of 1 host, more than half of them at once."
        ])
    );
    assert_eq!(
        proposal["targets"][0]["impact"]["restarts"],
        serde_json::json!(["fleet-daemon.service"])
    );
    let id = proposal["id"].as_str().unwrap_or_default().to_owned();
    service.approve(&id).await;
    let second = agent.run(&["run", "--once"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    for name in [
        "fleet-hello",
        "fleet-held",
        "fleet-broken",
        "fleet-pulls",
        "fleet-plain",
        "fleet-daemon",
    ] {
        assert_eq!(
            host.version(name).as_deref(),
            Some("1.1"),
            "{name} in the root"
        );
    }
    assert_eq!(host.version("fleet-dep-new").as_deref(), Some("1.0"));
    let jobs = service.jobs(&host_id).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].status, "succeeded");
    let log = jobs[0].log.clone().unwrap_or_default();
    assert!(log.contains("Setting up fleet-hello (1.1)"), "{log}");
    assert!(
        log.contains("every package is at the job's version"),
        "{log}"
    );
    assert_eq!(service.proposal_status(&id).await, "applied");

    // The next check-in reports the new inventory: nothing left to update, and the daemon runs
    // the replaced binary.
    let third = agent.run(&["run", "--once"]).await;
    assert_eq!(third.code, Some(0), "{}", third.stderr);
    let left = host_updates::Entity::find()
        .filter(host_updates::Column::HostId.eq(uuid(&host_id)))
        .all(db)
        .await
        .expect("updates");
    assert!(left.is_empty(), "{left:#?}");
    let row = hosts::Entity::find_by_id(uuid(&host_id))
        .one(db)
        .await
        .expect("read")
        .expect("the host");
    assert_eq!(
        row.services_need_restart.as_str(),
        r#"["fleet-daemon.service"]"#
    );
    service.app.stop().await;
}

#[tokio::test]
async fn a_package_held_after_approval_is_refused_and_nothing_changes() {
    let host = DebianHost::new();
    let service = Service::start().await;
    let (agent, host_id, id) = approved(&service, host.root.path()).await;
    host.root.must("apt-mark", &["hold", "fleet-held"]);
    let ran = agent.run(&["run", "--once"]).await;
    assert_eq!(
        ran.code,
        Some(1),
        "a failed job fails the run: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("fleet-held is held"),
        "a clear local log line: {}",
        ran.stderr
    );
    let jobs = service.jobs(&host_id).await;
    assert_eq!(jobs[0].status, "failed");
    let log = jobs[0].log.clone().unwrap_or_default();
    assert!(log.contains("fleet-held is held on this host"), "{log}");
    assert!(log.contains("nothing was changed"), "{log}");
    assert_eq!(host.version("fleet-hello").as_deref(), Some("1.0"));
    assert_eq!(host.version("fleet-held").as_deref(), Some("1.0"));
    assert_eq!(service.proposal_status(&id).await, "failed");
    service.app.stop().await;
}

#[tokio::test]
async fn a_broken_dependency_fails_the_job_with_apt_s_output_and_nothing_half_applied() {
    let host = DebianHost::new();
    let service = Service::start().await;
    let (agent, host_id, id) = approved(&service, host.root.path()).await;
    // The dependency of fleet-broken 1.1 leaves the repository between approval and the job.
    host.withdraw("fleet-libx_2.0_all.deb");
    let ran = agent.run(&["run", "--once"]).await;
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    let jobs = service.jobs(&host_id).await;
    assert_eq!(jobs[0].status, "failed");
    let log = jobs[0].log.clone().unwrap_or_default();
    assert!(
        log.contains("fleet-libx"),
        "apt's output names the dependency: {log}"
    );
    assert!(log.contains("the package manager failed"), "{log}");
    for name in ["fleet-hello", "fleet-broken"] {
        assert_eq!(
            host.version(name).as_deref(),
            Some("1.0"),
            "{name} untouched"
        );
    }
    assert_eq!(service.proposal_status(&id).await, "failed");
    service.app.stop().await;
}

/// Whether a process of the root runs `comm`.
fn running_in(root: &Path, comm: &str) -> bool {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let dir = entry.path();
            std::fs::read_link(dir.join("root")).ok().as_deref() == Some(root.as_path())
                && std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == comm)
        })
}

#[tokio::test]
async fn an_agent_stopped_mid_job_reports_the_outcome_once_from_the_package_database() {
    let root = Root::debian();
    let base = root.file("/srv/repo/base");
    let security = root.file("/srv/repo/security");
    std::fs::create_dir_all(&base).expect("base");
    std::fs::create_dir_all(&security).expect("security");
    deb(&Spec::new("fleet-slow", "1.0"), &base);
    // Configuring 1.1 takes a while: long enough to stop the agent in the middle of it.
    deb(
        &Spec::new("fleet-slow", "1.1").postinst("#!/bin/sh\nsleep 4\n"),
        &security,
    );
    apt_repo(&base, "bookworm", "Debian");
    apt_repo(&security, "bookworm-security", "Debian-Security");
    root.write(
        "/etc/apt/sources.list",
        "deb [trusted=yes] file:/srv/repo/base ./\ndeb [trusted=yes] file:/srv/repo/security ./\n",
    );
    root.must("apt-get", &["update", "-q"]);
    root.must("apt-get", &["install", "-y", "-q", "fleet-slow=1.0"]);
    let service = Service::start().await;
    let (agent, host_id, id) = approved(&service, root.path()).await;

    // The agent is killed (as `systemctl restart` of its own upgrade would stop it) while dpkg
    // runs the package's postinst; dpkg goes on.
    let mut child = agent.spawn(&["run", "--once"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !running_in(root.path(), "sleep") {
        assert!(
            std::time::Instant::now() < deadline,
            "the postinst never ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    child.start_kill().expect("kill the agent");
    let _ = child.wait().await;
    assert!(
        service.jobs(&host_id).await[0].finished_at.is_none(),
        "no result yet"
    );

    // Started again, it waits for the package manager, then reports from the database.
    let again = agent.run(&["run", "--once"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again.stderr.contains("stopped while applying"),
        "{}",
        again.stderr
    );
    let version = root.must(
        "dpkg-query",
        &["-W", "-f", "${Version} ${Status}", "fleet-slow"],
    );
    assert_eq!(version, "1.1 install ok installed");
    let jobs = service.jobs(&host_id).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].status, "succeeded");
    let log = jobs[0].log.clone().unwrap_or_default();
    assert!(log.contains("the agent stopped while applying"), "{log}");
    assert_eq!(service.proposal_status(&id).await, "applied");
    // And not again, nor the job run a second time.
    let third = agent.run(&["run", "--once"]).await;
    assert_eq!(third.code, Some(0), "{}", third.stderr);
    assert!(!third.stderr.contains("applying a job"), "{}", third.stderr);
    service.app.stop().await;
}
