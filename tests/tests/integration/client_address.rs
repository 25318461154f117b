//! The client's address (decisions §11): the peer's, unless the peer is one of
//! `TRUSTED_PROXIES`; then the rightmost `X-Forwarded-For` entry that is not a trusted proxy.
//! Per-address limits and the audit log both use it, and idle limiter rows are purged.

use chrono::Duration;
use domain::roles::Role;
use platform::jobs::Housekeeping;
use reqwest::Method;
use serde_json::{Value, json};
use tests::{Session, TestApp, TestResponse};

/// The per-address allowance of the unauthenticated operations (api `auth::PER_IP`).
const PER_IP_BURST: usize = 20;

/// A sign-in verify with an unknown token, as sent from behind `forwarded` (if any): 404
/// `invalid-token` while the address has allowance, 429 once it has not.
async fn verify_from(app: &TestApp, forwarded: Option<&str>) -> TestResponse {
    let mut headers = Vec::new();
    if let Some(value) = forwarded {
        headers.push(("x-forwarded-for", value));
    }
    app.request(
        Method::POST,
        "/v1/auth/magic-link/verify",
        Some(json!({"token": "unknown-token-unknown-token-unknown-token-00"})),
        &headers,
    )
    .await
}

/// Invites somebody as `admin`'s session, claiming to come from `forwarded`, and returns the
/// address the audit log recorded for it.
async fn audited_address(app: &TestApp, admin: &Session, forwarded: &str) -> Value {
    let invited = app
        .request(
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "guest@acme.test", "role": "viewer"})),
            &[
                ("cookie", admin.cookie.as_str()),
                ("x-service-csrf", admin.csrf.as_str()),
                ("x-forwarded-for", forwarded),
            ],
        )
        .await;
    assert_eq!(invited.status.as_u16(), 201, "{}", invited.body);
    let events = app
        .request(
            Method::GET,
            "/v1/orgs/acme/audit-events",
            None,
            &[("cookie", admin.cookie.as_str())],
        )
        .await
        .json();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["action"] == "invitation.created")
        .map(|e| e["ip"].clone())
        .expect("the invitation is audited")
}

#[tokio::test]
async fn without_trusted_proxies_a_forged_forwarded_for_changes_neither_the_limit_nor_the_audit() {
    let app = TestApp::builder().without_worker().start().await;
    for n in 0..PER_IP_BURST {
        let forged = format!("203.0.113.{n}");
        verify_from(&app, Some(&forged))
            .await
            .assert_problem(404, "invalid-token");
    }
    // A new forged address buys no new allowance: the peer's is spent.
    verify_from(&app, Some("198.51.100.99"))
        .await
        .assert_problem(429, "rate-limited");
    verify_from(&app, None)
        .await
        .assert_problem(429, "rate-limited");

    app.organization("acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    assert_eq!(
        audited_address(&app, &admin, "203.0.113.7").await,
        json!("127.0.0.1"),
        "the audit log records the peer, not the forged header"
    );
    app.stop().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_rightmost_untrusted_forwarded_address_is_the_client() {
    let app = TestApp::builder()
        .without_worker()
        .trusted_proxies("127.0.0.1/32, 10.0.0.0/8")
        .start()
        .await;
    for _ in 0..PER_IP_BURST {
        verify_from(&app, Some("198.51.100.1"))
            .await
            .assert_problem(404, "invalid-token");
    }
    verify_from(&app, Some("198.51.100.1"))
        .await
        .assert_problem(429, "rate-limited");
    // The same client through a second trusted hop, or with a forged entry of its own to the
    // left of what the proxy appended, is still the same client.
    verify_from(&app, Some("198.51.100.1, 10.1.2.3"))
        .await
        .assert_problem(429, "rate-limited");
    verify_from(&app, Some("6.6.6.6, 198.51.100.1"))
        .await
        .assert_problem(429, "rate-limited");
    // Another client behind the proxy has its own allowance; so has the proxy itself.
    verify_from(&app, Some("198.51.100.2"))
        .await
        .assert_problem(404, "invalid-token");
    verify_from(&app, None)
        .await
        .assert_problem(404, "invalid-token");

    app.organization("acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    assert_eq!(
        audited_address(&app, &admin, "6.6.6.6, 192.0.2.44, 10.9.9.9").await,
        json!("192.0.2.44")
    );
    app.stop().await;
}

#[tokio::test]
async fn housekeeping_purges_limiter_rows_idle_for_over_an_hour() {
    // Organizations' buckets in the database too, so that a fresh row is left by one.
    let app = TestApp::builder()
        .without_worker()
        .rate_limit_store("database")
        .start()
        .await;
    verify_from(&app, None)
        .await
        .assert_problem(404, "invalid-token");
    let stale = app.rate_limit_keys().await;
    assert!(!stale.is_empty(), "the request left a limiter row");

    app.clock.advance(Duration::minutes(61));
    // A bucket used just now stays.
    app.organization("acme").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let org = app
        .request(
            Method::GET,
            "/v1/orgs/acme",
            None,
            &[("cookie", viewer.cookie.as_str())],
        )
        .await;
    assert_eq!(org.status.as_u16(), 200, "{}", org.body);
    let before = app.rate_limit_keys().await;

    app.state
        .queue
        .push(Housekeeping {
            hour: app.clock_now().to_rfc3339(),
        })
        .await
        .expect("queue housekeeping");
    app.run_pending_jobs().await;

    let after = app.rate_limit_keys().await;
    let fresh: Vec<&String> = before.iter().filter(|k| !stale.contains(k)).collect();
    assert!(!fresh.is_empty(), "the organization request left rows");
    assert_eq!(
        after.iter().collect::<Vec<_>>(),
        fresh,
        "idle rows are gone, fresh ones stay"
    );
    app.stop().await;
}
