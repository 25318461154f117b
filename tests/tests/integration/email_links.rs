//! Emailed links carry live credentials (sign-in, sign-up, invitation tokens): they must never
//! sit in the job queue, where finished rows are kept for days, and asking for a sign-in link
//! must cost the api the same work whether or not the address has an account.

use std::time::Duration;

use domain::roles::Role;
use entities::email_tokens;
use reqwest::Method;
use sea_orm::{EntityTrait, PaginatorTrait};
use serde_json::json;
use tests::{As, TestApp, identity::token_in};

/// Every job payload the queue holds, whatever its state, as text.
async fn job_payloads(app: &TestApp) -> Vec<String> {
    app.job_rows(None)
        .await
        .into_iter()
        .map(|job| job.payload)
        .collect()
}

#[tokio::test]
async fn sign_in_sign_up_and_invitation_tokens_never_sit_in_job_payloads() {
    let app = TestApp::new().await;
    let owner = app.sign_up("ada@acme.test", "acme").await;
    let sign_up_token = app.emailed_token("ada@acme.test").await;

    let asked = app
        .post_json("/v1/auth/magic-link", json!({"email": "ada@acme.test"}))
        .await;
    assert_eq!(asked.status.as_u16(), 202);
    app.smtp.wait_for(2, Duration::from_secs(30)).await;
    let sign_in_token = app.emailed_token("ada@acme.test").await;

    let invited = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/invitations",
            Some(json!({"email": "bob@acme.test", "role": "operator"})),
        )
        .await;
    assert_eq!(invited.status.as_u16(), 201, "{}", invited.body);
    let invitation_token = app.emailed_token("bob@acme.test").await;

    // Every email went out through the queue, and the jobs are still there (finished)…
    let payloads = job_payloads(&app).await;
    assert!(
        payloads.len() >= 3,
        "the emails were queued jobs: {payloads:?}"
    );
    // …but none of them holds a token that opens anything.
    for token in [&sign_up_token, &sign_in_token, &invitation_token] {
        assert_eq!(token.len(), 43, "a whole token was emailed: {token}");
        assert!(
            payloads
                .iter()
                .all(|payload| !payload.contains(token.as_str())),
            "a live token sits in a job payload"
        );
    }

    // The emailed tokens work.
    let verified = app
        .post_json(
            "/v1/auth/magic-link/verify",
            json!({"token": sign_in_token}),
        )
        .await;
    assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);
    let accepted = app
        .post_json("/v1/invitations/accept", json!({"token": invitation_token}))
        .await;
    assert_eq!(accepted.status.as_u16(), 200, "{}", accepted.body);
    app.stop().await;
}

#[tokio::test]
async fn magic_link_does_the_same_work_for_unknown_and_known_addresses() {
    // Without a worker, what the api itself does stays visible: the queued jobs and the rows.
    let app = TestApp::builder().without_worker().start().await;
    app.organization("acme").await;
    let _owner = app.member("acme", Role::Owner, "ada@acme.test").await;
    let tokens_before = email_tokens::Entity::find()
        .count(&app.state.db.orm)
        .await
        .expect("count");

    let mut queued = Vec::new();
    for address in ["ada@acme.test", "nobody@acme.test"] {
        let before = app.job_rows(None).await.len();
        let asked = app
            .post_json("/v1/auth/magic-link", json!({"email": address}))
            .await;
        assert_eq!(asked.status.as_u16(), 202);
        let after = app.job_rows(None).await;
        queued.push((after.len() - before, after.last().map(|j| j.queue.clone())));
    }
    assert_eq!(
        queued[0], queued[1],
        "a known and an unknown address queue the same job"
    );
    assert_eq!(queued[0].0, 1, "one job each");
    // The api minted nothing itself: the worker makes the token when it sends the email.
    assert_eq!(
        email_tokens::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        tokens_before
    );

    // Once the worker runs, the known address gets its link and the unknown one nothing.
    app.run_pending_jobs().await;
    let sent = app.smtp.messages().await;
    assert_eq!(sent.len(), 1, "one email, to the account");
    assert!(
        sent[0]
            .header("To")
            .is_some_and(|to| to.contains("ada@acme.test"))
    );
    assert_eq!(token_in(&sent[0].text()).len(), 43);
    app.stop().await;
}
