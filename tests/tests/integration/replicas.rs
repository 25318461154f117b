//! Authentication is answered from memory (`api::http::identity_cache`); these tests hold it to
//! the contract across api replicas: a change made at one replica is in force at another from
//! its very next request. On Postgres the other replica is the api program as a process of its
//! own on the same database. SQLite runs as one process by design (the embedded default), so
//! there the "other replica" is the same server, and what is shown is that the process's own
//! change is in force at once.

use domain::roles::Role;
use reqwest::Method;
use serde_json::json;
use tests::{As, Session, TestApp, processes::ApiReplica};

const API: &str = env!("CARGO_BIN_EXE_fleet-api");

/// A test app on the real clock (the replica process has no other), an owner of `acme`, and the
/// other replica.
async fn two_replicas() -> (TestApp, Session, Replica) {
    let app = TestApp::new().await;
    #[allow(clippy::disallowed_methods)] // The replica process runs on the real clock.
    app.clock.set(chrono::Utc::now());
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let other = if app.database.is_postgres() {
        Replica::Process(ApiReplica::start(API, app.database.url(), &app.smtp.url()).await)
    } else {
        Replica::SameProcess(app.base.clone())
    };
    (app, owner, other)
}

enum Replica {
    Process(ApiReplica),
    SameProcess(String),
}

impl Replica {
    fn base(&self) -> &str {
        match self {
            Replica::Process(process) => &process.base,
            Replica::SameProcess(base) => base,
        }
    }

    async fn stop(self) {
        if let Replica::Process(process) = self {
            process.stop().await;
        }
    }
}

/// Asks `path` at the other replica twice (the second answer comes from what the first one
/// kept) and checks both answers.
async fn warm(app: &TestApp, other: &Replica, who: As<'_>, path: &str, status: u16) {
    for _ in 0..2 {
        let answer = app
            .call_at(other.base(), who, Method::GET, path, None)
            .await;
        assert_eq!(answer.status.as_u16(), status, "{path}: {}", answer.body);
    }
}

#[tokio::test]
async fn an_api_token_revoked_at_one_replica_is_refused_at_the_next_request_of_another() {
    let (app, owner, other) = two_replicas().await;
    let token = app.api_token(&owner, "acme", Role::Operator).await;
    warm(&app, &other, As::Bearer(&token), "/v1/orgs/acme", 200).await;
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/api-tokens",
            None,
        )
        .await;
    let id = listed.json()["items"][0]["id"]
        .as_str()
        .expect("the token's id")
        .to_owned();

    let revoked = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/api-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(revoked.status.as_u16(), 204, "{}", revoked.body);

    app.call_at(
        other.base(),
        As::Bearer(&token),
        Method::GET,
        "/v1/orgs/acme",
        None,
    )
    .await
    .assert_problem(401, "unauthenticated");
    other.stop().await;
}

#[tokio::test]
async fn a_member_removed_at_one_replica_is_refused_at_the_next_request_of_another() {
    let (app, owner, other) = two_replicas().await;
    let member = app.member("acme", Role::Operator, "op@acme.test").await;
    warm(&app, &other, As::Session(&member), "/v1/orgs/acme", 200).await;
    let id = app.member_id(&owner, "op@acme.test").await;

    let removed = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/members/{id}"),
            None,
        )
        .await;
    assert_eq!(removed.status.as_u16(), 204, "{}", removed.body);

    app.call_at(
        other.base(),
        As::Session(&member),
        Method::GET,
        "/v1/orgs/acme",
        None,
    )
    .await
    .assert_problem(404, "not-found");
    let me = app
        .call_at(
            other.base(),
            As::Session(&member),
            Method::GET,
            "/v1/me",
            None,
        )
        .await;
    assert_eq!(me.status.as_u16(), 200, "{}", me.body);
    assert_eq!(me.json()["organizations"], json!([]), "{}", me.body);
    other.stop().await;
}

#[tokio::test]
async fn a_role_changed_at_one_replica_is_in_force_at_the_next_request_of_another() {
    let (app, owner, other) = two_replicas().await;
    let member = app.member("acme", Role::Admin, "admin@acme.test").await;
    warm(
        &app,
        &other,
        As::Session(&member),
        "/v1/orgs/acme/api-tokens",
        200,
    )
    .await;
    warm(&app, &other, As::Session(&member), "/v1/me", 200).await;
    let id = app.member_id(&owner, "admin@acme.test").await;

    let changed = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{id}"),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(changed.status.as_u16(), 200, "{}", changed.body);

    app.call_at(
        other.base(),
        As::Session(&member),
        Method::GET,
        "/v1/orgs/acme/api-tokens",
        None,
    )
    .await
    .assert_problem(403, "forbidden");
    let me = app
        .call_at(
            other.base(),
            As::Session(&member),
            Method::GET,
            "/v1/me",
            None,
        )
        .await;
    assert_eq!(
        me.json()["organizations"][0]["role"],
        "viewer",
        "{}",
        me.body
    );
    other.stop().await;
}

#[tokio::test]
async fn a_session_signed_out_at_one_replica_is_refused_at_the_next_request_of_another() {
    let (app, _owner, other) = two_replicas().await;
    let member = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    warm(&app, &other, As::Session(&member), "/v1/me", 200).await;

    let signed_out = app
        .call(
            As::Session(&member),
            Method::POST,
            "/v1/auth/sign-out",
            None,
        )
        .await;
    assert_eq!(signed_out.status.as_u16(), 204, "{}", signed_out.body);

    app.call_at(
        other.base(),
        As::Session(&member),
        Method::GET,
        "/v1/me",
        None,
    )
    .await
    .assert_problem(401, "unauthenticated");
    other.stop().await;
}

/// Without this the tests above would pass with no cache at all: the session's answer is kept,
/// and served again without a read, until something changes.
#[tokio::test]
async fn a_session_is_answered_from_memory_until_something_changes() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let cookie = owner
        .cookie
        .strip_prefix("service_session=")
        .expect("the cookie's value");
    let hash = platform::secrets::hash(cookie);
    let changes = &app.state.db.identity;
    let sessions = &app.state.identity.sessions;
    // On Postgres nothing is kept until the replica listens for changes (at start).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let me = app
            .call(As::Session(&owner), Method::GET, "/v1/me", None)
            .await;
        assert_eq!(me.status.as_u16(), 200, "{}", me.body);
        if sessions.get(changes.mark().await, &hash).is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the session's answer was kept"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let renamed = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            "/v1/me",
            Some(json!({"name": "Renamed"})),
        )
        .await;
    assert_eq!(renamed.status.as_u16(), 200, "{}", renamed.body);
    assert!(
        sessions.get(changes.mark().await, &hash).is_none(),
        "an answer read before a change is not served after it"
    );
    let me = app
        .call(As::Session(&owner), Method::GET, "/v1/me", None)
        .await;
    assert_eq!(me.json()["name"], "Renamed", "{}", me.body);
}

/// A replica that hears of a revocation late (its listener held back: a stalled process, a
/// slow connection) must not serve the revoked credential from memory after the revoking
/// request has answered (decisions §18): a replica that cannot confirm it has seen every change
/// up to now serves identity from the database. Here the test's own app is the late replica and
/// the revocation is made at the api process beside it.
#[tokio::test]
async fn a_replica_whose_listener_is_held_back_does_not_accept_a_revoked_token() {
    let (app, owner, other) = two_replicas().await;
    let token = app.api_token(&owner, "acme", Role::Operator).await;
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/api-tokens",
            None,
        )
        .await;
    let id = listed.json()["items"][0]["id"]
        .as_str()
        .expect("the token's id")
        .to_owned();
    // The test's app has the token in memory…
    for _ in 0..2 {
        let answer = app
            .call(As::Bearer(&token), Method::GET, "/v1/orgs/acme", None)
            .await;
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    }
    // …and stops hearing of changes.
    app.state.db.identity.hold_notifications(true);
    let revoked = app
        .call_at(
            other.base(),
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/api-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(revoked.status.as_u16(), 204, "{}", revoked.body);
    app.call(As::Bearer(&token), Method::GET, "/v1/orgs/acme", None)
        .await
        .assert_problem(401, "unauthenticated");
    // Hearing again, it serves from memory again, and still refuses the token.
    app.state.db.identity.hold_notifications(false);
    app.call(As::Bearer(&token), Method::GET, "/v1/orgs/acme", None)
        .await
        .assert_problem(401, "unauthenticated");
    other.stop().await;
}
