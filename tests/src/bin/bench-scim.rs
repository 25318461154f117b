//! `bench-scim`: what a SCIM provider's lookup costs in a large organization. On a fresh
//! database (Postgres by default, or `--database-url sqlite://…`), provisions `--members`
//! (10,000) users with memberships into one organization, issues its SCIM token, serves the
//! real api and runs `wrk` against `GET /scim/v2/Users?filter=userName eq "…"` (the lookup an
//! identity provider makes before every create), printing median requests/s and p50/p99. The
//! target (BENCHMARKS.md) is p99 under 20 ms.
//!
//! ```text
//! cargo build --release -p tests --bin bench-scim
//! target/release/bench-scim --rounds 3 --seconds 5
//! ```

use std::sync::Arc;

use clap::Parser;
use domain::roles::Role;
use entities::{accounts, memberships, organizations, scim_tokens, scim_users};
use platform::{
    clock::{Clock, SystemClock},
    config::RawConfig,
    db::Database,
    jobs::Queue,
};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// Database to bench on; default: a fresh database on postgres://postgres@127.0.0.1/test.
    #[arg(long)]
    database_url: Option<String>,
    #[arg(long, default_value_t = 10_000)]
    members: usize,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Threads of the api's runtime (the rest of the machine runs wrk and the database).
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
}

fn main() -> anyhow::Result<()> {
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
        default_plan: Some("enterprise".into()),
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
    let now = SystemClock.now();
    let org = organizations::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        slug: Set("acme".into()),
        name: Set("Acme".into()),
        plan: Set("enterprise".into()),
        sso_enforced: Set(false),
        created_at: Set(now),
        proposal_seq: Set(0),
        max_concurrent_reboots: Set(None),
    }
    .insert(&db.orm)
    .await?;
    // The organization's members, each provisioned through SCIM; the first is the owner who
    // issues the token.
    let started = std::time::Instant::now();
    let mut owner = None;
    for chunk in (0..args.members).collect::<Vec<_>>().chunks(500) {
        let ids: Vec<uuid::Uuid> = chunk.iter().map(|_| platform::ids::new_uuid()).collect();
        owner = owner.or(ids.first().copied());
        accounts::Entity::insert_many(chunk.iter().zip(&ids).map(|(n, id)| {
            accounts::ActiveModel {
                id: Set(*id),
                email: Set(format!("user{n}@acme.test")),
                name: Set(Some(format!("User {n}"))),
                time_zone: Set("UTC".into()),
                created_at: Set(now),
                updated_at: Set(now),
            }
        }))
        .exec(&db.orm)
        .await?;
        memberships::Entity::insert_many(ids.iter().enumerate().map(|(i, id)| {
            memberships::ActiveModel {
                org_id: Set(org.id),
                account_id: Set(*id),
                role: Set(if chunk[i] == 0 {
                    Role::Owner
                } else {
                    Role::Viewer
                }
                .as_str()
                .into()),
                created_at: Set(now),
            }
        }))
        .exec(&db.orm)
        .await?;
        scim_users::Entity::insert_many(chunk.iter().zip(&ids).map(|(n, id)| {
            scim_users::ActiveModel {
                org_id: Set(org.id),
                account_id: Set(*id),
                user_name: Set(format!("user{n}@acme.test")),
                user_name_key: Set(format!("user{n}@acme.test")),
                external_id: Set(Some(format!("ext-{n}"))),
                display_name: Set(Some(format!("User {n}"))),
                given_name: Set(Some("User".into())),
                family_name: Set(Some(n.to_string())),
                emails: Set(None),
                active: Set(true),
                created_at: Set(now),
                updated_at: Set(now),
            }
        }))
        .exec(&db.orm)
        .await?;
    }
    println!(
        "provisioned {} members in {:.1} s",
        args.members,
        started.elapsed().as_secs_f64()
    );
    let token = platform::secrets::mint(api::scim::token::SCIM_TOKEN_PREFIX);
    scim_tokens::ActiveModel {
        org_id: Set(org.id),
        token_hash: Set(token.hash.clone()),
        issued_by: Set(owner.ok_or_else(|| anyhow::anyhow!("--members must be at least 1"))?),
        issued_at: Set(now),
        last_used_at: Set(None),
        revoked_at: Set(None),
        revoked_reason: Set(None),
    }
    .insert(&db.orm)
    .await?;

    let shutdown = CancellationToken::new();
    let bound = api::http::server::bind(config.bind).await?;
    let base = format!("http://{}", bound.local_addr);
    let server = tokio::spawn(api::http::server::serve(state, bound, shutdown.clone()));

    let wanted = args.members / 2;
    let url = format!("{base}/scim/v2/Users?filter=userName%20eq%20%22user{wanted}%40acme.test%22");
    // One request first: the answer must be the one user.
    let check = reqwest::Client::new()
        .get(&url)
        .bearer_auth(&token.value)
        .send()
        .await?;
    anyhow::ensure!(
        check.status().is_success(),
        "lookup failed: {}",
        check.status()
    );
    let body: serde_json::Value = check.json().await?;
    anyhow::ensure!(
        body["totalResults"] == 1,
        "lookup found {}",
        body["totalResults"]
    );

    let headers = vec![format!("Authorization: Bearer {}", token.value)];
    let mut rps = Vec::new();
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for round in 0..args.rounds {
        let result = tests::wrk::run(&url, args.connections, 1, args.seconds, &headers).await?;
        anyhow::ensure!(
            result.non_2xx == 0,
            "{} answers were not 2xx",
            result.non_2xx
        );
        println!(
            "round {round} userName eq: {:>8.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
            result.requests_per_second, result.p50_ms, result.p99_ms
        );
        rps.push(result.requests_per_second);
        p50.push(result.p50_ms);
        p99.push(result.p99_ms);
    }
    println!(
        "median over {} rounds, {} members, {} connections: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms (target p99 < 20 ms)",
        args.rounds,
        args.members,
        args.connections,
        tests::wrk::median(&mut rps),
        tests::wrk::median(&mut p50),
        tests::wrk::median(&mut p99)
    );
    shutdown.cancel();
    let _ = server.await;
    db.close().await;
    Ok(())
}
