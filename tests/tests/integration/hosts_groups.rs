//! Host edits and group membership: every error cause of the host PATCH and group hosts
//! operations, labels replaced whole, and label groups kept current by evaluation.

use std::collections::BTreeMap;

use domain::roles::Role;
use reqwest::Method;
use serde_json::json;
use tests::{As, TestApp};

#[tokio::test]
async fn patching_a_host_refuses_each_bad_field_and_changes_nothing() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let id = app.host("acme", "web-1", &[("env", "prod")]).await;
    let path = format!("/v1/orgs/acme/hosts/{id}");
    let many: BTreeMap<String, String> =
        (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    for body in [
        json!({"labels": many}),
        json!({"labels": {"": "x"}}),
        json!({"display_name": "d".repeat(256)}),
        json!({"notes": "n".repeat(10_001)}),
        json!({"labels": {"env": 1}}),
        json!({"hostname": "renamed"}),
        json!({"display_name": "ok", "labels": {"": "x"}}),
    ] {
        let response = app
            .call(As::Session(&owner), Method::PATCH, &path, Some(body))
            .await;
        response.assert_problem(400, "invalid-request");
    }
    let host = app
        .call(As::Session(&owner), Method::GET, &path, None)
        .await
        .json();
    assert_eq!(host["labels"], json!({"env": "prod"}));
    assert!(host["display_name"].is_null());
    assert!(
        host["updates"].is_null(),
        "never evaluated is null, not zero"
    );
    assert!(
        host["reboot_required"].is_null(),
        "cannot say is null, not false"
    );
    app.stop().await;
}

#[tokio::test]
async fn patching_a_host_replaces_labels_clears_with_null_and_leaves_absent_fields() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let id = app
        .host("acme", "web-1", &[("env", "prod"), ("tier", "web")])
        .await;
    let path = format!("/v1/orgs/acme/hosts/{id}");
    let set = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &path,
            Some(json!({"display_name": "Web one", "notes": "racked"})),
        )
        .await;
    assert_eq!(set.status.as_u16(), 200, "{}", set.body);
    let relabelled = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &path,
            Some(json!({"labels": {"env": "staging"}, "notes": null})),
        )
        .await
        .json();
    assert_eq!(
        relabelled["labels"],
        json!({"env": "staging"}),
        "replaced, never merged"
    );
    assert_eq!(
        relabelled["display_name"], "Web one",
        "absent is left alone"
    );
    assert!(relabelled["notes"].is_null(), "null clears");

    let events = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("{path}/events"),
            None,
        )
        .await
        .json();
    assert_eq!(events["items"][0]["kind"], "labels_changed");
    app.stop().await;
}

#[tokio::test]
async fn host_errors_no_session_role_and_another_organizations_host() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _globex = app.sign_up("owner@globex.test", "globex").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let ours = app.host("acme", "web-1", &[]).await;
    let theirs = app.host("globex", "db-1", &[]).await;
    let body = Some(json!({"display_name": "x"}));
    let ours_path = format!("/v1/orgs/acme/hosts/{ours}");
    app.call(As::Nobody, Method::PATCH, &ours_path, body.clone())
        .await
        .assert_problem(401, "unauthenticated");
    app.call(
        As::Session(&viewer),
        Method::PATCH,
        &ours_path,
        body.clone(),
    )
    .await
    .assert_problem(403, "forbidden");
    let foreign = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            &format!("/v1/orgs/acme/hosts/{theirs}"),
            body.clone(),
        )
        .await;
    let missing = app
        .call(
            As::Session(&owner),
            Method::PATCH,
            "/v1/orgs/acme/hosts/hst_00000000000000000000000000",
            body.clone(),
        )
        .await;
    foreign.assert_problem(404, "not-found");
    assert_eq!(foreign.body, missing.body);
    app.call(
        As::Session(&owner),
        Method::PATCH,
        "/v1/orgs/acme/hosts/grp_x",
        body,
    )
    .await
    .assert_problem(404, "not-found");
    app.stop().await;
}

#[tokio::test]
async fn setting_static_hosts_with_a_foreign_or_unknown_id_changes_nothing() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _globex = app.sign_up("owner@globex.test", "globex").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let a = app.host("acme", "a", &[]).await;
    let b = app.host("acme", "b", &[]).await;
    let theirs = app.host("globex", "c", &[]).await;
    let group = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/groups",
            Some(json!({"name": "web"})),
        )
        .await;
    assert_eq!(group.status.as_u16(), 201, "{}", group.body);
    let group_id = group.json()["id"].as_str().unwrap_or_default().to_owned();
    let path = format!("/v1/orgs/acme/groups/{group_id}/hosts");

    let set = app
        .call(
            As::Session(&owner),
            Method::PUT,
            &path,
            Some(json!({"hosts": [a, b, a]})),
        )
        .await;
    assert_eq!(set.status.as_u16(), 200, "{}", set.body);
    assert_eq!(set.json(), json!({"static_hosts": 2}));
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/groups",
            None,
        )
        .await
        .json();
    assert_eq!(listed["items"][0]["static_hosts"], 2);
    assert_eq!(listed["items"][0]["label_hosts"], 0);

    for hosts in [
        json!([a, theirs]),
        json!([a, "hst_00000000000000000000000000"]),
        json!([a, "nonsense"]),
        json!([a, 5]),
    ] {
        let refused = app
            .call(
                As::Session(&owner),
                Method::PUT,
                &path,
                Some(json!({"hosts": hosts})),
            )
            .await;
        refused.assert_problem(400, "invalid-request");
    }
    app.call(As::Session(&owner), Method::PUT, &path, Some(json!({})))
        .await
        .assert_problem(400, "invalid-request");
    let unchanged = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/groups/{group_id}"),
            None,
        )
        .await
        .json();
    assert_eq!(unchanged["static_hosts"], 2, "nothing was changed");

    app.call(As::Nobody, Method::PUT, &path, Some(json!({"hosts": []})))
        .await
        .assert_problem(401, "unauthenticated");
    app.call(
        As::Session(&viewer),
        Method::PUT,
        &path,
        Some(json!({"hosts": []})),
    )
    .await
    .assert_problem(403, "forbidden");
    app.call(
        As::Session(&owner),
        Method::PUT,
        "/v1/orgs/acme/groups/grp_00000000000000000000000000/hosts",
        Some(json!({"hosts": []})),
    )
    .await
    .assert_problem(404, "not-found");
    let cleared = app
        .call(
            As::Session(&owner),
            Method::PUT,
            &path,
            Some(json!({"hosts": []})),
        )
        .await;
    assert_eq!(cleared.json(), json!({"static_hosts": 0}));
    app.stop().await;
}

#[tokio::test]
async fn label_groups_follow_label_changes_and_static_sets_leave_them_alone() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let prod = app
        .host("acme", "web-1", &[("env", "prod"), ("tier", "web")])
        .await;
    let _dev = app
        .host("acme", "web-2", &[("env", "dev"), ("tier", "web")])
        .await;
    let created = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/groups",
            Some(json!({"name": "prod web", "selector": "env=prod,tier in (web,db)"})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let group_id = created.json()["id"].as_str().unwrap_or_default().to_owned();
    let group_path = format!("/v1/orgs/acme/groups/{group_id}");
    app.run_pending_jobs().await;
    let settled = {
        let g = app
            .call(As::Session(&owner), Method::GET, &group_path, None)
            .await
            .json();
        g["label_hosts"] == 1
    };
    assert!(settled, "the queued work had its effect");
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("/v1/orgs/acme/hosts?group={group_id}"),
            None,
        )
        .await
        .json();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["items"][0]["id"], prod.as_str());

    // Static members do not disturb label members.
    app.call(
        As::Session(&owner),
        Method::PUT,
        &format!("{group_path}/hosts"),
        Some(json!({"hosts": []})),
    )
    .await;
    // The prod host leaves the selector's reach: it leaves the group.
    app.call(
        As::Session(&owner),
        Method::PATCH,
        &format!("/v1/orgs/acme/hosts/{prod}"),
        Some(json!({"labels": {"env": "dev", "tier": "web"}})),
    )
    .await;
    app.run_pending_jobs().await;
    let settled = {
        let g = app
            .call(As::Session(&owner), Method::GET, &group_path, None)
            .await
            .json();
        g["label_hosts"] == 0
    };
    assert!(settled, "the queued work had its effect");
    // The host list filters by selector through the label index.
    let by_selector = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/hosts?selector=env%3Ddev,tier",
            None,
        )
        .await
        .json();
    assert_eq!(by_selector["items"].as_array().map(Vec::len), Some(2));
    let bad = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/hosts?selector=tier%20in%20(web",
            None,
        )
        .await;
    bad.assert_problem(400, "invalid-request");
    app.stop().await;
}
