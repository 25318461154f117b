//! Who may hold a host's key (decisions §6): enrolling again never takes over a host that is
//! alive, a renewed key replaces the old one once it is used, decommissioning revokes every
//! key, signed calls are limited per host, and what agents report is bounded before people see
//! it.

use domain::roles::Role;
use entities::host_keys;
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    As, Session, TestApp,
    agent::{Tamper, TestAgent},
};

async fn enrollment_token(app: &TestApp, owner: &Session) -> String {
    let created = app
        .call(
            As::Session(owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "fleet"})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    created.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// An organization `acme` with an owner and an enrollment token.
async fn fleet() -> (TestApp, Session, String) {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let token = enrollment_token(&app, &owner).await;
    (app, owner, token)
}

async fn enrolled(app: &TestApp, token: &str, hostname: &str) -> TestAgent {
    let mut agent = TestAgent::new(hostname);
    let answer = agent.enroll(app, token).await;
    assert_eq!(answer.status.as_u16(), 201, "{}", answer.body);
    agent
}

/// The same machine, with a key of its own (what a second enrolment of it sends).
fn impostor_of(agent: &TestAgent) -> TestAgent {
    let mut other = TestAgent::new("impostor");
    other.machine_id = agent.machine_id.clone();
    other.hostname = agent.hostname.clone();
    other
}

async fn keys_of(app: &TestApp, agent: &TestAgent) -> Vec<host_keys::Model> {
    let host_id = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    host_keys::Entity::find()
        .filter(host_keys::Column::HostId.eq(host_id))
        .all(&app.state.db.orm)
        .await
        .expect("host keys")
}

#[tokio::test]
async fn enrolling_again_with_the_machine_id_of_a_host_that_checked_in_is_a_conflict() {
    let (app, owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "db-1").await;
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);

    // Anyone with a provisioning token and the (visible) machine id.
    let mut impostor = impostor_of(&agent);
    let refused = impostor.enroll(&app, &token).await;
    let problem = refused.assert_problem(409, "conflict");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("decommission")),
        "the detail says what to do: {problem}"
    );
    assert!(impostor.key_id.is_none());

    // The host stays bound to its own agent, with no other key certified.
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    assert_eq!(keys_of(&app, &agent).await.len(), 1);
    let host = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!(
                "/v1/orgs/acme/hosts/{}",
                agent.host_id.as_deref().unwrap_or_default()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(host["hostname"], "db-1");
    assert_eq!(host["status"], "online");
    app.stop().await;
}

#[tokio::test]
async fn enrolling_again_while_the_host_is_pending_rebinds_it_and_revokes_the_earlier_key() {
    let (app, _owner, token) = fleet().await;
    let first = enrolled(&app, &token, "web-1").await;
    // Never checked in: the machine is re-imaged and enrols again.
    let mut second = impostor_of(&first);
    let answer = second.enroll(&app, &token).await;
    assert_eq!(answer.status.as_u16(), 201, "{}", answer.body);
    assert_eq!(second.host_id, first.host_id, "the same host, re-bound");
    assert_ne!(second.key_id, first.key_id);

    first
        .check_in(&app, "d1")
        .await
        .assert_problem(401, "unauthenticated");
    assert_eq!(second.check_in(&app, "d1").await.status.as_u16(), 200);
    let keys = keys_of(&app, &first).await;
    assert_eq!(keys.len(), 2);
    assert!(
        keys.iter()
            .all(|k| (k.key_id == second.key_id.clone().unwrap_or_default())
                == k.revoked_at.is_none()),
        "only the new key is live"
    );
    app.stop().await;
}

#[tokio::test]
async fn decommissioning_revokes_every_key_and_enrolling_again_binds_only_the_new_one() {
    let (app, owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    // The owner's session will not last two months; a token will.
    let operator = app.api_token(&owner, "acme", Role::Operator).await;
    // A renewal whose new key was never used: pending, and revoked with the rest.
    app.clock.advance(chrono::Duration::days(61));
    let mut next = agent.rekeyed();
    next.adopt(&agent.renew(&app, &next.csr()).await);

    let host_id = agent.host_id.clone().unwrap_or_default();
    let decommissioned = app
        .call(
            As::Bearer(&operator),
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
    let keys = keys_of(&app, &agent).await;
    assert_eq!(keys.len(), 2);
    assert!(
        keys.iter().all(|k| k.revoked_at.is_some()),
        "every key revoked at once: {keys:?}"
    );

    // The machine comes back under a new agent: only its key works.
    let mut returned = impostor_of(&agent);
    let answer = returned.enroll(&app, &token).await;
    assert_eq!(answer.status.as_u16(), 201, "{}", answer.body);
    assert_eq!(returned.host_id.as_deref(), Some(host_id.as_str()));
    for old in [&agent, &next] {
        old.check_in(&app, "d1")
            .await
            .assert_problem(401, "unauthenticated");
    }
    assert_eq!(returned.check_in(&app, "d1").await.status.as_u16(), 200);
    app.stop().await;
}

#[tokio::test]
async fn the_previous_key_works_until_the_renewed_key_is_used_and_never_after() {
    let (app, _owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    app.clock.advance(chrono::Duration::days(61));

    let mut next = agent.rekeyed();
    let renewed = agent.renew(&app, &next.csr()).await;
    next.adopt(&renewed);
    assert_ne!(next.key_id, agent.key_id);
    // The agent may not have received the answer: its old key still works.
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);

    // The new key is used: from now on the old one is refused, renewal included.
    assert_eq!(next.check_in(&app, "d1").await.status.as_u16(), 200);
    agent
        .check_in(&app, "d1")
        .await
        .assert_problem(401, "unauthenticated");
    let other = agent.rekeyed();
    agent
        .renew(&app, &other.csr())
        .await
        .assert_problem(401, "unauthenticated");
    assert_eq!(next.check_in(&app, "d1").await.status.as_u16(), 200);
    let keys = keys_of(&app, &agent).await;
    assert_eq!(keys.len(), 2, "the refused renewal certified nothing");
    app.stop().await;
}

#[tokio::test]
async fn a_renewal_retried_with_the_same_csr_is_answered_with_the_same_certificate() {
    let (app, _owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    app.clock.advance(chrono::Duration::days(61));
    let next = agent.rekeyed();
    let csr = next.csr();
    let first = agent.renew(&app, &csr).await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.body);
    // The answer was lost; the agent retries a minute later with the same request.
    app.clock.advance(chrono::Duration::minutes(1));
    let again = agent.renew(&app, &csr).await;
    assert_eq!(again.status.as_u16(), 200, "{}", again.body);
    let (first, again) = (first.json(), again.json());
    for field in ["key_id", "certificate", "expires_at"] {
        assert_eq!(first[field], again[field], "{field}");
    }
    assert_eq!(keys_of(&app, &agent).await.len(), 2, "one new key, not two");
    app.stop().await;
}

/// A signed call that passes authentication and then finds nothing: it costs the host's
/// budget and nothing else.
async fn report_unknown_job(app: &TestApp, agent: &TestAgent, tamper: Tamper) -> u16 {
    let job = platform::ids::HostJobId::new().to_string();
    agent
        .post(
            app,
            &format!("/v1/agent/jobs/{job}/result"),
            &json!({"status": "succeeded", "finished_at": app.clock_now()}),
            app.clock_now(),
            tamper,
        )
        .await
        .status
        .as_u16()
}

#[tokio::test]
async fn signed_calls_are_limited_per_host_after_the_signature_is_checked() {
    let (app, _owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    let neighbour = enrolled(&app, &token, "web-2").await;

    // Calls signed by another key under the host's keyid cost the host nothing.
    let mut forger = TestAgent::new("forger");
    forger.key_id = agent.key_id.clone();
    for _ in 0..70 {
        assert_eq!(report_unknown_job(&app, &forger, Tamper::None).await, 401);
    }
    // A burst of 60 signed calls, then refused until time passes.
    for i in 0..60 {
        assert_eq!(
            report_unknown_job(&app, &agent, Tamper::None).await,
            404,
            "call {i}"
        );
    }
    let job = platform::ids::HostJobId::new().to_string();
    let limited = agent
        .post(
            &app,
            &format!("/v1/agent/jobs/{job}/result"),
            &json!({"status": "succeeded", "finished_at": app.clock_now()}),
            app.clock_now(),
            Tamper::None,
        )
        .await;
    limited.assert_problem(429, "rate-limited");
    assert!(
        limited
            .header("retry-after")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "Retry-After in whole seconds: {:?}",
        limited.headers
    );
    // Check-ins share the budget with every other signed call.
    agent
        .check_in(&app, "d1")
        .await
        .assert_problem(429, "rate-limited");
    // Another host has its own budget.
    assert_eq!(neighbour.check_in(&app, "d1").await.status.as_u16(), 200);
    // One call a second comes back.
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(report_unknown_job(&app, &agent, Tamper::None).await, 404);
    app.stop().await;
}

fn advisory(url: &str) -> Value {
    json!({"external_id": "USN-7000-1", "source": "usn", "severity": "high",
           "title": "OpenSSL vulnerabilities", "url": url, "cves": ["CVE-2024-1"]})
}

fn with_update(agent: &TestAgent, advisory: Value) -> Value {
    let mut body = agent.check_in_body("inv");
    body["packages"] =
        json!([{"name": "openssl", "version": "3.0.13-0ubuntu3.1", "arch": "amd64"}]);
    body["updates"] = json!([{"name": "openssl", "arch": "amd64", "from_version": "3.0.13-0ubuntu3.1",
        "to_version": "3.0.13-0ubuntu3.4", "ecosystem": "deb", "security": true,
        "advisories": [advisory]}]);
    body
}

#[tokio::test]
async fn agent_supplied_strings_are_bounded_and_advisory_links_are_https() {
    let (app, _owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    let send = |body: Value| {
        let agent = agent.clone();
        let app = &app;
        async move {
            agent
                .post(
                    app,
                    "/v1/agent/check-in",
                    &body,
                    app.clock_now(),
                    Tamper::None,
                )
                .await
        }
    };
    let refused = |answer: tests::TestResponse, field: &str| {
        let problem = answer.assert_problem(400, "invalid-request");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(field)),
            "the detail names {field}: {problem}"
        );
    };

    for url in [
        "javascript:alert(document.cookie)",
        "http://ubuntu.com/security/notices/USN-7000-1",
        "data:text/html,<script>alert(1)</script>",
        "https://",
    ] {
        refused(
            send(with_update(&agent, advisory(url))).await,
            "updates[0].advisories[0].url",
        );
    }
    let long_url = advisory(&format!("https://example.com/{}", "a".repeat(2048)));
    refused(
        send(with_update(&agent, long_url)).await,
        "updates[0].advisories[0].url",
    );
    let mut long_title = advisory("https://ubuntu.com/security/notices/USN-7000-1");
    long_title["title"] = json!("t".repeat(1001));
    refused(
        send(with_update(&agent, long_title)).await,
        "updates[0].advisories[0].title",
    );
    let mut long_cve = advisory("https://ubuntu.com/security/notices/USN-7000-1");
    long_cve["cves"] = json!([format!("CVE-{}", "9".repeat(252))]);
    refused(
        send(with_update(&agent, long_cve)).await,
        "updates[0].advisories[0].cves[0]",
    );
    let mut long_package = with_update(&agent, advisory("https://ubuntu.com/x"));
    long_package["packages"][0]["version"] = json!("1".repeat(256));
    refused(send(long_package).await, "packages[0].version");
    let mut long_fact = agent.check_in_body("d");
    long_fact["facts"]["kernel_version"] = json!("6".repeat(256));
    refused(send(long_fact).await, "facts.kernel_version");
    let mut long_permission = agent.check_in_body("d");
    long_permission["facts"]["agent_permissions"] = json!(["p".repeat(256)]);
    refused(send(long_permission).await, "facts.agent_permissions[0]");
    let mut long_cloud = agent.check_in_body("d");
    long_cloud["facts"]["cloud"] = json!({"provider": "aws", "region": "r".repeat(256)});
    refused(send(long_cloud).await, "facts.cloud.region");

    // At the bounds: accepted and shown as sent.
    let mut fine = advisory("https://ubuntu.com/security/notices/USN-7000-1");
    fine["title"] = json!("t".repeat(1000));
    let mut body = with_update(&agent, fine);
    body["facts"]["kernel_version"] = json!("6".repeat(255));
    let answer = send(body).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    app.stop().await;
}

#[tokio::test]
async fn control_characters_and_direction_overrides_are_refused_in_agent_strings() {
    let (app, owner, token) = fleet().await;
    // At enrolment: a host name that would repaint a terminal or reverse the text around it.
    for hostname in ["web-1\u{1b}[2J", "web\u{202e}1-bew", "web-1\n"] {
        let mut agent = TestAgent::new(hostname);
        let answer = agent.enroll(&app, &token).await;
        let problem = answer.assert_problem(400, "invalid-request");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("facts.hostname")),
            "the detail names the field: {problem}"
        );
    }
    // At check-in: any reported string, for example a package version or an advisory title.
    let agent = enrolled(&app, &token, "web-1").await;
    let mut body = with_update(&agent, advisory("https://ubuntu.com/x"));
    body["updates"][0]["advisories"][0]["title"] = json!("Fix\u{7}");
    let answer = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await;
    answer.assert_problem(400, "invalid-request");
    let mut body = agent.check_in_body("d");
    body["facts"]["hostname"] = json!("web-1\u{0}");
    let answer = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await;
    answer.assert_problem(400, "invalid-request");
    // Nothing of it was stored: the host keeps the name it enrolled with.
    let hosts = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/hosts",
            None,
        )
        .await
        .json();
    assert_eq!(hosts["items"][0]["hostname"], "web-1");
    app.stop().await;
}

#[tokio::test]
async fn control_characters_are_refused_in_host_display_names_and_notes() {
    let (app, owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    let path = format!(
        "/v1/orgs/acme/hosts/{}",
        agent.host_id.as_deref().unwrap_or_default()
    );
    let patch = |body: Value| app.call(As::Session(&owner), Method::PATCH, &path, Some(body));
    for (field, value) in [
        ("display_name", "db\u{1b}[2J\u{1b}[Hprod"),
        ("display_name", "tab\there"),
        ("display_name", "line\nbreak"),
        ("display_name", "right-to-left \u{202e}gnp.exe"),
        ("notes", "bell\u{7}"),
        ("notes", "nul\u{0}"),
        ("notes", "carriage\rreturn"),
        ("notes", "c1\u{9b}31m"),
    ] {
        let problem = patch(json!({ field: value }))
            .await
            .assert_problem(400, "invalid-request");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(field)),
            "{problem}"
        );
    }
    let answer = patch(
        json!({"display_name": "Datenbank – primär", "notes": "Line one\n\tindented\nLine three"}),
    )
    .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    let host = answer.json();
    assert_eq!(host["display_name"], "Datenbank – primär");
    assert_eq!(host["notes"], "Line one\n\tindented\nLine three");
    app.stop().await;
}

#[tokio::test]
async fn an_inventory_that_returns_to_an_earlier_digest_is_evaluated_again() {
    let (app, owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    let path = format!(
        "/v1/orgs/acme/hosts/{}",
        agent.host_id.as_deref().unwrap_or_default()
    );
    let update = |name: &str| {
        json!({"name": name, "arch": "amd64", "from_version": "1", "to_version": "2",
               "ecosystem": "deb", "security": false})
    };
    let a = json!([update("openssl")]);
    let b = json!([update("openssl"), update("curl")]);
    for (digest, updates, total) in [("A", &a, 1), ("B", &b, 2), ("A", &a, 1)] {
        app.clock.advance(chrono::Duration::minutes(5));
        let mut body = agent.check_in_body(digest);
        body["packages"] = json!([]);
        body["updates"] = updates.clone();
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
        app.run_pending_jobs().await;
        let host = app
            .call(As::Session(&owner), Method::GET, &path, None)
            .await
            .json();
        assert_eq!(
            host["updates"]["total"], total,
            "after inventory {digest}: {host}"
        );
    }
    app.stop().await;
}

// --- Trust boundaries (decisions §18) ---------------------------------------------------------

async fn token_of_uses(app: &TestApp, owner: &Session, max_uses: u32) -> String {
    let created = app
        .call(
            As::Session(owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "single", "max_uses": max_uses})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    created.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A leaked single-use token enrols one host, not any number of pending ones: `max_uses`
/// bounds the enrolments still pending plus the uses already charged.
#[tokio::test]
async fn max_uses_bounds_the_enrolments_still_pending() {
    let (app, _owner, _) = fleet().await;
    let owner = app.member("acme", Role::Owner, "second@acme.test").await;
    let token = token_of_uses(&app, &owner, 1).await;
    let first = enrolled(&app, &token, "web-1").await;
    TestAgent::new("web-2")
        .enroll(&app, &token)
        .await
        .assert_problem(403, "forbidden");
    // Its first check-in charges the use; the token stays used up.
    assert_eq!(first.check_in(&app, "d1").await.status.as_u16(), 200);
    TestAgent::new("web-3")
        .enroll(&app, &token)
        .await
        .assert_problem(403, "forbidden");
    // The same machine enrolling again while pending is not a second enrolment.
    let two = token_of_uses(&app, &owner, 1).await;
    let pending = enrolled(&app, &two, "db-1").await;
    let mut again = impostor_of(&pending);
    assert_eq!(again.enroll(&app, &two).await.status.as_u16(), 201);
    app.stop().await;
}

/// A host that never checks in does not hold its token's use, or its place under a plan's host
/// cap, for ever: a day after enrolment it is removed, and the audit log says so.
#[tokio::test]
async fn a_host_still_pending_a_day_after_enrolment_is_removed_and_frees_its_place() {
    let (app, owner, _) = fleet().await;
    let token = token_of_uses(&app, &owner, 1).await;
    let stale = enrolled(&app, &token, "web-1").await;
    let live_token = enrollment_token(&app, &owner).await;
    let live = enrolled(&app, &live_token, "web-2").await;
    app.clock.advance(chrono::Duration::hours(23));
    assert_eq!(live.check_in(&app, "d1").await.status.as_u16(), 200);
    app.clock.advance(chrono::Duration::minutes(61));
    app.state
        .queue
        .push(domain::fleet::jobs::FleetUpkeep {
            minute: "pending-expiry".into(),
        })
        .await
        .expect("queued");
    app.run_pending_jobs().await;
    let path = |agent: &TestAgent| {
        format!(
            "/v1/orgs/acme/hosts/{}",
            agent.host_id.as_deref().unwrap_or_default()
        )
    };
    app.call(As::Session(&owner), Method::GET, &path(&stale), None)
        .await
        .assert_problem(404, "not-found");
    let kept = app
        .call(As::Session(&owner), Method::GET, &path(&live), None)
        .await;
    assert_eq!(kept.status.as_u16(), 200, "a host that checked in stays");
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=500",
            None,
        )
        .await
        .json();
    assert!(
        audit["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["action"] == "host.pending_expired"),
        "{audit}"
    );
    // Its place is free again.
    assert_eq!(
        TestAgent::new("web-3")
            .enroll(&app, &token)
            .await
            .status
            .as_u16(),
        201
    );
    app.stop().await;
}

/// An enrolment racing a pending host's first check-in: the check-in's write is in flight
/// (its transaction holds the host's row) when the enrolment reads the host. The enrolment must
/// wait for it and then see a host that has checked in (409), not re-bind it from what it read
/// before. On SQLite writers take turns, so the enrolment sees the committed check-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrolment_racing_a_first_check_in_never_rebinds_the_host() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let (app, _owner, token) = fleet().await;
    let agent = enrolled(&app, &token, "web-1").await;
    let host_id = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    let app = std::sync::Arc::new(app);
    let mut impostor = impostor_of(&agent);
    if app.database.is_postgres() {
        // The first check-in's transaction, holding the host's row.
        let check_in = app.state.db.orm.begin().await.expect("begin");
        check_in
            .execute_unprepared(&format!(
                "UPDATE hosts SET last_seen_at = now(), status = 'online' WHERE id = '{host_id}'"
            ))
            .await
            .expect("the check-in's write");
        let racing = {
            let app = app.clone();
            let token = token.clone();
            tokio::spawn(async move {
                let answer = impostor.enroll(&app, &token).await;
                (answer, impostor)
            })
        };
        // Until the enrolment waits on the row (Postgres reports the wait)…
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let waiting = app
                .state
                .db
                .orm
                .query_one_raw(sea_orm::Statement::from_string(
                    sea_orm::DatabaseBackend::Postgres,
                    "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                ))
                .await
                .expect("pg_stat_activity")
                .and_then(|row| row.try_get::<i64>("", "n").ok())
                .unwrap_or(0);
            if waiting > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the enrolment did not reach the host's row"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // …then the check-in commits.
        check_in.commit().await.expect("commit");
        let (answer, impostor) = racing.await.expect("enrolment");
        answer.assert_problem(409, "conflict");
        assert!(impostor.key_id.is_none());
    } else {
        assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
        impostor
            .enroll(&app, &token)
            .await
            .assert_problem(409, "conflict");
    }
    // The host is still bound to its own key alone.
    let keys = keys_of(&app, &agent).await;
    assert_eq!(keys.len(), 1, "no key certified for the impostor");
    assert!(keys[0].revoked_at.is_none());
}
