//! Update intelligence (decisions §16): changelogs of Debian-family changes fetched once into
//! the shared cache from a loopback archive serving real changelog files of this machine's
//! packages (`tests/fixtures/changelogs/`), every kind of bad answer ending in a clear status;
//! the shipped known-exploited catalogue; the agent release channels.

use std::{collections::BTreeMap, sync::Arc};

use apalis::prelude::Data;
use domain::intel::jobs::FetchChangelog;
use domain::intel::jobs::ReadAgentManifest;
use domain::intel::jobs::RefreshKev;
use domain::roles::Role;
use entities::{changelogs, notification_events};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    As, TestApp,
    receiver::{Received, Receiver, Reply},
};

use crate::proposals::{Fleet, update};

const UBUNTU: &str = "/ubuntu/{component}/{prefix}/{source}/{source}_{version}/changelog";
const DEBIAN: &str = "/debian/{component}/{prefix}/{source}/{source}_{version}_changelog";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/fixtures/changelogs/{name}.changelog.Debian.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn gzipped(body: Vec<u8>) -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("Content-Encoding".into(), "gzip".into())],
        body,
    }
}

fn plain(text: Vec<u8>) -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("Content-Type".into(), "text/plain".into())],
        body: text,
    }
}

/// A loopback archive: `routes` maps a request path to its answer; anything else is 404.
async fn archive(routes: BTreeMap<String, Reply>) -> Receiver {
    let routes = Arc::new(routes);
    Receiver::with_handler(move |r: &Received| {
        routes
            .get(&r.path)
            .cloned()
            .unwrap_or_else(|| Reply::Status(404, "not here".into()))
    })
    .await
}

fn deb(name: &str, source: &str, from: &str, to: &str) -> Value {
    let mut u = update(name, from, to, json!([]));
    u["source_name"] = json!(source);
    u
}

fn change<'a>(detail: &'a Value, package: &str) -> &'a Value {
    detail["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["package"] == package))
        .unwrap_or_else(|| panic!("no change of {package}: {detail:#}"))
}

fn versions(changelog: &Value) -> Vec<String> {
    changelog["entries"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|e| e["version"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn policy(fleet: &Fleet<'_>) {
    fleet
        .policy(json!({
            "name": "everything", "scope": {"groups": []}, "required_approvals": 1,
            "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all",
        }))
        .await;
}

async fn only_proposal(app: &TestApp, fleet: &Fleet<'_>) -> Value {
    app.run_pending_jobs().await;
    let list = fleet.list("").await;
    assert_eq!(list.len(), 1, "{list:#?}");
    fleet
        .detail(list[0]["id"].as_str().unwrap_or_default())
        .await
}

#[tokio::test]
async fn debian_family_changes_show_their_changelogs_fetched_once_for_everyone() {
    let mut routes = BTreeMap::new();
    // openssl in Ubuntu's main; systemd only in universe (main answers 404 first).
    routes.insert(
        "/ubuntu/main/o/openssl/openssl_3.0.19-1~deb12u2/changelog".to_owned(),
        gzipped(fixture("openssl")),
    );
    routes.insert(
        "/ubuntu/universe/s/systemd/systemd_252.38-1~deb12u1/changelog".to_owned(),
        gzipped(fixture("systemd")),
    );
    // Debian: curl served decompressed, glibc (of libc6) compressed without saying so.
    let curl_text = {
        use std::io::Read;
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&fixture("curl")[..])
            .read_to_end(&mut text)
            .expect("gunzip the curl fixture");
        text
    };
    routes.insert(
        "/debian/main/c/curl/curl_7.88.1-10+deb12u15_changelog".to_owned(),
        plain(curl_text),
    );
    routes.insert(
        "/debian/main/g/glibc/glibc_2.36-9+deb12u14_changelog".to_owned(),
        plain(fixture("libc6")),
    );
    let archive = archive(routes).await;
    let app = TestApp::builder()
        .changelog_urls(&archive.url(UBUNTU), &archive.url(DEBIAN))
        .start()
        .await;
    let fleet = Fleet::new(&app).await;
    // Two Ubuntu hosts on the same openssl change: one fetch for both.
    let openssl = deb("openssl", "openssl", "3.0.18-1~deb12u2", "3.0.19-1~deb12u2");
    for name in ["web-1", "web-2"] {
        fleet
            .host(
                name,
                json!([
                    openssl,
                    deb("systemd", "systemd", "252.36-1~deb12u1", "252.38-1~deb12u1"),
                    deb("nosuch", "nosuch", "1.0-1", "1.0-2")
                ]),
                json!({}),
            )
            .await;
    }
    fleet
        .host_on(
            "db-1",
            ("debian", "12", "bookworm", "debian"),
            json!([
                deb("curl", "curl", "7.88.1-10+deb12u12", "7.88.1-10+deb12u15"),
                deb("libc6", "glibc", "2.36-9+deb12u13", "2.36-9+deb12u14"),
            ]),
        )
        .await;
    let mut rpm = update("bash", "5.1.8-6.el9", "5.1.8-9.el9", json!([]));
    rpm["ecosystem"] = json!("rpm");
    fleet
        .host_on(
            "rocky-1",
            ("rocky", "9.4", "blue onyx", "rhel"),
            json!([rpm]),
        )
        .await;
    policy(&fleet).await;
    let detail = only_proposal(&app, &fleet).await;

    // Two entries back to the newest: exactly those two, newest first.
    let c = &change(&detail, "openssl")["changelog"];
    assert_eq!(c["status"], "found", "{c:#}");
    assert!(
        c["url"].as_str().is_some_and(|u| u.contains("/openssl/")),
        "the address read: {c:#}"
    );
    for field in ["author", "text"] {
        assert!(
            c["entries"][0].get(field).is_none(),
            "interface.md's entry fields only: {c:#}"
        );
    }
    assert_eq!(versions(c), ["3.0.19-1~deb12u2", "3.0.19-1~deb12u1"]);
    assert_eq!(c["entries"][0]["urgency"], "medium");
    assert!(
        c["entries"][0]["maintainer"]
            .as_str()
            .is_some_and(|a| a.contains('@'))
    );
    assert!(c["entries"][0]["date"].as_str().is_some());
    assert!(
        c["entries"][0]["changes"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    assert!(c["entries"][0]["cves"].is_array());

    let c = &change(&detail, "systemd")["changelog"];
    assert_eq!(c["status"], "found", "found in the second component: {c:#}");
    assert_eq!(versions(c), ["252.38-1~deb12u1"], "from is excluded");

    let c = &change(&detail, "curl")["changelog"];
    assert_eq!(c["status"], "found", "{c:#}");
    assert_eq!(
        versions(c),
        [
            "7.88.1-10+deb12u15",
            "7.88.1-10+deb12u14",
            "7.88.1-10+deb12u13"
        ]
    );
    assert_eq!(
        c["entries"][0]["cves"],
        json!([
            "CVE-2025-10148",
            "CVE-2025-14524",
            "CVE-2025-14819",
            "CVE-2026-3783",
            "CVE-2026-3784",
            "CVE-2026-5773",
            "CVE-2026-7168"
        ])
    );
    assert_eq!(c["entries"][2]["cves"], json!(["CVE-2023-27534"]));
    assert_eq!(
        c["entries"][0]["maintainer"],
        "Samuel Henrique <samueloph@debian.org>"
    );
    assert_eq!(c["entries"][0]["date"], "2026-05-08T14:16:21+00:00");

    let c = &change(&detail, "libc6")["changelog"];
    assert_eq!(c["status"], "found", "source glibc: {c:#}");
    assert_eq!(versions(c), ["2.36-9+deb12u14"]);

    assert_eq!(change(&detail, "nosuch")["changelog"]["status"], "missing");
    assert_eq!(change(&detail, "nosuch")["changelog"]["entries"], json!([]));
    assert_eq!(change(&detail, "nosuch")["changelog"]["url"], Value::Null);
    assert!(
        change(&detail, "bash").get("changelog").is_none(),
        "an rpm change has no changelog: {detail:#}"
    );

    // One request per changelog and component tried, shared by both Ubuntu hosts.
    let paths: Vec<String> = archive.received().into_iter().map(|r| r.path).collect();
    let openssl_fetches = paths.iter().filter(|p| p.contains("/openssl/")).count();
    assert_eq!(openssl_fetches, 1, "{paths:#?}");
    assert_eq!(
        paths.iter().filter(|p| p.contains("/systemd/")).count(),
        2,
        "main (404), then universe: {paths:#?}"
    );
    assert_eq!(
        paths.iter().filter(|p| p.contains("/nosuch/")).count(),
        4,
        "every Ubuntu component, in order: {paths:#?}"
    );
    assert!(paths.iter().all(|p| !p.contains(':')), "epochs are dropped");
    assert_eq!(
        changelogs::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        5
    );
    // A second organization with the same change reads the cache: no new fetch.
    let before = archive.received().len();
    let other = Fleet::new_named(&app, "globex").await;
    other.host("web-9", json!([openssl]), json!({})).await;
    other
        .policy(json!({
            "name": "everything", "scope": {"groups": []}, "required_approvals": 1,
            "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all",
        }))
        .await;
    app.run_pending_jobs().await;
    let theirs = other.list("").await;
    let theirs = other
        .detail(theirs[0]["id"].as_str().unwrap_or_default())
        .await;
    assert_eq!(change(&theirs, "openssl")["changelog"]["status"], "found");
    assert_eq!(archive.received().len(), before);
    app.stop().await;
}

fn gzip(text: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut out = Vec::new();
    let mut encoder = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
    encoder.write_all(text).expect("gzip");
    encoder.finish().expect("gzip");
    out
}

async fn cached(app: &TestApp, source: &str) -> changelogs::Model {
    changelogs::Entity::find()
        .filter(changelogs::Column::Source.eq(source))
        .one(&app.state.db.orm)
        .await
        .expect("read the cache")
        .unwrap_or_else(|| panic!("no cache row for {source}"))
}

#[tokio::test]
async fn bad_archive_answers_end_in_a_clear_status_and_never_fail_the_evaluation() {
    let real = {
        use std::io::Read;
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&fixture("openssl")[..])
            .read_to_end(&mut text)
            .expect("gunzip");
        text
    };
    let truncated = {
        let whole = fixture("systemd");
        whole[..whole.len() / 2].to_vec()
    };
    let no_trailer =
        b"notrailer (1.1-1) unstable; urgency=low\n\n  * Fixes CVE-2026-0001.\n".to_vec();
    let mut latin1 = b"latin (2.0-1) unstable; urgency=high\n\n  * Caf\xe9 cr\xe8me, CVE-2026-0002.\n\n -- J\xf6rg M <j@example.org>  Mon, 02 Nov 2026 09:00:00 +0000\n".to_vec();
    latin1.extend_from_slice(b"\nlatin (1.0-1) unstable; urgency=low\n\n  * Initial.\n\n -- J M <j@example.org>  Sun, 01 Nov 2026 09:00:00 +0000\n");
    let path = |source: &str, version: &str| {
        format!(
            "/ubuntu/main/{}/{source}/{source}_{version}/changelog",
            &source[..1]
        )
    };
    let mut routes = BTreeMap::new();
    routes.insert(path("huge", "2.0-1"), Reply::Huge(50 * 1024 * 1024));
    routes.insert(path("truncated", "2.0-1"), gzipped(truncated));
    routes.insert(path("notrailer", "1.1-1"), plain(no_trailer));
    routes.insert(path("latin", "2.0-1"), gzipped(gzip(&latin1)));
    routes.insert(path("broken", "2.0-1"), Reply::Status(500, "down".into()));
    routes.insert(path("hangs", "2.0-1"), Reply::Hang);
    routes.insert(path("forbidden", "2.0-1"), Reply::Status(403, "no".into()));
    // A real changelog far past the 4 MiB read limit: only its first part is read.
    let mut long = real.clone();
    while long.len() < 6 * 1024 * 1024 {
        long.extend_from_slice(b"\n");
        long.extend_from_slice(&real);
    }
    routes.insert(path("long", "3.0.19-1~deb12u2"), plain(long));
    let archive = archive(routes).await;
    let app = TestApp::builder()
        .changelog_urls(&archive.url(UBUNTU), &archive.url(DEBIAN))
        .start()
        .await;
    let fleet = Fleet::new(&app).await;
    fleet
        .host(
            "web-1",
            json!([
                deb("huge", "huge", "1.0-1", "2.0-1"),
                deb("truncated", "truncated", "1.0-1", "2.0-1"),
                deb("notrailer", "notrailer", "1.0-1", "1.1-1"),
                deb("latin", "latin", "1.0-1", "2.0-1"),
                deb("broken", "broken", "1.0-1", "2.0-1"),
                deb("hangs", "hangs", "1.0-1", "2.0-1"),
                deb("forbidden", "forbidden", "1.0-1", "2.0-1"),
                deb("missing", "missing", "1.0-1", "2.0-1"),
                deb("long", "long", "3.0.18-1~deb12u2", "3.0.19-1~deb12u2"),
            ]),
            json!({}),
        )
        .await;
    policy(&fleet).await;
    let detail = only_proposal(&app, &fleet).await;
    assert_eq!(detail["status"], "open", "the evaluation stands");
    let status = |package: &str| change(&detail, package)["changelog"]["status"].clone();
    for unusable in ["huge", "truncated", "forbidden", "missing"] {
        assert_eq!(status(unusable), "missing", "{unusable}");
    }
    let c = &change(&detail, "notrailer")["changelog"];
    assert_eq!(
        c["status"], "found",
        "an entry without a trailer still reads: {c:#}"
    );
    assert_eq!(c["entries"][0]["date"], Value::Null);
    assert_eq!(c["entries"][0]["cves"], json!(["CVE-2026-0001"]));
    let c = &change(&detail, "latin")["changelog"];
    assert_eq!(c["status"], "found", "{c:#}");
    assert_eq!(versions(c), ["2.0-1"]);
    assert!(
        c["entries"][0]["changes"]
            .as_str()
            .is_some_and(|t| t.contains('\u{fffd}'))
    );
    assert_eq!(c["entries"][0]["cves"], json!(["CVE-2026-0002"]));
    let c = &change(&detail, "long")["changelog"];
    assert_eq!(c["status"], "found", "{c:#}");
    assert_eq!(versions(c), ["3.0.19-1~deb12u2", "3.0.19-1~deb12u1"]);

    // A 5xx and a server that hangs are retried, not given up at once.
    for source in ["broken", "hangs"] {
        assert_eq!(status(source), "pending", "{source}");
        let row = cached(&app, source).await;
        assert_eq!(row.attempts, 1, "{source}");
    }
    let retries = app.job_rows(Some("changelog.fetch")).await;
    assert!(
        retries
            .iter()
            .filter(|j| j.status == "Pending" || j.status == "Queued")
            .count()
            >= 2,
        "the retries wait their backoff: {retries:#?}"
    );
    // Six hours of failing later, the next attempt gives up: unavailable.
    app.clock.advance(chrono::Duration::hours(6));
    let deps = worker::Deps::new(
        app.state.config.clone(),
        app.state.db.clone(),
        app.state.clock.clone(),
    )
    .expect("worker deps");
    for source in ["broken", "hangs"] {
        worker::jobs::changelog_fetch::run(
            FetchChangelog {
                distro: "ubuntu".into(),
                source: source.into(),
                version: "2.0-1".into(),
                attempt: 1,
            },
            Data::new(deps.clone()),
        )
        .await
        .expect("the job itself succeeds");
        let row = cached(&app, source).await;
        assert_eq!(row.status, "missing", "{source}");
    }
    // A duplicate of an attempt already made does nothing.
    let before = archive.received().len();
    worker::jobs::changelog_fetch::run(
        FetchChangelog {
            distro: "ubuntu".into(),
            source: "broken".into(),
            version: "2.0-1".into(),
            attempt: 1,
        },
        Data::new(deps),
    )
    .await
    .expect("duplicate");
    assert_eq!(archive.received().len(), before);
    app.stop().await;
}

#[tokio::test]
async fn a_proposal_fixing_a_cve_of_the_shipped_catalogue_is_known_exploited_at_its_severity() {
    let feed = Receiver::with_handler(|_| {
        Reply::json(
            200,
            json!({"title": "test feed", "vulnerabilities": [
                {"cveID": "CVE-2026-4242", "dateAdded": "2026-11-01"},
                {"cveID": "not a cve", "dateAdded": "2026-11-01"},
                {"cveID": "CVE-2026-4343"},
                {"dateAdded": "2026-11-01"},
                7
            ]}),
        )
    })
    .await;
    let app = TestApp::builder()
        .kev_url(&feed.url("/kev.json"))
        .start()
        .await;
    let fleet = Fleet::new(&app).await;
    let heartbleed = json!([{"external_id": "USN-2165-1", "source": "usn", "severity": "medium",
        "title": "OpenSSL vulnerabilities", "url": "https://ubuntu.com/security/notices/USN-2165-1",
        "cves": ["CVE-2014-0160"]}]);
    let later = json!([{"external_id": "USN-9999-1", "source": "usn", "severity": "low",
        "title": "curl", "cves": ["CVE-2026-4242"]}]);
    fleet
        .host(
            "web-1",
            json!([
                update(
                    "openssl",
                    "1.0.1f-1ubuntu2",
                    "1.0.1f-1ubuntu2.2",
                    heartbleed
                ),
                update("curl", "8.5.0-2ubuntu10.5", "8.5.0-2ubuntu10.6", later),
            ]),
            json!({}),
        )
        .await;
    policy(&fleet).await;
    let before = only_proposal(&app, &fleet).await;
    assert_eq!(before["known_exploited"], false, "no catalogue loaded yet");
    assert_eq!(before["max_severity"], "medium");

    app.state
        .queue
        .push(RefreshKev {
            day: "2026-11-02".into(),
        })
        .await
        .expect("queue");
    let detail = only_proposal(&app, &fleet).await;
    assert_eq!(detail["known_exploited"], true);
    assert_eq!(detail["max_severity"], "medium", "never raised");
    assert_eq!(
        change(&detail, "openssl")["advisories"][0]["known_exploited"],
        true
    );
    assert_eq!(
        change(&detail, "curl")["advisories"][0]["known_exploited"],
        true,
        "the feed's good record is added, its bad ones skipped"
    );
    assert!(
        entities::known_exploited::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count")
            > 1000,
        "the shipped snapshot is loaded"
    );
    let announced = || async {
        notification_events::Entity::find()
            .filter(notification_events::Column::Kind.eq("advisory.known_exploited"))
            .all(&app.state.db.orm)
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.subject.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let mut first = announced().await;
    first.sort();
    assert_eq!(first, ["CVE-2014-0160", "CVE-2026-4242"]);
    // The next day's refresh adds nothing and announces nothing again.
    app.state
        .queue
        .push(RefreshKev {
            day: "2026-11-03".into(),
        })
        .await
        .expect("queue");
    app.run_pending_jobs().await;
    assert_eq!(announced().await.len(), 2, "once per organization and CVE");
    app.stop().await;
}

#[tokio::test]
async fn a_feed_that_is_not_json_leaves_the_catalogue_as_it_was() {
    let feed =
        Receiver::with_handler(|_| Reply::Status(200, "<html>maintenance</html>".into())).await;
    let app = TestApp::builder()
        .kev_url(&feed.url("/kev.json"))
        .start()
        .await;
    app.state
        .queue
        .push(RefreshKev {
            day: "2026-11-02".into(),
        })
        .await
        .expect("queue");
    app.run_pending_jobs().await;
    assert_eq!(feed.received().len(), 1);
    let count = entities::known_exploited::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count");
    let shipped = domain::intel::kev::parse(domain::intel::kev::SNAPSHOT)
        .expect("snapshot")
        .len() as u64;
    assert_eq!(count, shipped, "the snapshot alone");
    let failed = app
        .job_rows(Some("kev.refresh"))
        .await
        .into_iter()
        .filter(|j| j.status != "Done")
        .count();
    assert_eq!(failed, 0, "a bad feed is a warning, not a failed job");
    app.stop().await;
}

#[tokio::test]
async fn agent_releases_answer_the_manifest_stable_first_and_keep_it_through_bad_ones() {
    let manifest = Receiver::start().await;
    let app = TestApp::builder()
        .agent_manifest_url(&manifest.url("/manifest.json"))
        .start()
        .await;
    let fleet = Fleet::new(&app).await;
    let host = fleet.host("web-1", json!([]), json!({})).await;
    let releases = || async {
        app.call(
            As::Session(&fleet.owner),
            Method::GET,
            "/v1/orgs/acme/agent-releases",
            None,
        )
        .await
    };
    let empty = releases().await;
    assert_eq!(empty.status.as_u16(), 200, "{}", empty.body);
    assert_eq!(empty.json(), json!([]), "empty until a manifest is read");
    let host_path = format!(
        "/v1/orgs/acme/hosts/{}",
        host.host_id.clone().unwrap_or_default()
    );
    let host_detail = || async {
        app.call(As::Session(&fleet.owner), Method::GET, &host_path, None)
            .await
            .json()
    };
    assert_eq!(host_detail().await["agent_update_available"], false);

    let read = |hour: &'static str| {
        let app = &app;
        async move {
            app.state
                .queue
                .push(ReadAgentManifest { hour: hour.into() })
                .await
                .expect("queue");
            app.run_pending_jobs().await;
        }
    };
    manifest.queue([Reply::json(
        200,
        json!({"channels": [
            {"channel": "beta", "version": "1.6.0-rc.1", "released_at": "2026-11-01T12:00:00Z"},
            {"channel": "stable", "version": "1.5.0"}
        ]}),
    )]);
    read("2026-11-02T09:00:00+00:00").await;
    let listed = releases().await.json();
    assert_eq!(listed[0]["channel"], "stable");
    assert_eq!(listed[0]["version"], "1.5.0");
    assert!(listed[0].get("released_at").is_none());
    assert_eq!(listed[1]["channel"], "beta");
    assert_eq!(listed[1]["released_at"], "2026-11-01T12:00:00+00:00");
    assert!(listed[0]["seen_at"].as_str().is_some());
    // The test agent runs 1.4.0 on stable.
    assert_eq!(host_detail().await["agent_update_available"], true);

    // Not JSON, then an unknown channel: warnings; what was read is kept.
    manifest.queue([
        Reply::Status(200, "<html>oops</html>".into()),
        Reply::json(
            200,
            json!({"channels": [{"channel": "nightly", "version": "9.0.0"}]}),
        ),
    ]);
    read("2026-11-02T10:00:00+00:00").await;
    read("2026-11-02T11:00:00+00:00").await;
    assert_eq!(manifest.received().len(), 3);
    assert_eq!(releases().await.json(), listed);

    // Every error cause: no session, not permitted (viewer), another organization.
    let anonymous = app
        .call(
            As::Nobody,
            Method::GET,
            "/v1/orgs/acme/agent-releases",
            None,
        )
        .await;
    anonymous.assert_problem(401, "unauthenticated");
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    app.call(
        As::Session(&viewer),
        Method::GET,
        "/v1/orgs/acme/agent-releases",
        None,
    )
    .await
    .assert_problem(403, "forbidden");
    let stranger = app.sign_up("owner@globex.test", "globex").await;
    app.call(
        As::Session(&stranger),
        Method::GET,
        "/v1/orgs/acme/agent-releases",
        None,
    )
    .await
    .assert_problem(404, "not-found");
    app.stop().await;
}

#[tokio::test]
async fn a_pending_changelog_whose_fetch_was_lost_is_fetched_again_by_the_housekeeping() {
    let mut routes = BTreeMap::new();
    routes.insert(
        "/ubuntu/main/o/openssl/openssl_3.0.19-1~deb12u2/changelog".to_owned(),
        gzipped(fixture("openssl")),
    );
    let archive = archive(routes).await;
    let app = TestApp::builder()
        .without_worker()
        .changelog_urls(&archive.url(UBUNTU), &archive.url(DEBIAN))
        .start()
        .await;
    // A row left pending with its job gone (as when the database failed the job for good).
    let wanted = [(
        "ubuntu".to_owned(),
        "openssl".to_owned(),
        "3.0.19-1~deb12u2".to_owned(),
    )];
    domain::intel::cache::queue_missing(&app.state.db, wanted.into(), app.clock_now())
        .await
        .expect("queue the fetch");
    app.fail_jobs_for_good("changelog.fetch").await;
    assert_eq!(cached(&app, "openssl").await.status, "pending");

    let housekeeping = |hour: String| platform::jobs::Housekeeping { hour };
    // Within the hour it is not taken for lost: a fetch may still be on its way.
    app.state
        .queue
        .push(housekeeping(app.clock_now().to_rfc3339()))
        .await
        .expect("queue housekeeping");
    app.run_pending_jobs().await;
    assert_eq!(cached(&app, "openssl").await.status, "pending");

    app.clock.advance(chrono::Duration::minutes(61));
    app.state
        .queue
        .push(housekeeping(app.clock_now().to_rfc3339()))
        .await
        .expect("queue housekeeping");
    app.run_pending_jobs().await;
    let row = cached(&app, "openssl").await;
    assert_eq!(row.status, "found", "{row:?}");
    assert_eq!(archive.received().len(), 1, "fetched once");
    app.stop().await;
}
