//! `bench-fleet`: the fleet-inventory figures (BENCHMARKS.md, "Fleet inventory"). Starts the
//! real `api` (and, on Postgres, a separate `fleet-worker`, the `worker` program) from the
//! release build as processes in a temp working dir, on a fresh database, signs up an
//! organization through the emailed flow (the outbox), makes an admin API token, and runs
//! `fleet-sim --phases …` against it: enrol `--hosts` hosts with role/env labels, one full
//! check-in each, then timed phases of unchanged check-ins, changed 500-package inventories and
//! first-page host lists with a label selector. The api's VmRSS is sampled every 100 ms over
//! the whole run (and its VmHWM read at the end); CPU time is accounted per process.
//!
//! ```text
//! cargo build --release -p api -p tests
//! target/release/bench-fleet --backend postgres --hosts 10000
//! target/release/bench-fleet --backend sqlite --hosts 10000
//! ```
//!
//! `--impacts split` has half the hosts report the impact of their updates (decisions §21) and
//! half not; with phases such as `changed@impact:20,changed@plain:20,…` the two halves check in
//! alternately, each phase with its own CPU accounting (BENCHMARKS.md, "Impact before
//! approval").
//!
//! The api runs with `RATE_LIMIT_BURST` and `RATE_LIMIT_PER_SECOND` raised to 1,000,000 so the
//! organization's limit never refuses the benchmark; everything else is the default
//! configuration (`RUST_LOG=info`, one log line per request, written to a file).
//! Postgres: a database `--db-name` (default `bench_fleet`) is created through `--admin-url`
//! and dropped at the end unless `--keep`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use tokio::process::{Child, Command};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    Postgres,
    Sqlite,
}

/// Which simulated hosts report the impact of their updates (decisions §21).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Impacts {
    /// Every host but every tenth (fleet-sim's default).
    All,
    /// No host (`fleet-sim --no-impact`).
    None,
    /// Hosts of even index (`fleet-sim --impact-split`); phases may be named
    /// `changed@impact`, `changed@plain` … to check in one half only.
    Split,
}

#[derive(Parser)]
#[command(
    name = "bench-fleet",
    about = "Fleet-inventory figures against the real api."
)]
struct Args {
    #[arg(long, value_enum, default_value = "postgres")]
    backend: Backend,
    /// Where to create (and drop) the bench database on Postgres; the api and worker get the
    /// same URL with the bench database's name, query included. Plaintext by default: the
    /// database is on this machine, and TLS over loopback (what `sslmode=prefer`, the default,
    /// negotiates with a server that has `ssl = on`) cost 38 to 58% of Postgres's CPU per
    /// unchanged check-in (BENCHMARKS.md).
    #[arg(
        long,
        default_value = "postgres://postgres@127.0.0.1/postgres?sslmode=disable"
    )]
    admin_url: String,
    #[arg(long, default_value = "bench_fleet")]
    db_name: String,
    /// Keep the database (and the temp dir) afterwards.
    #[arg(long)]
    keep: bool,
    #[arg(long, default_value_t = 18080)]
    port: u16,
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Check-ins in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// fleet-sim's phases.
    #[arg(
        long,
        default_value = "unchanged:20,changed:20,list:10,unchanged:20,changed:20,list:10,unchanged:20,changed:20,list:10"
    )]
    phases: String,
    #[arg(long, default_values_t = ["role=web".to_owned(), "env=prod,role=db".to_owned()])]
    selector: Vec<String>,
    #[arg(long, default_value_t = 4)]
    list_concurrency: usize,
    /// One list request every this many ms during check-in phases.
    #[arg(long, default_value_t = 200)]
    probe_every_ms: u64,
    /// Worker concurrency (Postgres).
    #[arg(long, default_value_t = 32)]
    worker_concurrency: usize,
    /// Which hosts report impacts.
    #[arg(long, value_enum, default_value = "all")]
    impacts: Impacts,
    /// Where `api`, `fleet-worker` and `fleet-sim` are; default: next to this program.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

fn vm_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn spawn(
    program: &Path,
    dir: &Path,
    log: &str,
    envs: &[(&str, String)],
    args: &[String],
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(dir.join(log))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    for (key, value) in envs {
        command.env(key, value);
    }
    command
        .spawn()
        .with_context(|| format!("starting {}", program.display()))
}

/// The sign-up token, from the outbox or the logged link.
fn find_token(dir: &Path) -> Option<String> {
    let mut texts = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir.join("data/outbox")) {
        for entry in entries.flatten() {
            texts.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    for log in ["api.log", "worker.log"] {
        texts.push(std::fs::read_to_string(dir.join(log)).unwrap_or_default());
    }
    texts
        .into_iter()
        // Undo quoted-printable soft breaks and `=3D`.
        .map(|t| {
            t.replace("=\r\n", "")
                .replace("=\n", "")
                .replace("=3D", "=")
        })
        .find(|t| t.contains("token="))
        .map(|t| tests::identity::token_in(&t))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // reqwest is built without a TLS provider of its own (`rustls-no-provider`).
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("program dir")?
            .to_owned(),
    };
    let temp = tempfile::Builder::new().prefix("bench-fleet").tempdir()?;
    let dir = temp.path().to_owned();
    let database_url = match args.backend {
        Backend::Postgres => {
            let mut admin = PgConnection::connect(&args.admin_url).await?;
            let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", args.db_name);
            sqlx::query(sqlx::AssertSqlSafe(drop))
                .execute(&mut admin)
                .await?;
            let create = format!("CREATE DATABASE {}", args.db_name);
            sqlx::query(sqlx::AssertSqlSafe(create))
                .execute(&mut admin)
                .await?;
            admin.close().await?;
            let mut url = url::Url::parse(&args.admin_url)?;
            url.set_path(&args.db_name);
            url.to_string()
        }
        Backend::Sqlite => "sqlite://data/service.db?mode=rwc".to_owned(),
    };
    let base = format!("http://127.0.0.1:{}", args.port);
    let envs = vec![
        ("DATABASE_URL", database_url.clone()),
        ("SERVICE_BIND", format!("127.0.0.1:{}", args.port)),
        ("SERVICE_BASE_URL", base.clone()),
        ("RATE_LIMIT_BURST", "1000000".to_owned()),
        ("RATE_LIMIT_PER_SECOND", "1000000".to_owned()),
        // fleet-sim --distinct-ips speaks for many hosts as a proxy on loopback would.
        ("TRUSTED_PROXIES", "127.0.0.1/32".to_owned()),
        (
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        ),
    ];
    println!(
        "backend {:?}, database {database_url}, working dir {}",
        args.backend,
        dir.display()
    );
    let mut api = spawn(&bin_dir.join("api"), &dir, "api.log", &envs, &[])?;
    let api_pid = api.id().context("api pid")?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let started = Instant::now();
    loop {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "the api did not become ready; see {}/api.log",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut worker = None;
    if args.backend == Backend::Postgres {
        worker = Some(spawn(
            &bin_dir.join("fleet-worker"),
            &dir,
            "worker.log",
            &envs,
            &[
                "--concurrency".to_owned(),
                args.worker_concurrency.to_string(),
            ],
        )?);
    }
    let worker_pid = worker.as_ref().and_then(Child::id);

    // Whole-run RSS of the api (and the worker).
    let stop = Arc::new(AtomicBool::new(false));
    let api_peak = Arc::new(AtomicU64::new(0));
    let worker_peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, api_peak, worker_peak) = (stop.clone(), api_peak.clone(), worker_peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                api_peak.fetch_max(vm_kib(api_pid, "VmRSS:").unwrap_or(0), Ordering::Relaxed);
                if let Some(pid) = worker_pid {
                    worker_peak.fetch_max(vm_kib(pid, "VmRSS:").unwrap_or(0), Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // Sign up through the emailed flow, then an admin API token.
    let signed_up = client
        .post(format!("{base}/v1/auth/sign-up"))
        .json(&json!({"email": "bench@example.com", "name": "Bench",
                      "organization": {"name": "Acme", "slug": "acme"}}))
        .send()
        .await?;
    anyhow::ensure!(
        signed_up.status().as_u16() == 202,
        "sign-up: {}",
        signed_up.status()
    );
    let token = {
        let waited = Instant::now();
        loop {
            if let Some(token) = find_token(&dir) {
                break token;
            }
            if waited.elapsed() > Duration::from_secs(30) {
                bail!("no sign-up email in {}", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
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
        .context("no session cookie")?
        .to_owned();
    let session: Value = verified.json().await?;
    let csrf = session["csrf_token"]
        .as_str()
        .context("csrf_token")?
        .to_owned();
    let made: Value = client
        .post(format!("{base}/v1/orgs/acme/api-tokens"))
        .header("cookie", cookie)
        .header("x-service-csrf", csrf)
        .json(&json!({"name": "bench", "role": "admin"}))
        .send()
        .await?
        .json()
        .await?;
    let api_token = made["token"].as_str().context("no API token")?.to_owned();

    let mut sim_args = vec![
        "--url".to_owned(),
        base.clone(),
        "--org".into(),
        "acme".into(),
        "--api-token".into(),
        api_token,
        "--hosts".into(),
        args.hosts.to_string(),
        "--concurrency".into(),
        args.concurrency.to_string(),
        "--role-labels".into(),
        "--distinct-ips".into(),
        "--phases".into(),
        args.phases.clone(),
        "--list-concurrency".into(),
        args.list_concurrency.to_string(),
        "--probe-every-ms".into(),
        args.probe_every_ms.to_string(),
        "--watch".into(),
        format!("api={api_pid}"),
        "--rss-pid".into(),
        api_pid.to_string(),
    ];
    match args.impacts {
        Impacts::All => {}
        Impacts::None => sim_args.push("--no-impact".into()),
        Impacts::Split => sim_args.push("--impact-split".into()),
    }
    for selector in &args.selector {
        sim_args.push("--selector".into());
        sim_args.push(selector.clone());
    }
    if let Some(pid) = worker_pid {
        sim_args.push("--watch".into());
        sim_args.push(format!("worker={pid}"));
    }
    if args.backend == Backend::Postgres {
        sim_args.push("--watch".into());
        sim_args.push(format!(
            "postgres={}",
            format_args!("~postgres {} ", args.db_name)
        ));
    }
    println!("fleet-sim {}", sim_args.join(" "));
    let status = Command::new(bin_dir.join("fleet-sim"))
        .args(&sim_args)
        .status()
        .await?;

    stop.store(true, Ordering::Relaxed);
    sampler.await?;
    println!(
        "api VmRSS peak (100 ms samples, whole run) {:.0} MiB, VmHWM {:.0} MiB; worker VmRSS peak {:.0} MiB",
        api_peak.load(Ordering::Relaxed) as f64 / 1024.0,
        vm_kib(api_pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0,
        worker_peak.load(Ordering::Relaxed) as f64 / 1024.0
    );
    if let Some(mut worker) = worker {
        let _ = worker.start_kill();
        let _ = worker.wait().await;
    }
    let _ = api.start_kill();
    let _ = api.wait().await;
    if args.keep {
        println!("kept {} and {database_url}", dir.display());
        let _ = temp.keep();
    } else if args.backend == Backend::Postgres {
        let mut admin = PgConnection::connect(&args.admin_url).await?;
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", args.db_name);
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&mut admin)
            .await?;
    }
    anyhow::ensure!(status.success(), "fleet-sim failed: {status}");
    Ok(())
}
