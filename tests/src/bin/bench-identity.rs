//! `bench-identity`: what authentication costs. On a fresh database (Postgres by default, or
//! `--database-url sqlite://…`), serves the real api and alternates `wrk` runs against
//! `GET /healthz` (no authentication), `GET /v1/me` with a session cookie (session and account
//! lookups) and `GET /v1/orgs/acme` (the same plus organization, membership and the
//! organization's rate-limit upsert), printing median requests/s, p50/p99 and the ratios.
//!
//! ```text
//! cargo build --release -p tests --bin bench-identity
//! target/release/bench-identity --rounds 5 --seconds 5
//! ```

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use domain::roles::Role;
use entities::{accounts, memberships, organizations};
use platform::{
    clock::{Clock, SystemClock},
    config::RawConfig,
    db::Database,
    jobs::Queue,
};
use sea_orm::{ActiveModelTrait, Set};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// Database to bench on; default: a fresh database on postgres://postgres@127.0.0.1/test.
    #[arg(long)]
    database_url: Option<String>,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Threads of the api's runtime (the rest of the machine runs wrk and the database).
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
    /// Opens every connection of the api's pool before the first round (the pool otherwise
    /// opens them as the first authenticated requests need them).
    #[arg(long)]
    warm_pool: bool,
}

fn main() -> anyhow::Result<()> {
    // reqwest is built without a TLS provider of its own (`rustls-no-provider`).
    platform::outbound::install_crypto_provider();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.server_threads)
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let (url, _guard) = match &args.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let database = tests::TestDatabase::create().await;
            (database.url().to_owned(), Some(database))
        }
    };
    if args.database_url.is_none() && !url.starts_with("postgres") {
        eprintln!("note: TEST_DATABASE_URL is not set; benchmarking SQLite");
    }
    let raw = RawConfig {
        database_url: Some(url.clone()),
        service_bind: Some("127.0.0.1:0".into()),
        embedded_workers: Some("false".into()),
        rate_limit_burst: Some("100000000".into()),
        rate_limit_per_second: Some("100000000".into()),
        rate_limit_store: std::env::var("RATE_LIMIT_STORE").ok(),
        ..RawConfig::default()
    };
    let config = Arc::new(raw.validate()?);
    let db = Database::connect(&config, 32).await?;
    db.migrate().await?;
    let agent_ca = api::agent::ca::load_or_create(&db, &config, &SystemClock).await?;
    let state = api::AppState {
        config: config.clone(),
        queue: Queue::new(&db),
        db: db.clone(),
        clock: Arc::new(SystemClock),
        agent_ca,
        outbound: platform::outbound::Outbound::new(&config.outbound_settings())?,
        sso: Default::default(),
        identity: Default::default(),
        buckets: Default::default(),
        agent_keys: Default::default(),
    };
    // One organization with its owner, signed in.
    let now = SystemClock.now();
    let account = accounts::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        email: Set("owner@acme.test".into()),
        name: Set(Some("Owner".into())),
        time_zone: Set("UTC".into()),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&db.orm)
    .await?;
    let org = organizations::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        slug: Set("acme".into()),
        name: Set("Acme".into()),
        plan: Set("free".into()),
        sso_enforced: Set(false),
        created_at: Set(now),
        proposal_seq: Set(0),
        max_concurrent_reboots: Set(None),
    }
    .insert(&db.orm)
    .await?;
    memberships::ActiveModel {
        org_id: Set(org.id),
        account_id: Set(account.id),
        role: Set(Role::Owner.as_str().into()),
        created_at: Set(now),
    }
    .insert(&db.orm)
    .await?;
    let session = api::identity::auth::start_session(&state, &db.orm, account.id, now)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let cookie = format!(
        "Cookie: {}",
        session.cookie.split(';').next().context("cookie")?
    );

    if args.warm_pool {
        use sea_orm::TransactionTrait;
        let mut held = Vec::new();
        // As many as the pool gives within a second each.
        while let Ok(txn) =
            tokio::time::timeout(std::time::Duration::from_secs(1), db.orm.begin()).await
        {
            held.push(txn?);
        }
        println!("warmed the pool: {} connections", held.len());
        for txn in held {
            txn.rollback().await?;
        }
    }
    let shutdown = CancellationToken::new();
    let bound = api::http::server::bind(config.bind).await?;
    let base = format!("http://{}", bound.local_addr);
    let server = tokio::spawn(api::http::server::serve(state, bound, shutdown.clone()));

    let targets: [(&str, String, Vec<String>); 3] = [
        ("healthz", format!("{base}/healthz"), vec![]),
        ("me", format!("{base}/v1/me"), vec![cookie.clone()]),
        ("org", format!("{base}/v1/orgs/acme"), vec![cookie.clone()]),
    ];
    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut p99: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut ratio_me = Vec::new();
    let mut ratio_org = Vec::new();
    for round in 0..args.rounds {
        let mut this = [0.0; 3];
        for (i, (name, url, headers)) in targets.iter().enumerate() {
            let result = tests::wrk::run(url, args.connections, 1, args.seconds, headers).await?;
            anyhow::ensure!(
                result.non_2xx == 0,
                "{name}: {} answers were not 2xx",
                result.non_2xx
            );
            println!(
                "round {round} {name:>8}: {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
                result.requests_per_second, result.p50_ms, result.p99_ms
            );
            rps[i].push(result.requests_per_second);
            p99[i].push(result.p99_ms);
            this[i] = result.requests_per_second;
        }
        ratio_me.push(this[1] / this[0].max(1.0));
        ratio_org.push(this[2] / this[0].max(1.0));
    }
    let names = ["healthz", "me", "org"];
    for i in 0..3 {
        println!(
            "median {:>8}: {:>9.0} req/s, p99 {:.2} ms",
            names[i],
            tests::wrk::median(&mut rps[i]),
            tests::wrk::median(&mut p99[i])
        );
    }
    println!(
        "median ratio /v1/me ÷ /healthz: {:.2}; /v1/orgs/acme ÷ /healthz: {:.2}",
        tests::wrk::median(&mut ratio_me),
        tests::wrk::median(&mut ratio_org)
    );
    shutdown.cancel();
    let _ = server.await;
    db.close().await;
    Ok(())
}
