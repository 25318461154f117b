//! The reference agent on an rpm/dnf root (issue 28): no RHEL-family root can be fetched here,
//! so the root is Debian's tree with Debian's rpm, dnf and dnf-plugins-core, an rpm database
//! holding only the test's packages (`rpm --initdb`), an `/etc/os-release` saying `ID=rocky`,
//! Debian's dnf `local` plugin turned off, and a repository made by createrepo_c with an
//! updateinfo carrying a security advisory. dnf runs inside the root (chroot), as the agent
//! runs it.

use entities::{host_packages, host_updates, hosts};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};

use crate::{
    packages::{Spec, dnf_repo, rpm},
    roots::Root,
    service::{Agent, Service},
};

const CONFIG: &str = r#"permissions = ["read_inventory", "apply_updates", "reboot"]
reboot_command = "/bin/true"
"#;

const UPDATEINFO: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<updates>
  <update from="security@fleet.test" status="final" type="security" version="2.0">
    <id>RLSA-2026:1001</id>
    <title>Important: fleet-hello security update</title>
    <severity>Important</severity>
    <issued date="2026-11-01 00:00:00"/>
    <updated date="2026-11-01 00:00:00"/>
    <description>Fixes a flaw.</description>
    <references>
      <reference href="https://errata.rockylinux.org/RLSA-2026:1001" id="RLSA-2026:1001" type="self" title="RLSA-2026:1001"/>
      <reference href="https://access.redhat.com/security/cve/CVE-2026-1001" id="CVE-2026-1001" type="cve" title="CVE-2026-1001"/>
    </references>
    <pkglist>
      <collection short="fleet">
        <name>fleet</name>
        <package name="fleet-hello" version="1.1" release="1" epoch="0" arch="noarch" src="fleet-hello-1.1-1.src.rpm">
          <filename>fleet-hello-1.1-1.noarch.rpm</filename>
        </package>
      </collection>
    </pkglist>
  </update>
</updates>
"#;

pub fn rocky_root() -> Root {
    let root = Root::rpm();
    let local = root.read("/etc/dnf/plugins/local.conf");
    root.write(
        "/etc/dnf/plugins/local.conf",
        &local.replace("enabled = true", "enabled = false"),
    );
    std::fs::remove_file(root.file("/etc/os-release")).expect("the root's os-release link");
    root.write(
        "/etc/os-release",
        include_str!("../../testdata/rocky-9.os-release"),
    );
    root.write("/etc/dnf/vars/releasever", "9\n");
    root.write("/etc/hostname", "rpm-host\n");
    root.must("rpm", &["--initdb"]);
    let repo = root.file("/srv/rpmrepo");
    std::fs::create_dir_all(&repo).expect("repository directory");
    rpm(&Spec::new("fleet-hello", "1.0"), "1", None, &repo);
    rpm(&Spec::new("fleet-hello", "1.1"), "1", None, &repo);
    rpm(&Spec::new("fleet-epoch", "2.0"), "1", Some(1), &repo);
    rpm(&Spec::new("fleet-epoch", "2.1"), "1", Some(1), &repo);
    rpm(&Spec::new("fleet-pulls", "1.0"), "1", None, &repo);
    rpm(
        &Spec::new("fleet-pulls", "1.1").depends("fleet-dep-new"),
        "1",
        None,
        &repo,
    );
    rpm(&Spec::new("fleet-dep-new", "1.0"), "1", None, &repo);
    dnf_repo(&repo, Some(UPDATEINFO));
    root.write(
        "/etc/yum.repos.d/fleet.repo",
        "[fleet]\nname=fleet tests\nbaseurl=file:///srv/rpmrepo\ngpgcheck=0\nenabled=1\n",
    );
    root.must(
        "dnf",
        &[
            "-y",
            "-q",
            "install",
            "fleet-hello-1.0-1",
            "fleet-epoch-1:2.0-1",
            "fleet-pulls-1.0-1",
        ],
    );
    root
}

fn uuid(host_id: &str) -> uuid::Uuid {
    platform::ids::HostId::parse(host_id)
        .map(platform::ids::HostId::uuid)
        .expect("a host id")
}

#[tokio::test]
async fn an_rpm_host_reports_dnf_s_updates_with_advisories_and_applies_an_approved_proposal() {
    let root = rocky_root();
    let service = Service::start().await;
    let db = &service.app.state.db.orm;
    let agent = Agent::new(root.path(), CONFIG);
    let host_id = agent.enroll(&service).await;
    let first = agent.run(&["run", "--once"]).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);

    let mut packages: Vec<(String, String, Option<String>)> = host_packages::Entity::find()
        .filter(host_packages::Column::HostId.eq(uuid(&host_id)))
        .all(db)
        .await
        .expect("packages")
        .into_iter()
        .map(|p| (p.name, p.version, p.source_name))
        .collect();
    packages.sort();
    let own = |n: &str, v: &str| (n.to_owned(), v.to_owned(), Some(n.to_owned()));
    assert_eq!(
        packages,
        vec![
            own("fleet-epoch", "1:2.0-1"),
            own("fleet-hello", "1.0-1"),
            own("fleet-pulls", "1.0-1")
        ],
        "the root's rpm database, epochs included"
    );
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
    assert_eq!(updates.len(), 3, "{updates:#?}");
    let hello = update("fleet-hello");
    assert_eq!(hello.to_version, "1.1-1");
    assert_eq!(hello.ecosystem, "rpm");
    assert!(hello.security);
    let advisories: Value = serde_json::from_str(hello.advisories.as_str()).expect("JSON");
    assert_eq!(
        advisories,
        json!([{"external_id": "RLSA-2026:1001", "source": "rlsa", "severity": "high",
                "title": "Important: fleet-hello security update", "cves": ["CVE-2026-1001"]}])
    );
    let epoch = update("fleet-epoch");
    assert_eq!(
        (epoch.from_version.as_str(), epoch.to_version.as_str()),
        ("1:2.0-1", "1:2.1-1")
    );
    assert!(!epoch.security);
    let pulls: Value = serde_json::from_str(
        update("fleet-pulls")
            .impact
            .as_ref()
            .expect("impact")
            .as_str(),
    )
    .expect("JSON");
    assert_eq!(
        pulls["installs"],
        json!([{"name": "fleet-dep-new", "version": "1.0-1"}])
    );
    let row = hosts::Entity::find_by_id(uuid(&host_id))
        .one(db)
        .await
        .expect("read")
        .expect("the host");
    assert_eq!(row.distro.as_deref(), Some("rocky"));
    assert_eq!(row.distro_version.as_deref(), Some("9.4"));
    assert_eq!(row.os_family.as_deref(), Some("rhel"));

    let proposal = service.proposal().await;
    let id = proposal["id"].as_str().unwrap_or_default().to_owned();
    service.approve(&id).await;
    let second = agent.run(&["run", "--once"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    let installed = root.must(
        "rpm",
        &[
            "-q",
            "--qf",
            "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n",
            "fleet-hello",
            "fleet-epoch",
            "fleet-dep-new",
        ],
    );
    assert_eq!(
        installed,
        "fleet-hello 0:1.1-1\nfleet-epoch 1:2.1-1\nfleet-dep-new 0:1.0-1\n"
    );
    let jobs = service.jobs(&host_id).await;
    assert_eq!(jobs[0].status, "succeeded", "{:?}", jobs[0].log);
    assert!(
        jobs[0]
            .log
            .as_deref()
            .is_some_and(|l| l.contains("Complete!")),
        "{:?}",
        jobs[0].log
    );
    assert_eq!(service.proposal_status(&id).await, "applied");
    service.app.stop().await;
}
