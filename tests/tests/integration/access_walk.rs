//! Walks every organization-scoped operation of the OpenAPI document and checks it against the
//! access rules of decisions §3 and §4, written out by hand below: the document supplies the
//! list of operations (so one added later without a row here fails), never the rules themselves,
//! so loosening a requirement in the code fails this test.

use domain::roles::Role;
use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, TestApp};

/// Who may call an operation: the least role (decisions §4) and whether it needs a person, i.e.
/// refuses API tokens (decisions §3: API token create or revoke, invitations, member changes,
/// billing, SSO, SCIM tokens).
#[derive(Clone, Copy)]
struct Rule {
    least: Role,
    people_only: bool,
}

const fn anyone(least: Role) -> Rule {
    Rule {
        least,
        people_only: false,
    }
}

const fn in_person(least: Role) -> Rule {
    Rule {
        least,
        people_only: true,
    }
}

/// Decisions §4's matrix, one row per organization-scoped operation.
const RULES: &[(&str, &str, Rule)] = &[
    // read hosts, groups, proposals, policies: everyone.
    ("GET", "/v1/orgs/{org}", anyone(Role::Viewer)),
    (
        "GET",
        "/v1/orgs/{org}/proposals/{proposal_id}/impact",
        anyone(Role::Viewer),
    ),
    ("GET", "/v1/orgs/{org}/hosts", anyone(Role::Viewer)),
    ("GET", "/v1/orgs/{org}/hosts/count", anyone(Role::Viewer)),
    (
        "GET",
        "/v1/orgs/{org}/hosts/{host_id}/packages",
        anyone(Role::Viewer),
    ),
    (
        "GET",
        "/v1/orgs/{org}/hosts/{host_id}/updates",
        anyone(Role::Viewer),
    ),
    (
        "GET",
        "/v1/orgs/{org}/hosts/{host_id}",
        anyone(Role::Viewer),
    ),
    (
        "GET",
        "/v1/orgs/{org}/hosts/{host_id}/events",
        anyone(Role::Viewer),
    ),
    ("GET", "/v1/orgs/{org}/groups", anyone(Role::Viewer)),
    (
        "GET",
        "/v1/orgs/{org}/groups/{group_id}",
        anyone(Role::Viewer),
    ),
    ("GET", "/v1/orgs/{org}/proposals", anyone(Role::Viewer)),
    (
        "GET",
        "/v1/orgs/{org}/proposals/{proposal_id}",
        anyone(Role::Viewer),
    ),
    ("GET", "/v1/orgs/{org}/policies", anyone(Role::Viewer)),
    // previewing a policy reads hosts and groups only.
    (
        "POST",
        "/v1/orgs/{org}/policies/preview",
        anyone(Role::Viewer),
    ),
    (
        "GET",
        "/v1/orgs/{org}/policies/{policy_id}",
        anyone(Role::Viewer),
    ),
    // read and write comments: operator and up (the viewer does not see the discussion).
    (
        "GET",
        "/v1/orgs/{org}/proposals/{proposal_id}/comments",
        anyone(Role::Operator),
    ),
    (
        "POST",
        "/v1/orgs/{org}/proposals/{proposal_id}/comments",
        anyone(Role::Operator),
    ),
    // whom a comment can mention: those who may comment.
    ("GET", "/v1/orgs/{org}/mentionable", anyone(Role::Operator)),
    // read agent releases: operator and up.
    (
        "GET",
        "/v1/orgs/{org}/agent-releases",
        anyone(Role::Operator),
    ),
    // approve, reject, snooze; edit hosts; manage groups: operator and up.
    (
        "POST",
        "/v1/orgs/{org}/proposals/{proposal_id}/approve",
        anyone(Role::Operator),
    ),
    (
        "POST",
        "/v1/orgs/{org}/proposals/{proposal_id}/reject",
        anyone(Role::Operator),
    ),
    (
        "POST",
        "/v1/orgs/{org}/proposals/{proposal_id}/snooze",
        anyone(Role::Operator),
    ),
    // halt and resume a rollout: operator and up (decisions §4, §20).
    (
        "POST",
        "/v1/orgs/{org}/proposals/{proposal_id}/halt",
        anyone(Role::Operator),
    ),
    (
        "POST",
        "/v1/orgs/{org}/proposals/{proposal_id}/resume",
        anyone(Role::Operator),
    ),
    // organization settings (`max_concurrent_reboots`): admin and up.
    ("PATCH", "/v1/orgs/{org}", anyone(Role::Admin)),
    (
        "PATCH",
        "/v1/orgs/{org}/hosts/{host_id}",
        anyone(Role::Operator),
    ),
    (
        "POST",
        "/v1/orgs/{org}/hosts/{host_id}/decommission",
        anyone(Role::Operator),
    ),
    ("POST", "/v1/orgs/{org}/groups", anyone(Role::Operator)),
    (
        "PATCH",
        "/v1/orgs/{org}/groups/{group_id}",
        anyone(Role::Operator),
    ),
    (
        "DELETE",
        "/v1/orgs/{org}/groups/{group_id}",
        anyone(Role::Operator),
    ),
    (
        "PUT",
        "/v1/orgs/{org}/groups/{group_id}/hosts",
        anyone(Role::Operator),
    ),
    // manage enrollment tokens and policies: admin and up.
    (
        "GET",
        "/v1/orgs/{org}/enrollment-tokens",
        anyone(Role::Admin),
    ),
    (
        "POST",
        "/v1/orgs/{org}/enrollment-tokens",
        anyone(Role::Admin),
    ),
    (
        "GET",
        "/v1/orgs/{org}/enrollment-tokens/{token_id}",
        anyone(Role::Admin),
    ),
    (
        "DELETE",
        "/v1/orgs/{org}/enrollment-tokens/{token_id}",
        anyone(Role::Admin),
    ),
    ("POST", "/v1/orgs/{org}/policies", anyone(Role::Admin)),
    (
        "PUT",
        "/v1/orgs/{org}/policies/{policy_id}",
        anyone(Role::Admin),
    ),
    (
        "DELETE",
        "/v1/orgs/{org}/policies/{policy_id}",
        anyone(Role::Admin),
    ),
    // members, invitations, API tokens: admin and up; changes need a person. Removing another
    // member is admin's; leaving (removing oneself) is every member's (members.rs tests it).
    ("GET", "/v1/orgs/{org}/members", anyone(Role::Admin)),
    (
        "PATCH",
        "/v1/orgs/{org}/members/{member_id}",
        in_person(Role::Admin),
    ),
    (
        "DELETE",
        "/v1/orgs/{org}/members/{member_id}",
        in_person(Role::Admin),
    ),
    ("GET", "/v1/orgs/{org}/invitations", in_person(Role::Admin)),
    ("POST", "/v1/orgs/{org}/invitations", in_person(Role::Admin)),
    (
        "DELETE",
        "/v1/orgs/{org}/invitations/{invitation_id}",
        in_person(Role::Admin),
    ),
    ("GET", "/v1/orgs/{org}/api-tokens", anyone(Role::Admin)),
    ("POST", "/v1/orgs/{org}/api-tokens", in_person(Role::Admin)),
    (
        "DELETE",
        "/v1/orgs/{org}/api-tokens/{api_token_id}",
        in_person(Role::Admin),
    ),
    ("GET", "/v1/orgs/{org}/audit-events", anyone(Role::Admin)),
    // SCIM token: the owner, in person (decisions §18).
    ("GET", "/v1/orgs/{org}/scim/token", in_person(Role::Owner)),
    ("POST", "/v1/orgs/{org}/scim/token", in_person(Role::Owner)),
    (
        "DELETE",
        "/v1/orgs/{org}/scim/token",
        in_person(Role::Owner),
    ),
    // billing, billing usage, plan changes: the owner, in person.
    ("GET", "/v1/orgs/{org}/billing", in_person(Role::Owner)),
    (
        "GET",
        "/v1/orgs/{org}/billing/usage",
        in_person(Role::Owner),
    ),
    (
        "POST",
        "/v1/orgs/{org}/billing/checkout",
        in_person(Role::Owner),
    ),
    // read and manage notification channels: admin and up.
    (
        "GET",
        "/v1/orgs/{org}/notification-channels",
        anyone(Role::Admin),
    ),
    (
        "POST",
        "/v1/orgs/{org}/notification-channels",
        anyone(Role::Admin),
    ),
    (
        "PATCH",
        "/v1/orgs/{org}/notification-channels/{channel_id}",
        anyone(Role::Admin),
    ),
    (
        "DELETE",
        "/v1/orgs/{org}/notification-channels/{channel_id}",
        anyone(Role::Admin),
    ),
    (
        "POST",
        "/v1/orgs/{org}/notification-channels/{channel_id}/test",
        anyone(Role::Admin),
    ),
    (
        "GET",
        "/v1/orgs/{org}/notification-channels/{channel_id}/deliveries",
        anyone(Role::Admin),
    ),
    // SSO: the owner, in person (decisions §18).
    ("GET", "/v1/orgs/{org}/sso", in_person(Role::Owner)),
    ("PUT", "/v1/orgs/{org}/sso", in_person(Role::Owner)),
    ("POST", "/v1/orgs/{org}/sso/domains", in_person(Role::Owner)),
    (
        "POST",
        "/v1/orgs/{org}/sso/domains/{domain}/verify",
        in_person(Role::Owner),
    ),
    (
        "DELETE",
        "/v1/orgs/{org}/sso/domains/{domain}",
        in_person(Role::Owner),
    ),
    // own digest setting: everyone.
    ("GET", "/v1/orgs/{org}/digest", anyone(Role::Viewer)),
    ("PUT", "/v1/orgs/{org}/digest", anyone(Role::Viewer)),
];

/// An organization-scoped operation of the document, with its rule from [`RULES`].
struct Operation {
    method: Method,
    path: String,
    rule: Rule,
    /// The least role the document's `org` parameter states (checked against the rule).
    documented: Option<Role>,
    documented_people_only: bool,
    has_body: bool,
}

fn operations(spec: &Value) -> Vec<Operation> {
    let mut found = Vec::new();
    for (path, item) in spec["paths"].as_object().into_iter().flatten() {
        if !path.contains("{org}") {
            continue;
        }
        for (method, operation) in item.as_object().into_iter().flatten() {
            let method: Method = method.to_uppercase().parse().expect("method");
            let rule = RULES
                .iter()
                .find(|(m, p, _)| *m == method.as_str() && p == path)
                .map(|(_, _, rule)| *rule)
                .unwrap_or_else(|| {
                    panic!("{method} {path} has a row in RULES, written from decisions §4")
                });
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
            let documented = description
                .split("Requires role `")
                .nth(1)
                .and_then(|rest| rest.split('`').next())
                .and_then(|r| r.parse::<Role>().ok());
            found.push(Operation {
                method,
                path: path.clone(),
                rule,
                documented,
                documented_people_only: description.contains("API tokens are refused"),
                has_body: operation["requestBody"].is_object(),
            });
        }
    }
    assert_eq!(
        found.len(),
        RULES.len(),
        "every row of RULES is a documented operation"
    );
    found
}

#[test]
fn the_rules_table_has_one_row_per_operation() {
    for (i, (method, path, _)) in RULES.iter().enumerate() {
        assert!(
            !RULES[i + 1..]
                .iter()
                .any(|(m, p, _)| m == method && p == path),
            "{method} {path} appears twice"
        );
    }
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
        } else if name == "member_id" {
            // A well-formed account id of nobody here: removing it is removing somebody else.
            out.push_str("usr_00000000000000000000000000");
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
            if role.at_least(op.rule.least) {
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
        if op.rule.people_only {
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
    let ops = operations(&spec);
    // The document tells client authors the same rules.
    for op in &ops {
        assert_eq!(
            op.documented,
            Some(op.rule.least),
            "{} {} documents the role it requires",
            op.method,
            op.path
        );
        assert_eq!(
            op.documented_people_only, op.rule.people_only,
            "{} {} documents whether API tokens are refused",
            op.method, op.path
        );
    }
    for op in &ops {
        let path = concrete(&op.path, "acme");
        let body = op.has_body.then(|| json!({}));
        for (role, session) in &sessions {
            let response = app
                .call(As::Session(session), op.method.clone(), &path, body.clone())
                .await;
            let allowed = role.at_least(op.rule.least);
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
