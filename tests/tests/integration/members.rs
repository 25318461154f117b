//! Members, invitations, API tokens and the audit log.

use chrono::Duration;
use domain::roles::Role;
use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, TestApp, identity::session_cookie};

fn actions(events: &Value) -> Vec<String> {
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["action"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn the_last_owner_can_be_neither_demoted_nor_removed() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    let owner_id = app.member_id(&owner, "owner@acme.test").await;
    let path = format!("/v1/orgs/acme/members/{owner_id}");

    let demote = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &path,
            Some(json!({"role": "admin"})),
        )
        .await;
    demote.assert_problem(409, "invalid-state");
    let remove = app
        .call(As::Session(&owner), Method::DELETE, &path, None)
        .await;
    remove.assert_problem(409, "invalid-state");
    // An admin may not touch an owner at all.
    let by_admin = app
        .call(
            As::Session(&admin),
            Method::PATCH,
            &path,
            Some(json!({"role": "viewer"})),
        )
        .await;
    by_admin.assert_problem(403, "forbidden");
    let unknown_role = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &path,
            Some(json!({"role": "root"})),
        )
        .await;
    unknown_role.assert_problem(400, "invalid-request");

    // With a second owner, the first may step down.
    let admin_id = app.member_id(&owner, "admin@acme.test").await;
    let promote = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{admin_id}"),
            Some(json!({"role": "owner"})),
        )
        .await;
    assert_eq!(promote.status.as_u16(), 200, "{}", promote.body);
    assert_eq!(promote.json()["role"], "owner");
    let step_down = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &path,
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(step_down.status.as_u16(), 200, "{}", step_down.body);

    let audit = app
        .call(
            As::Session(&admin),
            Method::GET,
            "/v1/orgs/acme/audit-events",
            None,
        )
        .await;
    let logged = actions(&audit.json());
    assert_eq!(
        logged
            .iter()
            .filter(|a| *a == "member.role_changed")
            .count(),
        2,
        "{logged:?}"
    );
    assert!(logged.contains(&"auth.signed_up".to_owned()));
    app.stop().await;
}

#[tokio::test]
async fn an_invitation_adds_a_new_person_who_is_signed_in_by_accepting_it() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let as_owner = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "owner2@acme.test", "role": "owner"})),
        )
        .await;
    as_owner.assert_problem(400, "invalid-request");

    let created = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "New@Acme.test", "role": "operator"})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let invitation = created.json();
    assert!(
        invitation["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("inv_"))
    );
    assert_eq!(invitation["status"], "pending");
    let token = app.emailed_token("new@acme.test").await;

    let accepted = app
        .post_json("/v1/invitations/accept", json!({"token": token}))
        .await;
    assert_eq!(accepted.status.as_u16(), 200, "{}", accepted.body);
    let newcomer = tests::Session {
        email: "new@acme.test".into(),
        cookie: session_cookie(&accepted),
        csrf: accepted.json()["csrf_token"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    let me = app
        .call(As::Session(&newcomer), Method::GET, "/v1/me", None)
        .await
        .json();
    assert_eq!(me["organizations"][0]["role"], "operator");

    // Used once only.
    let again = app
        .post_json("/v1/invitations/accept", json!({"token": token}))
        .await;
    again.assert_problem(404, "invalid-token");
    // Inviting a member again is a conflict.
    let dup = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "new@acme.test", "role": "viewer"})),
        )
        .await;
    dup.assert_problem(409, "conflict");
    app.stop().await;
}

#[tokio::test]
async fn a_revoked_invitation_cannot_be_accepted_or_revoked_again() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _globex = app.sign_up("owner@globex.test", "globex").await;
    let created = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "x@acme.test", "role": "viewer"})),
        )
        .await;
    let id = created.json()["id"].as_str().unwrap_or_default().to_owned();
    let token = app.emailed_token("x@acme.test").await;

    let path = format!("/v1/orgs/acme/invitations/{id}");
    // Another organization's path to it is simply not found.
    let foreign = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/globex/invitations/{id}"),
            None,
        )
        .await;
    foreign.assert_problem(404, "not-found");
    let revoked = app
        .call(As::Session(&owner), Method::DELETE, &path, None)
        .await;
    assert_eq!(revoked.status.as_u16(), 204, "{}", revoked.body);
    let twice = app
        .call(As::Session(&owner), Method::DELETE, &path, None)
        .await;
    twice.assert_problem(404, "not-found");
    let malformed = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            "/v1/orgs/acme/invitations/inv_nope",
            None,
        )
        .await;
    malformed.assert_problem(404, "not-found");
    let accept = app
        .post_json("/v1/invitations/accept", json!({"token": token}))
        .await;
    accept.assert_problem(404, "invalid-token");
    app.stop().await;
}

#[tokio::test]
async fn an_invitation_is_refused_once_its_inviter_may_no_longer_invite() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let leaving = app.member("acme", Role::Admin, "leaving@acme.test").await;
    let demoted = app.member("acme", Role::Admin, "demoted@acme.test").await;
    for (inviter, email, role) in [
        (&leaving, "a@acme.test", "viewer"),
        (&demoted, "b@acme.test", "admin"),
        (&owner, "c@acme.test", "admin"),
    ] {
        let invited = app
            .call(
                As::Session(inviter),
                Method::POST,
                "/v1/orgs/acme/invitations",
                Some(json!({"email": email, "role": role})),
            )
            .await;
        assert_eq!(invited.status.as_u16(), 201, "{}", invited.body);
    }
    let from_leaving = app.emailed_token("a@acme.test").await;
    let from_demoted = app.emailed_token("b@acme.test").await;
    let from_owner = app.emailed_token("c@acme.test").await;

    let leaving_id = app.member_id(&owner, "leaving@acme.test").await;
    let demoted_id = app.member_id(&owner, "demoted@acme.test").await;
    let removed = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/members/{leaving_id}"),
            None,
        )
        .await;
    assert_eq!(removed.status.as_u16(), 204, "{}", removed.body);
    let changed = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{demoted_id}"),
            Some(json!({"role": "operator"})),
        )
        .await;
    assert_eq!(changed.status.as_u16(), 200, "{}", changed.body);

    for token in [&from_leaving, &from_demoted] {
        let accepted = app
            .post_json("/v1/invitations/accept", json!({"token": token}))
            .await;
        accepted.assert_problem(409, "invalid-state");
        assert!(
            accepted.header("set-cookie").is_none(),
            "nobody is signed in"
        );
    }
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/members",
            None,
        )
        .await
        .json();
    let emails: Vec<&str> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["email"].as_str())
        .collect();
    assert!(
        !emails.contains(&"a@acme.test") && !emails.contains(&"b@acme.test"),
        "{emails:?}"
    );
    // An invitation from somebody who still may invite is accepted as before.
    let accepted = app
        .post_json("/v1/invitations/accept", json!({"token": from_owner}))
        .await;
    assert_eq!(accepted.status.as_u16(), 200, "{}", accepted.body);
    app.stop().await;
}

#[tokio::test]
async fn api_tokens_work_without_csrf_cannot_outrank_their_creator_and_cannot_revoke_tokens() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;

    let too_high = app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/api-tokens",
            Some(json!({"name": "ci", "role": "owner"})),
        )
        .await;
    too_high.assert_problem(403, "forbidden");
    let past = app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/api-tokens",
            Some(json!({"name": "ci", "role": "viewer", "expires_at": "2020-01-01T00:00:00Z"})),
        )
        .await;
    past.assert_problem(400, "invalid-request");

    let created = app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/api-tokens",
            Some(json!({"name": "ci", "role": "admin"})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let record = created.json();
    let token = record["token"].as_str().unwrap_or_default().to_owned();
    let id = record["id"].as_str().unwrap_or_default().to_owned();
    assert!(token.starts_with("sat_"));

    // The list never shows the value, and records use.
    let listed = app
        .call(
            As::Bearer(&token),
            Method::GET,
            "/v1/orgs/acme/api-tokens",
            None,
        )
        .await;
    assert_eq!(listed.status.as_u16(), 200, "{}", listed.body);
    assert!(!listed.body.contains(&token));
    assert!(listed.json()["items"][0]["last_used_at"].is_string());

    // A bearer mutation needs no CSRF header; revoking with a token is refused.
    let by_token = app
        .call(
            As::Bearer(&token),
            Method::DELETE,
            &format!("/v1/orgs/acme/api-tokens/{id}"),
            None,
        )
        .await;
    by_token.assert_problem(403, "forbidden");
    let invited = app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "y@acme.test", "role": "viewer"})),
        )
        .await;
    assert_eq!(invited.status.as_u16(), 201, "{}", invited.body);

    let revoked = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/api-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(revoked.status.as_u16(), 204, "{}", revoked.body);
    let refused = app
        .call(As::Bearer(&token), Method::GET, "/v1/orgs/acme", None)
        .await;
    refused.assert_problem(401, "unauthenticated");
    let twice = app
        .call(
            As::Session(&owner),
            Method::DELETE,
            &format!("/v1/orgs/acme/api-tokens/{id}"),
            None,
        )
        .await;
    twice.assert_problem(404, "not-found");

    // An expired token is refused too.
    let expiring = app
        .call(As::Session(&owner), Method::POST, "/v1/orgs/acme/api-tokens",
            Some(json!({"name": "short", "role": "viewer", "expires_at": (app.clock_now() + Duration::hours(1)).to_rfc3339()})))
        .await;
    let short = expiring.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        app.call(As::Bearer(&short), Method::GET, "/v1/orgs/acme", None)
            .await
            .status
            .as_u16(),
        200
    );
    app.clock.advance(Duration::hours(2));
    app.call(As::Bearer(&short), Method::GET, "/v1/orgs/acme", None)
        .await
        .assert_problem(401, "unauthenticated");

    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=500",
            None,
        )
        .await;
    let logged = actions(&audit.json());
    for action in [
        "api_token.created",
        "api_token.revoked",
        "invitation.created",
    ] {
        assert!(
            logged.contains(&action.to_owned()),
            "{action} in {logged:?}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn the_audit_log_pages_with_a_cursor() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    for i in 0..5 {
        app.call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": format!("p{i}@acme.test"), "role": "viewer"})),
        )
        .await;
    }
    let first = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=4",
            None,
        )
        .await
        .json();
    assert_eq!(first["items"].as_array().map(Vec::len), Some(4));
    let cursor = first["next_cursor"]
        .as_str()
        .expect("more pages")
        .to_owned();
    let second = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/audit-events?limit=4&cursor={cursor}"),
            None,
        )
        .await
        .json();
    assert_eq!(second["items"].as_array().map(Vec::len), Some(2));
    assert!(second["next_cursor"].is_null());
    let ids: Vec<&str> = first["items"]
        .as_array()
        .into_iter()
        .chain(second["items"].as_array())
        .flatten()
        .filter_map(|e| e["id"].as_str())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first, no repeats");
    let bad = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=0",
            None,
        )
        .await;
    bad.assert_problem(400, "invalid-request");
    app.stop().await;
}

/// An invitation refused at accept because its inviter may no longer invite is over: the list
/// says so instead of showing it pending until it expires.
#[tokio::test]
async fn an_invitation_refused_because_of_its_inviter_is_listed_as_revoked() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let admin = app.member("acme", Role::Admin, "admin@acme.test").await;
    let invited = app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "new@acme.test", "role": "viewer"})),
        )
        .await;
    assert_eq!(invited.status.as_u16(), 201, "{}", invited.body);
    let token = app.emailed_token("new@acme.test").await;
    let admin_id = app.member_id(&owner, "admin@acme.test").await;
    let demoted = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/members/{admin_id}"),
            Some(json!({"role": "operator"})),
        )
        .await;
    assert_eq!(demoted.status.as_u16(), 200, "{}", demoted.body);
    app.post_json("/v1/invitations/accept", json!({"token": token}))
        .await
        .assert_problem(409, "invalid-state");
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/invitations",
            None,
        )
        .await
        .json();
    let invitation = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["email"] == "new@acme.test")
        .cloned()
        .unwrap_or_else(|| panic!("the invitation in {listed}"));
    assert_eq!(invitation["status"], "revoked", "{invitation}");
    assert!(
        invitation["revoked_reason"]
            .as_str()
            .is_some_and(|r| r.contains("inviter")),
        "{invitation}"
    );
    // The link stays dead.
    app.post_json("/v1/invitations/accept", json!({"token": token}))
        .await
        .assert_problem(404, "invalid-token");
    app.stop().await;
}

/// Any member may leave an organization (the last owner may not); removing somebody else
/// still needs an admin.
#[tokio::test]
async fn any_member_may_leave_but_only_admins_remove_others() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let operator = app.member("acme", Role::Operator, "op@acme.test").await;
    let viewer_id = app.member_id(&owner, "viewer@acme.test").await;
    let operator_id = app.member_id(&owner, "op@acme.test").await;
    let owner_id = app.member_id(&owner, "owner@acme.test").await;
    app.call(
        As::Session(&viewer),
        Method::DELETE,
        &format!("/v1/orgs/acme/members/{operator_id}"),
        None,
    )
    .await
    .assert_problem(403, "forbidden");
    let left = app
        .call(
            As::Session(&viewer),
            Method::DELETE,
            &format!("/v1/orgs/acme/members/{viewer_id}"),
            None,
        )
        .await;
    assert_eq!(left.status.as_u16(), 204, "{}", left.body);
    app.call(As::Session(&viewer), Method::GET, "/v1/orgs/acme", None)
        .await
        .assert_problem(404, "not-found");
    let left = app
        .call(
            As::Session(&operator),
            Method::DELETE,
            &format!("/v1/orgs/acme/members/{operator_id}"),
            None,
        )
        .await;
    assert_eq!(left.status.as_u16(), 204, "{}", left.body);
    app.call(
        As::Session(&owner),
        Method::DELETE,
        &format!("/v1/orgs/acme/members/{owner_id}"),
        None,
    )
    .await
    .assert_problem(409, "invalid-state");
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events?limit=500",
            None,
        )
        .await
        .json();
    assert_eq!(
        actions(&audit)
            .iter()
            .filter(|a| *a == "member.left")
            .count(),
        2
    );
    app.stop().await;
}
