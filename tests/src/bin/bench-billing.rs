//! `bench-billing`: the Performance section of issue 11.
//!
//! - `usage`: `GET /v1/orgs/acme/billing/usage` for an organization with 10,000 hosts that all
//!   checked in every day of the previous and the current month (host-days for every day,
//!   rolled up to yesterday, or `--rollup-lag 1` to yesterday-but-one, so that the current
//!   month also counts yesterday from the host-days), measured with wrk; prints p50/p99 for
//!   the current month (which counts today's host-days) and the previous month.
//! - `report`: the nightly `billing.report` for 1,000 organizations with live subscriptions
//!   against the loopback test processor (HTTPS, test CA), run by a worker; prints the time
//!   from queueing the daily run to every organization's day being `reported`.
//! - `webhook`: signed payment events posted with duplicates mixed in (each distinct event
//!   twice, the copies interleaved) by concurrent clients; prints events/s and checks that
//!   each distinct event had exactly one effect (one owner email queued per
//!   `invoice.payment_failed`).
//!
//! ```text
//! cargo build --release -p tests --bin bench-billing
//! target/release/bench-billing usage            # add --database-url sqlite://… for SQLite
//! target/release/bench-billing report
//! target/release/bench-billing webhook
//! ```

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

use std::{sync::Arc, time::Instant};

use anyhow::Context;
use chrono::{Datelike, Duration, NaiveDate};
use clap::{Parser, Subcommand};
use domain::roles::Role;
use entities::{accounts, host_days, hosts, memberships, organizations, subscriptions, usage_days};
use platform::{
    clock::{Clock, SystemClock},
    config::{Config, RawConfig},
    db::Database,
    jobs::Queue,
};
use sea_orm::{ActiveModelTrait, EntityTrait, PaginatorTrait, Set};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[derive(Parser)]
struct Args {
    /// Database to bench on; default: a fresh database on TEST_DATABASE_URL's server (or SQLite).
    #[arg(long, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Usage {
        #[arg(long, default_value_t = 10_000)]
        hosts: usize,
        #[arg(long, default_value_t = 8)]
        connections: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds of unmeasured load first (the bulk load's checkpoint and first reads).
        #[arg(long, default_value_t = 20)]
        warmup: u64,
        /// Days before today the rollup has not reached (0: it has run for yesterday).
        #[arg(long, default_value_t = 0)]
        rollup_lag: i64,
    },
    Report {
        #[arg(long, default_value_t = 1_000)]
        organizations: usize,
        /// Hosts that checked in yesterday, per organization.
        #[arg(long, default_value_t = 3)]
        hosts: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    Webhook {
        /// Distinct events; each is posted twice.
        #[arg(long, default_value_t = 5_000)]
        events: usize,
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// Organizations (linked customers) the events are about.
        #[arg(long, default_value_t = 100)]
        organizations: usize,
    },
}

fn main() -> anyhow::Result<()> {
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let (url, _guard) = match &args.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let database = tests::TestDatabase::create().await;
            (database.url().to_owned(), Some(database))
        }
    };
    println!(
        "database: {}",
        if url.starts_with("postgres") {
            "Postgres"
        } else {
            "SQLite"
        }
    );
    match args.command {
        Command::Usage {
            hosts,
            connections,
            seconds,
            rounds,
            warmup,
            rollup_lag,
        } => {
            usage(
                &url,
                hosts,
                connections,
                seconds,
                rounds,
                warmup,
                rollup_lag,
            )
            .await
        }
        Command::Report {
            organizations,
            hosts,
            concurrency,
        } => report(&url, organizations, hosts, concurrency).await,
        Command::Webhook {
            events,
            clients,
            organizations,
        } => webhook(&url, events, clients, organizations).await,
    }
}

fn config(url: &str, payments_api: Option<String>) -> anyhow::Result<Arc<Config>> {
    let raw = RawConfig {
        database_url: Some(url.to_owned()),
        service_bind: Some("127.0.0.1:0".into()),
        embedded_workers: Some("false".into()),
        rate_limit_burst: Some("100000000".into()),
        rate_limit_per_second: Some("100000000".into()),
        payments_webhook_secret: Some(tests::PAYMENTS_WEBHOOK_SECRET.into()),
        payments_api_key: payments_api
            .as_ref()
            .map(|_| tests::PAYMENTS_API_KEY.into()),
        payments_api_url: payments_api,
        outbound_ca_file: Some(tests::receiver::TestCa::get().file.display().to_string()),
        outbound_allow_private: Some("true".into()),
        ..RawConfig::default()
    };
    Ok(Arc::new(raw.validate()?))
}

async fn state(config: &Arc<Config>, db: &Database) -> anyhow::Result<api::AppState> {
    Ok(api::AppState {
        config: config.clone(),
        queue: Queue::new(db),
        db: db.clone(),
        clock: Arc::new(SystemClock),
        agent_ca: api::agent::ca::load_or_create(db, config, &SystemClock).await?,
        outbound: platform::outbound::Outbound::new(&config.outbound_settings())?,
        sso: Default::default(),
        identity: Default::default(),
        buckets: Default::default(),
        agent_keys: Default::default(),
    })
}

/// An organization `slug` with an owner; its id and the owner's account id.
async fn organization(db: &Database, slug: &str) -> anyhow::Result<(Uuid, Uuid)> {
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
    Ok((org.id, account.id))
}

/// A live business subscription of `org_id` by customer `customer`.
async fn subscribe(
    db: &Database,
    org_id: Uuid,
    customer: &str,
    from: NaiveDate,
) -> anyhow::Result<()> {
    subscriptions::ActiveModel {
        org_id: Set(org_id),
        plan: Set(Some("business".into())),
        customer_id: Set(Some(customer.into())),
        subscription_id: Set(Some(format!("sub_{customer}"))),
        status: Set(Some("active".into())),
        current_period_end: Set(None),
        billable_from: Set(Some(from)),
        event_created: Set(Some(0)),
        updated_at: Set(SystemClock.now()),
    }
    .insert(&db.orm)
    .await?;
    Ok(())
}

/// `count` hosts of `org_id`; their ids.
async fn hosts_of(db: &Database, org_id: Uuid, count: usize) -> anyhow::Result<Vec<Uuid>> {
    let now = SystemClock.now();
    let ids: Vec<Uuid> = (0..count).map(|_| platform::ids::new_uuid()).collect();
    for chunk in ids.chunks(200) {
        hosts::Entity::insert_many(chunk.iter().map(|id| hosts::ActiveModel {
            id: Set(*id),
            org_id: Set(org_id),
            machine_id: Set(id.simple().to_string()),
            hostname: Set(format!("host-{}", id.simple())),
            display_name: Set(None),
            notes: Set(None),
            labels: Set(entities::json::JsonText::from_stored("{}")),
            distro: Set(Some("ubuntu".into())),
            distro_version: Set(Some("24.04".into())),
            distro_codename: Set(Some("noble".into())),
            os_family: Set(Some("debian".into())),
            arch: Set(Some("x86_64".into())),
            kernel_version: Set(None),
            virtualization: Set(None),
            agent_version: Set(None),
            agent_mode: Set(None),
            agent_permissions: Set(None),
            agent_install: Set(None),
            cloud: Set(None),
            frozen: Set(None),
            snapshots: Set(None),
            reboot_required: Set(None),
            services_need_restart: Set(entities::json::JsonText::from_stored("[]")),
            held_packages: Set(entities::json::JsonText::from_stored("[]")),
            updates_total: Set(None),
            updates_security: Set(None),
            updates_requiring_reboot: Set(None),
            advisory_coverage: Set("unknown_release".into()),
            status: Set("online".into()),
            enrollment_token_id: Set(None),
            inventory_digest: Set(None),
            check_in_interval_s: Set(300),
            enrolled_at: Set(now),
            last_seen_at: Set(Some(now)),
            last_inventory_at: Set(None),
            cert_expires_at: Set(None),
            decommissioned_at: Set(None),
            updated_at: Set(now),
            release_upgrade: Set(None),
            updates_seq: Set(0),
            reboot_slot_until: Set(None),
            reboot_slot_job: Set(None),
        }))
        .exec_without_returning(&db.orm)
        .await?;
    }
    Ok(ids)
}

async fn check_ins(
    db: &Database,
    org_id: Uuid,
    hosts: &[Uuid],
    day: NaiveDate,
) -> anyhow::Result<()> {
    for chunk in hosts.chunks(1000) {
        host_days::Entity::insert_many(chunk.iter().map(|id| host_days::ActiveModel {
            host_id: Set(*id),
            day: Set(day),
            org_id: Set(org_id),
        }))
        .exec_without_returning(&db.orm)
        .await?;
    }
    Ok(())
}

async fn usage(
    url: &str,
    count: usize,
    connections: usize,
    seconds: u64,
    rounds: usize,
    warmup: u64,
    rollup_lag: i64,
) -> anyhow::Result<()> {
    let config = config(url, None)?;
    let db = Database::connect(&config, 32).await?;
    db.migrate().await?;
    let state = state(&config, &db).await?;
    let (org_id, account_id) = organization(&db, "acme").await?;
    let today = SystemClock.now().date_naive();
    let this_month = today.with_day(1).context("first day")?;
    let last_month = this_month - chrono::Months::new(1);
    subscribe(&db, org_id, "cus_acme", last_month).await?;
    let seeding = Instant::now();
    let hosts = hosts_of(&db, org_id, count).await?;
    let mut day = last_month;
    let mut rows = 0usize;
    while day <= today {
        check_ins(&db, org_id, &hosts, day).await?;
        rows += hosts.len();
        // The rollup has run up to yesterday (`--rollup-lag 1`: not yet for yesterday, as in
        // the minutes after midnight, when yesterday is counted from the host-days too).
        if day < today - Duration::days(rollup_lag) {
            usage_days::ActiveModel {
                org_id: Set(org_id),
                day: Set(day),
                active_hosts: Set(i32::try_from(hosts.len())?),
                reported: Set(true),
            }
            .insert(&db.orm)
            .await?;
        }
        day += Duration::days(1);
    }
    println!(
        "seeded {count} hosts, {rows} host-days ({last_month} to {today}) in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    // A table that has been in use is vacuumed and analysed; a freshly loaded one is not yet,
    // and its first minutes would measure autovacuum instead.
    match &db.pool {
        platform::db::Pool::Postgres(pool) => {
            sqlx::query("VACUUM ANALYZE host_days, usage_days, hosts")
                .execute(pool)
                .await?;
        }
        platform::db::Pool::Sqlite(pool) => {
            sqlx::query("ANALYZE").execute(pool).await?;
        }
    }
    let session =
        api::identity::auth::start_session(&state, &db.orm, account_id, SystemClock.now())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let cookie = format!(
        "Cookie: {}",
        session.cookie.split(';').next().context("cookie")?
    );

    let shutdown = CancellationToken::new();
    let bound = api::http::server::bind(config.bind).await?;
    let base = format!("http://{}", bound.local_addr);
    let server = tokio::spawn(api::http::server::serve(state, bound, shutdown.clone()));
    let check = reqwest::Client::new()
        .get(format!("{base}/v1/orgs/acme/billing/usage"))
        .header("cookie", cookie.trim_start_matches("Cookie: "))
        .send()
        .await?
        .json::<serde_json::Value>()
        .await?;
    println!(
        "current month: {} days, host_days {}, today_so_far {}, estimate_pence {}",
        check["days"].as_array().map_or(0, Vec::len),
        check["host_days"],
        check["today_so_far"],
        check["estimate_pence"]
    );
    let targets = [
        (
            "current month",
            format!("{base}/v1/orgs/acme/billing/usage"),
        ),
        (
            "previous month",
            format!(
                "{base}/v1/orgs/acme/billing/usage?month={}",
                last_month.format("%Y-%m")
            ),
        ),
    ];
    if warmup > 0 {
        for (_, url) in &targets {
            tests::wrk::run(
                url,
                connections,
                1,
                warmup / 2,
                std::slice::from_ref(&cookie),
            )
            .await?;
        }
    }
    for (name, url) in &targets {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut rps = Vec::new();
        for round in 0..rounds {
            let result =
                tests::wrk::run(url, connections, 1, seconds, std::slice::from_ref(&cookie))
                    .await?;
            anyhow::ensure!(result.non_2xx == 0, "{name}: {} non-2xx", result.non_2xx);
            println!(
                "round {round} {name}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
                result.requests_per_second, result.p50_ms, result.p99_ms
            );
            p50.push(result.p50_ms);
            p99.push(result.p99_ms);
            rps.push(result.requests_per_second);
        }
        println!(
            "median {name}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms ({connections} connections)",
            tests::wrk::median(&mut rps),
            tests::wrk::median(&mut p50),
            tests::wrk::median(&mut p99)
        );
    }
    shutdown.cancel();
    let _ = server.await;
    db.close().await;
    Ok(())
}

async fn report(url: &str, count: usize, per_org: usize, concurrency: usize) -> anyhow::Result<()> {
    let processor = tests::processor::TestProcessor::start().await;
    let config = config(url, Some(processor.url()))?;
    let db = Database::connect(&config, worker::connections(concurrency)).await?;
    db.migrate().await?;
    let yesterday = SystemClock.now().date_naive() - Duration::days(1);
    let seeding = Instant::now();
    for i in 0..count {
        let slug = format!("org-{i}");
        let (org_id, _) = organization(&db, &slug).await?;
        subscribe(
            &db,
            org_id,
            &format!("cus_{i}"),
            yesterday - Duration::days(10),
        )
        .await?;
        let hosts = hosts_of(&db, org_id, per_org).await?;
        check_ins(&db, org_id, &hosts, yesterday).await?;
    }
    println!(
        "seeded {count} organizations with live subscriptions, {per_org} hosts each, in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let deps = worker::Deps::new(config.clone(), db.clone(), Arc::new(SystemClock))?;
    let shutdown = CancellationToken::new();
    let options = worker::WorkerOptions::new(concurrency);
    let worker = tokio::spawn(worker::run(deps, options, shutdown.clone()));
    let started = Instant::now();
    Queue::new(&db)
        .push(domain::billing::jobs::BillingReport {
            day: yesterday,
            org_id: None,
        })
        .await?;
    loop {
        use sea_orm::{ColumnTrait, QueryFilter};
        let done = usage_days::Entity::find()
            .filter(usage_days::Column::Day.eq(yesterday))
            .filter(usage_days::Column::Reported.eq(true))
            .count(&db.orm)
            .await?;
        if done as usize >= count {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < std::time::Duration::from_secs(600),
            "only {done} of {count} reported after 10 minutes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let events = processor.meter_events().len();
    println!(
        "nightly report: {count} organizations reported in {elapsed:.2} s ({:.0}/s); the processor accepted {events} meter events",
        count as f64 / elapsed
    );
    anyhow::ensure!(events == count, "one meter event per organization");
    shutdown.cancel();
    let _ = worker.await;
    db.close().await;
    Ok(())
}

async fn webhook(url: &str, events: usize, clients: usize, orgs: usize) -> anyhow::Result<()> {
    let config = config(url, None)?;
    let db = Database::connect(&config, 32).await?;
    db.migrate().await?;
    let state = state(&config, &db).await?;
    for i in 0..orgs {
        let (org_id, _) = organization(&db, &format!("org-{i}")).await?;
        subscribe(
            &db,
            org_id,
            &format!("cus_{i}"),
            SystemClock.now().date_naive(),
        )
        .await?;
    }
    let shutdown = CancellationToken::new();
    let bound = api::http::server::bind(config.bind).await?;
    let base = format!("http://{}/v1/payments/webhook", bound.local_addr);
    let server = tokio::spawn(api::http::server::serve(state, bound, shutdown.clone()));
    let created = SystemClock.now().timestamp();
    // Each distinct event twice; the copy comes a few places later.
    let mut bodies: Vec<Vec<u8>> = Vec::with_capacity(events * 2);
    for i in 0..events {
        let event = tests::payments::payment_failed(
            &format!("evt_bench_{i}"),
            created,
            &format!("cus_{}", i % orgs),
        );
        bodies.push(event.to_string().into_bytes());
    }
    let mut order: Vec<usize> = (0..events).flat_map(|i| [i, i]).collect();
    for i in (0..order.len()).step_by(2) {
        let j = (i + 7).min(order.len() - 1);
        order.swap(i + 1, j);
    }
    let bodies = Arc::new(bodies);
    let order = Arc::new(order);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (bodies, order, next, http, base) = (
            bodies.clone(),
            order.clone(),
            next.clone(),
            http.clone(),
            base.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut failures = 0usize;
            loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(index) = order.get(at) else { break };
                let body = bodies[*index].clone();
                let signature = tests::payments::signature(&body, SystemClock.now());
                let answer = http
                    .post(&base)
                    .header("content-type", "application/json")
                    .header("payment-signature", signature)
                    .body(body)
                    .send()
                    .await;
                if !answer.is_ok_and(|a| a.status().is_success()) {
                    failures += 1;
                }
            }
            failures
        }));
    }
    let mut failures = 0;
    for task in tasks {
        failures += task.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let posted = order.len();
    let recorded = entities::payment_events::Entity::find()
        .count(&db.orm)
        .await?;
    let queued = count_email_jobs(&db).await?;
    println!(
        "webhook: {posted} requests ({events} distinct events, each twice) in {elapsed:.2} s = {:.0} requests/s; {failures} not 2xx; {recorded} events recorded; {queued} owner emails queued",
        posted as f64 / elapsed
    );
    anyhow::ensure!(failures == 0, "every request acknowledged");
    anyhow::ensure!(
        recorded as usize == events,
        "each distinct event recorded once"
    );
    anyhow::ensure!(queued == events as i64, "one email per distinct event");
    shutdown.cancel();
    let _ = server.await;
    db.close().await;
    Ok(())
}

async fn count_email_jobs(db: &Database) -> anyhow::Result<i64> {
    use platform::db::Pool;
    Ok(match &db.pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar("SELECT count(*) FROM apalis.jobs WHERE job_type = 'email.send'")
                .fetch_one(pool)
                .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar("SELECT count(*) FROM Jobs WHERE job_type = 'email.send'")
                .fetch_one(pool)
                .await?
        }
    })
}
