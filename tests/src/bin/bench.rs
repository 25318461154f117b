//! `bench`: the figures of the performance section, measured on this machine. Build it in
//! release mode with the worker program next to it:
//!
//! ```text
//! cargo build --release -p tests --bin bench --bin fleet-worker
//! target/release/bench <subcommand> [options]     # --help on each subcommand
//! ```
//!
//! Subcommands (BENCHMARKS.md has the exact commands and the figures):
//!
//! - `http`: requests per second of `GET /healthz` through the whole api (`api::app`, served by
//!   `api::http::server::serve` on a loopback port, SQLite database in a temp dir) against a bare poem
//!   hello-world (`Route::new().at("/healthz", handler)`) served by the same process. `wrk` is the
//!   load generator (`apt-get install -y wrk`); the targets alternate, in a rotating order, for
//!   `--rounds` rounds, and the median requests/s of each and the median of the per-round ratios
//!   to the bare app are printed. `stack` runs without a log subscriber; `stack-log` logs one
//!   `info` line per request in the service's format (to `--log-file`, /dev/null by default).
//!   `bare-edge` (bare app + the api's `Edge` middleware) and `openapi` (the OpenAPI service
//!   without `Edge`) split the cost; `stack-openapi` is the api without its `/healthz` fast path.
//!   The `layer-*` targets put one step of `Edge` or of `api::app` on the bare app (request id,
//!   extra headers, span, body limit, panic catching, `.data(state)`, the identity settle,
//!   `AllowedMethods`, the `nest("/")`), to be read against `layer-noop`; the size of every
//!   app's request future is printed too. `--server-threads`, `--wrk-cpus` and `taskset` keep the load
//!   generator and the servers on separate CPUs.
//! - `queue-latency`: on Postgres, with one idle worker (LISTEN/NOTIFY plus a 1 s poll, built
//!   like `worker::run` builds its workers), pushes `--jobs` no-op jobs one at a time through
//!   `platform::jobs::Queue`, `--spacing-ms` apart, each carrying its enqueue time; the handler
//!   records when it starts. Prints p50/p90/p99/max of enqueue-to-start, of commit-to-start
//!   (from the moment `push` returned) and of the push itself.
//! - `queue-drain`: for each backend and each `CONCURRENCYxBATCH` setting, on a fresh database:
//!   pushes `--jobs` no-op jobs with `push_all`, then starts one worker (built the same way) and
//!   times how long it takes until every row is `Done`. Prints jobs/s per setting, the best, and
//!   the pauses (gaps of 20 ms or more between handler starts) that show where time went.
//! - `orphan`: how long the job of a killed worker waits before it runs again. A `fleet-worker`
//!   process takes an `email.send` job whose SMTP server never answers DATA (the test SMTP
//!   sink stalls it), a second worker process starts, the first is SIGKILLed, and the time from
//!   the kill to the delivery by the second is measured (and when the row was re-enqueued).
//!
//! Postgres runs create a database `bench_<random>` through `--admin-url` (default
//! `postgres://postgres@127.0.0.1/test`; `?host=/var/run/postgresql` selects the Unix socket)
//! and drop it at the end, unless `--database-url` names one to use as it is.

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

use std::{
    fmt,
    net::SocketAddr,
    ops::Range,
    path::PathBuf,
    str::FromStr,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use apalis::{
    layers::retry::{
        HasherRng, RetryPolicy,
        backoff::{ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff},
    },
    prelude::*,
};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use api::http::{
    identity_cache::SettleChanges,
    middleware::{
        Edge, ExtraHeaders, REQUEST_ID_HEADER, RequestId, body_limit, catch_panic, limit_body,
    },
};
use clap::{Parser, Subcommand, ValueEnum};
use domain::notifications::jobs::SendEmail;
use platform::{
    clock::SystemClock,
    config::RawConfig,
    db::{Database, Pool},
    jobs::{Job, Queue, postgres_config, sqlite_config},
};
use poem::EndpointExt;
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};
use tests::{SmtpSink, processes::spawn_worker};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1/test";

#[derive(Parser)]
#[command(
    name = "bench",
    about = "Performance figures of the service (see the source's doc comment)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Requests/s of GET /healthz through the whole api versus a bare poem app (wrk).
    Http(HttpArgs),
    /// Enqueue-to-start latency of a job with one idle worker, on Postgres.
    QueueLatency(LatencyArgs),
    /// Jobs/s one worker drains, on Postgres and SQLite, for several settings.
    QueueDrain(DrainArgs),
    /// Time from SIGKILL of a worker mid-job to the job's completion by another worker.
    Orphan(OrphanArgs),
}

#[derive(clap::Args)]
struct DatabaseArgs {
    /// Use this database as it is (migrated first) instead of a fresh scratch database.
    #[arg(long)]
    database_url: Option<String>,
    /// Postgres server on which scratch databases `bench_<random>` are created and dropped.
    #[arg(long, default_value = DEFAULT_ADMIN_URL)]
    admin_url: String,
}

#[derive(clap::Args)]
struct HttpArgs {
    /// Seconds of load per measurement.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Open connections (wrk -c).
    #[arg(long, default_value_t = 64)]
    connections: u32,
    /// Load generator threads (wrk -t).
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Measurements of each target, alternating.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds of unrecorded load on each target first.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Which servers to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bare,stack,stack-log"
    )]
    targets: Vec<Target>,
    /// The wrk program.
    #[arg(long, default_value = "wrk")]
    wrk: String,
    /// Where the `stack-log` target's log lines go.
    #[arg(long, default_value = "/dev/null")]
    log_file: PathBuf,
    /// Threads of the servers' runtime (default: one per CPU).
    #[arg(long)]
    server_threads: Option<usize>,
    /// Run wrk under `taskset -c CPUS` (pair with `taskset -c` on this process to keep the load
    /// generator and the servers on separate CPUs).
    #[arg(long)]
    wrk_cpus: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// `poem::Route::new().at("/healthz", handler)`, nothing else.
    Bare,
    /// `api::app(state)` served by `api::http::server::serve`, no log subscriber.
    Stack,
    /// The same, logging each request at `info` like the service does by default.
    StackLog,
    /// The api's routes without the `/healthz` fast path (`http::health::Liveness`): the probe
    /// answered by the OpenAPI service, as before it had one. No log subscriber.
    StackOpenapi,
    /// To split the cost: the bare app wrapped in the api's edge middleware only.
    BareEdge,
    /// The same, logging like `stack-log`.
    BareEdgeLog,
    /// To split the cost: the OpenAPI service (`api::openapi`) without the edge middleware.
    Openapi,
    /// One layer on the bare app, for each step of `Edge` and of `api::app`: a layer that only
    /// calls the bare app (what the other layers are measured against).
    LayerNoop,
    /// The request id (`RequestId::of`: echoed or a new UUIDv7), put on the response.
    LayerRequestId,
    /// `ExtraHeaders`: made, put in the request's extensions, applied to the response.
    LayerExtraHeaders,
    /// The request's tracing span at `info` (method, path, request id), the answer
    /// instrumented with it, and the `answered` event, with no log subscriber.
    LayerSpan,
    /// The same, logging like `stack-log`.
    LayerSpanLog,
    /// `limit_body` and the check of its flag after the answer.
    LayerBodyLimit,
    /// `catch_panic` around the answer.
    LayerCatchPanic,
    /// `.data(state)`: the app state cloned into every request's extensions.
    LayerData,
    /// `SettleChanges`, the identity-settle step.
    LayerSettle,
    /// `AllowedMethods` (the `Allow` header of a 405).
    LayerAllowed,
    /// `Route::new().nest("/", app)`, how the api nests the OpenAPI service.
    LayerNest,
}

impl Target {
    /// Whether the request log is written while this target is measured.
    fn logs(self) -> bool {
        matches!(
            self,
            Target::StackLog | Target::BareEdgeLog | Target::LayerSpanLog
        )
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Bare => "bare poem",
            Target::Stack => "api stack",
            Target::StackLog => "api stack + info log",
            Target::StackOpenapi => "api stack, no fast path",
            Target::BareEdge => "bare poem + Edge",
            Target::BareEdgeLog => "bare + Edge + info log",
            Target::Openapi => "openapi, no Edge",
            Target::LayerNoop => "layer: no-op",
            Target::LayerRequestId => "layer: request id",
            Target::LayerExtraHeaders => "layer: extra headers",
            Target::LayerSpan => "layer: span",
            Target::LayerSpanLog => "layer: span + info log",
            Target::LayerBodyLimit => "layer: body limit",
            Target::LayerCatchPanic => "layer: catch panic",
            Target::LayerData => "layer: data(state)",
            Target::LayerSettle => "layer: settle",
            Target::LayerAllowed => "layer: allowed methods",
            Target::LayerNest => "layer: nest(\"/\")",
        })
    }
}

#[derive(clap::Args)]
struct LatencyArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// Jobs measured.
    #[arg(long, default_value_t = 200)]
    jobs: u64,
    /// Pause between two pushes.
    #[arg(long, default_value_t = 20)]
    spacing_ms: u64,
    /// The worker's concurrency (the `worker` binary's default is 32).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

#[derive(clap::Args)]
struct DrainArgs {
    /// Postgres server on which a scratch database is created (and dropped) per trial.
    #[arg(long, default_value = DEFAULT_ADMIN_URL)]
    admin_url: String,
    /// Backends to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres,sqlite"
    )]
    backends: Vec<Backend>,
    /// Jobs queued before the worker starts.
    #[arg(long, default_value_t = 20_000)]
    jobs: u64,
    /// Worker settings to try, as CONCURRENCYxBATCH (batch = jobs fetched per query).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "32x50,64x50,64x100,128x100,128x200"
    )]
    settings: Vec<Setting>,
    /// Jobs per `push_all` call while filling the queue.
    #[arg(long, default_value_t = 1000)]
    push_chunk: usize,
    /// SQLite: run `ANALYZE` once the jobs are queued, before the worker starts (an attempt
    /// to give the planner statistics for apalis' statements).
    #[arg(long)]
    sqlite_analyze: bool,
    /// Configure the storage with `lock_tasks(false)`: no extra statement marks fetched jobs
    /// `Running` (they stay `Queued`, locked by the worker, until done).
    #[arg(long)]
    no_lock_tasks: bool,
    /// After the drain, queue this many more jobs for the same (now idle) worker and time them
    /// too: shows whether the cost follows the backlog or what the worker has done before.
    #[arg(long, default_value_t = 0)]
    then: u64,
    /// Before the `--then` jobs, set `lock_by = NULL` on the finished rows (a candidate
    /// housekeeping step: apalis' ack statement scans every row locked by the worker).
    #[arg(long, requires = "then")]
    then_unlock_done: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Postgres,
    Sqlite,
}

#[derive(Clone, Copy, Debug)]
struct Setting {
    concurrency: usize,
    batch: usize,
    /// `Config::lock_tasks`; true in `platform::jobs`' configs (apalis' default).
    lock_tasks: bool,
}

impl FromStr for Setting {
    type Err = String;

    fn from_str(text: &str) -> Result<Setting, String> {
        let parse = |part: &str| part.trim().parse::<usize>().ok().filter(|n| *n > 0);
        match text.split_once('x') {
            Some((c, b)) => match (parse(c), parse(b)) {
                (Some(concurrency), Some(batch)) => Ok(Setting {
                    concurrency,
                    batch,
                    lock_tasks: true,
                }),
                _ => Err(format!(
                    "expected CONCURRENCYxBATCH such as 64x100, got {text:?}"
                )),
            },
            None => Err(format!(
                "expected CONCURRENCYxBATCH such as 64x100, got {text:?}"
            )),
        }
    }
}

#[derive(clap::Args)]
struct OrphanArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// Kills measured.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The worker program; default: `fleet-worker` next to this binary.
    #[arg(long)]
    worker: Option<PathBuf>,
    /// Concurrency of each worker process.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

fn main() -> anyhow::Result<()> {
    // reqwest is built without a TLS provider of its own (`rustls-no-provider`).
    platform::outbound::install_crypto_provider();
    let cli = Cli::parse();
    let _ = epoch();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Http(HttpArgs {
        server_threads: Some(threads),
        ..
    }) = &cli.command
    {
        runtime.worker_threads(*threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Http(args) => http(args).await,
            Command::QueueLatency(args) => queue_latency(args).await,
            Command::QueueDrain(args) => queue_drain(args).await,
            Command::Orphan(args) => orphan(args).await,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// http

/// Whether the `stack-log` target is being measured: the log layer only writes while it is set.
static LOG_REQUESTS: AtomicBool = AtomicBool::new(false);

#[poem::handler]
fn hello() -> &'static str {
    "ok"
}

async fn http(args: HttpArgs) -> anyhow::Result<()> {
    if args.targets.iter().any(|t| t.logs()) {
        install_request_log(&args.log_file)?;
    }
    let shutdown = CancellationToken::new();

    // The api, as `api::run` serves it, on a fresh SQLite database.
    let dir = tempfile::tempdir().context("temp dir")?;
    let raw = RawConfig {
        database_url: Some(format!(
            "sqlite://{}/service.db?mode=rwc",
            dir.path().display()
        )),
        service_bind: Some("127.0.0.1:0".into()),
        embedded_workers: Some("false".into()),
        ..RawConfig::default()
    };
    let config = Arc::new(raw.validate()?);
    let db = Database::connect(&config, 16).await?;
    db.migrate().await?;
    let state = api::AppState {
        config: config.clone(),
        queue: Queue::new(&db),
        db: db.clone(),
        clock: Arc::new(SystemClock),
        agent_ca: api::agent::ca::load_or_create(&db, &config, &SystemClock).await?,
        outbound: platform::outbound::Outbound::new(&config.outbound_settings())?,
        sso: Default::default(),
        identity: Default::default(),
        buckets: Default::default(),
        agent_keys: Default::default(),
    };
    let bound = api::http::server::bind(config.bind).await?;
    let stack_addr = bound.local_addr;
    let stack = tokio::spawn(api::http::server::serve(
        state.clone(),
        bound,
        shutdown.clone(),
    ));

    // The other apps on the same runtime; every target serves `/healthz`.
    let bare = || poem::Route::new().at("/healthz", poem::get(hello));
    let mut servers: Vec<(Target, SocketAddr, usize)> = vec![(
        Target::Stack,
        stack_addr,
        future_size(&api::app(state.clone())),
    )];
    for &target in &args.targets {
        if servers.iter().any(|(t, _, _)| *t == target) {
            continue;
        }
        let served = match target {
            Target::Stack | Target::StackLog => continue,
            Target::Bare => serve_endpoint(bare(), shutdown.clone()).await?,
            Target::StackOpenapi => {
                // `api::app` as it was before `/healthz` had its own route.
                let allowed =
                    api::http::openapi::AllowedMethods::from_document(&api::openapi_json(&state));
                let app = poem::Route::new()
                    .nest(
                        "/",
                        api::openapi(&state)
                            .with(allowed)
                            .data(state.clone())
                            .with(SettleChanges::new(&state.db)),
                    )
                    .with(Edge::<api::scim::v2::wire::ScimPaths>::default());
                serve_endpoint(app, shutdown.clone()).await?
            }
            Target::BareEdge | Target::BareEdgeLog => {
                serve_endpoint(
                    bare()
                        .with(Edge::<api::scim::v2::wire::ScimPaths>::default())
                        .map_to_response(),
                    shutdown.clone(),
                )
                .await?
            }
            Target::Openapi => {
                let app = poem::Route::new()
                    .nest("/", api::openapi(&state))
                    .data(state.clone());
                serve_endpoint(app, shutdown.clone()).await?
            }
            Target::LayerNoop
            | Target::LayerRequestId
            | Target::LayerExtraHeaders
            | Target::LayerSpan
            | Target::LayerSpanLog
            | Target::LayerBodyLimit
            | Target::LayerCatchPanic => {
                let app = OneLayer {
                    inner: bare(),
                    target,
                };
                serve_endpoint(app, shutdown.clone()).await?
            }
            Target::LayerData => {
                serve_endpoint(bare().data(state.clone()), shutdown.clone()).await?
            }
            Target::LayerSettle => {
                let app = bare().with(SettleChanges::new(&state.db));
                serve_endpoint(app, shutdown.clone()).await?
            }
            Target::LayerAllowed => {
                let allowed =
                    api::http::openapi::AllowedMethods::from_document(&api::openapi_json(&state));
                serve_endpoint(bare().with(allowed), shutdown.clone()).await?
            }
            Target::LayerNest => {
                let app = poem::Route::new().nest("/", bare());
                serve_endpoint(app, shutdown.clone()).await?
            }
        };
        servers.push((target, served.0, served.1));
    }
    let server = |target: Target| {
        let target = match target {
            Target::StackLog => Target::Stack,
            Target::BareEdgeLog => Target::BareEdge,
            other => other,
        };
        servers.iter().find(|(t, _, _)| *t == target).copied()
    };
    let url = |target: Target| match server(target) {
        Some((_, addr, _)) => format!("http://{addr}/healthz"),
        None => format!("http://{stack_addr}/healthz"),
    };
    for &target in &args.targets {
        let answer = reqwest::get(url(target)).await?.error_for_status()?;
        if matches!(
            target,
            Target::Stack
                | Target::StackLog
                | Target::StackOpenapi
                | Target::BareEdge
                | Target::BareEdgeLog
                | Target::LayerRequestId
        ) {
            anyhow::ensure!(
                answer.headers().contains_key(REQUEST_ID_HEADER),
                "{target} answered without a request id"
            );
        }
        let body = answer.text().await?;
        anyhow::ensure!(body == "ok", "{target} answered {body:?}");
    }
    // The size of each app's request future: every boxing of a future copies it.
    for (target, _, size) in &servers {
        println!("  {:<26} request future {size} bytes", target.to_string());
    }
    println!(
        "wrk -t{} -c{} -d{}s{}, {} rounds; server threads: {}; api on {stack_addr}",
        args.threads,
        args.connections,
        args.duration,
        args.wrk_cpus
            .as_ref()
            .map(|cpus| format!(" on CPUs {cpus}"))
            .unwrap_or_default(),
        args.rounds,
        args.server_threads
            .map(|n| n.to_string())
            .unwrap_or_else(|| "one per CPU".into()),
    );

    for &target in &args.targets {
        LOG_REQUESTS.store(target.logs(), Ordering::SeqCst);
        run_wrk(&args, &url(target), args.warmup).await?;
    }

    let mut results: Vec<(Target, Vec<Wrk>)> =
        args.targets.iter().map(|&t| (t, Vec::new())).collect();
    for round in 0..args.rounds {
        // Rotate the order so that no target always runs first or last.
        for i in 0..results.len() {
            let index = (i + round) % results.len();
            let target = results[index].0;
            LOG_REQUESTS.store(target.logs(), Ordering::SeqCst);
            let measured = run_wrk(&args, &url(target), args.duration).await?;
            println!(
                "round {} {:<22} {:>10.0} req/s  p50 {:>8.3} ms  p99 {:>8.3} ms{}",
                round + 1,
                target.to_string(),
                measured.requests_per_second,
                measured.p50_ms,
                measured.p99_ms,
                if measured.errors.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", measured.errors)
                }
            );
            results[index].1.push(measured);
        }
    }
    LOG_REQUESTS.store(false, Ordering::SeqCst);

    println!();
    println!("median of {} rounds:", args.rounds);
    for (target, runs) in &results {
        let rps: Vec<f64> = runs.iter().map(|r| r.requests_per_second).collect();
        let p99: Vec<f64> = runs.iter().map(|r| r.p99_ms).collect();
        println!(
            "  {:<22} {:>10.0} req/s  (min {:.0}, max {:.0})  p99 {:.3} ms",
            target.to_string(),
            median(&rps),
            min(&rps),
            max(&rps),
            median(&p99)
        );
    }
    if let Some((_, bare)) = results.iter().find(|(t, _)| *t == Target::Bare) {
        for (target, runs) in results.iter().filter(|(t, _)| *t != Target::Bare) {
            let ratios: Vec<f64> = runs
                .iter()
                .zip(bare)
                .map(|(r, b)| r.requests_per_second / b.requests_per_second)
                .collect();
            let ratio = median(&ratios);
            println!(
                "  {target} / bare poem: {ratio:.3} (median of per-round ratios; cost {:.1}%; \
                 per round: {})",
                (1.0 - ratio) * 100.0,
                ratios
                    .iter()
                    .map(|r| format!("{r:.3}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), stack).await;
    db.close().await;
    Ok(())
}

/// The service's log format (compact text at `info`), to `path`, enabled by `LOG_REQUESTS`.
fn install_request_log(path: &std::path::Path) -> anyhow::Result<()> {
    use tracing_subscriber::{
        filter::{LevelFilter, dynamic_filter_fn},
        fmt,
        prelude::*,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let layer = fmt::layer()
        .compact()
        .with_writer(Mutex::new(file))
        // Dynamic: asked on every event, so that flipping `LOG_REQUESTS` takes effect.
        .with_filter(dynamic_filter_fn(|meta, _| {
            LOG_REQUESTS.load(Ordering::Relaxed) && *meta.level() <= LevelFilter::INFO
        }));
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .context("installing the log subscriber")
}

/// Serves `app` on a loopback port until `shutdown`, the way `api::http::server::serve` does;
/// its address and the size of its request future.
async fn serve_endpoint(
    app: impl poem::Endpoint + 'static,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, usize)> {
    use poem::listener::{Acceptor, Listener, TcpListener};
    let size = future_size(&app);
    let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await?;
    let addr = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .context("the listener has no address")?;
    tokio::spawn(async move {
        let served = poem::Server::new_with_acceptor(acceptor)
            .run_with_graceful_shutdown(
                app,
                async move { shutdown.cancelled().await },
                Some(Duration::from_secs(5)),
            )
            .await;
        if let Err(err) = served {
            eprintln!("server on {addr} failed: {err}");
        }
    });
    Ok((addr, size))
}

/// The size of `app`'s request future (the future is made, never polled).
fn future_size(app: &impl poem::Endpoint) -> usize {
    std::mem::size_of_val(&app.call(poem::Request::builder().finish()))
}

/// One step of `api::http::middleware::Edge` on its own, built from the same parts, so that
/// each step's cost can be read against `LayerNoop`.
struct OneLayer<E> {
    inner: E,
    target: Target,
}

impl<E: poem::Endpoint> poem::Endpoint for OneLayer<E> {
    type Output = poem::Response;

    async fn call(&self, mut req: poem::Request) -> poem::Result<poem::Response> {
        use poem::IntoResponse;
        use tracing::Instrument;
        match self.target {
            Target::LayerRequestId => {
                let id = RequestId::of(&req);
                let mut response = self.inner.call(req).await?.into_response();
                response
                    .headers_mut()
                    .insert(REQUEST_ID_HEADER, id.header_value().clone());
                Ok(response)
            }
            Target::LayerExtraHeaders => {
                let extra = ExtraHeaders::default();
                req.extensions_mut().insert(extra.clone());
                let mut response = self.inner.call(req).await?.into_response();
                extra.apply(&mut response);
                Ok(response)
            }
            Target::LayerSpan | Target::LayerSpanLog => {
                let started = Instant::now();
                let span = tracing::info_span!(
                    "request",
                    method = %req.method(),
                    path = %req.uri().path(),
                    request_id = "0195d1c4-5b7e-7c3a-9d1e-2f4a6b8c0d1e"
                );
                let response = self
                    .inner
                    .call(req)
                    .instrument(span.clone())
                    .await?
                    .into_response();
                span.in_scope(|| {
                    tracing::info!(
                        status = response.status().as_u16(),
                        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                        "answered"
                    )
                });
                Ok(response)
            }
            Target::LayerBodyLimit => {
                let limit = body_limit(req.uri().path());
                let over_limit = limit_body(&mut req, limit)?;
                let response = self.inner.call(req).await?.into_response();
                if over_limit.is_some_and(|flag| flag.load(Ordering::Relaxed)) {
                    return Err(poem::Error::from_status(
                        poem::http::StatusCode::PAYLOAD_TOO_LARGE,
                    ));
                }
                Ok(response)
            }
            Target::LayerCatchPanic => catch_panic(self.inner.call(req)).await,
            _ => Ok(self.inner.call(req).await?.into_response()),
        }
    }
}

struct Wrk {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// wrk's error lines (non-2xx answers, socket errors), if any.
    errors: String,
}

async fn run_wrk(args: &HttpArgs, url: &str, seconds: u64) -> anyhow::Result<Wrk> {
    let mut command = match &args.wrk_cpus {
        Some(cpus) => {
            let mut command = tokio::process::Command::new("taskset");
            command.arg("-c").arg(cpus).arg(&args.wrk);
            command
        }
        None => tokio::process::Command::new(&args.wrk),
    };
    let output = command
        .arg(format!("-t{}", args.threads))
        .arg(format!("-c{}", args.connections))
        .arg(format!("-d{seconds}s"))
        .arg("--latency")
        .arg(url)
        .output()
        .await
        .with_context(|| format!("running {} (apt-get install -y wrk)", args.wrk))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "wrk failed: {}{}",
            text,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(prefix))
            .map(|rest| rest.trim().to_owned())
    };
    let requests_per_second = field("Requests/sec:")
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no Requests/sec in wrk's output:\n{text}"))?;
    let latency = |prefix: &str| {
        field(prefix)
            .and_then(|v| parse_wrk_duration(&v))
            .unwrap_or(f64::NAN)
    };
    let errors = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Non-2xx") || l.starts_with("Socket errors"))
        .collect::<Vec<_>>()
        .join("; ");
    Ok(Wrk {
        requests_per_second,
        p50_ms: latency("50%"),
        p99_ms: latency("99%"),
        errors,
    })
}

/// `463.00us`, `1.20ms`, `2.00s` as milliseconds.
fn parse_wrk_duration(text: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}

// ---------------------------------------------------------------------------------------------
// the no-op job and its worker

/// A job that does nothing but note when it started.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BenchJob {
    seq: u64,
    /// When it was queued, in microseconds since the process started.
    sent_us: u64,
}

impl Job for BenchJob {
    const QUEUE: &'static str = "bench.noop";
}

/// What the handler reports to the benchmark.
#[derive(Clone, Default)]
struct Probe(Arc<ProbeInner>);

#[derive(Default)]
struct ProbeInner {
    /// `(seq, started_us)` of every handler run.
    starts: Mutex<Vec<(u64, u64)>>,
    runs: AtomicUsize,
    changed: Notify,
}

impl Probe {
    fn record(&self, seq: u64) {
        let started = now_us();
        if let Ok(mut starts) = self.0.starts.lock() {
            starts.push((seq, started));
        }
        self.0.runs.fetch_add(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }

    fn runs(&self) -> usize {
        self.0.runs.load(Ordering::SeqCst)
    }

    fn starts(&self) -> Vec<(u64, u64)> {
        self.0.starts.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until the handler ran at least `count` times.
    async fn wait_for(&self, count: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.0.changed.notified();
            if self.runs() >= count {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                bail!(
                    "the handler ran {} times within {timeout:?}, expected {count}",
                    self.runs()
                );
            }
        }
    }
}

async fn noop(job: BenchJob, probe: Data<Probe>) -> Result<(), BoxDynError> {
    probe.record(job.seq);
    Ok(())
}

/// The same backoff as `worker`'s.
fn backoff() -> ExponentialBackoff {
    match ExponentialBackoffMaker::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
        0.5,
        HasherRng::default(),
    ) {
        Ok(mut maker) => maker.make_backoff(),
        Err(e) => unreachable!("invalid backoff bounds: {e}"),
    }
}

/// Runs one worker of the no-op job until `shutdown`, built the way `worker::run` builds its
/// workers (`register!` in worker/src/lib.rs), with `setting` for concurrency and batch size.
async fn run_worker(
    pool: Pool,
    setting: Setting,
    probe: Probe,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let name = format!("bench-{}", uuid::Uuid::now_v7().simple());
    let worker_name = move |restarts: usize| {
        if restarts == 0 {
            format!("{name}:{}", BenchJob::QUEUE)
        } else {
            format!("{name}:{}:r{restarts}", BenchJob::QUEUE)
        }
    };
    let monitor = match pool {
        Pool::Postgres(pool) => Monitor::new().register(move |restarts| {
            let backend = PostgresStorage::<BenchJob>::new(&pool)
                .with_config(
                    postgres_config(BenchJob::QUEUE)
                        .batch_size(setting.batch)
                        .lock_tasks(setting.lock_tasks),
                )
                .with_pubsub()
                .poll_with_strategy(worker::poll::Every::new(Duration::from_secs(1)));
            WorkerBuilder::new(worker_name(restarts))
                .backend(backend)
                .data(probe.clone())
                .concurrency(setting.concurrency)
                .retry(RetryPolicy::retries(BenchJob::RETRIES).with_backoff(backoff()))
                .build(noop)
        }),
        Pool::Sqlite(pool) => Monitor::new().register(move |restarts| {
            let backend = SqliteStorage::<BenchJob>::new(&pool)
                .with_config(
                    sqlite_config(BenchJob::QUEUE)
                        .batch_size(setting.batch)
                        .lock_tasks(setting.lock_tasks),
                )
                .poll_with_strategy(worker::poll::Every::new(Duration::from_millis(200)));
            WorkerBuilder::new(worker_name(restarts))
                .backend(backend)
                .data(probe.clone())
                .concurrency(setting.concurrency)
                .retry(RetryPolicy::retries(BenchJob::RETRIES).with_backoff(backoff()))
                .build(noop)
        }),
    };
    monitor
        .should_restart(|ctx, err| {
            eprintln!(
                "worker {} stopped with an error, restarting: {err}",
                ctx.name()
            );
            true
        })
        .shutdown_timeout(Duration::from_secs(10))
        .run_with_signal(async move {
            shutdown.cancelled().await;
            Ok(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("worker monitor: {e}"))
}

/// A worker running in this process, stopped by [`RunningWorker::stop`].
struct RunningWorker {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RunningWorker {
    fn start(db: &Database, setting: Setting, probe: Probe) -> RunningWorker {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_worker(
            db.queue_pool().clone(),
            setting,
            probe,
            shutdown.clone(),
        ));
        RunningWorker { shutdown, task }
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        match tokio::time::timeout(Duration::from_secs(15), self.task).await {
            Ok(Ok(result)) => result,
            Ok(Err(err)) => Err(err.into()),
            Err(_) => bail!("the worker did not stop within 15 s"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// queue-latency

async fn queue_latency(args: LatencyArgs) -> anyhow::Result<()> {
    let scratch = Scratch::open(&args.database).await?;
    let result = measure_latency(&args, scratch.url()).await;
    scratch.remove().await;
    result
}

async fn measure_latency(args: &LatencyArgs, url: &str) -> anyhow::Result<()> {
    let setting = Setting {
        concurrency: args.concurrency,
        batch: postgres_config(BenchJob::QUEUE).batch_size,
        lock_tasks: postgres_config(BenchJob::QUEUE).lock_tasks,
    };
    let db = Database::connect_url(url, 8 + args.concurrency as u32 / 4).await?;
    db.migrate().await?;
    anyhow::ensure!(
        matches!(db.pool, Pool::Postgres(_)),
        "queue-latency measures LISTEN/NOTIFY pickup: give it a Postgres database"
    );
    let queue = Queue::new(&db);
    let probe = Probe::default();
    let worker = RunningWorker::start(&db, setting, probe.clone());

    // Let the worker register and listen, and warm both sides up; not measured.
    tokio::time::sleep(Duration::from_secs(2)).await;
    const WARMUP: u64 = 5;
    for seq in 0..WARMUP {
        queue
            .push(BenchJob {
                seq: u64::MAX - seq,
                sent_us: now_us(),
            })
            .await?;
        tokio::time::sleep(Duration::from_millis(args.spacing_ms)).await;
    }
    probe
        .wait_for(WARMUP as usize, Duration::from_secs(30))
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    println!(
        "pushing {} jobs {} ms apart through platform::jobs::Queue; worker concurrency {}, batch {}",
        args.jobs, args.spacing_ms, setting.concurrency, setting.batch
    );
    // (seq, sent_us, pushed_us)
    let mut pushes = Vec::with_capacity(args.jobs as usize);
    let mut ticks = tokio::time::interval(Duration::from_millis(args.spacing_ms));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 0..args.jobs {
        ticks.tick().await;
        let sent_us = now_us();
        queue.push(BenchJob { seq, sent_us }).await?;
        pushes.push((seq, sent_us, now_us()));
    }
    probe
        .wait_for((WARMUP + args.jobs) as usize, Duration::from_secs(60))
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let starts = probe.starts();
    worker.stop().await?;
    db.close().await;

    let mut to_start = Vec::new();
    let mut commit_to_start = Vec::new();
    let mut push_ms = Vec::new();
    for (seq, sent, pushed) in &pushes {
        let Some((_, started)) = starts.iter().find(|(s, _)| s == seq) else {
            bail!("job {seq} never started");
        };
        to_start.push(ms_between(*sent, *started));
        commit_to_start.push(ms_between(*pushed, *started));
        push_ms.push(ms_between(*sent, *pushed));
    }
    let extra = starts.len() as i64 - (WARMUP + args.jobs) as i64;
    if extra > 0 {
        println!("warning: {extra} jobs ran more than once");
    }
    print_distribution("enqueue -> handler start", &mut to_start);
    print_distribution("push returned -> handler start", &mut commit_to_start);
    print_distribution("Queue::push itself", &mut push_ms);
    Ok(())
}

fn print_distribution(label: &str, values: &mut [f64]) {
    values.sort_by(f64::total_cmp);
    println!(
        "  {label:<32} n={}  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        values.len(),
        percentile(values, 50.0),
        percentile(values, 90.0),
        percentile(values, 99.0),
        percentile(values, 100.0)
    );
}

// ---------------------------------------------------------------------------------------------
// queue-drain

struct Trial {
    backend: Backend,
    setting: Setting,
    enqueue_per_second: f64,
    handled_per_second: f64,
    done_per_second: f64,
    /// Gaps of at least [`PAUSE`] between two consecutive handler starts, and their total.
    pauses: usize,
    paused_secs: f64,
    /// Jobs/s of the `--then` jobs queued after the drain, for the same worker.
    then_per_second: Option<f64>,
}

/// A gap between handler starts this long means the worker was waiting, not working.
const PAUSE: Duration = Duration::from_millis(20);

async fn queue_drain(args: DrainArgs) -> anyhow::Result<()> {
    println!(
        "{} no-op jobs per trial, fresh database per trial; jobs/s = jobs / (worker start -> all Done)",
        args.jobs
    );
    if args.no_lock_tasks || args.sqlite_analyze {
        println!(
            "variant: lock_tasks {}, sqlite ANALYZE {}",
            !args.no_lock_tasks, args.sqlite_analyze
        );
    }
    let mut trials = Vec::new();
    for &backend in &args.backends {
        for &setting in &args.settings {
            let setting = Setting {
                lock_tasks: !args.no_lock_tasks,
                ..setting
            };
            let database = DatabaseArgs {
                database_url: None,
                admin_url: args.admin_url.clone(),
            };
            let scratch = match backend {
                Backend::Postgres => Scratch::open(&database).await?,
                Backend::Sqlite => Scratch::sqlite()?,
            };
            let trial = drain_once(&args, backend, setting, scratch.url()).await;
            scratch.remove().await;
            let trial = trial?;
            println!(
                "  {:<8} concurrency {:>3} batch {:>3}: enqueue {:>7.0}/s  drain {:>6.0} jobs/s \
                 (all handlers started {:.0}/s; {} pauses >= {} ms, {:.2} s in all)",
                format!("{backend:?}"),
                setting.concurrency,
                setting.batch,
                trial.enqueue_per_second,
                trial.done_per_second,
                trial.handled_per_second,
                trial.pauses,
                PAUSE.as_millis(),
                trial.paused_secs
            );
            if let Some(rate) = trial.then_per_second {
                println!(
                    "           then {} more jobs for the same worker{}: {rate:.0} jobs/s",
                    args.then,
                    if args.then_unlock_done {
                        " (lock_by of Done rows cleared first)"
                    } else {
                        ""
                    }
                );
            }
            trials.push(trial);
        }
    }
    println!();
    for &backend in &args.backends {
        if let Some(best) = trials
            .iter()
            .filter(|t| t.backend == backend)
            .max_by(|a, b| a.done_per_second.total_cmp(&b.done_per_second))
        {
            println!(
                "best on {:?}: {:.0} jobs/s with concurrency {} and batch {}",
                best.backend, best.done_per_second, best.setting.concurrency, best.setting.batch
            );
        }
    }
    Ok(())
}

async fn drain_once(
    args: &DrainArgs,
    backend: Backend,
    setting: Setting,
    url: &str,
) -> anyhow::Result<Trial> {
    // The pool the `worker` binary opens for this concurrency.
    let db = Database::connect_url(url, 8 + setting.concurrency as u32 / 4).await?;
    db.migrate().await?;

    let total = args.jobs;
    let pushing = Instant::now();
    push_jobs(&db, 0..total, args.push_chunk).await?;
    let enqueue_secs = pushing.elapsed().as_secs_f64();
    let queued = count_jobs(&db.pool, None).await?;
    anyhow::ensure!(
        queued == total as i64,
        "{queued} jobs queued, expected {total}"
    );
    if let (true, Pool::Sqlite(pool)) = (args.sqlite_analyze, &db.pool) {
        sqlx::query("ANALYZE").execute(pool).await?;
    }

    let probe = Probe::default();
    let started = Instant::now();
    let worker = RunningWorker::start(&db, setting, probe.clone());
    probe
        .wait_for(total as usize, Duration::from_secs(600))
        .await?;
    let handled_secs = started.elapsed().as_secs_f64();
    wait_until_done(&db, total).await?;
    let done_secs = started.elapsed().as_secs_f64();

    let mut starts: Vec<u64> = probe.starts().iter().map(|(_, at)| *at).collect();
    starts.sort_unstable();
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e6)
        .filter(|gap| *gap >= PAUSE.as_secs_f64())
        .collect();

    // The same worker, now idle with `total` finished jobs behind it, drains `then` more.
    let then_per_second = if args.then > 0 {
        if args.then_unlock_done {
            unlock_done(&db.pool).await?;
        }
        let pushing = Instant::now();
        push_jobs(&db, total..total + args.then, args.push_chunk).await?;
        wait_until_done(&db, total + args.then).await?;
        Some(args.then as f64 / pushing.elapsed().as_secs_f64())
    } else {
        None
    };

    worker.stop().await?;
    let expected = (total + args.then) as usize;
    if probe.runs() > expected {
        println!("warning: {} handler runs for {expected} jobs", probe.runs());
    }
    db.close().await;
    Ok(Trial {
        backend,
        setting,
        enqueue_per_second: total as f64 / enqueue_secs,
        handled_per_second: total as f64 / handled_secs,
        done_per_second: total as f64 / done_secs,
        pauses: gaps.len(),
        paused_secs: gaps.iter().sum::<f64>() + 0.0,
        then_per_second,
    })
}

/// Queues no-op jobs `seqs` with `push_all`, `chunk` at a time.
async fn push_jobs(db: &Database, seqs: Range<u64>, chunk: usize) -> anyhow::Result<()> {
    let mut seq = seqs.start;
    while seq < seqs.end {
        let end = (seq + chunk as u64).min(seqs.end);
        let tasks: Vec<_> = (seq..end)
            .map(|seq| {
                TaskBuilder::new(BenchJob { seq, sent_us: 0 })
                    .max_attempts(BenchJob::RETRIES + 1)
                    .build()
            })
            .collect();
        let tasks = futures::stream::iter(tasks);
        match &db.pool {
            Pool::Postgres(pool) => PostgresStorage::<BenchJob>::new(pool)
                .with_config(postgres_config(BenchJob::QUEUE))
                .push_all(tasks)
                .await
                .map_err(|e| anyhow::anyhow!("push_all: {e}"))?,
            Pool::Sqlite(pool) => SqliteStorage::<BenchJob>::new(pool)
                .with_config(sqlite_config(BenchJob::QUEUE))
                .push_all(tasks)
                .await
                .map_err(|e| anyhow::anyhow!("push_all: {e}"))?,
        }
        seq = end;
    }
    Ok(())
}

/// Waits until `total` rows of the no-op queue are `Done` (results are written in batches
/// after the handlers return).
async fn wait_until_done(db: &Database, total: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done = count_jobs(&db.pool, Some("Done")).await?;
        if done >= total as i64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {done} of {total} jobs Done");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Forgets which worker ran the finished rows of the no-op queue.
async fn unlock_done(pool: &Pool) -> anyhow::Result<()> {
    match pool {
        Pool::Postgres(pool) => {
            sqlx::query(
                "UPDATE apalis.jobs SET lock_by = NULL WHERE job_type = $1 AND status = 'Done'",
            )
            .bind(BenchJob::QUEUE)
            .execute(pool)
            .await?;
        }
        Pool::Sqlite(pool) => {
            sqlx::query("UPDATE Jobs SET lock_by = NULL WHERE job_type = ?1 AND status = 'Done'")
                .bind(BenchJob::QUEUE)
                .execute(pool)
                .await?;
        }
    }
    Ok(())
}

/// Rows of the no-op queue, all or with `status`.
async fn count_jobs(pool: &Pool, status: Option<&str>) -> anyhow::Result<i64> {
    let count = match pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM apalis.jobs WHERE job_type = $1 \
                 AND ($2::text IS NULL OR status = $2)",
            )
            .bind(BenchJob::QUEUE)
            .bind(status)
            .fetch_one(pool)
            .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM Jobs WHERE job_type = ?1 AND (?2 IS NULL OR status = ?2)",
            )
            .bind(BenchJob::QUEUE)
            .bind(status)
            .fetch_one(pool)
            .await?
        }
    };
    Ok(count)
}

// ---------------------------------------------------------------------------------------------
// orphan

async fn orphan(args: OrphanArgs) -> anyhow::Result<()> {
    let program = match &args.worker {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .context("locating this binary")?
            .with_file_name("fleet-worker"),
    };
    anyhow::ensure!(
        program.exists(),
        "{} does not exist: build it with `cargo build --release -p tests --bin fleet-worker` \
         or pass --worker",
        program.display()
    );
    let program = program.display().to_string();
    let scratch = Scratch::open(&args.database).await?;
    let result = measure_orphans(&args, &program, scratch.url()).await;
    scratch.remove().await;
    result
}

async fn measure_orphans(args: &OrphanArgs, program: &str, url: &str) -> anyhow::Result<()> {
    let db = Database::connect_url(url, 4).await?;
    db.migrate().await?;
    let queue = Queue::new(&db);
    let sink = SmtpSink::start().await;
    println!(
        "heartbeat {:?} x {} missed beats; worker program {program}",
        platform::jobs::HEARTBEAT,
        platform::jobs::MISSED_HEARTBEATS
    );

    let mut delivered_after = Vec::new();
    let mut done_lag = Vec::new();
    for round in 1..=args.rounds {
        let address = format!("orphan-{round}@bench.test");
        sink.stall_first_message_to(&address);
        let mut doomed = spawn_worker(program, url, &sink.url(), args.concurrency);
        queue
            .push(SendEmail::new(
                address.clone(),
                format!("Orphan {round}"),
                "text".into(),
                "<p>html</p>".into(),
            ))
            .await?;
        // The doomed worker is now mid-delivery: the sink holds its DATA unanswered.
        sink.wait_for_stall(Duration::from_secs(60)).await;
        let (job_id, attempts) = latest_email_job(&db.pool).await?;

        // A second worker, registered and heartbeating before the first dies.
        let workers = count_email_workers(&db.pool).await?;
        let mut survivor = spawn_worker(program, url, &sink.url(), args.concurrency);
        let deadline = Instant::now() + Duration::from_secs(30);
        while count_email_workers(&db.pool).await? <= workers {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the second worker did not register"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Kill at a random point of the heartbeat cycle (0.5 to 2.5 s after the registration).
        let jitter = (uuid::Uuid::now_v7().as_u128() & 0xffff) as f64 / 65536.0;
        tokio::time::sleep(Duration::from_secs_f64(
            0.5 + jitter * platform::jobs::HEARTBEAT.as_secs_f64(),
        ))
        .await;

        doomed.start_kill().context("SIGKILL the worker")?;
        let _ = doomed.wait().await;
        let killed = Instant::now();

        // Watch the row for its re-enqueueing while waiting for the delivery.
        let watch = {
            let pool = db.pool.clone();
            let job_id = job_id.clone();
            tokio::spawn(async move {
                loop {
                    match job_state(&pool, &job_id).await {
                        Ok((now, _)) if now > attempts => return Some(killed.elapsed()),
                        Ok(_) => {}
                        Err(_) => return None,
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        sink.wait_for_message_to(&address, Duration::from_secs(120))
            .await;
        let delivered = killed.elapsed();
        let requeued = tokio::time::timeout(Duration::from_secs(1), watch)
            .await
            .ok()
            .and_then(|r| r.ok())
            .flatten();
        println!(
            "round {round}: re-enqueued {} after the kill, delivered by the second worker after {:.2} s",
            requeued
                .map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "?".into()),
            delivered.as_secs_f64()
        );
        delivered_after.push(delivered.as_secs_f64());

        // The result is written after the handler returns; a worker killed before that runs the
        // job again. Stop the second worker only once the row is Done.
        let deadline = Instant::now() + Duration::from_secs(30);
        while job_state(&db.pool, &job_id).await?.1 != "Done" {
            anyhow::ensure!(
                Instant::now() < deadline,
                "job {job_id} not Done after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        done_lag.push(killed.elapsed().as_secs_f64() - delivered.as_secs_f64());

        survivor
            .start_kill()
            .context("stopping the second worker")?;
        let _ = survivor.wait().await;
    }
    let messages = sink.messages().await;
    if messages.len() != args.rounds {
        let mut per_recipient = std::collections::BTreeMap::<String, usize>::new();
        for message in &messages {
            *per_recipient.entry(message.rcpt_to.join(",")).or_default() += 1;
        }
        println!(
            "warning: {} messages delivered for {} jobs: {per_recipient:?}",
            messages.len(),
            args.rounds
        );
    }
    println!(
        "kill -> delivery over {} rounds: median {:.2} s, min {:.2} s, max {:.2} s",
        args.rounds,
        median(&delivered_after),
        min(&delivered_after),
        max(&delivered_after)
    );
    println!(
        "delivery -> row Done (the window in which a kill makes the job run again): \
         median {:.2} s, max {:.2} s",
        median(&done_lag),
        max(&done_lag)
    );
    db.close().await;
    Ok(())
}

/// The `email.send` job queued last (ids are ULIDs, so they sort by time), and its attempts.
async fn latest_email_job(pool: &Pool) -> anyhow::Result<(String, i64)> {
    Ok(match pool {
        Pool::Postgres(pool) => {
            sqlx::query_as(
                "SELECT id, attempts::bigint FROM apalis.jobs WHERE job_type = $1 \
                 ORDER BY id DESC LIMIT 1",
            )
            .bind(SendEmail::QUEUE)
            .fetch_one(pool)
            .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_as(
                "SELECT id, attempts FROM Jobs WHERE job_type = ?1 ORDER BY id DESC LIMIT 1",
            )
            .bind(SendEmail::QUEUE)
            .fetch_one(pool)
            .await?
        }
    })
}

/// A job's attempts and status.
async fn job_state(pool: &Pool, id: &str) -> anyhow::Result<(i64, String)> {
    Ok(match pool {
        Pool::Postgres(pool) => {
            sqlx::query_as("SELECT attempts::bigint, status FROM apalis.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_as("SELECT attempts, status FROM Jobs WHERE id = ?1")
                .bind(id)
                .fetch_one(pool)
                .await?
        }
    })
}

async fn count_email_workers(pool: &Pool) -> anyhow::Result<i64> {
    Ok(match pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar("SELECT COUNT(*) FROM apalis.workers WHERE worker_type = $1")
                .bind(SendEmail::QUEUE)
                .fetch_one(pool)
                .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar("SELECT COUNT(*) FROM Workers WHERE worker_type = ?1")
                .bind(SendEmail::QUEUE)
                .fetch_one(pool)
                .await?
        }
    })
}

// ---------------------------------------------------------------------------------------------
// scratch databases

/// The database a run uses: a scratch Postgres database (dropped by `remove`), a SQLite file
/// in a temp dir, or one given by URL (left as it is).
enum Scratch {
    Given(String),
    Postgres {
        url: String,
        admin_url: String,
        name: String,
    },
    Sqlite {
        url: String,
        _dir: tempfile::TempDir,
    },
}

impl Scratch {
    async fn open(args: &DatabaseArgs) -> anyhow::Result<Scratch> {
        if let Some(url) = &args.database_url {
            return Ok(Scratch::Given(url.clone()));
        }
        let name = format!("bench_{}", uuid::Uuid::now_v7().simple());
        let mut admin = PgConnection::connect(&args.admin_url)
            .await
            .with_context(|| format!("connecting to {}", args.admin_url))?;
        // `name` is made of hex digits here.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .context("creating the scratch database")?;
        let _ = admin.close().await;
        let mut url = url::Url::parse(&args.admin_url).context("--admin-url is not a URL")?;
        url.set_path(&format!("/{name}"));
        Ok(Scratch::Postgres {
            url: url.to_string(),
            admin_url: args.admin_url.clone(),
            name,
        })
    }

    fn sqlite() -> anyhow::Result<Scratch> {
        let dir = tempfile::tempdir().context("temp dir")?;
        let url = format!("sqlite://{}/bench.db?mode=rwc", dir.path().display());
        Ok(Scratch::Sqlite { url, _dir: dir })
    }

    fn url(&self) -> &str {
        match self {
            Scratch::Given(url) | Scratch::Postgres { url, .. } | Scratch::Sqlite { url, .. } => {
                url
            }
        }
    }

    async fn remove(self) {
        if let Scratch::Postgres {
            admin_url, name, ..
        } = self
        {
            let dropped = async {
                let mut admin = PgConnection::connect(&admin_url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await?;
                admin.close().await
            }
            .await;
            if let Err(err) = dropped {
                eprintln!("could not drop the scratch database {name}: {err}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// time and statistics

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Microseconds since the process started (monotonic).
fn now_us() -> u64 {
    epoch().elapsed().as_micros() as u64
}

fn ms_between(from_us: u64, to_us: u64) -> f64 {
    (to_us as f64 - from_us as f64) / 1000.0
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn min(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}
