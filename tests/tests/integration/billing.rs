//! Plans and billing (issue 11): the plan lookup and its gates, the payment webhook, usage,
//! checkout and the daily report to the processor.

use domain::billing::Plan;
use reqwest::Method;
use serde_json::json;
use tests::{As, Session, TestApp, agent::TestAgent};

async fn enrollment_token(app: &TestApp, owner: &Session, slug: &str) -> String {
    let created = app
        .call(
            As::Session(owner),
            Method::POST,
            &format!("/v1/orgs/{slug}/enrollment-tokens"),
            Some(json!({"name": "fleet"})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    created.json()["token"]
        .as_str()
        .expect("token value")
        .to_owned()
}

async fn org_id(app: &TestApp, slug: &str) -> platform::ids::OrgId {
    use entities::organizations;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    organizations::Entity::find()
        .filter(organizations::Column::Slug.eq(slug))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("organization")
        .id
        .into()
}

async fn plan_shown(app: &TestApp, owner: &Session, slug: &str) -> String {
    let org = app
        .call(
            As::Session(owner),
            Method::GET,
            &format!("/v1/orgs/{slug}"),
            None,
        )
        .await;
    assert_eq!(org.status.as_u16(), 200, "{}", org.body);
    org.json()["plan"].as_str().expect("plan").to_owned()
}

#[tokio::test]
async fn the_free_plan_admits_five_hosts_not_decommissioned_and_the_sixth_is_plan_required() {
    let app = TestApp::builder().payments().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    let token = enrollment_token(&app, &owner, "acme").await;
    let mut agents: Vec<TestAgent> = (1..=6)
        .map(|n| TestAgent::new(&format!("web-{n}")))
        .collect();
    for agent in agents.iter_mut().take(5) {
        let enrolled = agent.enroll(&app, &token).await;
        assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
    }
    let sixth = agents[5].enroll(&app, &token).await;
    let problem = sixth.assert_problem(403, "plan-required");
    assert!(
        problem["detail"].as_str().is_some_and(|d| d.contains('5')),
        "{problem}"
    );

    // A pending host enrolling again is already counted.
    let again = agents[0].enroll(&app, &token).await;
    assert_eq!(again.status.as_u16(), 201, "{}", again.body);

    // Decommissioned hosts do not count: one decommissioned, the sixth machine fits.
    let host = agents[1].host_id.clone().expect("host id");
    let decommissioned = app
        .call(
            As::Session(&owner),
            Method::POST,
            &format!("/v1/orgs/acme/hosts/{host}/decommission"),
            None,
        )
        .await;
    assert!(
        decommissioned.status.is_success(),
        "{}",
        decommissioned.body
    );
    let sixth = agents[5].enroll(&app, &token).await;
    assert_eq!(sixth.status.as_u16(), 201, "{}", sixth.body);
    // Reviving the decommissioned one would make six again.
    agents[1]
        .enroll(&app, &token)
        .await
        .assert_problem(403, "plan-required");

    // A plan change takes effect on the next request.
    domain::billing::set_plan(
        &app.state.db.orm,
        org_id(&app, "acme").await,
        &Plan::Team,
        app.clock_now(),
    )
    .await
    .expect("set plan");
    assert_eq!(plan_shown(&app, &owner, "acme").await, "team");
    let revived = agents[1].enroll(&app, &token).await;
    assert_eq!(revived.status.as_u16(), 201, "{}", revived.body);
}

#[tokio::test]
async fn a_deployment_without_payments_has_every_feature_and_no_host_cap() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    assert_eq!(plan_shown(&app, &owner, "acme").await, "enterprise");
    let token = enrollment_token(&app, &owner, "acme").await;
    for n in 1..=7 {
        let enrolled = TestAgent::new(&format!("web-{n}"))
            .enroll(&app, &token)
            .await;
        assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
    }
}

#[tokio::test]
async fn api_plan_set_changes_the_plan_from_the_next_request_and_refuses_unknown_plans() {
    let app = TestApp::builder().payments().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fleet-api"))
            .args(args)
            .env_clear()
            .env("DATABASE_URL", app.database.url())
            .env("RUST_LOG", "warn")
            .output()
            .expect("run api")
    };
    let set = run(&["plan", "set", "acme", "business"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&set.stdout).trim(),
        "acme: plan set to business"
    );
    assert_eq!(plan_shown(&app, &owner, "acme").await, "business");

    let unknown_plan = run(&["plan", "set", "acme", "gold"]);
    assert!(!unknown_plan.status.success());
    let unknown_org = run(&["plan", "set", "nobody", "team"]);
    assert!(!unknown_org.status.success());
    assert!(String::from_utf8_lossy(&unknown_org.stderr).contains("nobody"));
    assert_eq!(plan_shown(&app, &owner, "acme").await, "business");

    // Audited, by the operator.
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events",
            None,
        )
        .await;
    let entries = audit.json()["items"].clone();
    assert!(
        entries
            .as_array()
            .expect("items")
            .iter()
            .any(|e| e["action"] == "billing.plan_set"),
        "{entries}"
    );
}
