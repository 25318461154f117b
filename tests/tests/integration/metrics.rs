//! Prometheus metrics (decisions §23): each kind of process, started as the real program with
//! `METRICS_BIND`, serves `/metrics` as Prometheus text (read strictly) carrying the §23
//! series. On Postgres when `TEST_DATABASE_URL` is set, else on SQLite.

use std::time::Duration;

use domain::notifications::jobs::SendEmail;
use platform::{db::Database, jobs::Queue};
use tests::{
    SmtpSink, TestDatabase,
    metrics::{Exposition, free_address, scrape},
    processes::{Program, wait_ready},
};

const API: &str = env!("CARGO_BIN_EXE_fleet-api");
const WORKER: &str = env!("CARGO_BIN_EXE_fleet-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_fleet-scheduler");

/// The families every process serves (a family with nothing recorded yet has no samples and
/// is left out of the text, as the HTTP series of a worker).
const EVERY_PROCESS: [(&str, &str); 9] = [
    ("fleet_queue_depth", "gauge"),
    ("fleet_queue_oldest_job_age_seconds", "gauge"),
    ("fleet_checkins", "counter"),
    ("fleet_notification_deliveries", "counter"),
    ("fleet_identity_cache", "counter"),
    ("fleet_db_pool_connections", "gauge"),
    ("fleet_db_pool_acquire_seconds", "histogram"),
    ("fleet_db_pool_acquire_timeouts", "counter"),
    ("fleet_db_unavailable", "counter"),
];

/// The families of a process that runs jobs.
const JOBS: [(&str, &str); 2] = [
    ("fleet_jobs", "counter"),
    ("fleet_job_duration_seconds", "histogram"),
];

/// The families of a process that answers HTTP.
const HTTP: [(&str, &str); 2] = [
    ("fleet_http_requests", "counter"),
    ("fleet_http_request_duration_seconds", "histogram"),
];

fn assert_families(metrics: &Exposition, families: &[(&str, &str)]) {
    for (name, kind) in families {
        let family = metrics
            .family(name)
            .unwrap_or_else(|| panic!("{name} is missing"));
        assert_eq!(family.kind, *kind, "{name}'s type");
        assert!(family.help.is_some(), "{name} has a HELP");
        assert!(!family.samples.is_empty(), "{name} has samples");
    }
}

/// Every family is there with its type and help; every queue has a depth and an oldest age;
/// the main pool reports its connections, and connections were taken from it.
fn assert_common_series(metrics: &Exposition) {
    assert_families(metrics, &EVERY_PROCESS);
    for queue in domain::QUEUE_NAMES {
        assert!(
            metrics
                .value("fleet_queue_depth", &[("queue", queue)])
                .is_some(),
            "no depth for {queue}"
        );
        assert!(
            metrics
                .value("fleet_queue_oldest_job_age_seconds", &[("queue", queue)])
                .is_some_and(|age| age >= 0.0),
            "no oldest age for {queue}"
        );
    }
    for state in ["in_use", "idle", "max"] {
        assert!(
            metrics
                .value(
                    "fleet_db_pool_connections",
                    &[("pool", "main"), ("state", state)]
                )
                .is_some(),
            "no pool {state}"
        );
    }
    assert!(
        metrics
            .value(
                "fleet_db_pool_connections",
                &[("pool", "main"), ("state", "max")]
            )
            .is_some_and(|max| max >= 1.0)
    );
    assert!(
        metrics
            .value("fleet_db_pool_acquire_seconds_count", &[])
            .is_some_and(|n| n >= 1.0),
        "connections taken from the pool are counted"
    );
    assert_eq!(
        metrics.value("fleet_checkins_total", &[]).map(|v| v >= 0.0),
        Some(true)
    );
    for outcome in ["delivered", "retry", "failed"] {
        assert!(
            metrics
                .value(
                    "fleet_notification_deliveries_total",
                    &[("outcome", outcome)]
                )
                .is_some(),
            "no deliveries {outcome}"
        );
    }
    for result in ["hit", "miss"] {
        assert!(
            metrics
                .value("fleet_identity_cache_total", &[("result", result)])
                .is_some(),
            "no identity cache {result}"
        );
    }
}

/// Scrapes until `done` holds (at most a minute).
async fn scrape_until(addr: &str, done: impl Fn(&Exposition) -> bool) -> Exposition {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = scrape(addr).await;
        if done(&metrics) {
            return metrics;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the metrics never showed what was expected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until something listens at `addr`.
async fn wait_listening(addr: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listened at {addr} within a minute"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_every_series_of_decisions_23_with_route_templates_never_raw_paths() {
    let database = TestDatabase::create().await;
    let sink = SmtpSink::start().await;
    let bind = free_address();
    let metrics_bind = free_address();
    let base = format!("http://{bind}");
    let mut api = Program::start(
        API,
        &[],
        &[
            ("DATABASE_URL", database.url()),
            ("SERVICE_BIND", &bind),
            ("METRICS_BIND", &metrics_bind),
            // One endpoint for the whole process: the api, its worker and its scheduler.
            ("EMBEDDED_WORKERS", "true"),
            ("SMTP_URL", &sink.url()),
        ],
    );
    wait_ready(&base).await;
    let http = reqwest::Client::new();
    let unauthenticated = http
        .get(format!(
            "{base}/v1/orgs/acme/hosts/hst_0123456789abcdefghjkmnpqrs"
        ))
        .send()
        .await
        .expect("answer");
    assert_eq!(unauthenticated.status(), 401);
    let unknown = http
        .get(format!("{base}/v1/nothing/here/12345"))
        .send()
        .await
        .expect("answer");
    assert_eq!(unknown.status(), 404);

    // The embedded scheduler queues its hourly and daily jobs at start, and the worker runs them.
    let metrics = scrape_until(&metrics_bind, |m| {
        m.value("fleet_jobs_total", &[("outcome", "done")])
            .is_some_and(|done| done >= 1.0)
    })
    .await;
    assert_common_series(&metrics);
    assert_families(&metrics, &JOBS);
    assert_families(&metrics, &HTTP);
    let routes: Vec<&String> = metrics
        .family("fleet_http_requests")
        .expect("http requests")
        .samples
        .iter()
        .filter_map(|s| s.labels.get("route"))
        .collect();
    assert!(
        metrics
            .value(
                "fleet_http_requests_total",
                &[("route", "/readyz"), ("status", "200"), ("method", "GET")]
            )
            .is_some_and(|n| n >= 1.0),
        "{routes:?}"
    );
    assert!(
        metrics
            .value(
                "fleet_http_request_duration_seconds_count",
                &[
                    ("route", "/v1/orgs/:param0/hosts/:param1"),
                    ("status", "401")
                ]
            )
            .is_some_and(|n| n >= 1.0),
        "the host's route by its template: {routes:?}"
    );
    assert!(
        metrics
            .value(
                "fleet_http_requests_total",
                &[("route", "unmatched"), ("status", "404")]
            )
            .is_some(),
        "{routes:?}"
    );
    assert!(
        routes.iter().all(|route| !route.contains("acme")
            && !route.contains("hst_")
            && !route.contains("12345")),
        "a raw path in a label: {routes:?}"
    );
    assert!(
        metrics
            .value("fleet_job_duration_seconds_count", &[("outcome", "done")])
            .is_some_and(|n| n >= 1.0)
    );
    api.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_serves_its_jobs_and_the_queue_depths() {
    let database = TestDatabase::create().await;
    let db = Database::connect_url(database.url(), 4)
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    let sink = SmtpSink::start().await;
    let metrics_bind = free_address();
    let mut worker = Program::start(
        WORKER,
        &["--concurrency", "4"],
        &[
            ("DATABASE_URL", database.url()),
            ("METRICS_BIND", &metrics_bind),
            ("SMTP_URL", &sink.url()),
            ("EMAIL_FROM", "Fleet Test <no-reply@fleet.test>"),
        ],
    );
    wait_listening(&metrics_bind).await;
    for i in 0..3 {
        Queue::new(&db)
            .push(SendEmail::new(
                format!("m{i}@fleet.test"),
                "Hello",
                "text".into(),
                "<p>html</p>".into(),
            ))
            .await
            .expect("queued");
    }
    sink.wait_for(3, Duration::from_secs(60)).await;
    let metrics = scrape_until(&metrics_bind, |m| {
        m.value(
            "fleet_jobs_total",
            &[("queue", "email.send"), ("outcome", "done")],
        )
        .is_some_and(|done| done >= 3.0)
    })
    .await;
    assert_common_series(&metrics);
    assert_families(&metrics, &JOBS);
    assert!(
        metrics
            .value(
                "fleet_job_duration_seconds_count",
                &[("queue", "email.send"), ("outcome", "done")]
            )
            .is_some_and(|n| n >= 3.0)
    );
    assert_eq!(
        metrics.value("fleet_queue_depth", &[("queue", "email.send")]),
        Some(0.0),
        "nothing waits once they are sent"
    );
    worker.terminate().await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_process_serves_how_many_jobs_wait_and_for_how_long() {
    let database = TestDatabase::create().await;
    let db = Database::connect_url(database.url(), 4)
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    // No worker runs: these wait.
    for i in 0..3 {
        Queue::new(&db)
            .push(SendEmail::new(
                format!("m{i}@fleet.test"),
                "Hello",
                "text".into(),
                "<p>html</p>".into(),
            ))
            .await
            .expect("queued");
    }
    let metrics_bind = free_address();
    let mut scheduler = Program::start(
        SCHEDULER,
        &[],
        &[
            ("DATABASE_URL", database.url()),
            ("METRICS_BIND", &metrics_bind),
        ],
    );
    wait_listening(&metrics_bind).await;
    let metrics = scrape_until(&metrics_bind, |m| {
        // The scheduler queues its hourly housekeeping at start: it waits too.
        m.value("fleet_queue_depth", &[("queue", "queue.housekeeping")])
            .is_some_and(|depth| depth >= 1.0)
    })
    .await;
    assert_common_series(&metrics);
    assert_eq!(
        metrics.value("fleet_queue_depth", &[("queue", "email.send")]),
        Some(3.0)
    );
    assert!(
        metrics
            .value(
                "fleet_queue_oldest_job_age_seconds",
                &[("queue", "email.send")]
            )
            .is_some_and(|age| age >= 0.0)
    );
    scheduler.terminate().await;
    db.close().await;
}
