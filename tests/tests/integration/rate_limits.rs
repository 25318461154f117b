//! The per-organization request limit: 429 with `Retry-After` and `RateLimit-Limit` past the
//! burst, `RateLimit-*` on every answer, one organization never touching another, and each
//! caller held to its share so that one of them cannot spend the whole organization's.

use chrono::Duration;
use domain::roles::Role;
use reqwest::Method;
use tests::{As, TestApp};

#[tokio::test]
async fn past_the_burst_an_organization_is_limited_and_another_is_not() {
    organization_limit("memory").await;
}

#[tokio::test]
async fn past_the_burst_an_organization_is_limited_and_another_is_not_with_limits_in_the_database()
{
    organization_limit("database").await;
}

async fn organization_limit(store: &str) {
    let app = TestApp::builder()
        .rate_limit(6, 1.0)
        .rate_limit_store(store)
        .start()
        .await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let globex = app.sign_up("owner@globex.test", "globex").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;

    // Each caller has half the burst; the headers tell the tighter of its share and the
    // organization's.
    for who in [&owner, &admin] {
        for expected_remaining in (0..3).rev() {
            let response = app
                .call(As::Session(who), Method::GET, "/v1/orgs/acme", None)
                .await;
            assert_eq!(response.status.as_u16(), 200, "{}", response.body);
            assert_eq!(response.header("ratelimit-limit"), Some("3"));
            assert_eq!(
                response.header("ratelimit-remaining"),
                Some(expected_remaining.to_string().as_str())
            );
            assert!(response.header("ratelimit-reset").is_some());
        }
    }
    // The organization's six are spent: a member who has spent nothing is limited too.
    let limited = app
        .call(As::Session(&viewer), Method::GET, "/v1/orgs/acme", None)
        .await;
    limited.assert_problem(429, "rate-limited");
    assert_eq!(limited.header("ratelimit-limit"), Some("6"));
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
    assert_eq!(other.header("ratelimit-remaining"), Some("2"));

    // Once Retry-After has passed, the organization may go on.
    app.clock.advance(Duration::seconds(retry_after as i64));
    let again = app
        .call(As::Session(&viewer), Method::GET, "/v1/orgs/acme", None)
        .await;
    assert_eq!(again.status.as_u16(), 200, "{}", again.body);
    app.stop().await;
}

#[tokio::test]
async fn one_caller_spending_its_share_leaves_the_organization_usable_for_the_others() {
    let app = TestApp::builder().rate_limit(10, 1.0).start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let operator = app
        .member("acme", Role::Operator, "operator@acme.test")
        .await;
    let token = app.api_token(&owner, "acme", Role::Viewer).await;

    // A viewer token hammering the organization gets its own half of the burst, no more.
    let mut allowed = 0;
    let limited = loop {
        let response = app
            .call(As::Bearer(&token), Method::GET, "/v1/orgs/acme", None)
            .await;
        if response.status.as_u16() != 200 {
            break response;
        }
        allowed += 1;
        assert!(allowed <= 10, "the token was never limited");
    };
    limited.assert_problem(429, "rate-limited");
    assert_eq!(allowed, 5, "the token's share is half the burst");
    assert_eq!(limited.header("ratelimit-limit"), Some("5"));

    // Its creator and another member still get through.
    for who in [&owner, &operator] {
        let response = app
            .call(As::Session(who), Method::GET, "/v1/orgs/acme", None)
            .await;
        assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    }
    app.stop().await;
}

/// All of an organization's API tokens together have half its limit (decisions §18): one admin
/// minting a second token does not get a second half.
#[tokio::test]
async fn all_api_tokens_together_have_half_the_organization_limit() {
    let app = TestApp::builder().rate_limit(10, 1.0).start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let first = app.api_token(&owner, "acme", Role::Viewer).await;
    let second = app.api_token(&owner, "acme", Role::Viewer).await;
    for _ in 0..5 {
        let response = app
            .call(As::Bearer(&first), Method::GET, "/v1/orgs/acme", None)
            .await;
        assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    }
    app.call(As::Bearer(&second), Method::GET, "/v1/orgs/acme", None)
        .await
        .assert_problem(429, "rate-limited");
    // People keep their own shares.
    let response = app
        .call(As::Session(&owner), Method::GET, "/v1/orgs/acme", None)
        .await;
    assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    app.stop().await;
}
