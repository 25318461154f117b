//! Issue 31's acceptance, black box: the `api` program on its embedded default (SQLite under
//! `data/`, worker and scheduler in the process), an organization made through the emailed
//! sign-up, simulated hosts (`fleet-sim`, each job taking a while, its `--job-log` saying what
//! each check-in was handed and when each result went) and, over HTTP only, the rollout
//! scenarios of decisions §20: 20 hosts in waves of 2 and 50 % that halt at the first failure
//! and resume, with one `proposal.halted` webhook; `max_in_flight: 3`; a reboot budget of 2 for
//! 10 hosts needing a reboot; and the refusals. The program keeps its own SQLite whatever
//! `TEST_DATABASE_URL` says, so both CI runs run this the same.
//!
//! Times compare the simulator's log with the test's own clock (one machine): a job handed out
//! is answered after the service decided it, and a result is sent before the service records
//! it, so each interval the log shows lies inside the one the service saw.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use reqwest::Client;
use serde_json::{Value, json};
use tests::receiver::{Receiver, TestCa};
use tokio::process::{Child, Command};

use crate::impact_black_box::{Program, admin_token, eventually, get, start_with};

const SIM: &str = env!("CARGO_BIN_EXE_fleet-sim");

/// Unix milliseconds now, on the clock `fleet-sim` writes its log with.
fn now_ms() -> i64 {
    platform::clock::Clock::now(&platform::clock::SystemClock).timestamp_millis()
}

/// `fleet-sim` checking `hosts` hosts in every second until killed, logging to `log`.
fn simulate(program: &Program, token: &str, hosts: usize, log: &Path, extra: &[&str]) -> Child {
    Command::new(SIM)
        .args([
            "--url",
            &program.base,
            "--org",
            "acme",
            "--api-token",
            token,
            "--hosts",
            &hosts.to_string(),
            "--interval",
            "1",
            "--duration",
            "600",
            "--concurrency",
            "32",
            "--job-log",
            &log.display().to_string(),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start fleet-sim")
}

/// What the simulator's `--job-log` says so far: check-ins and results, in the order written.
#[derive(Default)]
struct Log {
    check_ins: Vec<Value>,
    results: Vec<Value>,
}

impl Log {
    fn read(path: &Path) -> Log {
        let mut log = Log::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // A line still being written does not parse yet; the next read has it.
        for line in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            match line["event"].as_str() {
                Some("check_in") => log.check_ins.push(line),
                Some("result") => log.results.push(line),
                _ => {}
            }
        }
        log
    }

    /// Every job handed out: (host, job, when the answer carrying it was read), first handing
    /// of each job only.
    fn handed(&self) -> Vec<(String, Value, i64)> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for check_in in &self.check_ins {
            for job in check_in["jobs"].as_array().into_iter().flatten() {
                if seen.insert(text(&job["id"])) {
                    out.push((
                        text(&check_in["host"]),
                        job.clone(),
                        ms(check_in, "answered_ms"),
                    ));
                }
            }
        }
        out.sort_by_key(|(_, _, at)| *at);
        out
    }

    /// The result of job `id`.
    fn result_of(&self, id: &str) -> Option<&Value> {
        self.results.iter().find(|r| r["job"] == id)
    }

    /// Check-ins of `host` sent after `after` (Unix ms).
    fn check_ins_after<'a>(&'a self, host: &'a str, after: i64) -> impl Iterator<Item = &'a Value> {
        self.check_ins
            .iter()
            .filter(move |c| c["host"] == host && ms(c, "sent_ms") > after)
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn ms(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// The most intervals `[start, end)` open at one moment.
fn most_at_once(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|(start, end)| [(*start, 1), (*end, -1)])
        .collect();
    // An interval ending at the moment another starts is not open with it.
    edges.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        open += step;
        most = most.max(open);
    }
    usize::try_from(most).unwrap_or(0)
}

async fn post(client: &Client, url: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = client.post(url).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let answer = request.send().await.expect("an answer");
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    if status >= 400 {
        assert_eq!(content_type, "application/problem+json", "{url}: {body}");
    }
    (status, body)
}

/// Asserts `answer` is the problem `status` `kind` of decisions §1.
fn problem(answer: &(u16, Value), status: u16, kind: &str, what: &str) {
    assert_eq!(answer.0, status, "{what}: {}", answer.1);
    assert_eq!(answer.1["type"], kind, "{what}: {}", answer.1);
    assert_eq!(answer.1["status"], status, "{what}: {}", answer.1);
}

/// A policy over every host needing one approval, going out as `rollout` says (none: null).
fn policy(rollout: Value, reboot: &str) -> Value {
    let mut body = json!({
        "name": "everything", "scope": {"groups": []}, "required_approvals": 1,
        "apply": "asap", "reboot": reboot, "auto_merge": false, "updates": "all",
    });
    if !rollout.is_null() {
        body["rollout"] = rollout;
    }
    body
}

/// Waits for `hosts` simulated hosts online with their inventories in.
async fn fleet_online(program: &Program, client: &Client, token: &str, hosts: usize) {
    let url = format!("{}/v1/orgs/acme/hosts?limit=500", program.base);
    eventually(&format!("{hosts} hosts online"), || {
        let (client, url, token) = (client.clone(), url.clone(), token.to_owned());
        async move {
            let list = get(&client, &url, &token).await;
            let online = list["items"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|h| h["status"] == "online" && !h["last_inventory_at"].is_null())
                    .count()
            });
            (online == hosts).then_some(())
        }
    })
    .await;
}

/// Creates the policy; the open proposal it opens for all `hosts` hosts.
async fn open_proposal(
    program: &Program,
    client: &Client,
    token: &str,
    body: Value,
    hosts: i64,
) -> String {
    let base = &program.base;
    let created = post(
        client,
        &format!("{base}/v1/orgs/acme/policies"),
        token,
        Some(body),
    )
    .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let list_url = format!("{base}/v1/orgs/acme/proposals?status=open");
    eventually(&format!("an open proposal of the {hosts} hosts"), || {
        let (client, url, token) = (client.clone(), list_url.clone(), token.to_owned());
        async move {
            let list = get(&client, &url, &token).await;
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["status"] == "open" && p["hosts"] == hosts)
                .map(|p| text(&p["id"]))
        }
    })
    .await
}

async fn detail(program: &Program, client: &Client, token: &str, id: &str) -> Value {
    get(
        client,
        &format!("{}/v1/orgs/acme/proposals/{id}", program.base),
        token,
    )
    .await
}

/// The hostnames the detail's targets put in each wave.
fn waves_of(detail: &Value) -> BTreeMap<u64, BTreeSet<String>> {
    let mut waves: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for target in detail["targets"].as_array().into_iter().flatten() {
        waves
            .entry(target["wave"].as_u64().expect("each target's wave"))
            .or_default()
            .insert(text(&target["hostname"]));
    }
    waves
}

/// The detail once `ready` says so of it (asked every 200 ms).
async fn detail_when(
    program: &Program,
    client: &Client,
    token: &str,
    id: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let ready = &ready;
    eventually(what, || async move {
        let seen = detail(program, client, token, id).await;
        ready(&seen).then_some(seen)
    })
    .await
}

async fn stop(mut sim: Child, mut program: Program) {
    let _ = sim.start_kill();
    let _ = sim.wait().await;
    let _ = program.child.start_kill();
    let _ = program.child.wait().await;
}

#[tokio::test]
async fn twenty_simulated_hosts_go_out_two_then_half_halt_at_a_failure_page_once_and_resume() {
    platform::outbound::install_crypto_provider();
    let receiver = Receiver::start().await;
    let ca_file = TestCa::get().file.display().to_string();
    let program = start_with(
        "rollout-black-box",
        &[
            ("SECRETS_KEY", tests::TEST_SECRETS_KEY),
            ("OUTBOUND_CA_FILE", ca_file.as_str()),
            ("OUTBOUND_ALLOW_PRIVATE", "true"),
        ],
    )
    .await;
    let client = Client::new();
    let token = admin_token(&program, &client).await;
    let base = program.base.clone();
    let org = format!("{base}/v1/orgs/acme");

    let channel = post(
        &client,
        &format!("{org}/notification-channels"),
        &token,
        Some(
            json!({"kind": "webhook", "name": "halts", "events": ["proposal.halted"],
                    "config": {"url": receiver.url("/halts")}}),
        ),
    )
    .await;
    assert_eq!(channel.0, 201, "{}", channel.1);
    let channel_id = text(&channel.1["id"]);

    // 20 hosts; each job takes a second; the third job the fleet is handed fails.
    let log_file: PathBuf = program.dir.join("jobs.jsonl");
    let sim = simulate(
        &program,
        &token,
        20,
        &log_file,
        &["--fail-jobs", "3", "--job-ms", "1000"],
    );
    fleet_online(&program, &client, &token, 20).await;

    // Bad rollouts are refused at saving and at previewing, naming the field; nothing stored.
    let too_many: Vec<Value> = (0..21)
        .map(|i| json!({"name": format!("w{i}"), "size": 1}))
        .collect();
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
            json!({"waves": [{"name": "a", "size": "ten%"}]}),
            "waves[0].size",
        ),
        (json!({"waves": too_many}), "waves"),
        (
            json!({"waves": [{"name": "a", "size": 1, "selector": "env in prod"}]}),
            "waves[0].selector",
        ),
    ];
    for (rollout, field) in bad {
        for path in ["policies", "policies/preview"] {
            let body = if path == "policies" {
                policy(rollout.clone(), "never")
            } else {
                json!({"scope": {"groups": []}, "rollout": rollout})
            };
            let refused = post(&client, &format!("{org}/{path}"), &token, Some(body)).await;
            problem(
                &refused,
                400,
                "invalid-request",
                &format!("{rollout} at {path}"),
            );
            assert!(
                text(&refused.1["detail"]).contains(field),
                "{rollout} at {path} names {field}: {}",
                refused.1
            );
        }
    }
    let policies = get(&client, &format!("{org}/policies"), &token).await;
    assert_eq!(policies["items"], json!([]), "nothing stored: {policies}");

    let id = open_proposal(
        &program,
        &client,
        &token,
        policy(
            json!({"waves": [{"name": "canary", "size": 2}, {"name": "half", "size": "50%"}],
                   "halt_after_failures": 1}),
            "never",
        ),
        20,
    )
    .await;
    let proposal = format!("{org}/proposals/{id}");

    // Not gone ahead: nothing to halt or resume, and nothing stored by trying.
    let halt = post(
        &client,
        &format!("{proposal}/halt"),
        &token,
        Some(json!({"reason": "stop"})),
    )
    .await;
    problem(&halt, 409, "invalid-state", "halting an open proposal");
    let resume = post(&client, &format!("{proposal}/resume"), &token, None).await;
    problem(&resume, 409, "invalid-state", "resuming an open proposal");
    let open = detail(&program, &client, &token, &id).await;
    assert_eq!(open["status"], "open");
    assert!(open["rollout"].is_null(), "no rollout yet: {open:#}");
    assert!(
        Log::read(&log_file).handed().is_empty(),
        "no job before the approval"
    );

    let approved = post(&client, &format!("{proposal}/approve"), &token, None).await;
    assert_eq!(approved.0, 200, "{}", approved.1);

    // The third job fails: halted, with the reason.
    let halted = detail_when(&program, &client, &token, &id, "the rollout halted", |d| {
        d["rollout"]["state"] == "halted"
    })
    .await;
    let halt_seen = now_ms();
    assert_eq!(halted["rollout"]["wave"], 1, "{:#}", halted["rollout"]);
    assert!(
        text(&halted["rollout"]["halted_reason"]).contains("halt_after_failures"),
        "{:#}",
        halted["rollout"]
    );
    let waves = waves_of(&halted);
    let sizes: Vec<(String, u64)> = halted["rollout"]["waves"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| (text(&w["name"]), w["hosts"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(
        sizes,
        [
            ("canary".into(), 2),
            ("half".into(), 10),
            ("rest".into(), 8)
        ]
    );
    assert_eq!(
        waves.values().map(BTreeSet::len).collect::<Vec<_>>(),
        [2, 10, 8],
        "each target carries its wave: {waves:?}"
    );
    let (canary, half, rest) = (&waves[&0], &waves[&1], &waves[&2]);

    // Halted: the jobs handed out finish and are recorded; no host gets a new one, over two
    // check-ins of every host after the halt was seen.
    let at_halt = detail_when(
        &program,
        &client,
        &token,
        &id,
        "the jobs out at the halt recorded",
        |d| d["rollout"]["waves"][1]["running"] == 0,
    )
    .await;
    eventually("two check-ins of every host after the halt", || async {
        let log = Log::read(&log_file);
        (canary.iter().chain(half).chain(rest))
            .all(|host| log.check_ins_after(host, halt_seen).count() >= 2)
            .then_some(())
    })
    .await;
    let resume_sent = now_ms();
    let log = Log::read(&log_file);
    for check_in in log
        .check_ins
        .iter()
        .filter(|c| ms(c, "sent_ms") > halt_seen)
    {
        assert_eq!(
            check_in["jobs"],
            json!([]),
            "halted: no job for a check-in after the halt: {check_in}"
        );
    }
    let half_at_halt = &at_halt["rollout"]["waves"][1];
    assert_eq!(half_at_halt["failed"], 1, "{half_at_halt}");
    assert_eq!(
        at_halt["rollout"]["waves"][2],
        json!({"name": "rest", "hosts": 8, "pending": 8, "running": 0, "succeeded": 0,
               "failed": 0, "left": 0})
    );
    assert_eq!(at_halt["rollout"]["state"], "halted");

    // One proposal.halted delivery, to the webhook.
    let seen = receiver.wait_for(1, Duration::from_secs(60)).await;
    let hook = seen[0].json();
    assert_eq!(hook["type"], "proposal.halted", "{hook}");
    assert_eq!(hook["data"]["proposal"]["id"], json!(id));
    assert!(
        text(&hook["data"]["rollout"]["reason"]).contains("halt_after_failures"),
        "{hook}"
    );

    // Resuming continues from the halted wave, with its failure set aside.
    let resumed = post(&client, &format!("{proposal}/resume"), &token, None).await;
    assert_eq!(resumed.0, 200, "{}", resumed.1);
    assert_ne!(resumed.1["state"], "halted", "{}", resumed.1);
    // The detail reads the proposal before its rollout, not in one snapshot: the result that
    // ends the rollout and settles the proposal (one transaction) can land between the two
    // reads, so wait for the proposal's own status to have left `applying` too.
    let done = detail_when(&program, &client, &token, &id, "the rollout done", |d| {
        d["rollout"]["state"] == "done" && d["status"] != "applying"
    })
    .await;
    assert_eq!(done["status"], "partially_applied", "one host failed");
    let counts: Vec<(u64, u64)> = done["rollout"]["waves"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            (
                w["succeeded"].as_u64().unwrap_or(0),
                w["failed"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(counts, [(2, 0), (9, 1), (8, 0)], "{:#}", done["rollout"]);

    // What the hosts were handed, and when.
    let log = Log::read(&log_file);
    let handed = log.handed();
    assert_eq!(handed.len(), 20, "one job each: {handed:?}");
    assert_eq!(
        handed
            .iter()
            .map(|(h, _, _)| h.clone())
            .collect::<BTreeSet<_>>()
            .len(),
        20
    );
    let result = |job: &Value| {
        log.result_of(&text(&job["id"]))
            .unwrap_or_else(|| panic!("a result of {job}"))
    };
    let last_sent = |wave: &BTreeSet<String>| {
        handed
            .iter()
            .filter(|(h, _, _)| wave.contains(h))
            .map(|(_, job, _)| ms(result(job), "sent_ms"))
            .max()
            .unwrap_or(i64::MAX)
    };
    // Only the two canaries got jobs until both had succeeded.
    let canaries_done = last_sent(canary);
    for (host, job, at) in &handed {
        if canary.contains(host) {
            assert_eq!(result(job)["status"], "succeeded", "{host}");
        } else {
            assert!(
                *at >= canaries_done,
                "{host} was handed a job before the canaries' results: {job}"
            );
        }
    }
    // The next ten, then (after the resume and once the ten had results) the rest.
    let half_done = last_sent(half);
    for (host, job, at) in &handed {
        if rest.contains(host) {
            assert!(
                *at >= resume_sent && *at >= half_done,
                "{host} of the rest was handed a job before the resume or the half's results: {job}"
            );
        }
    }
    let failed: Vec<&Value> = log
        .results
        .iter()
        .filter(|r| r["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(half.contains(&text(&failed[0]["host"])), "{failed:?}");

    // Still one delivery, delivered; the finished rollout has nothing to halt or resume.
    let deliveries = get(
        &client,
        &format!("{org}/notification-channels/{channel_id}/deliveries"),
        &token,
    )
    .await;
    let items = deliveries["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{deliveries:#}");
    assert_eq!(items[0]["event"], "proposal.halted");
    assert_eq!(items[0]["status"], "delivered");
    assert_eq!(receiver.received().len(), 1, "one proposal.halted request");
    let resume = post(&client, &format!("{proposal}/resume"), &token, None).await;
    problem(&resume, 409, "invalid-state", "resuming a done rollout");
    let halt = post(
        &client,
        &format!("{proposal}/halt"),
        &token,
        Some(json!({"reason": "too late"})),
    )
    .await;
    problem(&halt, 409, "invalid-state", "halting a done rollout");
    stop(sim, program).await;
}

#[tokio::test]
async fn ten_simulated_hosts_never_have_more_than_three_jobs_out_with_max_in_flight_three() {
    platform::outbound::install_crypto_provider();
    let program = start_with("rollout-black-box", &[]).await;
    let client = Client::new();
    let token = admin_token(&program, &client).await;
    let log_file = program.dir.join("jobs.jsonl");
    let sim = simulate(&program, &token, 10, &log_file, &["--job-ms", "1000"]);
    fleet_online(&program, &client, &token, 10).await;
    let id = open_proposal(
        &program,
        &client,
        &token,
        policy(json!({"waves": [], "max_in_flight": 3}), "never"),
        10,
    )
    .await;
    let approved = post(
        &client,
        &format!("{}/v1/orgs/acme/proposals/{id}/approve", program.base),
        &token,
        None,
    )
    .await;
    assert_eq!(approved.0, 200, "{}", approved.1);
    let done = detail_when(&program, &client, &token, &id, "every job done", |d| {
        assert!(
            d["rollout"]["waves"][0]["running"].as_u64().unwrap_or(0) <= 3,
            "{:#}",
            d["rollout"]
        );
        d["rollout"]["state"] == "done" && d["status"] != "applying"
    })
    .await;
    assert_eq!(done["status"], "applied", "{done:#}");

    // A job is out from its handing until its result: never more than three at once.
    let log = Log::read(&log_file);
    let handed = log.handed();
    assert_eq!(handed.len(), 10, "one job each: {handed:?}");
    let out: Vec<(i64, i64)> = handed
        .iter()
        .map(|(host, job, at)| {
            let result = log
                .result_of(&text(&job["id"]))
                .unwrap_or_else(|| panic!("{host}: a result of {job}"));
            assert_eq!(result["status"], "succeeded");
            (*at, ms(result, "sent_ms"))
        })
        .collect();
    // The simulator's times lie inside the service's (handed before the answer arrives, the
    // result received after it is sent), so what it sees at once is at most what the service
    // had out. At least two at once shows the cap was what held the rest back; how close to
    // three it gets depends on how fast a loaded machine checks the hosts in.
    let most = most_at_once(&out);
    assert!(
        (2..=3).contains(&most),
        "never more than the cap, and jobs out together: {most} at once in {out:?}"
    );
    stop(sim, program).await;
}

#[tokio::test]
async fn ten_simulated_hosts_needing_a_reboot_never_reboot_more_than_two_at_once_and_all_reboot() {
    platform::outbound::install_crypto_provider();
    let program = start_with("rollout-black-box", &[]).await;
    let client = Client::new();
    let token = admin_token(&program, &client).await;
    let base = program.base.clone();
    let set = client
        .patch(format!("{base}/v1/orgs/acme"))
        .bearer_auth(&token)
        .json(&json!({"max_concurrent_reboots": 2}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(set.status().as_u16(), 200);
    let set: Value = set.json().await.expect("JSON");
    assert_eq!(set["max_concurrent_reboots"], 2);

    let log_file = program.dir.join("jobs.jsonl");
    let sim = simulate(
        &program,
        &token,
        10,
        &log_file,
        &["--need-reboot", "--job-ms", "500"],
    );
    fleet_online(&program, &client, &token, 10).await;
    let id = open_proposal(
        &program,
        &client,
        &token,
        policy(Value::Null, "immediate"),
        10,
    )
    .await;
    let approved = post(
        &client,
        &format!("{base}/v1/orgs/acme/proposals/{id}/approve"),
        &token,
        None,
    )
    .await;
    assert_eq!(approved.0, 200, "{}", approved.1);

    // Every host rebooted, and checked in since (which ends its reboot).
    let hosts_url = format!("{base}/v1/orgs/acme/hosts?limit=500");
    eventually("every host rebooted and checked in since", || async {
        let log = Log::read(&log_file);
        let rebooted: BTreeMap<String, i64> = log
            .results
            .iter()
            .filter(|r| r["rebooted"] == true)
            .map(|r| (text(&r["host"]), ms(r, "answered_ms")))
            .collect();
        let back = rebooted
            .iter()
            .all(|(host, at)| log.check_ins_after(host, *at).next().is_some());
        (rebooted.len() == 10 && back).then_some(())
    })
    .await;
    let hosts = get(&client, &hosts_url, &token).await;
    for host in hosts["items"].as_array().into_iter().flatten() {
        assert_eq!(host["reboot_required"], false, "{host}");
    }
    let done = detail_when(
        &program,
        &client,
        &token,
        &id,
        "the proposal applied",
        |d| d["status"] == "applied",
    )
    .await;
    assert_eq!(done["rollout"]["state"], "done");

    // A host is rebooting from a job that may reboot handed out until its first check-in after
    // that job's result (decisions §20): never more than two at once, and two at times.
    let log = Log::read(&log_file);
    let mut rebooting = Vec::new();
    let mut kinds = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for check_in in &log.check_ins {
        let host = text(&check_in["host"]);
        for job in check_in["jobs"].as_array().into_iter().flatten() {
            kinds.insert(text(&job["kind"]));
            // A job handed out again before its result is the same reboot.
            if !seen.insert(text(&job["id"])) {
                continue;
            }
            if job["kind"] != "reboot" && job["reboot"] == "never" {
                continue;
            }
            let until = log
                .result_of(&text(&job["id"]))
                .and_then(|r| log.check_ins_after(&host, ms(r, "answered_ms")).next())
                .map_or(i64::MAX, |c| ms(c, "sent_ms"));
            rebooting.push((ms(check_in, "answered_ms"), until));
        }
    }
    assert_eq!(
        most_at_once(&rebooting),
        2,
        "the budget, never more: {rebooting:?}"
    );
    assert!(
        kinds.contains("reboot"),
        "hosts over the budget got a separate reboot job: {kinds:?}"
    );
    stop(sim, program).await;
}
