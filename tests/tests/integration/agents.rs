//! The agent protocol: enrolment, signed check-ins, the token's use charged on first check-in
//! (never past `max_uses`), billing days, and the refusals of hostile requests.

use std::io::Write;

use entities::{enrollment_tokens, host_days};
use reqwest::Method;
use sea_orm::{EntityTrait, PaginatorTrait};
use serde_json::json;
use tests::{
    As, Session, TestApp,
    agent::{Tamper, TestAgent},
};

async fn token(app: &TestApp, owner: &Session, body: serde_json::Value) -> (String, String) {
    let created = app
        .call(
            As::Session(owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(body),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let json = created.json();
    (
        json["token"].as_str().unwrap_or_default().to_owned(),
        json["id"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn an_agent_enrols_checks_in_and_is_charged_once_on_first_check_in() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let (value, id) = token(
        &app,
        &owner,
        json!({"name": "fleet", "labels": {"env": "prod"}, "max_uses": 5}),
    )
    .await;
    let mut agent = TestAgent::new("web-1");
    let enrolled = agent.enroll(&app, &value).await;
    assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
    let body = enrolled.json();
    assert!(
        body["certificate"]
            .as_str()
            .is_some_and(|c| c.contains("BEGIN CERTIFICATE"))
    );
    assert!(
        body["ca_certificate"]
            .as_str()
            .is_some_and(|c| c.contains("BEGIN CERTIFICATE"))
    );
    assert_eq!(body["check_in_interval_s"], 300);

    let token_path = format!("/v1/orgs/acme/enrollment-tokens/{id}");
    let before = app
        .call(As::Session(&owner), Method::GET, &token_path, None)
        .await
        .json();
    assert_eq!(before["uses"], 0, "not charged at enrolment");

    let now = app.clock_now();
    let first = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &agent.check_in_body("d1"),
            now,
            Tamper::None,
        )
        .await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.body);
    assert_eq!(
        first.json()["send_inventory"],
        true,
        "no inventory stored yet"
    );
    let second = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &agent.check_in_body("d1"),
            now,
            Tamper::Gzip,
        )
        .await;
    assert_eq!(second.status.as_u16(), 200, "{}", second.body);
    let after = app
        .call(As::Session(&owner), Method::GET, &token_path, None)
        .await
        .json();
    assert_eq!(after["uses"], 1, "charged once, on the first check-in");

    let host_id = agent.host_id.clone().unwrap_or_default();
    let host = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/hosts/{host_id}"),
            None,
        )
        .await
        .json();
    assert_eq!(host["status"], "online");
    assert_eq!(
        host["labels"],
        json!({"env": "prod"}),
        "labels from the token"
    );
    assert_eq!(
        host["agent_install"],
        json!({"method": "apt", "channel": "stable"})
    );
    assert!(host["snapshots"].is_null(), "an agent that does not say");
    let days = host_days::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(days, 1, "one billable day, however many check-ins");

    // The same machine enrolling again while its host is alive is refused (decisions §6).
    let mut again = TestAgent::new("web-1-renamed");
    again.machine_id = agent.machine_id.clone();
    again
        .enroll(&app, &value)
        .await
        .assert_problem(409, "conflict");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_hosts_racing_for_a_token_of_three_uses_admit_exactly_three() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let (value, id) = token(&app, &owner, json!({"name": "three", "max_uses": 3})).await;
    let now = app.clock_now();
    let app = std::sync::Arc::new(app);
    let mut racers = Vec::new();
    for i in 0..10 {
        let app = app.clone();
        let value = value.clone();
        racers.push(tokio::spawn(async move {
            let mut agent = TestAgent::new(&format!("racer-{i}"));
            let enrolled = agent.enroll(&app, &value).await;
            if enrolled.status.as_u16() == 403 {
                // Used up before this host even enrolled: refused at the door.
                return 403;
            }
            assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
            agent
                .post(
                    &app,
                    "/v1/agent/check-in",
                    &agent.check_in_body("d"),
                    now,
                    Tamper::None,
                )
                .await
                .status
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for racer in racers {
        statuses.push(racer.await.expect("racer"));
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 403).count(),
        7,
        "{statuses:?}"
    );
    let record = enrollment_tokens::Entity::find()
        .all(&app.state.db.orm)
        .await
        .expect("tokens");
    assert_eq!(record[0].uses, 3);
    let shown = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/enrollment-tokens/{id}"),
            None,
        )
        .await
        .json();
    assert_eq!(shown["uses"], 3);
    assert_eq!(shown["usable"], false, "used up");
    let online = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/hosts?status=online",
            None,
        )
        .await
        .json();
    assert_eq!(online["items"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn hostile_agent_requests_are_refused_and_store_nothing() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let (value, _) = token(&app, &owner, json!({"name": "fleet"})).await;
    let mut agent = TestAgent::new("web-1");
    assert_eq!(agent.enroll(&app, &value).await.status.as_u16(), 201);
    let mut other = TestAgent::new("web-2");
    assert_eq!(other.enroll(&app, &value).await.status.as_u16(), 201);
    let now = app.clock_now();
    let body = agent.check_in_body("d1");

    // Unusable or unknown enrollment tokens: 403 without saying why.
    let mut stranger = TestAgent::new("x");
    stranger
        .enroll(&app, "enr_nope")
        .await
        .assert_problem(403, "forbidden");
    stranger
        .enroll(&app, &format!("enr_{}", "A".repeat(43)))
        .await
        .assert_problem(403, "forbidden");
    // A malformed CSR is a 400.
    let bad_csr = app
        .post_json("/v1/agent/enroll", json!({"token": value, "csr": "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", "facts": stranger.facts()}))
        .await;
    bad_csr.assert_problem(400, "invalid-request");

    // Body changed after signing; too old; replayed nonce.
    agent
        .post(&app, "/v1/agent/check-in", &body, now, Tamper::Body)
        .await
        .assert_problem(401, "unauthenticated");
    agent
        .post(&app, "/v1/agent/check-in", &body, now, Tamper::Stale(301))
        .await
        .assert_problem(401, "unauthenticated");
    let ok = agent
        .post_with_nonce(&app, "/v1/agent/check-in", &body, now, Tamper::None, "n-1")
        .await;
    assert_eq!(ok.status.as_u16(), 200, "{}", ok.body);
    agent
        .post_with_nonce(&app, "/v1/agent/check-in", &body, now, Tamper::None, "n-1")
        .await
        .assert_problem(401, "unauthenticated");

    // Signed by another key under this host's keyid.
    let mut impostor = TestAgent::new("web-1");
    impostor.key_id = agent.key_id.clone();
    impostor.machine_id = agent.machine_id.clone();
    impostor
        .post(&app, "/v1/agent/check-in", &body, now, Tamper::None)
        .await
        .assert_problem(401, "unauthenticated");

    // Claiming another host's machine_id.
    let mut claim = other.check_in_body("d2");
    claim["facts"]["machine_id"] = json!(agent.machine_id);
    other
        .post(&app, "/v1/agent/check-in", &claim, now, Tamper::None)
        .await
        .assert_problem(403, "forbidden");

    // Malformed package lists and wrongly typed fields.
    let mut malformed = agent.check_in_body("d3");
    malformed["packages"] = json!([{"name": "openssl"}]);
    agent
        .post(&app, "/v1/agent/check-in", &malformed, now, Tamper::None)
        .await
        .assert_problem(400, "invalid-request");
    let mut typed = agent.check_in_body("d3");
    typed["facts"]["hostname"] = json!(5);
    agent
        .post(&app, "/v1/agent/check-in", &typed, now, Tamper::None)
        .await
        .assert_problem(400, "invalid-request");

    // A gzip bomb: 64 MiB of zeros in well under 1 MiB, refused at the 16 MiB bound.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![b' '; 1024 * 1024];
    for _ in 0..64 {
        encoder.write_all(&zeros).expect("gzip");
    }
    let bomb = encoder.finish().expect("gzip");
    let (input, signature, digest) = agent.sign(
        &tests::agent::test_authority(),
        "POST",
        "/v1/agent/check-in",
        &bomb,
        now.timestamp(),
        agent.key_id.as_deref().unwrap_or_default(),
        "bomb",
    );
    let response = app
        .http
        .post(app.url("/v1/agent/check-in"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .header("content-digest", digest)
        .header("signature-input", input)
        .header("signature", signature)
        .body(bomb)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 413);

    // A decommissioned host's certificate stops working at once.
    let host_id = agent.host_id.clone().unwrap_or_default();
    let decommissioned = app
        .call(
            As::Session(&owner),
            Method::POST,
            &format!("/v1/orgs/acme/hosts/{host_id}/decommission"),
            None,
        )
        .await;
    assert_eq!(
        decommissioned.status.as_u16(),
        200,
        "{}",
        decommissioned.body
    );
    agent
        .post(&app, "/v1/agent/check-in", &body, now, Tamper::None)
        .await
        .assert_problem(401, "unauthenticated");
    app.stop().await;
}

#[tokio::test]
async fn an_inventory_is_evaluated_into_counts_and_a_silent_host_goes_offline() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let (value, _) = token(&app, &owner, json!({"name": "fleet"})).await;
    let mut agent = TestAgent::new("web-1");
    assert_eq!(agent.enroll(&app, &value).await.status.as_u16(), 201);
    let now = app.clock_now();
    let mut body = agent.check_in_body("inv-1");
    body["reboot_required"] = json!(true);
    body["packages"] = json!([
        {"name": "openssl", "version": "3.0.13-0ubuntu3.1", "arch": "amd64", "source_name": "openssl"},
        {"name": "curl", "version": "8.5.0-2ubuntu10.1", "arch": "amd64"}
    ]);
    body["updates"] = json!([
        {"name": "openssl", "arch": "amd64", "from_version": "3.0.13-0ubuntu3.1", "to_version": "3.0.13-0ubuntu3.4",
         "ecosystem": "deb", "security": true, "requires_reboot": false,
         "advisories": [{"external_id": "USN-7000-1", "source": "usn", "severity": "high", "cves": ["CVE-2024-1"]}]},
        {"name": "linux-image-generic", "arch": "amd64", "from_version": "6.8.0-40", "to_version": "6.8.0-45",
         "ecosystem": "deb", "security": false, "requires_reboot": true}
    ]);
    let answer = agent
        .post(&app, "/v1/agent/check-in", &body, now, Tamper::None)
        .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(
        answer.json()["send_inventory"],
        false,
        "the inventory is stored"
    );
    let mut second = agent.check_in_body("inv-2");
    second["reboot_required"] = json!(true);
    let again = agent
        .post(&app, "/v1/agent/check-in", &second, now, Tamper::None)
        .await;
    assert_eq!(
        again.json()["send_inventory"],
        true,
        "a changed digest asks for the inventory"
    );

    let host_id = agent.host_id.clone().unwrap_or_default();
    let path = format!("/v1/orgs/acme/hosts/{host_id}");
    app.run_pending_jobs().await;
    let settled = {
        let host = app
            .call(As::Session(&owner), Method::GET, &path, None)
            .await
            .json();
        host["updates"] == json!({"total": 2, "security": 1, "requiring_reboot": 1})
    };
    assert!(settled, "the queued work had its effect");
    let host = app
        .call(As::Session(&owner), Method::GET, &path, None)
        .await
        .json();
    assert_eq!(host["advisory_coverage"], "covered");
    assert_eq!(host["reboot_required"], true);
    let filtered = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/hosts?has_security_updates=true&reboot_required=true",
            None,
        )
        .await
        .json();
    assert_eq!(filtered["items"].as_array().map(Vec::len), Some(1));

    // Silent for more than three intervals: the upkeep job marks it offline.
    app.clock.advance(chrono::Duration::minutes(16));
    app.state
        .queue
        .push(domain::fleet::jobs::FleetUpkeep {
            minute: "test".into(),
        })
        .await
        .expect("queued");
    app.run_pending_jobs().await;
    let settled = {
        let host = app
            .call(As::Session(&owner), Method::GET, &path, None)
            .await
            .json();
        host["status"] == "offline"
    };
    assert!(settled, "the queued work had its effect");
    let events = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("{path}/events"),
            None,
        )
        .await
        .json();
    let kinds: Vec<&str> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"went_offline") && kinds.contains(&"enrolled"),
        "{kinds:?}"
    );

    // Checking in again after the gap is an event of its own.
    let back = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &agent.check_in_body("inv-2"),
            app.clock_now(),
            Tamper::None,
        )
        .await;
    assert_eq!(back.status.as_u16(), 200);
    let events = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("{path}/events"),
            None,
        )
        .await
        .json();
    assert_eq!(events["items"][0]["kind"], "checked_in_after_gap");

    // The day's rollup counts the host once.
    let day = app.clock_now().date_naive();
    app.state
        .queue
        .push(domain::billing::jobs::RollupUsage { day })
        .await
        .expect("queued");
    app.run_pending_jobs().await;
    let settled = {
        entities::usage_days::Entity::find()
            .all(&app.state.db.orm)
            .await
            .is_ok_and(|rows| rows.len() == 1 && rows[0].active_hosts == 1 && rows[0].day == day)
    };
    assert!(settled, "the queued work had its effect");
    app.stop().await;
}

#[tokio::test]
async fn a_changed_inventory_is_stored_exactly_as_reported() {
    use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let (value, _) = token(&app, &owner, json!({"name": "fleet"})).await;
    let mut agent = TestAgent::new("web-1");
    assert_eq!(agent.enroll(&app, &value).await.status.as_u16(), 201);
    let send = |digest: &str, packages: serde_json::Value, updates: serde_json::Value| {
        let mut body = agent.check_in_body(digest);
        body["packages"] = packages;
        body["updates"] = updates;
        body
    };
    let update = |name: &str, to: &str| json!({"name": name, "arch": "amd64", "from_version": "1", "to_version": to, "ecosystem": "deb"});
    let first = send(
        "one",
        json!([{"name": "a", "version": "1", "arch": "amd64"}, {"name": "b", "version": "1", "arch": "amd64"},
               {"name": "a", "version": "1", "arch": "i386"}]),
        json!([update("a", "2"), update("b", "2")]),
    );
    let second = send(
        "two",
        json!([{"name": "a", "version": "2", "arch": "amd64"}, {"name": "c", "version": "1", "arch": "amd64"},
               {"name": "a", "version": "1", "arch": "i386"}]),
        json!([update("b", "3"), update("c", "2")]),
    );
    for body in [first, second] {
        let answer = agent
            .post(
                &app,
                "/v1/agent/check-in",
                &body,
                app.clock_now(),
                Tamper::None,
            )
            .await;
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    }
    let host_id = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    let packages: Vec<(String, String, String)> = entities::host_packages::Entity::find()
        .filter(entities::host_packages::Column::HostId.eq(host_id))
        .order_by_asc(entities::host_packages::Column::Name)
        .order_by_asc(entities::host_packages::Column::Arch)
        .all(&app.state.db.orm)
        .await
        .expect("packages")
        .into_iter()
        .map(|p| (p.name, p.arch, p.version))
        .collect();
    let own = |n: &str, a: &str, v: &str| (n.to_owned(), a.to_owned(), v.to_owned());
    assert_eq!(
        packages,
        vec![
            own("a", "amd64", "2"),
            own("a", "i386", "1"),
            own("c", "amd64", "1")
        ]
    );
    let updates: Vec<(String, String)> = entities::host_updates::Entity::find()
        .filter(entities::host_updates::Column::HostId.eq(host_id))
        .order_by_asc(entities::host_updates::Column::Name)
        .all(&app.state.db.orm)
        .await
        .expect("updates")
        .into_iter()
        .map(|u| (u.name, u.to_version))
        .collect();
    assert_eq!(
        updates,
        vec![
            ("b".to_owned(), "3".to_owned()),
            ("c".to_owned(), "2".to_owned())
        ]
    );
    app.stop().await;
}
