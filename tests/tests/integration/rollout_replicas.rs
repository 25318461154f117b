//! Several replicas racing on one rollout (issue 31, decisions §20), on Postgres: two api
//! processes taking every wave's results at once, two worker processes running timers runs at
//! once when a soak ends, beside two scheduler processes (one leads). Each wave begins exactly
//! once and none is skipped; a budget reached by two failures at once halts once. SQLite runs
//! as one process by design (the embedded default), so these need `TEST_DATABASE_URL`.

use std::time::Duration;

use chrono::Utc;
use domain::proposals::jobs::ProposalTimers;
use entities::{audit_events, host_jobs, notification_events, proposal_rollouts};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    TestApp,
    agent::TestAgent,
    processes::{ApiReplica, spawn_scheduler, spawn_worker, stop_gracefully},
};

use crate::{
    proposals::{Fleet, text},
    rollouts::{hosts, policy},
};

const API: &str = env!("CARGO_BIN_EXE_fleet-api");
const WORKER: &str = env!("CARGO_BIN_EXE_fleet-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_fleet-scheduler");

#[allow(clippy::disallowed_methods)] // The other processes run on the real clock.
fn now() -> chrono::DateTime<Utc> {
    Utc::now()
}

/// Every agent checks in at once, each at replica `i % 2`; the jobs each was handed.
async fn round(app: &TestApp, replicas: &[&str], agents: &[TestAgent]) -> Vec<Vec<Value>> {
    futures::future::join_all(agents.iter().enumerate().map(|(i, agent)| async move {
        let answer = agent
            .post_at(
                app,
                replicas[i % replicas.len()],
                "/v1/agent/check-in",
                &agent.check_in_body("same"),
                now(),
            )
            .await;
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
        answer.json()["jobs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }))
    .await
}

/// Every job of `jobs` reports `status(i)` at once, host `i` at replica `i % 2`.
async fn results(
    app: &TestApp,
    replicas: &[&str],
    agents: &[TestAgent],
    jobs: &[Vec<Value>],
    status: impl Fn(usize) -> &'static str,
) {
    let status = &status;
    futures::future::join_all(jobs.iter().enumerate().flat_map(|(i, list)| {
        list.iter().map(move |job| async move {
            let body = json!({"status": status(i), "log": "raced", "rebooted": false,
                              "finished_at": now()});
            let answer = agents[i]
                .post_at(
                    app,
                    replicas[(i + 1) % replicas.len()],
                    &format!("/v1/agent/jobs/{}/result", text(&job["id"])),
                    &body,
                    now(),
                )
                .await;
            assert_eq!(answer.status.as_u16(), 204, "{}", answer.body);
        })
    }))
    .await;
}

async fn rollout(app: &TestApp, proposal: uuid::Uuid) -> proposal_rollouts::Model {
    proposal_rollouts::Entity::find_by_id(proposal)
        .one(&app.state.db.orm)
        .await
        .expect("read")
        .expect("a rollout row")
}

/// Waits (at most a minute) until the rollout's row satisfies `check`.
async fn until(
    app: &TestApp,
    proposal: uuid::Uuid,
    check: impl Fn(&proposal_rollouts::Model) -> bool,
) -> proposal_rollouts::Model {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let row = rollout(app, proposal).await;
        if check(&row) {
            return row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rollout did not get there within a minute: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Processes {
    apis: Vec<ApiReplica>,
    others: Vec<tokio::process::Child>,
}

impl Processes {
    async fn start(app: &TestApp) -> Processes {
        let url = app.database.url();
        let smtp = app.smtp.url();
        let mut apis = Vec::new();
        for _ in 0..2 {
            apis.push(ApiReplica::start(API, url, &smtp).await);
        }
        let others = vec![
            spawn_worker(WORKER, url, &smtp, 4),
            spawn_worker(WORKER, url, &smtp, 4),
            spawn_scheduler(SCHEDULER, url),
            spawn_scheduler(SCHEDULER, url),
        ];
        Processes { apis, others }
    }

    fn bases(&self) -> Vec<&str> {
        self.apis.iter().map(|a| a.base.as_str()).collect()
    }

    async fn stop(self) {
        for api in self.apis {
            api.stop().await;
        }
        for mut child in self.others {
            stop_gracefully(&mut child).await;
        }
    }
}

/// The proposal's wave starts as its audit log records them, in order.
async fn starts(app: &TestApp, proposal: &str) -> Vec<i64> {
    let rows = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("proposal.wave_started"))
        .filter(audit_events::Column::TargetId.eq(proposal))
        .all(&app.state.db.orm)
        .await
        .expect("audit");
    let mut waves: Vec<i64> = rows
        .iter()
        .filter_map(|r| r.details.as_ref()?.read().ok())
        .filter_map(|d: Value| d["wave"].as_i64())
        .collect();
    waves.sort_unstable();
    waves
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apis_two_workers_and_two_schedulers_begin_each_wave_once() {
    let app = TestApp::builder().without_worker().start().await;
    if !app.database.is_postgres() {
        eprintln!("skipped: several processes on one database need Postgres");
        return;
    }
    app.clock.set(now());
    // Started first: their workers send the sign-up email too.
    let processes = Processes::start(&app).await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 20).await;
    fleet
        .policy(policy(json!({
            "waves": [{"name": "a", "size": 4}, {"name": "b", "size": 8}],
            "soak_minutes": 1,
            "halt_after_failures": "50%",
        })))
        .await;
    let list = fleet
        .until(|l| l.len() == 1 && l[0]["status"] == "approved")
        .await;
    let id = text(&list[0]["id"]);
    let proposal = platform::ids::ProposalId::parse(&id)
        .map(platform::ids::ProposalId::uuid)
        .expect("prp id");
    let replicas = processes.bases();

    for (wave, size) in [(0, 4), (1, 8), (2, 8)] {
        let jobs = round(&app, &replicas, &agents).await;
        let given = jobs.iter().filter(|j| !j.is_empty()).count();
        assert_eq!(given, size, "wave {wave}: {jobs:?}");
        // Every result of the wave at once, across both api replicas.
        results(&app, &replicas, &agents, &jobs, |_| "succeeded").await;
        if wave == 2 {
            until(&app, proposal, |r| r.state == "done").await;
            break;
        }
        let row = until(&app, proposal, |r| r.state == "soaking").await;
        assert_eq!(row.begun, wave + 1);
        // The soak ends now (its results moved back past it), and eight timers runs race for it
        // on both workers, beside the leading scheduler's own.
        let db = &app.state.db.orm;
        db.execute_unprepared(&format!(
            "UPDATE host_jobs SET finished_at = finished_at - interval '2 minutes' \
             WHERE proposal_id = '{proposal}'"
        ))
        .await
        .expect("move results back");
        db.execute_unprepared(&format!(
            "UPDATE proposal_rollouts SET due_at = now() - interval '1 second' \
             WHERE proposal_id = '{proposal}'"
        ))
        .await
        .expect("soak over");
        for k in 0..8 {
            app.state
                .queue
                .push(ProposalTimers {
                    at: format!("race-{wave}-{k}"),
                })
                .await
                .expect("queue");
        }
        until(&app, proposal, |r| r.begun == wave + 2).await;
    }
    assert_eq!(
        starts(&app, &id).await,
        [0, 1, 2],
        "each wave began once, in order"
    );
    let jobs = host_jobs::Entity::find()
        .filter(host_jobs::Column::ProposalId.eq(proposal))
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(jobs, 20, "one job per host, none twice");
    assert_eq!(fleet.detail(&id).await["status"], "applied");
    processes.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_at_once_on_two_replicas_halt_once() {
    let app = TestApp::builder().without_worker().start().await;
    if !app.database.is_postgres() {
        eprintln!("skipped: several processes on one database need Postgres");
        return;
    }
    app.clock.set(now());
    // Started first: their workers send the sign-up email too.
    let processes = Processes::start(&app).await;
    let fleet = Fleet::new(&app).await;
    let agents = hosts(&fleet, 8).await;
    fleet
        .policy(policy(json!({
            "waves": [{"name": "a", "size": 6}],
            "halt_after_failures": 2,
        })))
        .await;
    let list = fleet
        .until(|l| l.len() == 1 && l[0]["status"] == "approved")
        .await;
    let id = text(&list[0]["id"]);
    let proposal = platform::ids::ProposalId::parse(&id)
        .map(platform::ids::ProposalId::uuid)
        .expect("prp id");
    let replicas = processes.bases();
    let jobs = round(&app, &replicas, &agents).await;
    assert_eq!(jobs.iter().filter(|j| !j.is_empty()).count(), 6);
    // Every one of the six fails, at once, across both replicas.
    results(&app, &replicas, &agents, &jobs, |_| "failed").await;
    let row = until(&app, proposal, |r| r.state == "halted").await;
    assert_eq!(row.begun, 1, "never went on to the next wave");
    let halted = notification_events::Entity::find()
        .filter(notification_events::Column::Kind.eq("proposal.halted"))
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(halted, 1, "one proposal.halted event");
    assert!(
        round(&app, &replicas, &agents)
            .await
            .iter()
            .all(|j| j.is_empty()),
        "no further jobs"
    );
    processes.stop().await;
}
