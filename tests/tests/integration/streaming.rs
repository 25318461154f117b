//! Request bodies whatever the transport says about their length: HTTP/2 with prior knowledge
//! needs neither `Content-Length` nor `Transfer-Encoding`, so every limit is counted on the
//! bytes as they arrive, and agent bodies are read only once the caller is known.

use std::{
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use reqwest::Method;
use sea_orm::ConnectionTrait;
use serde_json::json;
use tests::{
    As, TestApp, TestResponse,
    agent::{TestAgent, test_authority},
};

const MIB: usize = 1024 * 1024;

fn http2() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("an HTTP/2 client")
}

/// A body of `total` bytes of JSON whitespace, made as it is sent; `pulled` counts what the
/// transport has taken so far.
fn streamed(total: usize, pulled: Arc<AtomicUsize>) -> reqwest::Body {
    let chunk = Bytes::from(vec![b' '; 64 * 1024]);
    let stream = futures::stream::unfold(0usize, move |sent| {
        let chunk = chunk.clone();
        let pulled = pulled.clone();
        async move {
            (sent < total).then(|| {
                pulled.fetch_add(chunk.len(), Ordering::SeqCst);
                (Ok::<_, std::io::Error>(chunk.clone()), sent + chunk.len())
            })
        }
    });
    reqwest::Body::wrap_stream(stream)
}

async fn read(response: reqwest::Response) -> TestResponse {
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    TestResponse {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap_or_default(),
    }
}

/// POSTs 64 MiB to `path` over HTTP/2 without a length; answers the response and how much of
/// the body the server had taken when it answered.
async fn flood(app: &TestApp, path: &str, headers: &[(&str, String)]) -> (TestResponse, usize) {
    let pulled = Arc::new(AtomicUsize::new(0));
    let mut request = http2()
        .post(app.url(path))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request
        .body(streamed(64 * MIB, pulled.clone()))
        .send()
        .await
        .expect("an answer");
    let taken = pulled.load(Ordering::SeqCst);
    (read(response).await, taken)
}

#[tokio::test]
async fn an_unauthenticated_body_streamed_over_http2_without_a_length_stops_at_the_limit() {
    let app = TestApp::new().await;
    let (answer, taken) = flood(&app, "/v1/auth/magic-link", &[]).await;
    answer.assert_problem(413, "payload-too-large");
    assert!(
        taken < 16 * MIB,
        "refused without reading it all: {taken} bytes taken"
    );
    // The service goes on answering.
    let fine = http2()
        .post(app.url("/v1/auth/magic-link"))
        .json(&json!({"email": "someone@example.test"}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(fine.status().as_u16(), 202);
    app.stop().await;
}

async fn enrollment_token(app: &TestApp) -> String {
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let created = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "fleet"})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    created.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn an_agent_call_without_a_valid_signature_is_refused_before_its_body_is_read() {
    let app = TestApp::new().await;
    let token = enrollment_token(&app).await;
    let mut agent = TestAgent::new("web-1");
    assert_eq!(agent.enroll(&app, &token).await.status.as_u16(), 201);

    // No signature at all.
    let (answer, taken) = flood(&app, "/v1/agent/check-in", &[]).await;
    answer.assert_problem(401, "unauthenticated");
    assert!(taken < 8 * MIB, "{taken} bytes taken before refusing");

    // The host's keyid, signed by another key over a digest of some other body.
    let mut forger = TestAgent::new("forger");
    forger.key_id = agent.key_id.clone();
    let (input, signature, digest) = forger.sign(
        &test_authority(),
        "POST",
        "/v1/agent/check-in",
        b"{}",
        app.clock_now().timestamp(),
        agent.key_id.as_deref().unwrap_or_default(),
        "forged-1",
    );
    let (answer, taken) = flood(
        &app,
        "/v1/agent/check-in",
        &[
            ("content-digest", digest),
            ("signature-input", input),
            ("signature", signature),
        ],
    )
    .await;
    answer.assert_problem(401, "unauthenticated");
    assert!(taken < 8 * MIB, "{taken} bytes taken before refusing");
    app.stop().await;
}

/// Sends `body` signed by `agent` over HTTP/2, streamed in pieces without a length.
async fn signed_h2(
    app: &TestApp,
    agent: &TestAgent,
    body: Vec<u8>,
    signed_over: &[u8],
) -> TestResponse {
    let (input, signature, digest) = agent.sign(
        &test_authority(),
        "POST",
        "/v1/agent/check-in",
        signed_over,
        app.clock_now().timestamp(),
        agent.key_id.as_deref().unwrap_or_default(),
        &uuid::Uuid::now_v7().simple().to_string(),
    );
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
    let response = http2()
        .post(app.url("/v1/agent/check-in"))
        .header("content-type", "application/json")
        .header("content-digest", digest)
        .header("signature-input", input)
        .header("signature", signature)
        .body(reqwest::Body::wrap_stream(futures::stream::iter(pieces)))
        .send()
        .await
        .expect("an answer");
    read(response).await
}

#[tokio::test]
async fn a_signed_body_is_checked_against_its_digest_as_it_streams_in() {
    let app = TestApp::new().await;
    let token = enrollment_token(&app).await;
    let mut agent = TestAgent::new("web-1");
    assert_eq!(agent.enroll(&app, &token).await.status.as_u16(), 201);

    let mut body = agent.check_in_body("d1");
    body["packages"] = json!(
        (0..2000)
            .map(|i| json!({"name": format!("package-{i}"), "version": "1.0", "arch": "amd64"}))
            .collect::<Vec<_>>()
    );
    let bytes = serde_json::to_vec(&body).expect("json");
    assert!(bytes.len() > 64 * 1024, "several HTTP/2 frames");
    let answer = signed_h2(&app, &agent, bytes.clone(), &bytes).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);

    // One byte changed after signing: refused, nothing stored.
    let mut changed = bytes.clone();
    let at = changed.len() - 10;
    changed[at] = b' ';
    signed_h2(&app, &agent, changed, &bytes)
        .await
        .assert_problem(401, "unauthenticated");
    // Over 16 MiB, correctly signed: too large, still refused.
    let mut huge = bytes[..bytes.len() - 1].to_vec();
    huge.resize(17 * MIB, b' ');
    huge.push(b'}');
    signed_h2(&app, &agent, huge.clone(), &huge)
        .await
        .assert_problem(413, "payload-too-large");
    app.stop().await;
}

fn enrolment(token: &str, agent: &TestAgent, padding: usize) -> Vec<u8> {
    let mut bytes =
        serde_json::to_vec(&json!({"token": token, "csr": agent.csr(), "facts": agent.facts()}))
            .expect("json");
    // Whitespace inside the object: still the same, valid enrolment.
    let end = bytes.pop();
    bytes.resize(bytes.len() + padding, b' ');
    bytes.extend(end);
    bytes
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

#[tokio::test]
async fn an_enrolment_body_is_at_most_64_kib_sent_and_decompressed() {
    let app = TestApp::new().await;
    let token = enrollment_token(&app).await;
    let agent = TestAgent::new("web-1");
    let padded = enrolment(&token, &agent, 100 * 1024);

    // With a length, without one over HTTP/2, and small on the wire but large inside gzip.
    app.post_raw("/v1/agent/enroll", "application/json", padded.clone())
        .await
        .assert_problem(413, "payload-too-large");
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
        padded.chunks(8 * 1024).map(|c| Ok(c.to_vec())).collect();
    let response = http2()
        .post(app.url("/v1/agent/enroll"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(pieces)))
        .send()
        .await
        .expect("an answer");
    read(response)
        .await
        .assert_problem(413, "payload-too-large");
    let compressed = gzip(&padded);
    assert!(compressed.len() < 16 * 1024);
    let response = app
        .http
        .post(app.url("/v1/agent/enroll"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(compressed)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 413);

    // The same enrolment within the bound goes through, gzip or not.
    let fitting = enrolment(&token, &agent, 1024);
    let response = app
        .http
        .post(app.url("/v1/agent/enroll"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzip(&fitting))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 201);
    app.stop().await;
}

#[tokio::test]
async fn enrolment_over_the_address_limit_is_refused_before_the_body_is_read() {
    let app = TestApp::new().await;
    // One refused enrolment makes the address's bucket; then it is spent far ahead.
    let answer = app
        .post_json(
            "/v1/agent/enroll",
            json!({"token": "enr_nope", "csr": "", "facts": {"hostname": "h", "machine_id": "m"}}),
        )
        .await;
    answer.assert_problem(403, "forbidden");
    let spent = app
        .state
        .db
        .orm
        .execute_unprepared(&format!(
            "UPDATE rate_limits SET tat_ms = {} WHERE key LIKE 'enrol%'",
            app.clock_now().timestamp_millis() + 3_600_000
        ))
        .await
        .expect("spend the bucket");
    assert_eq!(spent.rows_affected(), 1, "one enrolment bucket");

    let (answer, taken) = flood(&app, "/v1/agent/enroll", &[]).await;
    answer.assert_problem(429, "rate-limited");
    assert!(answer.header("retry-after").is_some());
    assert!(taken < 8 * MIB, "{taken} bytes taken before refusing");
    app.stop().await;
}
