//! The process's Prometheus metrics (decisions §23): one registry per process, served as text
//! at `/metrics` on `METRICS_BIND` ([`serve`]) by the api, the worker and the scheduler alike.
//!
//! Counters and histograms are recorded where things happen (a request at the api's edge, a job
//! attempt in the worker, a check-in, a notification attempt, an identity cache lookup).
//! What the database knows (how many jobs wait in each queue and for how long, how many pooled
//! connections are in use) is read when the metrics are scraped ([`observe_database`]), so
//! that a process that does nothing costs nothing.
//!
//! Every label has a bounded set of values: queue names, outcomes, route templates (never a
//! path with its ids), methods and statuses.

use std::{
    net::SocketAddr,
    sync::{LazyLock, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Registry, Unit},
};
use tokio_util::sync::CancellationToken;

use crate::db::{Database, Pool};

/// The content type of the answer: the OpenMetrics text format, which Prometheus reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub queue: String,
    /// `done`, `retry` (failed, tried again later) or `failed` (no attempt left in this run).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// `main` (the pool), and on SQLite `writer` (the one writing connection).
    pub pool: &'static str,
    /// `in_use`, `idle` or `max`.
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The route template (`/v1/orgs/:org/hosts/:host_id`), `console` for the web console's
    /// pages, `unmatched` for a path no route knows.
    pub route: String,
    pub status: u16,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // 1 ms to about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn job_histogram() -> Histogram {
    // 5 ms to about 10 minutes.
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// Every series of the process.
pub struct Metrics {
    registry: Registry,
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub queue_oldest_age: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    pub jobs: Family<JobLabels, Counter>,
    pub job_duration: HistogramFamily<JobLabels>,
    pub checkins: Counter,
    pub deliveries: Family<OutcomeLabels, Counter>,
    pub identity_cache: Family<ResultLabels, Counter>,
    pub pool_connections: Family<PoolLabels, Gauge>,
    pub pool_acquire: Histogram,
    pub pool_timeouts: Counter,
    pub database_unavailable: Counter,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: HistogramFamily<HttpLabels>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let metrics = Metrics {
            queue_depth: Family::default(),
            queue_oldest_age: Family::default(),
            jobs: Family::default(),
            job_duration: Family::new_with_constructor(job_histogram),
            checkins: Counter::default(),
            deliveries: Family::default(),
            identity_cache: Family::default(),
            pool_connections: Family::default(),
            pool_acquire: duration_histogram(),
            pool_timeouts: Counter::default(),
            database_unavailable: Counter::default(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(duration_histogram),
            registry: Registry::default(),
        };
        registry.register(
            "fleet_queue_depth",
            "Jobs waiting in each queue that are due now (queued or to be retried); the metric to scale workers on.",
            metrics.queue_depth.clone(),
        );
        registry.register_with_unit(
            "fleet_queue_oldest_job_age",
            "How long the oldest due job of each queue has waited (0 when none waits).",
            Unit::Seconds,
            metrics.queue_oldest_age.clone(),
        );
        registry.register(
            "fleet_jobs",
            "Job attempts run by this process, by queue and outcome (done, retry, failed).",
            metrics.jobs.clone(),
        );
        registry.register_with_unit(
            "fleet_job_duration",
            "How long each job attempt ran, by queue and outcome.",
            Unit::Seconds,
            metrics.job_duration.clone(),
        );
        registry.register(
            "fleet_checkins",
            "Agent check-ins answered by this process (rate() gives check-ins per second).",
            metrics.checkins.clone(),
        );
        registry.register(
            "fleet_notification_deliveries",
            "Notification delivery attempts, by outcome (delivered, retry, failed).",
            metrics.deliveries.clone(),
        );
        registry.register(
            "fleet_identity_cache",
            "Authentication answered from memory (hit) or read from the database (miss).",
            metrics.identity_cache.clone(),
        );
        registry.register(
            "fleet_db_pool_connections",
            "Pooled database connections in use, idle, and the pool's maximum.",
            metrics.pool_connections.clone(),
        );
        registry.register_with_unit(
            "fleet_db_pool_acquire",
            "How long taking a connection from a pool waited.",
            Unit::Seconds,
            metrics.pool_acquire.clone(),
        );
        registry.register(
            "fleet_db_pool_acquire_timeouts",
            "Waits for a pooled connection that gave up (answered 503 by the api).",
            metrics.pool_timeouts.clone(),
        );
        registry.register(
            "fleet_db_unavailable",
            "Requests answered 503 service-unavailable because the database could not serve them.",
            metrics.database_unavailable.clone(),
        );
        registry.register(
            "fleet_http_requests",
            "HTTP requests answered, by method, route template and status.",
            metrics.http_requests.clone(),
        );
        registry.register_with_unit(
            "fleet_http_request_duration",
            "How long HTTP requests took to answer, by method, route template and status.",
            Unit::Seconds,
            metrics.http_duration.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %err, "encoding the metrics");
        }
        text
    }

    /// Records one job attempt.
    pub fn job_attempt(&self, queue: &str, outcome: &'static str, took: Duration) {
        let labels = JobLabels {
            queue: queue.to_owned(),
            outcome,
        };
        self.jobs.get_or_create(&labels).inc();
        self.job_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Makes a queue's job series exist at zero, so that `rate()` sees its first attempt.
    pub fn job_queue_known(&self, queue: &str) {
        for outcome in ["done", "retry", "failed"] {
            let labels = JobLabels {
                queue: queue.to_owned(),
                outcome,
            };
            let _ = self.jobs.get_or_create(&labels);
        }
    }

    /// Records one answered HTTP request.
    pub fn http_request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let labels = HttpLabels {
            method: method.to_owned(),
            route: route.to_owned(),
            status,
        };
        self.http_requests.get_or_create(&labels).inc();
        self.http_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Records a notification delivery attempt: `delivered`, `retry` or `failed`.
    pub fn delivery(&self, outcome: &'static str) {
        self.deliveries
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Records an identity cache lookup.
    pub fn identity_lookup(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.identity_cache
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics::new();
    for outcome in ["delivered", "retry", "failed"] {
        let _ = metrics.deliveries.get_or_create(&OutcomeLabels { outcome });
    }
    for result in ["hit", "miss"] {
        let _ = metrics
            .identity_cache
            .get_or_create(&ResultLabels { result });
    }
    metrics
});

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// One queue's waiting jobs, as the database says.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueWait {
    pub queue: String,
    pub depth: i64,
    pub oldest_age_s: f64,
}

/// Jobs due now and not running, per queue: queued, or failed with attempts left (the queue
/// runs those again). Jobs scheduled for later do not count until they are due.
// The job queue's tables are apalis's, not entities: read by hand-written SQL.
#[allow(clippy::disallowed_methods)]
pub async fn queue_waits(db: &Database) -> Result<Vec<QueueWait>, sqlx::Error> {
    let rows: Vec<(String, i64, f64)> = match &db.pool {
        Pool::Postgres(pool) => {
            sqlx::query_as(
                "SELECT job_type, count(*), \
                 COALESCE(EXTRACT(EPOCH FROM now() - min(run_at))::float8, 0) \
                 FROM apalis.jobs \
                 WHERE (status IN ('Pending', 'Queued') \
                 OR (status = 'Failed' AND attempts < max_attempts)) AND run_at <= now() \
                 GROUP BY job_type",
            )
            .fetch_all(pool)
            .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_as(
                "SELECT job_type, count(*), \
                 CAST(COALESCE(strftime('%s', 'now') - min(run_at), 0) AS REAL) \
                 FROM Jobs \
                 WHERE (status IN ('Pending', 'Queued') \
                 OR (status = 'Failed' AND attempts < max_attempts)) \
                 AND (run_at IS NULL OR run_at <= strftime('%s', 'now')) \
                 GROUP BY job_type",
            )
            .fetch_all(pool)
            .await?
        }
    };
    Ok(rows
        .into_iter()
        .map(|(queue, depth, age)| QueueWait {
            queue,
            depth,
            oldest_age_s: age.max(0.0),
        })
        .collect())
}

/// Reads what the database knows into the gauges: every queue's depth and oldest wait (every
/// known queue is reported, at 0 when empty), and the pools' connections.
pub async fn observe_database(db: &Database, queues: &[&str]) {
    let metrics = metrics();
    for (pool, size, idle, max) in db.pool_use() {
        let in_use = i64::from(size).saturating_sub(i64::try_from(idle).unwrap_or(i64::MAX));
        let set = |state: &'static str, value: i64| {
            metrics
                .pool_connections
                .get_or_create(&PoolLabels { pool, state })
                .set(value);
        };
        set("in_use", in_use.max(0));
        set("idle", i64::try_from(idle).unwrap_or(i64::MAX));
        set("max", i64::from(max));
    }
    match tokio::time::timeout(Duration::from_secs(5), queue_waits(db)).await {
        Ok(Ok(waits)) => {
            for &queue in queues {
                let wait = waits.iter().find(|w| w.queue == queue);
                let labels = QueueLabels {
                    queue: queue.to_owned(),
                };
                metrics
                    .queue_depth
                    .get_or_create(&labels)
                    .set(wait.map_or(0, |w| w.depth));
                metrics
                    .queue_oldest_age
                    .get_or_create(&labels)
                    .set(wait.map_or(0.0, |w| w.oldest_age_s));
            }
        }
        Ok(Err(err)) => tracing::warn!(error = %err, "reading the queues for the metrics"),
        Err(_) => tracing::warn!("reading the queues for the metrics took over 5 s"),
    }
}

/// The `/metrics` listener, bound before serving so that a bad address stops the process at
/// start.
pub struct MetricsListener {
    acceptor: poem::listener::TcpAcceptor,
    pub local_addr: SocketAddr,
}

/// Binds `METRICS_BIND`.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<MetricsListener> {
    use anyhow::Context;
    use poem::listener::{Acceptor, Listener, TcpListener};
    let acceptor = TcpListener::bind(addr)
        .into_acceptor()
        .await
        .with_context(|| format!("binding METRICS_BIND {addr}"))?;
    let local_addr = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .ok_or_else(|| anyhow::anyhow!("the metrics listener has no socket address"))?;
    Ok(MetricsListener {
        acceptor,
        local_addr,
    })
}

/// Serves `GET /metrics` until `stop` is cancelled.
pub async fn serve(
    listener: MetricsListener,
    db: Database,
    queues: &'static [&'static str],
    stop: CancellationToken,
) {
    use poem::{EndpointExt, Route, Server, get, handler, web::Data};

    #[derive(Clone)]
    struct Queues(&'static [&'static str]);

    #[handler]
    async fn scrape(Data(db): Data<&Database>, Data(queues): Data<&Queues>) -> poem::Response {
        observe_database(db, queues.0).await;
        poem::Response::builder()
            .content_type(CONTENT_TYPE)
            .body(metrics().encode())
    }

    tracing::info!(address = %listener.local_addr, "metrics listening");
    let app = Route::new()
        .at("/metrics", get(scrape))
        .data(db)
        .data(Queues(queues));
    let served = Server::new_with_acceptor(listener.acceptor)
        .run_with_graceful_shutdown(
            app,
            async move { stop.cancelled().await },
            Some(Duration::from_secs(2)),
        )
        .await;
    if let Err(err) = served {
        tracing::warn!(error = %err, "the metrics listener stopped");
    }
}

/// Starts serving the metrics when `METRICS_BIND` is set; the task ends with `stop`.
pub async fn start(
    bind_addr: Option<SocketAddr>,
    db: &Database,
    queues: &'static [&'static str],
    stop: &CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = bind_addr else {
        return Ok(None);
    };
    let listener = bind(addr).await?;
    Ok(Some(tokio::spawn(serve(
        listener,
        db.clone(),
        queues,
        stop.clone(),
    ))))
}

/// Records sqlx's pool acquisitions: sqlx reports each one's wait as a tracing event (target
/// `sqlx::pool::acquire`, field `acquired_after_secs`), which this layer turns into
/// `fleet_db_pool_acquire_seconds`. Installed by [`crate::runtime::init_tracing`].
pub struct AcquireWaits;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AcquireWaits {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if event.metadata().target() != ACQUIRE_TARGET {
            return;
        }
        let mut visitor = AcquiredAfter(None);
        event.record(&mut visitor);
        if let Some(seconds) = visitor.0 {
            metrics().pool_acquire.observe(seconds);
        }
    }
}

/// sqlx's target for pool acquisition events.
pub const ACQUIRE_TARGET: &str = "sqlx::pool::acquire";

struct AcquiredAfter(Option<f64>);

impl tracing::field::Visit for AcquiredAfter {
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        if field.name() == "acquired_after_secs" {
            self.0 = Some(value);
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

/// Counts a pool wait that gave up.
pub fn pool_timed_out() {
    metrics().pool_timeouts.inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_recorded_is_in_the_text_with_its_help_and_type() {
        let metrics = Metrics::new();
        metrics.checkins.inc();
        metrics.job_attempt("email.send", "done", Duration::from_millis(20));
        metrics.http_request("GET", "/v1/orgs/:org/hosts", 200, Duration::from_millis(3));
        let text = metrics.encode();
        // A family is written once something is recorded in it (or it has no labels).
        for family in [
            "# TYPE fleet_db_pool_acquire_seconds histogram",
            "# TYPE fleet_jobs counter",
            "# TYPE fleet_job_duration_seconds histogram",
            "# TYPE fleet_checkins counter",
            "# TYPE fleet_http_request_duration_seconds histogram",
        ] {
            assert!(text.contains(family), "{family} missing from {text}");
        }
        assert!(text.contains("fleet_checkins_total 1"), "{text}");
        assert!(
            text.contains(
                "fleet_http_requests_total{method=\"GET\",route=\"/v1/orgs/:org/hosts\",status=\"200\"} 1"
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
