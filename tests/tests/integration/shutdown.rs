//! Graceful stops: a worker stopped while a job waits to be tried again hands the job back to
//! the queue at once, and the api stops within a bounded time whatever its clients' connections
//! are doing. The real programs, on Postgres when `TEST_DATABASE_URL` is set, else on SQLite.

use std::time::Duration;

use domain::notifications::jobs::SendEmail;
use platform::{
    db::{Database, Pool},
    jobs::Queue,
};
use tests::{
    SmtpSink, TestDatabase,
    metrics::{free_address, scrape},
    processes::{Program, wait_ready},
};
use tokio::io::AsyncWriteExt;

const API: &str = env!("CARGO_BIN_EXE_fleet-api");
const WORKER: &str = env!("CARGO_BIN_EXE_fleet-worker");

/// The status, attempts and lock of the only `email.send` job.
async fn email_job(db: &Database) -> (String, i64, Option<String>) {
    match &db.pool {
        Pool::Postgres(pool) => sqlx::query_as(
            "SELECT status, attempts::int8, lock_by FROM apalis.jobs WHERE job_type = 'email.send'",
        )
        .fetch_one(pool)
        .await
        .expect("the job"),
        Pool::Sqlite(pool) => sqlx::query_as(
            "SELECT status, attempts, lock_by FROM Jobs WHERE job_type = 'email.send'",
        )
        .fetch_one(pool)
        .await
        .expect("the job"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_to_be_retried_when_its_worker_stops_goes_back_to_the_queue_and_is_sent_after()
 {
    let database = TestDatabase::create().await;
    let db = Database::connect_url(database.url(), 4)
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    // Nothing listens here: every attempt to send fails, and the job waits to be tried again.
    let refused = format!("smtp://{}", free_address());
    let metrics_bind = free_address();
    let mut failing = Program::start(
        WORKER,
        &["--concurrency", "2"],
        &[
            ("DATABASE_URL", database.url()),
            ("SMTP_URL", &refused),
            ("METRICS_BIND", &metrics_bind),
            ("EMAIL_FROM", "Fleet Test <no-reply@fleet.test>"),
        ],
    );
    Queue::new(&db)
        .push(SendEmail::new(
            "member@fleet.test",
            "Kept",
            "text".into(),
            "<p>html</p>".into(),
        ))
        .await
        .expect("queued");
    // Its first attempt failed: it now waits a second or more for the next.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if tokio::net::TcpStream::connect(&metrics_bind).await.is_ok() {
            let metrics = scrape(&metrics_bind).await;
            if metrics
                .value(
                    "fleet_jobs_total",
                    &[("queue", "email.send"), ("outcome", "retry")],
                )
                .is_some_and(|n| n >= 1.0)
            {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first attempt never failed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let took = failing.terminate().await;
    assert!(
        took < Duration::from_secs(10),
        "the worker waited {took:?} for a job's retry before stopping"
    );
    let (status, attempts, _) = email_job(&db).await;
    assert!(
        status == "Failed" || status == "Pending",
        "the job is back in the queue, not {status} (a worker that is gone holds it)"
    );
    assert!(attempts >= 1, "its attempts are kept: {attempts}");

    // The next worker sends it, well before a dead worker's jobs would be recovered.
    let sink = SmtpSink::start().await;
    let mut next = Program::start(
        WORKER,
        &["--concurrency", "2"],
        &[
            ("DATABASE_URL", database.url()),
            ("SMTP_URL", &sink.url()),
            ("EMAIL_FROM", "Fleet Test <no-reply@fleet.test>"),
        ],
    );
    let sent = sink
        .wait_for_message_to("member@fleet.test", Duration::from_secs(60))
        .await;
    assert_eq!(sent.header("Subject").as_deref(), Some("Kept"));
    next.terminate().await;
    db.close().await;
}

/// The api stopped (SIGTERM) while a client holds a connection in `state`: how long it took.
async fn stop_with_a_client_connection(state: &[u8]) -> Duration {
    let database = TestDatabase::create().await;
    let bind = free_address();
    let base = format!("http://{bind}");
    let mut api = Program::start(
        API,
        &[],
        &[
            ("DATABASE_URL", database.url()),
            ("SERVICE_BIND", &bind),
            ("EMBEDDED_WORKERS", "false"),
        ],
    );
    wait_ready(&base).await;
    let mut connection = tokio::net::TcpStream::connect(&bind)
        .await
        .expect("connect");
    connection.write_all(state).await.expect("write");
    connection.flush().await.expect("flush");
    // The request (or its first bytes) has reached the api.
    let probe = reqwest::get(format!("{base}/healthz"))
        .await
        .expect("probe");
    assert_eq!(probe.status(), 200);
    let took = api.terminate().await;
    drop(connection);
    took
}

/// How long the api may take to stop; its in-flight requests get `DRAIN_TIMEOUT` (10 s).
const STOP_BOUND: Duration = Duration::from_secs(12);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_stops_at_once_when_a_client_has_sent_half_a_request_head() {
    let took =
        stop_with_a_client_connection(b"GET /healthz HTTP/1.1\r\nHost: fleet\r\nX-Half").await;
    assert!(
        took < Duration::from_secs(3),
        "the api took {took:?} to stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_stops_within_its_bound_when_a_client_stalls_in_a_request_body() {
    let took = stop_with_a_client_connection(
        b"POST /v1/auth/magic-link HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"email\":",
    )
    .await;
    assert!(took < STOP_BOUND, "the api took {took:?} to stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_stops_at_once_with_an_idle_http2_connection() {
    let took = stop_with_a_client_connection(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    )
    .await;
    assert!(
        took < Duration::from_secs(3),
        "the api took {took:?} to stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_stops_at_once_with_an_idle_keep_alive_connection() {
    let took = stop_with_a_client_connection(b"GET /healthz HTTP/1.1\r\nHost: fleet\r\n\r\n").await;
    assert!(
        took < Duration::from_secs(3),
        "the api took {took:?} to stop"
    );
}
