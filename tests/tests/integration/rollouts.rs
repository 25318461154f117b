//! Rollouts (issue 31, decisions §20), with simulated agents signing as real ones: waves that
//! promote on success and halt on failure, `max_in_flight`, halting and resuming by hand, hosts
//! leaving mid-wave, soaks and windows on the test's clock, and the documented refusals. The
//! reboot budget is in `reboots`, the replicas racing in `rollout_replicas`.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use domain::roles::Role;
use entities::{host_jobs, notification_deliveries, policies, proposal_rollouts};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    As, Session, TestApp, TestResponse,
    agent::{Tamper, TestAgent},
    receiver::Receiver,
};

use crate::proposals::{Fleet, text, update};

/// A policy over every host that approves itself, going out as `rollout` says (none: `null`).
pub(crate) fn policy(rollout: Value) -> Value {
    let mut body = json!({
        "name": "everything", "scope": {"groups": []}, "required_approvals": 0,
        "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all",
    });
    if !rollout.is_null() {
        body["rollout"] = rollout;
    }
    body
}

/// `n` hosts, each needing curl 1 → 2.
pub(crate) async fn hosts(fleet: &Fleet<'_>, n: usize) -> Vec<TestAgent> {
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        agents.push(
            fleet
                .host(
                    &format!("web-{i:02}"),
                    json!([update("curl", "1", "2", json!([]))]),
                    json!({}),
                )
                .await,
        );
    }
    agents
}

/// Every agent checks in at once (facts only); the jobs each was handed.
pub(crate) async fn round(app: &TestApp, agents: &[TestAgent], extra: &Value) -> Vec<Vec<Value>> {
    let answers = futures::future::join_all(agents.iter().map(|agent| async move {
        let mut body = agent.check_in_body("same");
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                body.insert(k.clone(), v.clone());
            }
        }
        agent
            .post(
                app,
                "/v1/agent/check-in",
                &body,
                app.clock_now(),
                Tamper::None,
            )
            .await
    }))
    .await;
    answers
        .into_iter()
        .map(|answer| {
            assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
            answer.json()["jobs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// The agents a round handed a job to.
fn given(jobs: &[Vec<Value>]) -> BTreeSet<usize> {
    jobs.iter()
        .enumerate()
        .filter(|(_, j)| !j.is_empty())
        .map(|(i, _)| i)
        .collect()
}

/// Reports `job`'s result as `agent`.
pub(crate) async fn report(
    app: &TestApp,
    agent: &TestAgent,
    job: &Value,
    status: &str,
    rebooted: bool,
) -> TestResponse {
    let body = json!({"status": status, "log": "done", "rebooted": rebooted,
                      "finished_at": app.clock_now()});
    agent
        .post(
            app,
            &format!("/v1/agent/jobs/{}/result", text(&job["id"])),
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await
}

async fn succeed(app: &TestApp, agent: &TestAgent, job: &Value) {
    let reported = report(app, agent, job, "succeeded", false).await;
    assert_eq!(reported.status.as_u16(), 204, "{}", reported.body);
}

async fn post(app: &TestApp, who: &Session, path: &str, body: Option<Value>) -> TestResponse {
    app.call(As::Session(who), Method::POST, path, body).await
}

/// The one proposal the fleet's policy opened, gone ahead by itself.
async fn approved(fleet: &Fleet<'_>) -> String {
    let list = fleet
        .until(|l| l.len() == 1 && l[0]["status"] == "approved")
        .await;
    text(&list[0]["id"])
}

fn waves(detail: &Value) -> Vec<(String, u64)> {
    detail["rollout"]["waves"]
        .as_array()
        .map(|w| {
            w.iter()
                .map(|w| (text(&w["name"]), w["hosts"].as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// The hostnames of the targets the detail puts in wave `wave`.
fn in_wave(detail: &Value, wave: u64) -> BTreeSet<String> {
    detail["targets"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter(|t| t["wave"] == wave)
                .map(|t| text(&t["hostname"]))
                .collect()
        })
        .unwrap_or_default()
}

fn hostnames(agents: &[TestAgent], which: &BTreeSet<usize>) -> BTreeSet<String> {
    which.iter().map(|i| agents[*i].hostname.clone()).collect()
}

#[tokio::test]
async fn twenty_hosts_go_out_two_then_half_halt_at_the_first_failure_and_resume() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    let receiver = Receiver::start().await;
    let channel = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/notification-channels",
            Some(
                json!({"kind": "webhook", "name": "halts", "events": ["proposal.halted"],
                        "config": {"url": receiver.url("/halts")}}),
            ),
        )
        .await;
    assert_eq!(channel.status.as_u16(), 201, "{}", channel.body);
    let agents = hosts(&fleet, 20).await;
    fleet
        .policy(policy(json!({
            "waves": [{"name": "canary", "size": 2}, {"name": "half", "size": "50%"}],
            "halt_after_failures": 1,
        })))
        .await;
    let id = approved(&fleet).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["rollout"]["state"], "running", "{detail:#}");
    assert_eq!(detail["rollout"]["wave"], 0);
    assert_eq!(
        waves(&detail),
        [
            ("canary".into(), 2),
            ("half".into(), 10),
            ("rest".into(), 8)
        ]
    );

    // Only the two canaries get jobs, and they are the hosts the detail puts in wave 0.
    let jobs = round(&app, &agents, &json!({})).await;
    let canaries = given(&jobs);
    assert_eq!(canaries.len(), 2, "{jobs:?}");
    assert_eq!(hostnames(&agents, &canaries), in_wave(&detail, 0));
    assert_eq!(
        given(&round(&app, &agents, &json!({})).await),
        canaries,
        "handed out again until reported, nobody else"
    );
    for i in &canaries {
        succeed(&app, &agents[*i], &jobs[*i][0]).await;
    }

    // Both succeeded: the next ten get theirs.
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["rollout"]["wave"], 1, "{:#}", detail["rollout"]);
    let jobs = round(&app, &agents, &json!({})).await;
    let half = given(&jobs);
    assert_eq!(half.len(), 10, "{jobs:?}");
    assert!(half.is_disjoint(&canaries));
    assert_eq!(hostnames(&agents, &half), in_wave(&detail, 1));

    // One failure halts: no further jobs; those already handed out finish and are recorded.
    let mut half = half.into_iter();
    let failing = half.next().expect("a host of the second wave");
    let reported = report(&app, &agents[failing], &jobs[failing][0], "failed", false).await;
    assert_eq!(reported.status.as_u16(), 204, "{}", reported.body);
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["state"], "halted",
        "{:#}",
        detail["rollout"]
    );
    assert!(
        text(&detail["rollout"]["halted_reason"]).contains("halt_after_failures"),
        "{:#}",
        detail["rollout"]
    );
    for i in half {
        succeed(&app, &agents[i], &jobs[i][0]).await;
    }
    assert!(
        given(&round(&app, &agents, &json!({})).await).is_empty(),
        "halted: nobody gets a job"
    );
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["waves"][1],
        json!({"name": "half", "hosts": 10, "pending": 0, "running": 0, "succeeded": 9,
               "failed": 1, "left": 0})
    );
    assert_eq!(detail["rollout"]["state"], "halted");
    assert_eq!(
        detail["status"], "applying",
        "a halted rollout does not settle"
    );
    app.run_pending_jobs().await;
    let halted = notification_deliveries::Entity::find()
        .filter(notification_deliveries::Column::EventKind.eq("proposal.halted"))
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(halted, 1, "exactly one proposal.halted delivery");
    let seen = receiver.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(seen[0].json()["type"], "proposal.halted");
    assert_eq!(seen[0].json()["data"]["proposal"]["id"], json!(id));
    assert!(
        text(&seen[0].json()["data"]["rollout"]["reason"]).contains("halt_after_failures"),
        "{}",
        seen[0].text()
    );

    // Halting again, or resuming twice, is refused; resuming continues from the halted wave.
    post(
        &app,
        &owner,
        &format!("/v1/orgs/acme/proposals/{id}/halt"),
        Some(json!({"reason": "again"})),
    )
    .await
    .assert_problem(409, "invalid-state");
    let operator = app.member("acme", Role::Operator, "op@acme.test").await;
    let resumed = post(
        &app,
        &operator,
        &format!("/v1/orgs/acme/proposals/{id}/resume"),
        None,
    )
    .await;
    assert_eq!(resumed.status.as_u16(), 200, "{}", resumed.body);
    assert_eq!(resumed.json()["state"], "running", "{}", resumed.body);
    assert_eq!(
        resumed.json()["wave"],
        2,
        "the done wave promotes: {}",
        resumed.body
    );
    post(
        &app,
        &operator,
        &format!("/v1/orgs/acme/proposals/{id}/resume"),
        None,
    )
    .await
    .assert_problem(409, "invalid-state");
    let jobs = round(&app, &agents, &json!({})).await;
    let rest = given(&jobs);
    assert_eq!(rest.len(), 8, "{jobs:?}");
    for i in &rest {
        succeed(&app, &agents[*i], &jobs[*i][0]).await;
    }
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["rollout"]["state"], "done");
    assert_eq!(detail["status"], "partially_applied");
    app.run_pending_jobs().await;
    assert_eq!(
        notification_deliveries::Entity::find()
            .filter(notification_deliveries::Column::EventKind.eq("proposal.halted"))
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        1,
        "still one"
    );
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=500",
            None,
        )
        .await
        .json();
    let actions: Vec<String> = audit["items"]
        .as_array()
        .map(|a| a.iter().map(|e| text(&e["action"])).collect())
        .unwrap_or_default();
    for action in [
        "proposal.halted",
        "proposal.resumed",
        "proposal.rollout_resumed",
    ] {
        assert!(
            actions.contains(&action.to_owned()),
            "{action}: {actions:?}"
        );
    }
    assert_eq!(
        actions
            .iter()
            .filter(|a| *a == "proposal.wave_started")
            .count(),
        3,
        "each wave began once: {actions:?}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_three_is_never_exceeded_by_check_ins_at_once() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 10).await;
    fleet
        .policy(policy(json!({"waves": [], "max_in_flight": 3})))
        .await;
    let id = approved(&fleet).await;
    let proposal_id = platform::ids::ProposalId::parse(&id)
        .map(platform::ids::ProposalId::uuid)
        .expect("prp id");
    let in_flight = || async {
        host_jobs::Entity::find()
            .filter(host_jobs::Column::ProposalId.eq(proposal_id))
            .filter(host_jobs::Column::Status.eq("dispatched"))
            .count(&app.state.db.orm)
            .await
            .expect("count")
    };
    // Each round every host checks in at once; one of the jobs out reports; the next round
    // hands out exactly one more, never a fourth.
    let mut done = BTreeSet::new();
    for _ in 0..20 {
        if done.len() == 10 {
            break;
        }
        let jobs = round(&app, &agents, &json!({})).await;
        let out = given(&jobs);
        assert!(in_flight().await <= 3);
        assert_eq!(
            out.len(),
            3.min(10 - done.len()),
            "as many as the cap allows: {out:?}"
        );
        let first = *out.iter().next().expect("one");
        succeed(&app, &agents[first], &jobs[first][0]).await;
        done.insert(first);
    }
    assert_eq!(done.len(), 10, "every host got its job in the end");
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["status"], "applied");
    assert_eq!(detail["rollout"]["state"], "done");
    assert_eq!(waves(&detail), [("rest".into(), 10)]);
    app.stop().await;
}

#[tokio::test]
async fn without_a_rollout_every_host_gets_its_job_at_once_and_failures_never_halt() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 4).await;
    fleet.policy(policy(Value::Null)).await;
    let id = approved(&fleet).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(waves(&detail), [("rest".into(), 4)]);
    assert!(
        detail["targets"]
            .as_array()
            .is_some_and(|t| t.iter().all(|t| t["wave"] == 0))
    );
    let jobs = round(&app, &agents, &json!({})).await;
    assert_eq!(given(&jobs).len(), 4);
    for (i, agent) in agents.iter().enumerate() {
        let status = if i < 2 { "failed" } else { "succeeded" };
        let reported = report(&app, agent, &jobs[i][0], status, false).await;
        assert_eq!(reported.status.as_u16(), 204, "{}", reported.body);
    }
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["state"], "done",
        "{:#}",
        detail["rollout"]
    );
    assert_eq!(detail["status"], "partially_applied");
    app.stop().await;
}

#[tokio::test]
async fn a_host_decommissioned_mid_wave_leaves_it_and_the_wave_promotes_without_it() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    let agents = hosts(&fleet, 4).await;
    fleet
        .policy(policy(json!({"waves": [{"name": "first", "size": 2}]})))
        .await;
    let id = approved(&fleet).await;
    let jobs = round(&app, &agents, &json!({})).await;
    let first: Vec<usize> = given(&jobs).into_iter().collect();
    assert_eq!(first.len(), 2);
    succeed(&app, &agents[first[0]], &jobs[first[0]][0]).await;
    let gone = agents[first[1]].host_id.clone().unwrap_or_default();
    let decommissioned = post(
        &app,
        &owner,
        &format!("/v1/orgs/acme/hosts/{gone}/decommission"),
        None,
    )
    .await;
    assert_eq!(
        decommissioned.status.as_u16(),
        200,
        "{}",
        decommissioned.body
    );
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["rollout"]["wave"], 1, "{:#}", detail["rollout"]);
    assert_eq!(detail["rollout"]["waves"][0]["left"], 1);
    assert_eq!(detail["rollout"]["waves"][0]["succeeded"], 1);
    // Its job is withdrawn: a late result for it is refused, and the rest go out.
    report(
        &app,
        &agents[first[1]],
        &jobs[first[1]][0],
        "succeeded",
        false,
    )
    .await
    .assert_problem(401, "unauthenticated");
    let live: Vec<TestAgent> = agents
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != first[1])
        .map(|(_, a)| a.clone())
        .collect();
    let jobs = round(&app, &live, &json!({})).await;
    let rest = given(&jobs);
    assert_eq!(rest.len(), 2, "{jobs:?}");
    for i in rest {
        succeed(&app, &live[i], &jobs[i][0]).await;
    }
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["status"], "applied",
        "the host that left counts neither way"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_host_that_no_longer_needs_the_change_leaves_before_its_job_goes_out() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 3).await;
    fleet
        .policy(policy(
            json!({"waves": [{"name": "all-of-it", "size": "100%"}]}),
        ))
        .await;
    let id = approved(&fleet).await;
    // One host upgraded curl by other means and says so before its first check-in since.
    fleet.report(&agents[0], json!([]), json!({})).await;
    let jobs = round(&app, &agents, &json!({})).await;
    assert!(jobs[0].is_empty(), "nothing to do for it");
    for i in 1..3 {
        succeed(&app, &agents[i], &jobs[i][0]).await;
    }
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["waves"][0]["left"], 1,
        "{:#}",
        detail["rollout"]
    );
    assert_eq!(detail["status"], "applied");
    app.stop().await;
}

#[tokio::test]
async fn a_done_wave_soaks_then_waits_for_the_window_and_the_scheduler_promotes_it() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 3).await;
    let mut body = policy(json!({"waves": [{"name": "first", "size": 1}], "soak_minutes": 30}));
    // Open every day 09:00-11:00 UTC; the test's clock starts at 09:00.
    body["apply"] = json!("asap_in_window");
    body["window"] = json!({"rrule": "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
                            "duration_minutes": 120, "time_zone": "UTC"});
    fleet.policy(body).await;
    let id = approved(&fleet).await;
    let jobs = round(&app, &agents, &json!({})).await;
    let first = *given(&jobs).iter().next().expect("one");
    succeed(&app, &agents[first], &jobs[first][0]).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["state"], "soaking",
        "{:#}",
        detail["rollout"]
    );
    let until = text(&detail["rollout"]["waiting_until"]);
    assert!(until.starts_with("2026-11-02T09:30:00"), "{until}");
    assert!(given(&round(&app, &agents, &json!({})).await).is_empty());

    // Soaked at 09:30, inside the window: the scheduler's next tick promotes it.
    later(&app, 30 * 60).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["state"], "running",
        "{:#}",
        detail["rollout"]
    );
    assert_eq!(detail["rollout"]["wave"], 1);
    let jobs = round(&app, &agents, &json!({})).await;
    assert_eq!(given(&jobs).len(), 2);
    app.stop().await;
}

#[tokio::test]
async fn a_wave_soaked_after_its_window_shut_waits_for_the_next_opening() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 2).await;
    let mut body = policy(json!({"waves": [{"name": "first", "size": 1}], "soak_minutes": 90}));
    body["apply"] = json!("asap_in_window");
    body["window"] = json!({"rrule": "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
                            "duration_minutes": 60, "time_zone": "UTC"});
    fleet.policy(body).await;
    let id = approved(&fleet).await;
    let jobs = round(&app, &agents, &json!({})).await;
    let first = *given(&jobs).iter().next().expect("one");
    succeed(&app, &agents[first], &jobs[first][0]).await;
    later(&app, 90 * 60).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(
        detail["rollout"]["state"], "waiting",
        "{:#}",
        detail["rollout"]
    );
    assert!(
        text(&detail["rollout"]["waiting_until"]).starts_with("2026-11-03T09:00:00"),
        "{:#}",
        detail["rollout"]
    );
    assert!(given(&round(&app, &agents, &json!({})).await).is_empty());
    later(&app, (22 * 60 + 30) * 60 + 60).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["rollout"]["wave"], 1, "{:#}", detail["rollout"]);
    assert_eq!(given(&round(&app, &agents, &json!({})).await).len(), 1);
    app.stop().await;
}

/// Moves the clock on by `seconds`, lets the scheduler queue what is due, runs it.
pub(crate) async fn later(app: &TestApp, seconds: i64) {
    app.clock.advance(chrono::Duration::seconds(seconds));
    let scheduler = scheduler::Scheduler::new(app.state.db.clone(), Arc::new(app.clock.clone()));
    scheduler.tick(app.clock_now()).await.expect("tick");
    app.run_pending_jobs().await;
}

#[tokio::test]
async fn canaries_by_selector_go_first_and_the_preview_shows_each_waves_hosts() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    let agents = hosts(&fleet, 6).await;
    for agent in &agents[4..] {
        let labelled = app
            .call(
                As::Session(&owner),
                Method::PATCH,
                &format!(
                    "/v1/orgs/acme/hosts/{}",
                    agent.host_id.clone().unwrap_or_default()
                ),
                Some(json!({"labels": {"canary": "true"}})),
            )
            .await;
        assert_eq!(labelled.status.as_u16(), 200, "{}", labelled.body);
    }
    let rollout = json!({"waves": [{"name": "canary", "size": 1, "selector": "canary=true"},
                                   {"name": "half", "size": "50%"}]});
    let preview = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/policies/preview",
            Some(json!({"scope": {"groups": []}, "rollout": rollout})),
        )
        .await;
    assert_eq!(preview.status.as_u16(), 200, "{}", preview.body);
    assert_eq!(
        preview.json()["waves"],
        json!([{"name": "canary", "hosts": 1}, {"name": "half", "hosts": 3},
               {"name": "rest", "hosts": 2}])
    );
    let plain = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/policies/preview",
            Some(json!({"scope": {"groups": []}})),
        )
        .await
        .json();
    assert_eq!(plain["waves"], json!([{"name": "rest", "hosts": 6}]));
    let created = fleet.policy(policy(rollout)).await;
    assert_eq!(created["rollout"]["waves"][1]["size"], "50%");
    assert_eq!(created["rollout"]["halt_after_failures"], 1, "the default");
    assert_eq!(created["rollout"]["success_percent"], 100);
    assert!(created["rollout"]["max_in_flight"].is_null());
    let id = approved(&fleet).await;
    let jobs = round(&app, &agents, &json!({})).await;
    let first = given(&jobs);
    assert_eq!(first.len(), 1);
    assert!(
        first.iter().all(|i| *i >= 4),
        "a canary-labelled host goes first: {first:?}"
    );
    let detail = fleet.detail(&id).await;
    assert_eq!(in_wave(&detail, 0), hostnames(&agents, &first));
    app.stop().await;
}

#[tokio::test]
async fn bad_rollouts_and_bad_halts_are_refused_and_store_nothing() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    let agents = hosts(&fleet, 3).await;
    let bad = [
        (
            json!({"waves": [{"name": "a", "size": 0}]}),
            "waves[0].size",
        ),
        (
            json!({"waves": [{"name": "a", "size": "0%"}]}),
            "waves[0].size",
        ),
        (
            json!({"waves": [{"name": "a", "size": "150%"}]}),
            "waves[0].size",
        ),
        (
            json!({"waves": [{"name": "a", "size": "abc"}]}),
            "waves[0].size",
        ),
        (
            json!({"waves": [{"name": "a", "size": "10"}]}),
            "waves[0].size",
        ),
        (
            json!({"waves": [{"name": "a", "size": 1.5}]}),
            "waves[0].size",
        ),
        (
            json!({"waves": [{"name": "a", "size": 1}, {"name": "b", "size": 1},
                          {"name": "c", "size": 1}, {"name": "d", "size": 1}]}),
            "rollout.waves",
        ),
        (
            json!({"waves": [{"name": "a", "size": 1, "selector": "env in prod"}]}),
            "waves[0].selector",
        ),
        (
            json!({"waves": [{"name": "rest", "size": 1}]}),
            "waves[0].name",
        ),
        (
            json!({"waves": [{"name": "a", "size": 1}, {"name": "a", "size": 1}]}),
            "waves[1].name",
        ),
        (
            json!({"waves": [], "halt_after_failures": "0%"}),
            "halt_after_failures",
        ),
        (
            json!({"waves": [], "halt_after_failures": "x"}),
            "halt_after_failures",
        ),
    ];
    for (rollout, field) in bad {
        for path in ["/v1/orgs/acme/policies", "/v1/orgs/acme/policies/preview"] {
            let body = if path.ends_with("preview") {
                json!({"scope": {"groups": []}, "rollout": rollout})
            } else {
                policy(rollout.clone())
            };
            let refused = post(&app, &owner, path, Some(body)).await;
            let problem = refused.assert_problem(400, "invalid-request");
            assert!(
                text(&problem["detail"]).contains(field),
                "{rollout} at {path}: {problem}"
            );
        }
    }
    // Bounds the schema states: refused by it.
    for rollout in [
        json!({"waves": [], "success_percent": 101}),
        json!({"waves": [], "max_in_flight": 0}),
        json!({"waves": [], "soak_minutes": 10081}),
        json!({"waves": [{"name": "a", "size": true}]}),
        json!({"waves": [{"name": "a", "size": 1, "extra": 1}]}),
    ] {
        post(
            &app,
            &owner,
            "/v1/orgs/acme/policies",
            Some(policy(rollout)),
        )
        .await
        .assert_problem(400, "invalid-request");
    }
    assert_eq!(
        policies::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        0,
        "nothing stored"
    );

    // A proposal that has not gone ahead has nothing to halt or resume.
    let mut body = policy(json!({"waves": [{"name": "a", "size": 1}]}));
    body["required_approvals"] = json!(1);
    fleet.policy(body).await;
    let list = fleet.until(|l| l.len() == 1).await;
    let id = text(&list[0]["id"]);
    let halt = format!("/v1/orgs/acme/proposals/{id}/halt");
    let resume = format!("/v1/orgs/acme/proposals/{id}/resume");
    post(&app, &owner, &halt, Some(json!({"reason": "stop"})))
        .await
        .assert_problem(409, "invalid-state");
    post(&app, &owner, &resume, None)
        .await
        .assert_problem(409, "invalid-state");
    assert!(fleet.detail(&id).await.get("rollout").is_none());
    assert_eq!(
        proposal_rollouts::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        0
    );
    // Going ahead: resuming what is not halted is refused; a halt needs a reason and an operator.
    let approved = fleet.decide(&owner, &id, "approve", None).await;
    assert_eq!(approved.status.as_u16(), 200, "{}", approved.body);
    post(&app, &owner, &resume, None)
        .await
        .assert_problem(409, "invalid-state");
    post(&app, &owner, &halt, Some(json!({"reason": "  "})))
        .await
        .assert_problem(400, "invalid-request");
    post(&app, &owner, &halt, None)
        .await
        .assert_problem(400, "invalid-request");
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    post(&app, &viewer, &halt, Some(json!({"reason": "stop"})))
        .await
        .assert_problem(403, "forbidden");
    assert_eq!(fleet.detail(&id).await["rollout"]["state"], "running");
    let halted = post(&app, &owner, &halt, Some(json!({"reason": "a bad mirror"}))).await;
    assert_eq!(halted.status.as_u16(), 200, "{}", halted.body);
    assert_eq!(halted.json()["halted_reason"], "a bad mirror");
    assert!(
        given(&round(&app, &agents, &json!({})).await).is_empty(),
        "halted by hand before any job went out"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_halt_reaches_every_channel_kind_and_pages_as_a_trigger() {
    let pagerduty = Receiver::start().await;
    let app = TestApp::builder()
        .pagerduty_events_url(&pagerduty.url("/v2/enqueue"))
        .start()
        .await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    app.verified_domain("acme", "acme.test").await;
    let (slack, teams, ntfy, webhook) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    for (kind, config) in [
        (
            "slack",
            json!({"webhook_url": slack.url("/services/T/B/x")}),
        ),
        ("teams", json!({"webhook_url": teams.url("/webhookb2/x")})),
        ("ntfy", json!({"topic_url": ntfy.url("/fleet")})),
        ("pagerduty", json!({"routing_key": "R0123456789abcdef"})),
        ("webhook", json!({"url": webhook.url("/in")})),
        ("email", json!({"to": ["ops@acme.test"]})),
    ] {
        let created = post(
            &app,
            &owner,
            "/v1/orgs/acme/notification-channels",
            Some(json!({"kind": kind, "name": kind, "config": config,
                        "events": ["proposal.halted"]})),
        )
        .await;
        assert_eq!(created.status.as_u16(), 201, "{kind}: {}", created.body);
    }
    hosts(&fleet, 2).await;
    fleet
        .policy(policy(json!({"waves": [{"name": "first", "size": 1}]})))
        .await;
    let id = approved(&fleet).await;
    let halted = post(
        &app,
        &owner,
        &format!("/v1/orgs/acme/proposals/{id}/halt"),
        Some(json!({"reason": "the mirror serves a broken build"})),
    )
    .await;
    assert_eq!(halted.status.as_u16(), 200, "{}", halted.body);
    app.run_pending_jobs().await;
    let wait = Duration::from_secs(20);
    let said = "the mirror serves a broken build";
    assert!(
        slack.wait_for(1, wait).await[0].json()["text"]
            .as_str()
            .is_some_and(|t| t.contains("halted") && t.contains(said))
    );
    assert_eq!(
        teams.wait_for(1, wait).await[0].json()["attachments"][0]["content"]["type"],
        "AdaptiveCard"
    );
    let n = &ntfy.wait_for(1, wait).await[0];
    assert!(
        n.header("title").is_some_and(|t| t.contains("halted")),
        "{:?}",
        n.header("title")
    );
    assert!(n.text().contains(said));
    let hook = webhook.wait_for(1, wait).await[0].json();
    assert_eq!(hook["type"], "proposal.halted");
    assert_eq!(hook["data"]["rollout"]["reason"], said);
    assert_eq!(hook["data"]["rollout"]["by_hand"], true);
    let page = pagerduty.wait_for(1, wait).await[0].json();
    assert_eq!(page["event_action"], "trigger");
    assert_eq!(page["payload"]["severity"], "error");
    assert_eq!(page["dedup_key"], json!(id));
    let mail = app.smtp.wait_for_message_to("ops@acme.test", wait).await;
    assert!(
        mail.header("Subject").is_some_and(|s| s.contains("halted")),
        "{:?}",
        mail.header("Subject")
    );
    assert!(mail.text().contains(said));
    app.stop().await;
}
