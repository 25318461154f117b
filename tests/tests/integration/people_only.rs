//! Operations that need a person (decisions §3): with an API token, creating API tokens, every
//! invitation operation and changing or removing members are refused 403 `forbidden`, so a
//! leaked token can neither mint a lasting one nor bring an outsider in.

use domain::roles::Role;
use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, TestApp};

/// (method, path template, body) of every people-only operation; `{inv}` and `{usr}` are
/// filled in by the test.
fn people_only() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (
            Method::POST,
            "/v1/orgs/acme/api-tokens",
            Some(json!({"name": "forever", "role": "owner"})),
        ),
        (
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "outsider@evil.test", "role": "admin"})),
        ),
        (Method::GET, "/v1/orgs/acme/invitations", None),
        (Method::DELETE, "/v1/orgs/acme/invitations/{inv}", None),
        (
            Method::PATCH,
            "/v1/orgs/acme/members/{usr}",
            Some(json!({"role": "admin"})),
        ),
        (Method::DELETE, "/v1/orgs/acme/members/{usr}", None),
    ]
}

#[tokio::test]
async fn an_owner_api_token_can_neither_mint_tokens_nor_touch_invitations_nor_change_members() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.member("acme", Role::Operator, "operator@acme.test")
        .await;
    let token = app.api_token(&owner, "acme", Role::Owner).await;
    let invited = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "guest@acme.test", "role": "viewer"})),
        )
        .await;
    assert_eq!(invited.status.as_u16(), 201, "{}", invited.body);
    let invitation_id = invited.json()["id"].as_str().expect("id").to_owned();

    // Reading members stays open to tokens; it finds the operator's id.
    let members = app
        .call(
            As::Bearer(&token),
            Method::GET,
            "/v1/orgs/acme/members",
            None,
        )
        .await;
    assert_eq!(members.status.as_u16(), 200, "{}", members.body);
    let operator_id = members.json()["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["email"] == "operator@acme.test")
        .and_then(|m| m["id"].as_str())
        .expect("the operator is listed")
        .to_owned();

    let mut let_through = Vec::new();
    for (method, template, body) in people_only() {
        let path = template
            .replace("{inv}", &invitation_id)
            .replace("{usr}", &operator_id);
        let response = app
            .call(As::Bearer(&token), method.clone(), &path, body)
            .await;
        let kind = serde_json::from_str::<Value>(&response.body)
            .ok()
            .and_then(|b| b["type"].as_str().map(str::to_owned));
        if response.status.as_u16() != 403 || kind.as_deref() != Some("forbidden") {
            let_through.push(format!("{method} {template}: {}", response.status));
        }
    }
    assert!(
        let_through.is_empty(),
        "API tokens must be refused 403 forbidden here: {let_through:?}"
    );

    // Nothing was changed by the attempts.
    let tokens = app
        .call(
            As::Bearer(&token),
            Method::GET,
            "/v1/orgs/acme/api-tokens",
            None,
        )
        .await;
    assert_eq!(tokens.status.as_u16(), 200, "listing tokens stays open");
    assert_eq!(tokens.json()["items"].as_array().map(Vec::len), Some(1));
    let invitations = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/invitations",
            None,
        )
        .await
        .json();
    let statuses: Vec<(&str, &str)> = invitations["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| Some((i["email"].as_str()?, i["status"].as_str()?)))
        .collect();
    assert_eq!(statuses, [("guest@acme.test", "pending")]);
    let members = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/members",
            None,
        )
        .await
        .json();
    let operator = members["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["email"] == "operator@acme.test")
        .cloned()
        .expect("the operator is still a member");
    assert_eq!(operator["role"], "operator");

    // The same operations in person still work.
    let by_person = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{operator_id}"),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(by_person.status.as_u16(), 200, "{}", by_person.body);
    app.stop().await;
}

#[tokio::test]
async fn the_document_says_which_operations_refuse_api_tokens() {
    let app = TestApp::builder().without_worker().start().await;
    let spec = app.get("/v1/openapi.json").await.json();
    let mut silent = Vec::new();
    for (method, template, _) in people_only() {
        let path = template
            .replace("/acme/", "/{org}/")
            .replace("{inv}", "{invitation_id}")
            .replace("{usr}", "{member_id}");
        let operation = &spec["paths"][&path][method.as_str().to_lowercase()];
        assert!(operation.is_object(), "{method} {path} is documented");
        let org = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "org")
            .and_then(|p| p["schema"]["description"].as_str())
            .unwrap_or_default();
        let description = operation["description"].as_str().unwrap_or_default();
        if !org.contains("API tokens are refused") || !description.contains("person") {
            silent.push(format!("{method} {path}"));
        }
    }
    assert!(
        silent.is_empty(),
        "these should state that they need a person and refuse API tokens: {silent:?}"
    );
    app.stop().await;
}
