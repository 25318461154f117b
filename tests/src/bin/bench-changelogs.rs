//! `bench-changelogs`: a fleet change that brings 2,000 new changes over 500 source packages
//! (four binary packages per source, as openssl brings openssl, libssl3, libssl-dev and
//! openssl-doc), on one Ubuntu release (issue 14). With a test app on a fresh database
//! (`TEST_DATABASE_URL`, else SQLite) and its in-process worker, it queues the changelog
//! fetches those changes ask for the way an evaluation does (`domain::intel::cache`, which
//! deduplicates them to one per source package and version), serves every changelog from one
//! loopback TLS archive (the real `openssl` changelog of this machine, gzipped, after a delay
//! standing in for the archive's latency), and waits until every one is cached and readable.
//! It prints the time from queueing to the last changelog visible, fetches/s, and the most
//! fetches the archive saw in flight at once (the worker allows 8).
//!
//! ```text
//! cargo build --release -p tests --bin bench-changelogs
//! target/release/bench-changelogs --sources 500 --packages-per-source 4 --latency-ms 20
//! ```

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use clap::Parser;
use domain::intel::changelog::ChangelogStatus;
use entities::changelogs;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use tests::{
    TestApp,
    receiver::{Receiver, Reply},
};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 500)]
    sources: usize,
    #[arg(long, default_value_t = 4)]
    packages_per_source: usize,
    /// How long the archive takes to answer each fetch.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
}

const VERSION: &str = "3.0.19-1~deb12u2";

/// The most requests the archive held at once: each is held for `latency` from its arrival.
fn most_in_flight(archive: &Receiver, latency: Duration) -> usize {
    let arrivals: Vec<Instant> = archive.received().iter().map(|r| r.at).collect();
    arrivals
        .iter()
        .map(|start| {
            arrivals
                .iter()
                .filter(|other| *other >= start && other.duration_since(*start) < latency)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/changelogs/openssl.changelog.Debian.gz"
    ))?;
    let latency = Duration::from_millis(args.latency_ms);
    let archive = Receiver::with_handler(move |_| {
        Reply::Delayed(
            latency,
            Box::new(Reply::Full {
                status: 200,
                headers: vec![("Content-Encoding".into(), "gzip".into())],
                body: body.clone(),
            }),
        )
    })
    .await;
    let app = TestApp::builder()
        .changelog_urls(
            &archive.url("/ubuntu/{component}/{prefix}/{source}/{source}_{version}/changelog"),
            &archive.url("/debian/{component}/{prefix}/{source}/{source}_{version}_changelog"),
        )
        .start()
        .await;
    // What 2,000 changes ask for: (distro, source, target version) per change.
    let changes: Vec<(String, String, String)> = (0..args.sources)
        .flat_map(|s| {
            (0..args.packages_per_source).map(move |_| {
                (
                    "ubuntu".to_owned(),
                    format!("src{s:04}"),
                    VERSION.to_owned(),
                )
            })
        })
        .collect();
    let wanted: BTreeSet<_> = changes.iter().cloned().collect();
    let started = Instant::now();
    let queued =
        domain::intel::cache::queue_missing(&app.state.db, wanted, app.clock_now()).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let pending = changelogs::Entity::find()
            .filter(changelogs::Column::Status.eq(ChangelogStatus::Pending))
            .count(&app.state.db.orm)
            .await?;
        if pending == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{pending} changelogs still pending"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    let available = changelogs::Entity::find()
        .filter(changelogs::Column::Status.eq("found"))
        .count(&app.state.db.orm)
        .await?;
    // Visible: read back the way the proposal detail reads them.
    let keys: BTreeSet<_> = changes.into_iter().collect();
    let read = Instant::now();
    let rows = domain::intel::cache::lookup(&app.state.db.orm, &keys).await?;
    let entries: usize = rows
        .iter()
        .map(|r| r.entries.read().map(|e| e.len()).unwrap_or(0))
        .sum();
    println!(
        "{} changes over {} source packages: {queued} fetches queued, {available} available, \
         {entries} entries cached",
        args.sources * args.packages_per_source,
        args.sources
    );
    println!(
        "queued → every changelog visible: {:.2} s ({:.0} fetches/s), archive latency {} ms",
        elapsed.as_secs_f64(),
        queued as f64 / elapsed.as_secs_f64(),
        args.latency_ms
    );
    println!(
        "most fetches in flight at once: {} (limit {} per worker); reading all back: {:.1} ms",
        most_in_flight(&archive, latency),
        worker::CHANGELOG_FETCHES,
        read.elapsed().as_secs_f64() * 1000.0
    );
    anyhow::ensure!(available as usize == queued, "every changelog is available");
    app.stop().await;
    Ok(())
}
