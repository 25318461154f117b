//! `bench-notify`: one notification event fanned out to many webhook channels of one
//! organization (issue 12). On a fresh Postgres database (made on `TEST_DATABASE_URL`), it serves the real api in-process, creates the
//! channels through the api (each pointing at one loopback TLS receiver), starts worker
//! processes (`fleet-worker`, beside this binary), writes one event into the outbox as a
//! change would and queues its dispatch, then waits until every delivery is delivered and
//! logged. It prints the time to the last logged delivery, deliveries/s, the event-to-receipt
//! latency (p50, p99, max) and the api's latency (`GET /v1/orgs/acme`, p50/p99) before and
//! during the fan-out.
//!
//! ```text
//! cargo build --release -p tests --bin bench-notify --bin fleet-worker
//! TEST_DATABASE_URL=postgres://postgres@127.0.0.1/test target/release/bench-notify --channels 1000 --workers 2
//! ```

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use clap::Parser;
use domain::roles::Role;
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use tests::{
    As, TestApp,
    receiver::{Receiver, Reply, TestCa},
};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    channels: usize,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Jobs each worker process runs at once per queue.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// `GET /v1/orgs/acme` latencies, one request after another, until `stop`.
async fn probe(
    app: Arc<TestApp>,
    session: tests::Session,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Duration> {
    let mut samples = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let started = Instant::now();
        let answer = app
            .call(As::Session(&session), Method::GET, "/v1/orgs/acme", None)
            .await;
        samples.push(started.elapsed());
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    samples.sort();
    samples
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    anyhow::ensure!(
        std::env::var("TEST_DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")),
        "set TEST_DATABASE_URL=postgres://postgres@127.0.0.1/test (the figure is for Postgres)"
    );
    let app = Arc::new(TestApp::builder().without_worker().start().await);
    app.organization("acme").await;
    let owner = app.member("acme", Role::Owner, "owner@acme.test").await;

    let receipts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let receiver = {
        let receipts = receipts.clone();
        Receiver::with_handler(move |_| {
            if let Ok(mut r) = receipts.lock() {
                r.push(Instant::now());
            }
            Reply::Status(204, String::new())
        })
        .await
    };

    let started = Instant::now();
    let urls: Vec<String> = (0..args.channels)
        .map(|i| receiver.url(&format!("/hook/{i}")))
        .collect();
    for chunk in urls.chunks(16).enumerate() {
        let (c, chunk) = chunk;
        let calls = chunk.iter().enumerate().map(|(i, url)| {
            let app = app.clone();
            let owner = owner.clone();
            let name = format!("hook-{:05}", c * 16 + i);
            let url = url.clone();
            async move {
                let answer = app
                    .call(
                        As::Session(&owner),
                        Method::POST,
                        "/v1/orgs/acme/notification-channels",
                        Some(json!({"kind": "webhook", "name": name, "config": {"url": url}})),
                    )
                    .await;
                assert_eq!(answer.status.as_u16(), 201, "{}", answer.body);
            }
        });
        futures::future::join_all(calls).await;
    }
    println!(
        "created {} webhook channels in {:.1} s",
        args.channels,
        started.elapsed().as_secs_f64()
    );

    let worker = std::env::current_exe()?
        .parent()
        .map(|d| d.join("fleet-worker"))
        .ok_or_else(|| anyhow::anyhow!("no directory for fleet-worker"))?;
    let ca = TestCa::get().file.display().to_string();
    let env = [
        ("SECRETS_KEY", tests::TEST_SECRETS_KEY),
        ("OUTBOUND_CA_FILE", ca.as_str()),
        ("OUTBOUND_ALLOW_PRIVATE", "true"),
    ];
    let mut workers: Vec<_> = (0..args.workers)
        .map(|_| {
            tests::processes::spawn_worker_with(
                &worker.display().to_string(),
                app.database.url(),
                &app.smtp.url(),
                args.concurrency,
                &env,
            )
        })
        .collect();
    // Let the workers start and settle.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let baseline = tokio::spawn(probe(app.clone(), owner.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let baseline = baseline.await?;

    let org = entities::organizations::Entity::find()
        .filter(entities::organizations::Column::Slug.eq("acme"))
        .one(&app.state.db.orm)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no organization"))?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let during = tokio::spawn(probe(app.clone(), owner.clone(), stop.clone()));
    // The event, as a change writes it: in a transaction, then its dispatch is queued.
    let emitted = Instant::now();
    let txn = app.state.db.begin_write().await?;
    domain::notifications::outbox::emit(
        &txn,
        org.id,
        domain::notifications::EventKind::HostOffline,
        Some("hst_bench".into()),
        None,
        json!({"host": {"id": "hst_bench", "hostname": "bench-1"}}),
        app.clock_now(),
    )
    .await?;
    txn.commit().await?;
    domain::notifications::jobs::dispatch_soon(&app.state.queue).await;

    let deadline = Instant::now() + Duration::from_secs(120);
    let logged = loop {
        let delivered = entities::notification_deliveries::Entity::find()
            .filter(entities::notification_deliveries::Column::Status.eq("delivered"))
            .count(&app.state.db.orm)
            .await?;
        if delivered as usize >= args.channels {
            break emitted.elapsed();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {delivered} delivered after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let during = during.await?;
    let attempts = entities::notification_attempts::Entity::find()
        .count(&app.state.db.orm)
        .await?;

    let mut latencies: Vec<Duration> = receipts
        .lock()
        .map(|r| {
            r.iter()
                .map(|t| t.saturating_duration_since(emitted))
                .collect()
        })
        .unwrap_or_default();
    latencies.sort();
    println!(
        "fan-out: {} channels, {} workers x {} concurrency",
        args.channels, args.workers, args.concurrency
    );
    println!(
        "all {} delivered and logged ({attempts} attempts) in {:.2} s: {:.0} deliveries/s",
        args.channels,
        logged.as_secs_f64(),
        args.channels as f64 / logged.as_secs_f64()
    );
    println!(
        "event to receipt: p50 {}, p99 {}, max {} ({} received)",
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 99.0)),
        ms(latencies.last().copied().unwrap_or_default()),
        latencies.len()
    );
    println!(
        "api GET /v1/orgs/acme before: p50 {}, p99 {} ({} requests); during: p50 {}, p99 {} ({} requests)",
        ms(percentile(&baseline, 50.0)),
        ms(percentile(&baseline, 99.0)),
        baseline.len(),
        ms(percentile(&during, 50.0)),
        ms(percentile(&during, 99.0)),
        during.len()
    );
    for w in &mut workers {
        tests::processes::stop_gracefully(w).await;
    }
    Ok(())
}
