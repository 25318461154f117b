//! When the database cannot serve (no connection comes free, its disk is full, the server is
//! gone), requests answer 503 `service-unavailable` with `Retry-After` within about five
//! seconds: never a 500, never a half-minute hang. And the service recovers by itself.

use std::time::{Duration, Instant};

use platform::db::Pool;
use reqwest::Method;
use sea_orm::{ConnectionTrait, EntityTrait};
use serde_json::json;
use tests::{
    As, TestApp,
    disk::Tmpfs,
    metrics::free_address,
    postgres_cluster::PrivateCluster,
    processes::{Program, wait_ready},
};

const API: &str = env!("CARGO_BIN_EXE_fleet-api");

async fn magic_link(base: &str) -> (reqwest::StatusCode, Option<String>, String, Duration) {
    let started = Instant::now();
    let answer = reqwest::Client::new()
        .post(format!("{base}/v1/auth/magic-link"))
        .json(&json!({"email": "someone@fleet.test"}))
        .send()
        .await
        .expect("an answer");
    let status = answer.status();
    let retry_after = answer
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = answer.text().await.expect("body");
    (status, retry_after, body, started.elapsed())
}

fn assert_service_unavailable(answer: &(reqwest::StatusCode, Option<String>, String, Duration)) {
    let (status, retry_after, body, took) = answer;
    assert_eq!(status.as_u16(), 503, "{body}");
    let problem: serde_json::Value = serde_json::from_str(body).expect("a problem body");
    assert_eq!(problem["type"], "service-unavailable", "{body}");
    assert_eq!(problem["status"], 503);
    assert_eq!(retry_after.as_deref(), Some("5"));
    assert!(*took < Duration::from_secs(8), "answered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_finds_no_free_connection_is_refused_503_after_five_seconds() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@fleet.test", "acme").await;
    let list_hosts = || {
        let app = &app;
        let owner = &owner;
        async move {
            let started = Instant::now();
            let answer = app
                .call(As::Session(owner), Method::GET, "/v1/orgs/acme/hosts", None)
                .await;
            (
                answer.status,
                answer.header("retry-after").map(str::to_owned),
                answer.body.clone(),
                started.elapsed(),
            )
        }
    };
    assert_eq!(list_hosts().await.0.as_u16(), 200);
    let timeouts_before = platform::metrics::metrics().pool_timeouts.get();
    // Every pooled connection is taken (on SQLite the writing one too), as a stuck transaction
    // or a stalled database would hold them: more takers wait than the pool has connections,
    // each keeping what it gets, so that one given back goes to a taker, not to the request.
    let release = tokio_util::sync::CancellationToken::new();
    let mut takers = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let pool = app.state.db.pool.clone();
        let release = release.clone();
        takers.spawn(async move {
            match pool {
                Pool::Postgres(pool) => {
                    if let Ok(held) = pool.acquire().await {
                        release.cancelled().await;
                        drop(held);
                    }
                }
                Pool::Sqlite(pool) => {
                    if let Ok(held) = pool.acquire().await {
                        release.cancelled().await;
                        drop(held);
                    }
                }
            }
        });
    }
    let writer = match &app.state.db.pool {
        Pool::Sqlite(_) => Some(
            app.state
                .db
                .begin_write()
                .await
                .expect("the writing connection"),
        ),
        Pool::Postgres(_) => None,
    };
    // The takers are queued for the pool before the request.
    tokio::task::yield_now().await;
    let answer = list_hosts().await;
    assert_service_unavailable(&answer);
    assert!(
        answer.3 >= Duration::from_secs(4),
        "it waited its bounded time first: {:?}",
        answer.3
    );
    assert!(platform::metrics::metrics().pool_timeouts.get() > timeouts_before);

    release.cancel();
    takers.join_all().await;
    drop(writer);
    let (status, _, body, _) = list_hosts().await;
    assert_eq!(status.as_u16(), 200, "recovered: {body}");
    app.stop().await;
}

/// Fills the embedded database's disk: a quota at the file's size on the writing connection,
/// filled to the brim, so that SQLite answers SQLITE_FULL to any write that needs room, as on a
/// full disk.
async fn fill_the_disk(app: &TestApp) {
    let writer = app.state.db.writer();
    writer
        .execute_unprepared("CREATE TABLE IF NOT EXISTS filler (b BLOB NOT NULL)")
        .await
        .expect("filler");
    let pages: i64 = writer
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DatabaseBackend::Sqlite,
            "PRAGMA page_count",
        ))
        .await
        .expect("page count")
        .expect("a row")
        .try_get_by_index(0)
        .expect("pages");
    writer
        .execute_unprepared(&format!("PRAGMA max_page_count = {}", pages + 2))
        .await
        .expect("quota");
    while writer
        .execute_unprepared("INSERT INTO filler (b) VALUES (randomblob(512))")
        .await
        .is_ok()
    {}
}

/// Space returns (the quota lifted; a writing connection opened since never had it).
async fn free_the_disk(app: &TestApp) {
    app.state
        .db
        .writer()
        .execute_unprepared("PRAGMA max_page_count = 1073741823")
        .await
        .expect("space returns");
}

/// Sets a host's notes as its owner; the answer, its `Retry-After` and body, and how long it took.
async fn write_notes(
    app: &TestApp,
    owner: &tests::Session,
    host: &str,
    notes: String,
) -> (reqwest::StatusCode, Option<String>, String, Duration) {
    let started = Instant::now();
    let answer = app
        .call(
            As::Session(owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/hosts/{host}"),
            Some(json!({"notes": notes})),
        )
        .await;
    (
        answer.status,
        answer.header("retry-after").map(str::to_owned),
        answer.body.clone(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_on_the_embedded_database_answers_503_and_the_service_recovers_when_space_returns()
 {
    let app = TestApp::builder().embedded().start().await;
    let owner = app.sign_up("owner@fleet.test", "acme").await;
    let host = app.host("acme", "web-1", &[]).await;
    fill_the_disk(&app).await;

    // Notes of 9,000 characters need pages of their own: no room is left for them.
    let answer = write_notes(&app, &owner, &host, "a".repeat(9_000)).await;
    assert_service_unavailable(&answer);

    free_the_disk(&app).await;
    let (status, _, body, _) = write_notes(&app, &owner, &host, "b".repeat(9_000)).await;
    assert_eq!(status.as_u16(), 200, "recovered: {body}");
    app.stop().await;
}

/// On a real full disk (a tmpfs of the test's own, filled to the last byte) SQLite fails a write
/// transaction at its COMMIT, when the WAL must grow. Every write answered 200, while the disk
/// was full or after space returned, must be there after a restart: none may have run inside a
/// transaction that the failed COMMIT left open on the writing connection, which nothing would
/// ever commit. (A write while the disk is full may fit in the WAL frames the failed one had
/// already taken, and then rightly answers 200: what it must not do is answer 200 and be lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_answered_after_the_disk_fills_and_frees_are_all_there_after_a_restart() {
    const WRITES: usize = 20;
    let disk = Tmpfs::mount(64).expect("a small disk (the test runs as root)");
    let app = TestApp::builder().embedded_in(disk.path()).start().await;
    let owner = app.sign_up("owner@fleet.test", "acme").await;
    let mut hosts = Vec::new();
    for n in 0..WRITES {
        hosts.push(app.host("acme", &format!("web-{n}"), &[]).await);
    }
    // Written only while the disk is full.
    let mut full_hosts = Vec::new();
    for n in 0..2 {
        full_hosts.push(app.host("acme", &format!("full-{n}"), &[]).await);
    }
    // The WAL emptied (as a checkpoint leaves it), so that the next commit needs room.
    app.state
        .db
        .writer()
        .execute_unprepared("PRAGMA wal_checkpoint(TRUNCATE)")
        .await
        .expect("checkpoint");
    disk.fill().expect("fill the disk");
    let first = write_notes(&app, &owner, &hosts[0], "x".repeat(9_000)).await;
    assert_service_unavailable(&first);
    // Every later write needs room too: each is refused 503, or answered 200 and kept.
    let mut while_full = Vec::new();
    for host in &full_hosts {
        while_full.push(
            write_notes(&app, &owner, host, format!("full:{}", "x".repeat(9_000)))
                .await
                .0
                .as_u16(),
        );
    }
    disk.free().expect("space returns");

    for (n, host) in hosts.iter().enumerate() {
        let (status, _, body, _) =
            write_notes(&app, &owner, host, format!("{n}:{}", "y".repeat(9_000))).await;
        assert_eq!(status.as_u16(), 200, "write {n}: {body}");
    }

    let database = app.stop_keeping_database().await;
    let reopened = platform::db::Database::connect_url(database.url(), 2)
        .await
        .expect("the database opens again");
    let notes_of = |host: &str| {
        let id = platform::ids::HostId::parse(host).expect("a host id");
        let db = &reopened.orm;
        async move {
            entities::hosts::Entity::find_by_id(uuid::Uuid::from(id))
                .one(db)
                .await
                .expect("read the host")
                .expect("the host")
                .notes
        }
    };
    let mut missing = Vec::new();
    for (n, host) in hosts.iter().enumerate() {
        let notes = notes_of(host).await;
        if !notes.is_some_and(|notes| notes.starts_with(&format!("{n}:"))) {
            missing.push(format!("web-{n}"));
        }
    }
    for (n, (host, status)) in full_hosts.iter().zip(&while_full).enumerate() {
        let kept = notes_of(host)
            .await
            .is_some_and(|notes| notes.starts_with("full:"));
        if *status == 200 && !kept {
            missing.push(format!("full-{n}"));
        }
    }
    reopened.close().await;
    assert!(
        missing.is_empty() && while_full.iter().all(|s| [200, 503].contains(s)),
        "{} answered writes lost after the restart: {missing:?}; \
         answers while the disk was full, after the first 503: {while_full:?}",
        missing.len()
    );
}

/// The Postgres server stops (as a crash does: `pg_ctl stop -m immediate`) under a running api
/// and starts again. The server is a private one of the test's own, whatever database the other
/// tests run on, so that this runs in both runs and never stops the machine's shared server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_gone_the_api_answers_503_within_seconds_and_recovers_when_it_returns() {
    let cluster = PrivateCluster::start().await;
    let url = cluster.url("fleet");
    let bind = free_address();
    let base = format!("http://{bind}");
    let mut api = Program::start(
        API,
        &[],
        &[
            ("DATABASE_URL", url.as_str()),
            ("SERVICE_BIND", &bind),
            ("EMBEDDED_WORKERS", "false"),
        ],
    );
    wait_ready(&base).await;
    let (status, _, body, _) = magic_link(&base).await;
    assert_eq!(status.as_u16(), 202, "{body}");

    cluster.kill();
    for _ in 0..3 {
        let answer = magic_link(&base).await;
        assert_service_unavailable(&answer);
    }

    cluster.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body, _) = magic_link(&base).await;
        if status.as_u16() == 202 {
            break;
        }
        assert_eq!(status.as_u16(), 503, "{body}");
        assert!(
            Instant::now() < deadline,
            "not recovered within 10 s: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.terminate().await;
}
