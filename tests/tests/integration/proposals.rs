//! Policies and proposals: generation from a fleet's reported updates (grouped by package and
//! both versions, superseding, absorbing, closing, idempotent), the full detail, and the
//! decisions with every refusal of the state table, windows on a clock the test controls, and
//! concurrent approvals.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use domain::roles::Role;
use entities::{audit_events, known_exploited, organizations, proposal_decisions};
use reqwest::Method;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use serde_json::{Value, json};
use tests::{
    As, Session, TestApp,
    agent::{Tamper, TestAgent},
};

/// An update as an agent reports it.
pub(crate) fn update(name: &str, from: &str, to: &str, advisories: Value) -> Value {
    json!({
        "name": name, "arch": "amd64", "from_version": from, "to_version": to,
        "ecosystem": "deb", "source_name": name, "security": advisories.as_array().is_some_and(|a| !a.is_empty()),
        "requires_reboot": false, "advisories": advisories,
    })
}

fn usn(id: &str, severity: &str, cve: &str) -> Value {
    json!([{"external_id": id, "source": "usn", "severity": severity, "title": format!("{id} fix"),
            "url": format!("https://ubuntu.com/security/notices/{id}"), "cves": [cve]}])
}

/// An organization with an owner and an enrollment token, and the calls its tests make.
pub(crate) struct Fleet<'a> {
    app: &'a TestApp,
    pub(crate) owner: Session,
    token: String,
    slug: String,
}

impl<'a> Fleet<'a> {
    pub(crate) async fn new(app: &'a TestApp) -> Fleet<'a> {
        Fleet::new_named(app, "acme").await
    }

    /// The fleet of an organization with slug `slug`.
    pub(crate) async fn new_named(app: &'a TestApp, slug: &str) -> Fleet<'a> {
        let owner = app.sign_up(&format!("owner@{slug}.test"), slug).await;
        let created = app
            .call(
                As::Session(&owner),
                Method::POST,
                &format!("/v1/orgs/{slug}/enrollment-tokens"),
                Some(json!({"name": "fleet"})),
            )
            .await;
        assert_eq!(created.status.as_u16(), 201, "{}", created.body);
        let token = created.json()["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Fleet {
            app,
            owner,
            token,
            slug: slug.to_owned(),
        }
    }

    /// Enrols a host running `(distro, version, codename, os_family)` and checks it in with
    /// `updates`.
    pub(crate) async fn host_on(
        &self,
        hostname: &str,
        (distro, version, codename, family): (&str, &str, &str, &str),
        updates: Value,
    ) -> TestAgent {
        let mut agent = TestAgent::new(hostname);
        let enrolled = agent.enroll(self.app, &self.token).await;
        assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
        let mut facts = agent.facts();
        facts["distro"] = json!(distro);
        facts["distro_version"] = json!(version);
        facts["distro_codename"] = json!(codename);
        facts["os_family"] = json!(family);
        self.report(&agent, updates, json!({ "facts": facts }))
            .await;
        agent
    }

    /// Enrols a host and checks it in with `updates` (and `extra` check-in fields).
    pub(crate) async fn host(&self, hostname: &str, updates: Value, extra: Value) -> TestAgent {
        let mut agent = TestAgent::new(hostname);
        let enrolled = agent.enroll(self.app, &self.token).await;
        assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
        self.report(&agent, updates, extra).await;
        agent
    }

    /// Checks `agent` in with a new inventory.
    pub(crate) async fn report(&self, agent: &TestAgent, updates: Value, extra: Value) {
        let digest = uuid::Uuid::now_v7().simple().to_string();
        let mut body = agent.check_in_body(&digest);
        body["packages"] = json!([]);
        body["updates"] = updates;
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                body.insert(k.clone(), v.clone());
            }
        }
        let answer = agent
            .post(
                self.app,
                "/v1/agent/check-in",
                &body,
                self.app.clock_now(),
                Tamper::None,
            )
            .await;
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    }

    /// One host needing curl 1 → 2 and a policy requiring `required` approvals: the id of the
    /// proposal it opens, and the host's agent.
    pub(crate) async fn one_proposal(&self, required: i64) -> (TestAgent, String) {
        let agent = self
            .host(
                "web-1",
                json!([update("curl", "1", "2", json!([]))]),
                json!({}),
            )
            .await;
        self.policy(policy_body(required)).await;
        let id = text(&self.until(|l| l.len() == 1).await[0]["id"]);
        (agent, id)
    }

    pub(crate) async fn policy(&self, body: Value) -> Value {
        let created = self
            .app
            .call(
                As::Session(&self.owner),
                Method::POST,
                &format!("/v1/orgs/{}/policies", self.slug),
                Some(body),
            )
            .await;
        assert_eq!(created.status.as_u16(), 201, "{}", created.body);
        created.json()
    }

    pub(crate) async fn list(&self, query: &str) -> Vec<Value> {
        let response = self
            .app
            .call(
                As::Session(&self.owner),
                Method::GET,
                &format!("/v1/orgs/{}/proposals{query}", self.slug),
                None,
            )
            .await;
        assert_eq!(response.status.as_u16(), 200, "{}", response.body);
        response.json()["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until the proposal list (newest first) satisfies `check`, and returns it.
    /// The proposal list once every queued evaluation has run, checked by `check`.
    pub(crate) async fn until(&self, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.app.run_pending_jobs().await;
        let list = self.list("").await;
        assert!(check(&list), "proposals not as expected: {list:#?}");
        list
    }

    pub(crate) async fn detail(&self, id: &str) -> Value {
        let response = self
            .app
            .call(
                As::Session(&self.owner),
                Method::GET,
                &format!("/v1/orgs/{}/proposals/{id}", self.slug),
                None,
            )
            .await;
        assert_eq!(response.status.as_u16(), 200, "{}", response.body);
        response.json()
    }

    pub(crate) async fn decide(
        &self,
        who: &Session,
        id: &str,
        decision: &str,
        body: Option<Value>,
    ) -> tests::TestResponse {
        self.app
            .call(
                As::Session(who),
                Method::POST,
                &format!("/v1/orgs/acme/proposals/{id}/{decision}"),
                body,
            )
            .await
    }
}

fn policy_body(required: i64) -> Value {
    json!({
        "name": "everything", "scope": {"groups": []}, "required_approvals": required,
        "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all",
    })
}

fn at(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// A proposal's changes as (package, from, to, hosts), in the order the detail lists them.
fn changes_of(proposal: &Value) -> Vec<(String, String, String, i64)> {
    proposal["changes"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    (
                        text(&c["package"]),
                        text(&c["from_version"]),
                        text(&c["to_version"]),
                        c["hosts"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The id of a policy as the api answered it, as the database keeps it.
fn policy_uuid(policy: &Value) -> uuid::Uuid {
    platform::ids::PolicyId::parse(&text(&policy["id"]))
        .map(platform::ids::PolicyId::uuid)
        .expect("pol id")
}

pub(crate) fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_fleet_on_two_starting_versions_gives_two_changes_with_exact_counts() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let openssl_old = update(
        "openssl",
        "3.0.13-0ubuntu3.1",
        "3.0.13-0ubuntu3.4",
        usn("USN-7001-1", "high", "CVE-2026-1000"),
    );
    let openssl_new = update(
        "openssl",
        "3.0.13-0ubuntu3.2",
        "3.0.13-0ubuntu3.4",
        usn("USN-7001-1", "high", "CVE-2026-1000"),
    );
    let curl = update("curl", "8.5.0-2ubuntu10.1", "8.5.0-2ubuntu10.6", json!([]));
    let mut unsourced = update("tzdata", "2024a-2", "2024b-0", json!([]));
    unsourced["source_name"] = Value::Null;
    fleet
        .host("web-1", json!([openssl_old, curl]), json!({}))
        .await;
    fleet
        .host("web-2", json!([openssl_old, curl, unsourced]), json!({}))
        .await;
    let db = fleet.host("db-1", json!([openssl_new]), json!({})).await;
    let policy = fleet.policy(policy_body(2)).await;

    let list = fleet
        .until(|l| l.len() == 1 && l[0]["hosts"] == 3 && l[0]["packages"] == 3)
        .await;
    let id = text(&list[0]["id"]);
    let p = fleet.detail(&id).await;
    assert_eq!(p["number"], 1);
    assert_eq!(p["status"], "open");
    assert_eq!(
        p["kind"], "package_update",
        "curl and tzdata fix no advisory"
    );
    assert_eq!(
        (
            p["approvals"].clone(),
            p["required"].clone(),
            p["outstanding"].clone()
        ),
        (json!(0), json!(2), json!(2))
    );
    assert_eq!(p["max_severity"], "high");
    assert_eq!(p["known_exploited"], false);
    assert_eq!(
        p["policy"],
        json!({"id": policy["id"], "name": "everything", "version": 1})
    );
    assert!(
        p.get("release_upgrade").is_none(),
        "only a dist_upgrade has one"
    );
    assert!(p.get("scheduled_for").is_none() && p.get("closed_at").is_none());
    assert_eq!(
        changes_of(&p),
        vec![
            (
                "curl".into(),
                "8.5.0-2ubuntu10.1".into(),
                "8.5.0-2ubuntu10.6".into(),
                2
            ),
            (
                "openssl".into(),
                "3.0.13-0ubuntu3.1".into(),
                "3.0.13-0ubuntu3.4".into(),
                2
            ),
            (
                "openssl".into(),
                "3.0.13-0ubuntu3.2".into(),
                "3.0.13-0ubuntu3.4".into(),
                1
            ),
            ("tzdata".into(), "2024a-2".into(), "2024b-0".into(), 1),
        ],
        "grouped by package and both versions"
    );
    let openssl = &p["changes"][1];
    assert_eq!(openssl["advisories"][0]["external_id"], "USN-7001-1");
    assert_eq!(openssl["advisories"][0]["severity"], "high");
    assert_eq!(openssl["advisories"][0]["cves"], json!(["CVE-2026-1000"]));
    assert_eq!(
        openssl["changelog"]["status"], "pending",
        "a source package is known"
    );
    assert!(
        p["changes"][3].get("changelog").is_none(),
        "no source package: no changelog"
    );
    assert_eq!(p["targets"].as_array().map(Vec::len), Some(3));
    assert_eq!(p["targets_complete"], true);
    assert_eq!(p["decisions"], json!([]));

    // The host detail lists its open proposal.
    let host = app
        .call(
            As::Session(&fleet.owner),
            Method::GET,
            &format!(
                "/v1/orgs/acme/hosts/{}",
                db.host_id.clone().unwrap_or_default()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(
        host["proposals"],
        json!([{"id": id, "number": 1, "status": "open", "title": p["title"]}])
    );

    // Re-evaluating the same inventory changes nothing.
    let policy_id = policy_uuid(&policy);
    app.clock.advance(chrono::Duration::minutes(5));
    let reports = &app.reports;
    domain::policy::evaluate_policy(&app.state.db, reports, policy_id, app.clock_now())
        .await
        .expect("evaluate");
    domain::policy::evaluate_policy(&app.state.db, reports, policy_id, app.clock_now())
        .await
        .expect("evaluate");
    assert_eq!(
        fleet.detail(&id).await,
        p,
        "idempotent: not even updated_at moves"
    );
    assert_eq!(fleet.list("").await.len(), 1);

    // A known-exploited CVE is shown beside severity, never raising it.
    mark_exploited(&app).await;
    domain::policy::evaluate_policy(&app.state.db, reports, policy_id, app.clock_now())
        .await
        .expect("evaluate");
    let p = fleet.detail(&id).await;
    assert_eq!(p["known_exploited"], true);
    assert_eq!(p["changes"][1]["advisories"][0]["known_exploited"], true);
    assert_eq!(p["max_severity"], "high");
    assert_eq!(fleet.list("?known_exploited=true").await.len(), 1);
    assert_eq!(fleet.list("?severity=critical").await.len(), 0);
    assert_eq!(fleet.list("?severity=high").await.len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn new_updates_supersede_or_merge_and_a_proposal_with_nothing_left_closes() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let curl = update("curl", "8.5.0-1", "8.5.0-2", json!([]));
    let web = fleet.host("web-1", json!([curl]), json!({})).await;
    fleet.policy(policy_body(1)).await;
    let first = fleet.until(|l| l.len() == 1).await;
    let first_id = text(&first[0]["id"]);

    // A new version: without auto-merge a new proposal covers everything and supersedes.
    let newer = update("curl", "8.5.0-1", "8.5.0-3", json!([]));
    fleet
        .report(
            &web,
            json!([newer, update("jq", "1.7-1", "1.7-2", json!([]))]),
            json!({}),
        )
        .await;
    let list = fleet.until(|l| l.len() == 2).await;
    assert_eq!(list[0]["number"], 2);
    assert_eq!(list[0]["status"], "open");
    assert_eq!(list[0]["packages"], 2);
    let old = fleet.detail(&first_id).await;
    assert_eq!(old["status"], "superseded");
    assert_eq!(old["superseded_by"], list[0]["id"]);
    assert_eq!(old["outstanding"], 0, "final proposals need nothing");
    let host = app
        .call(
            As::Session(&fleet.owner),
            Method::GET,
            &format!(
                "/v1/orgs/acme/hosts/{}",
                web.host_id.clone().unwrap_or_default()
            ),
            None,
        )
        .await
        .json();
    let listed: Vec<String> = host["proposals"]
        .as_array()
        .map(|p| p.iter().map(|p| text(&p["id"])).collect())
        .unwrap_or_default();
    assert_eq!(
        listed,
        vec![text(&list[0]["id"])],
        "only open proposals, not the superseded one"
    );

    // The host no longer needs anything: the open proposal closes.
    fleet.report(&web, json!([]), json!({})).await;
    let list = fleet.until(|l| l[0]["status"] == "closed").await;
    assert_eq!(list[0]["outstanding"], 0);
    assert!(fleet.detail(&text(&list[0]["id"])).await["closed_at"].is_string());

    // With auto-merge the open proposal absorbs new updates instead.
    let merging = app
        .call(
            As::Session(&fleet.owner),
            Method::POST,
            "/v1/orgs/acme/policies",
            Some(json!({"name": "merging", "scope": {"groups": [], "selector": "role=merge"}, "required_approvals": 1,
                        "apply": "asap", "reboot": "never", "auto_merge": true, "updates": "all"})),
        )
        .await;
    assert_eq!(merging.status.as_u16(), 201, "{}", merging.body);
    let agent = fleet
        .host(
            "merge-1",
            json!([update("vim", "9.1-1", "9.1-2", json!([]))]),
            json!({}),
        )
        .await;
    let host_id = agent.host_id.clone().unwrap_or_default();
    let relabel = app
        .call(
            As::Session(&fleet.owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/hosts/{host_id}"),
            Some(json!({"labels": {"role": "merge"}})),
        )
        .await;
    assert_eq!(relabel.status.as_u16(), 200, "{}", relabel.body);
    let policy_filter = format!("?policy={}", text(&merging.json()["id"]));
    app.run_pending_jobs().await;
    assert!(
        !fleet.list(&policy_filter).await.is_empty(),
        "the merging policy opened a proposal"
    );
    fleet
        .report(
            &agent,
            json!([
                update("vim", "9.1-1", "9.1-3", json!([])),
                update("git", "2.43-1", "2.43-2", json!([]))
            ]),
            json!({}),
        )
        .await;
    app.run_pending_jobs().await;
    let merged = fleet.list(&policy_filter).await;
    assert_eq!(
        merged.len(),
        1,
        "auto-merge never opens a second proposal: {merged:#?}"
    );
    assert_eq!(merged[0]["packages"], 2, "absorbed: {merged:#?}");
    let p = fleet.detail(&text(&merged[0]["id"])).await;
    let tos: Vec<String> = p["changes"]
        .as_array()
        .map(|c| c.iter().map(|c| text(&c["to_version"])).collect())
        .unwrap_or_default();
    assert_eq!(
        tos,
        vec!["2.43-2", "9.1-3"],
        "absorbed, with the newest versions"
    );
    assert_eq!(p["auto_merge"], true);
    app.stop().await;
}

#[tokio::test]
async fn approve_refuses_each_state_and_counts_distinct_people() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let (_, id) = fleet.one_proposal(2).await;
    let ops = app.member("acme", Role::Operator, "ops@acme.test").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;

    // Who may ask, and which proposal.
    fleet
        .decide(&viewer, &id, "approve", None)
        .await
        .assert_problem(403, "forbidden");
    app.call(
        As::Nobody,
        Method::POST,
        &format!("/v1/orgs/acme/proposals/{id}/approve"),
        None,
    )
    .await
    .assert_problem(401, "unauthenticated");
    app.call(
        As::SessionWithoutCsrf(&ops),
        Method::POST,
        &format!("/v1/orgs/acme/proposals/{id}/approve"),
        None,
    )
    .await
    .assert_problem(403, "forbidden");
    fleet
        .decide(&ops, "prp_nonsense", "approve", None)
        .await
        .assert_problem(404, "not-found");
    fleet
        .decide(&ops, &id.replace("prp_", "hst_"), "approve", None)
        .await
        .assert_problem(404, "not-found");
    let other = app.sign_up("owner@other.test", "other").await;
    app.call(
        As::Session(&other),
        Method::POST,
        &format!("/v1/orgs/other/proposals/{id}/approve"),
        None,
    )
    .await
    .assert_problem(404, "not-found");
    fleet
        .decide(&ops, &id, "approve", Some(json!({"rollout": "now"})))
        .await
        .assert_problem(400, "invalid-request");

    // One approval each; the second from the same person is already-decided.
    let first = fleet.decide(&ops, &id, "approve", None).await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.body);
    assert_eq!(
        first.json(),
        json!({"id": id, "status": "open", "approvals": 1, "required": 2, "outstanding": 1})
    );
    fleet
        .decide(&ops, &id, "approve", None)
        .await
        .assert_problem(409, "already-decided");
    let second = fleet
        .decide(&fleet.owner, &id, "approve", None)
        .await
        .json();
    assert_eq!(second["status"], "approved");
    assert_eq!(second["outstanding"], 0);
    assert!(
        second.get("scheduled_for").is_none(),
        "omitted, not null, unless scheduled"
    );
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    fleet
        .decide(&admin, &id, "approve", None)
        .await
        .assert_problem(409, "not-decidable");
    fleet
        .decide(
            &admin,
            &id,
            "snooze",
            Some(json!({"until": "2026-12-01T00:00:00Z"})),
        )
        .await
        .assert_problem(409, "not-decidable");
    let p = fleet.detail(&id).await;
    let who: Vec<String> = p["decisions"]
        .as_array()
        .map(|d| d.iter().map(|d| text(&d["by"]["email"])).collect())
        .unwrap_or_default();
    assert_eq!(who, vec!["ops@acme.test", "owner@acme.test"]);
    assert_eq!(p["decisions"][0]["decision"], "approved");
    app.stop().await;
}

#[tokio::test]
async fn preflight_and_release_upgrades_refuse_approval() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    fleet
        .host(
            "web-1",
            json!([update("openssl", "1", "2", json!([]))]),
            json!({"held_packages": ["openssl"]}),
        )
        .await;
    let debian = {
        let mut agent = TestAgent::new("deb-1");
        assert_eq!(agent.enroll(&app, &fleet.token).await.status.as_u16(), 201);
        let mut body = agent.check_in_body("rel-1");
        body["facts"]["distro"] = json!("debian");
        body["facts"]["distro_version"] = json!("12");
        body["facts"]["distro_codename"] = json!("bookworm");
        body["updates"] = json!([]);
        body["release_upgrade"] = json!({"to": {"codename": "trixie", "version": "13"}});
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
        agent
    };
    fleet.policy(policy_body(1)).await;
    let list = fleet.until(|l| l.len() == 2).await;
    let upgrade = list
        .iter()
        .find(|p| p["kind"] == "dist_upgrade")
        .cloned()
        .unwrap_or_default();
    let package = list
        .iter()
        .find(|p| p["kind"] == "package_update")
        .cloned()
        .unwrap_or_default();

    let detail = fleet.detail(&text(&upgrade["id"])).await;
    assert_eq!(
        detail["release_upgrade"],
        json!({"distro": "debian", "from": {"codename": "bookworm", "version": "12"}, "to": {"codename": "trixie", "version": "13"}})
    );
    assert_eq!(detail["hosts"], 1);
    assert_eq!(detail["targets"][0]["id"], json!(debian.host_id));
    let refused = fleet
        .decide(&fleet.owner, &text(&upgrade["id"]), "approve", None)
        .await;
    refused.assert_problem(409, "not-executable");
    let refused = fleet
        .decide(&fleet.owner, &text(&package["id"]), "approve", None)
        .await;
    let problem = refused.assert_problem(409, "preflight-failed");
    assert!(
        text(&problem["detail"]).contains("web-1 holds openssl"),
        "{problem}"
    );
    // Nothing was recorded by a refused approval.
    let p = fleet.detail(&text(&package["id"])).await;
    assert_eq!(
        (p["approvals"].clone(), p["decisions"].clone()),
        (json!(0), json!([]))
    );
    app.stop().await;
}

#[tokio::test]
async fn reject_keeps_its_count_and_snooze_reopens_when_the_scheduler_says_so() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let (agent, id) = fleet.one_proposal(3).await;

    // Snooze: not in the past, and back to open once the time passes.
    let past = (app.clock_now() - chrono::Duration::minutes(1)).to_rfc3339();
    fleet
        .decide(&fleet.owner, &id, "snooze", Some(json!({"until": past})))
        .await
        .assert_problem(400, "invalid-request");
    let until: DateTime<Utc> = app.clock_now() + chrono::Duration::hours(2);
    let snoozed = fleet
        .decide(
            &fleet.owner,
            &id,
            "snooze",
            Some(json!({"until": until, "reason": "freeze week"})),
        )
        .await;
    assert_eq!(snoozed.status.as_u16(), 200, "{}", snoozed.body);
    assert_eq!(snoozed.json()["status"], "snoozed");
    fleet
        .decide(&fleet.owner, &id, "approve", None)
        .await
        .assert_problem(409, "not-decidable");
    assert_eq!(at(&fleet.detail(&id).await["snoozed_until"]), Some(until));

    let scheduler = scheduler::Scheduler::new(app.state.db.clone(), Arc::new(app.clock.clone()));
    scheduler.tick(app.clock_now()).await.expect("tick");
    app.clock.advance(chrono::Duration::hours(2));
    scheduler.tick(app.clock_now()).await.expect("tick");
    fleet.until(|l| l[0]["status"] == "open").await;
    // Two hours of silence would fail preflight: the host checks in again.
    let body = agent.check_in_body("after-snooze");
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

    // Reject: a reason is required and bounded; the approvals stay.
    let ops = app.member("acme", Role::Operator, "ops@acme.test").await;
    assert_eq!(
        fleet.decide(&ops, &id, "approve", None).await.json()["approvals"],
        1
    );
    fleet
        .decide(&fleet.owner, &id, "reject", Some(json!({"reason": ""})))
        .await
        .assert_problem(400, "invalid-request");
    fleet
        .decide(
            &fleet.owner,
            &id,
            "reject",
            Some(json!({"reason": "x".repeat(100_000)})),
        )
        .await
        .assert_problem(400, "invalid-request");
    fleet
        .decide(&fleet.owner, &id, "reject", None)
        .await
        .assert_problem(400, "invalid-request");
    let rejected = fleet
        .decide(
            &fleet.owner,
            &id,
            "reject",
            Some(json!({"reason": "breaks the build"})),
        )
        .await;
    assert_eq!(
        rejected.json(),
        json!({"id": id, "status": "rejected", "approvals": 1, "required": 3, "outstanding": 0})
    );
    let p = fleet.detail(&id).await;
    let reasons: Vec<(String, String)> = p["decisions"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|d| (text(&d["decision"]), text(&d["reason"])))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        reasons,
        vec![
            ("snoozed".into(), "freeze week".into()),
            ("approved".into(), String::new()),
            ("rejected".into(), "breaks the build".into())
        ]
    );
    fleet
        .decide(
            &fleet.owner,
            &id,
            "reject",
            Some(json!({"reason": "again"})),
        )
        .await
        .assert_problem(409, "not-decidable");
    app.stop().await;
}

#[tokio::test]
async fn approving_while_the_window_is_shut_schedules_for_its_opening() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    fleet
        .host(
            "web-1",
            json!([update("curl", "1", "2", json!([]))]),
            json!({}),
        )
        .await;
    // The test clock starts on Monday 2026-11-02 09:00 UTC; the window opens Saturdays 02:00
    // Berlin time (01:00 UTC in November) for four hours.
    let mut body = policy_body(1);
    body["apply"] = json!("asap_in_window");
    body["reboot"] = json!("in_window");
    body["window"] = json!({"rrule": "FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0", "duration_minutes": 240, "time_zone": "Europe/Berlin"});
    let policy = fleet.policy(body.clone()).await;
    let opening = Utc.with_ymd_and_hms(2026, 11, 7, 1, 0, 0).single();
    assert_eq!(at(&policy["window"]["next_opening"]), opening);
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);

    let mut approved = fleet
        .decide(&fleet.owner, &id, "approve", None)
        .await
        .json();
    assert_eq!(
        at(&approved["scheduled_for"]),
        opening,
        "the window's next opening"
    );
    approved.as_object_mut().map(|o| o.remove("scheduled_for"));
    assert_eq!(
        approved,
        json!({"id": id, "status": "scheduled", "approvals": 1, "required": 1, "outstanding": 0})
    );
    let scheduler = scheduler::Scheduler::new(app.state.db.clone(), Arc::new(app.clock.clone()));
    app.clock.advance(chrono::Duration::days(4)); // Friday: still shut.
    scheduler.tick(app.clock_now()).await.expect("tick");
    app.run_pending_jobs().await;
    assert_eq!(fleet.detail(&id).await["status"], "scheduled");
    app.clock.advance(chrono::Duration::hours(16)); // Saturday 01:00 UTC: open.
    scheduler.tick(app.clock_now()).await.expect("tick");
    let list = fleet.until(|l| l[0]["status"] == "approved").await;
    assert!(list[0].get("scheduled_for").is_none());
    let approvals = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("proposal.approved"))
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(approvals, 1, "the window opened once");

    // Windows that never fire, and unknown zones, are refused.
    let mut never = body.clone();
    never["name"] = json!("never");
    never["window"]["rrule"] = json!("FREQ=DAILY;UNTIL=20200101T000000Z");
    let mut zone = body.clone();
    zone["name"] = json!("zone");
    zone["window"]["time_zone"] = json!("Mars/Olympus_Mons");
    let mut windowless = body;
    windowless["name"] = json!("windowless");
    windowless["window"] = Value::Null;
    for bad in [never, zone, windowless] {
        app.call(
            As::Session(&fleet.owner),
            Method::POST,
            "/v1/orgs/acme/policies",
            Some(bad),
        )
        .await
        .assert_problem(400, "invalid-request");
    }
    app.stop().await;
}

#[tokio::test]
async fn five_people_approving_one_proposal_needing_three_at_once() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let (_, id) = fleet.one_proposal(3).await;
    let mut people = Vec::new();
    for i in 0..5 {
        people.push(
            app.member("acme", Role::Operator, &format!("op{i}@acme.test"))
                .await,
        );
    }
    let answers =
        futures::future::join_all(people.iter().map(|p| fleet.decide(p, &id, "approve", None)))
            .await;
    let ok = answers.iter().filter(|a| a.status.as_u16() == 200).count();
    let refused: Vec<String> = answers
        .iter()
        .filter(|a| a.status.as_u16() != 200)
        .map(|a| text(&a.json()["type"]))
        .collect();
    assert_eq!(ok, 3, "{answers:#?}");
    assert_eq!(refused, vec!["not-decidable", "not-decidable"]);
    let p = fleet.detail(&id).await;
    assert_eq!(
        (p["status"].clone(), p["approvals"].clone()),
        (json!("approved"), json!(3))
    );
    let proposal_id = platform::ids::ProposalId::parse(&id)
        .map(platform::ids::ProposalId::uuid)
        .expect("prp");
    let decisions = proposal_decisions::Entity::find()
        .filter(proposal_decisions::Column::ProposalId.eq(proposal_id))
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(decisions, 3, "one decision each for the three that counted");
    let events = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("proposal.approved"))
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(events, 1, "the status moved exactly once");
    app.stop().await;
}

#[tokio::test]
async fn an_approved_proposal_reaches_the_agent_and_its_result_settles_it() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let agent = fleet
        .host(
            "web-1",
            json!([update("curl", "1", "2", json!([]))]),
            json!({}),
        )
        .await;
    // The agent's permissions are a ceiling: this one may apply updates but not reboot.
    let host_uuid = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    entities::hosts::Entity::update_many()
        .col_expr(
            entities::hosts::Column::AgentPermissions,
            sea_orm::sea_query::Expr::value(Some(r#"["read_inventory","apply_updates"]"#)),
        )
        .filter(entities::hosts::Column::Id.eq(host_uuid))
        .exec(&app.state.db.orm)
        .await
        .expect("narrow permissions");
    let mut body = policy_body(0);
    body["reboot"] = json!("immediate");
    fleet.policy(body).await;
    // Zero approvals: it goes ahead by itself.
    let list = fleet
        .until(|l| l.len() == 1 && l[0]["status"] == "approved")
        .await;
    let id = text(&list[0]["id"]);
    let body = agent.check_in_body("same");
    let answer = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await
        .json();
    let job = answer["jobs"][0].clone();
    assert_eq!(job["kind"], "apply_updates");
    assert_eq!(job["reboot"], "never", "the server narrows, never widens");
    assert_eq!(job["proposal_id"], json!(id));
    assert_eq!(
        job["changes"],
        json!([{"package": "curl", "ecosystem": "deb", "from_version": "1", "to_version": "2"}])
    );
    assert_eq!(fleet.detail(&id).await["status"], "applying");

    let job_id = text(&job["id"]);
    let stranger = TestAgent::new("stranger");
    let result = json!({"status": "succeeded", "log": "ok", "rebooted": false, "finished_at": app.clock_now()});
    let path = format!("/v1/agent/jobs/{job_id}/result");
    stranger
        .post(&app, &path, &result, app.clock_now(), Tamper::None)
        .await
        .assert_problem(401, "unauthenticated");
    let reported = agent
        .post(&app, &path, &result, app.clock_now(), Tamper::None)
        .await;
    assert_eq!(reported.status.as_u16(), 204, "{}", reported.body);
    assert_eq!(
        agent
            .post(&app, &path, &result, app.clock_now(), Tamper::None)
            .await
            .status
            .as_u16(),
        204,
        "reporting again is harmless"
    );
    let mut failed = result.clone();
    failed["status"] = json!("failed");
    agent
        .post(&app, &path, &failed, app.clock_now(), Tamper::None)
        .await
        .assert_problem(409, "invalid-state");
    let p = fleet.detail(&id).await;
    assert_eq!(
        (p["status"].clone(), p["outstanding"].clone()),
        (json!("applied"), json!(0))
    );
    let events = app
        .call(
            As::Session(&fleet.owner),
            Method::GET,
            &format!(
                "/v1/orgs/acme/hosts/{}/events",
                agent.host_id.clone().unwrap_or_default()
            ),
            None,
        )
        .await
        .json();
    let kinds: Vec<String> = events["items"]
        .as_array()
        .map(|e| e.iter().map(|e| text(&e["kind"])).collect())
        .unwrap_or_default();
    assert!(kinds.contains(&"job_ran".to_owned()), "{kinds:?}");
    app.stop().await;
}

#[tokio::test]
async fn proposal_numbers_are_per_organization_and_gap_free() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    for i in 0..3 {
        fleet
            .host(
                &format!("h{i}"),
                json!([update(&format!("pkg{i}"), "1", "2", json!([]))]),
                json!({}),
            )
            .await;
    }
    for i in 0..3 {
        let mut body = policy_body(1);
        body["name"] = json!(format!("policy {i}"));
        body["scope"]["selector"] = json!("absent-label");
        fleet.policy(body).await;
    }
    let org = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq("acme"))
        .one(&app.state.db.orm)
        .await
        .expect("org")
        .expect("acme");
    // Three policies over the whole fleet, evaluated at once by concurrent workers.
    let mut body = policy_body(1);
    body["name"] = json!("all a");
    fleet.policy(body.clone()).await;
    body["name"] = json!("all b");
    fleet.policy(body.clone()).await;
    body["name"] = json!("all c");
    fleet.policy(body).await;
    let list = fleet.until(|l| l.len() == 3).await;
    let mut numbers: Vec<i64> = list.iter().filter_map(|p| p["number"].as_i64()).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, vec![1, 2, 3]);
    let seq = organizations::Entity::find_by_id(org.id)
        .one(&app.state.db.orm)
        .await
        .expect("org")
        .expect("acme")
        .proposal_seq;
    assert_eq!(seq, 3);
    app.stop().await;
}

#[tokio::test]
async fn getting_a_proposal_answers_each_documented_error() {
    let app = TestApp::builder().rate_limit(40, 0.001).start().await;
    let fleet = Fleet::new(&app).await;
    let (_, id) = fleet.one_proposal(1).await;
    let path = format!("/v1/orgs/acme/proposals/{id}");
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let seen = app
        .call(As::Session(&viewer), Method::GET, &path, None)
        .await;
    assert_eq!(seen.status.as_u16(), 200, "a viewer reads proposals");
    app.call(As::Nobody, Method::GET, &path, None)
        .await
        .assert_problem(401, "unauthenticated");
    for missing in [
        "/v1/orgs/acme/proposals/prp_00000000000000000000000000".to_owned(),
        "/v1/orgs/acme/proposals/not-an-id".to_owned(),
        path.replace("prp_", "pol_"),
        path.replace("/acme/", "/other/"),
    ] {
        app.call(As::Session(&fleet.owner), Method::GET, &missing, None)
            .await
            .assert_problem(404, "not-found");
    }
    // Another organization's member sees nothing of it.
    let other = app.sign_up("owner@other.test", "other").await;
    app.call(
        As::Session(&other),
        Method::GET,
        &path.replace("/acme/", "/other/"),
        None,
    )
    .await
    .assert_problem(404, "not-found");
    // Past the organization's burst: rate limited, for reads and decisions alike.
    let mut limited = None;
    for _ in 0..60 {
        let response = app
            .call(As::Session(&fleet.owner), Method::GET, &path, None)
            .await;
        if response.status.as_u16() == 429 {
            limited = Some(response);
            break;
        }
    }
    let limited = limited.expect("the burst runs out");
    limited.assert_problem(429, "rate-limited");
    assert!(limited.header("retry-after").is_some());
    fleet
        .decide(&fleet.owner, &id, "approve", None)
        .await
        .assert_problem(429, "rate-limited");
    app.stop().await;
}

#[tokio::test]
async fn a_policy_change_bumps_its_version_and_open_proposals_keep_theirs() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    fleet
        .host(
            "web-1",
            json!([update("curl", "1", "2", json!([]))]),
            json!({}),
        )
        .await;
    let policy = fleet.policy(policy_body(2)).await;
    assert_eq!(policy["version"], 1);
    let path = format!("/v1/orgs/acme/policies/{}", text(&policy["id"]));
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);

    // Bad input changes nothing.
    let mut unknown_group = policy_body(1);
    unknown_group["scope"]["groups"] = json!(["grp_00000000000000000000000000"]);
    let mut bad_selector = policy_body(1);
    bad_selector["scope"]["selector"] = json!("env in (");
    let mut too_many = policy_body(21);
    too_many["name"] = json!("x");
    for bad in [unknown_group, bad_selector, too_many] {
        app.call(As::Session(&fleet.owner), Method::PUT, &path, Some(bad))
            .await
            .assert_problem(400, "invalid-request");
    }
    app.call(
        As::Session(&fleet.owner),
        Method::POST,
        "/v1/orgs/acme/policies",
        Some(policy_body(1)),
    )
    .await
    .assert_problem(409, "conflict");
    let ops = app.member("acme", Role::Operator, "ops@acme.test").await;
    app.call(As::Session(&ops), Method::PUT, &path, Some(policy_body(1)))
        .await
        .assert_problem(403, "forbidden");

    let mut changed = policy_body(1);
    changed["name"] = json!("renamed");
    let replaced = app
        .call(As::Session(&fleet.owner), Method::PUT, &path, Some(changed))
        .await;
    assert_eq!(replaced.status.as_u16(), 200, "{}", replaced.body);
    assert_eq!(replaced.json()["version"], 2);
    assert_eq!(replaced.json()["required_approvals"], 1);
    app.run_pending_jobs().await;
    let p = fleet.detail(&id).await;
    assert_eq!(
        p["policy"],
        json!({"id": policy["id"], "name": "everything", "version": 1})
    );
    assert_eq!(p["required"], 2, "opened under version 1's rules");

    // Deleting the policy closes its open proposal.
    let deleted = app
        .call(As::Session(&fleet.owner), Method::DELETE, &path, None)
        .await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    assert_eq!(fleet.detail(&id).await["status"], "closed");
    app.call(As::Session(&fleet.owner), Method::GET, &path, None)
        .await
        .assert_problem(404, "not-found");
    app.stop().await;
}

/// Evaluations read a host's updates again only once a check-in has changed them; what they
/// keep in between must never show: after a run of check-ins evaluated by the app's worker
/// (which keeps them), an evaluation that reads everything afresh changes nothing.
#[tokio::test]
async fn an_evaluation_that_remembers_hosts_updates_agrees_with_one_that_reads_them_all() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let curl = |from: &str| update("curl", from, "8.5.0-3", json!([]));
    let openssl = update(
        "openssl",
        "3.0.13-1",
        "3.0.13-4",
        usn("USN-7001-1", "high", "CVE-2026-1000"),
    );
    let web = fleet
        .host(
            "web-1",
            json!([curl("8.5.0-1"), openssl.clone()]),
            json!({}),
        )
        .await;
    let db = fleet
        .host("db-1", json!([curl("8.5.0-1")]), json!({}))
        .await;
    let _cache = fleet
        .host("cache-1", json!([curl("8.5.0-2")]), json!({}))
        .await;
    let policy = fleet.policy(policy_body(1)).await;
    let policy_id = policy_uuid(&policy);
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);
    assert_eq!(app.reports.hosts(), 3, "the worker keeps what it read");

    // Hosts change under the kept copies: counts move, a host leaves a change and joins one.
    fleet
        .report(&web, json!([curl("8.5.0-1")]), json!({}))
        .await;
    fleet
        .report(&db, json!([curl("8.5.0-2"), openssl]), json!({}))
        .await;
    fleet.until(|l| l.len() == 1).await;
    let warm = fleet.detail(&id).await;
    assert_eq!(
        changes_of(&warm),
        vec![
            ("curl".into(), "8.5.0-1".into(), "8.5.0-3".into(), 1),
            ("curl".into(), "8.5.0-2".into(), "8.5.0-3".into(), 2),
            ("openssl".into(), "3.0.13-1".into(), "3.0.13-4".into(), 1),
        ],
        "the check-ins were read, not the kept copies"
    );

    app.clock.advance(chrono::Duration::minutes(5));
    let afresh = domain::policy::Reports::new();
    domain::policy::evaluate_policy(&app.state.db, &afresh, policy_id, app.clock_now())
        .await
        .expect("evaluate");
    assert_eq!(afresh.hosts(), 3);
    assert_eq!(
        fleet.detail(&id).await,
        warm,
        "reading everything afresh changes nothing, not even updated_at"
    );
    app.stop().await;
}

/// On SQLite a policy evaluation reads and works out everything before it asks for the write
/// lock, and asks only when it has something to write (a check-in waits behind every writer
/// queued before it). With another connection holding the lock, a run that finds the
/// proposals current finishes; a run with something to write waits for the lock and writes
/// once it is free. Postgres has no database-wide write lock: there the run's outcome is
/// checked, with no lock held.
#[tokio::test]
async fn an_evaluation_asks_for_the_write_lock_only_when_it_writes() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    fleet
        .host(
            "web-1",
            json!([update(
                "openssl",
                "3.0.13-1",
                "3.0.13-4",
                usn("USN-7001-1", "high", "CVE-2026-1000")
            )]),
            json!({}),
        )
        .await;
    let policy = fleet.policy(policy_body(1)).await;
    let policy_id = policy_uuid(&policy);
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);
    let before = fleet.detail(&id).await;
    assert_eq!(before["known_exploited"], false);

    let lock = match &app.state.db.pool {
        platform::db::Pool::Sqlite(pool) => {
            let mut holder = pool.acquire().await.expect("a connection");
            sqlx::raw_sql("BEGIN IMMEDIATE")
                .execute(&mut *holder)
                .await
                .expect("take the write lock");
            Some(holder)
        }
        platform::db::Pool::Postgres(_) => None,
    };
    let evaluate =
        || domain::policy::evaluate_policy(&app.state.db, &app.reports, policy_id, app.clock_now());
    let ran = tokio::time::timeout(std::time::Duration::from_secs(5), evaluate())
        .await
        .expect("nothing to write: no wait for the lock")
        .expect("evaluate");
    assert_eq!(ran, domain::policy::Evaluated::Done);

    // The CVE becomes known-exploited: the proposal has something to write.
    let Some(mut holder) = lock else {
        mark_exploited(&app).await;
        evaluate().await.expect("evaluate");
        assert_eq!(fleet.detail(&id).await["known_exploited"], true);
        app.stop().await;
        return;
    };
    sqlx::raw_sql("COMMIT")
        .execute(&mut *holder)
        .await
        .expect("free the lock");
    mark_exploited(&app).await;
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut *holder)
        .await
        .expect("take the write lock again");
    let mut run = Box::pin(evaluate());
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(2), &mut run)
            .await
            .is_err(),
        "a run with something to write waits for the lock"
    );
    let waiting = fleet.detail(&id).await;
    assert_eq!(
        (&waiting["known_exploited"], &waiting["updated_at"]),
        (&before["known_exploited"], &before["updated_at"]),
        "nothing written while the lock is held"
    );
    sqlx::raw_sql("COMMIT")
        .execute(&mut *holder)
        .await
        .expect("free the lock");
    drop(holder);
    assert_eq!(
        run.await.expect("evaluate"),
        domain::policy::Evaluated::Done
    );
    assert_eq!(fleet.detail(&id).await["known_exploited"], true);
    app.stop().await;
}

/// CVE-2026-1000 goes on the known-exploited catalogue.
async fn mark_exploited(app: &TestApp) {
    known_exploited::ActiveModel {
        cve: Set("CVE-2026-1000".into()),
        added_at: Set(app.clock_now()),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("kev");
}
