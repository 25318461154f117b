//! The test harness: every test gets a running api on a random port, a fresh database (SQLite in
//! a temp dir, or a fresh Postgres database when `TEST_DATABASE_URL` is set), a real SMTP sink on
//! loopback, and a clock it controls.

// Test code seeds and inspects the database directly, across organizations and by hand-written
// SQL: the row layer guards the service, not its tests.
#![allow(clippy::disallowed_methods)]

pub mod agent;
pub mod database;
pub mod disk;
pub mod dns;
pub mod identity;
pub mod jobs;
pub mod limits;
pub mod metrics;
pub mod oidc;
pub mod payments;
pub mod postgres_cluster;
pub mod processes;
pub mod processor;
pub mod proxy;
pub mod receiver;
pub mod smtp_sink;
pub mod wrk;

use std::{sync::Arc, time::Duration};

use api::AppState;
use chrono::{TimeZone, Utc};
use platform::{
    clock::ManualClock,
    config::{Config, RawConfig},
    db::Database,
    jobs::Queue,
};
use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use database::TestDatabase;
pub use identity::{As, Session};
pub use smtp_sink::SmtpSink;

/// Where emails in tests link to.
pub const BASE_URL: &str = "http://fleet.test";

pub struct TestApp {
    pub base: String,
    pub http: reqwest::Client,
    pub state: AppState,
    pub clock: ManualClock,
    pub smtp: SmtpSink,
    pub database: TestDatabase,
    /// Whether the app's own worker runs in-process (see [`TestAppBuilder::without_worker`]).
    pub worker_running: bool,
    /// What hosts report, kept between policy evaluations as a long-running worker keeps it:
    /// every worker the app runs (its own, or [`TestApp::run_pending_jobs`]'s) shares it.
    pub reports: domain::policy::Reports,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The organization limit of a test that does not choose one: each caller's share (half) is
/// still far beyond what a test sends, while the clock stands still.
const DEFAULT_BURST: u32 = 100_000;
const DEFAULT_PER_SECOND: f64 = 1_000.0;

/// How a test wants its app.
pub struct TestAppBuilder {
    worker: bool,
    rate_limit_burst: Option<u32>,
    rate_limit_per_second: Option<f64>,
    trusted_proxies: Option<String>,
    rate_limit_store: Option<String>,
    secrets_key: bool,
    allow_private: bool,
    pagerduty_events_url: Option<String>,
    payments_webhook_secret: Option<String>,
    payments_api_url: Option<String>,
    default_plan: Option<String>,
    changelog_url_ubuntu: Option<String>,
    changelog_url_debian: Option<String>,
    kev_url: Option<String>,
    agent_manifest_url: Option<String>,
    dns_resolver: Option<String>,
    real_agents: bool,
    embedded: bool,
    embedded_in: Option<std::path::PathBuf>,
    database_server: Option<String>,
}

/// The `SECRETS_KEY` of every test app that has one (base64 of 32 bytes).
pub const TEST_SECRETS_KEY: &str = "dGVzdC1zZWNyZXRzLWtleS0zMi1ieXRlcy1sb25nISE=";

impl Default for TestAppBuilder {
    fn default() -> Self {
        TestAppBuilder {
            worker: true,
            rate_limit_burst: None,
            rate_limit_per_second: None,
            trusted_proxies: None,
            rate_limit_store: None,
            secrets_key: true,
            allow_private: true,
            pagerduty_events_url: None,
            payments_webhook_secret: None,
            payments_api_url: None,
            default_plan: None,
            changelog_url_ubuntu: None,
            changelog_url_debian: None,
            kev_url: None,
            agent_manifest_url: None,
            dns_resolver: None,
            real_agents: false,
            embedded: false,
            embedded_in: None,
            database_server: None,
        }
    }
}

/// The webhook secret of [`TestAppBuilder::payments`] (the one of the signature vector).
pub const PAYMENTS_WEBHOOK_SECRET: &str = "whsec_test_payments_0123456789abcdef";
/// The processor API key tests configure.
pub const PAYMENTS_API_KEY: &str = "sk_test_fleet";

impl TestAppBuilder {
    /// Do not run the worker in-process (jobs stay queued).
    pub fn without_worker(mut self) -> Self {
        self.worker = false;
        self
    }

    /// The organization's limit (`RATE_LIMIT_BURST`, `RATE_LIMIT_PER_SECOND`). Without it a
    /// test gets a limit no ordinary test reaches, so that only rate-limit tests meet it.
    pub fn rate_limit(mut self, burst: u32, per_second: f64) -> Self {
        self.rate_limit_burst = Some(burst);
        self.rate_limit_per_second = Some(per_second);
        self
    }

    /// `TRUSTED_PROXIES`: the networks whose `X-Forwarded-For` the api believes. Tests connect
    /// from 127.0.0.1, so `"127.0.0.1/32"` makes the test client a trusted proxy.
    /// Where organizations' limits are kept (`RATE_LIMIT_STORE`: memory, the default, or database).
    pub fn rate_limit_store(mut self, store: &str) -> Self {
        self.rate_limit_store = Some(store.to_owned());
        self
    }

    pub fn trusted_proxies(mut self, cidrs: &str) -> Self {
        self.trusted_proxies = Some(cidrs.to_owned());
        self
    }

    /// No `SECRETS_KEY`: operations that store credentials answer 503 `not-configured`.
    pub fn without_secrets_key(mut self) -> Self {
        self.secrets_key = false;
        self
    }

    /// `OUTBOUND_ALLOW_PRIVATE` off: the guard refuses loopback and private destinations, so
    /// the tests' own receivers (on loopback) are refused too. By default tests allow them.
    pub fn outbound_guarded(mut self) -> Self {
        self.allow_private = false;
        self
    }

    /// `PAGERDUTY_EVENTS_URL`: where PagerDuty channels send.
    pub fn pagerduty_events_url(mut self, url: &str) -> Self {
        self.pagerduty_events_url = Some(url.to_owned());
        self
    }

    /// A deployment that takes payments: `PAYMENTS_WEBHOOK_SECRET` set (to
    /// [`PAYMENTS_WEBHOOK_SECRET`]), so organizations without a subscription are on free.
    pub fn payments(mut self) -> Self {
        self.payments_webhook_secret = Some(PAYMENTS_WEBHOOK_SECRET.to_owned());
        self
    }

    /// `PAYMENTS_API_URL` (with `PAYMENTS_API_KEY` = [`PAYMENTS_API_KEY`]): where checkout
    /// sessions are created and usage is reported, e.g. a loopback test processor.
    pub fn payments_api(mut self, url: &str) -> Self {
        self.payments_api_url = Some(url.to_owned());
        self
    }

    /// `CHANGELOG_URL_UBUNTU` and `CHANGELOG_URL_DEBIAN`: the changelog URL templates.
    pub fn changelog_urls(mut self, ubuntu: &str, debian: &str) -> Self {
        self.changelog_url_ubuntu = Some(ubuntu.to_owned());
        self.changelog_url_debian = Some(debian.to_owned());
        self
    }

    /// `KEV_URL`: the known-exploited catalogue feed.
    pub fn kev_url(mut self, url: &str) -> Self {
        self.kev_url = Some(url.to_owned());
        self
    }

    /// `AGENT_MANIFEST_URL`: the agent release manifest.
    pub fn agent_manifest_url(mut self, url: &str) -> Self {
        self.agent_manifest_url = Some(url.to_owned());
        self
    }

    /// `DEFAULT_PLAN`.
    pub fn default_plan(mut self, plan: &str) -> Self {
        self.default_plan = Some(plan.to_owned());
        self
    }

    /// `DNS_RESOLVER`: where SSO domain claims are looked up (a [`dns::TestDns`]).
    pub fn dns_resolver(mut self, addr: &str) -> Self {
        self.dns_resolver = Some(addr.to_owned());
        self
    }

    /// For agents outside the test process (the real `fleet-agent`), which sign with the
    /// address they connect to and the host's clock: the service names itself by the address it
    /// listens on (`SERVICE_BASE_URL`), and its clock starts at the real time (and stands
    /// still, as every test clock does).
    pub fn for_real_agents(mut self) -> Self {
        self.real_agents = true;
        self
    }

    /// On the embedded default (SQLite) whatever `TEST_DATABASE_URL` says: for what only the
    /// embedded default does, so that the Postgres run tests it too instead of skipping it.
    pub fn embedded(mut self) -> Self {
        self.embedded = true;
        self
    }

    /// [`TestAppBuilder::embedded`], its file in a new directory under `parent` (a small disk
    /// of the test's own: [`disk::Tmpfs`]).
    pub fn embedded_in(mut self, parent: &std::path::Path) -> Self {
        self.embedded_in = Some(parent.to_owned());
        self
    }

    /// A database of its own on this Postgres server (e.g. a [`postgres_cluster`] of the
    /// caller's) instead of `TEST_DATABASE_URL`'s.
    pub fn database_server(mut self, admin_url: &str) -> Self {
        self.database_server = Some(admin_url.to_owned());
        self
    }

    pub async fn start(self) -> TestApp {
        // reqwest is built without a TLS provider of its own (`rustls-no-provider`).
        platform::outbound::install_crypto_provider();
        let database = if let Some(parent) = &self.embedded_in {
            TestDatabase::sqlite_in(parent)
        } else if self.embedded {
            TestDatabase::sqlite()
        } else if let Some(server) = self.database_server {
            TestDatabase::create_on(Some(server)).await
        } else {
            TestDatabase::create().await
        };
        let early = if self.real_agents {
            Some(
                api::http::server::bind(([127, 0, 0, 1], 0).into())
                    .await
                    .expect("bind"),
            )
        } else {
            None
        };
        let base_url = early.as_ref().map_or_else(
            || BASE_URL.to_owned(),
            |b| format!("http://{}", b.local_addr),
        );
        let smtp = SmtpSink::start().await;
        let raw = RawConfig {
            database_url: Some(database.url().to_owned()),
            service_bind: Some("127.0.0.1:0".into()),
            service_base_url: Some(base_url),
            embedded_workers: Some("false".into()),
            smtp_url: Some(smtp.url()),
            email_from: Some("Fleet Test <no-reply@fleet.test>".into()),
            rate_limit_burst: Some(self.rate_limit_burst.unwrap_or(DEFAULT_BURST).to_string()),
            rate_limit_per_second: Some(
                self.rate_limit_per_second
                    .unwrap_or(DEFAULT_PER_SECOND)
                    .to_string(),
            ),
            trusted_proxies: self.trusted_proxies,
            rate_limit_store: self.rate_limit_store,
            secrets_key: self.secrets_key.then(|| TEST_SECRETS_KEY.to_owned()),
            pagerduty_events_url: self.pagerduty_events_url,
            payments_webhook_secret: self.payments_webhook_secret,
            payments_api_key: self
                .payments_api_url
                .as_ref()
                .map(|_| PAYMENTS_API_KEY.to_owned()),
            payments_api_url: self.payments_api_url,
            default_plan: self.default_plan,
            changelog_url_ubuntu: self.changelog_url_ubuntu,
            changelog_url_debian: self.changelog_url_debian,
            kev_url: self.kev_url,
            agent_manifest_url: self.agent_manifest_url,
            dns_resolver: self.dns_resolver,
            // Every outbound peer of a test is a loopback receiver signed by the test CA.
            outbound_ca_file: Some(receiver::TestCa::get().file.display().to_string()),
            outbound_allow_private: Some(self.allow_private.to_string()),
            ..RawConfig::default()
        };
        let config: Arc<Config> = Arc::new(raw.validate().expect("test configuration"));
        let db = Database::connect(&config, 8 + worker::QUEUES)
            .await
            .expect("connect");
        db.migrate().await.expect("migrate");
        // A fixed, recognisable start; tests move it. Real agents sign with the real time.
        let clock = ManualClock::new(if self.real_agents {
            platform::clock::Clock::now(&platform::clock::SystemClock)
        } else {
            Utc.with_ymd_and_hms(2026, 11, 2, 9, 0, 0)
                .single()
                .expect("valid date")
        });
        let agent_ca = api::agent::ca::load_or_create(&db, &config, &clock)
            .await
            .expect("agent CA");
        let state = AppState {
            config: config.clone(),
            queue: Queue::new(&db),
            db: db.clone(),
            clock: Arc::new(clock.clone()),
            agent_ca,
            outbound: platform::outbound::Outbound::new(&config.outbound_settings())
                .expect("outbound client"),
            sso: Default::default(),
            identity: Default::default(),
            buckets: Default::default(),
            agent_keys: Default::default(),
        };
        let shutdown = CancellationToken::new();
        let bound = match early {
            Some(bound) => bound,
            None => api::http::server::bind(config.bind).await.expect("bind"),
        };
        let base = format!("http://{}", bound.local_addr);
        let mut tasks = Vec::new();
        {
            let state = state.clone();
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(err) = api::http::server::serve(state, bound, shutdown).await {
                    eprintln!("test server failed: {err:#}");
                }
            }));
        }
        let reports = domain::policy::Reports::new();
        if self.worker {
            let mut deps = worker::Deps::new(config.clone(), db.clone(), Arc::new(clock.clone()))
                .expect("worker deps");
            deps.reports = reports.clone();
            let mut options = worker::WorkerOptions::new(4);
            options.shutdown_timeout = Duration::from_secs(5);
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(err) = worker::run(deps, options, shutdown).await {
                    eprintln!("test worker failed: {err:#}");
                }
            }));
        }
        TestApp {
            base,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("http client"),
            state,
            clock,
            smtp,
            database,
            worker_running: self.worker,
            reports,
            shutdown,
            tasks,
        }
    }
}

/// An answer, read whole.
#[derive(Debug, Clone)]
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl TestResponse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a problem answer of `status` and `type` and returns its body.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, kind: &str) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "expected {status} {kind}, got {}: {}",
            self.status,
            self.body
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "problem content type"
        );
        let body = self.json();
        assert_eq!(body["type"], kind, "problem type in {body}");
        assert_eq!(body["status"], status, "problem status in {body}");
        assert!(body["title"].is_string(), "problem title in {body}");
        body
    }
}

impl TestApp {
    pub fn builder() -> TestAppBuilder {
        TestAppBuilder::default()
    }

    pub async fn new() -> TestApp {
        Self::builder().start().await
    }

    /// The service's clock now.
    pub fn clock_now(&self) -> chrono::DateTime<chrono::Utc> {
        use platform::clock::Clock;
        self.clock.now()
    }

    /// After a test wrote what authentication reads behind the API's back: waits until the
    /// app has heard of it, as a change made through the API waits before it is answered.
    pub async fn identity_settled(&self) {
        if let platform::db::Pool::Postgres(pool) = &self.state.db.pool {
            self.state
                .db
                .identity
                .settle(pool)
                .await
                .expect("the app heard of the change");
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request; `headers` are added as given.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        self.request_at(&self.base, method, path, body, headers)
            .await
    }

    /// [`TestApp::request`] to another server on the same database (an api replica).
    pub async fn request_at(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let mut request = self.http.request(method, format!("{base}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.expect("body read"),
        }
    }

    pub async fn get(&self, path: &str) -> TestResponse {
        self.request(Method::GET, path, None, &[]).await
    }

    pub async fn post_json(&self, path: &str, body: Value) -> TestResponse {
        self.request(Method::POST, path, Some(body), &[]).await
    }

    /// Sends raw bytes as a body with the given content type.
    pub async fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> TestResponse {
        let response = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request sent");
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.expect("body read"),
        }
    }

    /// Stops the server and worker and closes the database, as the process ending would, and
    /// keeps the database for what comes after (a restart, a look at what is left).
    pub async fn stop_keeping_database(mut self) -> TestDatabase {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.state.db.close().await;
        std::mem::replace(&mut self.database, TestDatabase::sqlite())
    }

    /// Stops the server and worker and drops the database.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.state.db.close().await;
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
