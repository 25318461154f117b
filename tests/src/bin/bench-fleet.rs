//! `bench-fleet`: the fleet-inventory figures (BENCHMARKS.md, "Fleet inventory"). Starts the
//! real `api` program (its copy in this package, `fleet-api`: the same `main`) and, on
//! Postgres, a separate `fleet-worker` (the `worker` program), from the release build, as
//! processes in a temp working dir, on a fresh database, signs up an
//! organization through the emailed flow (the outbox), makes an admin API token, and runs
//! `fleet-sim --phases …` against it: enrol `--hosts` hosts with role/env labels, one full
//! check-in each, then timed phases of unchanged check-ins, changed 500-package inventories and
//! first-page host lists with a label selector. The api's VmRSS is sampled every 100 ms over
//! the whole run (and its VmHWM read at the end); CPU time is accounted per process.
//!
//! ```text
//! cargo build --release -p tests --bin bench-fleet --bin fleet-api --bin fleet-worker --bin fleet-sim
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
//!
//! `--rollout` (BENCHMARKS.md, "Rollouts"): the phases alternate `direct` and `rollout` phases
//! of the same length: in each, fleet-sim creates a policy over every host (for `rollout` with
//! 5 waves, for `direct` with none), approves its proposal, and checks in for the phase's
//! seconds, each host doing the job its answer hands it and reporting it at once; so both
//! carry the same 10,000 jobs and results, and their check-ins per second compare the service
//! with a rollout going out against without one. Afterwards, for each rollout, wave by wave
//! from the database: the last result of a wave (its `finished_at`, which `fleet-sim` sets as
//! it sends it) to the next wave's jobs (their `created_at`: the promotion, decided in the
//! request of that result), to that result's answer (the promotion committed; from
//! fleet-sim's `--job-log`), and to the next wave's first job handed out.
//!
//! ```text
//! target/release/bench-fleet --backend postgres --hosts 10000 --rollout
//! ```

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

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
    /// fleet-sim's phases (default: unchanged:20,changed:20,list:10 three times; with
    /// `--rollout`, direct:120,rollout:120 three times).
    #[arg(long)]
    phases: Option<String>,
    /// Rollout phases alternating with direct ones (the same proposal without waves), and the
    /// promotion figures of each rollout (module docs).
    #[arg(long)]
    rollout: bool,
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
    let mut api = spawn(&bin_dir.join("fleet-api"), &dir, "api.log", &envs, &[])?;
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

    let phases = args.phases.clone().unwrap_or_else(|| {
        if args.rollout {
            "direct:120,rollout:120,direct:120,rollout:120,direct:120,rollout:120"
        } else {
            "unchanged:20,changed:20,list:10,unchanged:20,changed:20,list:10,unchanged:20,changed:20,list:10"
        }
        .to_owned()
    });
    let job_log = dir.join("jobs.jsonl");
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
        phases,
        "--job-log".into(),
        job_log.display().to_string(),
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
    if args.rollout {
        let url = match args.backend {
            Backend::Postgres => database_url.clone(),
            Backend::Sqlite => format!("sqlite://{}/data/service.db?mode=ro", dir.display()),
        };
        if let Err(e) = promotions(&url, &job_log).await {
            println!("promotion figures: {e:#}");
        }
    }
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

/// One wave of a rollout as the database has it.
#[derive(Default)]
struct Wave {
    jobs: usize,
    /// When its jobs were made: its promotion.
    created: Option<chrono::DateTime<chrono::Utc>>,
    first_dispatched: Option<chrono::DateTime<chrono::Utc>>,
    /// Its last result, and that job.
    last_finished: Option<(chrono::DateTime<chrono::Utc>, uuid::Uuid)>,
}

/// Prints, for each rollout, how long after each wave's last result the next wave was
/// promoted, its promotion committed and its first job handed out (module docs).
async fn promotions(database_url: &str, job_log: &Path) -> anyhow::Result<()> {
    use std::collections::{BTreeMap, HashMap};

    use entities::{host_jobs, proposal_rollouts};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};

    // The answer to each result fleet-sim sent (Unix ms), by job id.
    let answered: HashMap<String, i64> = std::fs::read_to_string(job_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["event"] == "result")
        .filter_map(|l| Some((l["job"].as_str()?.to_owned(), l["answered_ms"].as_i64()?)))
        .collect();
    let db = sea_orm::Database::connect(database_url).await?;
    let rollouts = proposal_rollouts::Entity::find().all(&db).await?;
    type Row = (
        uuid::Uuid,
        Option<i32>,
        chrono::DateTime<chrono::Utc>,
        Option<chrono::DateTime<chrono::Utc>>,
        Option<chrono::DateTime<chrono::Utc>>,
    );
    for rollout in rollouts {
        let rows: Vec<Row> = host_jobs::Entity::find()
            .select_only()
            .column(host_jobs::Column::Id)
            .column(host_jobs::Column::Wave)
            .column(host_jobs::Column::CreatedAt)
            .column(host_jobs::Column::DispatchedAt)
            .column(host_jobs::Column::FinishedAt)
            .filter(host_jobs::Column::ProposalId.eq(rollout.proposal_id))
            .filter(host_jobs::Column::Kind.ne("reboot"))
            .into_tuple()
            .all(&db)
            .await?;
        let mut waves: BTreeMap<i32, Wave> = BTreeMap::new();
        for (id, wave, created, dispatched, finished) in rows {
            let w = waves.entry(wave.unwrap_or(-1)).or_default();
            w.jobs += 1;
            w.created = Some(w.created.map_or(created, |c| c.min(created)));
            if let Some(d) = dispatched {
                w.first_dispatched = Some(w.first_dispatched.map_or(d, |f| f.min(d)));
            }
            if let Some(f) = finished
                && w.last_finished.is_none_or(|(last, _)| f > last)
            {
                w.last_finished = Some((f, id));
            }
        }
        let proposal = platform::ids::ProposalId::from(rollout.proposal_id);
        println!(
            "rollout of {proposal} ({}): wave, jobs, then from the wave's last result: next wave promoted (jobs created), promotion committed (that result answered), next wave's first job handed out",
            rollout.state
        );
        let list: Vec<(&i32, &Wave)> = waves.iter().collect();
        let mut figures = Vec::new();
        for pair in list.windows(2) {
            let ((index, wave), (next_index, next)) = (pair[0], pair[1]);
            let Some((last, last_job)) = wave.last_finished else {
                continue;
            };
            let ms =
                |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| (t - last).num_milliseconds());
            let promoted = ms(next.created);
            let committed = answered
                .get(&platform::ids::HostJobId::from(last_job).to_string())
                .map(|a| a - last.timestamp_millis());
            let first_job = ms(next.first_dispatched);
            println!(
                "  wave {index} ({} jobs) → wave {next_index} ({} jobs): promoted after {} ms, committed after {} ms, first job after {} ms",
                wave.jobs,
                next.jobs,
                promoted.map_or("?".into(), |v| v.to_string()),
                committed.map_or("?".into(), |v| v.to_string()),
                first_job.map_or("?".into(), |v| v.to_string()),
            );
            figures.push(
                json!({"wave": index, "jobs": wave.jobs, "next_jobs": next.jobs,
                                "promoted_ms": promoted, "committed_ms": committed,
                                "first_job_ms": first_job}),
            );
        }
        println!(
            "RESULT {}",
            json!({"phase": "promotions", "proposal": proposal.to_string(),
                   "state": rollout.state, "waves": figures})
        );
    }
    Ok(())
}
