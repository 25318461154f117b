//! What agents report beyond the inventory (issue 28): each update's `impact` (decisions §21)
//! is stored as reported, an agent that does not say is kept as unknown (NULL), never as "no
//! impact", and an impact out of bounds refuses the whole check-in naming the field; labels an
//! agent asks for at enrolment join the token's.

use entities::{host_labels, host_updates, hosts};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use tests::{
    As, TestApp,
    agent::{Tamper, TestAgent},
};
use uuid::Uuid;

/// `acme`, its owner's enrollment token (labelled `env=prod`) and an enrolled agent.
async fn enrolled(app: &TestApp) -> (TestAgent, Uuid, String) {
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let created = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/enrollment-tokens",
            Some(json!({"name": "fleet", "labels": {"env": "prod"}})),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let token = created.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut agent = TestAgent::new("web-1");
    let answer = agent.enroll(app, &token).await;
    assert_eq!(answer.status.as_u16(), 201, "{}", answer.body);
    let host_id = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    (agent, host_id, token)
}

fn update(name: &str, to: &str, impact: Option<Value>) -> Value {
    let mut update = json!({"name": name, "arch": "amd64", "from_version": "1", "to_version": to,
                            "ecosystem": "deb", "security": false, "advisories": []});
    if let Some(impact) = impact {
        update["impact"] = impact;
    }
    update
}

async fn check_in(
    app: &TestApp,
    agent: &TestAgent,
    digest: &str,
    updates: Value,
) -> tests::TestResponse {
    let mut body = agent.check_in_body(digest);
    body["packages"] = json!([]);
    body["updates"] = updates;
    agent
        .post(
            app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await
}

/// The stored impact of each update, by name: `None` is NULL.
async fn impacts(app: &TestApp, host_id: Uuid) -> Vec<(String, Option<Value>)> {
    host_updates::Entity::find()
        .filter(host_updates::Column::HostId.eq(host_id))
        .order_by_asc(host_updates::Column::Name)
        .all(&app.state.db.orm)
        .await
        .expect("updates")
        .into_iter()
        .map(|u| {
            let impact = u
                .impact
                .map(|i| serde_json::from_str::<Value>(i.as_str()).expect("stored impact is JSON"));
            (u.name, impact)
        })
        .collect()
}

async fn updates_seq(app: &TestApp, host_id: Uuid) -> i64 {
    hosts::Entity::find_by_id(host_id)
        .one(&app.state.db.orm)
        .await
        .expect("read")
        .expect("host")
        .updates_seq
}

#[tokio::test]
async fn an_impact_is_stored_as_reported_and_an_agent_that_does_not_say_is_unknown() {
    let app = TestApp::new().await;
    let (agent, host_id, _) = enrolled(&app).await;
    let openssl = json!({"reboot": false, "restarts": ["nginx.service", "ssh.service"],
                         "installs": [{"name": "libssl3t64", "version": "3.0.13-0ubuntu3.4"}],
                         "removes": ["libssl3"]});
    let answer = check_in(
        &app,
        &agent,
        "one",
        json!([
            update("openssl", "2", Some(openssl.clone())),
            update("curl", "2", None)
        ]),
    )
    .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(
        impacts(&app, host_id).await,
        vec![
            ("curl".to_owned(), None),
            ("openssl".to_owned(), Some(openssl.clone()))
        ]
    );
    let seq = updates_seq(&app, host_id).await;

    // Only the impact moves: the row is written again, and evaluations learn of it.
    let rebooting = json!({"reboot": true, "restarts": [], "installs": [], "removes": []});
    let answer = check_in(
        &app,
        &agent,
        "two",
        json!([
            update("openssl", "2", Some(rebooting.clone())),
            update("curl", "2", None)
        ]),
    )
    .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(
        impacts(&app, host_id).await,
        vec![
            ("curl".to_owned(), None),
            ("openssl".to_owned(), Some(rebooting))
        ]
    );
    assert_eq!(updates_seq(&app, host_id).await, seq + 1);

    // The same update reported without an impact: unknown again, not the old impact and not an
    // empty one.
    let answer = check_in(
        &app,
        &agent,
        "three",
        json!([update("openssl", "2", None), update("curl", "2", None)]),
    )
    .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(
        impacts(&app, host_id).await,
        vec![("curl".to_owned(), None), ("openssl".to_owned(), None)]
    );
    app.stop().await;
}

#[tokio::test]
async fn an_impact_out_of_bounds_refuses_the_check_in_naming_the_field_and_stores_nothing() {
    let app = TestApp::new().await;
    let (agent, host_id, _) = enrolled(&app).await;
    let fine =
        json!({"reboot": false, "restarts": ["nginx.service"], "installs": [], "removes": []});
    let answer = check_in(
        &app,
        &agent,
        "one",
        json!([update("openssl", "2", Some(fine.clone()))]),
    )
    .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    let before = impacts(&app, host_id).await;
    let units: Vec<String> = (0..1_001).map(|i| format!("unit-{i}.service")).collect();
    let cases = [
        (
            json!({"reboot": false, "restarts": units, "installs": [], "removes": []}),
            "updates[1].impact.restarts",
        ),
        (
            json!({"reboot": false, "restarts": ["ok.service", "evil\u{1b}[2J.service"], "installs": [], "removes": []}),
            "updates[1].impact.restarts[1]",
        ),
        (
            json!({"reboot": false, "restarts": [""], "installs": [], "removes": []}),
            "updates[1].impact.restarts[0]",
        ),
        (
            json!({"reboot": false, "restarts": [], "installs": [{"name": "x", "version": ""}], "removes": []}),
            "updates[1].impact.installs[0].version",
        ),
        (
            json!({"reboot": false, "restarts": [], "installs": [], "removes": ["r".repeat(256)]}),
            "updates[1].impact.removes[0]",
        ),
    ];
    for (bad, field) in cases {
        let answer = check_in(
            &app,
            &agent,
            "two",
            json!([
                update("openssl", "3", Some(fine.clone())),
                update("curl", "2", Some(bad))
            ]),
        )
        .await;
        let problem = answer.assert_problem(400, "invalid-request");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(field)),
            "{field}: {problem}"
        );
        assert_eq!(
            impacts(&app, host_id).await,
            before,
            "nothing of the check-in is stored"
        );
    }
    // Values of the wrong shape (a negative number for the `reboot` flag, a count where a
    // list belongs, a negative number as a unit) are refused naming the field, too: the impact
    // has no count an agent could send negative, and anything not of its shape is refused.
    for (bad, field) in [
        (
            json!({"reboot": -1, "restarts": []}),
            "updates[1].impact.reboot",
        ),
        (
            json!({"reboot": false, "restarts": -3}),
            "updates[1].impact.restarts",
        ),
        (
            json!({"reboot": false, "restarts": [-1]}),
            "updates[1].impact.restarts[0]",
        ),
        (
            json!({"reboot": false, "installs": [{"name": "x", "version": -2}]}),
            "updates[1].impact.installs[0].version",
        ),
        (
            json!({"reboot": false, "removes": {"libssl3": 1}}),
            "updates[1].impact.removes",
        ),
    ] {
        let answer = check_in(
            &app,
            &agent,
            "two",
            json!([
                update("openssl", "3", Some(fine.clone())),
                update("curl", "2", Some(bad))
            ]),
        )
        .await;
        let problem = answer.assert_problem(400, "invalid-request");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with(&format!("{field}: "))),
            "{field}: {problem}"
        );
        assert_eq!(impacts(&app, host_id).await, before, "nothing stored");
    }
    app.stop().await;
}

#[tokio::test]
async fn labels_asked_at_enrolment_join_the_token_s_which_win() {
    let app = TestApp::new().await;
    let (_, _, token) = enrolled(&app).await;
    let mut agent = TestAgent::new("web-2");
    let answer = app
        .post_json(
            "/v1/agent/enroll",
            json!({"token": token, "csr": agent.csr(), "facts": agent.facts(),
                   "labels": {"env": "staging", "role": "web"}}),
        )
        .await;
    assert_eq!(answer.status.as_u16(), 201, "{}", answer.body);
    agent.host_id = answer.json()["host_id"].as_str().map(str::to_owned);
    let host_id = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    let labels: Vec<(String, String)> = host_labels::Entity::find()
        .filter(host_labels::Column::HostId.eq(host_id))
        .order_by_asc(host_labels::Column::Key)
        .all(&app.state.db.orm)
        .await
        .expect("labels")
        .into_iter()
        .map(|l| (l.key, l.value))
        .collect();
    assert_eq!(
        labels,
        vec![
            ("env".to_owned(), "prod".to_owned()),
            ("role".to_owned(), "web".to_owned())
        ]
    );

    // A key the service cannot select on: refused, and no host made.
    let hosts_before = hosts::Entity::find()
        .all(&app.state.db.orm)
        .await
        .expect("hosts")
        .len();
    let other = TestAgent::new("web-3");
    let answer = app
        .post_json(
            "/v1/agent/enroll",
            json!({"token": token, "csr": other.csr(), "facts": other.facts(),
                   "labels": {"bad key!": "x"}}),
        )
        .await;
    let problem = answer.assert_problem(400, "invalid-request");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("labels")),
        "{problem}"
    );
    assert_eq!(
        hosts::Entity::find()
            .all(&app.state.db.orm)
            .await
            .expect("hosts")
            .len(),
        hosts_before
    );
    app.stop().await;
}
