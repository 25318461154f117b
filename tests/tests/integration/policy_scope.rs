//! Stored values that cannot be read fail closed or loudly, never as a default: a selector,
//! group list or window never makes a policy cover every host or let a change out as if it had
//! no window; a host whose labels cannot be read is in no selector's scope and is a 500 until
//! new labels repair it; preflight and host jobs name or refuse what they cannot read.

use domain::roles::Role;
use entities::{groups, host_jobs, hosts, policies, proposals};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
use serde_json::{Value, json};
use tests::{As, TestApp, agent::TestAgent};

use crate::proposals::Fleet;

/// The proposals tests' fleet, with what these tests ask of it.
struct Org<'a> {
    app: &'a TestApp,
    fleet: Fleet<'a>,
}

impl<'a> Org<'a> {
    async fn new(app: &'a TestApp) -> Org<'a> {
        Org {
            app,
            fleet: Fleet::new(app).await,
        }
    }

    /// A call by the owner that must succeed; its answer.
    async fn call(&self, method: Method, path: &str, body: Value) -> Value {
        let answer = self
            .app
            .call(As::Session(&self.fleet.owner), method, path, Some(body))
            .await;
        assert!(
            answer.status.is_success(),
            "{path}: {} {}",
            answer.status,
            answer.body
        );
        answer.json()
    }

    /// A GET by the owner that must succeed; its answer.
    async fn get(&self, path: &str) -> Value {
        let answer = self.answer(Method::GET, path, None).await;
        assert!(
            answer.status.is_success(),
            "{path}: {} {}",
            answer.status,
            answer.body
        );
        answer.json()
    }

    /// A call by the owner, whatever it answers.
    async fn answer(&self, method: Method, path: &str, body: Option<Value>) -> tests::TestResponse {
        self.app
            .call(As::Session(&self.fleet.owner), method, path, body)
            .await
    }

    /// Enrols `hostname` and reports `updates`.
    async fn host(&self, hostname: &str, updates: Value) -> TestAgent {
        self.fleet.host(hostname, updates, json!({})).await
    }

    /// A check-in with a new inventory: the host is evaluated, and so are its policies.
    async fn report(&self, agent: &TestAgent, updates: Value) {
        self.fleet.report(agent, updates, json!({})).await
    }

    /// Creates a policy: its id as shown and as stored.
    async fn policy(&self, body: Value) -> (String, uuid::Uuid) {
        let created = self.fleet.policy(body).await;
        let id = created["id"].as_str().unwrap_or_default().to_owned();
        let uuid = platform::ids::PolicyId::parse(&id)
            .map(platform::ids::PolicyId::uuid)
            .expect("pol id");
        (id, uuid)
    }

    /// The policy's proposals, newest first.
    async fn proposals(&self, policy: &str) -> Vec<Value> {
        self.fleet.list(&format!("?policy={policy}")).await
    }

    /// The hostnames a proposal targets.
    async fn targets(&self, proposal: &Value) -> Vec<String> {
        let detail = self
            .fleet
            .detail(proposal["id"].as_str().unwrap_or_default())
            .await;
        detail["targets"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["hostname"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn update(name: &str, from: &str, to: &str) -> Value {
    crate::proposals::update(name, from, to, json!([]))
}

fn scope_policy(name: &str, scope: Value) -> Value {
    json!({
        "name": name, "scope": scope, "required_approvals": 1,
        "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all",
    })
}

async fn set_policy_column(
    app: &TestApp,
    policy: uuid::Uuid,
    column: policies::Column,
    value: &str,
) {
    policies::Entity::update_many()
        .col_expr(column, Expr::value(value))
        .filter(policies::Column::Id.eq(policy))
        .exec(&app.state.db.orm)
        .await
        .expect("corrupt the policy");
}

#[tokio::test]
async fn a_policy_whose_stored_selector_or_group_list_cannot_be_read_covers_no_host() {
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([update("curl", "1", "2")])).await;
    let db = org.host("db-1", json!([update("curl", "1", "2")])).await;
    let web_id = web.host_id.clone().unwrap_or_default();
    org.call(
        Method::PATCH,
        &format!("/v1/orgs/acme/hosts/{web_id}"),
        json!({"labels": {"env": "prod"}}),
    )
    .await;
    let group = org
        .call(Method::POST, "/v1/orgs/acme/groups", json!({"name": "web"}))
        .await;
    let group_id = group["id"].as_str().unwrap_or_default().to_owned();
    org.call(
        Method::PUT,
        &format!("/v1/orgs/acme/groups/{group_id}/hosts"),
        json!({"hosts": [web_id]}),
    )
    .await;
    let (by_selector, by_selector_id) = org
        .policy(scope_policy(
            "by-selector",
            json!({"groups": [], "selector": "env=prod"}),
        ))
        .await;
    let (by_group, by_group_id) = org
        .policy(scope_policy("by-group", json!({"groups": [group_id]})))
        .await;
    app.run_pending_jobs().await;
    for policy in [&by_selector, &by_group] {
        let list = org.proposals(policy).await;
        assert_eq!(list.len(), 1, "{list:#?}");
        assert_eq!(
            org.targets(&list[0]).await,
            vec!["web-1"],
            "only web-1 is in scope"
        );
    }

    // The stored scope becomes unreadable; db-1 checks in again and its policies evaluate.
    set_policy_column(&app, by_selector_id, policies::Column::Selector, "env in (").await;
    set_policy_column(
        &app,
        by_group_id,
        policies::Column::ScopeGroups,
        "{not json",
    )
    .await;
    org.report(&db, json!([update("curl", "1", "2")])).await;
    app.run_pending_jobs().await;

    for policy in [&by_selector, &by_group] {
        let list = org.proposals(policy).await;
        for proposal in &list {
            let targets = org.targets(proposal).await;
            assert!(
                !targets.contains(&"db-1".to_owned()),
                "an unreadable scope must not cover every host: {proposal:#?} targets {targets:?}"
            );
        }
        assert!(
            list.iter().all(|p| p["status"] == "closed"),
            "an unreadable scope covers no host, so nothing is left to propose: {list:#?}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn a_window_that_cannot_be_read_never_lets_a_change_go_ahead_as_if_there_were_none() {
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([update("curl", "1", "2")])).await;
    // Saturdays 02:00 UTC; the test clock starts on a Monday morning, so the window is shut.
    let (policy, policy_id) = org
        .policy(json!({
            "name": "windowed", "scope": {"groups": []}, "required_approvals": 1,
            "apply": "asap_in_window", "reboot": "never", "auto_merge": false, "updates": "all",
            "window": {"rrule": "FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0", "duration_minutes": 120, "time_zone": "UTC"},
        }))
        .await;
    app.run_pending_jobs().await;
    let list = org.proposals(&policy).await;
    assert_eq!(list.len(), 1, "{list:#?}");
    let first = list[0]["id"].as_str().unwrap_or_default().to_owned();

    // The proposal's own copy of the window becomes unreadable: approving is refused instead
    // of going ahead now.
    let first_id = platform::ids::ProposalId::parse(&first)
        .map(platform::ids::ProposalId::uuid)
        .expect("prp id");
    proposals::Entity::update_many()
        .col_expr(proposals::Column::Window, Expr::value("{\"rrule\":"))
        .filter(proposals::Column::Id.eq(first_id))
        .exec(&app.state.db.orm)
        .await
        .expect("corrupt the proposal");
    let operator = app
        .member("acme", Role::Operator, "operator@acme.test")
        .await;
    let approve = app
        .call(
            As::Session(&operator),
            Method::POST,
            &format!("/v1/orgs/acme/proposals/{first}/approve"),
            None,
        )
        .await;
    approve.assert_problem(409, "not-executable");
    assert_eq!(org.proposals(&policy).await[0]["status"], "open");

    // The policy's window becomes unreadable and a new update arrives: no proposal opens (or
    // goes ahead) under rules that cannot be read; the policy covers no host.
    set_policy_column(&app, policy_id, policies::Column::Window, "{\"rrule\": 5}").await;
    org.report(
        &web,
        json!([update("curl", "1", "2"), update("git", "2.43-1", "2.43-2")]),
    )
    .await;
    app.run_pending_jobs().await;
    let list = org.proposals(&policy).await;
    assert!(
        list.iter().all(|p| p["status"] == "closed"),
        "nothing may be proposed under a window that cannot be read: {list:#?}"
    );
    app.stop().await;
}

/// Writes `value` into a host's `column` directly, as corruption would.
async fn set_host_column(app: &TestApp, host: &str, column: hosts::Column, value: &str) {
    let id = platform::ids::HostId::parse(host)
        .map(platform::ids::HostId::uuid)
        .expect("hst id");
    hosts::Entity::update_many()
        .col_expr(column, Expr::value(value))
        .filter(hosts::Column::Id.eq(id))
        .exec(&app.state.db.orm)
        .await
        .expect("corrupt the host");
}

/// The hostnames of the hosts a group holds.
async fn members(org: &Org<'_>, group: &str) -> Vec<String> {
    let listed = org.get(&format!("/v1/orgs/acme/hosts?group={group}")).await;
    listed["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|h| h["hostname"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_host_whose_stored_labels_cannot_be_read_matches_no_selector_not_even_a_negative_one() {
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([update("curl", "1", "2")])).await;
    let db = org.host("db-1", json!([update("curl", "1", "2")])).await;
    let web_id = web.host_id.clone().unwrap_or_default();
    let db_id = db.host_id.clone().unwrap_or_default();
    for (id, env) in [(&web_id, "prod"), (&db_id, "staging")] {
        org.call(
            Method::PATCH,
            &format!("/v1/orgs/acme/hosts/{id}"),
            json!({"labels": {"env": env}}),
        )
        .await;
    }
    let before = org
        .call(
            Method::POST,
            "/v1/orgs/acme/groups",
            json!({"name": "not staging", "selector": "env!=staging"}),
        )
        .await;
    let before = before["id"].as_str().unwrap_or_default().to_owned();
    let (by_group, _) = org
        .policy(scope_policy("by-group", json!({"groups": [before]})))
        .await;
    let (by_selector, _) = org
        .policy(scope_policy(
            "by-selector",
            json!({"groups": [], "selector": "env!=staging"}),
        ))
        .await;
    app.run_pending_jobs().await;
    assert_eq!(members(&org, &before).await, vec!["web-1"]);

    // db-1's labels become unreadable. Its next check-in re-evaluates it (host.evaluate), and a
    // group created afterwards evaluates every host (group.evaluate): neither may read the
    // labels as "none", which `env!=staging` would match.
    set_host_column(&app, &db_id, hosts::Column::Labels, "{broken").await;
    org.report(&db, json!([update("curl", "1", "2")])).await;
    let after = org
        .call(
            Method::POST,
            "/v1/orgs/acme/groups",
            json!({"name": "not staging either", "selector": "env!=staging"}),
        )
        .await;
    let after = after["id"].as_str().unwrap_or_default().to_owned();
    app.run_pending_jobs().await;
    for group in [&before, &after] {
        let found = org.get(&format!("/v1/orgs/acme/groups/{group}")).await;
        assert_eq!(
            found["label_hosts"], 1,
            "only web-1 is labelled into the group: {found:#?}"
        );
        assert_eq!(members(&org, group).await, vec!["web-1"]);
    }
    for policy in [&by_group, &by_selector] {
        let list = org.proposals(policy).await;
        let open: Vec<&Value> = list.iter().filter(|p| p["status"] == "open").collect();
        assert_eq!(open.len(), 1, "{list:#?}");
        assert_eq!(
            org.targets(open[0]).await,
            vec!["web-1"],
            "a host whose labels cannot be read is in no selector's scope"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn a_host_whose_stored_labels_cannot_be_read_is_a_500_until_a_patch_of_its_labels_repairs_it()
{
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([])).await;
    org.host("db-1", json!([])).await;
    let web_id = web.host_id.clone().unwrap_or_default();
    set_host_column(&app, &web_id, hosts::Column::Labels, "[1, 2").await;
    let path = format!("/v1/orgs/acme/hosts/{web_id}");

    // Never shown as if it had no labels: the host and any page holding it are a 500 problem
    // (the cause, naming the column, is logged).
    org.answer(Method::GET, &path, None)
        .await
        .assert_problem(500, "internal");
    org.answer(Method::GET, "/v1/orgs/acme/hosts", None)
        .await
        .assert_problem(500, "internal");

    // Replacing the labels needs no old value: the new set is written.
    let patched = org
        .call(Method::PATCH, &path, json!({"labels": {"env": "prod"}}))
        .await;
    assert_eq!(patched["labels"], json!({"env": "prod"}));
    let listed = org.get("/v1/orgs/acme/hosts").await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2));
    let events = org.get(&format!("{path}/events")).await;
    let changed = events["items"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["kind"] == "labels_changed"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        changed["details"],
        json!({"from": null, "to": {"env": "prod"}}),
        "what the labels were cannot be said"
    );
    app.stop().await;
}

#[tokio::test]
async fn preflight_fails_a_host_whose_held_packages_or_permissions_cannot_be_read() {
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([update("curl", "1", "2")])).await;
    let db = org.host("db-1", json!([update("curl", "1", "2")])).await;
    let (policy, _) = org
        .policy(scope_policy("everything", json!({"groups": []})))
        .await;
    app.run_pending_jobs().await;
    let list = org.proposals(&policy).await;
    assert_eq!(list.len(), 1, "{list:#?}");
    let id = list[0]["id"].as_str().unwrap_or_default().to_owned();
    let web_id = web.host_id.clone().unwrap_or_default();
    let db_id = db.host_id.clone().unwrap_or_default();
    set_host_column(&app, &web_id, hosts::Column::HeldPackages, "{\"curl\":1}").await;
    set_host_column(
        &app,
        &db_id,
        hosts::Column::AgentPermissions,
        "apply_updates",
    )
    .await;
    let refused = org
        .answer(
            Method::POST,
            &format!("/v1/orgs/acme/proposals/{id}/approve"),
            None,
        )
        .await;
    let problem = refused.assert_problem(409, "preflight-failed");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("db-1's agent permissions cannot be read")
            && detail.contains("web-1's held packages cannot be read"),
        "{detail}"
    );
    assert_eq!(org.proposals(&policy).await[0]["status"], "open");
    app.stop().await;
}

#[tokio::test]
async fn a_group_whose_stored_selector_cannot_be_parsed_picks_no_host_by_label() {
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([])).await;
    let web_id = web.host_id.clone().unwrap_or_default();
    org.call(
        Method::PATCH,
        &format!("/v1/orgs/acme/hosts/{web_id}"),
        json!({"labels": {"env": "prod"}}),
    )
    .await;
    let group = org
        .call(
            Method::POST,
            "/v1/orgs/acme/groups",
            json!({"name": "not staging", "selector": "env!=staging"}),
        )
        .await;
    let group_id = group["id"].as_str().unwrap_or_default().to_owned();
    app.run_pending_jobs().await;
    assert_eq!(members(&org, &group_id).await, vec!["web-1"]);

    // The stored selector becomes unparsable; the group is evaluated again (group.evaluate)
    // and so is its host (host.evaluate): neither reads it as "no selector" or keeps the old
    // members.
    let uuid = platform::ids::GroupId::parse(&group_id)
        .map(platform::ids::GroupId::uuid)
        .expect("grp id");
    groups::Entity::update_many()
        .col_expr(groups::Column::Selector, Expr::value("env in ("))
        .filter(groups::Column::Id.eq(uuid))
        .exec(&app.state.db.orm)
        .await
        .expect("corrupt the group");
    app.state
        .queue
        .push(domain::fleet::jobs::EvaluateGroup { group_id: uuid })
        .await
        .expect("queued");
    org.report(&web, json!([])).await;
    app.run_pending_jobs().await;
    let found = org.get(&format!("/v1/orgs/acme/groups/{group_id}")).await;
    assert_eq!(found["label_hosts"], 0, "{found:#?}");
    assert!(members(&org, &group_id).await.is_empty());
    app.stop().await;
}

/// The jobs a check-in of `agent` is handed.
async fn jobs_handed_to(app: &TestApp, agent: &TestAgent) -> Vec<Value> {
    let body = agent.check_in_body("same");
    let answer = agent
        .post(
            app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            tests::agent::Tamper::None,
        )
        .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    answer.json()["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn permissions_that_cannot_be_read_permit_no_reboot_and_a_payload_that_cannot_be_read_is_not_handed_out()
 {
    let app = TestApp::new().await;
    let org = Org::new(&app).await;
    let web = org.host("web-1", json!([update("curl", "1", "2")])).await;
    let db = org.host("db-1", json!([update("curl", "1", "2")])).await;
    let web_id = web.host_id.clone().unwrap_or_default();
    set_host_column(&app, &web_id, hosts::Column::AgentPermissions, "reboot").await;
    // No approval needed: the proposal goes ahead at once (no preflight) with reboots.
    let mut body = scope_policy("everything", json!({"groups": []}));
    body["required_approvals"] = json!(0);
    body["reboot"] = json!("immediate");
    let (policy, _) = org.policy(body).await;
    app.run_pending_jobs().await;
    let list = org.proposals(&policy).await;
    assert_eq!(list[0]["status"], "approved", "{list:#?}");

    let jobs = jobs_handed_to(&app, &web).await;
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    assert_eq!(
        jobs[0]["reboot"], "never",
        "permissions that cannot be read never permit a reboot"
    );

    let db_uuid = platform::ids::HostId::parse(db.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("hst id");
    host_jobs::Entity::update_many()
        .col_expr(host_jobs::Column::Payload, Expr::value("{\"proposal_id\":"))
        .filter(host_jobs::Column::HostId.eq(db_uuid))
        .exec(&app.state.db.orm)
        .await
        .expect("corrupt the job");
    assert!(
        jobs_handed_to(&app, &db).await.is_empty(),
        "the agent is never told to do something other than what was approved"
    );
    app.stop().await;
}
