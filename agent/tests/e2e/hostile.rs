//! Bad input from the server (issue 28): jobs of unknown kinds, naming packages that are not
//! installed or are not plain names, of the wrong ecosystem, with an epoch apt cannot find; a
//! huge `next_check_in_s`; a 500; a server that hangs. Each gets a clear local log line and, where
//! a job exists, a failed result; nothing is applied that was not asked for, and a job is never
//! run twice. The server here is the test's own (it answers what a broken or hostile service
//! might), the agent and the Debian root are real.

use std::{sync::Arc, time::Duration};

use poem::{
    EndpointExt, Response, Route, Server, handler,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpListener},
    post,
    web::{Data, Json, Path},
};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::{roots::Root, service::Agent};

#[derive(Clone)]
enum Reply {
    Answer(Value),
    Status(u16),
    Hang,
}

struct Fake {
    reply: Mutex<Reply>,
    results: Mutex<Vec<(String, Value)>>,
    /// CSRs of renewals, and the key id each check-in signed with.
    renewals: Mutex<Vec<String>>,
    key_ids: Mutex<Vec<String>>,
}

#[handler]
async fn renew(fake: Data<&Arc<Fake>>, Json(body): Json<Value>) -> Response {
    fake.renewals
        .lock()
        .await
        .push(body["csr"].as_str().unwrap_or_default().to_owned());
    Response::builder().content_type("application/json").body(
        json!({"key_id": "cd34", "certificate": "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
               "ca_certificate": "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
               "expires_at": "2099-06-01T00:00:00Z"})
        .to_string(),
    )
}

#[handler]
fn enroll() -> Response {
    Response::builder()
        .status(StatusCode::CREATED)
        .content_type("application/json")
        .body(
            json!({"host_id": "hst_01jdpyb9w6n4v6t2c4xq7w8z3k", "key_id": "ab12",
                   "certificate": "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
                   "ca_certificate": "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
                   "expires_at": "2099-01-01T00:00:00Z", "check_in_interval_s": 300})
            .to_string(),
        )
}

#[handler]
async fn check_in(fake: Data<&Arc<Fake>>, request: &poem::Request) -> Response {
    let input = request.header("signature-input").unwrap_or_default();
    let key_id = input
        .split(';')
        .find_map(|p| p.strip_prefix("keyid="))
        .unwrap_or_default()
        .trim_matches('"')
        .to_owned();
    fake.key_ids.lock().await.push(key_id);
    let reply = fake.reply.lock().await.clone();
    match reply {
        Reply::Answer(body) => Response::builder()
            .content_type("application/json")
            .body(body.to_string()),
        Reply::Status(status) => Response::builder()
            .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .content_type("application/problem+json")
            .body(r#"{"type":"internal","title":"Internal","status":500,"detail":"request id 1"}"#),
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Response::builder().status(StatusCode::NO_CONTENT).finish()
        }
    }
}

#[handler]
async fn result(
    fake: Data<&Arc<Fake>>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> StatusCode {
    fake.results.lock().await.push((id, body));
    StatusCode::NO_CONTENT
}

fn job(id: &str, kind: &str, package: &str, ecosystem: &str, to: &str) -> Value {
    json!({"id": id, "kind": kind, "proposal_id": "prp_01jdpyb9w6n4v6t2c4xq7w8z3k", "proposal_number": 7,
           "reboot": "immediate", "changes": [{"package": package, "ecosystem": ecosystem,
           "from_version": "1.0", "to_version": to}]})
}

#[tokio::test]
async fn bad_answers_get_clear_logs_and_failed_results_and_nothing_applied() {
    let root = Root::debian();
    root.write("/etc/hostname", "hostile-test\n");
    let fake = Arc::new(Fake {
        reply: Mutex::new(Reply::Status(500)),
        results: Mutex::new(Vec::new()),
        renewals: Mutex::new(Vec::new()),
        key_ids: Mutex::new(Vec::new()),
    });
    let acceptor = TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .expect("bind");
    let address = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .expect("an address");
    let app = Route::new()
        .at("/v1/agent/enroll", post(enroll))
        .at("/v1/agent/check-in", post(check_in))
        .at("/v1/agent/jobs/:id/result", post(result))
        .at("/v1/agent/certificate", post(renew))
        .data(fake.clone());
    tokio::spawn(Server::new_with_acceptor(acceptor).run(app));

    let agent = Agent::new(
        root.path(),
        "permissions = [\"read_inventory\", \"apply_updates\", \"reboot\"]\nrefresh_lists = false\n\
         reboot_command = \"/bin/false\"\nrequest_timeout_s = 3\n",
    );
    let enrolled = agent
        .run(&[
            "enroll",
            "--server",
            &format!("http://{address}"),
            "--token",
            "enr_x",
        ])
        .await;
    assert_eq!(enrolled.code, Some(0), "{}", enrolled.stderr);
    let dpkg_before = root.must("dpkg-query", &["-W", "-f", "${Version}", "dpkg"]);

    // Jobs no agent should run.
    let jobs = json!({"next_check_in_s": 300, "send_inventory": false, "jobs": [
        job("job_01jdpyb9w6n4v6t2c4xq7w8za1", "reboot_dance", "dpkg", "deb", "9.9"),
        job("job_01jdpyb9w6n4v6t2c4xq7w8za2", "apply_updates", "fleet-missing", "deb", "2.0"),
        job("job_01jdpyb9w6n4v6t2c4xq7w8za3", "apply_updates", "-oAPT::Get::Trivial-Only=false", "deb", "1"),
        job("job_01jdpyb9w6n4v6t2c4xq7w8za4", "apply_updates", "dpkg", "rpm", "9.9-1"),
        job("job_01jdpyb9w6n4v6t2c4xq7w8za5", "apply_updates", "dpkg", "deb", "1:9.9"),
    ]});
    *fake.reply.lock().await = Reply::Answer(jobs.clone());
    let ran = agent.run(&["run", "--once"]).await;
    assert_eq!(ran.code, Some(1), "failed jobs fail the run");
    let results = fake.results.lock().await.clone();
    assert_eq!(results.len(), 5, "{results:#?}");
    let log_of = |id: &str| -> String {
        let (_, body) = results.iter().find(|(j, _)| j == id).expect("a result");
        assert_eq!(body["status"], "failed", "{body}");
        assert_eq!(body["rebooted"], false, "{body}");
        body["log"].as_str().unwrap_or_default().to_owned()
    };
    assert!(
        log_of("job_01jdpyb9w6n4v6t2c4xq7w8za1").contains("does not run \"reboot_dance\" jobs")
    );
    assert!(log_of("job_01jdpyb9w6n4v6t2c4xq7w8za2").contains("fleet-missing is not installed"));
    assert!(log_of("job_01jdpyb9w6n4v6t2c4xq7w8za3").contains("not a package name"));
    assert!(log_of("job_01jdpyb9w6n4v6t2c4xq7w8za4").contains("is a rpm package"));
    let epoch = log_of("job_01jdpyb9w6n4v6t2c4xq7w8za5");
    assert!(
        epoch.contains("$ apt-get install --only-upgrade"),
        "{epoch}"
    );
    assert!(
        epoch.contains("dpkg=1:9.9"),
        "the epoch reaches apt as given: {epoch}"
    );
    assert!(epoch.contains("the package manager failed"), "{epoch}");
    assert!(
        ran.stderr.contains("job refused"),
        "a clear local log line: {}",
        ran.stderr
    );
    assert_eq!(
        root.must("dpkg-query", &["-W", "-f", "${Version}", "dpkg"]),
        dpkg_before,
        "nothing applied"
    );

    // The same jobs handed out again (a service that lost the results): never run twice.
    let again = agent.run(&["run", "--once"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(fake.results.lock().await.len(), 5);

    // A huge interval is held to a day, and said so.
    *fake.reply.lock().await =
        Reply::Answer(json!({"next_check_in_s": i32::MAX, "send_inventory": false, "jobs": []}));
    let huge = agent.run(&["run", "--once"]).await;
    assert_eq!(huge.code, Some(0), "{}", huge.stderr);
    assert!(huge.stderr.contains("later than a day"), "{}", huge.stderr);

    // A 500, then a server that hangs: a failed run with a clear line, in bounded time.
    *fake.reply.lock().await = Reply::Status(500);
    let failing = agent.run(&["run", "--once"]).await;
    assert_eq!(failing.code, Some(1));
    assert!(
        failing.stderr.contains("answered 500"),
        "{}",
        failing.stderr
    );
    *fake.reply.lock().await = Reply::Hang;
    let started = std::time::Instant::now();
    let hanging = agent.run(&["run", "--once"]).await;
    assert_eq!(hanging.code, Some(1));
    assert!(
        hanging.stderr.contains("could not be reached"),
        "{}",
        hanging.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // A malformed answer is a failure too, not a panic.
    *fake.reply.lock().await = Reply::Answer(json!({"next_check_in_s": "soon", "jobs": 3}));
    let garbled = agent.run(&["run", "--once"]).await;
    assert_eq!(garbled.code, Some(1));
    assert!(
        garbled.stderr.contains("could not be read"),
        "{}",
        garbled.stderr
    );
    let status: Value = serde_json::from_str(&agent.run(&["status"]).await.stdout).expect("JSON");
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("could not be read")),
        "{status}"
    );
}

/// In its certificate's last 30 days the agent renews: a new key, kept before the CSR is sent,
/// replaces the old one once the certificate for it is stored, and signs from then on.
#[tokio::test]
async fn a_certificate_in_its_last_30_days_is_renewed_with_a_new_key() {
    let root = Root::debian();
    let fake = Arc::new(Fake {
        reply: Mutex::new(Reply::Answer(
            json!({"next_check_in_s": 300, "send_inventory": false, "jobs": []}),
        )),
        results: Mutex::new(Vec::new()),
        renewals: Mutex::new(Vec::new()),
        key_ids: Mutex::new(Vec::new()),
    });
    let acceptor = TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .expect("bind");
    let address = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .expect("an address");
    let app = Route::new()
        .at("/v1/agent/enroll", post(enroll))
        .at("/v1/agent/check-in", post(check_in))
        .at("/v1/agent/certificate", post(renew))
        .data(fake.clone());
    tokio::spawn(Server::new_with_acceptor(acceptor).run(app));
    let agent = Agent::new(root.path(), "refresh_lists = false\n");
    let enrolled = agent
        .run(&[
            "enroll",
            "--server",
            &format!("http://{address}"),
            "--token",
            "enr_x",
        ])
        .await;
    assert_eq!(enrolled.code, Some(0), "{}", enrolled.stderr);
    let quiet = agent.run(&["run", "--once"]).await;
    assert_eq!(quiet.code, Some(0), "{}", quiet.stderr);
    assert!(
        fake.renewals.lock().await.is_empty(),
        "not due: the certificate runs to 2099"
    );

    // Twenty days left.
    let state_file = agent.state_dir().join("state.json");
    let mut state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).expect("state")).expect("JSON");
    let soon = (agent::now() + chrono::Duration::days(20)).to_rfc3339();
    state["enrollment"]["certificate_expires_at"] = json!(soon);
    std::fs::write(&state_file, state.to_string()).expect("state");
    let old_key = std::fs::read_to_string(agent.state_dir().join("key.pem")).expect("key");
    let renewed = agent.run(&["run", "--once"]).await;
    assert_eq!(renewed.code, Some(0), "{}", renewed.stderr);
    assert!(
        renewed.stderr.contains("certificate renewed"),
        "{}",
        renewed.stderr
    );
    let csrs = fake.renewals.lock().await.clone();
    assert_eq!(csrs.len(), 1);
    assert!(csrs[0].contains("BEGIN CERTIFICATE REQUEST"), "{}", csrs[0]);
    let new_key = std::fs::read_to_string(agent.state_dir().join("key.pem")).expect("key");
    assert_ne!(new_key, old_key, "a new key");
    assert!(!agent.state_dir().join("key.pending.pem").exists());
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).expect("state")).expect("JSON");
    assert_eq!(state["enrollment"]["key_id"], "cd34");
    assert_eq!(
        state["enrollment"]["certificate_expires_at"],
        "2099-06-01T00:00:00Z"
    );
    let signed_with = fake.key_ids.lock().await.clone();
    assert_eq!(
        signed_with.last().map(String::as_str),
        Some("cd34"),
        "{signed_with:?}"
    );
    assert_eq!(signed_with.first().map(String::as_str), Some("ab12"));
}

/// `fleet-agent run` (the service's way): through an outage it backs off and keeps going, and
/// a stop signal ends it at once, cleanly.
#[tokio::test]
async fn the_daemon_backs_off_through_an_outage_and_stops_on_sigterm() {
    let root = Root::debian();
    let fake = Arc::new(Fake {
        reply: Mutex::new(Reply::Status(503)),
        results: Mutex::new(Vec::new()),
        renewals: Mutex::new(Vec::new()),
        key_ids: Mutex::new(Vec::new()),
    });
    let acceptor = TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .expect("bind");
    let address = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .expect("an address");
    let app = Route::new()
        .at("/v1/agent/enroll", post(enroll))
        .at("/v1/agent/check-in", post(check_in))
        .data(fake.clone());
    tokio::spawn(Server::new_with_acceptor(acceptor).run(app));
    let agent = Agent::new(root.path(), "refresh_lists = false\n");
    let enrolled = agent
        .run(&[
            "enroll",
            "--server",
            &format!("http://{address}"),
            "--token",
            "enr_x",
        ])
        .await;
    assert_eq!(enrolled.code, Some(0), "{}", enrolled.stderr);
    let mut daemon = agent.spawn_quiet(&["run"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while fake.key_ids.lock().await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never checked in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Backing off (30 s after the first failure): no second attempt at once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fake.key_ids.lock().await.len(), 1, "backed off");
    assert!(
        daemon.try_wait().expect("status").is_none(),
        "still running through the outage"
    );
    let pid = daemon.id().expect("a pid");
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = tokio::time::timeout(Duration::from_secs(10), daemon.wait())
        .await
        .expect("stopped within 10 s")
        .expect("status");
    assert_eq!(status.code(), Some(0));
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(agent.state_dir().join("state.json")).expect("state"),
    )
    .expect("JSON");
    assert!(
        state["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{state}"
    );
}

/// A `reboot` job (decisions §20: the reboot the reboot budget held back) changes no package and
/// reboots only a host that needs it, whose agent may reboot; the result says whether it did.
#[tokio::test]
async fn a_reboot_job_reboots_only_a_host_that_needs_it_and_may() {
    let root = Root::debian();
    let fake = Arc::new(Fake {
        reply: Mutex::new(Reply::Answer(
            json!({"next_check_in_s": 300, "send_inventory": false, "jobs": []}),
        )),
        results: Mutex::new(Vec::new()),
        renewals: Mutex::new(Vec::new()),
        key_ids: Mutex::new(Vec::new()),
    });
    let acceptor = TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .expect("bind");
    let address = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .expect("an address");
    let app = Route::new()
        .at("/v1/agent/enroll", post(enroll))
        .at("/v1/agent/check-in", post(check_in))
        .at("/v1/agent/jobs/:id/result", post(result))
        .at("/v1/agent/certificate", post(renew))
        .data(fake.clone());
    tokio::spawn(Server::new_with_acceptor(acceptor).run(app));
    // The reboot command runs in the root, as every command the agent runs does.
    let marker = root.file("/rebooted");
    let agent_with = |permissions: &str| {
        Agent::new(
            root.path(),
            &format!(
                "permissions = {permissions}\nrefresh_lists = false\n\
                 reboot_command = \"touch /rebooted\"\nrequest_timeout_s = 3\n"
            ),
        )
    };
    let reboot_job = |id: &str| {
        json!({"next_check_in_s": 300, "send_inventory": false, "jobs": [
            {"id": id, "kind": "reboot", "proposal_id": "prp_01jdpyb9w6n4v6t2c4xq7w8z3k",
             "proposal_number": 7, "reboot": "immediate", "changes": []}]})
    };
    let dpkg_before = root.must("dpkg-query", &["-W", "-f", "${Version}", "dpkg"]);
    let result_of = |id: &str| {
        let fake = fake.clone();
        let id = id.to_owned();
        async move {
            let results = fake.results.lock().await.clone();
            results
                .into_iter()
                .find(|(j, _)| *j == id)
                .map(|(_, body)| body)
                .expect("a result")
        }
    };

    // Permitted, but the host needs no reboot: succeeded, not rebooted.
    let may = agent_with("[\"read_inventory\", \"reboot\"]");
    let enrolled = may
        .run(&[
            "enroll",
            "--server",
            &format!("http://{address}"),
            "--token",
            "enr_x",
        ])
        .await;
    assert_eq!(enrolled.code, Some(0), "{}", enrolled.stderr);
    *fake.reply.lock().await = Reply::Answer(reboot_job("job_01jdpyb9w6n4v6t2c4xq7w8zb1"));
    let ran = may.run(&["run", "--once"]).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let body = result_of("job_01jdpyb9w6n4v6t2c4xq7w8zb1").await;
    assert_eq!(
        (body["status"].clone(), body["rebooted"].clone()),
        (json!("succeeded"), json!(false))
    );
    assert!(
        body["log"]
            .as_str()
            .is_some_and(|l| l.contains("no reboot needed")),
        "{body}"
    );
    assert!(!marker.exists());

    // The host needs one: the reboot command runs and the result says so.
    root.write("/run/reboot-required", "*** System restart required ***\n");
    *fake.reply.lock().await = Reply::Answer(reboot_job("job_01jdpyb9w6n4v6t2c4xq7w8zb2"));
    let ran = may.run(&["run", "--once"]).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let body = result_of("job_01jdpyb9w6n4v6t2c4xq7w8zb2").await;
    assert_eq!(
        (body["status"].clone(), body["rebooted"].clone()),
        (json!("succeeded"), json!(true))
    );
    assert!(marker.exists(), "the reboot command ran");
    std::fs::remove_file(&marker).expect("remove the marker");

    // An agent whose configuration does not permit reboot never reboots, whatever the job says.
    let may_not = agent_with("[\"read_inventory\", \"apply_updates\"]");
    let enrolled = may_not
        .run(&[
            "enroll",
            "--server",
            &format!("http://{address}"),
            "--token",
            "enr_x",
        ])
        .await;
    assert_eq!(enrolled.code, Some(0), "{}", enrolled.stderr);
    *fake.reply.lock().await = Reply::Answer(reboot_job("job_01jdpyb9w6n4v6t2c4xq7w8zb3"));
    let ran = may_not.run(&["run", "--once"]).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let body = result_of("job_01jdpyb9w6n4v6t2c4xq7w8zb3").await;
    assert_eq!(
        (body["status"].clone(), body["rebooted"].clone()),
        (json!("succeeded"), json!(false))
    );
    assert!(
        body["log"]
            .as_str()
            .is_some_and(|l| l.contains("does not permit reboot")),
        "{body}"
    );
    assert!(!marker.exists());
    assert_eq!(
        root.must("dpkg-query", &["-W", "-f", "${Version}", "dpkg"]),
        dpkg_before,
        "no package changed"
    );
    std::fs::remove_file(root.file("/run/reboot-required")).ok();
}
