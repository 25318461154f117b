//! Sign-up, sign-in by emailed link, the verify operations' error causes, sessions and CSRF.

use chrono::Duration;
use entities::{email_tokens, organizations};
use reqwest::Method;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use serde_json::json;
use tests::{As, Session, TestApp, identity::session_cookie};

#[tokio::test]
async fn sign_up_creates_the_account_and_organization_with_the_person_as_owner() {
    let app = TestApp::new().await;
    let owner = app.sign_up("ada@acme.test", "acme").await;
    let me = app
        .call(As::Session(&owner), Method::GET, "/v1/me", None)
        .await;
    assert_eq!(me.status.as_u16(), 200, "{}", me.body);
    let me = me.json();
    assert_eq!(me["email"], "ada@acme.test");
    assert!(
        me["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("usr_") && id.len() == 30)
    );
    assert_eq!(me["time_zone"], "UTC");
    // A deployment that takes no payments (no PAYMENTS_WEBHOOK_SECRET): every organization
    // without a subscription is on the default plan, enterprise (decisions §17).
    assert_eq!(
        me["organizations"],
        json!([{"slug": "acme", "name": "acme", "role": "owner", "plan": "enterprise"}])
    );
    assert_eq!(me["csrf_token"], owner.csrf.as_str());

    // The emails are plain text plus HTML, with the link built from SERVICE_BASE_URL.
    let email = app
        .smtp
        .wait_for_message_to("ada@acme.test", std::time::Duration::from_secs(5))
        .await;
    assert!(
        email
            .text()
            .contains("http://fleet.test/sign-up/verify?token=")
    );
    assert!(email.data.contains("text/plain") && email.data.contains("text/html"));
    app.stop().await;
}

#[tokio::test]
async fn a_verify_token_works_once_and_unknown_used_or_expired_get_one_answer() {
    let app = TestApp::new().await;
    let _owner = app.sign_up("ada@acme.test", "acme").await;
    let sign_up_token = app.emailed_token("ada@acme.test").await;

    // Used.
    let used = app
        .post_json("/v1/auth/sign-up/verify", json!({"token": sign_up_token}))
        .await;
    let used_body = used.assert_problem(404, "invalid-token");
    // Unknown (well-formed and not).
    let unknown = app
        .post_json(
            "/v1/auth/magic-link/verify",
            json!({"token": "A".repeat(43)}),
        )
        .await;
    assert_eq!(unknown.assert_problem(404, "invalid-token"), used_body);
    let garbage = app
        .post_json("/v1/auth/magic-link/verify", json!({"token": "x"}))
        .await;
    assert_eq!(garbage.assert_problem(404, "invalid-token"), used_body);

    // Expired: a sign-in link older than 15 minutes.
    let asked = app
        .post_json("/v1/auth/magic-link", json!({"email": "ada@acme.test"}))
        .await;
    assert_eq!(asked.status.as_u16(), 202);
    app.smtp
        .wait_for(2, std::time::Duration::from_secs(10))
        .await;
    let token = app.emailed_token("ada@acme.test").await;
    app.clock.advance(Duration::minutes(16));
    let expired = app
        .post_json("/v1/auth/magic-link/verify", json!({"token": token}))
        .await;
    assert_eq!(expired.assert_problem(404, "invalid-token"), used_body);
    app.stop().await;
}

#[tokio::test]
async fn magic_link_answers_the_same_for_unknown_addresses_and_signs_in_known_ones() {
    let app = TestApp::new().await;
    let _owner = app.sign_up("ada@acme.test", "acme").await;
    let unknown = app
        .post_json("/v1/auth/magic-link", json!({"email": "nobody@acme.test"}))
        .await;
    let known = app
        .post_json("/v1/auth/magic-link", json!({"email": "ADA@acme.test"}))
        .await;
    assert_eq!(unknown.status.as_u16(), 202);
    assert_eq!(known.status.as_u16(), 202);
    assert_eq!(unknown.body, known.body);

    app.smtp
        .wait_for(2, std::time::Duration::from_secs(10))
        .await;
    let token = app.emailed_token("ada@acme.test").await;
    let signed_in = app
        .post_json("/v1/auth/magic-link/verify", json!({"token": token}))
        .await;
    assert_eq!(signed_in.status.as_u16(), 200, "{}", signed_in.body);
    let cookie = signed_in.header("set-cookie").expect("cookie");
    assert!(cookie.starts_with("service_session="));
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/")
    );
    assert!(
        cookie.contains("Secure"),
        "not plain http on localhost: Secure"
    );
    // Nothing was ever sent to the unknown address.
    assert!(
        app.smtp
            .messages()
            .await
            .iter()
            .all(|m| m.rcpt_to != ["nobody@acme.test"])
    );
    app.stop().await;
}

#[tokio::test]
async fn an_organization_that_enforces_single_sign_on_refuses_both_verify_operations() {
    let app = TestApp::new().await;
    let _owner = app.sign_up("ada@acme.test", "acme").await;
    let org = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq("acme"))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("org");
    // Enforcement applies to addresses at the organization's verified domains.
    entities::sso_domains::ActiveModel {
        org_id: Set(org.id),
        domain: Set("acme.test".into()),
        txt_value: Set("service-domain-verification=x".into()),
        verified_at: Set(Some(app.clock_now())),
        verified_domain: Set(Some("acme.test".into())),
        created_at: Set(app.clock_now()),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("verified claim");
    let mut enforced: organizations::ActiveModel = org.into();
    enforced.sso_enforced = Set(true);
    enforced.update(&app.state.db.orm).await.expect("update");

    // A minute on: one sign-in link a minute per address (decisions §18).
    app.clock.advance(Duration::seconds(61));
    app.post_json("/v1/auth/magic-link", json!({"email": "ada@acme.test"}))
        .await;
    app.smtp
        .wait_for(2, std::time::Duration::from_secs(10))
        .await;
    let token = app.emailed_token("ada@acme.test").await;
    let refused = app
        .post_json("/v1/auth/magic-link/verify", json!({"token": token}))
        .await;
    refused.assert_problem(403, "sso-required");

    // Sign-up of another organization by the same person: also refused, nothing created.
    app.clock.advance(Duration::seconds(61));
    app.post_json(
        "/v1/auth/sign-up",
        json!({"email": "ada@acme.test", "name": "Ada", "organization": {"name": "Two", "slug": "two"}}),
    )
    .await;
    app.smtp
        .wait_for(3, std::time::Duration::from_secs(10))
        .await;
    let token = app.emailed_token("ada@acme.test").await;
    let refused = app
        .post_json("/v1/auth/sign-up/verify", json!({"token": token}))
        .await;
    refused.assert_problem(403, "sso-required");
    let orgs = organizations::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(orgs, 1, "no organization was created");
    app.stop().await;
}

#[tokio::test]
async fn bad_sign_up_input_is_refused_and_nothing_is_written() {
    let app = TestApp::new().await;
    let long_email = format!("{}@acme.test", "a".repeat(250));
    let cases = [
        json!({"email": "ada@acme.test", "name": "Ada"}),
        json!({"email": long_email, "name": "Ada", "organization": {"name": "A", "slug": "acme"}}),
        json!({"email": "ada@acme.test", "name": "x".repeat(256), "organization": {"name": "A", "slug": "acme"}}),
        json!({"email": "ada@acme.test", "name": "Ada", "organization": {"name": "A", "slug": "AC"}}),
        json!({"email": "not-an-email", "name": "Ada", "organization": {"name": "A", "slug": "acme"}}),
        json!({"email": "ada@acme.test", "name": "Ada", "organization": {"name": "A", "slug": "acme"}, "plan": "enterprise"}),
    ];
    for body in cases {
        let response = app.post_json("/v1/auth/sign-up", body.clone()).await;
        response.assert_problem(400, "invalid-request");
    }
    let tokens = email_tokens::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(tokens, 0, "no token was issued");
    app.stop().await;
}

#[tokio::test]
async fn a_forged_cookie_is_unauthenticated_and_a_csrf_token_of_another_session_is_forbidden() {
    let app = TestApp::new().await;
    let ada = app.sign_up("ada@acme.test", "acme").await;
    let bob = app.sign_up("bob@globex.test", "globex").await;

    let forged = Session {
        cookie: format!("service_session={}", "B".repeat(43)),
        ..ada.clone()
    };
    let response = app
        .call(As::Session(&forged), Method::GET, "/v1/me", None)
        .await;
    response.assert_problem(401, "unauthenticated");

    let crossed = Session {
        csrf: bob.csrf.clone(),
        ..ada.clone()
    };
    let response = app
        .call(
            As::Session(&crossed),
            Method::PATCH,
            "/v1/me",
            Some(json!({"name": "Eve"})),
        )
        .await;
    response.assert_problem(403, "forbidden");
    let response = app
        .call(
            As::SessionWithoutCsrf(&ada),
            Method::PATCH,
            "/v1/me",
            Some(json!({"name": "Eve"})),
        )
        .await;
    response.assert_problem(403, "forbidden");
    let response = app
        .call(
            As::Session(&ada),
            Method::PATCH,
            "/v1/me",
            Some(json!({"name": "Ada L.", "time_zone": "Europe/London"})),
        )
        .await;
    assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    assert_eq!(response.json()["time_zone"], "Europe/London");
    let response = app
        .call(
            As::Session(&ada),
            Method::PATCH,
            "/v1/me",
            Some(json!({"time_zone": "Mars/Olympus"})),
        )
        .await;
    response.assert_problem(400, "invalid-request");
    app.stop().await;
}

#[tokio::test]
async fn sign_out_ends_the_session_and_idle_sessions_expire() {
    let app = TestApp::new().await;
    let ada = app.sign_up("ada@acme.test", "acme").await;
    let out = app
        .call(As::Session(&ada), Method::POST, "/v1/auth/sign-out", None)
        .await;
    assert_eq!(out.status.as_u16(), 204);
    assert!(
        out.header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );
    let after = app
        .call(As::Session(&ada), Method::GET, "/v1/me", None)
        .await;
    after.assert_problem(401, "unauthenticated");

    // A fresh session left alone for 7 days ends.
    app.post_json("/v1/auth/magic-link", json!({"email": "ada@acme.test"}))
        .await;
    app.smtp
        .wait_for(2, std::time::Duration::from_secs(10))
        .await;
    let token = app.emailed_token("ada@acme.test").await;
    let verified = app
        .post_json("/v1/auth/magic-link/verify", json!({"token": token}))
        .await;
    let session = Session {
        email: "ada@acme.test".into(),
        cookie: session_cookie(&verified),
        csrf: verified.json()["csrf_token"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    assert_eq!(
        app.call(As::Session(&session), Method::GET, "/v1/me", None)
            .await
            .status
            .as_u16(),
        200
    );
    app.clock.advance(Duration::days(7));
    let idle = app
        .call(As::Session(&session), Method::GET, "/v1/me", None)
        .await;
    idle.assert_problem(401, "unauthenticated");
    app.stop().await;
}

/// Counts the writes of `sessions.last_seen_at` in table `touches` (a trigger, either database).
async fn count_session_touches(app: &TestApp) {
    use sea_orm::ConnectionTrait;
    let db = &app.state.db.orm;
    let statements: &[&str] = match app.state.db.kind() {
        platform::config::DatabaseKind::Postgres => &[
            "CREATE TABLE touches (at TIMESTAMPTZ NOT NULL DEFAULT now())",
            "CREATE FUNCTION count_touch() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO touches DEFAULT VALUES; RETURN NEW; END $$",
            "CREATE TRIGGER count_touch AFTER UPDATE OF last_seen_at ON sessions \
             FOR EACH ROW EXECUTE FUNCTION count_touch()",
        ],
        platform::config::DatabaseKind::Sqlite => &[
            "CREATE TABLE touches (at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
            "CREATE TRIGGER count_touch AFTER UPDATE OF last_seen_at ON sessions \
             BEGIN INSERT INTO touches (at) VALUES (CURRENT_TIMESTAMP); END",
        ],
    };
    for statement in statements {
        db.execute_unprepared(statement).await.expect("trigger");
    }
}

async fn touches(app: &TestApp) -> i64 {
    use sea_orm::{ConnectionTrait, Statement};
    let db = &app.state.db.orm;
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT COUNT(*) AS n FROM touches",
        ))
        .await
        .expect("count")
        .expect("a row");
    row.try_get::<i64>("", "n").expect("n")
}

/// A session's last use is written at most once a minute; when the minute is up, a client's
/// requests at that moment write it once, not once each (they used to queue one update each
/// behind the row's lock).
#[tokio::test]
async fn requests_at_once_write_a_sessions_last_use_once() {
    let app = TestApp::new().await;
    let ada = app.sign_up("ada@acme.test", "acme").await;
    count_session_touches(&app).await;
    let me = || app.call(As::Session(&ada), Method::GET, "/v1/me", None);
    assert_eq!(me().await.status.as_u16(), 200);
    assert_eq!(touches(&app).await, 0, "not within the minute");
    let last_seen = || async {
        entities::sessions::Entity::find()
            .one(&app.state.db.orm)
            .await
            .expect("query")
            .expect("the session")
            .last_seen_at
    };
    let before = last_seen().await;

    app.clock.advance(Duration::seconds(61));
    let answers = futures::future::join_all((0..16).map(|_| me())).await;
    assert!(answers.iter().all(|a| a.status.as_u16() == 200));
    assert_eq!(touches(&app).await, 1, "written once for the sixteen");
    assert!(
        last_seen().await - before >= Duration::seconds(61),
        "and written as now"
    );
    app.stop().await;
}

/// Emailed tokens (decisions §18): at most one a minute and five an hour per address for each
/// kind, answered 202 either way (the answer never says whether mail went out); a sign-in link
/// right after a sign-up is not held back by it.
#[tokio::test]
async fn emailed_tokens_are_limited_per_address_and_kind_to_one_a_minute_and_five_an_hour() {
    let app = TestApp::new().await;
    let _ada = app.sign_up("ada@acme.test", "acme").await;
    let to_ada = |messages: &[tests::smtp_sink::ReceivedEmail]| {
        messages
            .iter()
            .filter(|m| m.rcpt_to.iter().any(|t| t == "ada@acme.test"))
            .count()
    };
    let ask = || async {
        let answer = app
            .post_json("/v1/auth/magic-link", json!({"email": "ada@acme.test"}))
            .await;
        assert_eq!(answer.status.as_u16(), 202, "{}", answer.body);
        app.run_pending_jobs().await;
        to_ada(&app.smtp.messages().await)
    };
    // The sign-up's email, then a sign-in link right away: another kind, not held back.
    assert_eq!(ask().await, 2);
    // Within the minute: accepted, nothing sent.
    assert_eq!(ask().await, 2);
    // One a minute, five in the hour.
    for sent in 3..=6 {
        app.clock.advance(Duration::seconds(61));
        assert_eq!(ask().await, sent);
    }
    app.clock.advance(Duration::seconds(61));
    assert_eq!(
        ask().await,
        6,
        "a sixth sign-in link in the hour is not sent"
    );
    // An hour after the first, one more.
    app.clock.advance(Duration::minutes(56));
    assert_eq!(ask().await, 7);
    // Another address is not affected.
    let other = app
        .post_json("/v1/auth/magic-link", json!({"email": "bob@acme.test"}))
        .await;
    assert_eq!(other.status.as_u16(), 202);
    app.stop().await;
}
