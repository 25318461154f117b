//! Walks the OpenAPI document and checks every organization-scoped operation against the
//! access rules, so operations added later are covered without editing this test.

use api::roles::Role;
use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, TestApp};

/// An organization-scoped operation as the document describes it.
struct Operation {
    method: Method,
    path: String,
    /// The least role the `org` parameter's description says it needs.
    requires: Role,
    api_tokens_refused: bool,
    has_body: bool,
}

fn operations(spec: &Value) -> Vec<Operation> {
    let mut found = Vec::new();
    for (path, item) in spec["paths"].as_object().into_iter().flatten() {
        if !path.contains("{org}") {
            continue;
        }
        for (method, operation) in item.as_object().into_iter().flatten() {
            let org_param = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == "org" && p["in"] == "path")
                .unwrap_or_else(|| panic!("{method} {path} has an org path parameter"));
            let description = org_param["schema"]["description"]
                .as_str()
                .or(org_param["description"].as_str())
                .unwrap_or_default();
            let role = description
                .split("Requires role `")
                .nth(1)
                .and_then(|rest| rest.split('`').next())
                .and_then(|r| r.parse::<Role>().ok())
                .unwrap_or_else(|| {
                    panic!("{method} {path} states the role it requires: {description:?}")
                });
            found.push(Operation {
                method: method.to_uppercase().parse().expect("method"),
                path: path.clone(),
                requires: role,
                api_tokens_refused: description.contains("API tokens are refused"),
                has_body: operation["requestBody"].is_object(),
            });
        }
    }
    assert!(
        !found.is_empty(),
        "the document has organization-scoped operations"
    );
    found
}

/// The path for organization `slug`, other parameters filled with well-formed ids.
fn concrete(path: &str, slug: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map(|e| start + e)
            .expect("closing brace");
        let name = &rest[start + 1..end];
        if name == "org" {
            out.push_str(slug);
        } else {
            out.push_str("zzz_00000000000000000000000000");
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn mutation(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

#[tokio::test]
async fn every_organization_operation_enforces_authentication_csrf_tenancy_and_role() {
    let app = TestApp::builder()
        .rate_limit(1_000_000, 1000.0)
        .start()
        .await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _other = app.sign_up("owner@globex.test", "globex").await;
    let members: Vec<(Role, tests::Session)> = {
        let mut members = Vec::new();
        for role in [Role::Admin, Role::Operator, Role::Viewer] {
            let session = app.member("acme", role, &format!("{role}@acme.test")).await;
            members.push((role, session));
        }
        members
    };
    let spec = app.get("/v1/openapi.json").await.json();
    let token = app.api_token(&owner, "acme", Role::Owner).await;

    for op in operations(&spec) {
        let path = concrete(&op.path, "acme");
        let body = op.has_body.then(|| json!({}));
        let label = format!("{} {}", op.method, op.path);

        // 1. No credentials.
        let response = app
            .call(As::Nobody, op.method.clone(), &path, body.clone())
            .await;
        response.assert_problem(401, "unauthenticated");

        // 2. A session mutation without the CSRF header.
        if mutation(&op.method) {
            let response = app
                .call(
                    As::SessionWithoutCsrf(&owner),
                    op.method.clone(),
                    &path,
                    body.clone(),
                )
                .await;
            let problem = response.assert_problem(403, "forbidden");
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("X-Service-Csrf")),
                "{label}"
            );
        }

        // 3. Another organization's slug answers exactly like a missing one.
        let theirs = app
            .call(
                As::Session(&owner),
                op.method.clone(),
                &concrete(&op.path, "globex"),
                body.clone(),
            )
            .await;
        let missing = app
            .call(
                As::Session(&owner),
                op.method.clone(),
                &concrete(&op.path, "no-such-org"),
                body.clone(),
            )
            .await;
        theirs.assert_problem(404, "not-found");
        assert_eq!(theirs.status, missing.status, "{label}");
        assert_eq!(theirs.body, missing.body, "{label}: identical bodies");
        assert_eq!(
            theirs.header("content-type"),
            missing.header("content-type")
        );

        // 4. Each role below the requirement is refused; each at or above it gets past access.
        for (role, session) in &members {
            let response = app
                .call(As::Session(session), op.method.clone(), &path, body.clone())
                .await;
            if role.at_least(op.requires) {
                assert!(
                    !(response.status == 403 || response.status == 401),
                    "{label} as {role} passes access: {} {}",
                    response.status,
                    response.body
                );
            } else {
                response.assert_problem(403, "forbidden");
            }
        }

        // 5. API tokens: refused where the document says so.
        let response = app
            .call(As::Bearer(&token), op.method.clone(), &path, body.clone())
            .await;
        if op.api_tokens_refused {
            response.assert_problem(403, "forbidden");
        } else {
            assert!(
                response.status != 401 && response.status != 403,
                "{label} accepts an API token: {} {}",
                response.status,
                response.body
            );
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn the_permission_matrix_holds_for_every_role_on_every_operation() {
    let app = TestApp::builder()
        .rate_limit(1_000_000, 1000.0)
        .start()
        .await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let mut sessions = vec![(Role::Owner, owner)];
    for role in [Role::Admin, Role::Operator, Role::Viewer] {
        sessions.push((
            role,
            app.member("acme", role, &format!("{role}@acme.test")).await,
        ));
    }
    let spec = app.get("/v1/openapi.json").await.json();
    // Decisions §4, per role: the least role of each right, as the document states it.
    let expected_rows = [
        ("GET", "/v1/orgs/{org}", Role::Viewer),
        ("GET", "/v1/orgs/{org}/members", Role::Admin),
        ("GET", "/v1/orgs/{org}/invitations", Role::Admin),
        ("GET", "/v1/orgs/{org}/api-tokens", Role::Admin),
        ("GET", "/v1/orgs/{org}/audit-events", Role::Admin),
    ];
    let ops = operations(&spec);
    for (method, path, least) in expected_rows {
        let op = ops
            .iter()
            .find(|o| o.method.as_str() == method && o.path == path)
            .unwrap_or_else(|| panic!("{method} {path} is documented"));
        assert_eq!(op.requires, least, "{method} {path} requires {least}");
    }
    for op in &ops {
        let path = concrete(&op.path, "acme");
        let body = op.has_body.then(|| json!({}));
        for (role, session) in &sessions {
            let response = app
                .call(As::Session(session), op.method.clone(), &path, body.clone())
                .await;
            let allowed = role.at_least(op.requires);
            assert_eq!(
                response.status != 403,
                allowed,
                "{role} on {} {}: {} {}",
                op.method,
                op.path,
                response.status,
                response.body
            );
        }
    }
    app.stop().await;
}
