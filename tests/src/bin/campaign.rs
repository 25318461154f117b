//! `campaign`: the fault campaign of issue 33 (RELIABILITY.md). Each scenario runs the service's
//! own programs (`fleet-api`, `fleet-worker`, `fleet-sim`, beside this binary) against a real
//! database, breaks something the way production breaks, and checks what the service promised:
//!
//! 1. `queue`: jobs of mixed kinds (emails, webhook deliveries, billing reports) queued on
//!    Postgres, three worker processes, one killed with SIGKILL every 5 s and started again:
//!    every job's effect arrives, under its own id (`Message-ID`, `webhook-id`, the meter
//!    event's identifier), and nothing arrives that no job asked for.
//! 2. `postgres-restart`: the Postgres server stopped (as a crash stops it) and started again
//!    under check-ins from simulated hosts: the api answers 503 (never 500, never a hang) while
//!    it is down, answers again within 5 s of its return, and no acknowledged check-in is lost.
//! 3. `sqlite-kill`: the api on its embedded default killed with SIGKILL under check-ins, three
//!    times: the database opens whole each time, and no acknowledged check-in is lost.
//! 4. `revocation`: API tokens revoked at one of three api replicas on Postgres while a replica
//!    (the revoking one, or another) is killed: once a revocation is answered, no replica, old
//!    or restarted, accepts the token, and none is answered without being kept.
//! 5. `disk-full`: the embedded default's disk (a small tmpfs) filled under check-ins: writes
//!    answer 503 with a log that says why, the service answers again when space returns, and no
//!    acknowledged check-in is lost.
//!
//! Postgres scenarios run on a private cluster (`initdb` into a temp dir, its own port), never
//! on the machine's shared server. The disk-full scenario mounts a tmpfs (root only).
//!
//! ```text
//! cargo build --release -p tests --bin campaign --bin fleet-api --bin fleet-worker --bin fleet-sim
//! target/release/campaign            # every scenario, full size
//! target/release/campaign --short    # the form CI runs (.ci/campaign --short)
//! target/release/campaign queue disk-full
//! ```
//!
//! It prints each claim as it is checked, then `N passed, M failed` (scenarios), and exits
//! non-zero when a claim failed.

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use domain::billing::jobs::BillingReport;
use domain::notifications::jobs::SendEmail;
use platform::{db::Database, jobs::Queue};
use reqwest::Method;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};
use tests::{
    As, SmtpSink, TestApp,
    postgres_cluster::PrivateCluster,
    processor::TestProcessor,
    receiver::{Receiver, Reply, TestCa},
};
use tokio::process::{Child, Command};

#[derive(Parser)]
#[command(about = "The fault campaign (RELIABILITY.md).")]
struct Args {
    /// The short form CI runs: fewer jobs, hosts and rounds, the same claims.
    #[arg(long)]
    short: bool,
    /// Scenarios to run: queue, postgres-restart, sqlite-kill, revocation, disk-full (all when
    /// none is named); or `soak` alone (not part of the campaign: `.ci/soak`).
    scenarios: Vec<String>,
    /// soak: the database, sqlite (the embedded default) or postgres (a private cluster).
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// soak: simulated hosts.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// soak: minutes of check-ins after every host has checked in once.
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// soak: seconds between each host's check-ins (agents default to 300).
    #[arg(long, default_value_t = 300)]
    interval: u64,
}

const SCENARIOS: [&str; 5] = [
    "queue",
    "postgres-restart",
    "sqlite-kill",
    "revocation",
    "disk-full",
];

/// The claims of one scenario, each printed as it is checked.
#[derive(Default)]
struct Claims {
    failed: Vec<String>,
    passed: usize,
}

impl Claims {
    fn check(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        if ok {
            println!("  ok    {what}");
            self.passed += 1;
        } else {
            println!("  FAIL  {what}");
            self.failed.push(what);
        }
    }

    fn figure(&self, what: impl std::fmt::Display) {
        println!("  ·     {what}");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    if args.scenarios == ["soak"] {
        let mut claims = Claims::default();
        soak(&mut claims, &args).await?;
        println!();
        println!(
            "soak: {} passed, {} failed",
            claims.passed,
            claims.failed.len()
        );
        if !claims.failed.is_empty() {
            bail!("failed: {}", claims.failed.join("; "));
        }
        return Ok(());
    }
    let chosen: Vec<String> = if args.scenarios.is_empty() {
        SCENARIOS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.scenarios.clone()
    };
    for name in &chosen {
        if !SCENARIOS.contains(&name.as_str()) {
            bail!("unknown scenario {name}: one of {}", SCENARIOS.join(", "));
        }
    }
    let mut passed = 0;
    let mut failed = Vec::new();
    for name in &chosen {
        println!("\n== {name}{}", if args.short { " (short)" } else { "" });
        let started = Instant::now();
        let mut claims = Claims::default();
        let run = match name.as_str() {
            "queue" => queue(&mut claims, args.short).await,
            "postgres-restart" => postgres_restart(&mut claims, args.short).await,
            "sqlite-kill" => sqlite_kill(&mut claims, args.short).await,
            "revocation" => revocation(&mut claims, args.short).await,
            "disk-full" => disk_full(&mut claims, args.short).await,
            _ => unreachable!("checked above"),
        };
        if let Err(err) = run {
            claims.check(false, format!("the scenario ran to its end: {err:#}"));
        }
        let took = started.elapsed().as_secs_f64();
        if claims.failed.is_empty() {
            println!("== {name}: passed ({} claims, {took:.0} s)", claims.passed);
            passed += 1;
        } else {
            println!(
                "== {name}: FAILED ({} of {} claims, {took:.0} s)",
                claims.failed.len(),
                claims.failed.len() + claims.passed
            );
            failed.push(name.clone());
        }
    }
    println!();
    println!("campaign: {passed} passed, {} failed", failed.len());
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A program built beside this one (`fleet-api`, `fleet-worker`, `fleet-sim`).
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?
        .parent()
        .map(|dir| dir.join(name))
        .context("no directory for this program")?;
    anyhow::ensure!(
        path.exists(),
        "{} is missing: build it beside campaign (cargo build -p tests --bin {name})",
        path.display()
    );
    Ok(path)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The real time in Unix milliseconds (the programs run on the real clock).
fn unix_ms() -> u128 {
    let now = platform::clock::Clock::now(&platform::clock::SystemClock);
    u128::try_from(now.timestamp_millis()).unwrap_or(0)
}

fn real_now() -> chrono::DateTime<chrono::Utc> {
    platform::clock::Clock::now(&platform::clock::SystemClock)
}

/// An api process; its output goes to `log`.
struct Api {
    child: Child,
    base: String,
    port: u16,
    env: Vec<(String, String)>,
    dir: PathBuf,
    log: PathBuf,
}

impl Api {
    /// Starts `fleet-api` in `dir` with `env` on a free port and waits until it is ready.
    async fn start(dir: &Path, env: &[(&str, &str)], log: &Path) -> anyhow::Result<Api> {
        let port = free_port()?;
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut api = Api {
            child: spawn_api(dir, &env, port, log)?,
            base: format!("http://127.0.0.1:{port}"),
            port,
            env,
            dir: dir.to_owned(),
            log: log.to_owned(),
        };
        api.wait_ready(Duration::from_secs(60)).await?;
        Ok(api)
    }

    async fn wait_ready(&mut self, patience: Duration) -> anyhow::Result<Duration> {
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            let ready = client
                .get(format!("{}/readyz", self.base))
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .is_ok_and(|answer| answer.status().is_success());
            if ready {
                return Ok(started.elapsed());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the api exited at start ({status}); its log: {}",
                    self.log.display()
                );
            }
            anyhow::ensure!(
                started.elapsed() < patience,
                "the api was not ready within {patience:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL, as a crash or the OOM killer ends it.
    async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// Starts it again on the same port, database and log (appended), and waits until it is
    /// ready: how long that took.
    async fn restart(&mut self) -> anyhow::Result<Duration> {
        self.child = spawn_api(&self.dir, &self.env, self.port, &self.log)?;
        self.wait_ready(Duration::from_secs(60)).await
    }

    async fn stop(&mut self) -> anyhow::Result<()> {
        terminate(&mut self.child).await
    }
}

fn spawn_api(dir: &Path, env: &[(String, String)], port: u16, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    Command::new(sibling("fleet-api")?)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SERVICE_BIND", format!("127.0.0.1:{port}"))
        .env("SERVICE_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("RATE_LIMIT_BURST", "1000000")
        .env("RATE_LIMIT_PER_SECOND", "100000")
        // fleet-sim's hosts enrol from addresses of their own (--distinct-ips).
        .env("TRUSTED_PROXIES", "127.0.0.1/32")
        .env("EMAIL_FROM", "Fleet Campaign <no-reply@fleet.test>")
        .env("SECRETS_KEY", tests::TEST_SECRETS_KEY)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .context("start fleet-api")
}

/// SIGTERM, then waits (a minute at most) for the process to end.
async fn terminate(child: &mut Child) -> anyhow::Result<()> {
    if let Some(pid) = child.id() {
        std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()?;
    }
    tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .context("the process did not end within a minute of SIGTERM")??;
    Ok(())
}

/// Signs `slug` up through the emailed link (read at `smtp`), and makes an admin API token.
async fn admin_token(base: &str, smtp: &SmtpSink, slug: &str) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let email = format!("owner@{slug}.test");
    let answer = client
        .post(format!("{base}/v1/auth/sign-up"))
        .json(&json!({"email": email, "name": "Owner",
                      "organization": {"name": slug, "slug": slug}}))
        .send()
        .await?;
    anyhow::ensure!(
        answer.status().as_u16() == 202,
        "sign-up: {}",
        answer.status()
    );
    let message = smtp
        .wait_for_message_to(&email, Duration::from_secs(60))
        .await;
    let token = tests::identity::token_in(&message.text());
    let verified = client
        .post(format!("{base}/v1/auth/sign-up/verify"))
        .json(&json!({"token": token}))
        .send()
        .await?;
    anyhow::ensure!(
        verified.status().is_success(),
        "verify: {}",
        verified.status()
    );
    let cookie = verified
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("a session cookie")?
        .to_owned();
    let session: Value = verified.json().await?;
    let made: Value = client
        .post(format!("{base}/v1/orgs/{slug}/api-tokens"))
        .header("cookie", cookie)
        .header(
            "x-service-csrf",
            session["csrf_token"].as_str().unwrap_or_default(),
        )
        .json(&json!({"name": "campaign", "role": "admin"}))
        .send()
        .await?
        .json()
        .await?;
    Ok(made["token"]
        .as_str()
        .context("the API token in the answer")?
        .to_owned())
}

// ---------------------------------------------------------------------------------------------
// Check-in load (fleet-sim) and what it was answered

/// `fleet-sim` checking in `hosts` hosts every `interval` s for `seconds`, each check-in
/// numbered in its facts and written to `journal`.
fn start_sim(
    base: &str,
    token: &str,
    hosts: usize,
    interval: u64,
    seconds: u64,
    journal: &Path,
    log: &Path,
) -> anyhow::Result<Child> {
    sim(base, token, hosts, interval, seconds, Some(journal), log)
}

/// `fleet-sim`; with a `journal`, every check-in numbered in its facts and written there.
fn sim(
    base: &str,
    token: &str,
    hosts: usize,
    interval: u64,
    seconds: u64,
    journal: Option<&Path>,
    log: &Path,
) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    let mut command = Command::new(sibling("fleet-sim")?);
    command
        .args(["--url", base, "--org", "acme", "--api-token", token])
        .args(["--hosts", &hosts.to_string()])
        .args(["--interval", &interval.to_string()])
        .args(["--duration", &seconds.to_string()])
        .args(["--concurrency", "64", "--distinct-ips"]);
    if let Some(journal) = journal {
        command
            .arg("--count-in-facts")
            .arg("--journal")
            .arg(journal);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .context("start fleet-sim")
}

/// One check-in as `fleet-sim --journal` wrote it.
#[derive(Clone, Debug)]
struct Entry {
    machine: String,
    seq: u64,
    /// The HTTP status; 0 for no answer.
    status: u16,
    sent_ms: u128,
    took_ms: u128,
}

fn read_journal(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            Some(Entry {
                machine: fields.next()?.to_owned(),
                seq: fields.next()?.parse().ok()?,
                status: fields.next()?.parse().ok()?,
                sent_ms: fields.next()?.parse().ok()?,
                took_ms: fields.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// Waits until `count` hosts have had a check-in answered 200.
async fn wait_for_hosts(journal: &Path, count: usize, patience: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let answered: HashSet<String> = read_journal(journal)
            .into_iter()
            .filter(|e| e.status == 200)
            .map(|e| e.machine)
            .collect();
        if answered.len() >= count {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < patience,
            "only {} of {count} hosts checked in within {patience:?}",
            answered.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The last check-in of each host that was answered 200.
fn acknowledged(entries: &[Entry]) -> HashMap<String, u64> {
    let mut last: HashMap<String, u64> = HashMap::new();
    for entry in entries.iter().filter(|e| e.status == 200) {
        let seq = last.entry(entry.machine.clone()).or_default();
        *seq = (*seq).max(entry.seq);
    }
    last
}

/// Each host's check-in number as the database kept it (the `virtualization` fact, `sim-N`).
async fn kept(url: &str) -> anyhow::Result<HashMap<String, u64>> {
    let db = Database::connect_url(url, 2).await?;
    let rows = entities::hosts::Entity::find().all(&db.orm).await?;
    db.close().await;
    Ok(rows
        .into_iter()
        .map(|host| {
            let seq = host
                .virtualization
                .as_deref()
                .and_then(|v| v.strip_prefix("sim-"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (host.machine_id, seq)
        })
        .collect())
}

/// The claim that every acknowledged check-in is in the database.
async fn nothing_acknowledged_is_lost(
    claims: &mut Claims,
    journal: &Path,
    url: &str,
) -> anyhow::Result<()> {
    let entries = read_journal(journal);
    let acknowledged = acknowledged(&entries);
    let kept = kept(url).await?;
    let lost: Vec<(&String, u64, u64)> = acknowledged
        .iter()
        .filter_map(|(machine, seq)| {
            let have = kept.get(machine).copied().unwrap_or(0);
            (have < *seq).then_some((machine, *seq, have))
        })
        .collect();
    let answered = entries.iter().filter(|e| e.status == 200).count();
    claims.check(
        lost.is_empty(),
        format!(
            "no acknowledged check-in lost: each of {} hosts' last 200 ({answered} check-ins answered 200) is in the database{}",
            acknowledged.len(),
            if lost.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} hosts behind, e.g. {:?}",
                    lost.len(),
                    &lost[..lost.len().min(5)]
                )
            }
        ),
    );
    Ok(())
}

/// Statuses of the check-ins sent in [from_ms, to_ms).
fn statuses(entries: &[Entry], from_ms: u128, to_ms: u128) -> BTreeMap<u16, usize> {
    let mut counted = BTreeMap::new();
    for entry in entries
        .iter()
        .filter(|e| e.sent_ms >= from_ms && e.sent_ms < to_ms)
    {
        *counted.entry(entry.status).or_default() += 1;
    }
    counted
}

/// SQLite's own check of the database file: `ok` when it is whole.
async fn integrity(path: &Path) -> anyhow::Result<String> {
    use sqlx::Connection;
    let mut conn =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", path.display())).await?;
    let answer: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(answer)
}

// ---------------------------------------------------------------------------------------------
// 1. queue

async fn queue(claims: &mut Claims, short: bool) -> anyhow::Result<()> {
    // Emails, webhook deliveries (events × channels) and billing reports (organizations).
    let (emails, events, channels, orgs) = if short {
        (600, 6, 50, 100)
    } else {
        (6_000, 60, 50, 1_000)
    };
    let concurrency = 8;
    let cluster = PrivateCluster::start().await;
    let processor = TestProcessor::start().await;
    let app = TestApp::builder()
        .without_worker()
        .database_server(&cluster.url("postgres"))
        .payments_api(&processor.url())
        .start()
        .await;
    // The worker processes run on the real clock.
    app.clock.set(real_now());
    app.organization("acme").await;
    let owner = app
        .member("acme", domain::roles::Role::Owner, "owner@acme.test")
        .await;

    let webhook_ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let receiver = {
        let webhook_ids = webhook_ids.clone();
        Receiver::with_handler(move |request| {
            if let (Ok(mut ids), Some(id)) = (
                webhook_ids.lock(),
                request
                    .headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok()),
            ) {
                ids.push(id.to_owned());
            }
            Reply::Status(204, String::new())
        })
        .await
    };
    for i in 0..channels {
        let answer = app
            .call(
                As::Session(&owner),
                Method::POST,
                "/v1/orgs/acme/notification-channels",
                Some(json!({"kind": "webhook", "name": format!("hook-{i:03}"),
                            "config": {"url": receiver.url(&format!("/hook/{i}"))}})),
            )
            .await;
        anyhow::ensure!(answer.status.as_u16() == 201, "channel: {}", answer.body);
    }

    // Organizations with a live subscription and a host-day yesterday: one report each.
    let yesterday = real_now().date_naive() - chrono::Duration::days(1);
    let db = &app.state.db;
    let mut org_ids = Vec::new();
    for i in 0..orgs {
        org_ids.push(billed_organization(db, i, yesterday).await?);
    }

    // Everything queued before any worker runs.
    let queue = Queue::new(db);
    let mut email_ids = Vec::new();
    for i in 0..emails {
        let email = SendEmail::new(
            format!("member-{i}@fleet.test"),
            format!("Message {i}"),
            format!("Plain text {i}"),
            format!("<p>HTML {i}</p>"),
        );
        email_ids.push(email.id.clone());
        queue.push(email).await?;
    }
    for org_id in &org_ids {
        queue
            .push(BillingReport {
                day: yesterday,
                org_id: Some(*org_id),
            })
            .await?;
    }
    let org = entities::organizations::Entity::find()
        .filter(entities::organizations::Column::Slug.eq("acme"))
        .one(&db.orm)
        .await?
        .context("acme")?;
    for i in 0..events {
        let txn = db.begin_write().await?;
        domain::notifications::outbox::emit(
            &txn,
            org.id,
            domain::notifications::EventKind::HostOffline,
            Some(format!("hst_campaign_{i}")),
            None,
            json!({"host": {"id": format!("hst_campaign_{i}"), "hostname": format!("web-{i}")}}),
            app.clock_now(),
        )
        .await?;
        txn.commit().await?;
    }
    domain::notifications::jobs::dispatch_soon(&app.state.queue).await;
    let deliveries = events * channels;
    let total = emails + deliveries + orgs;
    claims.figure(format!(
        "queued {emails} emails, {events} events for {channels} webhook channels ({deliveries} deliveries), {orgs} billing reports: {total} effects"
    ));

    let worker = sibling("fleet-worker")?.display().to_string();
    let ca = TestCa::get().file.display().to_string();
    let processor_url = processor.url();
    let env = [
        ("SECRETS_KEY", tests::TEST_SECRETS_KEY),
        ("OUTBOUND_CA_FILE", ca.as_str()),
        ("OUTBOUND_ALLOW_PRIVATE", "true"),
        ("PAYMENTS_API_URL", processor_url.as_str()),
        ("PAYMENTS_API_KEY", tests::PAYMENTS_API_KEY),
    ];
    let spawn = || {
        tests::processes::spawn_worker_with(
            &worker,
            app.database.url(),
            &app.smtp.url(),
            concurrency,
            &env,
        )
    };
    let mut workers: Vec<Child> = (0..3).map(|_| spawn()).collect();

    let distinct = |ids: &[String]| ids.iter().collect::<HashSet<_>>().len();
    let started = Instant::now();
    let patience = Duration::from_secs(if short { 300 } else { 1_500 });
    let mut kills = 0;
    let mut next_kill = Instant::now() + Duration::from_secs(5);
    loop {
        let mail = app.smtp.messages().await;
        let mail_ids: Vec<String> = mail.iter().filter_map(|m| m.header("Message-ID")).collect();
        let hooks = webhook_ids.lock().map(|v| v.clone()).unwrap_or_default();
        let meter: Vec<String> = meter_identifiers(&processor);
        if distinct(&mail_ids) >= emails
            && distinct(&hooks) >= deliveries
            && distinct(&meter) >= orgs
        {
            break;
        }
        if started.elapsed() > patience {
            claims.check(
                false,
                format!(
                    "every effect within {patience:?}: {} of {emails} emails, {} of {deliveries} deliveries, {} of {orgs} reports",
                    distinct(&mail_ids),
                    distinct(&hooks),
                    distinct(&meter)
                ),
            );
            break;
        }
        if Instant::now() >= next_kill {
            let victim = kills % workers.len();
            workers[victim].start_kill()?;
            workers[victim].wait().await?;
            workers[victim] = spawn();
            kills += 1;
            next_kill += Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    claims.figure(format!(
        "every effect arrived after {:.1} s, {kills} workers killed with SIGKILL (one every 5 s)",
        took.as_secs_f64()
    ));
    // What a killed worker held runs again once its heartbeat is missed: wait for the queue to
    // empty, then stop the workers, so that every repeat has arrived before counting.
    let drained = wait_for_empty_queue(&app, Duration::from_secs(120)).await;
    for worker in &mut workers {
        terminate(worker).await?;
    }
    claims.check(
        drained.is_ok(),
        format!("the queue emptied: {:?}", drained.as_ref().err()),
    );

    let mail = app.smtp.messages().await;
    let mail_ids: Vec<String> = mail.iter().filter_map(|m| m.header("Message-ID")).collect();
    let missing_mail = email_ids
        .iter()
        .filter(|id| !mail_ids.iter().any(|m| m.contains(id.as_str())))
        .count();
    let unknown_mail = mail_ids
        .iter()
        .filter(|m| !email_ids.iter().any(|id| m.contains(id.as_str())))
        .count();
    claims.check(
        missing_mail == 0 && unknown_mail == 0,
        format!(
            "every email arrived under its job's Message-ID ({} distinct of {emails}; {missing_mail} missing, {unknown_mail} unasked)",
            distinct(&mail_ids)
        ),
    );
    let delivery_ids: Vec<String> = entities::notification_deliveries::Entity::find()
        .all(&db.orm)
        .await?
        .into_iter()
        .map(|d| platform::ids::DeliveryId::from(d.id).to_string())
        .collect();
    let hooks = webhook_ids.lock().map(|v| v.clone()).unwrap_or_default();
    let hook_set: HashSet<&String> = hooks.iter().collect();
    let missing_hooks = delivery_ids
        .iter()
        .filter(|id| !hook_set.contains(id))
        .count();
    claims.check(
        delivery_ids.len() == deliveries && missing_hooks == 0 && hook_set.len() == deliveries,
        format!(
            "every delivery arrived under its webhook-id ({} deliveries made, {} distinct webhook-ids received, {missing_hooks} missing)",
            delivery_ids.len(),
            hook_set.len()
        ),
    );
    let meter = meter_identifiers(&processor);
    let expected: HashSet<String> = org_ids
        .iter()
        .map(|org| format!("{}:{yesterday}", platform::ids::OrgId::from(*org)))
        .collect();
    let meter_set: HashSet<&String> = meter.iter().collect();
    let reported = entities::usage_days::Entity::find()
        .filter(entities::usage_days::Column::Day.eq(yesterday))
        .filter(entities::usage_days::Column::Reported.eq(true))
        .all(&db.orm)
        .await?
        .len();
    claims.check(
        meter_set.len() == orgs
            && meter.iter().all(|m| expected.contains(m))
            && reported == orgs,
        format!(
            "every organization's day reported once by its identifier ({} distinct meter events of {orgs}; {reported} days marked reported)",
            meter_set.len()
        ),
    );
    let repeats = (mail_ids.len() - distinct(&mail_ids))
        + (hooks.len() - hook_set.len())
        + (meter.len() - meter_set.len());
    // A repeat comes only from a job in flight when its worker was killed (it ran again
    // elsewhere); each carries its job's id, so its receiver recognises it.
    let bound = kills * concurrency * 3;
    claims.check(
        repeats <= bound,
        format!(
            "repeats only of jobs in flight at a kill, each under its id: {repeats} (emails {}, deliveries {}, reports {}) for {kills} kills (at most {bound})",
            mail_ids.len() - distinct(&mail_ids),
            hooks.len() - hook_set.len(),
            meter.len() - meter_set.len()
        ),
    );
    let failed_for_good = failed_jobs(&app).await?;
    claims.check(
        failed_for_good == 0,
        format!("no job failed for good ({failed_for_good})"),
    );
    app.stop().await;
    drop(cluster);
    Ok(())
}

fn meter_identifiers(processor: &TestProcessor) -> Vec<String> {
    processor
        .meter_events()
        .into_iter()
        .filter_map(|form| {
            form.into_iter()
                .find(|(k, _)| k == "identifier")
                .map(|(_, v)| v)
        })
        .collect()
}

/// An organization `org-N` with a live business subscription and one host that checked in on
/// `day`.
async fn billed_organization(
    db: &Database,
    i: usize,
    day: chrono::NaiveDate,
) -> anyhow::Result<uuid::Uuid> {
    let now = real_now();
    let org = entities::organizations::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        slug: Set(format!("org-{i}")),
        name: Set(format!("org-{i}")),
        plan: Set("business".into()),
        sso_enforced: Set(false),
        created_at: Set(now),
        proposal_seq: Set(0),
        max_concurrent_reboots: Set(None),
    }
    .insert(&db.orm)
    .await?;
    entities::subscriptions::ActiveModel {
        org_id: Set(org.id),
        plan: Set(Some("business".into())),
        customer_id: Set(Some(format!("cus_{i}"))),
        subscription_id: Set(Some(format!("sub_{i}"))),
        status: Set(Some("active".into())),
        current_period_end: Set(None),
        billable_from: Set(Some(day - chrono::Duration::days(10))),
        event_created: Set(Some(0)),
        updated_at: Set(now),
    }
    .insert(&db.orm)
    .await?;
    let host = entities::hosts::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(org.id),
        machine_id: Set(format!("machine-{i}")),
        hostname: Set(format!("host-{i}")),
        labels: Set(entities::json::JsonText::from_stored("{}")),
        services_need_restart: Set(entities::json::JsonText::from_stored("[]")),
        held_packages: Set(entities::json::JsonText::from_stored("[]")),
        advisory_coverage: Set("unknown_release".into()),
        status: Set("online".into()),
        check_in_interval_s: Set(300),
        enrolled_at: Set(now),
        last_seen_at: Set(Some(now)),
        updated_at: Set(now),
        updates_seq: Set(0),
        ..Default::default()
    }
    .insert(&db.orm)
    .await?;
    entities::host_days::ActiveModel {
        host_id: Set(host.id),
        day: Set(day),
        org_id: Set(org.id),
    }
    .insert(&db.orm)
    .await?;
    Ok(org.id)
}

async fn wait_for_empty_queue(app: &TestApp, patience: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let left = app.outstanding_jobs(Duration::from_secs(3_600)).await;
        if left == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < patience,
            "{left} jobs still outstanding after {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn failed_jobs(app: &TestApp) -> anyhow::Result<usize> {
    Ok(app
        .job_rows(None)
        .await
        .into_iter()
        .filter(|j| j.status == "Killed" || j.status == "Failed")
        .count())
}

// ---------------------------------------------------------------------------------------------
// 2. postgres-restart

async fn postgres_restart(claims: &mut Claims, short: bool) -> anyhow::Result<()> {
    let hosts = if short { 200 } else { 1_000 };
    let interval = 5;
    let down = Duration::from_secs(10);
    let cluster = PrivateCluster::start().await;
    let url = cluster.url("fleet");
    let smtp = SmtpSink::start().await;
    let dir = tempfile::Builder::new().prefix("campaign-pg").tempdir()?;
    let log = dir.path().join("api.log");
    let smtp_url = smtp.url();
    let mut api = Api::start(
        dir.path(),
        &[
            ("DATABASE_URL", url.as_str()),
            ("SMTP_URL", smtp_url.as_str()),
            ("EMBEDDED_WORKERS", "false"),
        ],
        &log,
    )
    .await?;
    // A worker process beside it, as a scaled-out deployment runs (it sends the sign-up email).
    let worker_log = std::fs::File::create(dir.path().join("worker.log"))?;
    let mut worker = Command::new(sibling("fleet-worker")?)
        .args(["--concurrency", "4"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", &url)
        .env("SMTP_URL", &smtp_url)
        .env("EMAIL_FROM", "Fleet Campaign <no-reply@fleet.test>")
        .env("SECRETS_KEY", tests::TEST_SECRETS_KEY)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(worker_log.try_clone()?))
        .stderr(Stdio::from(worker_log))
        .kill_on_drop(true)
        .spawn()?;
    let token = admin_token(&api.base, &smtp, "acme").await?;
    let journal = dir.path().join("journal");
    let mut sim = start_sim(
        &api.base,
        &token,
        hosts,
        interval,
        if short { 60 } else { 120 },
        &journal,
        &dir.path().join("sim.log"),
    )?;
    wait_for_hosts(&journal, hosts, Duration::from_secs(300)).await?;
    // Every host checks in at least once more before the server goes.
    tokio::time::sleep(Duration::from_secs(interval + 1)).await;

    let stopped_ms = unix_ms();
    cluster.kill();
    claims.figure(format!(
        "Postgres stopped (pg_ctl stop -m immediate) under {hosts} hosts checking in every {interval} s"
    ));
    tokio::time::sleep(down).await;
    let restarting_ms = unix_ms();
    cluster.restart();
    let back_ms = unix_ms();
    claims.figure(format!(
        "Postgres back after {:.1} s",
        (back_ms - stopped_ms) as f64 / 1000.0
    ));
    let status = sim.wait().await?;
    claims.check(
        status.success(),
        format!("fleet-sim ran to its end ({status})"),
    );
    api.stop().await?;
    terminate(&mut worker).await?;

    let entries = read_journal(&journal);
    // Requests in flight when the server went were answered by what they met; from a second
    // after, the server was gone for every request answered before its restart began. One sent
    // while it was down may wait its 5 s for a connection into the restart and rightly get a
    // 200 then: it was not answered while the server was down.
    let mut while_down: BTreeMap<u16, usize> = BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| e.sent_ms >= stopped_ms + 1_000 && e.sent_ms + e.took_ms < restarting_ms)
    {
        *while_down.entry(e.status).or_default() += 1;
    }
    let straddling = entries
        .iter()
        .filter(|e| e.sent_ms < restarting_ms && e.sent_ms + e.took_ms >= restarting_ms)
        .count();
    claims.figure(format!(
        "{straddling} check-ins sent before the restart began were answered after it"
    ));
    let refused = while_down.get(&503).copied().unwrap_or(0);
    claims.check(
        refused > 0 && while_down.keys().all(|s| *s == 503),
        format!("while it was down the api answered 503 only: {while_down:?} (status: check-ins)"),
    );
    let mut slow: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.sent_ms >= stopped_ms && e.sent_ms < restarting_ms)
        .collect();
    slow.sort_by_key(|e| std::cmp::Reverse(e.took_ms));
    let slowest = slow.first().map_or(0, |e| e.took_ms);
    for e in slow.iter().take(3) {
        claims.figure(format!(
            "slow while down: sent {} ms after the stop, answered {} after {} ms",
            e.sent_ms - stopped_ms,
            e.status,
            e.took_ms
        ));
    }
    claims.check(
        slowest <= 8_000,
        format!("no check-in hung while it was down: the slowest answer took {slowest} ms (bound 5 s + slack)"),
    );
    let errors = entries.iter().filter(|e| e.status == 500).count();
    claims.check(errors == 0, format!("no 500 at any time ({errors})"));
    let first_ok = entries
        .iter()
        .filter(|e| e.sent_ms >= back_ms && e.status == 200)
        .map(|e| e.sent_ms + e.took_ms)
        .min();
    let after = statuses(&entries, back_ms + 5_000, u128::MAX);
    claims.check(
        first_ok.is_some() && after.keys().all(|s| *s == 200),
        format!(
            "recovered by itself: first check-in answered 200 {} ms after Postgres was back; from 5 s after, every check-in 200: {after:?}",
            first_ok.map_or(-1, |t| (t - back_ms) as i64)
        ),
    );
    nothing_acknowledged_is_lost(claims, &journal, &url).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. sqlite-kill

async fn sqlite_kill(claims: &mut Claims, short: bool) -> anyhow::Result<()> {
    let hosts = if short { 200 } else { 1_000 };
    let interval = 5;
    let kills = 3;
    let smtp = SmtpSink::start().await;
    let dir = tempfile::Builder::new()
        .prefix("campaign-sqlite")
        .tempdir()?;
    let file = dir.path().join("data/fleet.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let smtp_url = smtp.url();
    let log = dir.path().join("api.log");
    // The embedded default: SQLite, the worker and the scheduler in the process.
    let mut api = Api::start(
        dir.path(),
        &[
            ("DATABASE_URL", url.as_str()),
            ("SMTP_URL", smtp_url.as_str()),
        ],
        &log,
    )
    .await?;
    let token = admin_token(&api.base, &smtp, "acme").await?;
    let journal = dir.path().join("journal");
    let mut sim = start_sim(
        &api.base,
        &token,
        hosts,
        interval,
        if short { 50 } else { 90 },
        &journal,
        &dir.path().join("sim.log"),
    )?;
    wait_for_hosts(&journal, hosts, Duration::from_secs(300)).await?;
    for kill in 1..=kills {
        tokio::time::sleep(Duration::from_secs(interval)).await;
        api.kill().await?;
        claims.figure(format!(
            "kill {kill}: SIGKILL mid-write under {hosts} hosts' check-ins"
        ));
        let whole = integrity(&file).await?;
        claims.check(
            whole == "ok",
            format!("after kill {kill} the database file is whole (integrity_check: {whole})"),
        );
        let took = api.restart().await?;
        claims.check(
            true,
            format!(
                "after kill {kill} the api opened the database and was ready in {:.1} s",
                took.as_secs_f64()
            ),
        );
    }
    let status = sim.wait().await?;
    claims.check(
        status.success(),
        format!("fleet-sim ran to its end ({status})"),
    );
    api.stop().await?;
    let entries = read_journal(&journal);
    let errors = entries.iter().filter(|e| e.status == 500).count();
    claims.check(errors == 0, format!("no 500 at any time ({errors})"));
    nothing_acknowledged_is_lost(claims, &journal, &url).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 4. revocation

/// An api replica process on `url`.
async fn replica(url: &str, smtp: &str, dir: &Path, n: usize) -> anyhow::Result<Api> {
    Api::start(
        dir,
        &[
            ("DATABASE_URL", url),
            ("SMTP_URL", smtp),
            ("EMBEDDED_WORKERS", "false"),
        ],
        &dir.join(format!("replica-{n}.log")),
    )
    .await
}

async fn revocation(claims: &mut Claims, short: bool) -> anyhow::Result<()> {
    let rounds = if short { 6 } else { 30 };
    let cluster = PrivateCluster::start().await;
    let app = TestApp::builder()
        .without_worker()
        .database_server(&cluster.url("postgres"))
        .start()
        .await;
    // The replica processes run on the real clock.
    app.clock.set(real_now());
    app.organization("acme").await;
    let owner = app
        .member("acme", domain::roles::Role::Owner, "owner@acme.test")
        .await;
    let dir = tempfile::Builder::new()
        .prefix("campaign-replicas")
        .tempdir()?;
    let mut replicas = Vec::new();
    for n in 0..3 {
        replicas.push(replica(app.database.url(), &app.smtp.url(), dir.path(), n).await?);
    }
    let client = reqwest::Client::new();
    let ask = |base: String, token: String| {
        let client = client.clone();
        async move {
            client
                .get(format!("{base}/v1/orgs/acme"))
                .bearer_auth(token)
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .map_or(0, |a| a.status().as_u16())
        }
    };
    let mut accepted_after = 0;
    let mut moment = 0;
    let mut answered = 0;
    let mut lost = 0;
    for round in 0..rounds {
        let name = format!("round-{round}");
        let answer = app
            .call(
                As::Session(&owner),
                Method::POST,
                "/v1/orgs/acme/api-tokens",
                Some(json!({"name": name, "role": "viewer"})),
            )
            .await;
        anyhow::ensure!(answer.status.as_u16() == 201, "token: {}", answer.body);
        let made = answer.json();
        let token = made["token"].as_str().context("token")?.to_owned();
        let id = made["id"].as_str().context("token id")?.to_owned();
        // Every replica has the token in memory.
        for replica in &replicas {
            for _ in 0..2 {
                let status = ask(replica.base.clone(), token.clone()).await;
                anyhow::ensure!(status == 200, "warm {}: {status}", replica.base);
            }
        }
        let revoking = round % 3;
        // Even rounds kill the replica that revokes, odd ones another, after 0 to 45 ms.
        let victim = if round % 2 == 0 {
            revoking
        } else {
            (revoking + 1) % 3
        };
        let delay = Duration::from_millis((round as u64 * 7) % 50);
        let revoke = {
            let client = client.clone();
            let url = format!("{}/v1/orgs/acme/api-tokens/{id}", replicas[revoking].base);
            let cookie = owner.cookie.clone();
            let csrf = owner.csrf.clone();
            tokio::spawn(async move {
                let answer = client
                    .delete(url)
                    .header("cookie", cookie)
                    .header("x-service-csrf", csrf)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                (answer.map_or(0, |a| a.status().as_u16()), Instant::now())
            })
        };
        tokio::time::sleep(delay).await;
        replicas[victim].kill().await?;
        let (status, answered_at) = revoke.await?;
        // The survivors, asked from the moment the revocation was answered.
        let mut after = Vec::new();
        for (n, replica) in replicas.iter().enumerate() {
            if n != victim {
                after.push((n, ask(replica.base.clone(), token.clone()).await));
            }
        }
        let _ = answered_at;
        replicas[victim].restart().await?;
        after.push((
            victim,
            ask(replicas[victim].base.clone(), token.clone()).await,
        ));
        let kept = entities::api_tokens::Entity::find()
            .filter(entities::api_tokens::Column::Name.eq(name.as_str()))
            .one(&app.state.db.orm)
            .await?
            .is_some_and(|t| t.revoked_at.is_some());
        if status == 204 {
            answered += 1;
            if !kept {
                lost += 1;
            }
            accepted_after += after.iter().filter(|(_, s)| *s != 401).count();
            if after.iter().any(|(_, s)| *s != 401) {
                println!(
                    "  ·     round {round}: revoked (204) at {revoking}, killed {victim}: answers {after:?}"
                );
            }
        } else if kept {
            // Unanswered (its replica was killed) but kept: nobody was told it is done, and the
            // other replicas hear of it a moment after its commit; from then on it is in force
            // everywhere all the same (asked again now that the victim is back).
            moment += after.iter().filter(|(_, s)| *s != 401).count();
            for (n, replica) in replicas.iter().enumerate() {
                let status = ask(replica.base.clone(), token.clone()).await;
                if status != 401 {
                    accepted_after += 1;
                    println!(
                        "  ·     round {round}: unanswered but kept; replica {n} answered {status}"
                    );
                }
            }
        } else {
            // Never made: revoke it now elsewhere, so the next round starts clean.
            let other = (revoking + 1) % 3;
            let again = app
                .call_at(
                    &replicas[other].base,
                    As::Session(&owner),
                    Method::DELETE,
                    &format!("/v1/orgs/acme/api-tokens/{id}"),
                    None,
                )
                .await;
            anyhow::ensure!(again.status.as_u16() == 204, "revoke again: {}", again.body);
        }
    }
    claims.figure(format!(
        "{rounds} rounds on 3 replicas: {answered} revocations answered 204 while a replica was killed (the revoking one in even rounds)"
    ));
    claims.figure(format!(
        "revocations left unanswered by a killed replica but committed: {moment} answers 200 in the moment before the other replicas heard (nobody had been told it was done)"
    ));
    claims.check(
        lost == 0,
        format!("every revocation answered 204 is kept ({lost} lost)"),
    );
    claims.check(
        accepted_after == 0,
        format!(
            "no replica, surviving or restarted, accepted a revoked token afterwards ({accepted_after} acceptances)"
        ),
    );
    for replica in &mut replicas {
        replica.stop().await?;
    }
    app.stop().await;
    drop(cluster);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 5. disk-full

/// Notes of 9,000 characters numbered `seq` (a write that needs new pages).
fn big_notes(seq: u64) -> String {
    format!("{seq}:{}", "n".repeat(9_000))
}

/// Writes big notes on `hosts` in turn, one after another, until `stop`: each write's number,
/// host, status and when it was sent.
async fn write_notes_until(
    base: String,
    token: String,
    hosts: Vec<String>,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<(u64, String, u16, u128)> {
    let client = reqwest::Client::new();
    let mut written = Vec::new();
    let mut seq = 0u64;
    while !stop.is_cancelled() {
        seq += 1;
        let host = hosts[(seq as usize) % hosts.len()].clone();
        let sent = unix_ms();
        let status = client
            .patch(format!("{base}/v1/orgs/acme/hosts/{host}"))
            .bearer_auth(&token)
            .json(&json!({"notes": big_notes(seq)}))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_or(0, |a| a.status().as_u16());
        written.push((seq, host, status, sent));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    written
}

async fn disk_full(claims: &mut Claims, short: bool) -> anyhow::Result<()> {
    let hosts = if short { 100 } else { 500 };
    let interval = 5;
    let smtp = SmtpSink::start().await;
    let dir = tempfile::Builder::new().prefix("campaign-disk").tempdir()?;
    // Room for the hosts' inventories before the filler takes the rest: 256 MiB, enough for the
    // short form's 100 hosts, filled up before the full form's 500 had all checked in.
    let disk = tests::disk::Tmpfs::mount(if short { 256 } else { 1024 })?;
    let file = disk.path().join("fleet.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let smtp_url = smtp.url();
    let log = dir.path().join("api.log");
    let mut api = Api::start(
        dir.path(),
        &[
            ("DATABASE_URL", url.as_str()),
            ("SMTP_URL", smtp_url.as_str()),
        ],
        &log,
    )
    .await?;
    let token = admin_token(&api.base, &smtp, "acme").await?;
    let journal = dir.path().join("journal");
    let mut sim = start_sim(
        &api.base,
        &token,
        hosts,
        interval,
        if short { 60 } else { 90 },
        &journal,
        &dir.path().join("sim.log"),
    )?;
    wait_for_hosts(&journal, hosts, Duration::from_secs(300)).await?;
    let listed: Value = reqwest::Client::new()
        .get(format!("{}/v1/orgs/acme/hosts?limit=20", api.base))
        .bearer_auth(&token)
        .send()
        .await?
        .json()
        .await?;
    let host_ids: Vec<String> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["id"].as_str().map(str::to_owned))
        .collect();
    anyhow::ensure!(!host_ids.is_empty(), "no host listed: {listed}");
    let stop = tokio_util::sync::CancellationToken::new();
    let writer = tokio::spawn(write_notes_until(
        api.base.clone(),
        token.clone(),
        host_ids,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(interval)).await;

    // The WAL emptied first (as after a checkpoint), so that the writes need room at once
    // rather than after using up what an earlier burst left allocated.
    {
        use sqlx::Connection;
        let mut conn =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&mut conn)
            .await?;
        conn.close().await?;
    }
    let full_ms = unix_ms();
    let filled = disk.fill()?;
    claims.figure(format!(
        "disk filled ({:.0} MiB of filler) under {hosts} hosts checking in every {interval} s and notes of 9,000 characters written one after another",
        filled as f64 / 1048576.0
    ));
    // Full until a write has been refused for 5 s (a minute at most).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused_since: Option<Instant> = None;
    while Instant::now() < deadline {
        let refused = read_journal(&journal)
            .iter()
            .any(|e| e.status == 503 && e.sent_ms >= full_ms);
        if refused && refused_since.is_none() {
            refused_since = Some(Instant::now());
        }
        if refused_since.is_some_and(|t| t.elapsed() >= Duration::from_secs(5)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    disk.free()?;
    let freed_ms = unix_ms();
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop.cancel();
    let notes = writer.await?;
    let status = sim.wait().await?;
    claims.check(
        status.success(),
        format!("fleet-sim ran to its end ({status})"),
    );
    let alive = api.child.try_wait()?.is_none();
    claims.check(alive, "the api kept running through the full disk");
    api.stop().await?;

    let entries = read_journal(&journal);
    let while_full = statuses(&entries, full_ms + 1_000, freed_ms);
    let mut notes_full: BTreeMap<u16, usize> = BTreeMap::new();
    for (_, _, status, _) in notes
        .iter()
        .filter(|n| n.3 >= full_ms + 1_000 && n.3 < freed_ms)
    {
        *notes_full.entry(*status).or_default() += 1;
    }
    let refused =
        while_full.get(&503).copied().unwrap_or(0) + notes_full.get(&503).copied().unwrap_or(0);
    claims.check(
        refused > 0
            && while_full.keys().chain(notes_full.keys()).all(|s| *s == 503 || *s == 200),
        format!(
            "while the disk was full, writes that needed room answered 503 (200 for those that found room): check-ins {while_full:?}, notes {notes_full:?}"
        ),
    );
    let errors = entries
        .iter()
        .filter(|e| e.status == 500 || e.status == 0)
        .count()
        + notes.iter().filter(|n| n.2 == 500 || n.2 == 0).count();
    claims.check(
        errors == 0,
        format!("no 500 and no unanswered request at any time ({errors})"),
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    claims.check(
        logged.contains("disk full"),
        "the api's log says why: \"the database cannot write (disk full or read-only)\"",
    );
    let after = statuses(&entries, freed_ms + 5_000, u128::MAX);
    let notes_after: BTreeMap<u16, usize> =
        notes
            .iter()
            .filter(|n| n.3 >= freed_ms + 5_000)
            .fold(BTreeMap::new(), |mut counted, n| {
                *counted.entry(n.2).or_default() += 1;
                counted
            });
    claims.check(
        !after.is_empty()
            && !notes_after.is_empty()
            && after.keys().chain(notes_after.keys()).all(|s| *s == 200),
        format!(
            "the service answered again once space returned: from 5 s after, check-ins {after:?}, notes {notes_after:?}"
        ),
    );
    let whole = integrity(&file).await?;
    claims.check(
        whole == "ok",
        format!("the database file is whole ({whole})"),
    );
    nothing_acknowledged_is_lost(claims, &journal, &url).await?;
    // The notes: each host's last acknowledged write (or a later one) is what it has.
    let mut last: HashMap<String, u64> = HashMap::new();
    for (seq, host, status, _) in &notes {
        if *status == 200 {
            last.insert(host.clone(), *seq);
        }
    }
    let db = Database::connect_url(&url, 2).await?;
    let mut behind = 0;
    for (host, seq) in &last {
        let id = platform::ids::HostId::parse(host).context("a host id")?;
        let kept = entities::hosts::Entity::find_by_id(uuid::Uuid::from(id))
            .one(&db.orm)
            .await?
            .and_then(|h| h.notes)
            .and_then(|n| n.split(':').next().and_then(|s| s.parse::<u64>().ok()))
            .unwrap_or(0);
        if kept < *seq {
            behind += 1;
        }
    }
    db.close().await;
    claims.check(
        behind == 0,
        format!(
            "no acknowledged notes lost: {} writes answered 200, each host's last one is kept ({behind} hosts behind)",
            notes.iter().filter(|n| n.2 == 200).count()
        ),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// soak (not part of the campaign: `.ci/soak`)

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The database's size in bytes: the SQLite file and its WAL, or Postgres' `pg_database_size`.
async fn database_bytes(url: &str, file: Option<&Path>) -> anyhow::Result<u64> {
    match file {
        Some(file) => {
            let mut bytes = 0;
            for suffix in ["", "-wal"] {
                let path = PathBuf::from(format!("{}{suffix}", file.display()));
                bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
            }
            Ok(bytes)
        }
        None => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await?;
            let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(&mut conn)
                .await?;
            conn.close().await?;
            Ok(u64::try_from(size).unwrap_or(0))
        }
    }
}

async fn soak(claims: &mut Claims, args: &Args) -> anyhow::Result<()> {
    let smtp = SmtpSink::start().await;
    let dir = tempfile::Builder::new().prefix("campaign-soak").tempdir()?;
    let cluster = match args.database.as_str() {
        "postgres" => Some(PrivateCluster::start().await),
        "sqlite" => None,
        other => bail!("--database sqlite or postgres, not {other}"),
    };
    let file = dir.path().join("data/fleet.db");
    let url = match &cluster {
        Some(cluster) => cluster.url("fleet"),
        None => format!("sqlite://{}?mode=rwc", file.display()),
    };
    let file = cluster.is_none().then_some(file.as_path());
    let smtp_url = smtp.url();
    let mut api = Api::start(
        dir.path(),
        &[
            ("DATABASE_URL", url.as_str()),
            ("SMTP_URL", smtp_url.as_str()),
            ("RUST_LOG", "error"),
            // One process on either database: its memory is the api's, the workers' and the
            // scheduler's (retention runs in the scheduler).
            ("EMBEDDED_WORKERS", "true"),
        ],
        &dir.path().join("api.log"),
    )
    .await?;
    let pid = api.child.id().context("the api's pid")?;
    let token = admin_token(&api.base, &smtp, "acme").await?;
    let (hosts, minutes, interval) = (args.hosts, args.minutes, args.interval);
    println!(
        "soak on {}: {hosts} hosts checking in every {interval} s for {minutes} min (retention on, its defaults)",
        args.database
    );
    let started = Instant::now();
    let mut fleet = sim(
        &api.base,
        &token,
        hosts,
        interval,
        minutes * 60,
        None,
        &dir.path().join("sim.log"),
    )?;
    let mut at_ten: Option<(u64, u64, f64)> = None;
    let mut last;
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let minute = started.elapsed().as_secs() / 60;
        let rss = rss_kib(pid);
        let bytes = database_bytes(&url, file).await.unwrap_or(0);
        println!(
            "[{minute:>3} min] api RSS {:.1} MiB · database {:.1} MiB",
            rss as f64 / 1024.0,
            bytes as f64 / 1048576.0
        );
        if minute >= 10 && at_ten.is_none() {
            at_ten = Some((rss, bytes, started.elapsed().as_secs_f64()));
        }
        last = (rss, bytes);
        if fleet.try_wait()?.is_some() {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    api.stop().await?;
    let (rss_end, bytes_end) = last;
    let Some((rss_ten, bytes_ten, ten_s)) = at_ten else {
        bail!("the soak ended before its tenth minute");
    };
    let ratio = rss_end as f64 / rss_ten.max(1) as f64;
    claims.figure(format!(
        "resident memory: {:.1} MiB at 10 min, {:.1} MiB at {:.0} min ({ratio:.3}x)",
        rss_ten as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        elapsed / 60.0
    ));
    let host_days = hosts as f64 * (elapsed - ten_s) / 86_400.0;
    let growth = (bytes_end as f64 - bytes_ten as f64) / host_days.max(f64::MIN_POSITIVE);
    claims.figure(format!(
        "database: {:.1} MiB at 10 min, {:.1} MiB at the end: {:.0} bytes per host-day",
        bytes_ten as f64 / 1048576.0,
        bytes_end as f64 / 1048576.0,
        growth
    ));
    claims.check(
        ratio <= 1.10,
        "resident memory at the end within 10 % of at 10 minutes",
    );
    drop(cluster);
    Ok(())
}
