//! The worker: consumes every queue of the job queue with apalis, on Postgres (any number of
//! replicas, LISTEN/NOTIFY pickup) or SQLite (polling).

pub mod alive;
pub mod attempts;
pub mod cli;
pub mod failed;
pub mod jobs;
pub mod mailer;
pub mod poll;

use std::{sync::Arc, time::Duration};

use apalis::prelude::*;
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use domain::billing::jobs::BillingReport;
use domain::billing::jobs::RollupUsage;
use domain::fleet::jobs::EvaluateGroup;
use domain::fleet::jobs::EvaluateHost;
use domain::fleet::jobs::FleetUpkeep;
use domain::intel::jobs::FetchChangelog;
use domain::intel::jobs::ReadAgentManifest;
use domain::intel::jobs::RefreshKev;
use domain::notifications::jobs::DeliverNotification;
use domain::notifications::jobs::NotifyDispatch;
use domain::notifications::jobs::SendDigest;
use domain::notifications::jobs::SendEmail;
use domain::notifications::jobs::SendLink;
use domain::policy::jobs::EvaluatePolicy;
use domain::proposals::jobs::ProposalTimers;
use platform::{
    clock::SharedClock,
    config::Config,
    db::{Database, Pool},
    jobs::{HEARTBEAT, Housekeeping, Job, postgres_config, pushed_to, sqlite_config},
    outbound::Outbound,
};
use tokio_util::sync::CancellationToken;

use crate::{alive::Alive, mailer::Mailer};

/// What job handlers may use.
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
    pub db: Database,
    pub mailer: Mailer,
    pub clock: SharedClock,
    /// The one outbound HTTP client (decisions §13): notification channels, payments.
    pub outbound: Outbound,
    /// What hosts report, kept between policy evaluations of this process.
    pub reports: domain::policy::Reports,
}

#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Jobs run at once per queue.
    pub concurrency: usize,
    /// Prefix of this process's worker names; must differ between replicas.
    pub name: String,
    /// How long in-flight jobs may take to finish after a shutdown signal.
    pub shutdown_timeout: Duration,
}

impl WorkerOptions {
    pub fn new(concurrency: usize) -> WorkerOptions {
        WorkerOptions {
            concurrency: concurrency.max(1),
            name: unique_name(),
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// A name no other replica has: host, process and a random suffix.
pub fn unique_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".to_owned());
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!(
        "{host}-{}-{}",
        std::process::id(),
        &suffix[suffix.len() - 8..]
    )
}

/// How often a queue is polled on SQLite. Nearly every statement of the queue writes (a fetch
/// is an `UPDATE … RETURNING` even when it finds nothing), and SQLite has one writer at a time:
/// 16 queues polled every 200 ms were 80 write turns a second beside the service's own. A job
/// this process pushes wakes its queue's worker at once ([`pushed_to`]); a job to run later, or
/// pushed by another process, waits for the next poll.
const SQLITE_POLL: Duration = Duration::from_secs(1);

/// Registers one worker for job type `$job` with handler `$handler` on the monitor. With
/// `polled`, the queue is only polled on Postgres (every 500 ms) instead of holding a
/// LISTEN/NOTIFY connection of its own: for daily work where a few hundred milliseconds do
/// not matter, so that it costs no pooled connection (see [`QUEUES`]).
macro_rules! register {
    ($monitor:expr, $workers:expr, $options:expr, $job:ty, $handler:path, polled) => {{
        let Workers {
            pool,
            deps,
            alive,
            stop,
        } = $workers.clone();
        let options = $options.clone();
        match pool {
            Pool::Postgres(pool) => $monitor.register(move |restarts| {
                let backend = PostgresStorage::<$job>::new(&pool)
                    .with_config(postgres_config(<$job as Job>::QUEUE))
                    .poll_with_strategy(poll::Every::new(Duration::from_millis(500)));
                let name = worker_name(&alive, &options, <$job as Job>::QUEUE, restarts);
                WorkerBuilder::new(name)
                    .backend(backend)
                    .data(deps.clone())
                    .concurrency(options.concurrency)
                    .layer(attempts::Attempts::new(
                        <$job as Job>::QUEUE,
                        <$job as Job>::RETRIES,
                        stop.clone(),
                        attempts::backoff,
                    ))
                    .build($handler)
            }),
            Pool::Sqlite(_) => register!($monitor, $workers, $options, $job, $handler),
        }
    }};
    ($monitor:expr, $workers:expr, $options:expr, $job:ty, $handler:path) => {{
        let Workers {
            pool,
            deps,
            alive,
            stop,
        } = $workers.clone();
        let options = $options.clone();
        match pool {
            Pool::Postgres(pool) => $monitor.register(move |restarts| {
                let backend = PostgresStorage::<$job>::new(&pool)
                    .with_config(postgres_config(<$job as Job>::QUEUE))
                    .with_pubsub()
                    .poll_with_strategy(poll::Every::new(Duration::from_secs(1)));
                let name = worker_name(&alive, &options, <$job as Job>::QUEUE, restarts);
                WorkerBuilder::new(name)
                    .backend(backend)
                    .data(deps.clone())
                    .concurrency(options.concurrency)
                    .layer(attempts::Attempts::new(
                        <$job as Job>::QUEUE,
                        <$job as Job>::RETRIES,
                        stop.clone(),
                        attempts::backoff,
                    ))
                    .build($handler)
            }),
            Pool::Sqlite(pool) => $monitor.register(move |restarts| {
                let backend = SqliteStorage::<$job>::new(&pool)
                    .with_config(sqlite_config(<$job as Job>::QUEUE))
                    .poll_with_strategy(
                        poll::Every::new(SQLITE_POLL)
                            .or_when_notified(pushed_to(<$job as Job>::QUEUE)),
                    );
                let name = worker_name(&alive, &options, <$job as Job>::QUEUE, restarts);
                WorkerBuilder::new(name)
                    .backend(backend)
                    .data(deps.clone())
                    .concurrency(options.concurrency)
                    .layer(attempts::Attempts::new(
                        <$job as Job>::QUEUE,
                        <$job as Job>::RETRIES,
                        stop.clone(),
                        attempts::backoff,
                    ))
                    .build($handler)
            }),
        }
    }};
}

/// What every queue's worker is built with.
#[derive(Clone)]
struct Workers {
    pool: Pool,
    deps: Deps,
    /// Names the workers, and beats for them.
    alive: Alive,
    /// Cancelled when the worker stops: a job waiting to be tried again goes back to the queue.
    stop: CancellationToken,
}

/// The name of `queue`'s worker after `restarts` restarts, from now on the one `alive` beats for.
fn worker_name(
    alive: &Alive,
    options: &WorkerOptions,
    queue: &'static str,
    restarts: usize,
) -> String {
    alive.working(
        queue,
        if restarts == 0 {
            format!("{}:{queue}", options.name)
        } else {
            format!("{}:{queue}:r{restarts}", options.name)
        },
    )
}

/// Runs every queue's worker until `shutdown` is cancelled, then lets in-flight jobs finish
/// (up to `options.shutdown_timeout`; a job cut off there runs again on another worker).
pub async fn run(
    deps: Deps,
    options: WorkerOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let pool = deps.db.queue_pool().clone();
    // Beats for every worker below until the monitor has returned, their last jobs finished.
    let alive = Alive::default();
    let beating = CancellationToken::new();
    let _stop_beating = beating.clone().drop_guard();
    tokio::spawn(alive.clone().beat(pool.clone(), HEARTBEAT, beating));
    let workers = Workers {
        pool,
        deps,
        alive,
        stop: shutdown.clone(),
    };
    let mut monitor = Monitor::new();
    monitor = register!(monitor, workers, options, SendEmail, jobs::send_email::run);
    monitor = register!(monitor, workers, options, SendLink, jobs::send_link::run);
    monitor = register!(
        monitor,
        workers,
        options,
        Housekeeping,
        jobs::housekeeping::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        EvaluateHost,
        jobs::evaluate_host::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        EvaluateGroup,
        jobs::evaluate_group::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        EvaluatePolicy,
        jobs::evaluate_policy::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        ProposalTimers,
        jobs::proposal_timers::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        FleetUpkeep,
        jobs::fleet_upkeep::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        RollupUsage,
        jobs::rollup_usage::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        BillingReport,
        jobs::billing_report::run,
        polled
    );
    monitor = register!(
        monitor,
        workers,
        options,
        NotifyDispatch,
        jobs::notify_dispatch::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        DeliverNotification,
        jobs::deliver::run
    );
    monitor = register!(monitor, workers, options, SendDigest, jobs::digest::run);
    // At most CHANGELOG_FETCHES changelog fetches in flight per worker, whatever its
    // concurrency: the archives are shared public services.
    let fetch_options = WorkerOptions {
        concurrency: options.concurrency.min(CHANGELOG_FETCHES),
        ..options.clone()
    };
    monitor = register!(
        monitor,
        workers,
        fetch_options,
        FetchChangelog,
        jobs::changelog_fetch::run
    );
    monitor = register!(
        monitor,
        workers,
        options,
        RefreshKev,
        jobs::kev_refresh::run,
        polled
    );
    monitor = register!(
        monitor,
        workers,
        options,
        ReadAgentManifest,
        jobs::agent_manifest::run,
        polled
    );
    tracing::info!(name = %options.name, concurrency = options.concurrency, "worker started");
    monitor
        // A job that ends failed (its retries spent, or its retry cut off by a stop: the queue
        // runs it again while it has attempts left; `worker --failed` lists the rest) is
        // logged, so an operator sees it as it happens.
        .on_event(|ctx, event| {
            if let Event::Error(error) = event {
                tracing::warn!(worker = %ctx.name(), %error, "job failed");
            }
        })
        .should_restart(|ctx, err| {
            tracing::error!(worker = %ctx.name(), error = %err, "worker stopped with an error; restarting");
            true
        })
        .shutdown_timeout(options.shutdown_timeout)
        .run_with_signal(async move {
            shutdown.cancelled().await;
            Ok(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("worker monitor: {e}"))?;
    tracing::info!("worker stopped");
    Ok(())
}

impl Deps {
    pub fn new(config: Arc<Config>, db: Database, clock: SharedClock) -> anyhow::Result<Deps> {
        let mailer = Mailer::from_config(&config)?;
        let outbound = Outbound::new(&config.outbound_settings())?;
        Ok(Deps {
            config,
            db,
            mailer,
            clock,
            outbound,
            reports: domain::policy::Reports::new(),
        })
    }
}

/// Queues this worker consumes that hold, on Postgres, a pooled connection for their
/// LISTEN/NOTIFY listener for as long as the worker runs (`billing.report`, `kev.refresh` and
/// `agent.manifest` are only polled).
pub const QUEUES: u32 = 13;

/// Changelog fetches in flight at once per worker process.
pub const CHANGELOG_FETCHES: usize = 8;

/// Pool size a worker with `concurrency` needs on Postgres: a listener per queue, plus room
/// for the jobs in flight and their polling.
pub fn connections(concurrency: usize) -> u32 {
    QUEUES + u32::try_from(concurrency / 2).unwrap_or(u32::MAX).max(4)
}

/// The `worker` binary: connect, migrate, consume until SIGTERM/SIGINT.
pub async fn run_process(config: Config, concurrency: usize) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let db = Database::connect_queue_worker(config.database_url.expose(), connections(concurrency))
        .await?;
    db.migrate().await?;
    let shutdown = platform::runtime::shutdown_on_signal();
    let metrics =
        platform::metrics::start(config.metrics_bind, &db, &domain::QUEUE_NAMES, &shutdown).await?;
    let deps = Deps::new(config, db.clone(), Arc::new(platform::clock::SystemClock))?;
    run(deps, WorkerOptions::new(concurrency), shutdown).await?;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    db.close().await;
    Ok(())
}

/// `worker --failed`: prints the jobs that ended failed, newest first.
pub async fn print_failed(config: Config) -> anyhow::Result<()> {
    let db = Database::connect(&config, 1).await?;
    db.migrate().await?;
    let jobs = failed::list(&db, 100).await?;
    if jobs.is_empty() {
        println!("no failed jobs");
    }
    for job in jobs {
        println!(
            "{}\t{}\t{}\tattempts={}\t{}",
            job.id,
            job.queue,
            job.status,
            job.attempts,
            job.last_error.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}
