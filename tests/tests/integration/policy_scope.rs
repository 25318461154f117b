//! Policy scope and windows fail closed: a stored selector, group list or window that cannot
//! be read never makes a policy cover every host, or let a change out as if it had no window.

use api::identity::roles::Role;
use entities::{policies, proposals};
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
