//! SCIM provisioning (decisions §15): the token operations with every error cause, and the
//! SCIM 2.0 protocol as identity providers speak it — users created, found by `userName eq`,
//! given a role through a group, deactivated (their session refused on the next request) and
//! deleted; revoked tokens, other organizations' ids, bad filters, the last owner, and the
//! PATCH bodies Okta and Microsoft Entra send, verbatim.

use domain::roles::Role;
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
    assert_eq!(
        body["status"],
        status.to_string(),
        "status is a string: {body}"
    );
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
    let created = scim(
        app,
        token,
        Method::POST,
        "/scim/v2/Users",
        Some(new_user(user_name)),
    )
    .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    assert_eq!(created.header("content-type"), Some(SCIM_JSON));
    created.json()["id"].as_str().expect("id").to_owned()
}

async fn role_of(app: &TestApp, owner: &tests::Session, email: &str) -> Option<String> {
    let members = app
        .call(
            As::Session(owner),
            Method::GET,
            "/v1/orgs/acme/members?limit=500",
            None,
        )
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
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    let status = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/scim/token",
            None,
        )
        .await;
    assert_eq!(status.status.as_u16(), 200, "{}", status.body);
    let status = status.json();
    assert_eq!(status["issued"], false);
    assert_eq!(status["base_url"], format!("{}/scim/v2", tests::BASE_URL));
    assert!(status.get("token").is_none());

    let first = scim_token(&app, &owner, "acme").await;
    assert!(first.starts_with("scim_"), "{first}");
    let status = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/scim/token",
            None,
        )
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
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/scim/token",
            None,
        )
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
        .call(
            As::Session(&owner),
            Method::DELETE,
            "/v1/orgs/acme/scim/token",
            None,
        )
        .await;
    assert_eq!(revoked.status.as_u16(), 204, "{}", revoked.body);
    let refused = scim(
        &app,
        &second,
        Method::GET,
        &format!("/scim/v2/Users/{id}"),
        None,
    )
    .await;
    assert_scim_error(&refused, 401, None);
    assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
    let status = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/scim/token",
            None,
        )
        .await
        .json();
    assert_eq!(status["issued"], false);
    // Revoking when none is issued: not found.
    app.call(
        As::Session(&owner),
        Method::DELETE,
        "/v1/orgs/acme/scim/token",
        None,
    )
    .await
    .assert_problem(404, "not-found");
    app.stop().await;
}

#[tokio::test]
async fn every_error_cause_of_the_scim_token_operations() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
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
        // Not permitted for the role: an operator, and an admin (decisions §18: owners only).
        for below in [&operator, &admin] {
            app.call(As::Session(below), method.clone(), path, None)
                .await
                .assert_problem(403, "forbidden");
        }
        // An API token, even the owner's: a person is needed.
        app.call(As::Bearer(&api_token), method.clone(), path, None)
            .await
            .assert_problem(403, "forbidden");
        // Another organization, or none: one answer.
        app.call(
            As::Session(&owner),
            method.clone(),
            "/v1/orgs/globex/scim/token",
            None,
        )
        .await
        .assert_problem(404, "not-found");
        app.call(
            As::Session(&owner),
            method.clone(),
            "/v1/orgs/nope/scim/token",
            None,
        )
        .await
        .assert_problem(404, "not-found");
    }
    // No CSRF token on the mutations.
    for method in [Method::POST, Method::DELETE] {
        app.call(As::SessionWithoutCsrf(&owner), method, path, None)
            .await
            .assert_problem(403, "forbidden");
    }
    // The owner may.
    let issued = app
        .call(As::Session(&owner), Method::POST, path, None)
        .await;
    assert_eq!(issued.status.as_u16(), 201, "{}", issued.body);
    // Nothing was issued by the refused calls: one audit entry.
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events",
            None,
        )
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
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
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
    // Written behind the API's back.
    app.identity_settled().await;
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
    // Written behind the API's back.
    app.identity_settled().await;
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
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
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
        &scim(
            &app,
            &token,
            Method::GET,
            "/scim/v2/Users/usr_00000000000000000000000000",
            None,
        )
        .await,
        404,
        None,
    );
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Users/not-an-id", None).await,
        404,
        None,
    );
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Nothing", None).await,
        404,
        None,
    );
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
        &scim(
            &app,
            &token,
            Method::POST,
            "/scim/v2/Users",
            Some(json!({"emails": []})),
        )
        .await,
        400,
        Some("invalidSyntax"),
    );
    assert_scim_error(
        &scim(
            &app,
            &token,
            Method::POST,
            "/scim/v2/Users",
            Some(json!({"userName": "  "})),
        )
        .await,
        400,
        Some("invalidValue"),
    );
    // Discovery.
    let config = scim(
        &app,
        &token,
        Method::GET,
        "/scim/v2/ServiceProviderConfig",
        None,
    )
    .await;
    assert_eq!(config.status.as_u16(), 200, "{}", config.body);
    assert_eq!(config.json()["patch"]["supported"], true);
    let types = scim(&app, &token, Method::GET, "/scim/v2/ResourceTypes", None)
        .await
        .json();
    assert_eq!(types["totalResults"], 2);
    let schemas = scim(&app, &token, Method::GET, "/scim/v2/Schemas", None)
        .await
        .json();
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
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    let token = scim_token(&app, &owner, "acme").await;
    for filter in [
        "userName co \"ann\"",
        "emails.value eq \"ann@acme.test\"",
        "userName eq \"a\" or userName eq \"b\"",
        "userName eq",
        "(((",
    ] {
        let path = format!("/scim/v2/Users?filter={}", url_escape(filter));
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
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    let token = scim_token(&app, &owner, "acme").await;
    let id = create_user(&app, &token, "Ann@Acme.test").await;
    assert!(id.starts_with("usr_"), "{id}");
    // The same userName again, in another case: uniqueness.
    assert_scim_error(
        &scim(
            &app,
            &token,
            Method::POST,
            "/scim/v2/Users",
            Some(new_user("ann@acme.TEST")),
        )
        .await,
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
        &format!(
            "/scim/v2/Users?filter={}",
            url_escape("userName eq \"ANN@acme.test\"")
        ),
        None,
    )
    .await;
    assert_eq!(found.status.as_u16(), 200, "{}", found.body);
    let found = found.json();
    assert_eq!(found["totalResults"], 1);
    assert_eq!(found["Resources"][0]["id"], id.as_str());
    assert_eq!(found["Resources"][0]["userName"], "Ann@Acme.test");
    assert_eq!(found["Resources"][0]["emails"][0]["value"], "Ann@Acme.test");
    assert_eq!(found["Resources"][0]["name"]["givenName"], "Ann");
    let none = scim(
        &app,
        &token,
        Method::GET,
        &format!(
            "/scim/v2/Users?filter={}",
            url_escape("userName eq \"nobody@acme.test\"")
        ),
        None,
    )
    .await
    .json();
    assert_eq!(none["totalResults"], 0);
    assert_eq!(none["Resources"], json!([]));
    // Paging: startIndex is 1-based.
    let page = scim(
        &app,
        &token,
        Method::GET,
        "/scim/v2/Users?startIndex=2&count=2",
        None,
    )
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
    let put = scim(
        &app,
        &token,
        Method::PUT,
        &format!("/scim/v2/Users/{id}"),
        Some(replaced),
    )
    .await;
    assert_eq!(put.status.as_u16(), 200, "{}", put.body);
    assert_eq!(put.json()["userName"], "ann.lee@acme.test");
    assert_eq!(put.json()["externalId"], "okta-123");

    // Delete.
    let deleted = scim(
        &app,
        &token,
        Method::DELETE,
        &format!("/scim/v2/Users/{id}"),
        None,
    )
    .await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    assert_scim_error(
        &scim(
            &app,
            &token,
            Method::GET,
            &format!("/scim/v2/Users/{id}"),
            None,
        )
        .await,
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
        (
            Method::PUT,
            format!("/scim/v2/Users/{user}"),
            Some(new_user("evil@globex.test")),
        ),
        (
            Method::PATCH,
            format!("/scim/v2/Users/{user}"),
            Some(deactivate.clone()),
        ),
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
    let list = scim(&app, &globex_token, Method::GET, "/scim/v2/Users", None)
        .await
        .json();
    assert_eq!(list["totalResults"], 0);
    // acme's user is as it was.
    let still = scim(
        &app,
        &acme_token,
        Method::GET,
        &format!("/scim/v2/Users/{user}"),
        None,
    )
    .await
    .json();
    assert_eq!(still["active"], true);
    assert_eq!(still["userName"], "ann@acme.test");
    assert_eq!(still["groups"][0]["value"], group.as_str());
    app.stop().await;
}

/// Saves organization `slug`'s SSO role mappings directly (the SSO save itself checks the
/// issuer's discovery document over https; its own tests cover that).
async fn map_groups(
    app: &TestApp,
    slug: &str,
    mappings: &[(&str, &str)],
    default_role: Option<&str>,
) {
    use entities::json::{JsonText, RoleMapping, SsoRole};
    use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
    let org = entities::organizations::Entity::find()
        .filter(entities::organizations::Column::Slug.eq(slug))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("org");
    let mappings: Vec<RoleMapping> = mappings
        .iter()
        .map(|(group, role)| RoleMapping {
            group: (*group).to_owned(),
            role: SsoRole::parse(role).expect("a mappable role"),
        })
        .collect();
    let now = app.clock_now();
    entities::sso_connections::ActiveModel {
        org_id: Set(org.id),
        enabled: Set(false),
        issuer: Set("https://idp.example.com".into()),
        client_id: Set("fleet".into()),
        client_secret: Set("v1:not-used-by-scim".into()),
        groups_claim: Set("groups".into()),
        role_mappings: Set(JsonText::new(&mappings).expect("mappings")),
        default_role: Set(default_role.map(str::to_owned)),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("connection");
}

/// Signs the account with `email` in directly (as the SSO callback would) and returns its
/// session.
async fn sign_in(app: &TestApp, email: &str) -> tests::Session {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let account = entities::accounts::Entity::find()
        .filter(entities::accounts::Column::Email.eq(email))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("account");
    let session = api::identity::auth::start_session(
        &app.state,
        &app.state.db.orm,
        account.id,
        app.clock_now(),
    )
    .await
    .expect("session");
    tests::Session {
        email: email.to_owned(),
        cookie: session
            .cookie
            .split(';')
            .next()
            .unwrap_or_default()
            .to_owned(),
        csrf: session.csrf_token,
    }
}

fn patch(operations: Value) -> Value {
    json!({"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"], "Operations": operations})
}

#[tokio::test]
async fn a_group_mapped_to_operator_makes_a_provisioned_user_an_operator_and_deactivation_ends_their_session()
 {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    map_groups(
        &app,
        "acme",
        &[("fleet-operators", "operator"), ("fleet-admins", "admin")],
        None,
    )
    .await;
    let token = scim_token(&app, &owner, "acme").await;

    // Okta looks the user up first, then creates them.
    let lookup = format!(
        "/scim/v2/Users?filter={}",
        url_escape("userName eq \"ann@acme.test\"")
    );
    assert_eq!(
        scim(&app, &token, Method::GET, &lookup, None).await.json()["totalResults"],
        0
    );
    let ann = create_user(&app, &token, "ann@acme.test").await;
    let found = scim(&app, &token, Method::GET, &lookup, None).await.json();
    assert_eq!(found["Resources"][0]["id"], ann.as_str());
    // No group yet and no default role: provisioned, not a member.
    assert_eq!(role_of(&app, &owner, "ann@acme.test").await, None);

    // Entra: create the group, then add members.
    let operators = scim(&app, &token, Method::POST, "/scim/v2/Groups",
        Some(json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "fleet-operators", "members": []}))).await;
    assert_eq!(operators.status.as_u16(), 201, "{}", operators.body);
    assert!(operators.header("location").is_some());
    let operators = operators.json()["id"].as_str().expect("id").to_owned();
    let added = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Groups/{operators}"),
        Some(patch(
            json!([{"op": "Add", "path": "members", "value": [{"value": ann}]}]),
        )),
    )
    .await;
    assert_eq!(added.status.as_u16(), 200, "{}", added.body);
    assert_eq!(
        role_of(&app, &owner, "ann@acme.test").await.as_deref(),
        Some("operator")
    );

    // Ann signs in; her session works.
    let session = sign_in(&app, "ann@acme.test").await;
    assert_eq!(
        app.call(
            As::Session(&session),
            Method::GET,
            "/v1/orgs/acme/hosts",
            None
        )
        .await
        .status
        .as_u16(),
        200
    );

    // Okta: a second group, pushed with members; the highest role wins.
    let admins = scim(&app, &token, Method::POST, "/scim/v2/Groups",
        Some(json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "fleet-admins", "members": [{"value": ann, "display": "ann@acme.test"}]}))).await;
    assert_eq!(admins.status.as_u16(), 201, "{}", admins.body);
    let admins = admins.json()["id"].as_str().expect("id").to_owned();
    assert_eq!(
        role_of(&app, &owner, "ann@acme.test").await.as_deref(),
        Some("admin")
    );
    let user = scim(
        &app,
        &token,
        Method::GET,
        &format!("/scim/v2/Users/{ann}"),
        None,
    )
    .await
    .json();
    assert_eq!(user["groups"].as_array().map(Vec::len), Some(2), "{user}");
    // Okta removes her from it by filter: back to operator.
    let removed = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Groups/{admins}"),
        Some(patch(
            json!([{"op": "remove", "path": format!("members[value eq \"{ann}\"]")}]),
        )),
    )
    .await;
    assert_eq!(removed.status.as_u16(), 200, "{}", removed.body);
    assert_eq!(
        role_of(&app, &owner, "ann@acme.test").await.as_deref(),
        Some("operator")
    );

    // Entra deactivates: the membership goes and her session is refused on the next request.
    let deactivated = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Users/{ann}"),
        Some(patch(
            json!([{"op": "Replace", "path": "active", "value": "False"}]),
        )),
    )
    .await;
    assert_eq!(deactivated.status.as_u16(), 200, "{}", deactivated.body);
    assert_eq!(deactivated.json()["active"], false);
    app.call(As::Session(&session), Method::GET, "/v1/me", None)
        .await
        .assert_problem(401, "unauthenticated");
    assert_eq!(role_of(&app, &owner, "ann@acme.test").await, None);
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=500",
            None,
        )
        .await
        .json();
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "scim.member_added",
        "scim.member_role_changed",
        "scim.member_removed",
    ] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }

    // Okta reactivates (path-less replace): she is an operator again.
    let reactivated = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Users/{ann}"),
        Some(patch(json!([{"op": "replace", "value": {"active": true}}]))),
    )
    .await;
    assert_eq!(reactivated.status.as_u16(), 200, "{}", reactivated.body);
    assert_eq!(
        role_of(&app, &owner, "ann@acme.test").await.as_deref(),
        Some("operator")
    );
    let session = sign_in(&app, "ann@acme.test").await;

    // Deleted: the membership goes, her session ends, the group forgets her.
    let deleted = scim(
        &app,
        &token,
        Method::DELETE,
        &format!("/scim/v2/Users/{ann}"),
        None,
    )
    .await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    assert_eq!(role_of(&app, &owner, "ann@acme.test").await, None);
    app.call(As::Session(&session), Method::GET, "/v1/me", None)
        .await
        .assert_problem(401, "unauthenticated");
    assert_scim_error(
        &scim(
            &app,
            &token,
            Method::GET,
            &format!("/scim/v2/Users/{ann}"),
            None,
        )
        .await,
        404,
        None,
    );
    let group = scim(
        &app,
        &token,
        Method::GET,
        &format!("/scim/v2/Groups/{operators}"),
        None,
    )
    .await
    .json();
    assert_eq!(group["members"], json!([]));
    app.stop().await;
}

#[tokio::test]
async fn the_default_role_applies_without_a_matching_group_and_owners_stay_owners() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    map_groups(&app, "acme", &[("fleet-admins", "admin")], Some("viewer")).await;
    let token = scim_token(&app, &owner, "acme").await;
    create_user(&app, &token, "bob@acme.test").await;
    assert_eq!(
        role_of(&app, &owner, "bob@acme.test").await.as_deref(),
        Some("viewer")
    );
    // The owner, provisioned too and put in a group mapped to admin, stays owner.
    let owner_id = create_user(&app, &token, "owner@acme.test").await;
    let group = scim(
        &app,
        &token,
        Method::POST,
        "/scim/v2/Groups",
        Some(json!({"displayName": "fleet-admins", "members": [{"value": owner_id}]})),
    )
    .await;
    assert_eq!(group.status.as_u16(), 201, "{}", group.body);
    assert_eq!(
        role_of(&app, &owner, "owner@acme.test").await.as_deref(),
        Some("owner")
    );
    // Bob joins the admins' group: the mapping beats the default.
    let group = group.json()["id"].as_str().expect("id").to_owned();
    let bob = scim(
        &app,
        &token,
        Method::GET,
        &format!(
            "/scim/v2/Users?filter={}",
            url_escape("userName eq \"bob@acme.test\"")
        ),
        None,
    )
    .await
    .json()["Resources"][0]["id"]
        .as_str()
        .expect("bob")
        .to_owned();
    let added = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Groups/{group}"),
        Some(patch(
            json!([{"op": "add", "path": "members", "value": [{"value": bob}]}]),
        )),
    )
    .await;
    assert_eq!(added.status.as_u16(), 200, "{}", added.body);
    assert_eq!(
        role_of(&app, &owner, "bob@acme.test").await.as_deref(),
        Some("admin")
    );
    // Renamed away from its mapping, the group gives nothing: bob falls back to the default.
    let renamed = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Groups/{group}"),
        Some(patch(
            json!([{"op": "replace", "path": "displayName", "value": "former-admins"}]),
        )),
    )
    .await;
    assert_eq!(renamed.status.as_u16(), 200, "{}", renamed.body);
    assert_eq!(
        role_of(&app, &owner, "bob@acme.test").await.as_deref(),
        Some("viewer")
    );
    assert_eq!(
        role_of(&app, &owner, "owner@acme.test").await.as_deref(),
        Some("owner")
    );
    app.stop().await;
}

#[tokio::test]
async fn deprovisioning_the_last_owner_is_refused_and_changes_nothing() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    let token = scim_token(&app, &owner, "acme").await;
    // The owner's own address, provisioned: the existing account is linked.
    let id = create_user(&app, &token, "owner@acme.test").await;
    assert_eq!(
        role_of(&app, &owner, "owner@acme.test").await.as_deref(),
        Some("owner")
    );

    for (method, body) in [
        (
            Method::PATCH,
            Some(patch(
                json!([{"op": "replace", "value": {"active": false}}]),
            )),
        ),
        (
            Method::PATCH,
            Some(patch(
                json!([{"op": "Replace", "path": "active", "value": "False"}]),
            )),
        ),
        (
            Method::PUT,
            Some(json!({"userName": "owner@acme.test", "active": false})),
        ),
        (Method::DELETE, None),
    ] {
        let refused = scim(
            &app,
            &token,
            method.clone(),
            &format!("/scim/v2/Users/{id}"),
            body,
        )
        .await;
        let error = assert_scim_error(&refused, 409, None);
        assert!(
            error["detail"]
                .as_str()
                .is_some_and(|d| d.contains("last owner")),
            "{error}"
        );
    }
    // Nothing was written: still active, still owner, still signed in.
    let user = scim(
        &app,
        &token,
        Method::GET,
        &format!("/scim/v2/Users/{id}"),
        None,
    )
    .await
    .json();
    assert_eq!(user["active"], true);
    assert_eq!(
        role_of(&app, &owner, "owner@acme.test").await.as_deref(),
        Some("owner")
    );
    assert_eq!(
        app.call(As::Session(&owner), Method::GET, "/v1/me", None)
            .await
            .status
            .as_u16(),
        200
    );

    // With a second owner, the first can be deprovisioned.
    let second = app.member("acme", Role::Owner, "second@acme.test").await;
    let deactivated = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Users/{id}"),
        Some(patch(
            json!([{"op": "replace", "value": {"active": false}}]),
        )),
    )
    .await;
    assert_eq!(deactivated.status.as_u16(), 200, "{}", deactivated.body);
    assert_eq!(role_of(&app, &second, "owner@acme.test").await, None);
    app.stop().await;
}

#[tokio::test]
async fn okta_and_entra_patch_bodies_verbatim() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    // acme.test is the organization's own: its addresses become members directly.
    app.verified_domain("acme", "acme.test").await;
    map_groups(&app, "acme", &[("Engineering", "operator")], None).await;
    let token = scim_token(&app, &owner, "acme").await;

    // Microsoft Entra: create, then update attributes (with the enterprise extension).
    let entra_user = scim(&app, &token, Method::POST, "/scim/v2/Users", Some(serde_json::from_str::<Value>(r#"{
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User", "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],
        "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
        "userName": "Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1@acme.test",
        "active": true,
        "emails": [{"primary": true, "type": "work", "value": "Test_User_fd0ea19b-0777-472c-9f96-4f70d2226f2e@acme.test"}],
        "meta": {"resourceType": "User"},
        "name": {"formatted": "givenName familyName", "familyName": "familyName", "givenName": "givenName"},
        "roles": []
    }"#).expect("json"))).await;
    assert_eq!(entra_user.status.as_u16(), 201, "{}", entra_user.body);
    let entra_id = entra_user.json()["id"].as_str().expect("id").to_owned();
    let updated = scim(&app, &token, Method::PATCH, &format!("/scim/v2/Users/{entra_id}"), Some(serde_json::from_str::<Value>(r#"{
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [
            {"op": "Replace", "path": "emails[type eq \"work\"].value", "value": "updatedEmail@acme.test"},
            {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"},
            {"op": "Add", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department", "value": "Engineering"},
            {"op": "Add", "path": "displayName", "value": "Updated Name"}
        ]
    }"#).expect("json"))).await;
    assert_eq!(updated.status.as_u16(), 200, "{}", updated.body);
    let updated = updated.json();
    assert_eq!(updated["name"]["familyName"], "updatedFamilyName");
    assert_eq!(updated["displayName"], "Updated Name");
    assert_eq!(updated["emails"][0]["value"], "updatedEmail@acme.test");

    // Entra: a group, members added and removed by value list, renamed.
    let group = scim(&app, &token, Method::POST, "/scim/v2/Groups", Some(serde_json::from_str::<Value>(r#"{
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group", "http://schemas.microsoft.com/2006/11/ResourceManagement/ADSCIM/2.0/Group"],
        "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159",
        "displayName": "Engineering",
        "meta": {"resourceType": "Group"}
    }"#).expect("json"))).await;
    assert_eq!(group.status.as_u16(), 201, "{}", group.body);
    let group_id = group.json()["id"].as_str().expect("id").to_owned();
    let body = format!(
        r#"{{"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{{"op": "Add", "path": "members", "value": [{{"value": "{entra_id}"}}]}}]}}"#
    );
    let added = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Groups/{group_id}"),
        Some(serde_json::from_str(&body).expect("json")),
    )
    .await;
    assert_eq!(added.status.as_u16(), 200, "{}", added.body);
    assert_eq!(
        role_of(
            &app,
            &owner,
            "test_user_fd0ea19b-0777-472c-9f96-4f70d2226f2e@acme.test"
        )
        .await
        .as_deref(),
        Some("operator")
    );
    let body = format!(
        r#"{{"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{{"op": "Remove", "path": "members", "value": [{{"value": "{entra_id}"}}]}}]}}"#
    );
    let removed = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Groups/{group_id}"),
        Some(serde_json::from_str(&body).expect("json")),
    )
    .await;
    assert_eq!(removed.status.as_u16(), 200, "{}", removed.body);
    assert_eq!(
        role_of(
            &app,
            &owner,
            "test_user_fd0ea19b-0777-472c-9f96-4f70d2226f2e@acme.test"
        )
        .await,
        None
    );
    let renamed = scim(&app, &token, Method::PATCH, &format!("/scim/v2/Groups/{group_id}"), Some(serde_json::from_str::<Value>(r#"{
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "Replace", "path": "displayName", "value": "1879db59-3bdf-4490-ad68-ab880a269474updatedDisplayName"}]
    }"#).expect("json"))).await;
    assert_eq!(renamed.status.as_u16(), 200, "{}", renamed.body);
    assert_eq!(
        renamed.json()["displayName"],
        "1879db59-3bdf-4490-ad68-ab880a269474updatedDisplayName"
    );

    // Okta: create (with a password it does not get to set), deactivate, group push.
    let okta_user = scim(
        &app,
        &token,
        Method::POST,
        "/scim/v2/Users",
        Some(
            serde_json::from_str::<Value>(
                r#"{
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": "test.user@acme.test",
        "name": {"givenName": "Test", "familyName": "User"},
        "emails": [{"primary": true, "value": "test.user@acme.test", "type": "work"}],
        "displayName": "Test User",
        "locale": "en-US",
        "externalId": "00ujl29u0le5T6Aj10h7",
        "groups": [],
        "password": "1mz050nq",
        "active": true
    }"#,
            )
            .expect("json"),
        ),
    )
    .await;
    assert_eq!(okta_user.status.as_u16(), 201, "{}", okta_user.body);
    let okta_id = okta_user.json()["id"].as_str().expect("id").to_owned();
    assert!(okta_user.json().get("password").is_none());
    let pushed = scim(
        &app,
        &token,
        Method::POST,
        "/scim/v2/Groups",
        Some(
            serde_json::from_str::<Value>(&format!(
                r#"{{
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
        "displayName": "Test SCIMv2",
        "members": [{{"value": "{okta_id}", "display": "test.user@acme.test"}}]
    }}"#
            ))
            .expect("json"),
        ),
    )
    .await;
    assert_eq!(pushed.status.as_u16(), 201, "{}", pushed.body);
    let pushed_id = pushed.json()["id"].as_str().expect("id").to_owned();
    let renamed = scim(&app, &token, Method::PATCH, &format!("/scim/v2/Groups/{pushed_id}"), Some(serde_json::from_str::<Value>(&format!(r#"{{
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{{"op": "replace", "value": {{"id": "{pushed_id}", "displayName": "Engineering-2"}}}}]
    }}"#)).expect("json"))).await;
    assert_eq!(renamed.status.as_u16(), 200, "{}", renamed.body);
    assert_eq!(renamed.json()["displayName"], "Engineering-2");
    let deactivated = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Users/{okta_id}"),
        Some(
            serde_json::from_str::<Value>(
                r#"{
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "value": {"active": false}}]
    }"#,
            )
            .expect("json"),
        ),
    )
    .await;
    assert_eq!(deactivated.status.as_u16(), 200, "{}", deactivated.body);
    assert_eq!(deactivated.json()["active"], false);
    app.stop().await;
}

// --- Trust boundaries (decisions §18) ---------------------------------------------------------

/// The SCIM token provisions anyone at the verified domains, owners' peers included: only an
/// owner may issue, read or revoke it.
#[tokio::test]
async fn only_an_owner_may_issue_read_or_revoke_the_scim_token() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    for method in [Method::POST, Method::GET, Method::DELETE] {
        app.call(
            As::Session(&admin),
            method.clone(),
            "/v1/orgs/acme/scim/token",
            None,
        )
        .await
        .assert_problem(403, "forbidden");
    }
    let token = scim_token(&app, &owner, "acme").await;
    assert!(token.starts_with("scim_"));
    app.stop().await;
}

/// A token outlives nothing of its issuer's authority: demoted or removed, the owner who issued
/// it takes it with them, recorded and audited with the reason.
#[tokio::test]
async fn the_scim_token_stops_working_when_its_issuer_is_no_longer_an_owner() {
    let app = TestApp::new().await;
    let first = app.sign_up("owner@acme.test", "acme").await;
    let second = app.member("acme", Role::Owner, "second@acme.test").await;
    let issuer_id = app.member_id(&first, "second@acme.test").await;

    // Demoted to admin.
    let token = scim_token(&app, &second, "acme").await;
    assert_eq!(
        scim(&app, &token, Method::GET, "/scim/v2/Users", None)
            .await
            .status
            .as_u16(),
        200
    );
    let demoted = app
        .call(
            As::Session(&first),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{issuer_id}"),
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(demoted.status.as_u16(), 200, "{}", demoted.body);
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Users", None).await,
        401,
        None,
    );
    let status = app
        .call(
            As::Session(&first),
            Method::GET,
            "/v1/orgs/acme/scim/token",
            None,
        )
        .await
        .json();
    assert_eq!(status["issued"], false, "{status}");
    assert!(
        status["revoked_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no longer an owner")),
        "{status}"
    );
    let audit = app
        .call(
            As::Session(&first),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=500",
            None,
        )
        .await
        .json();
    let revoked = audit["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["action"] == "scim.token_revoked")
        .cloned()
        .unwrap_or_else(|| panic!("scim.token_revoked in {audit}"));
    assert!(
        revoked["details"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no longer an owner")),
        "{revoked}"
    );

    // Made owner again, issues a new token, and is removed: the token goes with them.
    let promoted = app
        .call(
            As::Session(&first),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{issuer_id}"),
            Some(json!({"role": "owner"})),
        )
        .await;
    assert_eq!(promoted.status.as_u16(), 200, "{}", promoted.body);
    let token = scim_token(&app, &second, "acme").await;
    let removed = app
        .call(
            As::Session(&first),
            Method::DELETE,
            &format!("/v1/orgs/acme/members/{issuer_id}"),
            None,
        )
        .await;
    assert_eq!(removed.status.as_u16(), 204, "{}", removed.body);
    assert_scim_error(
        &scim(&app, &token, Method::GET, "/scim/v2/Users", None).await,
        401,
        None,
    );
    // A token issued by an owner who stays owner keeps working.
    let kept = scim_token(&app, &first, "acme").await;
    assert_eq!(
        scim(&app, &kept, Method::GET, "/scim/v2/Users", None)
            .await
            .status
            .as_u16(),
        200
    );
    app.stop().await;
}

/// SCIM makes members directly only at the organization's verified domains; anybody else is
/// invited and joins by accepting, with the role their groups give.
#[tokio::test]
async fn a_scim_user_outside_the_verified_domains_is_invited_not_made_a_member() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    map_groups(&app, "acme", &[("fleet-operators", "operator")], None).await;
    let token = scim_token(&app, &owner, "acme").await;
    let inside = create_user(&app, &token, "ann@acme.test").await;
    let outside = create_user(&app, &token, "carl@elsewhere.test").await;
    let group = scim(&app, &token, Method::POST, "/scim/v2/Groups",
        Some(json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "fleet-operators",
            "members": [{"value": inside}, {"value": outside}]}))).await;
    assert_eq!(group.status.as_u16(), 201, "{}", group.body);

    assert_eq!(
        role_of(&app, &owner, "ann@acme.test").await.as_deref(),
        Some("operator"),
        "a member at once at the verified domain"
    );
    assert_eq!(
        role_of(&app, &owner, "carl@elsewhere.test").await,
        None,
        "not a member before accepting"
    );
    let invitations = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/invitations",
            None,
        )
        .await
        .json();
    let invitation = invitations["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["email"] == "carl@elsewhere.test")
        .cloned()
        .unwrap_or_else(|| panic!("an invitation for carl in {invitations}"));
    assert_eq!(invitation["status"], "pending");
    assert_eq!(invitation["role"], "operator");

    // The person accepts the emailed invitation and becomes an operator.
    let accept_token = app.emailed_token("carl@elsewhere.test").await;
    let accepted = app
        .post_json("/v1/invitations/accept", json!({"token": accept_token}))
        .await;
    assert_eq!(accepted.status.as_u16(), 200, "{}", accepted.body);
    assert_eq!(
        role_of(&app, &owner, "carl@elsewhere.test")
            .await
            .as_deref(),
        Some("operator")
    );
    app.stop().await;
}

/// Deprovisioning ends a person's sessions only when the organization controls the identity:
/// a stranger's account belongs to them, not to whoever provisioned it.
#[tokio::test]
async fn deprovisioning_an_address_outside_the_verified_domains_leaves_its_sessions_alone() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    map_groups(&app, "acme", &[], Some("viewer")).await;
    // Somebody with an account of their own, signed in, member of their own organization.
    let stranger = app.sign_up("dana@globex.test", "globex").await;
    let token = scim_token(&app, &owner, "acme").await;
    let dana = create_user(&app, &token, "dana@globex.test").await;
    let invited = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/invitations",
            None,
        )
        .await
        .json();
    assert!(
        invited["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["email"] == "dana@globex.test" && i["status"] == "pending"),
        "{invited}"
    );
    let deactivated = scim(
        &app,
        &token,
        Method::PATCH,
        &format!("/scim/v2/Users/{dana}"),
        Some(patch(
            json!([{"op": "replace", "path": "active", "value": false}]),
        )),
    )
    .await;
    assert_eq!(deactivated.status.as_u16(), 200, "{}", deactivated.body);
    let deleted = scim(
        &app,
        &token,
        Method::DELETE,
        &format!("/scim/v2/Users/{dana}"),
        None,
    )
    .await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    let me = app
        .call(As::Session(&stranger), Method::GET, "/v1/me", None)
        .await;
    assert_eq!(me.status.as_u16(), 200, "still signed in: {}", me.body);
    // The pending invitation went with the user.
    let invited = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/invitations",
            None,
        )
        .await
        .json();
    assert!(
        !invited["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["email"] == "dana@globex.test" && i["status"] == "pending"),
        "{invited}"
    );

    // At the verified domain the organization controls the identity: sessions end.
    let ann = create_user(&app, &token, "ann@acme.test").await;
    let session = sign_in(&app, "ann@acme.test").await;
    let deleted = scim(
        &app,
        &token,
        Method::DELETE,
        &format!("/scim/v2/Users/{ann}"),
        None,
    )
    .await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    app.call(As::Session(&session), Method::GET, "/v1/me", None)
        .await
        .assert_problem(401, "unauthenticated");
    app.stop().await;
}
