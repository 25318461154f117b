//! The HTTP API: poem + poem-openapi, with the OpenAPI document generated from the typed
//! handlers. `main.rs` wires it; everything a test needs is reachable from here.

pub mod agent;
pub mod billing;
pub mod cli;
pub mod fleet;
pub mod http;
pub mod identity;
pub mod notifications;
pub mod proposals;
pub mod scim;
pub mod sso;
pub mod state;

use poem::{Endpoint, EndpointExt, Route};
use poem_openapi::OpenApiService;

pub use state::AppState;

pub const TITLE: &str = "Fleet Update Management Service";

/// All operations, as one OpenAPI service.
pub fn openapi(state: &AppState) -> OpenApiService<impl poem_openapi::OpenApi + use<>, ()> {
    let apis = http::openapi::Documented::<_, scim::v2::wire::ScimPaths>::new((
        http::health::HealthApi {
            state: state.clone(),
        },
        identity::auth::AuthApi,
        identity::me::MeApi,
        identity::orgs::OrgsApi,
        identity::members::MembersApi,
        identity::invitations::InvitationsApi,
        identity::api_tokens::ApiTokensApi,
        identity::audit::AuditApi,
        fleet::enrollment_tokens::EnrollmentTokensApi,
        fleet::hosts::HostsApi,
        fleet::groups::GroupsApi,
        proposals::policies::PoliciesApi,
        proposals::api::ProposalsApi,
        proposals::comments::CommentsApi,
        // poem-openapi implements OpenApi for tuples of up to 16: the rest nest.
        (
            fleet::inventory::InventoryApi,
            proposals::preview::PolicyPreviewApi,
            proposals::rollouts::RolloutsApi,
            proposals::mentions::MentionsApi,
            proposals::impact::ImpactApi,
            notifications::channels::ChannelsApi,
            notifications::deliveries::DeliveriesApi,
            notifications::digest::DigestApi,
        ),
        (
            agent::api::AgentApi,
            agent::jobs::AgentJobsApi,
            fleet::agent_releases::AgentReleasesApi,
            billing::webhook::WebhookApi,
            billing::account::BillingApi,
            billing::checkout::CheckoutApi,
            sso::connection::ConnectionApi,
            sso::domains::DomainsApi,
            sso::sign_in::SignInApi,
            scim::token::ScimTokenApi,
            scim::v2::ScimApi,
        ),
    ));
    OpenApiService::new(apis, TITLE, env!("CARGO_PKG_VERSION"))
        .description(include_str!("http/openapi_intro.md"))
        .server(state.config.base_url.as_str().trim_end_matches('/'))
}

/// The OpenAPI document as JSON, without running a server: the generated one made exact
/// ([`http::openapi::exact`]).
pub fn openapi_json(state: &AppState) -> String {
    http::openapi::exact(&openapi(state).spec())
}

/// The whole application: routes, OpenAPI document, docs UI and the edge middleware.
pub fn app(state: AppState) -> impl Endpoint + 'static {
    let service = openapi(&state);
    let generated = service.spec();
    let document = http::openapi::exact(&generated);
    // The docs page embeds the document it shows: the exact one.
    let docs_page = service.swagger_ui_html().replacen(&generated, &document, 1);
    let allowed = http::openapi::AllowedMethods::from_document(&document);
    let spec = poem::endpoint::make_sync(move |_| {
        poem::Response::builder()
            .content_type("application/json")
            .body(document.clone())
    });
    let docs = poem::endpoint::make_sync(move |_| poem::web::Html(docs_page.clone()));
    let settle = http::identity_cache::SettleChanges::new(&state.db);
    Route::new()
        // The liveness probe skips the OpenAPI service's routing (`http::health::Liveness`).
        .at(http::probes::LIVENESS_PATH, http::health::Liveness)
        .nest("/v1/openapi.json", spec)
        .nest("/docs", docs)
        .nest(
            "/",
            service
                .with(allowed)
                .data(state)
                .with(settle)
                .with(http::console::Console::default()),
        )
        .with(http::middleware::Edge::<scim::v2::wire::ScimPaths>::default())
}

/// The `api` binary: connect, migrate, serve; in embedded mode also work and schedule.
pub async fn run(config: platform::config::Config) -> anyhow::Result<()> {
    use std::sync::Arc;

    let config = Arc::new(config);
    let connections = platform::db::api_connections(config.database_url.expose(), worker::QUEUES);
    let db = platform::db::Database::connect(&config, connections).await?;
    db.migrate().await?;
    let clock: platform::clock::SharedClock = Arc::new(platform::clock::SystemClock);
    let agent_ca = agent::ca::load_or_create(&db, &config, clock.as_ref()).await?;
    let state = AppState {
        config: config.clone(),
        queue: platform::jobs::Queue::new(&db),
        db: db.clone(),
        clock: clock.clone(),
        agent_ca,
        outbound: platform::outbound::Outbound::new(&config.outbound_settings())?,
        sso: Default::default(),
        identity: Default::default(),
        buckets: Default::default(),
        agent_keys: Default::default(),
    };
    let shutdown = platform::runtime::shutdown_on_signal();
    let bound = http::server::bind(config.bind).await?;
    // One metrics endpoint for the whole process, embedded worker and scheduler included.
    let metrics =
        platform::metrics::start(config.metrics_bind, &db, &domain::QUEUE_NAMES, &shutdown).await?;

    let mut background = tokio::task::JoinSet::new();
    if config.embedded_workers {
        let deps = worker::Deps::new(config.clone(), db.clone(), clock.clone())?;
        let options = worker::WorkerOptions::new(8);
        background.spawn(worker::run(deps, options, shutdown.clone()));
        let scheduler = scheduler::Scheduler::new(db.clone(), clock.clone());
        background.spawn(scheduler.run(shutdown.clone()));
    }

    let base = config.base_url.as_str().trim_end_matches('/');
    tracing::info!(
        address = %bound.local_addr,
        embedded_workers = config.embedded_workers,
        "api listening"
    );
    println!("Listening on http://{}", bound.local_addr);
    println!("API docs:    {base}/docs   (OpenAPI document: {base}/v1/openapi.json)");

    let served = http::server::serve(state, bound, shutdown.clone()).await;
    shutdown.cancel();
    while let Some(finished) = background.join_next().await {
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::error!(error = %err, "background task failed"),
            Err(err) => tracing::error!(error = %err, "background task panicked"),
        }
    }
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    db.close().await;
    served
}
