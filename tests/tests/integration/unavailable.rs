//! When the database cannot serve (no connection comes free, its disk is full, the server is
//! gone), requests answer 503 `service-unavailable` with `Retry-After` within about five
//! seconds: never a 500, never a half-minute hang. And the service recovers by itself.

use std::time::{Duration, Instant};

use platform::db::Pool;
use reqwest::Method;
use sea_orm::ConnectionTrait;
use serde_json::json;
use tests::{
    As, TestApp, TestDatabase,
    metrics::free_address,
    processes::{Program, wait_ready},
};
use tokio::{io::AsyncWriteExt, net::TcpListener, sync::watch};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_on_the_embedded_database_answers_503_and_the_service_recovers_when_space_returns()
 {
    let app = TestApp::new().await;
    if app.database.is_postgres() {
        app.stop().await;
        return;
    }
    let owner = app.sign_up("owner@fleet.test", "acme").await;
    let host = app.host("acme", "web-1", &[]).await;
    // Notes of 9,000 characters need pages of their own: no room is left for them.
    let write_notes = |notes: String| {
        let app = &app;
        let owner = &owner;
        let path = format!("/v1/orgs/acme/hosts/{host}");
        async move {
            let started = Instant::now();
            let answer = app
                .call(
                    As::Session(owner),
                    Method::PATCH,
                    &path,
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
    };
    let writer = app.state.db.writer();
    // A quota at the file's size, then filled to the brim: SQLite answers SQLITE_FULL to any
    // write that needs room, as on a full disk.
    writer
        .execute_unprepared("CREATE TABLE filler (b BLOB NOT NULL)")
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

    let answer = write_notes("a".repeat(9_000)).await;
    assert_service_unavailable(&answer);

    writer
        .execute_unprepared("PRAGMA max_page_count = 1073741823")
        .await
        .expect("space returns");
    let (status, _, body, _) = write_notes("b".repeat(9_000)).await;
    assert_eq!(status.as_u16(), 200, "recovered: {body}");
    app.stop().await;
}

/// A TCP relay to Postgres that can be cut (every connection reset, new ones refused) and
/// restored, as a database server going away and coming back.
struct Relay {
    addr: String,
    up: watch::Sender<bool>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let (up, watching) = watch::channel(true);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut watching = watching.clone();
                if !*watching.borrow() {
                    let _ = client.shutdown().await;
                    continue;
                }
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = watching.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Relay { addr, up }
    }

    fn cut(&self) {
        let _ = self.up.send(false);
    }

    fn restore(&self) {
        let _ = self.up.send(true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_gone_the_api_answers_503_within_seconds_and_recovers_when_it_returns() {
    let database = TestDatabase::create().await;
    if !database.is_postgres() {
        return;
    }
    let mut url = url::Url::parse(database.url()).expect("url");
    let target = format!(
        "{}:{}",
        url.host_str().expect("host"),
        url.port().unwrap_or(5432)
    );
    let relay = Relay::start(target).await;
    let (host, port) = relay.addr.rsplit_once(':').expect("address");
    url.set_host(Some(host)).expect("host");
    url.set_port(Some(port.parse().expect("port")))
        .expect("port");
    url.set_query(Some("sslmode=disable"));
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

    relay.cut();
    for _ in 0..3 {
        let answer = magic_link(&base).await;
        assert_service_unavailable(&answer);
    }

    relay.restore();
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
    }
    api.terminate().await;
}
