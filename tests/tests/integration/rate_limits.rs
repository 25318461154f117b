//! The per-organization request limit: 429 with `Retry-After` and `RateLimit-Limit` past the
//! burst, `RateLimit-*` on every answer, and one organization never touching another.

use chrono::Duration;
use reqwest::Method;
use tests::{As, TestApp};

#[tokio::test]
async fn past_the_burst_an_organization_is_limited_and_another_is_not() {
    let app = TestApp::builder().rate_limit(5, 1.0).start().await;
    let acme = app.sign_up("owner@acme.test", "acme").await;
    let globex = app.sign_up("owner@globex.test", "globex").await;

    for expected_remaining in (0..5).rev() {
        let response = app
            .call(As::Session(&acme), Method::GET, "/v1/orgs/acme", None)
            .await;
        assert_eq!(response.status.as_u16(), 200, "{}", response.body);
        assert_eq!(response.header("ratelimit-limit"), Some("5"));
        assert_eq!(
            response.header("ratelimit-remaining"),
            Some(expected_remaining.to_string().as_str())
        );
        assert!(response.header("ratelimit-reset").is_some());
    }
    let limited = app
        .call(As::Session(&acme), Method::GET, "/v1/orgs/acme", None)
        .await;
    limited.assert_problem(429, "rate-limited");
    assert_eq!(limited.header("ratelimit-limit"), Some("5"));
    let retry_after: u64 = limited
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in whole seconds");
    assert!((1..=2).contains(&retry_after), "retry after {retry_after}");

    // Another organization is untouched.
    let other = app
        .call(As::Session(&globex), Method::GET, "/v1/orgs/globex", None)
        .await;
    assert_eq!(other.status.as_u16(), 200);
    assert_eq!(other.header("ratelimit-remaining"), Some("4"));

    // Once Retry-After has passed, the first organization may go on.
    app.clock.advance(Duration::seconds(retry_after as i64));
    let again = app
        .call(As::Session(&acme), Method::GET, "/v1/orgs/acme", None)
        .await;
    assert_eq!(again.status.as_u16(), 200, "{}", again.body);
    app.stop().await;
}

#[tokio::test]
async fn the_limit_is_shared_by_every_caller_of_the_organization() {
    let app = TestApp::builder().rate_limit(3, 1.0).start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let viewer = app
        .member("acme", api::roles::Role::Viewer, "viewer@acme.test")
        .await;
    for who in [&owner, &viewer, &owner] {
        let response = app
            .call(As::Session(who), Method::GET, "/v1/orgs/acme", None)
            .await;
        assert_eq!(response.status.as_u16(), 200);
    }
    let limited = app
        .call(As::Session(&viewer), Method::GET, "/v1/orgs/acme", None)
        .await;
    limited.assert_problem(429, "rate-limited");
    app.stop().await;
}
