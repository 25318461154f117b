//! Comments on proposals: the thread's most recent page and `before`, mentions resolved at
//! write time and emailed, roles, tenancy and bad bodies.

use std::time::Duration;

use domain::roles::Role;
use entities::{accounts, organizations, proposals};
use reqwest::Method;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};
use tests::{As, Session, TestApp};

/// Inserts an open proposal into organization `slug` (there is no generation yet); its `prp_` id.
async fn proposal(app: &TestApp, slug: &str, number: i64, title: &str) -> String {
    let db = &app.state.db.orm;
    let now = app.clock_now();
    let org = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq(slug))
        .one(db)
        .await
        .expect("query")
        .expect("organization exists");
    let id = platform::ids::new_uuid();
    proposals::ActiveModel {
        id: Set(id),
        org_id: Set(org.id),
        number: Set(number),
        policy_id: Set(None),
        policy_name: Set(None),
        policy_version: Set(None),
        release_key: Set(None),
        kind: Set("package_update".into()),
        status: Set("open".into()),
        title: Set(title.to_owned()),
        required: Set(2),
        approvals: Set(0),
        apply: Set("asap".into()),
        window: Set(None),
        reboot: Set("never".into()),
        auto_merge: Set(false),
        known_exploited: Set(false),
        max_severity: Set(None),
        hosts: Set(0),
        packages: Set(0),
        release_upgrade: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
        closed_at: Set(None),
        scheduled_for: Set(None),
        snoozed_until: Set(None),
        superseded_by: Set(None),
        rollout: Set(None),
    }
    .insert(db)
    .await
    .expect("proposal");
    platform::ids::ProposalId::from(id).to_string()
}

/// Sets (or clears) the display name of the account with `email`.
async fn rename(app: &TestApp, email: &str, name: Option<&str>) {
    let db = &app.state.db.orm;
    let account = accounts::Entity::find()
        .filter(accounts::Column::Email.eq(email))
        .one(db)
        .await
        .expect("query")
        .expect("account exists");
    let mut changed: accounts::ActiveModel = account.into();
    changed.name = Set(name.map(str::to_owned));
    changed.update(db).await.expect("rename");
}

fn comments_path(slug: &str, proposal: &str) -> String {
    format!("/v1/orgs/{slug}/proposals/{proposal}/comments")
}

async fn post(app: &TestApp, who: &Session, path: &str, body: &str) -> Value {
    let response = app
        .call(
            As::Session(who),
            Method::POST,
            path,
            Some(json!({ "body": body })),
        )
        .await;
    assert_eq!(response.status.as_u16(), 201, "{}", response.body);
    response.json()
}

async fn list(app: &TestApp, who: &Session, path: &str) -> Value {
    let response = app.call(As::Session(who), Method::GET, path, None).await;
    assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    response.json()
}

fn bodies(list: &Value) -> Vec<String> {
    list["comments"]
        .as_array()
        .expect("comments is an array")
        .iter()
        .map(|c| c["body"].as_str().expect("body").to_owned())
        .collect()
}

fn emails_of(mentions: &Value) -> Vec<String> {
    mentions
        .as_array()
        .expect("mentions is an array")
        .iter()
        .map(|m| m["email"].as_str().expect("email").to_owned())
        .collect()
}

#[tokio::test]
async fn a_comment_round_trips_oldest_first_with_its_author_and_total() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let operator = app
        .member("acme", Role::Operator, "operator@acme.test")
        .await;
    let prp = proposal(&app, "acme", 1, "Update openssl on 3 hosts").await;
    let path = comments_path("acme", &prp);

    let empty = list(&app, &owner, &path).await;
    assert_eq!(empty, json!({"comments": [], "total": 0}));

    let first = post(&app, &operator, &path, "  Looks fine to me.\n ").await;
    assert!(
        first["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("cmt_")),
        "{first}"
    );
    assert_eq!(first["body"], "Looks fine to me.", "trimmed");
    assert_eq!(first["author"]["email"], "operator@acme.test");
    assert_eq!(first["author"]["name"], "operator member");
    assert!(
        first["author"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("usr_"))
    );
    assert_eq!(first["mentions"], json!([]), "present and empty");
    assert_eq!(
        first["written_at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc)),
        Some(app.clock_now())
    );
    app.clock.advance(chrono::Duration::minutes(5));
    let second = post(&app, &owner, &path, "Agreed; approving after lunch.").await;
    assert_eq!(second["author"]["email"], "owner@acme.test");
    assert_eq!(second["author"]["name"], "Owner");

    let thread = list(&app, &operator, &path).await;
    assert_eq!(thread["total"], 2);
    assert_eq!(
        bodies(&thread),
        vec!["Looks fine to me.", "Agreed; approving after lunch."]
    );
    assert_eq!(thread["comments"][0]["id"], first["id"]);
    assert_eq!(thread["comments"][0]["author"], first["author"]);
    assert_eq!(thread["comments"][1]["written_at"], second["written_at"]);
    assert_eq!(thread["comments"][1]["mentions"], json!([]));

    // Another proposal's thread is its own.
    let other = proposal(&app, "acme", 2, "Kernel update").await;
    let elsewhere = list(&app, &owner, &comments_path("acme", &other)).await;
    assert_eq!(elsewhere["total"], 0);

    // Audited in the same transaction.
    let audit = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/audit-events",
            None,
        )
        .await
        .json();
    let created: Vec<&Value> = audit["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["action"] == "comment.created")
        .collect();
    assert_eq!(created.len(), 2, "{audit}");
    assert!(created.iter().any(|e| e["target_id"] == first["id"]
        && e["target_kind"] == "comment"
        && e["details"]["proposal_id"] == prp.as_str()));
    app.stop().await;
}

#[tokio::test]
async fn a_long_thread_answers_the_50_most_recent_and_before_pages_back() {
    let app = TestApp::builder()
        .rate_limit(1_000_000, 1000.0)
        .start()
        .await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let prp = proposal(&app, "acme", 1, "Update openssl").await;
    let other = proposal(&app, "acme", 2, "Update curl").await;
    let path = comments_path("acme", &prp);
    let mut ids = Vec::new();
    for i in 0..55 {
        let comment = post(&app, &owner, &path, &format!("comment {i}")).await;
        ids.push(comment["id"].as_str().expect("id").to_owned());
    }
    let elsewhere = post(&app, &owner, &comments_path("acme", &other), "elsewhere").await;

    let page = list(&app, &owner, &path).await;
    assert_eq!(page["total"], 55, "exact, beyond the page");
    let expected: Vec<String> = (5..55).map(|i| format!("comment {i}")).collect();
    assert_eq!(
        bodies(&page),
        expected,
        "the 50 most recent, oldest first; the oldest 5 absent"
    );

    let first = page["comments"][0]["id"].as_str().expect("id");
    assert_eq!(first, ids[5]);
    let back = list(&app, &owner, &format!("{path}?before={first}")).await;
    assert_eq!(back["total"], 55);
    let expected: Vec<String> = (0..5).map(|i| format!("comment {i}")).collect();
    assert_eq!(bodies(&back), expected);

    let start = list(&app, &owner, &format!("{path}?before={}", ids[0])).await;
    assert_eq!(
        start,
        json!({"comments": [], "total": 55}),
        "the thread's start"
    );

    let middle = list(&app, &owner, &format!("{path}?before={}", ids[30])).await;
    let expected: Vec<String> = (0..30).map(|i| format!("comment {i}")).collect();
    assert_eq!(bodies(&middle), expected);

    // A `before` that is not a comment of this proposal.
    let unknown = platform::ids::CommentId::new().to_string();
    for before in [
        "nope",
        unknown.as_str(),
        prp.as_str(),
        elsewhere["id"].as_str().expect("id"),
    ] {
        let response = app
            .call(
                As::Session(&owner),
                Method::GET,
                &format!("{path}?before={before}"),
                None,
            )
            .await;
        response.assert_problem(400, "invalid-request");
    }
    app.stop().await;
}

#[tokio::test]
async fn mentions_resolve_to_members_by_address_or_name_and_email_them() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _outsider = app.sign_up("eve@globex.test", "globex").await;
    let operator_ada = app.member("acme", Role::Operator, "ada@acme.test").await;
    let _bob = app.member("acme", Role::Admin, "bob@acme.test").await;
    rename(&app, "ada@acme.test", Some("Ada Lovelace")).await;
    let _kim = app.member("acme", Role::Viewer, "kim@acme.test").await;
    rename(&app, "kim@acme.test", None).await;
    let prp = proposal(&app, "acme", 7, "Update openssl on web hosts").await;
    let path = comments_path("acme", &prp);

    let comment = post(
        &app,
        &owner,
        &path,
        "@BOB@acme.test and @ada lovelace, please check. cc @eve@globex.test, @Nobody, \
         write to bob@acme.test; note to self @owner@acme.test; again @Ada Lovelace.",
    )
    .await;
    let mentions = &comment["mentions"];
    assert_eq!(
        emails_of(mentions),
        vec!["bob@acme.test", "ada@acme.test", "owner@acme.test"],
        "members once each, in order; the outsider and unknown name stay text: {comment}"
    );
    assert_eq!(mentions[1]["name"], "Ada Lovelace");
    assert!(
        mentions[1]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("usr_"))
    );
    assert_eq!(mentions[0]["name"], "admin member");
    assert!(
        comment["body"]
            .as_str()
            .is_some_and(|b| b.contains("@eve@globex.test")),
        "kept as text"
    );

    // The mentioned members are emailed, naming and linking the proposal.
    for address in ["ada@acme.test", "bob@acme.test"] {
        let email = app
            .smtp
            .wait_for_message_to(address, Duration::from_secs(30))
            .await;
        let subject = email.header("Subject").expect("subject");
        assert!(
            subject.contains("Owner mentioned you on proposal #7"),
            "{subject}"
        );
        let text = email.text();
        assert!(text.contains("Update openssl on web hosts"), "{text}");
        assert!(
            text.contains(&format!("{}/orgs/acme/proposals/{prp}", tests::BASE_URL)),
            "{text}"
        );
        assert!(text.contains("please check"), "quotes the comment: {text}");
    }
    // Every queued job has run: the outsider and the author got none beyond sign-up.
    app.run_pending_jobs().await;
    let messages = app.smtp.messages().await;
    let to = |address: &str| {
        messages
            .iter()
            .filter(|m| m.rcpt_to.iter().any(|r| r.eq_ignore_ascii_case(address)))
            .count()
    };
    assert_eq!(to("eve@globex.test"), 1, "only the sign-up email");
    assert_eq!(to("owner@acme.test"), 1, "only the sign-up email");
    assert_eq!(to("ada@acme.test"), 1, "one email for two mentions");
    assert_eq!(to("bob@acme.test"), 1);

    // Resolved when written: a later rename does not change the stored mention.
    rename(&app, "ada@acme.test", Some("Ada King")).await;
    let thread = list(&app, &owner, &path).await;
    assert_eq!(thread["comments"][0]["mentions"], *mentions);
    let renamed = post(&app, &owner, &path, "@Ada Lovelace is now @Ada King").await;
    assert_eq!(emails_of(&renamed["mentions"]), vec!["ada@acme.test"]);
    assert_eq!(renamed["mentions"][0]["name"], "Ada King");

    // A member without a display name: by address only, and `name` is null.
    let nameless = post(&app, &operator_ada, &path, "(@kim@acme.test) ok?").await;
    assert_eq!(emails_of(&nameless["mentions"]), vec!["kim@acme.test"]);
    assert!(
        nameless["mentions"][0]
            .as_object()
            .is_some_and(|m| m.contains_key("name") && m["name"].is_null()),
        "present and null: {nameless}"
    );
    assert_eq!(nameless["author"]["name"], "Ada King");
    app.smtp
        .wait_for_message_to("kim@acme.test", Duration::from_secs(30))
        .await;

    let plain = post(&app, &owner, &path, "No mentions, just ops@acme.test").await;
    assert_eq!(plain["mentions"], json!([]));
    app.stop().await;
}

#[tokio::test]
async fn viewers_may_neither_read_nor_write_and_operators_may_both() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let operator = app
        .member("acme", Role::Operator, "operator@acme.test")
        .await;
    let prp = proposal(&app, "acme", 1, "Update openssl").await;
    let path = comments_path("acme", &prp);

    app.call(As::Session(&viewer), Method::GET, &path, None)
        .await
        .assert_problem(403, "forbidden");
    app.call(
        As::Session(&viewer),
        Method::POST,
        &path,
        Some(json!({"body": "can I?"})),
    )
    .await
    .assert_problem(403, "forbidden");
    app.call(As::Nobody, Method::GET, &path, None)
        .await
        .assert_problem(401, "unauthenticated");
    app.call(
        As::Nobody,
        Method::POST,
        &path,
        Some(json!({"body": "anyone?"})),
    )
    .await
    .assert_problem(401, "unauthenticated");
    let no_csrf = app
        .call(
            As::SessionWithoutCsrf(&owner),
            Method::POST,
            &path,
            Some(json!({"body": "forged"})),
        )
        .await
        .assert_problem(403, "forbidden");
    assert!(
        no_csrf["detail"]
            .as_str()
            .is_some_and(|d| d.contains("X-Service-Csrf"))
    );

    post(&app, &operator, &path, "operator here").await;
    let thread = list(&app, &operator, &path).await;
    assert_eq!(
        bodies(&thread),
        vec!["operator here"],
        "nothing else stored"
    );
    assert_eq!(thread["total"], 1);
    app.stop().await;
}

#[tokio::test]
async fn unknown_malformed_and_other_organizations_proposals_are_not_found() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _globex = app.sign_up("owner@globex.test", "globex").await;
    let theirs = proposal(&app, "globex", 1, "Their update").await;
    let unknown = platform::ids::ProposalId::new().to_string();
    let group_shaped = platform::ids::GroupId::new().to_string();
    for id in [
        theirs.as_str(),
        unknown.as_str(),
        "nope",
        group_shaped.as_str(),
    ] {
        let path = comments_path("acme", id);
        app.call(As::Session(&owner), Method::GET, &path, None)
            .await
            .assert_problem(404, "not-found");
        app.call(
            As::Session(&owner),
            Method::POST,
            &path,
            Some(json!({"body": "hello"})),
        )
        .await
        .assert_problem(404, "not-found");
    }
    // Their proposal, through their slug, is not ours either.
    app.call(
        As::Session(&owner),
        Method::GET,
        &comments_path("globex", &theirs),
        None,
    )
    .await
    .assert_problem(404, "not-found");
    app.stop().await;
}

#[tokio::test]
async fn bad_bodies_are_refused_and_nothing_is_stored() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let _ada = app.member("acme", Role::Operator, "ada@acme.test").await;
    let prp = proposal(&app, "acme", 1, "Update openssl").await;
    let path = comments_path("acme", &prp);
    let before = app.smtp.messages().await.len();

    for body in [
        json!({"body": ""}),
        json!({"body": "  \n\t "}),
        json!({"body": format!("@ada@acme.test {}", "x".repeat(10_001))}),
        json!({"body": "y".repeat(20_000)}),
        json!({"body": "nul \u{0} byte"}),
        json!({"body": 5}),
        json!({"body": null}),
        json!({}),
        json!({"body": "fine", "extra": true}),
        json!(["body"]),
    ] {
        let response = app
            .call(As::Session(&owner), Method::POST, &path, Some(body.clone()))
            .await;
        response.assert_problem(400, "invalid-request");
    }
    // Over the api's 1 MiB request limit: 413, also nothing stored.
    let huge = app
        .call(
            As::Session(&owner),
            Method::POST,
            &path,
            Some(json!({"body": "z".repeat(1_100_000)})),
        )
        .await;
    huge.assert_problem(413, "payload-too-large");

    let thread = list(&app, &owner, &path).await;
    assert_eq!(thread, json!({"comments": [], "total": 0}));

    // Exactly the limit is accepted (after trimming).
    let longest = format!("  {}  ", "w".repeat(10_000));
    let comment = post(&app, &owner, &path, &longest).await;
    assert_eq!(comment["body"].as_str().map(str::len), Some(10_000));
    assert_eq!(list(&app, &owner, &path).await["total"], 1);
    app.run_pending_jobs().await;
    assert_eq!(
        app.smtp.messages().await.len(),
        before,
        "a refused comment emails nobody"
    );
    app.stop().await;
}
