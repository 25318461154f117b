//! A real OpenID provider for tests, on loopback over TLS (a [`Receiver`] signed by the test CA,
//! which the service trusts through `OUTBOUND_CA_FILE`). It serves discovery, its key set, an
//! authorization endpoint that signs in whoever the test says (and redirects back with a
//! code), a token endpoint that checks the client's secret, the code (once) and the PKCE
//! verifier, and userinfo. ID tokens are ES256 JWTs made with `jsonwebtoken`; a test can bend
//! them (another audience, expired, `alg: none`, signed by a key the set does not hold, …) to
//! see the service refuse them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk};
use platform::clock::Clock;
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{
    TestApp, TestResponse,
    receiver::{Received, Receiver, Reply, TestCa},
};

pub const CLIENT_ID: &str = "fleet-test-client";
pub const CLIENT_SECRET: &str = "fleet-test-client-secret-0123456789";

/// A person at the provider.
#[derive(Clone, Debug)]
pub struct User {
    pub sub: String,
    pub email: String,
    pub email_verified: bool,
    pub name: Option<String>,
    pub groups: Vec<String>,
}

impl User {
    pub fn new(email: &str, groups: &[&str]) -> User {
        User {
            sub: format!("sub-{email}"),
            email: email.to_owned(),
            email_verified: true,
            name: Some("Test Person".into()),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }
}

/// A signing key and its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    encoding: EncodingKey,
    pub jwk: Value,
}

impl SigningKey {
    pub fn generate(kid: &str) -> SigningKey {
        let pair = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("P-256 key");
        let encoding = EncodingKey::from_ec_der(&pair.serialize_der());
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).expect("JWK");
        jwk.common.key_id = Some(kid.to_owned());
        let jwk = serde_json::to_value(&jwk).expect("JWK as JSON");
        SigningKey {
            kid: kid.to_owned(),
            encoding,
            jwk,
        }
    }
}

/// How the next ID tokens are bent (all off by default).
#[derive(Clone, Debug, Default)]
pub struct Bend {
    /// `aud` other than the client.
    pub audience: Option<String>,
    /// `iss` other than the provider.
    pub issuer: Option<String>,
    /// Seconds from now until `exp` (default 300; negative: already expired).
    pub expires_in: Option<i64>,
    /// `alg: none`, no signature.
    pub alg_none: bool,
    /// Leave the groups out of the ID token (they are still in userinfo).
    pub groups_only_in_userinfo: bool,
    /// `nonce` other than the one the sign-in sent.
    pub nonce: Option<String>,
}

struct Grant {
    user: User,
    nonce: Option<String>,
    challenge: String,
    redirect_uri: String,
}

struct State {
    issuer: String,
    /// What discovery says the issuer is (default: the issuer).
    discovery_issuer: Option<String>,
    /// The key set served at the JWKS address.
    published: Vec<SigningKey>,
    /// The key ID tokens are signed with (need not be published).
    signing: SigningKey,
    /// Who signs in at the authorization endpoint; none refuses (`access_denied`).
    user: Option<User>,
    codes: HashMap<String, Grant>,
    access_tokens: HashMap<String, User>,
    bend: Bend,
    jwks_fetches: usize,
    token_requests: usize,
}

/// The provider. Its issuer is `https://localhost:<port>`.
pub struct TestProvider {
    pub receiver: Receiver,
    state: Arc<Mutex<State>>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn random() -> String {
    b64(&rand::random::<[u8; 24]>())
}

fn query(received: &Received) -> HashMap<String, String> {
    url::form_urlencoded::parse(received.query.as_deref().unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn oauth_error(code: &str) -> Reply {
    Reply::json(400, json!({ "error": code }))
}

impl TestProvider {
    /// Starts a provider whose tokens are dated by `clock` (the service's, so a test moving
    /// the service's clock ages them too).
    pub async fn start(clock: impl Clock) -> TestProvider {
        let key = SigningKey::generate("key-1");
        let state = Arc::new(Mutex::new(State {
            issuer: String::new(),
            discovery_issuer: None,
            published: vec![key.clone()],
            signing: key,
            user: None,
            codes: HashMap::new(),
            access_tokens: HashMap::new(),
            bend: Bend::default(),
            jwks_fetches: 0,
            token_requests: 0,
        }));
        let shared = state.clone();
        let receiver = Receiver::with_handler(move |received| {
            let Ok(mut state) = shared.lock() else {
                return Reply::Status(500, "poisoned".into());
            };
            handle(&mut state, received, clock.now().timestamp())
        })
        .await;
        let issuer = format!("https://localhost:{}", receiver.addr.port());
        if let Ok(mut state) = state.lock() {
            state.issuer = issuer;
        }
        TestProvider { receiver, state }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().expect("provider state");
        f(&mut state)
    }

    pub fn issuer(&self) -> String {
        self.with(|s| s.issuer.clone())
    }

    /// Who signs in next (and after) at the authorization endpoint.
    pub fn sign_in_as(&self, user: User) {
        self.with(|s| s.user = Some(user));
    }

    /// Nobody signs in: the authorization endpoint answers `error=access_denied`.
    pub fn refuse_sign_in(&self) {
        self.with(|s| s.user = None);
    }

    /// Discovery names `issuer` instead of the provider's own.
    pub fn discovery_names(&self, issuer: &str) {
        self.with(|s| s.discovery_issuer = Some(issuer.to_owned()));
    }

    pub fn bend(&self, bend: Bend) {
        self.with(|s| s.bend = bend);
    }

    /// Signs with a new key and publishes it beside the old one (a rotation).
    pub fn rotate_key(&self, kid: &str) {
        let key = SigningKey::generate(kid);
        self.with(|s| {
            s.published.push(key.clone());
            s.signing = key;
        });
    }

    /// Signs with a key that is not published (a forger's, under a published key's `kid`
    /// when `kid` names one).
    pub fn sign_with_unpublished_key(&self, kid: &str) {
        let key = SigningKey::generate(kid);
        self.with(|s| s.signing = key);
    }

    /// How often the key set was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.with(|s| s.jwks_fetches)
    }

    /// How many token requests arrived.
    pub fn token_requests(&self) -> usize {
        self.with(|s| s.token_requests)
    }

    /// A code for `user` as the authorization endpoint would issue it, with the PKCE
    /// challenge of `verifier` (benchmarks drive the callback without a browser).
    pub fn issue_code(
        &self,
        user: User,
        nonce: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> String {
        let code = random();
        let challenge = b64(&Sha256::digest(verifier.as_bytes()));
        self.with(|s| {
            s.codes.insert(
                code.clone(),
                Grant {
                    user,
                    nonce: Some(nonce.to_owned()),
                    challenge,
                    redirect_uri: redirect_uri.to_owned(),
                },
            )
        });
        code
    }
}

fn handle(state: &mut State, received: &Received, now: i64) -> Reply {
    match (received.method.as_str(), received.path.as_str()) {
        ("GET", "/.well-known/openid-configuration") => {
            let issuer = state.issuer.clone();
            Reply::json(
                200,
                json!({
                    "issuer": state.discovery_issuer.clone().unwrap_or_else(|| issuer.clone()),
                    "authorization_endpoint": format!("{issuer}/authorize"),
                    "token_endpoint": format!("{issuer}/token"),
                    "userinfo_endpoint": format!("{issuer}/userinfo"),
                    "jwks_uri": format!("{issuer}/jwks"),
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["ES256"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                    "code_challenge_methods_supported": ["S256"],
                    "scopes_supported": ["openid", "email", "profile"],
                    "claims_supported": ["sub", "email", "email_verified", "name", "groups"],
                }),
            )
        }
        ("GET", "/jwks") => {
            state.jwks_fetches += 1;
            let keys: Vec<Value> = state.published.iter().map(|k| k.jwk.clone()).collect();
            Reply::json(200, json!({ "keys": keys }))
        }
        ("GET", "/authorize") => authorize(state, &query(received)),
        ("POST", "/token") => {
            state.token_requests += 1;
            token(state, received, now)
        }
        ("GET", "/userinfo") => {
            let bearer = received
                .header("authorization")
                .and_then(|h| h.strip_prefix("Bearer "))
                .unwrap_or_default();
            match state.access_tokens.get(bearer) {
                Some(user) => Reply::json(
                    200,
                    json!({
                        "sub": user.sub,
                        "email": user.email,
                        "email_verified": user.email_verified,
                        "groups": user.groups,
                    }),
                ),
                None => Reply::json(401, json!({ "error": "invalid_token" })),
            }
        }
        _ => Reply::Status(404, "not found".into()),
    }
}

fn authorize(state: &mut State, params: &HashMap<String, String>) -> Reply {
    let (Some(redirect_uri), Some(login_state)) = (params.get("redirect_uri"), params.get("state"))
    else {
        return Reply::Status(400, "redirect_uri and state are required".into());
    };
    let back = |pairs: &[(&str, &str)]| {
        let mut url = url::Url::parse(redirect_uri).expect("redirect_uri is a URL");
        url.query_pairs_mut().extend_pairs(pairs.iter().copied());
        Reply::Full {
            status: 302,
            headers: vec![("location".into(), url.to_string())],
            body: Vec::new(),
        }
    };
    let well_formed = params.get("response_type").map(String::as_str) == Some("code")
        && params.get("client_id").map(String::as_str) == Some(CLIENT_ID)
        && params.get("code_challenge_method").map(String::as_str) == Some("S256")
        && params.contains_key("code_challenge")
        && params
            .get("scope")
            .is_some_and(|s| s.split(' ').any(|scope| scope == "openid"));
    if !well_formed {
        return back(&[("error", "invalid_request"), ("state", login_state)]);
    }
    let Some(user) = state.user.clone() else {
        return back(&[
            ("error", "access_denied"),
            ("error_description", "The user said no."),
            ("state", login_state),
        ]);
    };
    let code = random();
    state.codes.insert(
        code.clone(),
        Grant {
            user,
            nonce: params.get("nonce").cloned(),
            challenge: params.get("code_challenge").cloned().unwrap_or_default(),
            redirect_uri: redirect_uri.clone(),
        },
    );
    back(&[("code", &code), ("state", login_state)])
}

fn client_authenticated(received: &Received, form: &HashMap<String, String>) -> bool {
    let basic = received
        .header("authorization")
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    let decode = |s: &str| {
        url::form_urlencoded::parse(s.as_bytes())
            .map(|(k, v)| format!("{k}{v}"))
            .collect::<String>()
    };
    match basic {
        // RFC 6749 §2.3.1: both halves are form-encoded.
        Some(pair) => pair
            .split_once(':')
            .is_some_and(|(id, secret)| decode(id) == CLIENT_ID && decode(secret) == CLIENT_SECRET),
        None => {
            form.get("client_id").map(String::as_str) == Some(CLIENT_ID)
                && form.get("client_secret").map(String::as_str) == Some(CLIENT_SECRET)
        }
    }
}

fn token(state: &mut State, received: &Received, now: i64) -> Reply {
    let form: HashMap<String, String> = received.form().into_iter().collect();
    if !client_authenticated(received, &form) {
        return Reply::json(401, json!({ "error": "invalid_client" }));
    }
    if form.get("grant_type").map(String::as_str) != Some("authorization_code") {
        return oauth_error("unsupported_grant_type");
    }
    // A code is good once.
    let Some(grant) = form.get("code").and_then(|c| state.codes.remove(c)) else {
        return oauth_error("invalid_grant");
    };
    if form.get("redirect_uri") != Some(&grant.redirect_uri) {
        return oauth_error("invalid_grant");
    }
    let verifier = form.get("code_verifier").cloned().unwrap_or_default();
    if b64(&Sha256::digest(verifier.as_bytes())) != grant.challenge {
        return oauth_error("invalid_grant");
    }
    let bend = state.bend.clone();
    let user = grant.user;
    let mut claims = json!({
        "iss": bend.issuer.clone().unwrap_or_else(|| state.issuer.clone()),
        "sub": user.sub,
        "aud": bend.audience.clone().unwrap_or_else(|| CLIENT_ID.to_owned()),
        "iat": now,
        "exp": now + bend.expires_in.unwrap_or(300),
        "email": user.email,
        "email_verified": user.email_verified,
    });
    if let Some(nonce) = bend.nonce.clone().or(grant.nonce) {
        claims["nonce"] = json!(nonce);
    }
    if let Some(name) = &user.name {
        claims["name"] = json!(name);
    }
    if !bend.groups_only_in_userinfo {
        claims["groups"] = json!(user.groups);
    }
    let id_token = if bend.alg_none {
        format!(
            "{}.{}.",
            b64(br#"{"alg":"none","typ":"JWT"}"#),
            b64(claims.to_string().as_bytes())
        )
    } else {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(state.signing.kid.clone());
        jsonwebtoken::encode(&header, &claims, &state.signing.encoding).expect("sign")
    };
    let access_token = random();
    state.access_tokens.insert(access_token.clone(), user);
    Reply::json(
        200,
        json!({
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": id_token,
        }),
    )
}

/// A browser: trusts the test CA, follows no redirects.
pub fn browser() -> reqwest::Client {
    let roots =
        reqwest::Certificate::from_pem_bundle(TestCa::get().pem.as_bytes()).expect("the test CA");
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tls_certs_merge(roots)
        .build()
        .expect("browser")
}

async fn read(response: reqwest::Response) -> TestResponse {
    TestResponse {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.expect("body read"),
    }
}

/// What a browser sees signing in through the provider.
pub struct SsoAttempt {
    /// The answer of `GET /v1/auth/sso/start`.
    pub start: TestResponse,
    /// The answer of the callback, when the provider sent the browser back.
    pub callback: Option<TestResponse>,
    /// The callback address the provider sent the browser to (on the test's server).
    pub callback_url: Option<String>,
}

impl SsoAttempt {
    /// The callback's answer; fails the test when there was none.
    #[track_caller]
    pub fn callback(&self) -> &TestResponse {
        self.callback.as_ref().unwrap_or_else(|| {
            panic!(
                "no callback: start answered {} {}",
                self.start.status, self.start.body
            )
        })
    }

    /// The session cookie's value set by the callback.
    pub fn session_cookie(&self) -> Option<String> {
        let header = self.callback.as_ref()?.header("set-cookie")?;
        let pair = header.split(';').next()?;
        pair.strip_prefix("service_session=").map(str::to_owned)
    }
}

/// Signs in as `email` the way a browser does: start at the service, on to the provider (who
/// signs in whoever [`TestProvider::sign_in_as`] said), back to the callback.
pub async fn browser_sign_in(app: &TestApp, email: &str) -> SsoAttempt {
    let browser = browser();
    let start = read(
        browser
            .get(app.url("/v1/auth/sso/start"))
            .query(&[("email", email)])
            .send()
            .await
            .expect("start"),
    )
    .await;
    let Some(to_provider) = start.header("location").map(str::to_owned) else {
        return SsoAttempt {
            start,
            callback: None,
            callback_url: None,
        };
    };
    let at_provider = read(browser.get(&to_provider).send().await.expect("authorize")).await;
    let Some(back) = at_provider.header("location") else {
        panic!("the provider did not redirect back: {}", at_provider.body);
    };
    // The redirect URI is on SERVICE_BASE_URL; the test's server is elsewhere.
    let callback_url = back.replacen(crate::BASE_URL, &app.base, 1);
    // The browser sends back the cookie the start set (decisions §18: the sign-in is bound
    // to the browser that started it).
    let mut callback = browser.get(&callback_url);
    if let Some(cookie) = sso_cookie(&start) {
        callback = callback.header("cookie", cookie);
    }
    let callback = read(callback.send().await.expect("callback")).await;
    SsoAttempt {
        start,
        callback: Some(callback),
        callback_url: Some(callback_url),
    }
}

/// The `service_sso=…` pair that `GET /v1/auth/sso/start` set, if it set one.
pub fn sso_cookie(start: &TestResponse) -> Option<String> {
    start
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|pair| pair.starts_with("service_sso="))
        .map(str::to_owned)
}
