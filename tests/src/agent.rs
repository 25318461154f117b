//! A test agent: an Ed25519 key, a CSR, and RFC 9421-signed requests, as a real agent sends
//! them (decisions §6).

use std::io::Write;

use chrono::{DateTime, Utc};
use ed25519_dalek::pkcs8::EncodePrivateKey;
use protocol::signature::{Outgoing, Signer, SigningKey};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{TestApp, TestResponse};

#[derive(Clone)]
pub struct TestAgent {
    pub key: ed25519_dalek::SigningKey,
    pub machine_id: String,
    pub hostname: String,
    pub key_id: Option<String>,
    pub host_id: Option<String>,
}

/// What to do to a signed request before it is sent (abuse tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tamper {
    None,
    /// Change the body after signing.
    Body,
    /// Sign with a `created` this many seconds in the past.
    Stale(i64),
    /// Gzip the body (legitimately).
    Gzip,
}

impl TestAgent {
    pub fn new(hostname: &str) -> TestAgent {
        let seed: [u8; 32] = rand::random();
        TestAgent {
            key: ed25519_dalek::SigningKey::from_bytes(&seed),
            machine_id: format!("machine-{hostname}-{}", uuid::Uuid::now_v7().simple()),
            hostname: hostname.to_owned(),
            key_id: None,
            host_id: None,
        }
    }

    pub fn csr(&self) -> String {
        let der = self.key.to_pkcs8_der().expect("pkcs8");
        let key_pair = rcgen::KeyPair::try_from(der.as_bytes()).expect("key pair");
        rcgen::CertificateParams::default()
            .serialize_request(&key_pair)
            .expect("csr")
            .pem()
            .expect("pem")
    }

    pub fn facts(&self) -> Value {
        json!({
            "hostname": self.hostname,
            "machine_id": self.machine_id,
            "distro": "ubuntu",
            "distro_version": "24.04",
            "distro_codename": "noble",
            "os_family": "debian",
            "arch": "x86_64",
            "agent_version": "1.4.0",
            "agent_permissions": ["read_inventory", "apply_updates", "reboot"],
            "agent_install": {"method": "apt", "channel": "stable"}
        })
    }

    /// Enrols with `token`; keeps the key id and host id on success.
    pub async fn enroll(&mut self, app: &TestApp, token: &str) -> TestResponse {
        let response = app
            .post_json(
                "/v1/agent/enroll",
                json!({"token": token, "csr": self.csr(), "facts": self.facts()}),
            )
            .await;
        if response.status == StatusCode::CREATED {
            let body = response.json();
            self.key_id = body["key_id"].as_str().map(str::to_owned);
            self.host_id = body["host_id"].as_str().map(str::to_owned);
        }
        response
    }

    /// The same machine with a fresh key and no key id yet: what an agent holds while it renews.
    pub fn rekeyed(&self) -> TestAgent {
        let seed: [u8; 32] = rand::random();
        TestAgent {
            key: ed25519_dalek::SigningKey::from_bytes(&seed),
            key_id: None,
            ..self.clone()
        }
    }

    /// Asks for a certificate for the key of `csr`, signed with this agent's current key.
    pub async fn renew(&self, app: &TestApp, csr: &str) -> TestResponse {
        self.post(
            app,
            "/v1/agent/certificate",
            &json!({ "csr": csr }),
            app.clock_now(),
            Tamper::None,
        )
        .await
    }

    /// Takes the key id of a successful renewal (or enrolment) answer.
    pub fn adopt(&mut self, answer: &TestResponse) {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        self.key_id = answer.json()["key_id"].as_str().map(str::to_owned);
    }

    /// A signed check-in at the service's current time.
    pub async fn check_in(&self, app: &TestApp, inventory_digest: &str) -> TestResponse {
        self.post(
            app,
            "/v1/agent/check-in",
            &self.check_in_body(inventory_digest),
            app.clock_now(),
            Tamper::None,
        )
        .await
    }

    /// A check-in with the given body fields merged over the defaults.
    pub fn check_in_body(&self, inventory_digest: &str) -> Value {
        json!({"facts": self.facts(), "inventory_digest": inventory_digest})
    }

    /// Sends a signed POST to `path` with `body`.
    pub async fn post(
        &self,
        app: &TestApp,
        path: &str,
        body: &Value,
        now: DateTime<Utc>,
        tamper: Tamper,
    ) -> TestResponse {
        self.post_with_nonce(
            app,
            path,
            body,
            now,
            tamper,
            &uuid::Uuid::now_v7().simple().to_string(),
        )
        .await
    }

    /// [`TestAgent::post`] to another server on the same database (an api replica at `base`).
    pub async fn post_at(
        &self,
        app: &TestApp,
        base: &str,
        path: &str,
        body: &Value,
        now: DateTime<Utc>,
    ) -> TestResponse {
        let nonce = uuid::Uuid::now_v7().simple().to_string();
        self.post_to(app, base, path, body, now, Tamper::None, &nonce)
            .await
    }

    pub async fn post_with_nonce(
        &self,
        app: &TestApp,
        path: &str,
        body: &Value,
        now: DateTime<Utc>,
        tamper: Tamper,
        nonce: &str,
    ) -> TestResponse {
        self.post_to(app, &app.base, path, body, now, tamper, nonce)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn post_to(
        &self,
        app: &TestApp,
        base: &str,
        path: &str,
        body: &Value,
        now: DateTime<Utc>,
        tamper: Tamper,
        nonce: &str,
    ) -> TestResponse {
        let key_id = self.key_id.as_deref().unwrap_or("none");
        let mut bytes = serde_json::to_vec(body).expect("json");
        let mut gzip = false;
        if tamper == Tamper::Gzip {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(&bytes).expect("gzip");
            bytes = encoder.finish().expect("gzip");
            gzip = true;
        }
        let created = match tamper {
            Tamper::Stale(seconds) => now.timestamp() - seconds,
            _ => now.timestamp(),
        };
        let (input, signature, digest) = self.sign(
            &test_authority(),
            "POST",
            path,
            &bytes,
            created,
            key_id,
            nonce,
        );
        if tamper == Tamper::Body {
            bytes = serde_json::to_vec(&json!({"tampered": true})).expect("json");
        }
        let mut request = app
            .http
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .header("content-digest", digest)
            .header("signature-input", input)
            .header("signature", signature)
            .body(bytes);
        if gzip {
            request = request.header("content-encoding", "gzip");
        }
        let response = request.send().await.expect("sent");
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.expect("body"),
        }
    }

    /// Signature-Input, Signature and Content-Digest for a request to the service whose public
    /// authority (host[:port] of its `SERVICE_BASE_URL`) is `authority`, made by the protocol's
    /// signer (`protocol::signature::sign`).
    #[allow(clippy::too_many_arguments)]
    pub fn sign(
        &self,
        authority: &str,
        method: &str,
        path: &str,
        body: &[u8],
        created: i64,
        key_id: &str,
        nonce: &str,
    ) -> (String, String, String) {
        let key = SigningKey::ed25519_from_seed(&self.key.to_bytes());
        let headers = protocol::signature::sign(
            &Outgoing {
                method,
                authority,
                path,
                query: None,
                body,
            },
            &Signer {
                key: &key,
                key_id,
                created,
                nonce,
            },
        )
        .expect("a request the protocol can sign");
        (
            headers.signature_input,
            headers.signature,
            headers
                .content_digest
                .unwrap_or_else(|| protocol::signature::content_digest(body)),
        )
    }
}

/// The authority of the test service (`BASE_URL`).
pub fn test_authority() -> String {
    authority_of(crate::BASE_URL)
}

/// host[:port] of a base URL, as the service names itself in signatures.
pub fn authority_of(base_url: &str) -> String {
    url::Url::parse(base_url)
        .ok()
        .and_then(|u| {
            let host = u.host_str()?.to_ascii_lowercase();
            Some(match u.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
        .unwrap_or_default()
}
