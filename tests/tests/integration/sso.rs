//! Single sign-on (decisions §15) against a real OpenID provider on loopback TLS and a real DNS
//! server on a loopback UDP port: saving the connection, domain claims, sign-in, enforcement,
//! and the bad input of issue 13.

use std::time::Duration;

use domain::roles::Role;
use entities::{audit_events, memberships, organizations, sso_connections, sso_logins};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    As, Session, TestApp, TestResponse,
    dns::TestDns,
    oidc::{self, Bend, TestProvider, User},
};

/// An app that looks domain claims up at a test DNS server, a provider, and the owner of
/// `acme` (owner@acme.test).
struct Sso {
    app: TestApp,
    dns: TestDns,
    provider: TestProvider,
    owner: Session,
}

impl Sso {
    async fn start() -> Sso {
        Self::with(TestApp::builder()).await
    }

    async fn with(builder: tests::TestAppBuilder) -> Sso {
        let dns = TestDns::start().await;
        let app = builder.dns_resolver(&dns.resolver()).start().await;
        let provider = TestProvider::start(app.clock.clone()).await;
        let owner = app.sign_up("owner@acme.test", "acme").await;
        Sso {
            app,
            dns,
            provider,
            owner,
        }
    }

    /// A connection to the test provider: ops → operator, it-admins → admin.
    fn connection(&self) -> Value {
        json!({
            "issuer": self.provider.issuer(),
            "client_id": oidc::CLIENT_ID,
            "client_secret": oidc::CLIENT_SECRET,
            "enabled": true,
            "role_mappings": [
                {"group": "ops", "role": "operator"},
                {"group": "it-admins", "role": "admin"},
            ],
        })
    }

    async fn put_sso(&self, who: As<'_>, body: Value) -> TestResponse {
        self.app
            .call(who, Method::PUT, "/v1/orgs/acme/sso", Some(body))
            .await
    }

    async fn save(&self, body: Value) -> Value {
        let saved = self.put_sso(As::Session(&self.owner), body).await;
        assert_eq!(saved.status.as_u16(), 200, "{}", saved.body);
        saved.json()
    }

    async fn claim(&self, domain: &str) -> TestResponse {
        self.app
            .call(
                As::Session(&self.owner),
                Method::POST,
                "/v1/orgs/acme/sso/domains",
                Some(json!({"domain": domain})),
            )
            .await
    }

    async fn verify(&self, domain: &str) -> TestResponse {
        self.app
            .call(
                As::Session(&self.owner),
                Method::POST,
                &format!("/v1/orgs/acme/sso/domains/{domain}/verify"),
                None,
            )
            .await
    }

    /// Claims `domain`, publishes its TXT record at the test DNS server and verifies it.
    async fn verified(&self, domain: &str) {
        let claim = self.claim(domain).await;
        assert_eq!(claim.status.as_u16(), 201, "{}", claim.body);
        let claim = claim.json();
        self.dns.publish_txt(
            claim["txt_name"].as_str().expect("txt_name"),
            claim["txt_value"].as_str().expect("txt_value"),
        );
        let verified = self.verify(domain).await;
        assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);
        assert_eq!(verified.json()["verified"], true);
    }

    /// A saved, enabled connection and acme.test verified.
    async fn ready() -> Sso {
        let sso = Self::start().await;
        sso.save(sso.connection()).await;
        sso.verified("acme.test").await;
        sso
    }

    async fn role_of(&self, email: &str) -> Option<String> {
        let db = &self.app.state.db.orm;
        let account = entities::accounts::Entity::find()
            .filter(entities::accounts::Column::Email.eq(email))
            .one(db)
            .await
            .expect("query")?;
        memberships::Entity::find()
            .filter(memberships::Column::AccountId.eq(account.id))
            .one(db)
            .await
            .expect("query")
            .map(|m| m.role)
    }

    /// Requests a magic link for `email` and verifies it.
    async fn magic_link_verify(&self, email: &str) -> TestResponse {
        let before = self.app.smtp.messages().await.len();
        self.app
            .post_json("/v1/auth/magic-link", json!({"email": email}))
            .await;
        self.app
            .smtp
            .wait_for(before + 1, Duration::from_secs(30))
            .await;
        let token = self.app.emailed_token(email).await;
        self.app
            .post_json("/v1/auth/magic-link/verify", json!({"token": token}))
            .await
    }
}

async fn me(app: &TestApp, cookie: &str) -> TestResponse {
    app.request(
        Method::GET,
        "/v1/me",
        None,
        &[("cookie", &format!("service_session={cookie}"))],
    )
    .await
}

// --- The connection ---------------------------------------------------------------------------

#[tokio::test]
async fn a_saved_connection_keeps_its_secret_sealed_and_answers_the_redirect_uri() {
    let sso = Sso::start().await;
    let empty = sso
        .app
        .call(
            As::Session(&sso.owner),
            Method::GET,
            "/v1/orgs/acme/sso",
            None,
        )
        .await;
    assert_eq!(empty.status.as_u16(), 200, "{}", empty.body);
    let empty = empty.json();
    assert!(
        empty.get("connection").is_none(),
        "absent until saved: {empty}"
    );
    assert_eq!(empty["domains"], json!([]));
    assert_eq!(
        empty["redirect_uri"],
        "http://fleet.test/v1/auth/sso/callback"
    );

    let saved = sso.save(sso.connection()).await;
    let connection = &saved["connection"];
    assert_eq!(connection["issuer"], sso.provider.issuer());
    assert_eq!(connection["client_id"], oidc::CLIENT_ID);
    assert_eq!(connection["enabled"], true);
    assert_eq!(connection["enforced"], false);
    assert_eq!(connection["groups_claim"], "groups");
    assert_eq!(connection["default_role"], Value::Null);
    assert_eq!(
        connection["role_mappings"][1],
        json!({"group": "it-admins", "role": "admin"})
    );
    assert!(
        !saved.to_string().contains(oidc::CLIENT_SECRET),
        "never returned"
    );
    assert_eq!(
        saved["redirect_uri"],
        "http://fleet.test/v1/auth/sso/callback"
    );

    let row = sso_connections::Entity::find()
        .one(&sso.app.state.db.orm)
        .await
        .expect("query")
        .expect("saved");
    assert!(row.client_secret.starts_with("v1:"), "sealed");
    assert!(!row.client_secret.contains(oidc::CLIENT_SECRET));
    assert!(
        !format!("{row:?}").contains(&row.client_secret),
        "not in Debug"
    );
    let sealed = row.client_secret.clone();

    // A later save without the secret keeps it; the answer to GET is the same connection.
    let mut again = sso.connection();
    again
        .as_object_mut()
        .expect("object")
        .remove("client_secret");
    again["default_role"] = json!("viewer");
    let saved = sso.save(again).await;
    assert_eq!(saved["connection"]["default_role"], "viewer");
    let row = sso_connections::Entity::find()
        .one(&sso.app.state.db.orm)
        .await
        .expect("query")
        .expect("saved");
    assert_eq!(row.client_secret, sealed, "the stored secret is kept");
    let read = sso
        .app
        .call(
            As::Session(&sso.owner),
            Method::GET,
            "/v1/orgs/acme/sso",
            None,
        )
        .await
        .json();
    assert_eq!(read["connection"], saved["connection"]);

    let audited = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("sso.connection_saved"))
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(audited, 2, "each save is audited");
    // The discovery document was read over https from the provider.
    assert!(
        sso.provider
            .receiver
            .received()
            .iter()
            .any(|r| r.path == "/.well-known/openid-configuration")
    );
    sso.app.stop().await;
}

/// First saves of the connection at once (two administrators, say): on Postgres each used to
/// find none stored and insert, and all but one failed on the key with a 500. Saves of one
/// organization take turns, so each is answered 200 and a later one updates what an earlier
/// one stored.
#[tokio::test]
async fn first_saves_at_once_each_succeed_and_store_one_connection() {
    let sso = Sso::start().await;
    let saves = (0..6).map(|i| {
        let mut body = sso.connection();
        body["client_id"] = json!(format!("client-{i}"));
        sso.put_sso(As::Session(&sso.owner), body)
    });
    let answers = futures::future::join_all(saves).await;
    for answer in &answers {
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    }
    let rows = sso_connections::Entity::find()
        .all(&sso.app.state.db.orm)
        .await
        .expect("query");
    assert_eq!(rows.len(), 1, "one connection per organization");
    let client_ids: Vec<String> = answers
        .iter()
        .map(|a| a.json()["connection"]["client_id"].to_string())
        .collect();
    assert!(
        client_ids.contains(&json!(rows[0].client_id).to_string()),
        "the stored {} is one of the saves' {client_ids:?}",
        rows[0].client_id
    );
    let audited = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("sso.connection_saved"))
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(audited, 6, "each save is audited");
    sso.app.stop().await;
}

#[tokio::test]
async fn put_sso_answers_each_documented_error_and_changes_nothing() {
    let sso = Sso::start().await;
    let bad = |patch: Value| {
        let mut body = sso.connection();
        for (k, v) in patch.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    // An http issuer.
    let http = format!("http://localhost:{}", sso.provider.receiver.addr.port());
    sso.put_sso(As::Session(&sso.owner), bad(json!({"issuer": http})))
        .await
        .assert_problem(400, "invalid-request");
    // A discovery document that cannot be read.
    let missing = format!("{}/nothing-here", sso.provider.issuer());
    let problem = sso
        .put_sso(As::Session(&sso.owner), bad(json!({"issuer": missing})))
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("discovery")),
        "{problem}"
    );
    // A discovery document naming another issuer.
    sso.provider.discovery_names("https://login.example.com");
    let problem = sso
        .put_sso(As::Session(&sso.owner), sso.connection())
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("another issuer")),
        "{problem}"
    );
    sso.provider.discovery_names(&sso.provider.issuer());
    // No client secret on a first save.
    let mut no_secret = sso.connection();
    no_secret
        .as_object_mut()
        .expect("object")
        .remove("client_secret");
    sso.put_sso(As::Session(&sso.owner), no_secret)
        .await
        .assert_problem(400, "invalid-request");
    // A mapping to owner, or to an unknown role; a default role of owner.
    let problem = sso
        .put_sso(
            As::Session(&sso.owner),
            bad(json!({"role_mappings": [{"group": "root", "role": "owner"}]})),
        )
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("owner"))
    );
    sso.put_sso(
        As::Session(&sso.owner),
        bad(json!({"role_mappings": [{"group": "x", "role": "superuser"}]})),
    )
    .await
    .assert_problem(400, "invalid-request");
    sso.put_sso(
        As::Session(&sso.owner),
        bad(json!({"default_role": "owner"})),
    )
    .await
    .assert_problem(400, "invalid-request");
    // Enforced without enabled, and without a verified domain.
    sso.put_sso(
        As::Session(&sso.owner),
        bad(json!({"enabled": false, "enforced": true})),
    )
    .await
    .assert_problem(400, "invalid-request");
    let problem = sso
        .put_sso(As::Session(&sso.owner), bad(json!({"enforced": true})))
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("verified domain"))
    );
    // Not JSON of the shape.
    sso.put_sso(As::Session(&sso.owner), json!({"issuer": 5}))
        .await
        .assert_problem(400, "invalid-request");

    // No session; no CSRF; a role without the right; an API token; another organization.
    sso.put_sso(As::Nobody, sso.connection())
        .await
        .assert_problem(401, "unauthenticated");
    sso.put_sso(As::SessionWithoutCsrf(&sso.owner), sso.connection())
        .await
        .assert_problem(403, "forbidden");
    let operator = sso.app.member("acme", Role::Operator, "op@acme.test").await;
    sso.put_sso(As::Session(&operator), sso.connection())
        .await
        .assert_problem(403, "forbidden");
    let token = sso.app.api_token(&sso.owner, "acme", Role::Admin).await;
    sso.put_sso(As::Bearer(&token), sso.connection())
        .await
        .assert_problem(403, "forbidden");
    let stranger = sso.app.sign_up("owner@globex.test", "globex").await;
    sso.put_sso(As::Session(&stranger), sso.connection())
        .await
        .assert_problem(404, "not-found");

    // Nothing of all that was saved.
    let saved = sso_connections::Entity::find()
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(saved, 0);
    let audited = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("sso.connection_saved"))
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(audited, 0);
    sso.app.stop().await;
}

#[tokio::test]
async fn single_sign_on_needs_the_enterprise_plan_and_a_secrets_key() {
    let sso = Sso::with(TestApp::builder().default_plan("business")).await;
    let problem = sso
        .put_sso(As::Session(&sso.owner), sso.connection())
        .await
        .assert_problem(403, "plan-required");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("enterprise")),
        "{problem}"
    );
    sso.claim("acme.test")
        .await
        .assert_problem(403, "plan-required");
    sso.app.stop().await;

    let keyless = Sso::with(TestApp::builder().without_secrets_key()).await;
    keyless
        .put_sso(As::Session(&keyless.owner), keyless.connection())
        .await
        .assert_problem(503, "not-configured");
    keyless.app.stop().await;
}

#[tokio::test]
async fn an_issuer_on_a_private_address_is_refused_when_the_guard_is_on() {
    let sso = Sso::with(TestApp::builder().outbound_guarded()).await;
    let problem = sso
        .put_sso(As::Session(&sso.owner), sso.connection())
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("non-public")),
        "{problem}"
    );
    assert!(sso.provider.receiver.received().is_empty(), "never called");
    sso.app.stop().await;
}

// --- Domain claims ----------------------------------------------------------------------------

#[tokio::test]
async fn a_domain_claim_is_verified_by_its_txt_record_at_the_resolver() {
    let sso = Sso::start().await;
    let claim = sso.claim("Acme.Test.").await;
    assert_eq!(claim.status.as_u16(), 201, "{}", claim.body);
    let claim = claim.json();
    assert_eq!(claim["domain"], "acme.test");
    assert_eq!(claim["txt_name"], "_service-challenge.acme.test");
    let value = claim["txt_value"].as_str().expect("txt_value");
    let random = value
        .strip_prefix("service-domain-verification=")
        .expect("prefix");
    assert_eq!(random.len(), 32);
    assert_eq!(claim["verified"], false);
    assert_eq!(claim["verified_at"], Value::Null);

    // Not published yet; then a wrong value: 409 invalid-state, still unverified.
    sso.verify("acme.test")
        .await
        .assert_problem(409, "invalid-state");
    sso.dns.publish_txt(
        "_service-challenge.acme.test",
        "service-domain-verification=wrong",
    );
    sso.verify("acme.test")
        .await
        .assert_problem(409, "invalid-state");
    assert!(
        sso.dns
            .queries()
            .iter()
            .any(|q| q == "_service-challenge.acme.test"),
        "looked up at the test resolver: {:?}",
        sso.dns.queries()
    );
    // Published: verified.
    sso.dns.publish_txt("_service-challenge.acme.test", value);
    let verified = sso.verify("acme.test").await;
    assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);
    let verified = verified.json();
    assert_eq!(verified["verified"], true);
    assert_eq!(
        verified["verified_at"]
            .as_str()
            .map(|s| s.starts_with("2026-11-02T09:00:00")),
        Some(true)
    );
    // Listed inside the SSO answer.
    let settings = sso
        .app
        .call(
            As::Session(&sso.owner),
            Method::GET,
            "/v1/orgs/acme/sso",
            None,
        )
        .await
        .json();
    assert_eq!(settings["domains"][0]["domain"], "acme.test");
    assert_eq!(settings["domains"][0]["verified"], true);

    // Claimed twice; not a domain; a domain this organization never claimed.
    sso.claim("acme.test").await.assert_problem(409, "conflict");
    sso.claim("not a domain")
        .await
        .assert_problem(400, "invalid-request");
    sso.claim("10.0.0.1")
        .await
        .assert_problem(400, "invalid-request");
    sso.verify("other.test")
        .await
        .assert_problem(404, "not-found");

    // Another organization: may not claim (or verify) a domain verified here.
    let globex = sso.app.sign_up("owner@globex.test", "globex").await;
    let theirs = sso
        .app
        .call(
            As::Session(&globex),
            Method::POST,
            "/v1/orgs/globex/sso/domains",
            Some(json!({"domain": "acme.test"})),
        )
        .await;
    theirs.assert_problem(409, "conflict");
    // …and cannot release it either.
    sso.app
        .call(
            As::Session(&globex),
            Method::DELETE,
            "/v1/orgs/globex/sso/domains/acme.test",
            None,
        )
        .await
        .assert_problem(404, "not-found");
    sso.app
        .call(
            As::Session(&globex),
            Method::DELETE,
            "/v1/orgs/acme/sso/domains/acme.test",
            None,
        )
        .await
        .assert_problem(404, "not-found");
    sso.app.stop().await;
}

#[tokio::test]
async fn a_domain_verified_first_elsewhere_is_a_conflict_at_verification() {
    let sso = Sso::start().await;
    let globex = sso.app.sign_up("owner@globex.test", "globex").await;
    // Both claim shared.test; globex verifies first.
    let ours = sso.claim("shared.test").await.json();
    let theirs = sso
        .app
        .call(
            As::Session(&globex),
            Method::POST,
            "/v1/orgs/globex/sso/domains",
            Some(json!({"domain": "shared.test"})),
        )
        .await;
    assert_eq!(theirs.status.as_u16(), 201, "{}", theirs.body);
    let theirs = theirs.json();
    sso.dns.publish_txt(
        "_service-challenge.shared.test",
        theirs["txt_value"].as_str().expect("value"),
    );
    sso.dns.publish_txt(
        "_service-challenge.shared.test",
        ours["txt_value"].as_str().expect("value"),
    );
    let verified = sso
        .app
        .call(
            As::Session(&globex),
            Method::POST,
            "/v1/orgs/globex/sso/domains/shared.test/verify",
            None,
        )
        .await;
    assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);
    sso.verify("shared.test")
        .await
        .assert_problem(409, "conflict");
    sso.app.stop().await;
}

#[tokio::test]
async fn releasing_a_domain_stops_its_sign_ins_and_ends_enforcement() {
    let sso = Sso::ready().await;
    let mut enforce = sso.connection();
    enforce["enforced"] = json!(true);
    let saved = sso.save(enforce).await;
    assert_eq!(saved["connection"]["enforced"], true);

    let released = sso
        .app
        .call(
            As::Session(&sso.owner),
            Method::DELETE,
            "/v1/orgs/acme/sso/domains/acme.test",
            None,
        )
        .await;
    assert_eq!(released.status.as_u16(), 204, "{}", released.body);
    sso.app
        .call(
            As::Session(&sso.owner),
            Method::DELETE,
            "/v1/orgs/acme/sso/domains/acme.test",
            None,
        )
        .await
        .assert_problem(404, "not-found");
    let settings = sso
        .app
        .call(
            As::Session(&sso.owner),
            Method::GET,
            "/v1/orgs/acme/sso",
            None,
        )
        .await
        .json();
    assert_eq!(settings["domains"], json!([]));
    assert_eq!(
        settings["connection"]["enforced"], false,
        "no verified domain left"
    );
    // Addresses at the domain no longer start a sign-in; magic links work again.
    sso.provider
        .sign_in_as(User::new("ann@acme.test", &["ops"]));
    let attempt = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    attempt.start.assert_problem(404, "not-found");
    let verified = sso.magic_link_verify("owner@acme.test").await;
    assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);
    sso.app.stop().await;
}

// --- Sign-in ----------------------------------------------------------------------------------

#[tokio::test]
async fn signing_in_creates_the_member_with_the_highest_mapped_role_and_a_session() {
    let sso = Sso::ready().await;
    sso.provider
        .sign_in_as(User::new("Ann@acme.test", &["staff", "ops", "it-admins"]));
    let attempt = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    assert_eq!(attempt.start.status.as_u16(), 303, "{}", attempt.start.body);
    let to_provider =
        url::Url::parse(attempt.start.header("location").expect("location")).expect("a URL");
    assert!(
        to_provider
            .as_str()
            .starts_with(&format!("{}/authorize", sso.provider.issuer()))
    );
    let params: std::collections::HashMap<String, String> =
        to_provider.query_pairs().into_owned().collect();
    assert_eq!(params["response_type"], "code");
    assert_eq!(params["client_id"], oidc::CLIENT_ID);
    assert_eq!(params["code_challenge_method"], "S256");
    assert_eq!(params["login_hint"], "ann@acme.test");
    assert_eq!(
        params["redirect_uri"],
        "http://fleet.test/v1/auth/sso/callback"
    );
    assert!(params["scope"].split(' ').any(|s| s == "openid"));
    assert!(params.contains_key("nonce") && params.contains_key("state"));

    let callback = attempt.callback();
    assert_eq!(callback.status.as_u16(), 303, "{}", callback.body);
    assert_eq!(callback.header("location"), Some("http://fleet.test/"));
    let cookie_header = callback.header("set-cookie").expect("cookie");
    assert!(cookie_header.contains("HttpOnly") && cookie_header.contains("SameSite=Lax"));
    let cookie = attempt.session_cookie().expect("session cookie");
    let me = me(&sso.app, &cookie).await;
    assert_eq!(me.status.as_u16(), 200, "{}", me.body);
    assert_eq!(me.json()["email"], "ann@acme.test");
    assert_eq!(sso.role_of("ann@acme.test").await.as_deref(), Some("admin"));

    // Signing in again with fewer groups: the provider decides the role.
    sso.provider
        .sign_in_as(User::new("ann@acme.test", &["ops"]));
    let again = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    assert_eq!(
        again.callback().status.as_u16(),
        303,
        "{}",
        again.callback().body
    );
    assert_eq!(
        sso.role_of("ann@acme.test").await.as_deref(),
        Some("operator")
    );
    // The owner stays owner whatever the groups say.
    sso.provider
        .sign_in_as(User::new("owner@acme.test", &["ops"]));
    let owner = oidc::browser_sign_in(&sso.app, "owner@acme.test").await;
    assert_eq!(
        owner.callback().status.as_u16(),
        303,
        "{}",
        owner.callback().body
    );
    assert_eq!(
        sso.role_of("owner@acme.test").await.as_deref(),
        Some("owner")
    );
    let audited = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("auth.sso_signed_in"))
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(audited, 3);
    sso.app.stop().await;
}

#[tokio::test]
async fn groups_missing_from_the_id_token_are_read_from_userinfo() {
    let sso = Sso::ready().await;
    sso.provider.bend(Bend {
        groups_only_in_userinfo: true,
        ..Bend::default()
    });
    sso.provider
        .sign_in_as(User::new("bob@acme.test", &["ops"]));
    let attempt = oidc::browser_sign_in(&sso.app, "bob@acme.test").await;
    assert_eq!(
        attempt.callback().status.as_u16(),
        303,
        "{}",
        attempt.callback().body
    );
    assert_eq!(
        sso.role_of("bob@acme.test").await.as_deref(),
        Some("operator")
    );
    assert!(
        sso.provider
            .receiver
            .received()
            .iter()
            .any(|r| r.path == "/userinfo")
    );
    sso.app.stop().await;
}

#[tokio::test]
async fn nobody_without_a_mapped_group_gets_in_unless_there_is_a_default_role() {
    let sso = Sso::ready().await;
    sso.provider
        .sign_in_as(User::new("cat@acme.test", &["sales"]));
    let attempt = oidc::browser_sign_in(&sso.app, "cat@acme.test").await;
    attempt.callback().assert_problem(403, "forbidden");
    assert_eq!(sso.role_of("cat@acme.test").await, None, "nothing created");
    let mut with_default = sso.connection();
    with_default["default_role"] = json!("viewer");
    sso.save(with_default).await;
    let attempt = oidc::browser_sign_in(&sso.app, "cat@acme.test").await;
    assert_eq!(
        attempt.callback().status.as_u16(),
        303,
        "{}",
        attempt.callback().body
    );
    assert_eq!(
        sso.role_of("cat@acme.test").await.as_deref(),
        Some("viewer")
    );
    sso.app.stop().await;
}

#[tokio::test]
async fn start_answers_not_found_without_an_enabled_connection_at_a_verified_domain() {
    let sso = Sso::start().await;
    sso.save(sso.connection()).await;
    // Claimed but not verified.
    sso.claim("acme.test").await;
    let attempt = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    attempt.start.assert_problem(404, "not-found");
    // A domain nobody claimed; an address that is not one.
    oidc::browser_sign_in(&sso.app, "ann@nowhere.test")
        .await
        .start
        .assert_problem(404, "not-found");
    oidc::browser_sign_in(&sso.app, "not-an-address")
        .await
        .start
        .assert_problem(400, "invalid-request");
    // Verified, but the connection is disabled.
    sso.verified("globex.test").await;
    let mut disabled = sso.connection();
    disabled["enabled"] = json!(false);
    sso.save(disabled).await;
    oidc::browser_sign_in(&sso.app, "ann@globex.test")
        .await
        .start
        .assert_problem(404, "not-found");
    sso.app.stop().await;
}

// --- Bad input and abuse ----------------------------------------------------------------------

/// Signs in as ann@acme.test with the provider bending its ID token; the callback's answer.
async fn bent(sso: &Sso, bend: Bend) -> TestResponse {
    sso.provider.bend(bend);
    sso.provider
        .sign_in_as(User::new("ann@acme.test", &["ops"]));
    let attempt = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    attempt.callback().clone()
}

async fn nobody_signed_in(sso: &Sso) {
    assert_eq!(
        sso.role_of("ann@acme.test").await,
        None,
        "no account or membership"
    );
    let sessions = entities::sessions::Entity::find()
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    // The owner's one session from signing up.
    assert_eq!(sessions, 1, "no session was started");
}

#[tokio::test]
async fn id_tokens_for_another_audience_expired_or_of_another_issuer_are_refused() {
    let sso = Sso::ready().await;
    let problem = bent(
        &sso,
        Bend {
            audience: Some("someone-else".into()),
            ..Bend::default()
        },
    )
    .await
    .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("aud")),
        "{problem}"
    );
    let problem = bent(
        &sso,
        Bend {
            expires_in: Some(-60),
            ..Bend::default()
        },
    )
    .await
    .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("expired")),
        "{problem}"
    );
    bent(
        &sso,
        Bend {
            issuer: Some("https://login.example.com".into()),
            ..Bend::default()
        },
    )
    .await
    .assert_problem(400, "invalid-request");
    bent(
        &sso,
        Bend {
            nonce: Some("not-the-nonce".into()),
            ..Bend::default()
        },
    )
    .await
    .assert_problem(400, "invalid-request");
    nobody_signed_in(&sso).await;
    sso.app.stop().await;
}

#[tokio::test]
async fn forged_and_unsigned_id_tokens_are_refused() {
    let sso = Sso::ready().await;
    // alg: none.
    bent(
        &sso,
        Bend {
            alg_none: true,
            ..Bend::default()
        },
    )
    .await
    .assert_problem(400, "invalid-request");
    // Signed by a key the provider never published, under the published key's id.
    sso.provider.sign_with_unpublished_key("key-1");
    let problem = bent(&sso, Bend::default())
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("signature")),
        "{problem}"
    );
    // Under a key id nobody knows: the key set is fetched again, and still refused.
    let fetches = sso.provider.jwks_fetches();
    sso.provider.sign_with_unpublished_key("forged-kid");
    bent(&sso, Bend::default())
        .await
        .assert_problem(400, "invalid-request");
    assert_eq!(
        sso.provider.jwks_fetches(),
        fetches + 1,
        "refetched once on an unknown kid"
    );
    nobody_signed_in(&sso).await;
    sso.app.stop().await;
}

#[tokio::test]
async fn a_rotated_key_is_fetched_when_a_token_names_it() {
    let sso = Sso::ready().await;
    sso.provider
        .sign_in_as(User::new("ann@acme.test", &["ops"]));
    let first = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    assert_eq!(
        first.callback().status.as_u16(),
        303,
        "{}",
        first.callback().body
    );
    let fetches = sso.provider.jwks_fetches();
    // The cached set is used while the key is known.
    let second = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    assert_eq!(second.callback().status.as_u16(), 303);
    assert_eq!(sso.provider.jwks_fetches(), fetches, "cached");
    sso.provider.rotate_key("key-2");
    let rotated = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    assert_eq!(
        rotated.callback().status.as_u16(),
        303,
        "{}",
        rotated.callback().body
    );
    assert_eq!(
        sso.provider.jwks_fetches(),
        fetches + 1,
        "fetched again for the new kid"
    );
    sso.app.stop().await;
}

#[tokio::test]
async fn a_state_is_used_once_and_for_ten_minutes() {
    let sso = Sso::ready().await;
    sso.provider
        .sign_in_as(User::new("ann@acme.test", &["ops"]));
    let attempt = oidc::browser_sign_in(&sso.app, "ann@acme.test").await;
    assert_eq!(attempt.callback().status.as_u16(), 303);
    // Replayed: the same callback again.
    let replay = oidc::browser()
        .get(attempt.callback_url.clone().expect("callback url"))
        .send()
        .await
        .expect("replay");
    let replay = TestResponse {
        status: replay.status(),
        headers: replay.headers().clone(),
        body: replay.text().await.expect("body"),
    };
    replay.assert_problem(400, "invalid-request");
    let left = sso_logins::Entity::find()
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(left, 0, "used sign-ins are gone");

    // A state older than ten minutes.
    let browser = oidc::browser();
    let start = browser
        .get(sso.app.url("/v1/auth/sso/start"))
        .query(&[("email", "ann@acme.test")])
        .send()
        .await
        .expect("start");
    let to_provider = start
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("location")
        .to_owned();
    let back = browser.get(&to_provider).send().await.expect("authorize");
    let back = back
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("location")
        .replacen(tests::BASE_URL, &sso.app.base, 1);
    sso.app.clock.advance(chrono::Duration::minutes(11));
    let late = sso.app.get(back.trim_start_matches(&sso.app.base)).await;
    late.assert_problem(400, "invalid-request");
    // No state at all; a made-up one.
    sso.app
        .get("/v1/auth/sso/callback?code=x")
        .await
        .assert_problem(400, "invalid-request");
    sso.app
        .get("/v1/auth/sso/callback?code=x&state=made-up")
        .await
        .assert_problem(400, "invalid-request");
    sso.app.stop().await;
}

#[tokio::test]
async fn an_unverified_address_or_one_outside_the_claimed_domains_is_refused() {
    let sso = Sso::ready().await;
    let mut unverified = User::new("ann@acme.test", &["ops"]);
    unverified.email_verified = false;
    sso.provider.sign_in_as(unverified);
    let problem = oidc::browser_sign_in(&sso.app, "ann@acme.test")
        .await
        .callback()
        .assert_problem(403, "forbidden");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not verified")),
        "{problem}"
    );
    // The provider asserts an address at a domain this organization has not verified (an
    // existing account elsewhere must not be taken over through it).
    let _victim = sso.app.sign_up("victim@globex.test", "globex").await;
    sso.provider
        .sign_in_as(User::new("victim@globex.test", &["it-admins"]));
    let problem = oidc::browser_sign_in(&sso.app, "ann@acme.test")
        .await
        .callback()
        .assert_problem(403, "forbidden");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("verified domain")),
        "{problem}"
    );
    let acme = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq("acme"))
        .one(&sso.app.state.db.orm)
        .await
        .expect("query")
        .expect("acme");
    let members = entities::scope::OrgScope::of(acme.id)
        .rows::<memberships::Entity>()
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(members, 1, "only the owner");
    sso.app.stop().await;
}

#[tokio::test]
async fn an_error_from_the_provider_is_a_plain_bad_request() {
    let sso = Sso::ready().await;
    sso.provider.refuse_sign_in();
    let problem = oidc::browser_sign_in(&sso.app, "ann@acme.test")
        .await
        .callback()
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("access_denied")),
        "{problem}"
    );
    sso.app.stop().await;
}

// --- Enforcement and the acceptance round trip -------------------------------------------------

#[tokio::test]
async fn enforcing_refuses_magic_links_for_the_verified_domain_only() {
    let sso = Sso::start().await;
    // A contractor at another domain is a member too.
    let _contractor = sso
        .app
        .member("acme", Role::Operator, "contractor@elsewhere.test")
        .await;
    sso.save(sso.connection()).await;
    sso.verified("acme.test").await;
    let mut enforce = sso.connection();
    enforce["enforced"] = json!(true);
    sso.save(enforce).await;

    sso.magic_link_verify("owner@acme.test")
        .await
        .assert_problem(403, "sso-required");
    // Signing up a new organization from the domain is refused too, and creates nothing.
    let before = sso.app.smtp.messages().await.len();
    sso.app
        .post_json(
            "/v1/auth/sign-up",
            json!({"email": "new@acme.test", "name": "New", "organization": {"name": "Side", "slug": "side"}}),
        )
        .await;
    sso.app
        .smtp
        .wait_for(before + 1, Duration::from_secs(30))
        .await;
    let token = sso.app.emailed_token("new@acme.test").await;
    sso.app
        .post_json("/v1/auth/sign-up/verify", json!({"token": token}))
        .await
        .assert_problem(403, "sso-required");
    let side = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq("side"))
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(side, 0);
    // The contractor is not at the domain: magic links still work.
    let contractor = sso.magic_link_verify("contractor@elsewhere.test").await;
    assert_eq!(contractor.status.as_u16(), 200, "{}", contractor.body);
    sso.app.stop().await;
}

/// The acceptance round trip of issue 13: save → claim → verify through the test DNS server →
/// start → the provider's login → callback → a session with the mapped role → enforce → magic
/// link verify answers `sso-required` for that address and not for others.
#[tokio::test]
async fn the_single_sign_on_round_trip() {
    let sso = Sso::start().await;
    let saved = sso.save(sso.connection()).await;
    assert_eq!(saved["connection"]["enabled"], true);
    let claim = sso.claim("acme.test").await;
    assert_eq!(claim.status.as_u16(), 201, "{}", claim.body);
    let claim = claim.json();
    sso.dns.publish_txt(
        claim["txt_name"].as_str().expect("name"),
        claim["txt_value"].as_str().expect("value"),
    );
    let verified = sso.verify("acme.test").await;
    assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);

    sso.provider
        .sign_in_as(User::new("dora@acme.test", &["ops"]));
    let attempt = oidc::browser_sign_in(&sso.app, "dora@acme.test").await;
    assert_eq!(attempt.start.status.as_u16(), 303, "{}", attempt.start.body);
    assert_eq!(
        attempt.callback().status.as_u16(),
        303,
        "{}",
        attempt.callback().body
    );
    let cookie = attempt.session_cookie().expect("session");
    let me = me(&sso.app, &cookie).await;
    assert_eq!(me.status.as_u16(), 200, "{}", me.body);
    let me = me.json();
    let acme = me["organizations"]
        .as_array()
        .expect("organizations")
        .iter()
        .find(|o| o["slug"] == "acme")
        .cloned()
        .expect("a member of acme");
    assert_eq!(acme["role"], "operator", "{me}");
    // The session works like a magic-link one: an operator may read the fleet.
    let hosts = sso
        .app
        .request(
            Method::GET,
            "/v1/orgs/acme/hosts",
            None,
            &[("cookie", &format!("service_session={cookie}"))],
        )
        .await;
    assert_eq!(hosts.status.as_u16(), 200, "{}", hosts.body);

    let mut enforce = sso.connection();
    enforce["enforced"] = json!(true);
    let enforced = sso.save(enforce).await;
    assert_eq!(enforced["connection"]["enforced"], true);
    sso.magic_link_verify("dora@acme.test")
        .await
        .assert_problem(403, "sso-required");
    let outsider = sso.app.sign_up("eve@globex.test", "globex").await;
    let other = sso.magic_link_verify(&outsider.email).await;
    assert_eq!(
        other.status.as_u16(),
        200,
        "not at the domain: {}",
        other.body
    );
    sso.app.stop().await;
}

// --- Trust boundaries (decisions §18) ---------------------------------------------------------

/// Whoever configures the identity provider can sign in as anyone at the verified domains,
/// owners included: an admin must not be able to, nor reach the claims that point it at them.
#[tokio::test]
async fn only_an_owner_may_configure_single_sign_on_or_its_domains() {
    let sso = Sso::start().await;
    let admin = sso.app.member("acme", Role::Admin, "admin@acme.test").await;
    sso.put_sso(As::Session(&admin), sso.connection())
        .await
        .assert_problem(403, "forbidden");
    let read = sso
        .app
        .call(As::Session(&admin), Method::GET, "/v1/orgs/acme/sso", None)
        .await;
    read.assert_problem(403, "forbidden");
    sso.app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/sso/domains",
            Some(json!({"domain": "acme.test"})),
        )
        .await
        .assert_problem(403, "forbidden");
    // The owner's claim: the admin can neither verify nor release it.
    assert_eq!(sso.claim("acme.test").await.status.as_u16(), 201);
    sso.app
        .call(
            As::Session(&admin),
            Method::POST,
            "/v1/orgs/acme/sso/domains/acme.test/verify",
            None,
        )
        .await
        .assert_problem(403, "forbidden");
    sso.app
        .call(
            As::Session(&admin),
            Method::DELETE,
            "/v1/orgs/acme/sso/domains/acme.test",
            None,
        )
        .await
        .assert_problem(403, "forbidden");
    let stored = sso_connections::Entity::find()
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(stored, 0, "the admin's save stored nothing");
    // The owner may.
    sso.save(sso.connection()).await;
    sso.app.stop().await;
}

/// A stored client secret is only ever sent to the issuer it was given for: a save that points
/// the connection at another issuer or client must bring the secret again.
#[tokio::test]
async fn changing_the_issuer_or_client_id_needs_the_client_secret_again() {
    let sso = Sso::start().await;
    sso.save(sso.connection()).await;
    let other = TestProvider::start(sso.app.clock.clone()).await;
    let without_secret = |patch: Value| {
        let mut body = sso.connection();
        body.as_object_mut()
            .expect("object")
            .remove("client_secret");
        for (k, v) in patch.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    let problem = sso
        .put_sso(
            As::Session(&sso.owner),
            without_secret(json!({"issuer": other.issuer()})),
        )
        .await
        .assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("client_secret")),
        "{problem}"
    );
    sso.put_sso(
        As::Session(&sso.owner),
        without_secret(json!({"client_id": "another-client"})),
    )
    .await
    .assert_problem(400, "invalid-request");
    let row = sso_connections::Entity::find()
        .one(&sso.app.state.db.orm)
        .await
        .expect("query")
        .expect("saved");
    assert_eq!(row.issuer, sso.provider.issuer(), "nothing stored");
    assert_eq!(row.client_id, oidc::CLIENT_ID, "nothing stored");
    assert_eq!(other.token_requests(), 0);
    let audited = audit_events::Entity::find()
        .filter(audit_events::Column::Action.eq("sso.connection_saved"))
        .count(&sso.app.state.db.orm)
        .await
        .expect("count");
    assert_eq!(audited, 1, "only the first save");

    // The same issuer and client without the secret keep it; another issuer with one is saved.
    sso.save(without_secret(json!({"default_role": "viewer"})))
        .await;
    let mut moved = sso.connection();
    moved["issuer"] = json!(other.issuer());
    moved["client_secret"] = json!("the-other-providers-secret");
    let saved = sso.save(moved).await;
    assert_eq!(saved["connection"]["issuer"], other.issuer());
    sso.app.stop().await;
}

/// Login CSRF: a callback carrying somebody else's `state` and code (an attacker's own sign-in,
/// its last step sent to a victim) is refused unless the browser holds the cookie the start set.
#[tokio::test]
async fn a_callback_in_a_browser_that_did_not_start_the_sign_in_is_refused() {
    let sso = Sso::ready().await;
    sso.provider
        .sign_in_as(User::new("mallory@acme.test", &["ops"]));
    // The attacker starts, signs in at the provider, and stops short of the callback.
    let attacker = oidc::browser();
    let start = attacker
        .get(sso.app.url("/v1/auth/sso/start"))
        .query(&[("email", "mallory@acme.test")])
        .send()
        .await
        .expect("start");
    let start = TestResponse {
        status: start.status(),
        headers: start.headers().clone(),
        body: start.text().await.expect("body"),
    };
    assert_eq!(start.status.as_u16(), 303, "{}", start.body);
    let cookie = oidc::sso_cookie(&start).expect("start sets service_sso");
    let set = start
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("service_sso="))
        .expect("cookie")
        .to_owned();
    for attribute in [
        "HttpOnly",
        "SameSite=Lax",
        "Path=/v1/auth/sso",
        "Max-Age=600",
    ] {
        assert!(set.contains(attribute), "{attribute} in {set}");
    }
    let to_provider = start.header("location").expect("location").to_owned();
    let back = attacker.get(&to_provider).send().await.expect("authorize");
    let callback = back
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("back to the service")
        .replacen(tests::BASE_URL, &sso.app.base, 1);

    // The victim's browser follows the link: no cookie, or another browser's.
    let victim = oidc::browser();
    for sent in [None, Some("service_sso=someone-elses-value")] {
        let mut request = victim.get(&callback);
        if let Some(cookie) = sent {
            request = request.header("cookie", cookie);
        }
        let answer = request.send().await.expect("callback");
        let answer = TestResponse {
            status: answer.status(),
            headers: answer.headers().clone(),
            body: answer.text().await.expect("body"),
        };
        answer.assert_problem(400, "invalid-request");
        assert!(answer.header("set-cookie").is_none(), "no session");
    }
    assert_eq!(
        sso.role_of("mallory@acme.test").await,
        None,
        "nobody joined"
    );
    // The browser that started it finishes it.
    let answer = attacker
        .get(&callback)
        .header("cookie", cookie)
        .send()
        .await
        .expect("callback");
    assert_eq!(answer.status().as_u16(), 303);
    sso.app.stop().await;
}

const API: &str = env!("CARGO_BIN_EXE_fleet-api");

/// Proxy variables of the environment never carry the service's outbound traffic past its
/// guard (decisions §18); only `OUTBOUND_PROXY` names a proxy. The identity provider's discovery
/// document is read by an api process started with `HTTPS_PROXY` set, then with
/// `OUTBOUND_PROXY`.
#[tokio::test]
async fn only_outbound_proxy_names_a_proxy_for_outbound_calls() {
    // The api processes run on the real clock: the owner's session must be fresh by it.
    let dns = TestDns::start().await;
    let app = TestApp::builder()
        .dns_resolver(&dns.resolver())
        .start()
        .await;
    #[allow(clippy::disallowed_methods)]
    app.clock.set(chrono::Utc::now());
    let provider = TestProvider::start(app.clock.clone()).await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let sso = Sso {
        app,
        dns,
        provider,
        owner,
    };
    let proxy = tests::proxy::TestProxy::start().await;
    let ca = tests::receiver::TestCa::get().file.display().to_string();
    let common = [
        ("OUTBOUND_CA_FILE", ca.as_str()),
        ("OUTBOUND_ALLOW_PRIVATE", "true"),
    ];
    let proxy_url = proxy.url();
    let mut environment = common.to_vec();
    for variable in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        environment.push((variable, proxy_url.as_str()));
    }
    let replica = tests::processes::ApiReplica::start_with(
        API,
        sso.app.database.url(),
        &sso.app.smtp.url(),
        &environment,
    )
    .await;
    let saved = sso
        .app
        .call_at(
            &replica.base,
            As::Session(&sso.owner),
            Method::PUT,
            "/v1/orgs/acme/sso",
            Some(sso.connection()),
        )
        .await;
    assert_eq!(saved.status.as_u16(), 200, "{}", saved.body);
    assert_eq!(
        proxy.connections(),
        0,
        "the environment's proxy was not used"
    );
    replica.stop().await;

    let mut environment = common.to_vec();
    environment.push(("OUTBOUND_PROXY", proxy_url.as_str()));
    let replica = tests::processes::ApiReplica::start_with(
        API,
        sso.app.database.url(),
        &sso.app.smtp.url(),
        &environment,
    )
    .await;
    let saved = sso
        .app
        .call_at(
            &replica.base,
            As::Session(&sso.owner),
            Method::PUT,
            "/v1/orgs/acme/sso",
            Some(sso.connection()),
        )
        .await;
    assert_eq!(saved.status.as_u16(), 200, "{}", saved.body);
    assert!(proxy.connections() > 0, "OUTBOUND_PROXY carried the call");
    replica.stop().await;
    sso.app.stop().await;
}
