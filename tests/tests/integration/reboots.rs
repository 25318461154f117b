//! The reboot budget (issue 31, decisions §20): an organization's `max_concurrent_reboots`, set
//! by an admin, shown on the organization; a host over the budget installs at once and gets a
//! separate `reboot` job when a slot frees; a host is rebooting from such a job handed out
//! until its first check-in after the result.

use std::collections::{BTreeMap, BTreeSet};

use domain::roles::Role;
use entities::hosts;
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{As, TestApp, agent::Tamper};

use crate::{
    proposals::Fleet,
    rollouts::{hosts as needing_curl, policy, report},
};

#[tokio::test]
async fn the_budget_is_an_admins_setting_shown_on_the_organization() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    let operator = app.member("acme", Role::Operator, "op@acme.test").await;
    let shown = app
        .call(As::Session(&operator), Method::GET, "/v1/orgs/acme", None)
        .await
        .json();
    assert!(
        shown["max_concurrent_reboots"].is_null(),
        "no limit at first: {shown}"
    );
    let patch = |who, body: Value| {
        let app = &app;
        async move {
            app.call(As::Session(who), Method::PATCH, "/v1/orgs/acme", Some(body))
                .await
        }
    };
    patch(&operator, json!({"max_concurrent_reboots": 2}))
        .await
        .assert_problem(403, "forbidden");
    for bad in [
        json!(0),
        json!(-1),
        json!(1_000_001),
        json!("two"),
        json!(1.5),
    ] {
        patch(&admin, json!({"max_concurrent_reboots": bad}))
            .await
            .assert_problem(400, "invalid-request");
    }
    patch(&admin, json!({"plan": "enterprise"}))
        .await
        .assert_problem(400, "invalid-request");
    let set = patch(&admin, json!({"max_concurrent_reboots": 2})).await;
    assert_eq!(set.status.as_u16(), 200, "{}", set.body);
    assert_eq!(set.json()["max_concurrent_reboots"], 2);
    let unchanged = patch(&owner, json!({})).await;
    assert_eq!(
        unchanged.json()["max_concurrent_reboots"],
        2,
        "absent leaves it"
    );
    let listed = app
        .call(As::Session(&operator), Method::GET, "/v1/orgs", None)
        .await
        .json();
    assert_eq!(listed["items"][0]["max_concurrent_reboots"], 2);
    let lifted = patch(&owner, json!({"max_concurrent_reboots": null})).await;
    assert_eq!(lifted.status.as_u16(), 200, "{}", lifted.body);
    assert!(lifted.json()["max_concurrent_reboots"].is_null());
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events",
            None,
        )
        .await
        .json();
    let updates = audit["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["action"] == "organization.updated")
                .count()
        })
        .unwrap_or(0);
    assert_eq!(updates, 2);
    app.stop().await;
}

fn may_reboot(job: &Value) -> bool {
    job["kind"] == "reboot" || job["reboot"] != "never"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_hosts_needing_a_reboot_never_reboot_more_than_two_at_once_and_all_reboot() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    let set = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            "/v1/orgs/acme",
            Some(json!({"max_concurrent_reboots": 2})),
        )
        .await;
    assert_eq!(set.status.as_u16(), 200, "{}", set.body);
    let agents = needing_curl(&fleet, 10).await;
    let mut body = policy(Value::Null);
    body["reboot"] = json!("immediate");
    fleet.policy(body).await;
    let list = fleet
        .until(|l| l.len() == 1 && l[0]["status"] == "approved")
        .await;
    let id = list[0]["id"].as_str().unwrap_or_default().to_owned();

    // Every host needs a reboot until it has rebooted. The test counts the hosts rebooting
    // from the jobs handed out, as decisions §20 defines it: from a job that may reboot handed
    // out until the host's first check-in after its result.
    let mut needs = [true; 10];
    let mut rebooting: BTreeMap<usize, bool> = BTreeMap::new();
    let mut rebooted = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    let mut most = 0;
    for turn in 0..40 {
        if rebooted.len() == 10 && rebooting.is_empty() {
            break;
        }
        let answers = futures::future::join_all(agents.iter().enumerate().map(|(i, agent)| {
            let mut body = agent.check_in_body("same");
            body["reboot_required"] = json!(needs[i]);
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
        }))
        .await;
        // This check-in ends the reboot of every host whose result was in.
        rebooting.retain(|_, reported| !*reported);
        let jobs: Vec<Vec<Value>> = answers
            .iter()
            .map(|a| {
                assert_eq!(a.status.as_u16(), 200, "{}", a.body);
                a.json()["jobs"].as_array().cloned().unwrap_or_default()
            })
            .collect();
        for (i, list) in jobs.iter().enumerate() {
            if list.iter().any(may_reboot) {
                rebooting.entry(i).or_insert(false);
            }
        }
        most = most.max(rebooting.len());
        assert!(
            rebooting.len() <= 2,
            "turn {turn}: {} hosts rebooting: {rebooting:?}",
            rebooting.len()
        );
        let holding = hosts::Entity::find()
            .filter(hosts::Column::RebootSlotUntil.gt(app.clock_now()))
            .count(&app.state.db.orm)
            .await
            .expect("count");
        assert!(holding <= 2, "turn {turn}: {holding} slots held");
        for (i, list) in jobs.iter().enumerate() {
            for job in list {
                kinds.insert(job["kind"].as_str().unwrap_or_default().to_owned());
                let reboots = may_reboot(job) && needs[i];
                let reported = report(&app, &agents[i], job, "succeeded", reboots).await;
                assert_eq!(reported.status.as_u16(), 204, "{}", reported.body);
                if reboots {
                    needs[i] = false;
                    rebooted.insert(i);
                }
                if may_reboot(job) {
                    rebooting.insert(i, true);
                }
            }
        }
    }
    assert_eq!(rebooted.len(), 10, "every host rebooted in the end");
    assert_eq!(most, 2, "two at once, the budget");
    assert!(
        kinds.contains("reboot"),
        "hosts over the budget got a separate reboot job: {kinds:?}"
    );
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["status"], "applied", "{:#}", detail["rollout"]);
    assert_eq!(detail["rollout"]["waves"][0]["succeeded"], 10);
    app.stop().await;
}

#[tokio::test]
async fn a_slot_is_freed_after_thirty_minutes_even_without_a_check_in() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    app.call(
        As::Session(&owner),
        Method::PATCH,
        "/v1/orgs/acme",
        Some(json!({"max_concurrent_reboots": 1})),
    )
    .await;
    let agents = needing_curl(&fleet, 2).await;
    let mut body = policy(Value::Null);
    body["reboot"] = json!("immediate");
    fleet.policy(body).await;
    fleet
        .until(|l| l.len() == 1 && l[0]["status"] == "approved")
        .await;
    // The first to check in takes the only slot and goes silent; the second installs without
    // a reboot, and its reboot waits.
    let first = agents[0]
        .post(
            &app,
            "/v1/agent/check-in",
            &agents[0].check_in_body("same"),
            app.clock_now(),
            Tamper::None,
        )
        .await
        .json();
    assert_eq!(first["jobs"][0]["reboot"], "immediate");
    let second = agents[1]
        .post(
            &app,
            "/v1/agent/check-in",
            &agents[1].check_in_body("same"),
            app.clock_now(),
            Tamper::None,
        )
        .await
        .json();
    assert_eq!(
        second["jobs"][0]["reboot"], "never",
        "over the budget: installs now"
    );
    let done = report(&app, &agents[1], &second["jobs"][0], "succeeded", false).await;
    assert_eq!(done.status.as_u16(), 204, "{}", done.body);
    let waiting = agents[1]
        .post(
            &app,
            "/v1/agent/check-in",
            &agents[1].check_in_body("same"),
            app.clock_now(),
            Tamper::None,
        )
        .await
        .json();
    assert_eq!(waiting["jobs"], json!([]), "no slot yet for its reboot");
    app.clock.advance(chrono::Duration::minutes(30));
    let freed = agents[1]
        .post(
            &app,
            "/v1/agent/check-in",
            &agents[1].check_in_body("same"),
            app.clock_now(),
            Tamper::None,
        )
        .await
        .json();
    assert_eq!(freed["jobs"][0]["kind"], "reboot", "{freed}");
    assert_eq!(freed["jobs"][0]["reboot"], "immediate");
    assert_eq!(freed["jobs"][0]["changes"], json!([]));
    app.stop().await;
}
