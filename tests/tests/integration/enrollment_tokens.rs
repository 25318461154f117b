//! Enrollment tokens: every error cause interface.md lists, `usable`, and the value shown once.

use std::collections::BTreeMap;

use chrono::Duration;
use domain::roles::Role;
use reqwest::Method;
use serde_json::json;
use tests::{As, TestApp};

#[tokio::test]
async fn creating_a_token_refuses_each_bad_field_and_writes_nothing() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let past = (app.clock_now() - Duration::minutes(1)).to_rfc3339();
    let many: BTreeMap<String, String> =
        (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let cases = [
        json!({}),
        json!({"name": ""}),
        json!({"name": "   "}),
        json!({"name": "x".repeat(256)}),
        json!({"name": "fleet", "max_uses": 0}),
        json!({"name": "fleet", "max_uses": -3}),
        json!({"name": "fleet", "expires_at": past}),
        json!({"name": "fleet", "labels": {"": "x"}}),
        json!({"name": "fleet", "labels": {"env": "x".repeat(256)}}),
        json!({"name": "fleet", "labels": {"bad key": "x"}}),
        json!({"name": "fleet", "labels": many}),
        json!({"name": "fleet", "labels": ["env"]}),
        json!({"name": "fleet", "labels": {"env": 5}}),
    ];
    for body in cases {
        let response = app
            .call(
                As::Session(&owner),
                Method::POST,
                "/v1/orgs/acme/enrollment-tokens",
                Some(body.clone()),
            )
            .await;
        response.assert_problem(400, "invalid-request");
    }
    let list = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/enrollment-tokens",
            None,
        )
        .await;
    assert_eq!(list.json()["items"], json!([]), "nothing was created");
    app.stop().await;
}

#[tokio::test]
async fn a_token_is_shown_once_and_usable_until_revoked_or_expired() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let expires = (app.clock_now() + Duration::hours(1)).to_rfc3339();
    let created = app
        .call(As::Session(&owner), Method::POST, "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "web fleet", "labels": {"env": "prod", "tier": "web"}, "max_uses": 3, "expires_at": expires})))
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let record = created.json();
    let id = record["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("etk_"));
    assert!(
        record["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("enr_"))
    );
    assert_eq!(record["uses"], 0);
    assert_eq!(record["max_uses"], 3);
    assert_eq!(record["usable"], true);
    assert_eq!(record["labels"], json!({"env": "prod", "tier": "web"}));

    let got = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/enrollment-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(got.status.as_u16(), 200);
    assert!(
        got.json().get("token").is_none(),
        "the value is never shown again"
    );

    // Unlimited tokens say nothing of a limit.
    let open = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "any"})),
        )
        .await
        .json();
    assert!(open.get("max_uses").is_none() && open.get("expires_at").is_none());

    app.clock.advance(Duration::hours(2));
    let expired = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/enrollment-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(expired.json()["usable"], false);
    app.stop().await;
}

#[tokio::test]
async fn revoking_twice_or_another_organizations_token_is_not_found() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let other = app.sign_up("owner@globex.test", "globex").await;
    let operator = app.member("acme", Role::Operator, "op@acme.test").await;
    let theirs = app
        .call(
            As::Session(&other),
            Method::POST,
            "/v1/orgs/globex/enrollment-tokens",
            Some(json!({"name": "g"})),
        )
        .await
        .json();
    let theirs_id = theirs["id"].as_str().unwrap_or_default().to_owned();
    let foreign = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/enrollment-tokens/{theirs_id}"),
            None,
        )
        .await;
    foreign.assert_problem(404, "not-found");

    let mine = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "a"})),
        )
        .await
        .json();
    let path = format!(
        "/v1/orgs/acme/enrollment-tokens/{}",
        mine["id"].as_str().unwrap_or_default()
    );
    app.call(As::Session(&operator), Method::DELETE, &path, None)
        .await
        .assert_problem(403, "forbidden");
    app.call(As::Nobody, Method::DELETE, &path, None)
        .await
        .assert_problem(401, "unauthenticated");
    let revoked = app
        .call(As::Session(&owner), Method::DELETE, &path, None)
        .await;
    assert_eq!(revoked.status.as_u16(), 204);
    app.call(As::Session(&owner), Method::DELETE, &path, None)
        .await
        .assert_problem(404, "not-found");
    let after = app
        .call(As::Session(&owner), Method::GET, &path, None)
        .await
        .json();
    assert_eq!(after["usable"], false);
    assert!(after["revoked_at"].is_string());
    app.call(
        As::Session(&owner),
        Method::DELETE,
        "/v1/orgs/acme/enrollment-tokens/etk_bad",
        None,
    )
    .await
    .assert_problem(404, "not-found");
    app.stop().await;
}
