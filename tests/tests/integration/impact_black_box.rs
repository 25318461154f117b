//! Issue 32's acceptance, black box: the `api` program on its embedded default (SQLite under
//! `data/`, worker and scheduler in the process), an organization made through the emailed
//! sign-up, simulated hosts (`fleet-sim`) reporting realistic impacts (kernels reboot, OpenSSL
//! restarts the SSH server and the host's service, Ubuntu 24.04 removes `libssl3`, every tenth
//! host's agent does not say), and a policy: the proposal detail's summary and warnings are
//! what decisions §21 says of the per-host page, read over HTTP only.

use std::{
    collections::BTreeMap,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use reqwest::Client;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const API: &str = env!("CARGO_BIN_EXE_fleet-api");
const SIM: &str = env!("CARGO_BIN_EXE_fleet-sim");
const HOSTS: usize = 40;
/// How long the program may take for each step on a loaded machine.
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);

/// The sign-up token, from the emailed message in `data/outbox` (no SMTP is configured).
fn emailed_token(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir.join("data/outbox")).ok()?;
    entries
        .flatten()
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap_or_default())
        // Undo quoted-printable soft breaks and `=3D`.
        .map(|t| {
            t.replace("=\r\n", "")
                .replace("=\n", "")
                .replace("=3D", "=")
        })
        .find(|t| t.contains("token="))
        .map(|t| tests::identity::token_in(&t))
}

/// Asks `check` every 200 ms until it gives a value (the program runs on the real clock).
pub(crate) async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `api` program running in a working directory of its own.
pub(crate) struct Program {
    pub(crate) child: Child,
    pub(crate) base: String,
    _dir: tempfile::TempDir,
    pub(crate) dir: std::path::PathBuf,
}

async fn start() -> Program {
    start_with("impact-black-box", &[]).await
}

/// Starts the `api` program on its embedded default in a new temporary directory, with these
/// variables besides the bind address, base URL and a rate limit no test reaches.
pub(crate) async fn start_with(prefix: &str, env: &[(&str, &str)]) -> Program {
    let temp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a working directory");
    let dir = temp.path().to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let base = format!("http://127.0.0.1:{port}");
    // No DATABASE_URL, no SMTP_URL: the embedded default.
    let child = Command::new(API)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SERVICE_BIND", format!("127.0.0.1:{port}"))
        .env("SERVICE_BASE_URL", &base)
        .env("RATE_LIMIT_BURST", "100000")
        .env("RATE_LIMIT_PER_SECOND", "100000")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the api program");
    let client = Client::new();
    eventually("the api answers /readyz", || {
        let client = client.clone();
        let url = format!("{base}/readyz");
        async move {
            client
                .get(url)
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        }
    })
    .await;
    Program {
        child,
        base,
        _dir: temp,
        dir,
    }
}

/// Signs up `acme` through the emailed link; an admin API token.
pub(crate) async fn admin_token(program: &Program, client: &Client) -> String {
    let base = &program.base;
    let signed_up = client
        .post(format!("{base}/v1/auth/sign-up"))
        .json(&json!({"email": "owner@acme.example", "name": "Owner",
                      "organization": {"name": "Acme", "slug": "acme"}}))
        .send()
        .await
        .expect("sign-up");
    assert_eq!(signed_up.status().as_u16(), 202);
    let token = eventually("the sign-up email in data/outbox", || async {
        emailed_token(&program.dir)
    })
    .await;
    let verified = client
        .post(format!("{base}/v1/auth/sign-up/verify"))
        .json(&json!({"token": token}))
        .send()
        .await
        .expect("verify");
    assert!(verified.status().is_success(), "{}", verified.status());
    let cookie = verified
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let session: Value = verified.json().await.expect("JSON");
    let made: Value = client
        .post(format!("{base}/v1/orgs/acme/api-tokens"))
        .header("cookie", cookie)
        .header(
            "x-service-csrf",
            session["csrf_token"].as_str().unwrap_or_default(),
        )
        .json(&json!({"name": "black box", "role": "admin"}))
        .send()
        .await
        .expect("an API token")
        .json()
        .await
        .expect("JSON");
    made["token"].as_str().expect("the token").to_owned()
}

pub(crate) async fn get(client: &Client, url: &str, token: &str) -> Value {
    let answer = client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("an answer");
    assert!(answer.status().is_success(), "{url}: {}", answer.status());
    answer.json().await.expect("JSON")
}

fn counted(list: &Value, key: &str) -> BTreeMap<String, i64> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c[key].as_str().unwrap_or_default().to_owned(),
                c["hosts"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

#[tokio::test]
async fn simulated_hosts_against_the_api_program_give_the_summary_warnings_and_per_host_page_of_section_21()
 {
    platform::outbound::install_crypto_provider();
    let mut program = start().await;
    let client = Client::new();
    let token = admin_token(&program, &client).await;
    let base = program.base.clone();

    let simulated = Command::new(SIM)
        .args([
            "--url",
            &base,
            "--org",
            "acme",
            "--api-token",
            &token,
            "--hosts",
            &HOSTS.to_string(),
            "--duration",
            "0",
            // One check-in each, spread over one second instead of a minute.
            "--interval",
            "1",
            "--concurrency",
            "8",
        ])
        .stdout(Stdio::null())
        .status()
        .await
        .expect("run fleet-sim");
    assert!(simulated.success(), "fleet-sim: {simulated}");

    let policy = client
        .post(format!("{base}/v1/orgs/acme/policies"))
        .bearer_auth(&token)
        .json(
            &json!({"name": "everything", "scope": {"groups": []}, "required_approvals": 1,
                      "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all"}),
        )
        .send()
        .await
        .expect("a policy");
    assert_eq!(policy.status().as_u16(), 201);

    // The package proposal, once its hosts are all in.
    let list_url = format!("{base}/v1/orgs/acme/proposals?kind=package_update");
    let id = eventually("a package proposal of the simulated hosts", || {
        let (client, url, token) = (client.clone(), list_url.clone(), token.clone());
        async move {
            let list = get(&client, &url, &token).await;
            list["items"]
                .as_array()
                .and_then(|items| items.first().cloned())
                .and_then(|p| p["id"].as_str().map(str::to_owned))
        }
    })
    .await;
    let detail = get(
        &client,
        &format!("{base}/v1/orgs/acme/proposals/{id}"),
        &token,
    )
    .await;
    let summary = &detail["impact"];
    let hosts = detail["hosts"].as_i64().expect("hosts");
    assert_eq!(summary["hosts"], hosts);

    // Every host of the per-host page, 7 a page.
    let mut items = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let page = get(
            &client,
            &format!("{base}/v1/orgs/acme/proposals/{id}/impact?limit=7&cursor={cursor}"),
            &token,
        )
        .await;
        pages += 1;
        items.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(items.len() as i64, hosts);
    assert_eq!(pages, (hosts + 6) / 7);

    // The summary is the per-host page counted.
    let count =
        |f: &dyn Fn(&Value) -> bool| items.iter().filter(|i| f(&i["impact"])).count() as i64;
    let rebooting = count(&|i| i["reboot"] == true);
    let unknown = count(&|i| i["known"] == false);
    assert_eq!(summary["hosts_rebooting"], rebooting);
    assert_eq!(summary["hosts_unknown"], unknown);
    let mut restarts: BTreeMap<String, i64> = BTreeMap::new();
    let mut removes: BTreeMap<String, i64> = BTreeMap::new();
    let mut installs: BTreeMap<String, i64> = BTreeMap::new();
    for item in &items {
        let impact = &item["impact"];
        for unit in impact["restarts"].as_array().into_iter().flatten() {
            *restarts
                .entry(unit.as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        for name in impact["removes"].as_array().into_iter().flatten() {
            *removes
                .entry(name.as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        for install in impact["installs"].as_array().into_iter().flatten() {
            *installs
                .entry(install["name"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(counted(&summary["restarts"], "unit"), restarts);
    assert_eq!(counted(&summary["removes"], "name"), removes);
    assert_eq!(counted(&summary["installs"], "name"), installs);
    let order: Vec<i64> = summary["restarts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["hosts"].as_i64().unwrap_or(-1))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] >= w[1]),
        "most hosts first: {order:?}"
    );

    // What fleet-sim's hosts report, seen through the service: kernels reboot, OpenSSL
    // restarts the SSH server, Ubuntu 24.04 removes libssl3, and the hosts whose agents do
    // not say are unknown (never "no impact").
    assert!(rebooting > 0, "{summary:#}");
    assert!(unknown > 0 && unknown < hosts, "{summary:#}");
    assert!(restarts.contains_key("ssh.service"), "{restarts:?}");
    assert!(removes.contains_key("libssl3"), "{removes:?}");
    for item in items.iter().filter(|i| i["impact"]["known"] == false) {
        let name = item["hostname"].as_str().unwrap_or_default();
        let index: usize = name
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert_eq!(
            index % 10,
            9,
            "{name}: only every tenth simulated agent does not say"
        );
    }

    // The warnings: each removal, and each unit restarting on more than half of the hosts.
    let mut removed: Vec<(&String, &i64)> = removes.iter().collect();
    removed.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut expected: Vec<String> = removed
        .into_iter()
        .map(|(name, n)| format!("Removes the package {name} on {n} of {hosts} hosts."))
        .collect();
    let mut widespread: Vec<(&String, &i64)> =
        restarts.iter().filter(|(_, n)| **n * 2 > hosts).collect();
    widespread.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    expected.extend(widespread.into_iter().map(|(unit, n)| {
        format!("Restarts {unit} on {n} of {hosts} hosts, more than half of them at once.")
    }));
    assert_eq!(detail["warnings"], json!(expected));

    // Each target of the detail carries the impact the per-host page shows.
    for target in detail["targets"].as_array().into_iter().flatten() {
        let same = items
            .iter()
            .find(|i| i["id"] == target["id"])
            .expect("the target is on the per-host page");
        assert_eq!(same["impact"], target["impact"]);
    }
    let _ = program.child.start_kill();
    let _ = program.child.wait().await;
}
