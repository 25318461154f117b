//! The generated OpenAPI document: served, valid OpenAPI 3, and snapshotted so every contract
//! change shows in review (`UPDATE_SNAPSHOTS=1` rewrites the snapshot).

use serde_json::Value;
use tests::TestApp;

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

/// The media type errors of `path` are documented in: SCIM's for the SCIM protocol.
fn error_media(path: &str) -> &'static str {
    if path.starts_with("/scim/v2/") {
        "application/scim+json"
    } else {
        "application/problem+json"
    }
}

#[tokio::test]
async fn the_openapi_document_is_served_and_matches_the_snapshot() {
    let app = TestApp::new().await;
    let response = app.get("/v1/openapi.json").await;
    assert_eq!(response.status.as_u16(), 200);
    let served: Value = response.json();
    assert!(
        served["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "an OpenAPI 3 document"
    );
    assert!(served["paths"].as_object().is_some_and(|p| !p.is_empty()));

    // Every operation has an id, a tag, and documents its error answers as problems; the SCIM
    // protocol's (tag `Scim`, under /scim/v2) as SCIM errors instead, in their media type.
    for (path, item) in served["paths"].as_object().into_iter().flatten() {
        let media = error_media(path);
        for (method, operation) in item.as_object().into_iter().flatten() {
            let id = operation["operationId"].as_str();
            assert!(id.is_some(), "{method} {path} has an operationId");
            assert!(
                operation["tags"].as_array().is_some_and(|t| !t.is_empty()),
                "{method} {path} has a tag"
            );
            for (status, answer) in operation["responses"].as_object().into_iter().flatten() {
                if status.starts_with('4') || status.starts_with('5') {
                    assert!(
                        answer["content"][media].is_object(),
                        "{method} {path} {status} is documented as {media}"
                    );
                }
                if path.starts_with("/scim/v2/") {
                    assert!(
                        answer["content"]["application/problem+json"].is_null(),
                        "{method} {path} {status}: SCIM answers are never problems"
                    );
                    if status.starts_with('4') || status.starts_with('5') {
                        assert_eq!(
                            answer["content"][media]["schema"]["$ref"],
                            "#/components/schemas/ScimError",
                            "{method} {path} {status}"
                        );
                    }
                }
            }
        }
    }

    let generated = serde_json::to_string_pretty(&served).expect("serialize") + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(SNAPSHOT, &generated).expect("write the snapshot");
    } else {
        let snapshot = std::fs::read_to_string(SNAPSHOT).unwrap_or_default();
        assert!(
            snapshot == generated,
            "the OpenAPI document changed: review it and rerun with UPDATE_SNAPSHOTS=1 \
             to accept (tests/openapi.json)"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn every_operation_that_takes_a_body_documents_413() {
    let app = TestApp::new().await;
    let served: Value = app.get("/v1/openapi.json").await.json();
    let mut with_body = 0;
    for (path, item) in served["paths"].as_object().into_iter().flatten() {
        for (method, operation) in item.as_object().into_iter().flatten() {
            if operation.get("requestBody").is_none() {
                continue;
            }
            with_body += 1;
            let answer = &operation["responses"]["413"];
            assert!(
                answer["content"][error_media(path)].is_object(),
                "{method} {path} takes a body and must document 413 payload-too-large"
            );
        }
    }
    assert!(with_body > 0, "some operations take a body");
    app.stop().await;
}

#[tokio::test]
async fn a_405_names_the_methods_the_path_allows() {
    let app = TestApp::new().await;
    let answer = app
        .request(reqwest::Method::DELETE, "/v1/me", None, &[])
        .await;
    answer.assert_problem(405, "method-not-allowed");
    assert_eq!(answer.header("allow"), Some("GET, HEAD, PATCH"));

    let answer = app
        .request(reqwest::Method::PUT, "/v1/orgs/acme/hosts/hst_1", None, &[])
        .await;
    answer.assert_problem(405, "method-not-allowed");
    assert_eq!(answer.header("allow"), Some("GET, HEAD, PATCH"));

    let answer = app
        .request(reqwest::Method::OPTIONS, "/v1/auth/sign-up", None, &[])
        .await;
    answer.assert_problem(405, "method-not-allowed");
    assert_eq!(answer.header("allow"), Some("POST"));
    app.stop().await;
}

/// Bounds the code enforces are declared, so a schema-valid request is never refused for them
/// (issue 27: the fuzzer found both refused without the document saying so).
#[tokio::test]
async fn bounds_the_code_enforces_are_declared() {
    let app = TestApp::new().await;
    let document: Value = app.get("/v1/openapi.json").await.json();
    let start = &document["paths"]["/v1/auth/sso/start"]["get"]["parameters"];
    let email = start
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "email")
        .expect("the email parameter");
    assert_eq!(email["schema"]["maxLength"], 254, "{email}");

    // The enrolment body's facts, through whatever references the document uses.
    let resolve = |schema: &Value| -> Value {
        match schema["$ref"].as_str() {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap_or_default();
                document["components"]["schemas"][name].clone()
            }
            None => schema.clone(),
        }
    };
    let body = resolve(
        &document["paths"]["/v1/agent/enroll"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"],
    );
    let facts = resolve(&body["properties"]["facts"]);
    let hostname = resolve(&facts["properties"]["hostname"]);
    assert_eq!(hostname["minLength"], 1, "{hostname}");
    assert_eq!(hostname["maxLength"], 255, "{hostname}");
    app.stop().await;
}
