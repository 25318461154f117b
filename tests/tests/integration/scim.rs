//! SCIM provisioning (decisions §15): the token operations with every error cause, and the
//! SCIM 2.0 protocol as identity providers speak it — users created, found by `userName eq`,
//! given a role through a group, deactivated (their session refused on the next request) and
//! deleted; revoked tokens, other organizations' ids, bad filters, the last owner, and the
//! PATCH bodies Okta and Microsoft Entra send, verbatim.

use api::identity::roles::Role;
use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, TestApp, TestResponse};

const SCIM_JSON: &str = "application/scim+json";
const ERROR_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:Error";

/// Issues the organization's SCIM token as `admin`; its `scim_` value.
async fn scim_token(app: &TestApp, admin: &tests::Session, slug: &str) -> String {
    let issued = app
        .call(
            As::Session(admin),
            Method::POST,
            &format!("/v1/orgs/{slug}/scim/token"),
            None,
        )
        .await;
    assert_eq!(issued.status.as_u16(), 201, "{}", issued.body);
    issued.json()["token"].as_str().expect("token").to_owned()
}

/// A SCIM request as a provider sends it (`application/scim+json`).
async fn scim(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> TestResponse {
    let mut request = app
        .http
        .request(method, app.url(path))
        .header("authorization", format!("Bearer {token}"));
    if let Some(body) = body {
        request = request
            .header("content-type", SCIM_JSON)
            .body(body.to_string());
    }
    let response = request.send().await.expect("request sent");
    TestResponse {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.expect("body read"),
    }
}

/// Asserts a SCIM error of `status` (and `scimType`, when given).
#[track_caller]
fn assert_scim_error(response: &TestResponse, status: u16, scim_type: Option<&str>) -> Value {
    assert_eq!(
        response.status.as_u16(),
        status,
        "expected SCIM {status}, got {}: {}",
        response.status,
        response.body
    );
    assert_eq!(response.header("content-type"), Some(SCIM_JSON));
    let body = response.json();
    assert_eq!(body["schemas"], json!([ERROR_SCHEMA]), "{body}");
    assert_eq!(body["status"], status.to_string(), "status is a string: {body}");
    if let Some(kind) = scim_type {
        assert_eq!(body["scimType"], kind, "{body}");
    }
    body
}

fn new_user(user_name: &str) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": user_name,
        "name": {"givenName": "Ann", "familyName": "Lee"},
        "emails": [{"primary": true, "value": user_name, "type": "work"}],
        "displayName": "Ann Lee",
        "active": true
    })
}

async fn create_user(app: &TestApp, token: &str, user_name: &str) -> String {
    let created = scim(app, token, Method::POST, "/scim/v2/Users", Some(new_user(user_name))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    assert_eq!(created.header("content-type"), Some(SCIM_JSON));
    created.json()["id"].as_str().expect("id").to_owned()
}

async fn role_of(app: &TestApp, owner: &tests::Session, email: &str) -> Option<String> {
    let members = app
        .call(As::Session(owner), Method::GET, "/v1/orgs/acme/members?limit=500", None)
        .await;
    assert_eq!(members.status.as_u16(), 200, "{}", members.body);
    members.json()["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["email"] == email)
        .and_then(|m| m["role"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn the_scim_token_is_issued_once_replaced_by_issuing_again_and_revoked() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let status = app
        .call(As::Session(&owner), Method::GET, "/v1/orgs/acme/scim/token", None)
        .await;
    assert_eq!(status.status.as_u16(), 200, "{}", status.body);
    let status = status.json();
    assert_eq!(status["issued"], false);
    assert_eq!(status["base_url"], format!("{}/scim/v2", tests::BASE_URL));
    assert!(status.get("token").is_none());

    let first = scim_token(&app, &owner, "acme").await;
    assert!(first.starts_with("scim_"), "{first}");
    let status = app
        .call(As::Session(&owner), Method::GET, "/v1/orgs/acme/scim/token", None)
        .await
        .json();
    assert_eq!(status["issued"], true);
    assert!(status["issued_at"].is_string());
    assert!(status["last_used_at"].is_null());
    assert!(status.get("token").is_none(), "the value is shown once");

    // Only the hash is stored.
    use sea_orm::EntityTrait;
    let rows = entities::scim_tokens::Entity::find()
        .all(&app.state.db.orm)
        .await
        .expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].token_hash, platform::secrets::hash(&first));

    let used = scim(&app, &first, Method::GET, "/scim/v2/Users", None).await;
    assert_eq!(used.status.as_u16(), 200, "{}", used.body);
    let status = app
        .call(As::Session(&owner), Method::GET, "/v1/orgs/acme/scim/token", None)
        .await
        .json();
    assert!(status["last_used_at"].is_string(), "{status}");

    // Issuing again replaces it: the first stops working at once.
    let second = scim_token(&app, &owner, "acme").await;
    assert_ne!(first, second);
    assert_scim_error(
        &scim(&app, &first, Method::GET, "/scim/v2/Users", None).await,
        401,
        None,
    );
    assert_eq!(
        scim(&app, &second, Method::GET, "/scim/v2/Users", None)
            .await
            .status
            .as_u16(),
        200
    );

    // Revoking refuses the provider's next request and leaves members as they are.
    let id = create_user(&app, &second, "ann@acme.test").await;
    let revoked = app
        .call(As::Session(&owner), Method::DELETE, "/v1/orgs/acme/scim/token", None)
        .await;
    assert_eq!(revoked.status.as_u16(), 204, "{}", revoked.body);
    let refused = scim(&app, &second, Method::GET, &format!("/scim/v2/Users/{id}"), None).await;
    assert_scim_error(&refused, 401, None);
    assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
    let status = app
        .call(As::Session(&owner), Method::GET, "/v1/orgs/acme/scim/token", None)
        .await
        .json();
    assert_eq!(status["issued"], false);
    // Revoking when none is issued: not found.
    app.call(As::Session(&owner), Method::DELETE, "/v1/orgs/acme/scim/token", None)
        .await
        .assert_problem(404, "not-found");
    app.stop().await;
}

#[tokio::test]
async fn every_error_cause_of_the_scim_token_operations() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _globex = app.sign_up("owner@globex.test", "globex").await;
    let operator = app.member("acme", Role::Operator, "op@acme.test").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    let api_token = app.api_token(&owner, "acme", Role::Owner).await;
    let path = "/v1/orgs/acme/scim/token";
    for method in [Method::GET, Method::POST, Method::DELETE] {
        // No session.
        app.call(As::Nobody, method.clone(), path, None)
            .await
            .assert_problem(401, "unauthenticated");
        // Not permitted for the role.
        app.call(As::Session(&operator), method.clone(), path, None)
            .await
            .assert_problem(403, "forbidden");
        // An API token, even the owner's: a person is needed.
        app.call(As::Bearer(&api_token), method.clone(), path, None)
            .await
            .assert_problem(403, "forbidden");
        // Another organization, or none: one answer.
        app.call(As::Session(&owner), method.clone(), "/v1/orgs/globex/scim/token", None)
            .await
            .assert_problem(404, "not-found");
        app.call(As::Session(&owner), method.clone(), "/v1/orgs/nope/scim/token", None)
            .await
            .assert_problem(404, "not-found");
    }
    // No CSRF token on the mutations.
    for method in [Method::POST, Method::DELETE] {
        app.call(As::SessionWithoutCsrf(&owner), method, path, None)
            .await
            .assert_problem(403, "forbidden");
    }
    // An admin may.
    let issued = app.call(As::Session(&admin), Method::POST, path, None).await;
    assert_eq!(issued.status.as_u16(), 201, "{}", issued.body);
    // Nothing was issued by the refused calls: one audit entry.
    let audit = app
        .call(As::Session(&owner), Method::GET, "/v1/orgs/acme/audit-events", None)
        .await
        .json();
    let issued_entries = audit["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["action"] == "scim_token.issued")
        .count();
    assert_eq!(issued_entries, 1, "{audit}");
    app.stop().await;
}

#[tokio::test]
async fn scim_needs_the_enterprise_plan_but_revoking_does_not() {
    let app = TestApp::builder().default_plan("business").start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let path = "/v1/orgs/acme/scim/token";
    for method in [Method::GET, Method::POST] {
        app.call(As::Session(&owner), method, path, None)
            .await
            .assert_problem(403, "plan-required");
    }
    // Revoking is never gated: with no token it is simply not found.
    app.call(As::Session(&owner), Method::DELETE, path, None)
        .await
        .assert_problem(404, "not-found");

    // A token issued on enterprise stops working when the plan lacks SCIM.
    let org_id = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::organizations::Entity::find()
            .filter(entities::organizations::Column::Slug.eq("acme"))
            .one(&app.state.db.orm)
            .await
            .expect("query")
            .expect("org")
            .id
    };
    domain::billing::set_plan(
        &app.state.db.orm,
        org_id.into(),
        &domain::billing::Plan::from("enterprise"),
        app.clock_now(),
    )
    .await
    .expect("plan set");
    let token = scim_token(&app, &owner, "acme").await;
    assert_eq!(
        scim(&app, &token, Method::GET, "/scim/v2/Users", None)
            .await
            .status
            .as_u16(),
        200
    );
    domain::billing::set_plan(
        &app.state.db.orm,
        org_id.into(),
        &domain::billing::Plan::from("team"),
        app.clock_now(),
    )
        .await
        .expect("plan set");
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Users", None).await,
        403,
        None,
    );
    app.stop().await;
}

#[tokio::test]
async fn scim_errors_are_scims_own_for_every_failure_of_the_protocol() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let token = scim_token(&app, &owner, "acme").await;
    // No token, a malformed one, a session cookie instead.
    let none = app.get("/scim/v2/Users").await;
    assert_scim_error(&none, 401, None);
    assert_scim_error(
        &scim(&app, "scim_nope", Method::GET, "/scim/v2/Users", None).await,
        401,
        None,
    );
    let with_cookie = app
        .call(As::Session(&owner), Method::GET, "/scim/v2/Users", None)
        .await;
    assert_scim_error(&with_cookie, 401, None);
    // An API token is not a SCIM token.
    let api_token = app.api_token(&owner, "acme", Role::Owner).await;
    assert_scim_error(
        &scim(&app, &api_token, Method::GET, "/scim/v2/Users", None).await,
        401,
        None,
    );
    // Unknown resource, unknown path, wrong method.
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Users/usr_00000000000000000000000000", None).await,
        404,
        None,
    );
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Users/not-an-id", None).await,
        404,
        None,
    );
    assert_scim_error(&scim(&app, &token, Method::GET, "/scim/v2/Nothing", None).await, 404, None);
    assert_scim_error(
        &scim(&app, &token, Method::PUT, "/scim/v2/Users", Some(json!({}))).await,
        405,
        None,
    );
    // Bodies that are not JSON, or not a user.
    let response = app
        .http
        .post(app.url("/scim/v2/Users"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", SCIM_JSON)
        .body("{not json")
        .send()
        .await
        .expect("sent");
    let response = TestResponse {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.expect("body"),
    };
    assert_scim_error(&response, 400, Some("invalidSyntax"));
    assert_scim_error(
        &scim(&app, &token, Method::POST, "/scim/v2/Users", Some(json!({"emails": []}))).await,
        400,
        Some("invalidSyntax"),
    );
    assert_scim_error(
        &scim(&app, &token, Method::POST, "/scim/v2/Users", Some(json!({"userName": "not an address"}))).await,
        400,
        Some("invalidValue"),
    );
    // Discovery.
    let config = scim(&app, &token, Method::GET, "/scim/v2/ServiceProviderConfig", None).await;
    assert_eq!(config.status.as_u16(), 200, "{}", config.body);
    assert_eq!(config.json()["patch"]["supported"], true);
    let types = scim(&app, &token, Method::GET, "/scim/v2/ResourceTypes", None).await.json();
    assert_eq!(types["totalResults"], 2);
    let schemas = scim(&app, &token, Method::GET, "/scim/v2/Schemas", None).await.json();
    assert_eq!(schemas["totalResults"], 2);
    let user_schema = scim(
        &app,
        &token,
        Method::GET,
        "/scim/v2/Schemas/urn:ietf:params:scim:schemas:core:2.0:User",
        None,
    )
    .await;
    assert_eq!(user_schema.status.as_u16(), 200, "{}", user_schema.body);
    app.stop().await;
}

#[tokio::test]
async fn a_filter_other_than_user_name_eq_is_invalid_filter() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let token = scim_token(&app, &owner, "acme").await;
    for filter in [
        "userName co \"ann\"",
        "emails.value eq \"ann@acme.test\"",
        "userName eq \"a\" or userName eq \"b\"",
        "userName eq",
        "(((",
    ] {
        let path = format!(
            "/scim/v2/Users?filter={}",
            url_escape(filter)
        );
        let response = scim(&app, &token, Method::GET, &path, None).await;
        assert_scim_error(&response, 400, Some("invalidFilter"));
    }
    app.stop().await;
}

fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn users_are_created_found_by_user_name_paged_replaced_and_deleted() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let token = scim_token(&app, &owner, "acme").await;
    let id = create_user(&app, &token, "Ann@Acme.test").await;
    assert!(id.starts_with("usr_"), "{id}");
    // The same userName again, in another case: uniqueness.
    assert_scim_error(
        &scim(&app, &token, Method::POST, "/scim/v2/Users", Some(new_user("ann@acme.TEST"))).await,
        409,
        Some("uniqueness"),
    );
    for n in 0..3 {
        create_user(&app, &token, &format!("user{n}@acme.test")).await;
    }
    // Found by userName eq, without regard to case.
    let found = scim(
        &app,
        &token,
        Method::GET,
        &format!("/scim/v2/Users?filter={}", url_escape("userName eq \"ANN@acme.test\"")),
        None,
    )
    .await;
    assert_eq!(found.status.as_u16(), 200, "{}", found.body);
    let found = found.json();
    assert_eq!(found["totalResults"], 1);
    assert_eq!(found["Resources"][0]["id"], id.as_str());
    assert_eq!(found["Resources"][0]["userName"], "Ann@Acme.test");
    assert_eq!(found["Resources"][0]["emails"][0]["value"], "ann@acme.test");
    assert_eq!(found["Resources"][0]["name"]["givenName"], "Ann");
    let none = scim(
        &app,
        &token,
        Method::GET,
        &format!("/scim/v2/Users?filter={}", url_escape("userName eq \"nobody@acme.test\"")),
        None,
    )
    .await
    .json();
    assert_eq!(none["totalResults"], 0);
    assert_eq!(none["Resources"], json!([]));
    // Paging: startIndex is 1-based.
    let page = scim(&app, &token, Method::GET, "/scim/v2/Users?startIndex=2&count=2", None)
        .await
        .json();
    assert_eq!(page["totalResults"], 4);
    assert_eq!(page["startIndex"], 2);
    assert_eq!(page["itemsPerPage"], 2);
    assert_eq!(page["Resources"][0]["userName"], "user0@acme.test");

    // Without role mappings or a default role, a provisioned user is not (yet) a member.
    assert_eq!(role_of(&app, &owner, "ann@acme.test").await, None);

    // Replace.
    let mut replaced = new_user("ann.lee@acme.test");
    replaced["externalId"] = json!("okta-123");
    let put = scim(&app, &token, Method::PUT, &format!("/scim/v2/Users/{id}"), Some(replaced)).await;
    assert_eq!(put.status.as_u16(), 200, "{}", put.body);
    assert_eq!(put.json()["userName"], "ann.lee@acme.test");
    assert_eq!(put.json()["externalId"], "okta-123");

    // Delete.
    let deleted = scim(&app, &token, Method::DELETE, &format!("/scim/v2/Users/{id}"), None).await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    assert_scim_error(
        &scim(&app, &token, Method::GET, &format!("/scim/v2/Users/{id}"), None).await,
        404,
        None,
    );
    app.stop().await;
}

#[tokio::test]
async fn another_organizations_ids_are_not_found_and_untouched() {
    let app = TestApp::new().await;
    let acme = app.sign_up("owner@acme.test", "acme").await;
    let globex = app.sign_up("owner@globex.test", "globex").await;
    let acme_token = scim_token(&app, &acme, "acme").await;
    let globex_token = scim_token(&app, &globex, "globex").await;
    let user = create_user(&app, &acme_token, "ann@acme.test").await;
    let group = scim(
        &app,
        &acme_token,
        Method::POST,
        "/scim/v2/Groups",
        Some(json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "ops", "members": [{"value": user}]})),
    )
    .await;
    assert_eq!(group.status.as_u16(), 201, "{}", group.body);
    let group = group.json()["id"].as_str().expect("id").to_owned();

    let deactivate = json!({"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "value": {"active": false}}]});
    for (method, path, body) in [
        (Method::GET, format!("/scim/v2/Users/{user}"), None),
        (Method::PUT, format!("/scim/v2/Users/{user}"), Some(new_user("evil@globex.test"))),
        (Method::PATCH, format!("/scim/v2/Users/{user}"), Some(deactivate.clone())),
        (Method::DELETE, format!("/scim/v2/Users/{user}"), None),
        (Method::GET, format!("/scim/v2/Groups/{group}"), None),
        (Method::DELETE, format!("/scim/v2/Groups/{group}"), None),
    ] {
        let response = scim(&app, &globex_token, method.clone(), &path, body).await;
        assert_scim_error(&response, 404, None);
    }
    // Naming acme's user as a member of a globex group is refused too.
    let smuggle = scim(
        &app,
        &globex_token,
        Method::POST,
        "/scim/v2/Groups",
        Some(json!({"displayName": "ops", "members": [{"value": user}]})),
    )
    .await;
    assert_scim_error(&smuggle, 400, Some("invalidValue"));
    // globex sees none of acme's users.
    let list = scim(&app, &globex_token, Method::GET, "/scim/v2/Users", None).await.json();
    assert_eq!(list["totalResults"], 0);
    // acme's user is as it was.
    let still = scim(&app, &acme_token, Method::GET, &format!("/scim/v2/Users/{user}"), None)
        .await
        .json();
    assert_eq!(still["active"], true);
    assert_eq!(still["userName"], "ann@acme.test");
    assert_eq!(still["groups"][0]["value"], group.as_str());
    app.stop().await;
}
