//! Notifications: channel operations with every error cause, the wire format of each of the
//! six kinds seen by a real receiver on loopback (TLS with the test CA; the SMTP sink for
//! email), Standard Webhooks signatures verified as a receiver would, retries with their
//! attempts logged, events written with the change that caused them (and never for one that
//! rolled back), and digests at 08:00 in each member's own time zone.

use std::{sync::Arc, time::Duration};

use base64::{Engine, engine::general_purpose::STANDARD};
use chrono::{TimeZone, Utc};
use domain::roles::Role;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;
use tests::{
    As, Session, TestApp, TestResponse,
    receiver::{Received, Receiver, Reply},
};

use crate::proposals::Fleet;

const WAIT: Duration = Duration::from_secs(20);

async fn call(
    app: &TestApp,
    who: &Session,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> TestResponse {
    app.call(As::Session(who), method, path, body).await
}

async fn create(app: &TestApp, who: &Session, body: Value) -> TestResponse {
    call(
        app,
        who,
        Method::POST,
        "/v1/orgs/acme/notification-channels",
        Some(body),
    )
    .await
}

/// Creates a channel and returns its answer (201 asserted).
async fn channel(app: &TestApp, who: &Session, body: Value) -> Value {
    let created = create(app, who, body).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    created.json()
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap_or_default().to_owned()
}

/// Verifies a Standard Webhooks request the way the specification's libraries do: the
/// signature header holds space-separated `v1,<base64>` entries, one of which is the HMAC-SHA256
/// of `id.timestamp.body` under the base64-decoded secret.
fn verify(secret: &str, request: &Received) -> bool {
    let (Some(id), Some(timestamp), Some(signatures)) = (
        request.header("webhook-id"),
        request.header("webhook-timestamp"),
        request.header("webhook-signature"),
    ) else {
        return false;
    };
    let Some(key) = secret
        .strip_prefix("whsec_")
        .and_then(|k| STANDARD.decode(k).ok())
    else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key) else {
        return false;
    };
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&request.body);
    let expected = STANDARD.encode(mac.finalize().into_bytes());
    signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}

async fn deliveries(app: &TestApp, who: &Session, channel_id: &str) -> Vec<Value> {
    let response = call(
        app,
        who,
        Method::GET,
        &format!("/v1/orgs/acme/notification-channels/{channel_id}/deliveries"),
        None,
    )
    .await;
    assert_eq!(response.status.as_u16(), 200, "{}", response.body);
    response.json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn test_event(app: &TestApp, who: &Session, channel_id: &str) {
    let queued = call(
        app,
        who,
        Method::POST,
        &format!("/v1/orgs/acme/notification-channels/{channel_id}/test"),
        None,
    )
    .await;
    assert_eq!(queued.status.as_u16(), 202, "{}", queued.body);
}

/// Moves the clock on by `seconds`, lets the scheduler queue what is due, runs it.
async fn later(app: &TestApp, seconds: i64) {
    app.clock.advance(chrono::Duration::seconds(seconds));
    let scheduler = scheduler::Scheduler::new(app.state.db.clone(), Arc::new(app.clock.clone()));
    scheduler.tick(app.clock_now()).await.expect("tick");
    app.run_pending_jobs().await;
}

#[tokio::test]
async fn channels_are_created_listed_by_name_changed_and_deleted_without_their_configuration() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "zz hook", "config": {"url": receiver.url("/hooks/in")}}),
    )
    .await;
    let secret = hook["signing_secret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{hook}");
    assert_eq!(hook["kind"], "webhook");
    assert_eq!(
        hook["display"],
        format!("localhost:{}", receiver.addr.port())
    );
    assert!(hook["id"].as_str().is_some_and(|i| i.starts_with("nch_")));
    let mail = channel(
        &app,
        &owner,
        json!({"kind": "email", "name": "aa ops", "config": {"to": ["ops@acme.test", "oncall@acme.test"]},
               "events": ["proposal.failed", "host.offline"]}),
    )
    .await;
    assert_eq!(mail["display"], "o***@acme.test and 1 more");
    assert!(mail.get("signing_secret").is_none());
    assert_eq!(mail["events"], json!(["proposal.failed", "host.offline"]));

    let list = call(
        &app,
        &owner,
        Method::GET,
        "/v1/orgs/acme/notification-channels",
        None,
    )
    .await;
    assert_eq!(list.status.as_u16(), 200, "{}", list.body);
    let names: Vec<Value> = list.json().as_array().cloned().unwrap_or_default();
    assert_eq!(
        names.iter().map(|c| c["name"].clone()).collect::<Vec<_>>(),
        [json!("aa ops"), json!("zz hook")],
        "ordered by name"
    );
    assert!(
        !list.body.contains("whsec_")
            && !list.body.contains("/hooks/in")
            && !list.body.contains("ops@acme.test")
    );
    assert!(
        names
            .iter()
            .all(|c| c.get("config").is_none() && c.get("signing_secret").is_none())
    );

    // Stored sealed: neither the URL nor the secret is in the row.
    let stored = stored_config(&app, &hook).await;
    assert!(stored.starts_with("v1:") && !stored.contains("hooks") && !stored.contains("whsec_"));

    // Rename; replace the configuration (a new secret, shown once); events back to all.
    let path = format!("/v1/orgs/acme/notification-channels/{}", id(&hook));
    let renamed = call(
        &app,
        &owner,
        Method::PATCH,
        &path,
        Some(json!({"name": "hook"})),
    )
    .await;
    assert_eq!(renamed.status.as_u16(), 200, "{}", renamed.body);
    assert!(
        renamed.json().get("signing_secret").is_none(),
        "a rename shows no secret"
    );
    let replaced = call(
        &app,
        &owner,
        Method::PATCH,
        &path,
        Some(json!({"config": {"url": receiver.url("/hooks/v2")}})),
    )
    .await;
    assert_eq!(replaced.status.as_u16(), 200, "{}", replaced.body);
    let new_secret = replaced.json()["signing_secret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    assert_ne!(
        stored_config(&app, &hook).await,
        stored,
        "a fresh seal on every write"
    );
    let mail_path = format!("/v1/orgs/acme/notification-channels/{}", id(&mail));
    let all = call(
        &app,
        &owner,
        Method::PATCH,
        &mail_path,
        Some(json!({"events": null})),
    )
    .await;
    assert_eq!(all.json()["events"], Value::Null, "{}", all.body);

    let deleted = call(&app, &owner, Method::DELETE, &path, None).await;
    assert_eq!(deleted.status.as_u16(), 204, "{}", deleted.body);
    call(&app, &owner, Method::DELETE, &path, None)
        .await
        .assert_problem(404, "not-found");
    call(
        &app,
        &owner,
        Method::PATCH,
        &path,
        Some(json!({"name": "x"})),
    )
    .await
    .assert_problem(404, "not-found");
}

fn row_id(v: &Value) -> uuid::Uuid {
    platform::ids::ChannelId::parse(v["id"].as_str().unwrap_or_default())
        .expect("an nch_ id")
        .uuid()
}

async fn stored_config(app: &TestApp, channel: &Value) -> String {
    use sea_orm::EntityTrait;
    entities::notification_channels::Entity::find_by_id(row_id(channel))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("the channel row")
        .config
}

#[tokio::test]
async fn every_error_cause_of_the_channel_operations() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    let url = receiver.url("/in");
    let bad = |body: Value| {
        let app = &app;
        let owner = &owner;
        async move {
            let answer = create(app, owner, body.clone()).await;
            answer.assert_problem(400, "invalid-request");
            answer
        }
    };
    bad(json!({"kind": "webhook", "name": "", "config": {"url": url}})).await;
    bad(json!({"kind": "webhook", "config": {"url": url}})).await;
    bad(json!({"kind": "discord", "name": "d", "config": {"url": url}})).await;
    bad(json!({"kind": "webhook", "name": "w"})).await;
    bad(json!({"kind": "webhook", "name": "w", "config": {"url": url, "headers": {}}})).await;
    bad(json!({"kind": "slack", "name": "s", "config": {}})).await;
    bad(json!({"kind": "slack", "name": "s", "config": {"webhook_url": "http://hooks.slack.com/x"}})).await;
    bad(json!({"kind": "teams", "name": "t", "config": {"webhook_url": "ftp://teams.example/x"}}))
        .await;
    let secret = bad(json!({"kind": "webhook", "name": "w",
        "config": {"url": url, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}))
    .await;
    assert!(
        secret.body.contains("generated by the service"),
        "{}",
        secret.body
    );
    let many: Vec<String> = (0..10_000).map(|i| format!("m{i}@acme.test")).collect();
    bad(json!({"kind": "email", "name": "e", "config": {"to": many}})).await;
    bad(json!({"kind": "email", "name": "e", "config": {"to": ["not an address"]}})).await;
    bad(json!({"kind": "pagerduty", "name": "p", "config": {"routing_key": ""}})).await;
    bad(json!({"kind": "webhook", "name": "w", "config": {"url": url}, "events": ["proposal.rejected"]})).await;
    bad(json!({"kind": "webhook", "name": "w", "config": {"url": url}, "extra": 1})).await;

    channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "w", "config": {"url": url}}),
    )
    .await;
    create(
        &app,
        &owner,
        json!({"kind": "ntfy", "name": "w", "config": {"topic_url": url}}),
    )
    .await
    .assert_problem(409, "conflict");
    let other = channel(
        &app,
        &owner,
        json!({"kind": "ntfy", "name": "n", "config": {"topic_url": url}}),
    )
    .await;
    let path = format!("/v1/orgs/acme/notification-channels/{}", id(&other));
    call(
        &app,
        &owner,
        Method::PATCH,
        &path,
        Some(json!({"name": "w"})),
    )
    .await
    .assert_problem(409, "conflict");
    call(
        &app,
        &owner,
        Method::PATCH,
        &path,
        Some(json!({"name": " "})),
    )
    .await
    .assert_problem(400, "invalid-request");
    call(
        &app,
        &owner,
        Method::PATCH,
        &path,
        Some(json!({"config": {"url": url}})),
    )
    .await
    .assert_problem(400, "invalid-request");

    // Not permitted for the role, or without the CSRF header; not found elsewhere.
    let operator = app
        .member("acme", Role::Operator, "operator@acme.test")
        .await;
    for (method, p) in [
        (
            Method::GET,
            "/v1/orgs/acme/notification-channels".to_owned(),
        ),
        (
            Method::POST,
            "/v1/orgs/acme/notification-channels".to_owned(),
        ),
        (Method::PATCH, path.clone()),
        (Method::DELETE, path.clone()),
        (Method::POST, format!("{path}/test")),
        (Method::GET, format!("{path}/deliveries")),
    ] {
        let body = (method == Method::POST || method == Method::PATCH)
            .then(|| json!({"kind": "webhook", "name": "x", "config": {"url": url}}));
        call(&app, &operator, method.clone(), &p, body.clone())
            .await
            .assert_problem(403, "forbidden");
        app.call(As::Nobody, method.clone(), &p, body.clone())
            .await
            .assert_problem(401, "unauthenticated");
        let elsewhere = p.replace("/orgs/acme/", "/orgs/other/");
        call(&app, &owner, method, &elsewhere, body)
            .await
            .assert_problem(404, "not-found");
    }
    app.call(
        As::SessionWithoutCsrf(&owner),
        Method::POST,
        "/v1/orgs/acme/notification-channels",
        Some(json!({"kind": "webhook", "name": "x", "config": {"url": url}})),
    )
    .await
    .assert_problem(403, "forbidden");
}

#[tokio::test]
async fn without_a_secrets_key_channels_cannot_be_stored() {
    let app = TestApp::builder().without_secrets_key().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    create(
        &app,
        &owner,
        json!({"kind": "email", "name": "e", "config": {"to": ["ops@acme.test"]}}),
    )
    .await
    .assert_problem(503, "not-configured");
}

#[tokio::test]
async fn a_url_resolving_to_a_private_address_is_refused_at_save_and_at_delivery() {
    let app = TestApp::builder().outbound_guarded().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    for url in [
        receiver.url("/in"),
        format!("https://127.0.0.1:{}/in", receiver.addr.port()),
    ] {
        let refused = create(
            &app,
            &owner,
            json!({"kind": "webhook", "name": "w", "config": {"url": url}}),
        )
        .await;
        refused.assert_problem(400, "invalid-request");
        assert!(refused.body.contains("refused"), "{}", refused.body);
    }
    assert!(receiver.received().is_empty());
}

#[tokio::test]
async fn a_webhook_test_delivery_is_signed_per_standard_webhooks_and_logged() {
    let app = TestApp::new().await;
    // The library checks the timestamp against the real clock: this test runs at the real time.
    app.clock
        .set(platform::clock::Clock::now(&platform::clock::SystemClock));
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "w", "config": {"url": receiver.url("/in")}}),
    )
    .await;
    let secret = hook["signing_secret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    test_event(&app, &owner, &id(&hook)).await;
    app.run_pending_jobs().await;
    let got = receiver.wait_for(1, WAIT).await;
    let request = &got[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/in");
    assert_eq!(request.header("content-type"), Some("application/json"));
    // The Standard Webhooks library, as a receiver uses it.
    let library = standardwebhooks::Webhook::new(&secret).expect("a whsec_ secret");
    library
        .verify(&request.body, &request.headers)
        .expect("the standardwebhooks library verifies the delivery");
    let other =
        standardwebhooks::Webhook::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
    assert!(
        other.verify(&request.body, &request.headers).is_err(),
        "and refuses another secret"
    );
    assert!(verify(&secret, request), "the signature verifies");
    assert!(!verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", request));
    let body = request.json();
    assert_eq!(body["type"], "test");
    assert_eq!(body["data"]["channel"]["id"], hook["id"]);
    assert_eq!(body["data"]["organization"]["slug"], "acme");
    assert!(body["timestamp"].is_string());
    assert_eq!(
        request
            .header("webhook-timestamp")
            .and_then(|t| t.parse::<i64>().ok()),
        Some(app.clock_now().timestamp())
    );
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["id"].as_str(), request.header("webhook-id"));
    assert_eq!(log[0]["event"], "test");
    assert_eq!(log[0]["status"], "delivered");
    assert_eq!(log[0]["attempts"].as_array().map(Vec::len), Some(1));
    assert_eq!(log[0]["attempts"][0]["status_code"], 200);
}

#[tokio::test]
async fn a_receiver_failing_twice_then_succeeding_gets_three_attempts_with_one_webhook_id() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    receiver.queue([
        Reply::Status(500, "down".into()),
        Reply::Status(503, "still down".into()),
    ]);
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "w", "config": {"url": receiver.url("/in")}}),
    )
    .await;
    test_event(&app, &owner, &id(&hook)).await;
    app.run_pending_jobs().await;
    receiver.wait_for(1, WAIT).await;
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log[0]["status"], "pending");
    assert!(log[0]["next_attempt_at"].is_string());
    // Not due yet: nothing more is sent.
    later(&app, 5).await;
    assert_eq!(receiver.received().len(), 1);
    later(&app, 5).await; // 10 s after the first attempt
    receiver.wait_for(2, WAIT).await;
    later(&app, 20).await; // 20 s after the second
    let got = receiver.wait_for(3, WAIT).await;
    later(&app, 3600).await;
    assert_eq!(receiver.received().len(), 3, "delivered: no more attempts");
    let ids: Vec<Option<&str>> = got.iter().map(|r| r.header("webhook-id")).collect();
    assert!(
        ids.iter().all(|i| i.is_some() && *i == ids[0]),
        "one webhook-id: {ids:?}"
    );
    let effects: std::collections::HashSet<&str> = got
        .iter()
        .zip([500, 503, 200])
        .filter(|(_, status)| *status == 200)
        .filter_map(|(r, _)| r.header("webhook-id"))
        .collect();
    assert_eq!(effects.len(), 1, "exactly one effect per webhook-id");
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["status"], "delivered");
    let attempts = log[0]["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        attempts
            .iter()
            .map(|a| a["status_code"].clone())
            .collect::<Vec<_>>(),
        [json!(500), json!(503), json!(200)]
    );
    assert_eq!(
        attempts
            .iter()
            .map(|a| a["number"].clone())
            .collect::<Vec<_>>(),
        [json!(1), json!(2), json!(3)]
    );
    assert!(attempts[0]["error"].is_string() && attempts[2]["error"].is_null());
}

#[tokio::test]
async fn gone_redirects_and_huge_answers_each_end_as_an_attempt_never_a_stuck_worker() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let gone = Receiver::with_handler(|_| Reply::Status(410, String::new())).await;
    let elsewhere = Receiver::start().await;
    let target = elsewhere.url("/stolen");
    let redirecting = Receiver::with_handler(move |_| Reply::Redirect(target.clone())).await;
    let huge = Receiver::with_handler(|_| Reply::Huge(100 * 1024 * 1024)).await;
    let mut ids = Vec::new();
    for (name, receiver) in [("gone", &gone), ("redirect", &redirecting), ("huge", &huge)] {
        let hook = channel(
            &app,
            &owner,
            json!({"kind": "webhook", "name": name, "config": {"url": receiver.url("/in")}}),
        )
        .await;
        test_event(&app, &owner, &id(&hook)).await;
        ids.push(id(&hook));
    }
    app.run_pending_jobs().await;
    let gone_log = deliveries(&app, &owner, &ids[0]).await;
    assert_eq!(gone_log[0]["status"], "failed", "{gone_log:?}");
    assert!(
        gone_log[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("410"))
    );
    let redirect_log = deliveries(&app, &owner, &ids[1]).await;
    assert_eq!(redirect_log[0]["status"], "pending");
    assert_eq!(redirect_log[0]["attempts"][0]["status_code"], 302);
    assert!(
        elsewhere.received().is_empty(),
        "a redirect elsewhere is not followed"
    );
    let huge_log = deliveries(&app, &owner, &ids[2]).await;
    assert_eq!(huge_log[0]["status"], "delivered", "a 2xx whatever it says");
    // A 410 ends it: later retries send nothing.
    later(&app, 3600).await;
    assert_eq!(gone.received().len(), 1);
}

#[tokio::test]
async fn a_receiver_that_hangs_times_out_as_a_failed_attempt() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let hanging = Receiver::with_handler(|_| Reply::Hang).await;
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "h", "config": {"url": hanging.url("/in")}}),
    )
    .await;
    test_event(&app, &owner, &id(&hook)).await;
    app.run_pending_jobs().await;
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log[0]["status"], "pending");
    assert_eq!(log[0]["attempts"][0]["error"], "timed out");
    assert!(
        log[0]["attempts"][0]["duration_ms"]
            .as_i64()
            .is_some_and(|ms| ms >= 14_000)
    );
}

#[tokio::test]
async fn slack_teams_ntfy_and_pagerduty_receive_their_wire_formats() {
    let pagerduty = Receiver::start().await;
    let app = TestApp::builder()
        .pagerduty_events_url(&pagerduty.url("/v2/enqueue"))
        .start()
        .await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let slack = Receiver::start().await;
    let teams = Receiver::start().await;
    let ntfy = Receiver::start().await;
    let channels = [
        channel(&app, &owner, json!({"kind": "slack", "name": "s", "config": {"webhook_url": slack.url("/services/T/B/x")}})).await,
        channel(&app, &owner, json!({"kind": "teams", "name": "t", "config": {"webhook_url": teams.url("/webhookb2/x")}})).await,
        channel(&app, &owner, json!({"kind": "ntfy", "name": "n", "config": {"topic_url": ntfy.url("/fleet"), "token": "tk_secret"}})).await,
        channel(&app, &owner, json!({"kind": "pagerduty", "name": "p", "config": {"routing_key": "R0123456789abcdef"}})).await,
    ];
    for c in &channels {
        test_event(&app, &owner, &id(c)).await;
    }
    app.run_pending_jobs().await;

    let s = &slack.wait_for(1, WAIT).await[0];
    assert_eq!(s.path, "/services/T/B/x");
    let body = s.json();
    assert!(
        body["text"]
            .as_str()
            .is_some_and(|t| t.contains("Test notification")),
        "{body}"
    );
    assert_eq!(body["blocks"][0]["type"], "section");

    let t = teams.wait_for(1, WAIT).await[0].json();
    assert_eq!(t["type"], "message");
    assert_eq!(
        t["attachments"][0]["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(t["attachments"][0]["content"]["type"], "AdaptiveCard");

    let n = &ntfy.wait_for(1, WAIT).await[0];
    assert_eq!(n.path, "/fleet");
    assert_eq!(n.header("title"), Some("Test notification"));
    assert_eq!(n.header("tags"), Some("bell"));
    assert_eq!(n.header("priority"), Some("3"));
    assert_eq!(n.header("authorization"), Some("Bearer tk_secret"));
    assert!(
        n.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain"))
    );
    assert!(n.text().contains("works"));

    let p = &pagerduty.wait_for(1, WAIT).await[0];
    assert_eq!(p.path, "/v2/enqueue");
    let event = p.json();
    assert_eq!(event["routing_key"], "R0123456789abcdef");
    assert_eq!(event["event_action"], "trigger");
    assert_eq!(event["payload"]["severity"], "info");
    assert_eq!(event["dedup_key"], channels[3]["id"]);
    for c in &channels {
        assert_eq!(
            deliveries(&app, &owner, &id(c)).await[0]["status"],
            "delivered"
        );
    }
}

#[tokio::test]
async fn an_email_channel_sends_one_message_to_its_list_through_the_mailer() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let mail = channel(&app, &owner, json!({"kind": "email", "name": "ops", "config": {"to": ["ops@acme.test", "oncall@acme.test"]}})).await;
    test_event(&app, &owner, &id(&mail)).await;
    app.run_pending_jobs().await;
    let message = app.smtp.wait_for_message_to("oncall@acme.test", WAIT).await;
    assert_eq!(
        message.header("Subject").as_deref(),
        Some("Test notification")
    );
    assert!(message.text().contains("The channel ops of acme works"));
    app.smtp.wait_for_message_to("ops@acme.test", WAIT).await;
    assert_eq!(
        deliveries(&app, &owner, &id(&mail)).await[0]["status"],
        "delivered"
    );
}

/// Every `proposal.approved` delivery of the organization.
async fn approved_deliveries(app: &TestApp) -> Vec<entities::notification_deliveries::Model> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::notification_deliveries::Entity::find()
        .filter(entities::notification_deliveries::Column::EventKind.eq("proposal.approved"))
        .all(&app.state.db.orm)
        .await
        .expect("query")
}

/// A webhook channel named `name` posting to the receiver's `/{name}`, for `events` (all when
/// empty).
async fn webhook(
    app: &TestApp,
    who: &Session,
    receiver: &Receiver,
    name: &str,
    events: &[&str],
) -> Value {
    let mut body = json!({"kind": "webhook", "name": name,
        "config": {"url": receiver.url(&format!("/{name}"))}});
    if !events.is_empty() {
        body["events"] = json!(events);
    }
    channel(app, who, body).await
}

#[tokio::test]
async fn five_concurrent_approvers_produce_one_approved_delivery_per_matching_channel() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let owner = fleet.owner.clone();
    let receiver = Receiver::start().await;
    let all = webhook(&app, &owner, &receiver, "all", &[]).await;
    let approvals = webhook(&app, &owner, &receiver, "approvals", &["proposal.approved"]).await;
    let failures = webhook(&app, &owner, &receiver, "failures", &["proposal.failed"]).await;
    let (_agent, proposal) = fleet.one_proposal(3).await;
    let mut people: Vec<Session> = Vec::new();
    for i in 0..5 {
        people.push(
            app.member("acme", Role::Operator, &format!("approver-{i}@acme.test"))
                .await,
        );
    }
    let path = format!("/v1/orgs/acme/proposals/{proposal}/approve");
    let answers = futures::future::join_all(
        people
            .iter()
            .map(|p| call(&app, p, Method::POST, &path, None)),
    )
    .await;
    assert!(answers.iter().any(|a| a.status.as_u16() == 200));
    app.run_pending_jobs().await;
    let approved = approved_deliveries(&app).await;
    let mut channels: Vec<uuid::Uuid> = approved.iter().map(|d| d.channel_id).collect();
    channels.sort();
    let mut expected = vec![row_id(&all), row_id(&approvals)];
    expected.sort();
    assert_eq!(
        channels, expected,
        "one per matching channel, none for the failures channel"
    );
    let seen: Vec<Value> = receiver
        .received()
        .iter()
        .filter(|r| r.json()["type"] == "proposal.approved")
        .map(|r| json!([r.path, r.json()["data"]["proposal"]["id"]]))
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|s| s[1] == json!(proposal)));
    assert!(deliveries(&app, &owner, &id(&failures)).await.is_empty());
    // The opening was announced to the catch-all channel too.
    assert!(
        receiver
            .received()
            .iter()
            .any(|r| r.path == "/all" && r.json()["type"] == "proposal.opened")
    );
}

/// Four dispatchers at once over 250 waiting events (more than two batches): every event is
/// claimed, and each gets exactly one delivery per channel that wants it (a second would break
/// the unique index on event × channel and fail its dispatcher).
#[tokio::test]
async fn concurrent_dispatchers_make_each_events_deliveries_once() {
    use domain::notifications::{EventKind, outbox};
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let app = TestApp::builder().without_worker().start().await;
    app.organization("acme").await;
    let owner = app.member("acme", Role::Owner, "owner@acme.test").await;
    let receiver = Receiver::start().await;
    let all = webhook(&app, &owner, &receiver, "all", &[]).await;
    let enrolments = webhook(&app, &owner, &receiver, "enrolments", &["host.enrolled"]).await;
    webhook(&app, &owner, &receiver, "failures", &["proposal.failed"]).await;
    let org = org_id(&app).await.uuid();
    let now = app.clock_now();
    let mut events = Vec::new();
    for i in 0..250 {
        events.push(
            outbox::emit(
                &app.state.db.orm,
                org,
                EventKind::HostEnrolled,
                Some(format!("host-{i}")),
                None,
                json!({}),
                now,
            )
            .await
            .expect("an event"),
        );
    }
    let deps = worker::Deps::new(
        app.state.config.clone(),
        app.state.db.clone(),
        app.state.clock.clone(),
    )
    .expect("deps");
    let runs = futures::future::join_all((0..4).map(|_| {
        worker::jobs::notify_dispatch::run(
            domain::notifications::jobs::NotifyDispatch::default(),
            apalis::prelude::Data::new(deps.clone()),
        )
    }))
    .await;
    for run in runs {
        run.expect("every dispatcher finishes without an error");
    }
    let waiting = entities::notification_events::Entity::find()
        .filter(entities::notification_events::Column::DispatchedAt.is_null())
        .count(&app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(waiting, 0, "every event claimed");
    let made = entities::notification_deliveries::Entity::find()
        .all(&app.state.db.orm)
        .await
        .expect("deliveries");
    let mut pairs: Vec<(uuid::Uuid, uuid::Uuid)> =
        made.iter().map(|d| (d.event_id, d.channel_id)).collect();
    pairs.sort();
    let mut expected: Vec<(uuid::Uuid, uuid::Uuid)> = events
        .iter()
        .flat_map(|event| [(*event, row_id(&all)), (*event, row_id(&enrolments))])
        .collect();
    expected.sort();
    assert_eq!(pairs.len(), 500);
    assert_eq!(pairs, expected, "one per event and wanting channel");
}

#[tokio::test]
async fn an_event_written_in_a_transaction_that_rolls_back_is_never_sent() {
    use sea_orm::{EntityTrait, PaginatorTrait};
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let receiver = Receiver::start().await;
    channel(
        &app,
        &fleet.owner,
        json!({"kind": "webhook", "name": "all", "config": {"url": receiver.url("/all")}}),
    )
    .await;
    let (_agent, proposal) = fleet.one_proposal(1).await;
    app.run_pending_jobs().await;
    let before = entities::notification_events::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count");
    let proposal_row = entities::proposals::Entity::find_by_id(
        platform::ids::ProposalId::parse(&proposal)
            .expect("id")
            .uuid(),
    )
    .one(&app.state.db.orm)
    .await
    .expect("query")
    .expect("proposal");
    {
        let txn = app.state.db.begin_write().await.expect("txn");
        domain::proposals::go_ahead(&txn, proposal_row, None, app.clock_now())
            .await
            .expect("goes ahead inside the transaction");
        // Dropped without commit: rolled back.
    }
    later(&app, 1).await;
    assert_eq!(
        entities::notification_events::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        before
    );
    assert!(approved_deliveries(&app).await.is_empty());
    assert!(
        receiver
            .received()
            .iter()
            .all(|r| r.json()["type"] != "proposal.approved")
    );
    // The same change committed is announced.
    let approve = fleet.decide(&fleet.owner, &proposal, "approve", None).await;
    assert_eq!(approve.status.as_u16(), 200, "{}", approve.body);
    app.run_pending_jobs().await;
    assert_eq!(approved_deliveries(&app).await.len(), 1);
}

async fn digest(app: &TestApp, who: &Session, body: Value) -> Value {
    let answer = call(app, who, Method::PUT, "/v1/orgs/acme/digest", Some(body)).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    answer.json()
}

#[tokio::test]
async fn the_digest_setting_is_each_members_own() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let get = call(&app, &viewer, Method::GET, "/v1/orgs/acme/digest", None).await;
    assert_eq!(
        get.json(),
        json!({"frequency": "off", "mention_email": true}),
        "{}",
        get.body
    );
    assert_eq!(
        digest(&app, &viewer, json!({"frequency": "weekly"})).await,
        json!({"frequency": "weekly", "mention_email": true})
    );
    assert_eq!(
        digest(
            &app,
            &viewer,
            json!({"frequency": "daily", "mention_email": false})
        )
        .await,
        json!({"frequency": "daily", "mention_email": false})
    );
    assert_eq!(
        digest(&app, &viewer, json!({"frequency": "off"})).await,
        json!({"frequency": "off", "mention_email": false}),
        "absent leaves it"
    );
    let owners = call(&app, &owner, Method::GET, "/v1/orgs/acme/digest", None).await;
    assert_eq!(
        owners.json()["frequency"],
        "off",
        "another member's is separate"
    );
    call(
        &app,
        &viewer,
        Method::PUT,
        "/v1/orgs/acme/digest",
        Some(json!({"frequency": "hourly"})),
    )
    .await
    .assert_problem(400, "invalid-request");
    call(
        &app,
        &viewer,
        Method::PUT,
        "/v1/orgs/acme/digest",
        Some(json!({})),
    )
    .await
    .assert_problem(400, "invalid-request");
    app.call(
        As::Nobody,
        Method::PUT,
        "/v1/orgs/acme/digest",
        Some(json!({"frequency": "off"})),
    )
    .await
    .assert_problem(401, "unauthenticated");
    app.call(
        As::SessionWithoutCsrf(&viewer),
        Method::PUT,
        "/v1/orgs/acme/digest",
        Some(json!({"frequency": "off"})),
    )
    .await
    .assert_problem(403, "forbidden");
    call(
        &app,
        &viewer,
        Method::PUT,
        "/v1/orgs/other/digest",
        Some(json!({"frequency": "off"})),
    )
    .await
    .assert_problem(404, "not-found");
}

async fn set_zone(app: &TestApp, email: &str, zone: &str) {
    use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
    let account = entities::accounts::Entity::find()
        .filter(entities::accounts::Column::Email.eq(email))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("account");
    let mut changed: entities::accounts::ActiveModel = account.into();
    changed.time_zone = Set(zone.to_owned());
    changed.update(&app.state.db.orm).await.expect("update");
}

fn digests_to(messages: &[tests::smtp_sink::ReceivedEmail], address: &str) -> usize {
    messages
        .iter()
        .filter(|m| m.header("Subject").is_some_and(|s| s.contains("digest")))
        .filter(|m| m.header("To").is_some_and(|t| t.contains(address)))
        .count()
}

#[tokio::test]
async fn digests_arrive_at_eight_local_time_once_across_restarts_and_two_schedulers() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let tokyo = app.member("acme", Role::Operator, "tokyo@acme.test").await;
    let new_york = app.member("acme", Role::Operator, "ny@acme.test").await;
    let weekly = app.member("acme", Role::Operator, "weekly@acme.test").await;
    set_zone(&app, "tokyo@acme.test", "Asia/Tokyo").await;
    set_zone(&app, "ny@acme.test", "America/New_York").await;
    set_zone(&app, "weekly@acme.test", "Asia/Tokyo").await;
    digest(&app, &tokyo, json!({"frequency": "daily"})).await;
    digest(&app, &new_york, json!({"frequency": "daily"})).await;
    digest(&app, &weekly, json!({"frequency": "weekly"})).await;
    // Something awaits their approval.
    fleet.one_proposal(2).await;
    let at = |d: u32, h: u32, m: u32| {
        Utc.with_ymd_and_hms(2026, 11, d, h, m, 0)
            .single()
            .expect("valid")
    };
    let tick = |now| {
        let app = &app;
        async move {
            // A fresh scheduler each time: a restart, or another replica, forgets nothing.
            for _ in 0..2 {
                let scheduler =
                    scheduler::Scheduler::new(app.state.db.clone(), Arc::new(app.clock.clone()));
                scheduler.tick(now).await.expect("tick");
            }
            app.run_pending_jobs().await;
        }
    };
    // Monday 2 November, 22:59 UTC: 07:59 on Tuesday in Tokyo. Nothing yet.
    app.clock.set(at(2, 22, 59));
    tick(at(2, 22, 59)).await;
    let messages = app.smtp.messages().await;
    assert_eq!(digests_to(&messages, "tokyo@acme.test"), 0);
    // 23:00 UTC is 08:00 in Tokyo.
    app.clock.set(at(2, 23, 0));
    tick(at(2, 23, 0)).await;
    tick(at(2, 23, 1)).await;
    let messages = app.smtp.messages().await;
    assert_eq!(digests_to(&messages, "tokyo@acme.test"), 1);
    assert_eq!(
        digests_to(&messages, "ny@acme.test"),
        0,
        "still night in New York"
    );
    assert_eq!(
        digests_to(&messages, "weekly@acme.test"),
        0,
        "Tuesday in Tokyo"
    );
    let tokyo_mail = messages
        .iter()
        .find(|m| {
            m.header("To")
                .is_some_and(|t| t.contains("tokyo@acme.test"))
        })
        .expect("the digest");
    assert!(
        tokyo_mail.text().contains("Awaiting your approval (1)"),
        "{}",
        tokyo_mail.text()
    );
    assert!(
        tokyo_mail
            .text()
            .contains("http://fleet.test/orgs/acme/proposals/prp_")
    );
    // 13:00 UTC on Tuesday is 08:00 in New York.
    app.clock.set(at(3, 13, 0));
    tick(at(3, 13, 0)).await;
    tick(at(3, 14, 30)).await;
    let messages = app.smtp.messages().await;
    assert_eq!(digests_to(&messages, "ny@acme.test"), 1);
    assert_eq!(digests_to(&messages, "tokyo@acme.test"), 1);
    // Sunday 8 November 23:00 UTC is Monday 08:00 in Tokyo: the weekly one, and Tokyo's daily.
    app.clock.set(at(8, 23, 0));
    tick(at(8, 23, 0)).await;
    let messages = app.smtp.messages().await;
    assert_eq!(digests_to(&messages, "weekly@acme.test"), 1);
    assert_eq!(digests_to(&messages, "tokyo@acme.test"), 2);
}

#[tokio::test]
async fn nothing_is_sent_when_a_digest_has_nothing_to_say() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    digest(&app, &owner, json!({"frequency": "daily"})).await;
    let before = app.smtp.messages().await.len();
    let now = Utc
        .with_ymd_and_hms(2026, 11, 3, 8, 0, 0)
        .single()
        .expect("valid");
    app.clock.set(now);
    let scheduler = scheduler::Scheduler::new(app.state.db.clone(), Arc::new(app.clock.clone()));
    scheduler.tick(now).await.expect("tick");
    app.run_pending_jobs().await;
    assert!(
        !app.job_rows(Some("digest.send")).await.is_empty(),
        "the digest job ran"
    );
    assert_eq!(app.smtp.messages().await.len(), before, "and sent nothing");
}

#[tokio::test]
async fn a_mention_email_honours_mention_email() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let muted = app.member("acme", Role::Operator, "muted@acme.test").await;
    app.member("acme", Role::Operator, "loud@acme.test").await;
    digest(
        &app,
        &muted,
        json!({"frequency": "off", "mention_email": false}),
    )
    .await;
    let (_agent, proposal) = fleet.one_proposal(1).await;
    let comment = call(
        &app,
        &fleet.owner,
        Method::POST,
        &format!("/v1/orgs/acme/proposals/{proposal}/comments"),
        Some(json!({"body": "@muted@acme.test and @loud@acme.test please look"})),
    )
    .await;
    assert_eq!(comment.status.as_u16(), 201, "{}", comment.body);
    app.run_pending_jobs().await;
    app.smtp.wait_for_message_to("loud@acme.test", WAIT).await;
    let messages = app.smtp.messages().await;
    assert!(
        !messages.iter().any(|m| m
            .header("To")
            .is_some_and(|t| t.contains("muted@acme.test"))),
        "no email to a member who turned mention_email off"
    );
}

async fn org_id(app: &TestApp) -> platform::ids::OrgId {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let org = entities::organizations::Entity::find()
        .filter(entities::organizations::Column::Slug.eq("acme"))
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .expect("acme");
    platform::ids::OrgId::from(org.id)
}

#[tokio::test]
async fn the_plan_gates_channel_kinds_and_a_downgrade_skips_their_deliveries() {
    // A deployment that takes payments: organizations start on free.
    let app = TestApp::builder().payments().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    for (kind, config) in [
        ("slack", json!({"webhook_url": receiver.url("/s")})),
        ("teams", json!({"webhook_url": receiver.url("/t")})),
        ("ntfy", json!({"topic_url": receiver.url("/n")})),
        ("pagerduty", json!({"routing_key": "R0123"})),
        ("webhook", json!({"url": receiver.url("/w")})),
    ] {
        let refused = create(
            &app,
            &owner,
            json!({"kind": kind, "name": kind, "config": config}),
        )
        .await;
        refused.assert_problem(403, "plan-required");
    }
    channel(
        &app,
        &owner,
        json!({"kind": "email", "name": "mail", "config": {"to": ["ops@acme.test"]}}),
    )
    .await;
    let org = org_id(&app).await;
    domain::billing::set_plan(
        &app.state.db.orm,
        org,
        &domain::billing::Plan::Team,
        app.clock_now(),
    )
    .await
    .expect("team");
    // Written behind the API's back.
    app.identity_settled().await;
    channel(
        &app,
        &owner,
        json!({"kind": "slack", "name": "slack", "config": {"webhook_url": receiver.url("/s")}}),
    )
    .await;
    create(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "hook", "config": {"url": receiver.url("/w")}}),
    )
    .await
    .assert_problem(403, "plan-required");
    domain::billing::set_plan(
        &app.state.db.orm,
        org,
        &domain::billing::Plan::Business,
        app.clock_now(),
    )
    .await
    .expect("business");
    // Written behind the API's back.
    app.identity_settled().await;
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "hook", "config": {"url": receiver.url("/w")}}),
    )
    .await;
    // Downgraded: the channel stays, its deliveries are skipped and nothing is sent.
    domain::billing::set_plan(
        &app.state.db.orm,
        org,
        &domain::billing::Plan::Free,
        app.clock_now(),
    )
    .await
    .expect("free");
    // Written behind the API's back.
    app.identity_settled().await;
    test_event(&app, &owner, &id(&hook)).await;
    app.run_pending_jobs().await;
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (log[0]["status"].clone(), log[0]["reason"].clone()),
        (json!("skipped"), json!("plan"))
    );
    assert_eq!(log[0]["attempts"], json!([]));
    assert!(receiver.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_delivery_loses_nothing_the_delivery_runs_again() {
    let app = TestApp::builder().without_worker().start().await;
    app.organization("acme").await;
    let owner = app.member("acme", Role::Owner, "owner@acme.test").await;
    let receiver = Receiver::start().await;
    // The first request hangs (the worker is killed while it waits); the next succeeds.
    receiver.queue([Reply::Hang]);
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "w", "config": {"url": receiver.url("/in")}}),
    )
    .await;
    test_event(&app, &owner, &id(&hook)).await;
    let ca = tests::receiver::TestCa::get().file.display().to_string();
    let env = [
        ("SECRETS_KEY", tests::TEST_SECRETS_KEY),
        ("OUTBOUND_CA_FILE", ca.as_str()),
        ("OUTBOUND_ALLOW_PRIVATE", "true"),
    ];
    const WORKER: &str = env!("CARGO_BIN_EXE_fleet-worker");
    let mut first =
        tests::processes::spawn_worker_with(WORKER, app.database.url(), &app.smtp.url(), 4, &env);
    let got = receiver.wait_for(1, Duration::from_secs(60)).await;
    first.start_kill().expect("kill the worker");
    let _ = first.wait().await;
    let mut second =
        tests::processes::spawn_worker_with(WORKER, app.database.url(), &app.smtp.url(), 4, &env);
    let again = receiver.wait_for(2, Duration::from_secs(60)).await;
    assert_eq!(
        got[0].header("webhook-id"),
        again[1].header("webhook-id"),
        "the same delivery, sent again"
    );
    // The second worker records the attempt once the receiver has answered; on a loaded
    // machine its write can meet a busy SQLite and be retried, so wait for the record itself
    // (a job still waiting for its retry when a worker stops runs again on another worker).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let log = loop {
        let log = deliveries(&app, &owner, &id(&hook)).await;
        let recorded = log.first().is_some_and(|d| d["status"] != "pending");
        if recorded || tokio::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tests::processes::stop_gracefully(&mut second).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["status"], "delivered", "{log:?}");
    assert_eq!(receiver.received().len(), 2);
}

#[tokio::test]
async fn an_attempt_whose_job_failed_for_good_is_queued_again_and_made_once() {
    let app = TestApp::builder().without_worker().start().await;
    app.organization("acme").await;
    let owner = app.member("acme", Role::Owner, "owner@acme.test").await;
    let receiver = Receiver::start().await;
    receiver.queue([Reply::Status(500, "busy".into())]);
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "w", "config": {"url": receiver.url("/in")}}),
    )
    .await;
    test_event(&app, &owner, &id(&hook)).await;
    app.run_pending_jobs().await;
    assert_eq!(
        receiver.received().len(),
        1,
        "the first attempt, answered 500"
    );
    // The second attempt falls due; its job is queued and then spent by the database failing
    // it through every retry, so the attempt is never recorded.
    app.clock.advance(chrono::Duration::seconds(10));
    let deps = worker::Deps::new(
        app.state.config.clone(),
        app.state.db.clone(),
        app.state.clock.clone(),
    )
    .expect("deps");
    let queued = worker::jobs::notify_dispatch::queue_due(&deps, app.clock_now())
        .await
        .expect("queue the due attempt");
    assert_eq!(queued, 1);
    app.fail_jobs_for_good("notify.deliver").await;
    app.run_pending_jobs().await;
    // Not yet given up on: the job may still be running somewhere.
    later(&app, 14 * 60).await;
    assert_eq!(receiver.received().len(), 1);
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(
        (
            log[0]["status"].clone(),
            log[0]["attempts"].as_array().map(Vec::len)
        ),
        (json!("pending"), Some(1))
    );
    // Fifteen minutes overdue: queued again, made once, recorded.
    later(&app, 2 * 60).await;
    later(&app, 60).await;
    assert_eq!(
        receiver.received().len(),
        2,
        "the second attempt, made once"
    );
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log[0]["status"], "delivered", "{log:?}");
    assert_eq!(log[0]["attempts"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn host_enrolled_and_host_offline_are_announced() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let receiver = Receiver::start().await;
    channel(
        &app,
        &fleet.owner,
        json!({"kind": "webhook", "name": "hosts",
        "config": {"url": receiver.url("/hosts")}, "events": ["host.enrolled", "host.offline"]}),
    )
    .await;
    fleet.host("web-1", json!([]), json!({})).await;
    app.run_pending_jobs().await;
    let enrolled = receiver.wait_for(1, WAIT).await[0].json();
    assert_eq!(enrolled["type"], "host.enrolled");
    assert_eq!(enrolled["data"]["host"]["hostname"], "web-1");
    assert!(
        enrolled["data"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://fleet.test/orgs/acme/hosts/hst_"))
    );
    // Silent for more than three intervals: offline at the next upkeep.
    later(&app, 16 * 60).await;
    let got = receiver.wait_for(2, WAIT).await;
    let offline = got[1].json();
    assert_eq!(offline["type"], "host.offline");
    assert_eq!(
        offline["data"]["host"]["id"],
        enrolled["data"]["host"]["id"]
    );
    assert_eq!(got.len(), 2, "nothing else: the filter holds");
}

#[tokio::test]
async fn a_known_exploited_cve_on_an_open_proposal_is_announced_once() {
    use sea_orm::ActiveModelTrait;
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let receiver = Receiver::start().await;
    channel(
        &app,
        &fleet.owner,
        json!({"kind": "webhook", "name": "kev",
        "config": {"url": receiver.url("/kev")}, "events": ["advisory.known_exploited"]}),
    )
    .await;
    let advisories = json!([{"external_id": "USN-7001-1", "source": "usn", "severity": "high",
        "title": "openssl fix", "url": "https://ubuntu.com/security/notices/USN-7001-1",
        "cves": ["CVE-2026-1000"]}]);
    fleet
        .host(
            "web-1",
            json!([crate::proposals::update(
                "openssl", "3.0.1", "3.0.2", advisories
            )]),
            json!({}),
        )
        .await;
    let policy = fleet
        .policy(
            json!({"name": "everything", "scope": {"groups": []}, "required_approvals": 1,
            "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all"}),
        )
        .await;
    app.run_pending_jobs().await;
    assert!(receiver.received().is_empty(), "not known exploited yet");
    entities::known_exploited::ActiveModel {
        cve: sea_orm::Set("CVE-2026-1000".into()),
        added_at: sea_orm::Set(app.clock_now()),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("kev");
    let policy_id = platform::ids::PolicyId::parse(policy["id"].as_str().unwrap_or_default())
        .expect("pol id")
        .uuid();
    for _ in 0..2 {
        domain::policy::evaluate_policy(&app.state.db, &app.reports, policy_id, app.clock_now())
            .await
            .expect("evaluate");
        later(&app, 1).await;
    }
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1, "once per organization and CVE");
    let body = got[0].json();
    assert_eq!(body["type"], "advisory.known_exploited");
    assert_eq!(body["data"]["cve"], "CVE-2026-1000");
    assert!(
        body["data"]["proposal"]["id"]
            .as_str()
            .is_some_and(|p| p.starts_with("prp_"))
    );
    assert!(
        body["data"]["url"]
            .as_str()
            .is_some_and(|u| u.contains("/proposals/prp_"))
    );
}

#[tokio::test]
async fn a_destination_that_resolves_to_a_private_address_is_refused_again_at_delivery() {
    use sea_orm::{ActiveModelTrait, Set};
    let app = TestApp::builder().outbound_guarded().start().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let receiver = Receiver::start().await;
    // As if saved while the name still resolved to a public address: the row is written
    // directly, sealed as the api seals it.
    let key: [u8; 32] = STANDARD
        .decode(tests::TEST_SECRETS_KEY)
        .expect("base64")
        .try_into()
        .expect("32 bytes");
    let config = json!({"kind": "webhook", "url": receiver.url("/in"),
        "secret": domain::notifications::signing::generate_secret()});
    let now = app.clock_now();
    let row = entities::notification_channels::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(org_id(&app).await.uuid()),
        kind: Set("webhook".into()),
        name: Set("rebound".into()),
        display: Set("localhost".into()),
        config: Set(platform::crypto::seal(
            &key,
            config.to_string().as_bytes(),
            domain::notifications::config::SEALED_PURPOSE,
        )),
        events: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("channel row");
    let channel_id = platform::ids::ChannelId::from(row.id).to_string();
    test_event(&app, &owner, &channel_id).await;
    app.run_pending_jobs().await;
    let log = deliveries(&app, &owner, &channel_id).await;
    assert_eq!(log[0]["status"], "pending", "{log:?}");
    assert!(
        log[0]["attempts"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "{log:?}"
    );
    assert!(receiver.received().is_empty());
}

#[test]
fn the_signer_agrees_with_the_standard_webhooks_library() {
    for _ in 0..20 {
        let secret = domain::notifications::signing::generate_secret();
        let library = standardwebhooks::Webhook::new(&secret).expect("a whsec_ secret");
        for body in ["{}", r#"{"type":"test","data":{"name":"ünïcode"}}"#, ""] {
            assert_eq!(
                domain::notifications::signing::sign(
                    &secret,
                    "dlv_x",
                    1_700_000_000,
                    body.as_bytes()
                )
                .ok(),
                library.sign("dlv_x", 1_700_000_000, body.as_bytes()).ok()
            );
        }
    }
}

#[tokio::test]
async fn a_receiver_answering_500_forever_is_retried_for_24_hours_then_failed() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.verified_domain("acme", "acme.test").await;
    let broken = Receiver::with_handler(|_| Reply::Status(500, "broken".into())).await;
    let hook = channel(
        &app,
        &owner,
        json!({"kind": "webhook", "name": "broken", "config": {"url": broken.url("/in")}}),
    )
    .await;
    test_event(&app, &owner, &id(&hook)).await;
    app.run_pending_jobs().await;
    // An hour at a time: every due retry is made, none early, until the day is over.
    for _ in 0..25 {
        later(&app, 3600).await;
    }
    let log = deliveries(&app, &owner, &id(&hook)).await;
    assert_eq!(log[0]["status"], "failed", "{log:?}");
    assert!(
        log[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("24 hours") && r.contains("500"))
    );
    let attempts = log[0]["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        attempts.len(),
        broken.received().len(),
        "every attempt logged"
    );
    // 1 + hourly catch-ups: the clock moved an hour at a time, so each tick made one attempt.
    assert!(
        (20..=30).contains(&attempts.len()),
        "{} attempts",
        attempts.len()
    );
    later(&app, 3600).await;
    assert_eq!(
        broken.received().len(),
        attempts.len(),
        "no attempt after it failed"
    );
}

// --- Trust boundaries (decisions §18) ---------------------------------------------------------

/// An email channel is no relay: it sends only to the organization's members and to addresses
/// at its verified domains, and a save naming anybody else is refused, naming the address.
#[tokio::test]
async fn an_email_channel_sends_only_to_members_and_verified_domains() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.member("acme", Role::Viewer, "viewer@partner.test")
        .await;
    let refused = create(
        &app,
        &owner,
        json!({"kind": "email", "name": "ops", "config": {"to": ["owner@acme.test", "victim@elsewhere.test"]}}),
    )
    .await
    .assert_problem(400, "invalid-request");
    assert!(
        refused["detail"]
            .as_str()
            .is_some_and(|d| d.contains("victim@elsewhere.test")),
        "{refused}"
    );
    let listed = call(
        &app,
        &owner,
        Method::GET,
        "/v1/orgs/acme/notification-channels",
        None,
    )
    .await
    .json();
    assert_eq!(listed, json!([]), "nothing stored");
    // Before its domain is verified, acme.test is only as good as its members.
    create(
        &app,
        &owner,
        json!({"kind": "email", "name": "ops", "config": {"to": ["oncall@acme.test"]}}),
    )
    .await
    .assert_problem(400, "invalid-request");
    app.verified_domain("acme", "acme.test").await;
    let mail = channel(
        &app,
        &owner,
        json!({"kind": "email", "name": "ops", "config": {"to": ["oncall@acme.test", "viewer@partner.test", "owner@acme.test"]}}),
    )
    .await;
    // A patch is held to the same rule.
    let patched = call(
        &app,
        &owner,
        Method::PATCH,
        &format!("/v1/orgs/acme/notification-channels/{}", id(&mail)),
        Some(json!({"config": {"to": ["oncall@acme.test", "spam-target@elsewhere.test"]}})),
    )
    .await
    .assert_problem(400, "invalid-request");
    assert!(
        patched["detail"]
            .as_str()
            .is_some_and(|d| d.contains("spam-target@elsewhere.test")),
        "{patched}"
    );
    app.stop().await;
}

/// The test button sends the service's mail to the channel on demand: at most 10 an hour per
/// channel, then 429 with `Retry-After`.
#[tokio::test]
async fn a_channel_is_tested_at_most_ten_times_an_hour() {
    let app = TestApp::builder().without_worker().start().await;
    app.organization("acme").await;
    let owner = app.member("acme", Role::Owner, "owner@acme.test").await;
    let mail = channel(
        &app,
        &owner,
        json!({"kind": "email", "name": "ops", "config": {"to": ["owner@acme.test"]}}),
    )
    .await;
    let path = format!("/v1/orgs/acme/notification-channels/{}/test", id(&mail));
    for _ in 0..10 {
        let queued = call(&app, &owner, Method::POST, &path, None).await;
        assert_eq!(queued.status.as_u16(), 202, "{}", queued.body);
    }
    let limited = call(&app, &owner, Method::POST, &path, None).await;
    limited.assert_problem(429, "rate-limited");
    let wait: i64 = limited
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!(wait > 0 && wait <= 3600, "{wait}");
    app.clock.advance(chrono::Duration::seconds(wait));
    let queued = call(&app, &owner, Method::POST, &path, None).await;
    assert_eq!(queued.status.as_u16(), 202, "{}", queued.body);
    app.stop().await;
}
