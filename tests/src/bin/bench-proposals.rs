//! `bench-proposals`: what proposals cost at fleet scale. On a fresh database (Postgres database
//! `bench_proposals` on 127.0.0.1 by default, dropped at the end; or `--database-url sqlite://…`)
//! it seeds, directly through the entities:
//!
//! - one organization with its owner and an owner API token (`sat_…`);
//! - `--hosts` Ubuntu hosts, half labelled `env=prod`, half `env=staging`;
//! - a pool of `--pool` distinct updates (package, from, to). The first `--core` are security
//!   updates with a USN advisory (severity, CVEs; a few CVEs on the known-exploited list); every
//!   host has each of them with probability `--core-share` (so their union over the fleet is all
//!   `--core` of them). Every host also has `--extra-min..=--extra-max` of the other, non-security
//!   updates, at random;
//! - three policies: "Security, whole fleet" (`updates: security`, every host: exactly `--core`
//!   changes over all hosts), "All updates, prod" (`env=prod`) and "All updates, staging"
//!   (`env=staging`);
//! - `--history` closed proposals from the past, so that the list is not trivially short.
//!
//! Then it measures:
//!
//! 1. baseline: every policy evaluated once (`domain::policy::evaluate_policy`), timed;
//! 2. `--rounds` times: a feed change (new `to_version` for every tenth package of the pool, on
//!    every host that has it), then the three policies evaluated one after the other, each timed
//!    with its SQL broken down by statement (sqlx's statement log, captured in-process); then
//!    another feed change and the three evaluated concurrently (as a worker with concurrency > 1
//!    runs them), wall time. Then one evaluation of an unchanged inventory (writes nothing);
//! 3. `--e2e-rounds` times: a feed change, then `EvaluateHost` for every host pushed into the
//!    queue with an in-process worker (`worker::run`, concurrency `--concurrency`) running; the
//!    time until every `host.evaluate` and `policy.evaluate` job is done, no policy is dirty and
//!    every policy's open proposal carries the new versions;
//! 4. `wrk` against `GET /v1/orgs/acme/proposals/{id}` (the security proposal: all hosts and
//!    `--core` changes) and `GET /v1/orgs/acme/proposals` (and two filtered lists), `--http-rounds`
//!    rounds of `--http-seconds` s at `--connections` connections and `--wrk-threads` threads.
//!
//! With `--impact-org` a second organization, `acme-impact`, is seeded the same way but its
//! hosts' updates carry the impact their agents report (decisions §21, stored as a check-in
//! stores it; [`impact_of`]: kernels reboot and install their image, OpenSSL-like libraries
//! restart the host's service and the SSH server, one removes `libssl3`; every
//! `--unknown-impact-every`-th host says nothing), so its evaluation stores each target's impact
//! and the proposal's summary. The HTTP phase then measures both organizations' security
//! proposal details alternately (which goes first swaps every round) and prints the ratio round
//! by round, and `GET …/proposals/{id}/impact` on its first page and after 5,000 hosts
//! (BENCHMARKS.md, "Impact before approval"). The feed-change rounds act on `acme` only.
//!
//! Every phase prints the load average and the processes outside this one (and outside
//! Postgres) that used more than 10% of a CPU during it.
//!
//! ```text
//! cargo build --release -p tests --bin bench-proposals
//! target/release/bench-proposals                       # Postgres, 10,000 hosts
//! target/release/bench-proposals --database-url 'sqlite:///tmp/bp/service.db?mode=rwc'
//! target/release/bench-proposals --impact-org --rounds 0 --skip-e2e --skip-lists --http-rounds 6
//! ```

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

use std::{
    collections::{BTreeMap, HashMap},
    io::Write,
    str::FromStr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use apalis::prelude::{TaskBuilder, TaskSink};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use clap::Parser;
use domain::fleet::jobs::EvaluateHost;
use domain::roles::Role;
use entities::{
    accounts, api_tokens, host_updates, hosts,
    json::{Advisory, Impact, ImpactInstall, JsonText},
    known_exploited, memberships, organizations, policies, proposal_changes, proposals,
};
use platform::{
    clock::{Clock, SystemClock},
    config::{Config, RawConfig},
    db::{Database, Pool},
    jobs::{Job, postgres_config, sqlite_config},
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Set,
    TransactionTrait,
};
use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt};
use uuid::Uuid;

#[derive(Parser, Clone)]
struct Args {
    /// Database to bench on. Default: database `bench_proposals` on --postgres-admin, created
    /// fresh and dropped at the end.
    #[arg(long)]
    database_url: Option<String>,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    postgres_admin: String,
    #[arg(long, default_value = "bench_proposals")]
    database_name: String,
    /// Keep the Postgres database at the end.
    #[arg(long)]
    keep: bool,
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Distinct (package, from, to) updates.
    #[arg(long, default_value_t = 2_000)]
    pool: usize,
    /// Security updates (with advisories) among them.
    #[arg(long, default_value_t = 300)]
    core: usize,
    /// Chance that a host has a given security update.
    #[arg(long, default_value_t = 0.67)]
    core_share: f64,
    #[arg(long, default_value_t = 30)]
    extra_min: usize,
    #[arg(long, default_value_t = 70)]
    extra_max: usize,
    /// Closed proposals seeded into the past.
    #[arg(long, default_value_t = 1_000)]
    history: usize,
    /// Feed-change rounds of direct evaluation (each: sequential, then concurrent).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Feed-change rounds through the queue.
    #[arg(long, default_value_t = 2)]
    e2e_rounds: usize,
    /// Worker concurrency per queue (the `worker` binary's default is 32).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    #[arg(long, default_value_t = 3)]
    http_rounds: usize,
    #[arg(long, default_value_t = 10)]
    http_seconds: u64,
    #[arg(long, default_value_t = 4)]
    connections: usize,
    #[arg(long, default_value_t = 2)]
    wrk_threads: usize,
    /// Threads of this process's runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Skip phases.
    #[arg(long)]
    skip_e2e: bool,
    #[arg(long)]
    skip_http: bool,
    /// Also seed a second organization, `acme-impact`, the same as the first but for its
    /// hosts' updates carrying the impact agents report (decisions §21; see [`impact_of`]),
    /// evaluate its policies too, and in the HTTP phase measure its security proposal's detail
    /// alternately with the first's (whose agents say nothing: every host unknown), and its
    /// per-host impact pages. The feed-change rounds act on the first organization only.
    #[arg(long)]
    impact_org: bool,
    /// In `acme-impact`, every this-many-th host runs an agent that does not report impacts
    /// (counted as unknown); 0: every host reports them.
    #[arg(long, default_value_t = 10)]
    unknown_impact_every: usize,
    /// In the HTTP phase, leave out the three proposal lists.
    #[arg(long)]
    skip_lists: bool,
}

fn main() -> anyhow::Result<()> {
    // reqwest is built without a TLS provider of its own (`rustls-no-provider`).
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    profile::install();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    runtime.block_on(main_async(args))
}

async fn main_async(args: Args) -> anyhow::Result<()> {
    let (url, created) = match &args.database_url {
        Some(url) => (url.clone(), false),
        None => {
            let name = &args.database_name;
            ensure!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                    && name != "test",
                "database name {name:?} is not allowed"
            );
            let mut admin = PgConnection::connect(&args.postgres_admin).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await?;
            admin.close().await?;
            let mut url = url::Url::parse(&args.postgres_admin)?;
            url.set_path(&format!("/{name}"));
            (url.to_string(), true)
        }
    };
    let result = run(&args, &url).await;
    if created && !args.keep {
        let mut admin = PgConnection::connect(&args.postgres_admin).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            args.database_name
        )))
        .execute(&mut admin)
        .await?;
        admin.close().await?;
        println!("dropped database {}", args.database_name);
    }
    result
}

/// What was seeded and what the benchmark needs to find it again.
struct Fleet {
    slug: &'static str,
    org_id: Uuid,
    host_ids: Vec<Uuid>,
    policies: Vec<(Uuid, &'static str)>,
    token: String,
    /// Per pool package: its current generation (bumped by each feed change).
    generation: Vec<u32>,
    feed_changes: usize,
}

fn package(k: usize) -> String {
    format!("pkg-{k:04}")
}

fn from_version(k: usize) -> String {
    format!("1.{}.{k}-1ubuntu0.1", k % 7)
}

fn to_version(k: usize, generation: u32) -> String {
    format!("1.{}.{k}-1ubuntu0.{}", k % 7, generation + 2)
}

const SEVERITIES: [&str; 4] = ["low", "medium", "high", "critical"];

fn advisories(k: usize) -> String {
    let mut cves = vec![format!("CVE-2026-{}", 20_000 + k)];
    if k.is_multiple_of(3) {
        cves.push(format!("CVE-2025-{}", 40_000 + k));
    }
    serde_json::json!([{
        "external_id": format!("USN-{}-1", 7_000 + k),
        "source": "usn",
        "severity": SEVERITIES[k % 4],
        "title": format!("{} vulnerabilities", package(k)),
        "url": format!("https://ubuntu.com/security/notices/USN-{}-1", 7_000 + k),
        "cves": cves,
    }])
    .to_string()
}

async fn run(args: &Args, url: &str) -> anyhow::Result<()> {
    println!("database: {}", redact(url));
    machine();
    let raw = RawConfig {
        database_url: Some(url.to_owned()),
        service_bind: Some("127.0.0.1:0".into()),
        embedded_workers: Some("false".into()),
        rate_limit_burst: Some("100000000".into()),
        rate_limit_per_second: Some("100000000".into()),
        ..RawConfig::default()
    };
    let config: Arc<Config> = Arc::new(raw.validate()?);
    let db = Database::connect(&config, 16).await?;
    db.migrate().await?;
    let postgres = matches!(db.pool, Pool::Postgres(_));

    let watch = Watch::start();
    let started = Instant::now();
    let mut fleet = seed(args, &db, "acme", false).await?;
    let impact_fleet = if args.impact_org {
        Some(seed(args, &db, "acme-impact", true).await?)
    } else {
        None
    };
    println!(
        "seeded in {:.1} s {}",
        started.elapsed().as_secs_f64(),
        watch.report()
    );
    db.orm.execute_unprepared("ANALYZE").await?;
    println!("postgres: {postgres}");
    print_sizes(&db).await?;

    let deps = worker::Deps::new(config.clone(), db.clone(), Arc::new(SystemClock))?;

    // 1. Baseline: the first evaluation opens every proposal.
    println!("\n== baseline: first evaluation of every policy (opens the proposals)");
    for seeded in std::iter::once(&fleet).chain(impact_fleet.as_ref()) {
        for (id, name) in seeded.policies.clone() {
            let watch = Watch::start();
            let took = timed_evaluation(&deps, id).await?;
            println!(
                "  {:<12} {name:<22} {:>7.2} s  {}  {}",
                seeded.slug,
                took.total,
                took.breakdown_line(),
                watch.report()
            );
        }
        verify(&db, seeded, args).await?;
    }
    if impact_fleet.is_some() {
        // The proposal tables as the HTTP phase reads them.
        db.orm.execute_unprepared("ANALYZE").await?;
        print_sizes(&db).await?;
    }

    // 2. Feed changes, evaluated directly.
    let mut sequential_totals = Vec::new();
    let mut concurrent_walls = Vec::new();
    let mut per_policy: BTreeMap<&str, Vec<Timing>> = BTreeMap::new();
    for round in 0..args.rounds {
        let watch = Watch::start();
        let changed = feed_change(&db, &mut fleet, args).await?;
        println!(
            "\n== round {round}: feed change ({changed} host_updates rows get a new to_version), \
             then the policies one after the other {}",
            watch.report()
        );
        let watch = Watch::start();
        let probe = WriteProbe::start(&db, fleet.host_ids[0]);
        let mut total = 0.0;
        for (id, name) in fleet.policies.clone() {
            let took = timed_evaluation(&deps, id).await?;
            println!(
                "  {name:<22} {:>7.2} s  {}",
                took.total,
                took.breakdown_line()
            );
            for (what, secs, count, rows) in took.top(8) {
                println!("      {secs:>7.3} s  {count:>5} stmts {rows:>9} rows  {what}");
            }
            total += took.total;
            per_policy.entry(name).or_default().push(took);
        }
        println!("  sequential total {total:.2} s  {}", watch.report());
        println!("  {}", probe.report().await);
        sequential_totals.push(total);
        verify(&db, &fleet, args).await?;

        let changed = feed_change(&db, &mut fleet, args).await?;
        let watch = Watch::start();
        let start = Instant::now();
        let runs = fleet.policies.iter().map(|(id, _)| {
            let deps = deps.clone();
            let id = *id;
            async move {
                let start = Instant::now();
                domain::policy::evaluate_policy(&deps.db, &deps.reports, id, deps.clock.now())
                    .await?;
                Ok::<f64, anyhow::Error>(start.elapsed().as_secs_f64())
            }
        });
        let each = futures::future::join_all(runs).await;
        let wall = start.elapsed().as_secs_f64();
        let failed: Vec<String> = each
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| format!("{e}")))
            .collect();
        println!(
            "  feed change ({changed} rows), policies concurrently: wall {wall:.2} s (each {}) {}",
            each.iter()
                .map(|r| match r {
                    Ok(s) => format!("{s:.2}"),
                    Err(_) => "failed".to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            watch.report()
        );
        if !failed.is_empty() {
            // SQLite: a second write transaction waits for the first up to the busy timeout.
            println!("  concurrent evaluation failed: {}", failed.join("; "));
            for (id, _) in fleet.policies.clone() {
                domain::policy::evaluate_policy(&deps.db, &deps.reports, id, deps.clock.now())
                    .await?;
            }
        } else {
            concurrent_walls.push(wall);
        }
        verify(&db, &fleet, args).await?;
    }
    println!("\n== unchanged inventory: every policy evaluated again (nothing to write)");
    let mut noop_total = 0.0;
    for (id, name) in fleet.policies.clone() {
        let took = timed_evaluation(&deps, id).await?;
        println!(
            "  {name:<22} {:>7.2} s  {}",
            took.total,
            took.breakdown_line()
        );
        noop_total += took.total;
    }
    println!("  total {noop_total:.2} s");
    if args.rounds > 0 {
        println!(
            "\n== direct evaluation after a feed change, medians of {} rounds",
            args.rounds
        );
        for (name, timings) in &per_policy {
            let mut totals: Vec<f64> = timings.iter().map(|t| t.total).collect();
            let mut reads: Vec<f64> = timings.iter().map(|t| t.host_updates).collect();
            let mut writes: Vec<f64> = timings.iter().map(|t| t.writes).collect();
            let mut other: Vec<f64> = timings.iter().map(|t| t.other_sql).collect();
            let mut rust: Vec<f64> = timings.iter().map(|t| t.rust()).collect();
            println!(
                "  {name:<22} total {:.2} s = read host_updates {:.2} + writes {:.2} + other SQL {:.2} + outside SQL {:.2}",
                tests::wrk::median(&mut totals),
                tests::wrk::median(&mut reads),
                tests::wrk::median(&mut writes),
                tests::wrk::median(&mut other),
                tests::wrk::median(&mut rust),
            );
        }
        println!(
            "  all policies one after the other: median {:.2} s (runs: {})",
            tests::wrk::median(&mut sequential_totals.clone()),
            list(&sequential_totals)
        );
        println!(
            "  all policies concurrently:        median {:.2} s (runs: {})",
            tests::wrk::median(&mut concurrent_walls.clone()),
            list(&concurrent_walls)
        );
    }

    // 3. Through the queue.
    if !args.skip_e2e {
        let mut walls = Vec::new();
        for round in 0..args.e2e_rounds {
            let wall = end_to_end(args, &config, &db, &mut fleet, round).await?;
            walls.push(wall);
            verify(&db, &fleet, args).await?;
        }
        if !walls.is_empty() {
            println!(
                "  end to end: median {:.1} s (runs: {})",
                tests::wrk::median(&mut walls.clone()),
                list(&walls)
            );
        }
    }

    // 4. HTTP.
    if !args.skip_http {
        http(args, &config, &db, &fleet, impact_fleet.as_ref()).await?;
    }
    db.close().await;
    Ok(())
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

fn machine() {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    println!("machine: {cpus} CPUs, {model}; load {}", loadavg());
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Seeding

/// What applying security update `k` (or, from `--core` on, other update `k`) would do to a
/// host of `role` (web, db, cache, worker), as an Ubuntu agent reports it (decisions §19, §21;
/// in the manner of fleet-sim's `impact_of`): the kernel-like updates (`requires_reboot`)
/// reboot and install their new image package, a few more (libc, systemd, dbus alike) reboot;
/// OpenSSL-like libraries restart the host's own service and the SSH server, and the first of
/// them moves to `libssl3t64`, removing `libssl3` (Ubuntu 24.04's 64-bit time transition);
/// rsyslog and cron restart their units; some other updates restart the host's service; the
/// rest do nothing an approver needs to know.
fn impact_of(k: usize, core: usize, role: &str) -> Impact {
    let service = match role {
        "web" => "nginx.service",
        "db" => "postgresql@16-main.service",
        "cache" => "redis-server.service",
        _ => "fleet-worker.service",
    };
    let mut impact = Impact::default();
    if k.is_multiple_of(97) {
        impact.reboot = true;
        impact.installs.push(ImpactInstall {
            name: "linux-image-6.8.0-51-generic".to_owned(),
            version: "6.8.0-51.52".to_owned(),
        });
    } else if k >= core {
        if k % 50 == 3 {
            impact.restarts = vec![service.to_owned()];
        }
    } else if k % 60 == 30 {
        impact.reboot = true;
    } else if k % 10 == 1 {
        impact.restarts = vec![service.to_owned(), "ssh.service".to_owned()];
        if k == 1 {
            impact.installs.push(ImpactInstall {
                name: "libssl3t64".to_owned(),
                version: to_version(k, 0),
            });
            impact.removes.push("libssl3".to_owned());
        }
    } else if k % 25 == 4 {
        impact.restarts = vec!["rsyslog.service".to_owned()];
    } else if k % 25 == 9 {
        impact.restarts = vec!["cron.service".to_owned()];
    }
    impact.restarts.sort();
    impact
}

const ROLES: [&str; 4] = ["web", "db", "cache", "worker"];

/// Seeds organization `slug`; with `impact`, its hosts' updates carry what their agents
/// report (every `--unknown-impact-every`-th host's agent says nothing), as check-ins store it.
async fn seed(
    args: &Args,
    db: &Database,
    slug: &'static str,
    impact: bool,
) -> anyhow::Result<Fleet> {
    ensure!(args.core <= args.pool, "--core must be at most --pool");
    ensure!(
        args.extra_min <= args.extra_max,
        "--extra-min > --extra-max"
    );
    let now = SystemClock.now();
    let account = accounts::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        email: Set(format!("owner@{slug}.test")),
        name: Set(Some("Owner".into())),
        time_zone: Set("UTC".into()),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&db.orm)
    .await?;
    let org = organizations::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        slug: Set(slug.into()),
        name: Set(slug.into()),
        plan: Set("free".into()),
        sso_enforced: Set(false),
        created_at: Set(now),
        proposal_seq: Set(0),
        max_concurrent_reboots: Set(None),
    }
    .insert(&db.orm)
    .await?;
    memberships::ActiveModel {
        org_id: Set(org.id),
        account_id: Set(account.id),
        role: Set(Role::Owner.as_str().into()),
        created_at: Set(now),
    }
    .insert(&db.orm)
    .await?;
    let token = platform::secrets::mint(api::http::access::API_TOKEN_PREFIX);
    api_tokens::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(org.id),
        name: Set("bench".into()),
        role: Set(Role::Owner.as_str().into()),
        token_hash: Set(token.hash.clone()),
        created_by: Set(account.id),
        created_at: Set(now),
        expires_at: Set(None),
        last_used_at: Set(None),
        revoked_at: Set(None),
    }
    .insert(&db.orm)
    .await?;

    // Known-exploited CVEs: every 50th security update has one (the list is not per
    // organization: the second one seeded finds it there).
    let seeded = known_exploited::Entity::find().count(&db.orm).await? > 0;
    let kev: Vec<known_exploited::ActiveModel> = (0..if seeded { 0 } else { args.core })
        .step_by(50)
        .map(|k| known_exploited::ActiveModel {
            cve: Set(format!("CVE-2026-{}", 20_000 + k)),
            added_at: Set(now),
        })
        .collect();
    if !kev.is_empty() {
        known_exploited::Entity::insert_many(kev)
            .exec_without_returning(&db.orm)
            .await?;
    }

    // Hosts.
    let host_ids: Vec<Uuid> = (0..args.hosts).map(|_| platform::ids::new_uuid()).collect();
    for (c, chunk) in host_ids.chunks(500).enumerate() {
        let rows: Vec<hosts::ActiveModel> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let n = c * 500 + i;
                let env = if n % 2 == 0 { "prod" } else { "staging" };
                let role = ROLES[n % 4];
                hosts::ActiveModel {
                    id: Set(*id),
                    org_id: Set(org.id),
                    machine_id: Set(format!("{:032x}", n)),
                    hostname: Set(format!("{role}-{n:05}.{env}.acme.internal")),
                    display_name: Set(None),
                    notes: Set(None),
                    labels: Set(JsonText::from_stored(
                        serde_json::json!({"env": env, "role": role}).to_string(),
                    )),
                    distro: Set(Some("ubuntu".into())),
                    distro_version: Set(Some("24.04".into())),
                    distro_codename: Set(Some("noble".into())),
                    os_family: Set(Some("debian".into())),
                    arch: Set(Some("x86_64".into())),
                    kernel_version: Set(Some("6.8.0-48-generic".into())),
                    agent_version: Set(Some("1.0.0".into())),
                    reboot_required: Set(Some(false)),
                    services_need_restart: Set(JsonText::from_stored("[]")),
                    held_packages: Set(JsonText::from_stored("[]")),
                    updates_total: Set(None),
                    updates_security: Set(None),
                    updates_requiring_reboot: Set(None),
                    advisory_coverage: Set("covered".into()),
                    status: Set("online".into()),
                    enrollment_token_id: Set(None),
                    inventory_digest: Set(None),
                    check_in_interval_s: Set(300),
                    enrolled_at: Set(now),
                    last_seen_at: Set(Some(now)),
                    last_inventory_at: Set(Some(now)),
                    cert_expires_at: Set(None),
                    decommissioned_at: Set(None),
                    updated_at: Set(now),
                    release_upgrade: Set(None),
                    updates_seq: Set(0),
                    reboot_slot_until: Set(None),
                    reboot_slot_job: Set(None),
                    ..Default::default()
                }
            })
            .collect();
        hosts::Entity::insert_many(rows)
            .exec_without_returning(&db.orm)
            .await?;
    }

    // Their available updates, 2,000 rows per statement, two statements at a time.
    let mut rng = StdRng::seed_from_u64(42);
    let advisory_texts: Vec<JsonText<Vec<Advisory>>> = (0..args.core)
        .map(|k| JsonText::from_stored(advisories(k)))
        .collect();
    let mut rows: Vec<host_updates::ActiveModel> = Vec::new();
    let mut total_rows = 0usize;
    // Stored as a check-in stores an update's impact, one text per role and update.
    let impacts: Vec<Vec<JsonText<Impact>>> = ROLES
        .iter()
        .map(|role| {
            (0..args.pool)
                .map(|k| JsonText::new(&impact_of(k, args.core, role)))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    let mut with_impact = 0usize;
    let mut pending = futures::stream::FuturesUnordered::new();
    let insert = |rows: Vec<host_updates::ActiveModel>| {
        let orm = db.orm.clone();
        async move {
            host_updates::Entity::insert_many(rows)
                .exec_without_returning(&orm)
                .await
        }
    };
    for (n, host) in host_ids.iter().enumerate() {
        let says = impact
            && (args.unknown_impact_every == 0
                || n % args.unknown_impact_every != args.unknown_impact_every - 1);
        if says {
            with_impact += 1;
        }
        let mut picked: Vec<usize> = (0..args.core)
            .filter(|_| rng.random_bool(args.core_share))
            .collect();
        if picked.is_empty() {
            picked.push(0);
        }
        let extra = rng.random_range(args.extra_min..=args.extra_max);
        let others = args.pool - args.core;
        if others > 0 {
            let mut chosen = std::collections::BTreeSet::new();
            while chosen.len() < extra.min(others) {
                chosen.insert(args.core + rng.random_range(0..others));
            }
            picked.extend(chosen);
        }
        for k in picked {
            let security = k < args.core;
            rows.push(host_updates::ActiveModel {
                host_id: Set(*host),
                name: Set(package(k)),
                arch: Set("amd64".into()),
                from_version: Set(from_version(k)),
                to_version: Set(to_version(k, 0)),
                ecosystem: Set("deb".into()),
                source_name: Set(Some(format!("src-{:04}", k / 3))),
                security: Set(security),
                requires_reboot: Set(k % 97 == 0),
                advisories: Set(if security {
                    advisory_texts[k].clone()
                } else {
                    JsonText::from_stored("[]")
                }),
                impact: Set(says.then(|| impacts[n % 4][k].clone())),
            });
        }
        if rows.len() >= 2_000 {
            total_rows += rows.len();
            pending.push(insert(std::mem::take(&mut rows)));
            if pending.len() >= 2 {
                use futures::StreamExt;
                if let Some(done) = pending.next().await {
                    done?;
                }
            }
        }
    }
    if !rows.is_empty() {
        total_rows += rows.len();
        pending.push(insert(std::mem::take(&mut rows)));
    }
    {
        use futures::StreamExt;
        while let Some(done) = pending.next().await {
            done?;
        }
    }
    println!(
        "{slug}: seeded {} hosts ({with_impact} reporting impacts), {total_rows} host_updates rows \
         ({:.0} per host), pool {} ({} security)",
        host_ids.len(),
        total_rows as f64 / host_ids.len().max(1) as f64,
        args.pool,
        args.core
    );

    // Policies.
    let specs: [(&'static str, Option<&str>, &str); 3] = [
        ("Security, whole fleet", None, "security"),
        ("All updates, prod", Some("env=prod"), "all"),
        ("All updates, staging", Some("env=staging"), "all"),
    ];
    let mut policy_ids = Vec::new();
    for (name, selector, updates) in specs {
        let id = platform::ids::new_uuid();
        policies::ActiveModel {
            id: Set(id),
            org_id: Set(org.id),
            name: Set(name.into()),
            version: Set(1),
            scope_groups: Set(JsonText::from_stored("[]")),
            selector: Set(selector.map(str::to_owned)),
            required_approvals: Set(1),
            apply: Set("asap".into()),
            window: Set(None),
            reboot: Set("never".into()),
            auto_merge: Set(false),
            updates: Set(updates.into()),
            min_severity: Set(None),
            rollout: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&db.orm)
        .await?;
        policy_ids.push((id, name));
    }

    // Closed proposals from the past, numbered before anything the policies open.
    let past = now - chrono::Duration::days(400);
    let history: Vec<proposals::ActiveModel> = (0..args.history)
        .map(|n| {
            let at = past + chrono::Duration::hours(n as i64 * 6);
            let policy = policy_ids[n % policy_ids.len()];
            proposals::ActiveModel {
                id: Set(platform::ids::new_uuid()),
                org_id: Set(org.id),
                number: Set(n as i64 + 1),
                policy_id: Set(Some(policy.0)),
                policy_name: Set(Some(policy.1.into())),
                policy_version: Set(Some(1)),
                release_key: Set(None),
                kind: Set("security_update".into()),
                status: Set(["applied", "superseded", "closed", "rejected"][n % 4].into()),
                title: Set(format!(
                    "Security updates: {}, {} and 12 more packages",
                    package(n % 300),
                    package((n + 1) % 300)
                )),
                required: Set(1),
                approvals: Set(1),
                apply: Set("asap".into()),
                window: Set(None),
                reboot: Set("never".into()),
                auto_merge: Set(false),
                known_exploited: Set(n % 10 == 0),
                max_severity: Set(Some(SEVERITIES[n % 4].into())),
                hosts: Set(((n * 37) % 10_000) as i64 + 1),
                packages: Set(14),
                release_upgrade: Set(None),
                created_at: Set(at),
                updated_at: Set(at),
                closed_at: Set(Some(at + chrono::Duration::hours(2))),
                scheduled_for: Set(None),
                snoozed_until: Set(None),
                superseded_by: Set(None),
                rollout: Set(None),
            }
        })
        .collect();
    for chunk in history.chunks(500) {
        proposals::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(&db.orm)
            .await?;
    }
    organizations::Entity::update_many()
        .col_expr(
            organizations::Column::ProposalSeq,
            sea_orm::sea_query::Expr::value(args.history as i64),
        )
        .filter(organizations::Column::Id.eq(org.id))
        .exec(&db.orm)
        .await?;

    Ok(Fleet {
        slug,
        org_id: org.id,
        host_ids,
        policies: policy_ids,
        token: token.value,
        generation: vec![0; args.pool],
        feed_changes: 0,
    })
}

async fn print_sizes(db: &Database) -> anyhow::Result<()> {
    if let Pool::Postgres(pool) = &db.pool {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT relname::text, pg_total_relation_size(oid) FROM pg_class \
             WHERE relname IN ('host_updates','hosts','proposal_hosts','proposal_changes') \
             ORDER BY 1",
        )
        .fetch_all(pool)
        .await?;
        for (name, bytes) in rows {
            println!("  {name}: {:.0} MB", bytes as f64 / 1e6);
        }
    }
    Ok(())
}

/// A feed change: every tenth package of the pool (a different tenth each time) gets a new
/// target version on every host that has it.
async fn feed_change(db: &Database, fleet: &mut Fleet, args: &Args) -> anyhow::Result<u64> {
    let slice = fleet.feed_changes % 10;
    fleet.feed_changes += 1;
    let txn = db.orm.begin().await?;
    let mut changed = 0;
    for k in (0..args.pool).filter(|k| k % 10 == slice) {
        fleet.generation[k] += 1;
        changed += host_updates::Entity::update_many()
            .col_expr(
                host_updates::Column::ToVersion,
                sea_orm::sea_query::Expr::value(to_version(k, fleet.generation[k])),
            )
            .filter(host_updates::Column::Name.eq(package(k)))
            .filter(host_updates::Column::HostId.in_subquery(org_hosts(fleet.org_id)))
            .exec(&txn)
            .await?
            .rows_affected;
    }
    // As a check-in that writes a host's updates does: its count moves with them.
    let names: Vec<String> = (0..args.pool)
        .filter(|k| k % 10 == slice)
        .map(package)
        .collect();
    entities::scope::OrgScope::of(fleet.org_id)
        .update_rows::<hosts::Entity>()
        .col_expr(
            hosts::Column::UpdatesSeq,
            sea_orm::ExprTrait::add(sea_orm::sea_query::Expr::col(hosts::Column::UpdatesSeq), 1),
        )
        .filter(
            hosts::Column::Id.in_subquery(
                sea_orm::sea_query::Query::select()
                    .distinct()
                    .column(host_updates::Column::HostId)
                    .from(host_updates::Entity)
                    .and_where(host_updates::Column::Name.is_in(names))
                    .to_owned(),
            ),
        )
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(changed)
}

/// `SELECT id FROM hosts WHERE org_id = …`.
fn org_hosts(org_id: Uuid) -> sea_orm::sea_query::SelectStatement {
    entities::scope::OrgScope::of(org_id).column_of::<hosts::Entity>(hosts::Column::Id)
}

/// Every policy has one open proposal that carries the current versions; the security one has
/// every host and exactly `--core` changes.
async fn verify(db: &Database, fleet: &Fleet, args: &Args) -> anyhow::Result<()> {
    let probes: Vec<usize> = (0..args.pool)
        .filter(|k| k % 10 == (fleet.feed_changes + 9) % 10)
        .collect();
    for (i, (policy_id, name)) in fleet.policies.iter().enumerate() {
        let open: Vec<proposals::Model> = proposals::Entity::find()
            .filter(proposals::Column::PolicyId.eq(*policy_id))
            .filter(proposals::Column::Status.eq("open"))
            .all(&db.orm)
            .await?;
        ensure!(open.len() == 1, "{name}: {} open proposals", open.len());
        let p = &open[0];
        let changes = proposal_changes::Entity::find()
            .filter(proposal_changes::Column::ProposalId.eq(p.id))
            .count(&db.orm)
            .await?;
        if i == 0 {
            ensure!(
                p.hosts == fleet.host_ids.len() as i64 && changes == args.core as u64,
                "{name}: {} hosts, {changes} changes",
                p.hosts
            );
        }
        if fleet.feed_changes > 0 {
            let k = if i == 0 {
                probes[0]
            } else {
                probes[probes.len() - 1]
            };
            let current = proposal_changes::Entity::find()
                .filter(proposal_changes::Column::ProposalId.eq(p.id))
                .filter(proposal_changes::Column::Package.eq(package(k)))
                .filter(proposal_changes::Column::ToVersion.eq(to_version(k, fleet.generation[k])))
                .count(&db.orm)
                .await?;
            ensure!(
                current == 1,
                "{name}: {} not at its new version",
                package(k)
            );
        }
    }
    Ok(())
}

/// Whether every policy's open proposal carries the latest versions.
async fn reflects(db: &Database, fleet: &Fleet, args: &Args) -> anyhow::Result<bool> {
    if !policy_dirty_empty(db).await? {
        return Ok(false);
    }
    Ok(verify(db, fleet, args).await.is_ok())
}

async fn policy_dirty_empty(db: &Database) -> anyhow::Result<bool> {
    Ok(entities::policy_dirty::Entity::find()
        .count(&db.orm)
        .await?
        == 0)
}

// ---------------------------------------------------------------------------------------------
// Direct evaluation, with the SQL broken down

#[derive(Clone, Debug, Default)]
struct Timing {
    total: f64,
    /// Reading `host_updates`.
    host_updates: f64,
    /// INSERT, UPDATE, DELETE.
    writes: f64,
    /// Every other statement (scope, proposals, BEGIN/COMMIT…).
    other_sql: f64,
    statements: Vec<(String, f64, u64, u64)>,
}

impl Timing {
    fn rust(&self) -> f64 {
        (self.total - self.host_updates - self.writes - self.other_sql).max(0.0)
    }

    fn breakdown_line(&self) -> String {
        format!(
            "(read host_updates {:.2} s, writes {:.2} s, other SQL {:.2} s, outside SQL {:.2} s)",
            self.host_updates,
            self.writes,
            self.other_sql,
            self.rust()
        )
    }

    fn top(&self, n: usize) -> Vec<(String, f64, u64, u64)> {
        let mut list = self.statements.clone();
        list.sort_by(|a, b| b.1.total_cmp(&a.1));
        list.truncate(n);
        list
    }
}

async fn timed_evaluation(deps: &worker::Deps, policy_id: Uuid) -> anyhow::Result<Timing> {
    profile::start();
    let start = Instant::now();
    let result =
        domain::policy::evaluate_policy(&deps.db, &deps.reports, policy_id, deps.clock.now()).await;
    let total = start.elapsed().as_secs_f64();
    let stats = profile::stop();
    result?;
    let mut timing = Timing {
        total,
        ..Timing::default()
    };
    for (what, s) in stats {
        if what.starts_with("SELECT host_updates") {
            timing.host_updates += s.secs;
        } else if what.starts_with("INSERT")
            || what.starts_with("UPDATE")
            || what.starts_with("DELETE")
        {
            timing.writes += s.secs;
        } else {
            timing.other_sql += s.secs;
        }
        timing
            .statements
            .push((what, s.secs, s.count, s.rows_returned.max(s.rows_affected)));
    }
    Ok(timing)
}

/// Captures sqlx's per-statement log (`sqlx::query` at debug: summary, statement, elapsed,
/// rows) while switched on, and sums it by statement kind and table.
mod profile {
    use super::*;

    static ON: AtomicBool = AtomicBool::new(false);
    static STATS: Mutex<Option<HashMap<String, Stat>>> = Mutex::new(None);

    #[derive(Clone, Copy, Debug, Default)]
    pub struct Stat {
        pub secs: f64,
        pub count: u64,
        pub rows_returned: u64,
        pub rows_affected: u64,
    }

    pub fn install() {
        // Asked on every event (not cached per call site), so it can be switched on and off.
        let filter = tracing_subscriber::filter::dynamic_filter_fn(|meta, _| {
            ON.load(Ordering::Relaxed) && meta.target() == "sqlx::query"
        })
        .with_max_level_hint(tracing_subscriber::filter::LevelFilter::DEBUG);
        use tracing_subscriber::Layer as _;
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .with_writer(|| Sink(Vec::new()))
            .with_filter(filter);
        // `RUST_LOG` (e.g. `warn`) also writes the service's own log to stderr, so a worker
        // that stops or a job that fails during a run is seen.
        let stderr = std::env::var("RUST_LOG").ok().map(|directives| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::new(directives))
        });
        let _ = tracing_subscriber::registry()
            .with(layer)
            .with(stderr)
            .try_init();
    }

    pub fn start() {
        *STATS.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashMap::new());
        ON.store(true, Ordering::SeqCst);
    }

    pub fn stop() -> Vec<(String, Stat)> {
        ON.store(false, Ordering::SeqCst);
        let map = STATS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        map.into_iter().collect()
    }

    struct Sink(Vec<u8>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Drop for Sink {
        fn drop(&mut self) {
            for line in self.0.split(|b| *b == b'\n') {
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
                    continue;
                };
                let fields = &v["fields"];
                let statement = fields["db.statement"].as_str().unwrap_or_default();
                let summary = fields["summary"].as_str().unwrap_or_default();
                let text = if statement.trim().is_empty() {
                    summary
                } else {
                    statement
                };
                let key = classify(text);
                let mut guard = STATS.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(map) = guard.as_mut() {
                    let s = map.entry(key).or_default();
                    s.secs += fields["elapsed_secs"].as_f64().unwrap_or(0.0);
                    s.count += 1;
                    s.rows_returned += fields["rows_returned"].as_u64().unwrap_or(0);
                    s.rows_affected += fields["rows_affected"].as_u64().unwrap_or(0);
                }
            }
        }
    }

    /// "VERB table", e.g. `SELECT host_updates`, `INSERT proposal_hosts`.
    fn classify(sql: &str) -> String {
        let sql = sql.trim();
        let verb = sql
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let after = |word: &str| -> Option<String> {
            let upper = sql.to_ascii_uppercase();
            let at = upper.find(word)? + word.len();
            let rest = sql[at..].trim_start();
            let name: String = rest
                .trim_start_matches('"')
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            Some(name)
        };
        let table = match verb.as_str() {
            "SELECT" => after(" FROM "),
            "INSERT" => after("INSERT INTO "),
            "UPDATE" => after("UPDATE "),
            "DELETE" => after("DELETE FROM "),
            _ => None,
        };
        let mut key = match table {
            Some(t) => format!("{verb} {t}"),
            None => verb,
        };
        if sql.to_ascii_uppercase().contains(" FOR UPDATE") {
            key.push_str(" (FOR UPDATE)");
        }
        key
    }
}

// ---------------------------------------------------------------------------------------------
// End to end, through the queue

async fn count_jobs(db: &Database, queue: &str, not_done: bool) -> anyhow::Result<i64> {
    let count = match &db.pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM apalis.jobs WHERE job_type = $1 \
                 AND (NOT $2 OR status NOT IN ('Done', 'Failed', 'Killed'))",
            )
            .bind(queue)
            .bind(not_done)
            .fetch_one(pool)
            .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM Jobs WHERE job_type = ?1 \
                 AND (NOT ?2 OR status NOT IN ('Done', 'Failed', 'Killed'))",
            )
            .bind(queue)
            .bind(not_done)
            .fetch_one(pool)
            .await?
        }
    };
    Ok(count)
}

async fn count_status(db: &Database, queue: &str, status: &str) -> anyhow::Result<i64> {
    let count = match &db.pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM apalis.jobs WHERE job_type = $1 AND status = $2",
            )
            .bind(queue)
            .bind(status)
            .fetch_one(pool)
            .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM Jobs WHERE job_type = ?1 AND status = ?2",
            )
            .bind(queue)
            .bind(status)
            .fetch_one(pool)
            .await?
        }
    };
    Ok(count)
}

const POLICY_QUEUE: &str = <domain::policy::jobs::EvaluatePolicy as Job>::QUEUE;

async fn end_to_end(
    args: &Args,
    config: &Arc<Config>,
    db: &Database,
    fleet: &mut Fleet,
    round: usize,
) -> anyhow::Result<f64> {
    let changed = feed_change(db, fleet, args).await?;
    println!(
        "\n== end to end {round}: feed change ({changed} rows), EvaluateHost for {} hosts, \
         worker concurrency {}",
        fleet.host_ids.len(),
        args.concurrency
    );
    let policy_runs_before = count_status(db, POLICY_QUEUE, "Done").await?;
    let failed_before = count_status(db, EvaluateHost::QUEUE, "Failed").await?
        + count_status(db, POLICY_QUEUE, "Failed").await?;
    // Connected as the `worker` program connects (on Postgres, each statement planned anew).
    let worker_db = Database::connect_queue_worker(
        config.database_url.expose(),
        worker::connections(args.concurrency),
    )
    .await?;
    let deps = worker::Deps::new(config.clone(), worker_db.clone(), Arc::new(SystemClock))?;
    let mut options = worker::WorkerOptions::new(args.concurrency);
    options.shutdown_timeout = Duration::from_secs(60);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(worker::run(deps, options, shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await; // Let it start listening.

    let watch = Watch::start();
    // The writer shares the worker's database handle, as a check-in in the embedded api does.
    let probe = WriteProbe::start(&worker_db, fleet.host_ids[0]);
    let start = Instant::now();
    for chunk in fleet.host_ids.chunks(1_000) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|id| {
                TaskBuilder::new(EvaluateHost { host_id: *id })
                    .max_attempts(EvaluateHost::RETRIES + 1)
                    .build()
            })
            .collect();
        let tasks = futures::stream::iter(tasks);
        // Through the worker's handle: in the embedded default the api's pushes and the
        // worker's writes share one writing connection (on SQLite), and so do these.
        match worker_db.queue_pool() {
            Pool::Postgres(pool) => PostgresStorage::<EvaluateHost>::new(pool)
                .with_config(postgres_config(EvaluateHost::QUEUE))
                .push_all(tasks)
                .await
                .map_err(|e| anyhow::anyhow!("push_all: {e}"))?,
            Pool::Sqlite(pool) => SqliteStorage::<EvaluateHost>::new(pool)
                .with_config(sqlite_config(EvaluateHost::QUEUE))
                .push_all(tasks)
                .await
                .map_err(|e| anyhow::anyhow!("push_all: {e}"))?,
        }
    }
    let enqueued = start.elapsed().as_secs_f64();
    let mut hosts_done: Option<f64> = None;
    let mut last_print = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(1_800);
    let wall = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let hosts_left = count_jobs(db, EvaluateHost::QUEUE, true).await?;
        let policies_left = count_jobs(db, POLICY_QUEUE, true).await?;
        if hosts_left == 0 && hosts_done.is_none() {
            hosts_done = Some(start.elapsed().as_secs_f64());
        }
        if hosts_left == 0 && policies_left == 0 && reflects(db, fleet, args).await? {
            break start.elapsed().as_secs_f64();
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            last_print = Instant::now();
            println!(
                "    {:>5.0} s: host.evaluate left {hosts_left}, policy.evaluate left {policies_left}, \
                 policy runs so far {}",
                start.elapsed().as_secs_f64(),
                count_status(db, POLICY_QUEUE, "Done").await? - policy_runs_before
            );
        }
        if Instant::now() > deadline {
            bail!("not drained after 30 minutes");
        }
    };
    let report = watch.report();
    let probe = probe.report().await;
    let policy_runs = count_status(db, POLICY_QUEUE, "Done").await? - policy_runs_before;
    let failed = count_status(db, EvaluateHost::QUEUE, "Failed").await?
        + count_status(db, POLICY_QUEUE, "Failed").await?
        - failed_before;
    shutdown.cancel();
    let _ = worker.await;
    worker_db.close().await;
    println!(
        "  enqueue {enqueued:.1} s; all host.evaluate done at {:.1} s; proposals up to date at \
         {wall:.1} s; {policy_runs} policy.evaluate runs; {failed} failed jobs {report}\n  {probe}",
        hosts_done.unwrap_or(wall)
    );
    Ok(wall)
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// A URL wrk measures, with the API token of its organization.
struct Target {
    name: &'static str,
    url: String,
    token: String,
}

async fn open_security(db: &Database, fleet: &Fleet) -> anyhow::Result<proposals::Model> {
    proposals::Entity::find()
        .filter(proposals::Column::PolicyId.eq(fleet.policies[0].0))
        .filter(proposals::Column::Status.eq("open"))
        .one(&db.orm)
        .await?
        .with_context(|| format!("{}: no open security proposal", fleet.slug))
}

async fn get_json(
    client: &reqwest::Client,
    url: &str,
    token: &str,
) -> anyhow::Result<serde_json::Value> {
    let response = client.get(url).bearer_auth(token).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    ensure!(
        status.is_success(),
        "{url}: {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(serde_json::from_slice(&body)?)
}

async fn http(
    args: &Args,
    config: &Arc<Config>,
    db: &Database,
    fleet: &Fleet,
    impact_fleet: Option<&Fleet>,
) -> anyhow::Result<()> {
    let api_db = Database::connect(config, 16 + worker::QUEUES).await?;
    let agent_ca = api::agent::ca::load_or_create(&api_db, config, &SystemClock).await?;
    let state = api::AppState {
        config: config.clone(),
        queue: platform::jobs::Queue::new(&api_db),
        db: api_db.clone(),
        clock: Arc::new(SystemClock),
        agent_ca,
        outbound: platform::outbound::Outbound::new(&config.outbound_settings())?,
        sso: Default::default(),
        identity: Default::default(),
        buckets: Default::default(),
        agent_keys: Default::default(),
    };
    let shutdown = CancellationToken::new();
    let bound = api::http::server::bind(config.bind).await?;
    let base = format!("http://{}", bound.local_addr);
    let server = tokio::spawn(api::http::server::serve(state, bound, shutdown.clone()));

    let security = open_security(db, fleet).await?;
    let changes = proposal_changes::Entity::find()
        .filter(proposal_changes::Column::ProposalId.eq(security.id))
        .count(&db.orm)
        .await?;
    let total_proposals = entities::scope::OrgScope::of(fleet.org_id)
        .rows::<proposals::Entity>()
        .count(&db.orm)
        .await?;
    let prp = platform::ids::ProposalId::from(security.id).to_string();
    let host = platform::ids::HostId::from(fleet.host_ids[fleet.host_ids.len() / 2]).to_string();
    let org = fleet.slug;
    let plain = |name: &'static str, url: String| Target {
        name,
        url,
        token: fleet.token.clone(),
    };
    let mut targets: Vec<Target> = vec![plain(
        "detail",
        format!("{base}/v1/orgs/{org}/proposals/{prp}"),
    )];
    let client = reqwest::Client::new();
    if let Some(other) = impact_fleet {
        let with = open_security(db, other).await?;
        let prp = platform::ids::ProposalId::from(with.id).to_string();
        let org = other.slug;
        let impact_url = format!("{base}/v1/orgs/{org}/proposals/{prp}/impact");
        // The cursor after the first half of the hosts, page by page as a client walks them.
        let mut deep = url::Url::parse(&impact_url)?;
        let mut walked = 0usize;
        let mut cursor: Option<String> = None;
        while walked < other.host_ids.len() / 2 {
            let mut page = url::Url::parse(&impact_url)?;
            page.query_pairs_mut().append_pair("limit", "500");
            if let Some(c) = &cursor {
                page.query_pairs_mut().append_pair("cursor", c);
            }
            let body: serde_json::Value = get_json(&client, page.as_str(), &other.token).await?;
            walked += body["items"].as_array().map_or(0, Vec::len);
            cursor = body["next_cursor"].as_str().map(str::to_owned);
            ensure!(
                cursor.is_some(),
                "the impact pages end after {walked} hosts"
            );
        }
        if let Some(c) = &cursor {
            deep.query_pairs_mut().append_pair("cursor", c);
        }
        let with_token = |name: &'static str, url: String| Target {
            name,
            url,
            token: other.token.clone(),
        };
        targets.push(with_token(
            "detail, impact",
            format!("{base}/v1/orgs/{org}/proposals/{prp}"),
        ));
        targets.push(with_token("impact page 1", impact_url));
        targets.push(with_token("impact page 101", deep.to_string()));
    }
    if !args.skip_lists {
        targets.push(plain("list", format!("{base}/v1/orgs/{org}/proposals")));
        targets.push(plain(
            "list ?status=open",
            format!("{base}/v1/orgs/{org}/proposals?status=open"),
        ));
        targets.push(plain(
            "list ?host=",
            format!("{base}/v1/orgs/{org}/proposals?host={host}"),
        ));
    }
    // One request each first: the answer must be 200, and its size is worth knowing; a
    // detail's impact summary must be what its organization was seeded with.
    for t in &targets {
        let response = client
            .get(&t.url)
            .header("Authorization", format!("Bearer {}", t.token))
            .send()
            .await?;
        let status = response.status();
        let body = response.bytes().await?;
        ensure!(
            status.is_success(),
            "{}: {status}: {}",
            t.name,
            String::from_utf8_lossy(&body)
        );
        let value = serde_json::from_slice::<serde_json::Value>(&body).unwrap_or_default();
        let items = value["items"].as_array().map(Vec::len);
        println!(
            "  {:<18} {} bytes{}",
            t.name,
            body.len(),
            items.map(|n| format!(", {n} items")).unwrap_or_default()
        );
        if t.name.starts_with("detail") {
            let impact = &value["impact"];
            let count = |key: &str| impact[key].as_i64().unwrap_or(-1);
            let names = |key: &str| {
                impact[key]
                    .as_array()
                    .map(|list| {
                        list.iter()
                            .map(|e| {
                                format!(
                                    "{} {}",
                                    e["unit"].as_str().or(e["name"].as_str()).unwrap_or("?"),
                                    e["hosts"]
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default()
            };
            println!(
                "      impact: hosts {}, rebooting {}, unknown {}; restarts [{}]; installs [{}]; \
                 removes [{}]; warnings {}",
                count("hosts"),
                count("hosts_rebooting"),
                count("hosts_unknown"),
                names("restarts"),
                names("installs"),
                names("removes"),
                value["warnings"]
            );
            let unknown = count("hosts_unknown");
            if t.name == "detail" {
                ensure!(
                    unknown == count("hosts"),
                    "detail: hosts whose agents said nothing must all be unknown"
                );
            } else {
                ensure!(
                    unknown < count("hosts") && count("hosts_rebooting") > 0,
                    "{}: the seeded impacts are not in the summary",
                    t.name
                );
            }
        }
    }
    println!(
        "\n== HTTP: detail of {prp} ({} hosts, {changes} changes); list over {total_proposals} \
         proposals; wrk -t{} -c{} -d{}s, {} rounds{}",
        security.hosts,
        args.wrk_threads,
        args.connections,
        args.http_seconds,
        args.http_rounds,
        if impact_fleet.is_some() {
            "; the two details alternate which goes first"
        } else {
            ""
        }
    );
    let mut results: Vec<Vec<tests::wrk::WrkResult>> = vec![Vec::new(); targets.len()];
    for round in 0..args.http_rounds {
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if impact_fleet.is_some() && round % 2 == 1 {
            order.swap(0, 1);
        }
        for i in order {
            let t = &targets[i];
            let watch = Watch::start();
            let r = tests::wrk::run(
                &t.url,
                args.connections,
                args.wrk_threads,
                args.http_seconds,
                &[format!("Authorization: Bearer {}", t.token)],
            )
            .await?;
            ensure!(
                r.non_2xx == 0,
                "{}: {} answers were not 2xx",
                t.name,
                r.non_2xx
            );
            println!(
                "  round {round} {:<18} {:>8.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  {}",
                t.name,
                r.requests_per_second,
                r.p50_ms,
                r.p99_ms,
                watch.report()
            );
            results[i].push(r);
        }
    }
    for (i, t) in targets.iter().enumerate() {
        let mut rps: Vec<f64> = results[i].iter().map(|r| r.requests_per_second).collect();
        let mut p50: Vec<f64> = results[i].iter().map(|r| r.p50_ms).collect();
        let p99: Vec<f64> = results[i].iter().map(|r| r.p99_ms).collect();
        println!(
            "  median {:<18} {:>8.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  (p99 runs: {})",
            t.name,
            tests::wrk::median(&mut rps),
            tests::wrk::median(&mut p50),
            tests::wrk::median(&mut p99.clone()),
            list(&p99)
        );
    }
    if impact_fleet.is_some() && args.http_rounds > 0 {
        // Round by round: the detail with impacts stored over the one without.
        let ratio = |f: fn(&tests::wrk::WrkResult) -> f64| -> Vec<f64> {
            results[1]
                .iter()
                .zip(&results[0])
                .map(|(with, without)| f(with) / f(without).max(1e-9))
                .collect()
        };
        let p99 = ratio(|r| r.p99_ms);
        let p50 = ratio(|r| r.p50_ms);
        let rps = ratio(|r| r.requests_per_second);
        println!(
            "  detail with impacts / without, per round: p99 {:.2} (runs: {}), p50 {:.2} (runs: {}), \
             req/s {:.2} (runs: {}); ratio of the medians' p99 {:.2}",
            tests::wrk::median(&mut p99.clone()),
            list(&p99),
            tests::wrk::median(&mut p50.clone()),
            list(&p50),
            tests::wrk::median(&mut rps.clone()),
            list(&rps),
            tests::wrk::median(&mut results[1].iter().map(|r| r.p99_ms).collect::<Vec<_>>())
                / tests::wrk::median(&mut results[0].iter().map(|r| r.p99_ms).collect::<Vec<_>>())
                    .max(1e-9)
        );
    }
    shutdown.cancel();
    let _ = server.await;
    api_db.close().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Load outside the benchmark

/// A writer beside the evaluations, as a check-in is one: every 20 ms a write transaction that
/// touches one host row and commits. On SQLite it waits for whatever holds the write lock, so
/// its slowest wait is how long a check-in could wait behind an evaluation.
struct WriteProbe {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<f64>>,
}

impl WriteProbe {
    fn start(db: &Database, host_id: Uuid) -> WriteProbe {
        let stop = CancellationToken::new();
        let db = db.clone();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut waits = Vec::new();
            while !token.is_cancelled() {
                let start = Instant::now();
                let wrote = async {
                    let txn = db.begin_write().await?;
                    hosts::Entity::update_many()
                        .col_expr(
                            hosts::Column::UpdatedAt,
                            sea_orm::sea_query::Expr::col(hosts::Column::UpdatedAt),
                        )
                        .filter(hosts::Column::Id.eq(host_id))
                        .exec(&txn)
                        .await?;
                    txn.commit().await
                }
                .await;
                match wrote {
                    Ok(()) => waits.push(start.elapsed().as_secs_f64() * 1e3),
                    Err(err) => println!("    write probe failed: {err}"),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            waits
        });
        WriteProbe { stop, task }
    }

    /// "writes n, p50 …, p99 …, max … ms".
    async fn report(self) -> String {
        self.stop.cancel();
        let mut waits = self.task.await.unwrap_or_default();
        if waits.is_empty() {
            return "no write".to_owned();
        }
        waits.sort_by(f64::total_cmp);
        let at = |q: f64| waits[((waits.len() - 1) as f64 * q).round() as usize];
        format!(
            "a writer beside it ({} writes): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            waits.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        )
    }
}

/// CPU time of every process between `start` and `report`: what this process and Postgres
/// used, and any other process above 10% of a CPU.
struct Watch {
    at: Instant,
    load: String,
    before: HashMap<u32, (String, u64)>,
}

fn processes() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = u32::from_str(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // Fields 14 and 15 (utime, stime) are at 11 and 12 after the state field.
        let ticks = rest
            .get(11)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            + rest
                .get(12)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        out.insert(pid, (comm, ticks));
    }
    out
}

impl Watch {
    fn start() -> Watch {
        Watch {
            at: Instant::now(),
            load: loadavg(),
            before: processes(),
        }
    }

    fn report(&self) -> String {
        let wall = self.at.elapsed().as_secs_f64().max(0.001);
        let after = processes();
        let me = std::process::id();
        let mut ours = 0.0;
        let mut postgres = 0.0;
        let mut others: Vec<(String, f64)> = Vec::new();
        for (pid, (comm, ticks)) in &after {
            let before = self.before.get(pid).map_or(0, |(_, t)| *t);
            let used = ticks.saturating_sub(before) as f64 / 100.0;
            if *pid == me {
                ours += used;
            } else if comm.starts_with("postgres") {
                postgres += used;
            } else if used / wall > 0.10 {
                others.push((format!("{comm}[{pid}]"), used / wall));
            }
        }
        others.sort_by(|a, b| b.1.total_cmp(&a.1));
        let others = if others.is_empty() {
            "none".to_owned()
        } else {
            others
                .iter()
                .map(|(n, f)| format!("{n} {:.0}%", f * 100.0))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "[cpu: bench {:.0}%, postgres {:.0}%; others >10%: {others}; load {} -> {}]",
            ours / wall * 100.0,
            postgres / wall * 100.0,
            self.load,
            loadavg()
        )
    }
}

#[allow(dead_code)]
fn flush() {
    let _ = std::io::stdout().flush();
}
