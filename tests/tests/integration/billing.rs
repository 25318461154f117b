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
    // Written behind the API's back.
    app.identity_settled().await;
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
    // Run asynchronously: the test's own server and worker share this thread and must go on
    // (a blocked thread would keep their SQLite write lock from the program).
    let run = |args: &'static [&'static str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet-api"))
            .args(args)
            .env_clear()
            .env("DATABASE_URL", app.database.url())
            .env("RUST_LOG", "warn")
            .output()
    };
    let set = run(&["plan", "set", "acme", "business"])
        .await
        .expect("run api");
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

    let unknown_plan = run(&["plan", "set", "acme", "gold"])
        .await
        .expect("run api");
    assert!(!unknown_plan.status.success());
    let unknown_org = run(&["plan", "set", "nobody", "team"])
        .await
        .expect("run api");
    assert!(!unknown_org.status.success());
    let said = String::from_utf8_lossy(&unknown_org.stderr);
    assert!(
        said.contains("no organization has the slug \"nobody\""),
        "{said}"
    );
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

// ---------------------------------------------------------------------------------------------
// The payment webhook.

use tests::payments::{self, checkout_completed, payment_failed, subscription_event};

async fn subscription(app: &TestApp, slug: &str) -> Option<entities::subscriptions::Model> {
    use sea_orm::EntityTrait;
    entities::subscriptions::Entity::find_by_id(org_id(app, slug).await.uuid())
        .one(&app.state.db.orm)
        .await
        .expect("query")
}

async fn recorded_events(app: &TestApp) -> u64 {
    use sea_orm::{EntityTrait, PaginatorTrait};
    entities::payment_events::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count")
}

fn now_s(app: &TestApp) -> i64 {
    app.clock_now().timestamp()
}

#[track_caller]
fn acknowledged(response: &tests::TestResponse) {
    assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    assert_eq!(response.json(), json!({"received": true}));
}

/// A paying deployment with acme signed up and its customer linked by a checkout.
async fn linked(app: &TestApp) -> Session {
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let t = now_s(app);
    acknowledged(
        &app.post_payment_event(&checkout_completed("evt_checkout", t, "cus_acme", "acme"))
            .await,
    );
    owner
}

#[tokio::test]
async fn a_signed_subscription_makes_the_plan_business_and_deleting_it_returns_to_free() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let token = enrollment_token(&app, &owner, "acme").await;
    for n in 1..=5 {
        let enrolled = TestAgent::new(&format!("web-{n}"))
            .enroll(&app, &token)
            .await;
        assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
    }
    let mut sixth = TestAgent::new("web-6");
    sixth
        .enroll(&app, &token)
        .await
        .assert_problem(403, "plan-required");

    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_created",
            "created",
            t,
            "cus_acme",
            "sub_1",
            "business",
            "active",
        ))
        .await,
    );
    assert_eq!(plan_shown(&app, &owner, "acme").await, "business");
    let row = subscription(&app, "acme").await.expect("subscription");
    assert_eq!(row.status.as_deref(), Some("active"));
    assert_eq!(row.subscription_id.as_deref(), Some("sub_1"));
    assert_eq!(
        row.billable_from,
        Some(app.clock_now().date_naive()),
        "the subscription's start day"
    );
    assert_eq!(
        row.current_period_end.map(|t| t.timestamp()),
        Some(t + 30 * 86_400)
    );
    let enrolled = sixth.enroll(&app, &token).await;
    assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);

    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_deleted",
            "deleted",
            t + 1,
            "cus_acme",
            "sub_1",
            "business",
            "canceled",
        ))
        .await,
    );
    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    assert_eq!(
        subscription(&app, "acme").await.and_then(|r| r.status),
        Some("canceled".into())
    );
}

#[tokio::test]
async fn the_same_event_twice_and_twice_at_once_has_one_effect() {
    let app = TestApp::builder().payments().start().await;
    let _owner = linked(&app).await;
    let t = now_s(&app);
    // Sequentially: the second is acknowledged and not handled again.
    let failed = payment_failed("evt_failed", t, "cus_acme");
    acknowledged(&app.post_payment_event(&failed).await);
    acknowledged(&app.post_payment_event(&failed).await);
    // At the same instant: both acknowledged, one handled.
    let again = payment_failed("evt_failed_2", t + 1, "cus_acme");
    let (a, b) = tokio::join!(
        app.post_payment_event(&again),
        app.post_payment_event(&again)
    );
    acknowledged(&a);
    acknowledged(&b);
    assert_eq!(recorded_events(&app).await, 3, "checkout + two failures");

    app.run_pending_jobs().await;
    let to_owner = app
        .smtp
        .messages()
        .await
        .into_iter()
        .filter(|m| {
            m.header("subject")
                .is_some_and(|s| s.contains("Payment failed"))
        })
        .count();
    assert_eq!(to_owner, 2, "one email per distinct event");
    assert_eq!(
        subscription(&app, "acme").await.and_then(|r| r.status),
        Some("past_due".into())
    );
}

#[tokio::test]
async fn unsigned_badly_signed_stale_and_malformed_events_are_400_and_change_nothing() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let t = now_s(&app);
    let event = subscription_event(
        "evt_1", "created", t, "cus_acme", "sub_1", "business", "active",
    );
    let body = event.to_string().into_bytes();
    let good = payments::signature(&body, app.clock_now());

    // A signature over different bytes: one space added.
    let mut spaced = body.clone();
    spaced.push(b' ');
    app.post_payment_raw(spaced, Some(&good))
        .await
        .assert_problem(400, "invalid-request");
    // A timestamp 301 s old.
    let old = payments::signature(&body, app.clock_now() - chrono::Duration::seconds(301));
    app.post_payment_raw(body.clone(), Some(&old))
        .await
        .assert_problem(400, "invalid-request");
    // No header; a header with only an unknown scheme.
    app.post_payment_raw(body.clone(), None)
        .await
        .assert_problem(400, "invalid-request");
    app.post_payment_raw(body.clone(), Some(&good.replace("v1=", "v9=")))
        .await
        .assert_problem(400, "invalid-request");
    // Signed, but not JSON; signed JSON that is not an event.
    for not_event in [&b"not json at all"[..], &br#"{"id":"evt_x"}"#[..]] {
        let signed = payments::signature(not_event, app.clock_now());
        app.post_payment_raw(not_event.to_vec(), Some(&signed))
            .await
            .assert_problem(400, "invalid-request");
    }
    // 2 MiB.
    let huge = vec![b' '; 2 * 1024 * 1024];
    let signed = payments::signature(&huge, app.clock_now());
    app.post_payment_raw(huge, Some(&signed))
        .await
        .assert_problem(413, "payload-too-large");

    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    assert_eq!(recorded_events(&app).await, 1, "only the checkout");
    // The refused attempts did not use the event up: signed properly, it is handled.
    acknowledged(&app.post_payment_raw(body.clone(), Some(&good)).await);
    assert_eq!(plan_shown(&app, &owner, "acme").await, "business");

    // A replay of that valid request later is refused for its age, and within the window is
    // a duplicate that changes nothing (the owner went back to free meanwhile).
    domain::billing::set_plan(
        &app.state.db.orm,
        org_id(&app, "acme").await,
        &Plan::Free,
        app.clock_now(),
    )
    .await
    .expect("set plan");
    // Written behind the API's back.
    app.identity_settled().await;
    acknowledged(&app.post_payment_raw(body.clone(), Some(&good)).await);
    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    app.clock.advance(chrono::Duration::seconds(301));
    app.post_payment_raw(body, Some(&good))
        .await
        .assert_problem(400, "invalid-request");
}

#[tokio::test]
async fn without_a_webhook_secret_the_webhook_is_not_configured() {
    let app = TestApp::new().await;
    let event = payment_failed("evt_1", now_s(&app), "cus_1");
    app.post_payment_event(&event)
        .await
        .assert_problem(503, "not-configured");
    assert_eq!(recorded_events(&app).await, 0);
}

#[tokio::test]
async fn events_about_unknown_customers_and_unhandled_kinds_are_acknowledged_and_ignored() {
    let app = TestApp::builder().payments().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&payment_failed("evt_1", t, "cus_stranger"))
            .await,
    );
    acknowledged(
        &app.post_payment_event(&checkout_completed("evt_2", t, "cus_x", "no-such-org"))
            .await,
    );
    acknowledged(
        &app.post_payment_event(&json!({
            "id": "evt_3", "type": "charge.refunded", "created": t, "data": {"object": {"id": "ch_1"}}
        }))
        .await,
    );
    assert!(subscription(&app, "acme").await.is_none());
    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    app.run_pending_jobs().await;
    assert!(!app.smtp.messages().await.iter().any(|m| {
        m.header("subject")
            .is_some_and(|s| s.contains("Payment failed"))
    }));
}

#[tokio::test]
async fn a_subscription_arriving_before_its_checkout_is_applied_when_the_checkout_comes() {
    let app = TestApp::builder().payments().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_sub", "created", t, "cus_acme", "sub_1", "team", "active",
        ))
        .await,
    );
    assert_eq!(plan_shown(&app, &owner, "acme").await, "free");
    acknowledged(
        &app.post_payment_event(&checkout_completed(
            "evt_checkout",
            t + 1,
            "cus_acme",
            "acme",
        ))
        .await,
    );
    assert_eq!(plan_shown(&app, &owner, "acme").await, "team");
    // Not applied twice: a redelivery of the early event is a duplicate.
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_sub", "created", t, "cus_acme", "sub_1", "team", "active",
        ))
        .await,
    );
    assert_eq!(recorded_events(&app).await, 2);
}

#[tokio::test]
async fn of_two_events_for_one_subscription_the_newer_created_wins_in_either_order() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let t = now_s(&app);
    let older = subscription_event("evt_a", "updated", t, "cus_acme", "sub_1", "team", "active");
    let newer = subscription_event(
        "evt_b",
        "updated",
        t + 60,
        "cus_acme",
        "sub_1",
        "business",
        "active",
    );
    acknowledged(&app.post_payment_event(&newer).await);
    acknowledged(&app.post_payment_event(&older).await);
    assert_eq!(plan_shown(&app, &owner, "acme").await, "business");
    // A delete older than the newest update changes nothing either.
    let stale_delete = subscription_event(
        "evt_c",
        "deleted",
        t + 30,
        "cus_acme",
        "sub_1",
        "business",
        "canceled",
    );
    acknowledged(&app.post_payment_event(&stale_delete).await);
    assert_eq!(plan_shown(&app, &owner, "acme").await, "business");
    assert_eq!(recorded_events(&app).await, 4);
}

// ---------------------------------------------------------------------------------------------
// GET /billing and GET /billing/usage.

/// Starts the day after the clock's, at 00:30 UTC, and lets the scheduler queue what is due
/// (yesterday's rollup, the report) and the worker run it.
async fn next_day(app: &TestApp, scheduler: &scheduler::Scheduler) {
    let tomorrow = app.clock_now().date_naive() + chrono::Duration::days(1);
    app.clock
        .set(tomorrow.and_hms_opt(0, 30, 0).expect("a time").and_utc());
    scheduler.tick(app.clock_now()).await.expect("tick");
    app.run_pending_jobs().await;
}

fn scheduler_of(app: &TestApp) -> scheduler::Scheduler {
    scheduler::Scheduler::new(app.state.db.clone(), std::sync::Arc::new(app.clock.clone()))
}

/// Enrols `n` agents in acme and returns them.
async fn fleet(app: &TestApp, owner: &Session, n: usize) -> Vec<TestAgent> {
    let token = enrollment_token(app, owner, "acme").await;
    let mut agents = Vec::new();
    for i in 1..=n {
        let mut agent = TestAgent::new(&format!("host-{i}"));
        let enrolled = agent.enroll(app, &token).await;
        assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
        agents.push(agent);
    }
    agents
}

async fn check_in(app: &TestApp, agent: &TestAgent) {
    let answer = agent.check_in(app, "digest-1").await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
}

async fn usage(app: &TestApp, owner: &Session, query: &str) -> serde_json::Value {
    let response = app
        .call(
            As::Session(owner),
            Method::GET,
            &format!("/v1/orgs/acme/billing/usage{query}"),
            None,
        )
        .await;
    assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    response.json()
}

#[tokio::test]
async fn usage_shows_the_exact_active_hosts_of_each_utc_day_and_today_so_far() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let scheduler = scheduler_of(&app);
    let agents = fleet(&app, &owner, 4).await;
    // Day one (2026-11-02): hosts 1, 2 and 3, host 1 twice.
    for i in [0, 1, 2, 0] {
        check_in(&app, &agents[i]).await;
    }
    let day_one = usage(&app, &owner, "").await;
    assert_eq!(day_one["from"], "2026-11-01");
    assert_eq!(day_one["to"], "2026-11-30");
    assert_eq!(day_one["days"], json!([]));
    assert_eq!(day_one["today_so_far"], 3);
    assert_eq!(day_one["host_days"], 0);
    assert_eq!(
        day_one["estimate_pence"],
        json!(null),
        "no live subscription"
    );

    // Day two: hosts 1 and 4, just before and after 23:59:59.
    next_day(&app, &scheduler).await;
    check_in(&app, &agents[0]).await;
    app.clock.set(
        app.clock_now()
            .date_naive()
            .and_hms_opt(23, 59, 59)
            .expect("t")
            .and_utc(),
    );
    check_in(&app, &agents[3]).await;
    // Day three: host 2 only.
    next_day(&app, &scheduler).await;
    check_in(&app, &agents[1]).await;
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_sub", "created", t, "cus_acme", "sub_1", "business", "active",
        ))
        .await,
    );
    let day_three = usage(&app, &owner, "?month=2026-11").await;
    let days: Vec<(String, i64)> = day_three["days"]
        .as_array()
        .expect("days")
        .iter()
        .map(|d| {
            (
                d["day"].as_str().expect("day").to_owned(),
                d["active_hosts"].as_i64().expect("n"),
            )
        })
        .collect();
    assert_eq!(
        days,
        [("2026-11-02".to_owned(), 3), ("2026-11-03".to_owned(), 2)],
        "{day_three}"
    );
    assert_eq!(day_three["host_days"], 5);
    assert_eq!(day_three["today_so_far"], 1);
    assert_eq!(day_three["estimate_pence"], 100, "5 host-days at 20 pence");

    // Before the rollup reaches a day (just after midnight), that day is counted from the
    // host-days themselves, not left out.
    {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::usage_days::Entity::delete_many()
            .filter(
                entities::usage_days::Column::Day.eq(chrono::NaiveDate::from_ymd_opt(2026, 11, 3)),
            )
            .exec(&app.state.db.orm)
            .await
            .expect("forget the rollup");
    }
    let unrolled = usage(&app, &owner, "").await;
    assert_eq!(unrolled["days"], day_three["days"], "{unrolled}");
    assert_eq!(unrolled["host_days"], 5);
    assert_eq!(unrolled["today_so_far"], 1);

    // Another month: no today, nothing used.
    let october = usage(&app, &owner, "?month=2026-10").await;
    assert_eq!(october["from"], "2026-10-01");
    assert_eq!(october["to"], "2026-10-31");
    assert_eq!(october["days"], json!([]));
    assert_eq!(october["today_so_far"], json!(null));
    assert_eq!(october["host_days"], 0);
}

#[tokio::test]
async fn billing_shows_the_plan_and_subscription_to_the_owner_only() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let billing = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/billing",
            None,
        )
        .await;
    assert_eq!(billing.status.as_u16(), 200, "{}", billing.body);
    assert_eq!(
        billing.json(),
        json!({"plan": "free", "status": null, "billable_from": null,
               "current_period_end": null, "checkout_available": false})
    );
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_sub", "created", t, "cus_acme", "sub_1", "team", "trialing",
        ))
        .await,
    );
    let billing = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/billing",
            None,
        )
        .await
        .json();
    assert_eq!(billing["plan"], "team");
    assert_eq!(billing["status"], "trialing");
    assert_eq!(billing["billable_from"], "2026-11-02");
    assert!(
        billing["current_period_end"]
            .as_str()
            .is_some_and(|t| t.starts_with("2026-12-02"))
    );

    let admin = app
        .member("acme", domain::roles::Role::Admin, "admin@acme.test")
        .await;
    let token = app
        .api_token(&owner, "acme", domain::roles::Role::Owner)
        .await;
    let stranger = app.sign_up("owner@other.test", "other").await;
    for path in ["/v1/orgs/acme/billing", "/v1/orgs/acme/billing/usage"] {
        app.call(As::Session(&admin), Method::GET, path, None)
            .await
            .assert_problem(403, "forbidden");
        app.call(As::Bearer(&token), Method::GET, path, None)
            .await
            .assert_problem(403, "forbidden");
        app.call(As::Nobody, Method::GET, path, None)
            .await
            .assert_problem(401, "unauthenticated");
        app.call(As::Session(&stranger), Method::GET, path, None)
            .await
            .assert_problem(404, "not-found");
    }
    for month in [
        "2026-13",
        "2026-00",
        "2026-1",
        "26-11",
        "2026-11-01",
        "november",
    ] {
        app.call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/billing/usage?month={month}"),
            None,
        )
        .await
        .assert_problem(400, "invalid-request");
    }
}

// ---------------------------------------------------------------------------------------------
// Checkout.

use tests::processor::TestProcessor;

async fn checkout(app: &TestApp, who: As<'_>, body: serde_json::Value) -> tests::TestResponse {
    app.call(
        who,
        Method::POST,
        "/v1/orgs/acme/billing/checkout",
        Some(body),
    )
    .await
}

#[tokio::test]
async fn checkout_asks_the_processor_for_a_session_naming_the_organization() {
    let processor = TestProcessor::start().await;
    let app = TestApp::builder()
        .payments()
        .payments_api(&processor.url())
        .start()
        .await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let billing = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/billing",
            None,
        )
        .await
        .json();
    assert_eq!(billing["checkout_available"], true);

    let answer = checkout(&app, As::Session(&owner), json!({"plan": "business"})).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(
        answer.json(),
        json!({"url": "https://checkout.test/c/cs_test_1"})
    );
    let sessions = processor.checkout_sessions();
    assert_eq!(sessions.len(), 1);
    let form = &sessions[0];
    assert_eq!(
        TestProcessor::field(form, "mode").as_deref(),
        Some("subscription")
    );
    assert_eq!(
        TestProcessor::field(form, "client_reference_id").as_deref(),
        Some("acme")
    );
    assert_eq!(
        TestProcessor::field(form, "line_items[0][price]").as_deref(),
        Some("price_business")
    );
    assert_eq!(TestProcessor::field(form, "customer"), None);
    let sent = processor
        .receiver
        .received()
        .into_iter()
        .find(|r| r.path == "/v1/checkout/sessions")
        .expect("sent");
    assert_eq!(
        sent.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );

    // Once the checkout linked a customer, a new session names it.
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&checkout_completed("evt_c", t, "cus_acme", "acme"))
            .await,
    );
    let answer = checkout(&app, As::Session(&owner), json!({"plan": "team"})).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(
        TestProcessor::field(&processor.checkout_sessions()[1], "customer").as_deref(),
        Some("cus_acme")
    );

    // Bad plans; not the owner; an API token; a failing processor.
    for bad in [
        json!({"plan": "free"}),
        json!({"plan": "gold"}),
        json!({}),
        json!({"plan": "team", "x": 1}),
    ] {
        checkout(&app, As::Session(&owner), bad)
            .await
            .assert_problem(400, "invalid-request");
    }
    let admin = app
        .member("acme", domain::roles::Role::Admin, "admin@acme.test")
        .await;
    checkout(&app, As::Session(&admin), json!({"plan": "team"}))
        .await
        .assert_problem(403, "forbidden");
    checkout(
        &app,
        As::SessionWithoutCsrf(&owner),
        json!({"plan": "team"}),
    )
    .await
    .assert_problem(403, "forbidden");
    let token = app
        .api_token(&owner, "acme", domain::roles::Role::Owner)
        .await;
    checkout(&app, As::Bearer(&token), json!({"plan": "team"}))
        .await
        .assert_problem(403, "forbidden");
    processor.fail_next(1);
    checkout(&app, As::Session(&owner), json!({"plan": "team"}))
        .await
        .assert_problem(503, "unavailable");
    assert_eq!(processor.checkout_sessions().len(), 2);
}

#[tokio::test]
async fn checkout_is_not_configured_without_a_processor() {
    for app in [
        TestApp::builder().payments().start().await,
        TestApp::new().await,
    ] {
        let owner = app.sign_up("owner@acme.test", "acme").await;
        checkout(&app, As::Session(&owner), json!({"plan": "team"}))
            .await
            .assert_problem(503, "not-configured");
        let billing = app
            .call(
                As::Session(&owner),
                Method::GET,
                "/v1/orgs/acme/billing",
                None,
            )
            .await
            .json();
        assert_eq!(billing["checkout_available"], false);
    }
}

// ---------------------------------------------------------------------------------------------
// The daily report to the processor.

async fn usage_rows(app: &TestApp) -> Vec<(String, i32, bool)> {
    use sea_orm::{EntityTrait, QueryOrder};
    entities::usage_days::Entity::find()
        .order_by_asc(entities::usage_days::Column::Day)
        .all(&app.state.db.orm)
        .await
        .expect("usage")
        .into_iter()
        .map(|u| (u.day.to_string(), u.active_hosts, u.reported))
        .collect()
}

fn reported(processor: &TestProcessor) -> Vec<(String, String, String)> {
    processor
        .meter_events()
        .iter()
        .map(|form| {
            (
                TestProcessor::field(form, "identifier").unwrap_or_default(),
                TestProcessor::field(form, "payload[stripe_customer_id]").unwrap_or_default(),
                TestProcessor::field(form, "payload[value]").unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn each_day_is_reported_once_after_the_processor_accepts_it_even_through_failures_and_repeats()
 {
    let processor = TestProcessor::start().await;
    let app = TestApp::builder()
        .payments()
        .payments_api(&processor.url())
        .start()
        .await;
    let owner = linked(&app).await;
    let org = org_id(&app, "acme").await;
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_sub", "created", t, "cus_acme", "sub_1", "team", "active",
        ))
        .await,
    );
    let scheduler = scheduler_of(&app);
    let agents = fleet(&app, &owner, 3).await;
    // Day one: 3 hosts. Its report fails once, then succeeds.
    for agent in &agents {
        check_in(&app, agent).await;
    }
    processor.fail_next(1);
    next_day(&app, &scheduler).await;
    // Day two: 2 hosts.
    for agent in &agents[..2] {
        check_in(&app, agent).await;
    }
    next_day(&app, &scheduler).await;
    // Day three: 1 host; reported the day after.
    check_in(&app, &agents[2]).await;
    next_day(&app, &scheduler).await;

    let identifier = |day: &str| format!("{org}:{day}");
    assert_eq!(
        reported(&processor),
        [
            (
                identifier("2026-11-02"),
                "cus_acme".to_owned(),
                "3".to_owned()
            ),
            (
                identifier("2026-11-03"),
                "cus_acme".to_owned(),
                "2".to_owned()
            ),
            (
                identifier("2026-11-04"),
                "cus_acme".to_owned(),
                "1".to_owned()
            ),
        ]
    );
    let sent: Vec<_> = processor
        .receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/v1/billing/meter_events")
        .collect();
    assert_eq!(sent.len(), 4, "one failed attempt and three accepted");
    for request in &sent {
        let form = request.form();
        assert_eq!(
            request.header("idempotency-key").map(str::to_owned),
            TestProcessor::field(&form, "identifier")
        );
        assert_eq!(
            TestProcessor::field(&form, "event_name").as_deref(),
            Some("host_days")
        );
    }
    assert_eq!(
        usage_rows(&app).await,
        [
            ("2026-11-02".to_owned(), 3, true),
            ("2026-11-03".to_owned(), 2, true),
            ("2026-11-04".to_owned(), 1, true),
        ]
    );
    let shown = usage(&app, &owner, "?month=2026-11").await;
    assert!(
        shown["days"]
            .as_array()
            .expect("days")
            .iter()
            .all(|d| d["reported"] == true),
        "{shown}"
    );

    // The job running twice: the daily run again, and a day's job again, send nothing new.
    app.state
        .queue
        .push(domain::billing::jobs::BillingReport {
            day: "2026-11-04".parse().expect("day"),
            org_id: None,
        })
        .await
        .expect("push");
    app.state
        .queue
        .push(domain::billing::jobs::BillingReport {
            day: "2026-11-03".parse().expect("day"),
            org_id: Some(org.uuid()),
        })
        .await
        .expect("push");
    app.run_pending_jobs().await;
    assert_eq!(reported(&processor).len(), 3);
    // Lost between the processor's answer and the mark: sent again with the same key, which
    // the processor answers as before without a second event.
    {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
        entities::usage_days::Entity::update_many()
            .col_expr(entities::usage_days::Column::Reported, Expr::value(false))
            .filter(
                entities::usage_days::Column::Day.eq(chrono::NaiveDate::from_ymd_opt(2026, 11, 3)),
            )
            .exec(&app.state.db.orm)
            .await
            .expect("unmark");
    }
    app.state
        .queue
        .push(domain::billing::jobs::BillingReport {
            day: "2026-11-03".parse().expect("day"),
            org_id: Some(org.uuid()),
        })
        .await
        .expect("push");
    app.run_pending_jobs().await;
    assert_eq!(
        reported(&processor).len(),
        3,
        "the processor kept one event per key"
    );
    assert!(
        usage_rows(&app)
            .await
            .iter()
            .all(|(_, _, reported)| *reported)
    );
}

#[tokio::test]
async fn a_day_stays_unreported_while_the_processor_fails_and_organizations_without_a_live_subscription_are_not_reported()
 {
    let processor = TestProcessor::start().await;
    let app = TestApp::builder()
        .payments()
        .payments_api(&processor.url())
        .start()
        .await;
    let owner = linked(&app).await;
    let org = org_id(&app, "acme").await;
    let agents = fleet(&app, &owner, 2).await;
    for agent in &agents {
        check_in(&app, agent).await;
    }
    let day = app.clock_now().date_naive();
    let deps = worker::Deps::new(
        app.state.config.clone(),
        app.state.db.clone(),
        app.state.clock.clone(),
    )
    .expect("deps");
    let api = platform::payments_api::PaymentsApi::from_config(&app.state.config, &deps.outbound)
        .expect("processor configured");
    // Linked but no subscription yet: nothing to report.
    let outcome =
        worker::jobs::billing_report::report_day(&app.state.db.orm, &api, org.uuid(), day)
            .await
            .expect("no failure");
    assert_eq!(outcome, worker::jobs::billing_report::Outcome::Nothing);
    assert!(processor.receiver.received().is_empty());

    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&subscription_event(
            "evt_sub", "created", t, "cus_acme", "sub_1", "business", "active",
        ))
        .await,
    );
    processor.fail_next(1);
    let failed = worker::jobs::billing_report::run(
        domain::billing::jobs::BillingReport {
            day,
            org_id: Some(org.uuid()),
        },
        apalis::prelude::Data::new(deps.clone()),
    )
    .await;
    assert!(failed.is_err(), "a 500 is retried");
    assert_eq!(usage_rows(&app).await, [(day.to_string(), 2, false)]);
    let outcome =
        worker::jobs::billing_report::report_day(&app.state.db.orm, &api, org.uuid(), day)
            .await
            .expect("reported");
    assert_eq!(outcome, worker::jobs::billing_report::Outcome::Reported(2));
    assert_eq!(usage_rows(&app).await, [(day.to_string(), 2, true)]);
    let again = worker::jobs::billing_report::report_day(&app.state.db.orm, &api, org.uuid(), day)
        .await
        .expect("no failure");
    assert_eq!(
        again,
        worker::jobs::billing_report::Outcome::AlreadyReported
    );
    assert_eq!(reported(&processor).len(), 1);
}

#[tokio::test]
async fn the_scheduler_queues_yesterdays_report_once_after_ten_past_midnight() {
    let app = TestApp::builder().payments().without_worker().start().await;
    let scheduler = scheduler_of(&app);
    let midnight = |h: u32, m: u32| {
        chrono::NaiveDate::from_ymd_opt(2026, 11, 3)
            .and_then(|d| d.and_hms_opt(h, m, 0))
            .expect("time")
            .and_utc()
    };
    app.clock.set(midnight(0, 5));
    scheduler.tick(app.clock_now()).await.expect("tick");
    assert!(app.job_rows(Some("billing.report")).await.is_empty());
    for (h, m) in [(0, 10), (0, 11), (13, 0)] {
        app.clock.set(midnight(h, m));
        scheduler.tick(app.clock_now()).await.expect("tick");
        // A second scheduler (a restart, or another leader) queues nothing more.
        scheduler_of(&app)
            .tick(app.clock_now())
            .await
            .expect("tick");
    }
    let rows = app.job_rows(Some("billing.report")).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].payload.contains("2026-11-02"),
        "{}",
        rows[0].payload
    );
}

#[tokio::test]
async fn housekeeping_forgets_payment_events_after_thirty_days() {
    let app = TestApp::builder().payments().start().await;
    let t = now_s(&app);
    acknowledged(
        &app.post_payment_event(&payment_failed("evt_old", t, "cus_x"))
            .await,
    );
    app.clock.advance(chrono::Duration::days(29));
    acknowledged(
        &app.post_payment_event(&payment_failed("evt_new", t + 29 * 86_400, "cus_x"))
            .await,
    );
    app.clock.advance(chrono::Duration::days(2));
    app.state
        .queue
        .push(platform::jobs::Housekeeping {
            hour: app.clock_now().to_rfc3339(),
        })
        .await
        .expect("push");
    app.run_pending_jobs().await;
    use sea_orm::EntityTrait;
    let left: Vec<String> = entities::payment_events::Entity::find()
        .all(&app.state.db.orm)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(left, ["evt_new"]);
}

#[tokio::test]
async fn two_events_for_one_subscription_at_the_same_instant_still_let_the_newer_win() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let t = now_s(&app);
    for round in 0..6i64 {
        let created = t + 100 * round;
        let (older_plan, newer_plan) = if round % 2 == 0 {
            ("team", "business")
        } else {
            ("business", "team")
        };
        let older = subscription_event(
            &format!("evt_old_{round}"),
            "updated",
            created,
            "cus_acme",
            "sub_1",
            older_plan,
            "active",
        );
        let newer = subscription_event(
            &format!("evt_new_{round}"),
            "updated",
            created + 1,
            "cus_acme",
            "sub_1",
            newer_plan,
            "active",
        );
        let (a, b) = tokio::join!(
            app.post_payment_event(&newer),
            app.post_payment_event(&older)
        );
        acknowledged(&a);
        acknowledged(&b);
        assert_eq!(
            plan_shown(&app, &owner, "acme").await,
            newer_plan,
            "round {round}"
        );
    }
}

/// A subscription grants its plan only while it is paid for or about to be (decisions §18):
/// `active`, `trialing`, `past_due`. An `incomplete` checkout or an `unpaid` subscription is
/// the free plan, whatever its price names.
#[tokio::test]
async fn a_subscription_grants_its_plan_only_while_active_trialing_or_past_due() {
    let app = TestApp::builder().payments().start().await;
    let owner = linked(&app).await;
    let t = now_s(&app);
    let cases = [
        ("incomplete", "free"),
        ("trialing", "enterprise"),
        ("unpaid", "free"),
        ("active", "enterprise"),
        ("incomplete_expired", "free"),
        ("past_due", "enterprise"),
        ("paused", "free"),
        ("something_new", "free"),
    ];
    for (i, (status, plan)) in cases.iter().enumerate() {
        acknowledged(
            &app.post_payment_event(&subscription_event(
                &format!("evt_{i}"),
                "updated",
                t + i as i64,
                "cus_acme",
                "sub_1",
                "enterprise",
                status,
            ))
            .await,
        );
        assert_eq!(plan_shown(&app, &owner, "acme").await, *plan, "{status}");
        // The gates ask the same question: SCIM needs enterprise.
        let scim = app
            .call(
                As::Session(&owner),
                Method::GET,
                "/v1/orgs/acme/scim/token",
                None,
            )
            .await;
        if *plan == "free" {
            scim.assert_problem(403, "plan-required");
        } else {
            assert_eq!(scim.status.as_u16(), 200, "{status}: {}", scim.body);
        }
    }
}
