//! `bench-sso`: the SSO callback's latency (decisions §15; issue 13's target: p99 < 50 ms with
//! the provider on loopback). Starts the real api (the test harness: SQLite in a temp dir, or
//! Postgres with `TEST_DATABASE_URL`), the tests' OpenID provider on loopback TLS and their DNS
//! server; saves a connection and verifies a domain through the API; then, one sign-in at a
//! time, runs `GET /v1/auth/sso/start` and the provider's authorization (not timed) and times
//! `GET /v1/auth/sso/callback`: the state lookup, the code exchange over TLS, the ID token's
//! validation against the cached key set, the membership upsert and the session. Prints
//! p50/p90/p99/max.
//!
//! ```text
//! cargo build --release -p tests --bin bench-sso
//! target/release/bench-sso --warmup 50 --iterations 1000
//! TEST_DATABASE_URL=postgres://postgres@127.0.0.1/test target/release/bench-sso
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use reqwest::Method;
use serde_json::json;
use tests::{
    As, TestApp,
    dns::TestDns,
    oidc::{self, TestProvider, User},
};

#[derive(Parser)]
struct Args {
    /// Sign-ins before measuring (they fill the key-set cache and warm the connections).
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    #[arg(long, default_value_t = 1000)]
    iterations: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dns = TestDns::start().await;
    // The client address is each sign-in's own X-Forwarded-For, so the per-address limit of
    // the unauthenticated operations is not what is measured.
    let app = TestApp::builder()
        .dns_resolver(&dns.resolver())
        .trusted_proxies("127.0.0.1/32")
        .start()
        .await;
    let provider = TestProvider::start(app.clock.clone()).await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let saved = app
        .call(
            As::Session(&owner),
            Method::PUT,
            "/v1/orgs/acme/sso",
            Some(json!({
                "issuer": provider.issuer(),
                "client_id": oidc::CLIENT_ID,
                "client_secret": oidc::CLIENT_SECRET,
                "enabled": true,
                "role_mappings": [{"group": "ops", "role": "operator"}],
            })),
        )
        .await;
    anyhow::ensure!(saved.status == 200, "save: {}", saved.body);
    let claim = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/sso/domains",
            Some(json!({"domain": "acme.test"})),
        )
        .await
        .json();
    dns.publish_txt(
        claim["txt_name"].as_str().unwrap_or_default(),
        claim["txt_value"].as_str().unwrap_or_default(),
    );
    let verified = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/sso/domains/acme.test/verify",
            None,
        )
        .await;
    anyhow::ensure!(verified.status == 200, "verify: {}", verified.body);

    let browser = oidc::browser();
    let mut timings = Vec::with_capacity(args.iterations);
    for i in 0..args.warmup + args.iterations {
        let email = format!("person{}@acme.test", i % 200);
        provider.sign_in_as(User::new(&email, &["ops"]));
        let forwarded = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        let start = browser
            .get(app.url("/v1/auth/sso/start"))
            .query(&[("email", email.as_str())])
            .header("x-forwarded-for", &forwarded)
            .send()
            .await?;
        anyhow::ensure!(start.status() == 303, "start: {}", start.text().await?);
        let to_provider = start
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let back = browser.get(&to_provider).send().await?;
        let callback = back
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .replacen(tests::BASE_URL, &app.base, 1);
        let began = Instant::now();
        let answer = browser
            .get(&callback)
            .header("x-forwarded-for", &forwarded)
            .send()
            .await?;
        let took = began.elapsed();
        anyhow::ensure!(
            answer.status() == 303,
            "callback: {} {}",
            answer.status(),
            answer.text().await?
        );
        if i >= args.warmup {
            timings.push(took);
        }
    }
    timings.sort();
    println!(
        "SSO callback, {} sign-ins one at a time ({}): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; key set fetched {} times",
        timings.len(),
        if app.database.url().starts_with("postgres") {
            "Postgres"
        } else {
            "SQLite"
        },
        percentile(&timings, 50.0),
        percentile(&timings, 90.0),
        percentile(&timings, 99.0),
        percentile(&timings, 100.0),
        provider.jwks_fetches(),
    );
    app.stop().await;
    Ok(())
}
