//! The edge every request crosses: problem answers, request ids, health and readiness.

use reqwest::Method;
use tests::TestApp;

#[tokio::test]
async fn an_unknown_route_is_a_problem_404() {
    let app = TestApp::new().await;
    let response = app.get("/v1/nope").await;
    response.assert_problem(404, "not-found");
    app.stop().await;
}

#[tokio::test]
async fn a_wrong_method_is_a_problem_405() {
    let app = TestApp::new().await;
    let response = app.request(Method::DELETE, "/healthz", None, &[]).await;
    response.assert_problem(405, "method-not-allowed");
    app.stop().await;
}

#[tokio::test]
async fn a_body_over_one_mebibyte_is_a_problem_413_with_or_without_content_length() {
    let app = TestApp::new().await;
    let big = vec![b'a'; 2 * 1024 * 1024];
    let response = app
        .post_raw("/v1/auth/magic-link", "application/json", big.clone())
        .await;
    response.assert_problem(413, "payload-too-large");

    // Chunked: no Content-Length for the server to refuse up front.
    let stream = futures::stream::iter(
        big.chunks(64 * 1024)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let response = app
        .http
        .post(app.url("/v1/auth/magic-link"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    app.stop().await;
}

#[tokio::test]
async fn malformed_or_wrongly_shaped_json_is_a_problem_400() {
    let app = TestApp::new().await;
    for body in [
        &b"{\"email\": "[..],
        b"[]",
        b"{}",
        b"{\"email\": 5, \"unexpected\": true}",
        b"not json at all",
    ] {
        let response = app
            .post_raw("/v1/auth/magic-link", "application/json", body.to_vec())
            .await;
        let problem = response.assert_problem(400, "invalid-request");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "a 400 says what was wrong: {problem}"
        );
    }
    let response = app
        .post_raw("/v1/auth/magic-link", "text/plain", b"hello".to_vec())
        .await;
    response.assert_problem(400, "invalid-request");
    app.stop().await;
}

#[tokio::test]
async fn every_answer_carries_a_request_id_and_a_client_id_is_echoed() {
    let app = TestApp::new().await;
    let generated = app.get("/healthz").await;
    assert!(
        generated
            .header("x-request-id")
            .is_some_and(|v| !v.is_empty())
    );
    let problem = app.get("/v1/nope").await;
    assert!(problem.header("x-request-id").is_some());

    let echoed = app
        .request(
            Method::GET,
            "/v1/nope",
            None,
            &[("x-request-id", "trace-abc.123")],
        )
        .await;
    assert_eq!(echoed.header("x-request-id"), Some("trace-abc.123"));

    // A value that could smuggle something into logs is replaced, not echoed.
    let replaced = app
        .request(Method::GET, "/healthz", None, &[("x-request-id", "a b")])
        .await;
    assert_ne!(replaced.header("x-request-id"), Some("a b"));
    app.stop().await;
}

#[tokio::test]
async fn health_and_readiness_answer() {
    // No in-process worker: closing the pool below must not wait for its connections.
    let app = TestApp::builder().without_worker().start().await;
    let health = app.get("/healthz").await;
    assert_eq!(health.status.as_u16(), 200);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status.as_u16(), 200, "{}", ready.body);

    // Once the database is gone the service is no longer ready.
    app.state.db.close().await;
    let not_ready = app.get("/readyz").await;
    not_ready.assert_problem(503, "unavailable");
    app.stop().await;
}

/// `/healthz` is answered before the OpenAPI service's routing (`api::http::health::Liveness`):
/// with the answer of its documented operation, through the same edge.
#[tokio::test]
async fn the_liveness_probe_answers_as_its_documented_operation() {
    use poem::{Endpoint, EndpointExt};

    let app = TestApp::builder().without_worker().start().await;
    let served = api::app(app.state.clone());
    let allowed = api::http::openapi::AllowedMethods::from_document(&api::openapi_json(&app.state));
    let documented = poem::Route::new()
        .nest("/", api::openapi(&app.state).with(allowed))
        .with(api::http::middleware::Edge::<api::scim::v2::wire::ScimPaths>::default());
    let request = |method: &Method| {
        poem::Request::builder()
            .method(method.clone())
            .uri(poem::http::Uri::from_static("/healthz"))
            .header("x-request-id", "probe-1")
            .finish()
    };
    for method in [Method::GET, Method::HEAD, Method::DELETE, Method::POST] {
        let fast = served.get_response(request(&method)).await;
        let slow = documented.get_response(request(&method)).await;
        assert_eq!(fast.status(), slow.status(), "{method}");
        assert_eq!(fast.headers(), slow.headers(), "{method}");
        assert_eq!(
            fast.into_body().into_bytes().await.expect("a body"),
            slow.into_body().into_bytes().await.expect("a body"),
            "{method}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn the_docs_ui_is_served() {
    let app = TestApp::new().await;
    let docs = app.get("/docs").await;
    assert_eq!(docs.status.as_u16(), 200);
    assert!(
        docs.body.contains("swagger"),
        "the docs page loads Swagger UI"
    );
    app.stop().await;
}
