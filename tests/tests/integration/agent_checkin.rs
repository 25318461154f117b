//! The check-in's hot path (issue 15): a key the api remembers is still refused from the very
//! next request on once another process revokes it or decommissions its host, `last_seen_at`
//! is written at most once a minute while facts are written when they change, and an
//! inventory compared by its stored fingerprints is stored exactly as reported, also when the
//! fingerprints are missing.

use chrono::Duration;
use entities::{host_inventories, host_keys, host_packages, host_updates, hosts};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, sea_query::Expr};
use serde_json::{Value, json};
use tests::{
    As, TestApp,
    agent::{Tamper, TestAgent},
};
use uuid::Uuid;

/// An organization `acme` and one of its hosts, enrolled and checked in once (so that the api
/// remembers its key).
async fn checked_in() -> (TestApp, TestAgent, Uuid) {
    let app = TestApp::new().await;
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
    let token = created.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut agent = TestAgent::new("web-1");
    let enrolled = agent.enroll(&app, &token).await;
    assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
    let host_id = platform::ids::HostId::parse(agent.host_id.as_deref().unwrap_or_default())
        .map(platform::ids::HostId::uuid)
        .expect("host id");
    let first = agent.check_in(&app, "d1").await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.body);
    assert!(!app.state.agent_keys.is_empty(), "the key is remembered");
    (app, agent, host_id)
}

async fn host(app: &TestApp, host_id: Uuid) -> hosts::Model {
    hosts::Entity::find_by_id(host_id)
        .one(&app.state.db.orm)
        .await
        .expect("read")
        .expect("the host")
}

#[tokio::test]
async fn a_key_revoked_by_another_process_is_refused_on_the_next_request() {
    let (app, agent, host_id) = checked_in().await;
    app.clock.advance(Duration::seconds(5));
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    // What another api process's revocation amounts to here: a committed write this process's
    // cache never heard of.
    host_keys::Entity::update_many()
        .col_expr(
            host_keys::Column::RevokedAt,
            Expr::value(Some(app.clock_now())),
        )
        .filter(host_keys::Column::HostId.eq(host_id))
        .exec(&app.state.db.orm)
        .await
        .expect("revoked");
    agent
        .check_in(&app, "d1")
        .await
        .assert_problem(401, "unauthenticated");
    agent
        .check_in(&app, "d1")
        .await
        .assert_problem(401, "unauthenticated");
    app.stop().await;
}

#[tokio::test]
async fn a_host_decommissioned_by_another_process_is_refused_on_the_next_request() {
    let (app, agent, host_id) = checked_in().await;
    hosts::Entity::update_many()
        .col_expr(
            hosts::Column::DecommissionedAt,
            Expr::value(Some(app.clock_now())),
        )
        .filter(hosts::Column::Id.eq(host_id))
        .exec(&app.state.db.orm)
        .await
        .expect("decommissioned");
    agent
        .check_in(&app, "d1")
        .await
        .assert_problem(401, "unauthenticated");
    app.stop().await;
}

#[tokio::test]
async fn a_remembered_key_still_refuses_replays_and_bad_signatures() {
    let (app, agent, _) = checked_in().await;
    let body = agent.check_in_body("d1");
    let now = app.clock_now();
    let once = agent
        .post_with_nonce(&app, "/v1/agent/check-in", &body, now, Tamper::None, "n-1")
        .await;
    assert_eq!(once.status.as_u16(), 200, "{}", once.body);
    agent
        .post_with_nonce(&app, "/v1/agent/check-in", &body, now, Tamper::None, "n-1")
        .await
        .assert_problem(401, "unauthenticated");
    // A replay does not make the key forgotten, and the key still works with a new nonce.
    assert!(!app.state.agent_keys.is_empty());
    let fresh = agent
        .post_with_nonce(&app, "/v1/agent/check-in", &body, now, Tamper::None, "n-2")
        .await;
    assert_eq!(fresh.status.as_u16(), 200, "{}", fresh.body);
    // Another key's signature under this key's id.
    let mut impostor = TestAgent::new("web-1");
    impostor.key_id = agent.key_id.clone();
    impostor.machine_id = agent.machine_id.clone();
    impostor
        .check_in(&app, "d1")
        .await
        .assert_problem(401, "unauthenticated");
    app.stop().await;
}

#[tokio::test]
async fn last_seen_is_written_once_a_minute_and_changed_facts_at_once() {
    let (app, mut agent, host_id) = checked_in().await;
    let seen = host(&app, host_id).await.last_seen_at;
    assert_eq!(seen, Some(app.clock_now()));

    app.clock.advance(Duration::seconds(30));
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    let row = host(&app, host_id).await;
    assert_eq!(row.last_seen_at, seen, "not rewritten within the minute");
    assert_eq!(row.status, "online");

    // New facts are written at once, the minute notwithstanding.
    app.clock.advance(Duration::seconds(10));
    agent.hostname = "web-1-renamed".into();
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    let row = host(&app, host_id).await;
    assert_eq!(row.hostname, "web-1-renamed");
    assert_eq!(row.last_seen_at, seen);

    app.clock.advance(Duration::seconds(21));
    assert_eq!(agent.check_in(&app, "d1").await.status.as_u16(), 200);
    assert_eq!(
        host(&app, host_id).await.last_seen_at,
        Some(app.clock_now()),
        "a minute after the last write"
    );
    app.stop().await;
}

async fn send(app: &TestApp, agent: &TestAgent, digest: &str, packages: Value, updates: Value) {
    let mut body = agent.check_in_body(digest);
    body["packages"] = packages;
    body["updates"] = updates;
    let answer = agent
        .post(
            app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    assert_eq!(answer.json()["send_inventory"], false);
}

async fn stored(app: &TestApp, host_id: Uuid) -> (Vec<(String, String, String)>, Vec<Value>) {
    let packages = host_packages::Entity::find()
        .filter(host_packages::Column::HostId.eq(host_id))
        .order_by_asc(host_packages::Column::Name)
        .order_by_asc(host_packages::Column::Arch)
        .all(&app.state.db.orm)
        .await
        .expect("packages")
        .into_iter()
        .map(|p| (p.name, p.arch, p.version))
        .collect();
    let updates = host_updates::Entity::find()
        .filter(host_updates::Column::HostId.eq(host_id))
        .order_by_asc(host_updates::Column::Name)
        .all(&app.state.db.orm)
        .await
        .expect("updates")
        .into_iter()
        .map(|u| {
            json!({"name": u.name, "to": u.to_version, "security": u.security,
                   "advisories": u.advisories.as_str()})
        })
        .collect();
    (packages, updates)
}

#[tokio::test]
async fn inventories_compared_by_fingerprint_are_stored_exactly_as_reported() {
    let (app, agent, host_id) = checked_in().await;
    let package = |name: &str, version: &str, source: Option<&str>| json!({"name": name, "version": version, "arch": "amd64", "source_name": source});
    let update = |name: &str, to: &str, advisory: Option<&str>| {
        let advisories: Vec<Value> = advisory
            .map(|id| json!({"external_id": id, "source": "usn"}))
            .into_iter()
            .collect();
        json!({"name": name, "arch": "amd64", "from_version": "1", "to_version": to,
               "ecosystem": "deb", "security": advisory.is_some(), "advisories": advisories})
    };
    send(
        &app,
        &agent,
        "one",
        json!([
            package("a", "1", None),
            package("b", "1", None),
            package("c", "1", Some("c-src"))
        ]),
        json!([update("a", "2", None), update("b", "2", None)]),
    )
    .await;
    let index = host_inventories::Entity::find_by_id(host_id)
        .one(&app.state.db.orm)
        .await
        .expect("read")
        .expect("fingerprints written with the rows");
    assert!(index.packages.is_some() && index.updates.is_some());

    // a's version, c's source (same version) and b's update's advisories change; b goes, d
    // comes: compared by the fingerprints alone.
    send(
        &app,
        &agent,
        "two",
        json!([
            package("a", "2", None),
            package("c", "1", Some("c-other")),
            package("d", "1", None)
        ]),
        json!([update("a", "2", None), update("b", "2", Some("USN-1"))]),
    )
    .await;
    let (packages, updates) = stored(&app, host_id).await;
    let own = |n: &str, v: &str| (n.to_owned(), "amd64".to_owned(), v.to_owned());
    assert_eq!(packages, vec![own("a", "2"), own("c", "1"), own("d", "1")]);
    let sources: Vec<Option<String>> = host_packages::Entity::find()
        .filter(host_packages::Column::HostId.eq(host_id))
        .filter(host_packages::Column::Name.eq("c"))
        .all(&app.state.db.orm)
        .await
        .expect("c")
        .into_iter()
        .map(|p| p.source_name)
        .collect();
    assert_eq!(sources, vec![Some("c-other".to_owned())]);
    assert_eq!(updates.len(), 2);
    assert_eq!(updates[1]["security"], true, "{updates:?}");
    assert!(
        updates[1]["advisories"]
            .as_str()
            .is_some_and(|a| a.contains("USN-1")),
        "{updates:?}"
    );

    // Without fingerprints (an inventory stored before they existed) the rows are read and
    // compared instead, and the fingerprints written.
    host_inventories::Entity::delete_by_id(host_id)
        .exec(&app.state.db.orm)
        .await
        .expect("forgotten");
    send(
        &app,
        &agent,
        "three",
        json!([package("a", "3", None), package("d", "1", None)]),
        json!([update("a", "3", None)]),
    )
    .await;
    let (packages, updates) = stored(&app, host_id).await;
    assert_eq!(packages, vec![own("a", "3"), own("d", "1")]);
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0]["to"], "3");
    assert!(
        host_inventories::Entity::find_by_id(host_id)
            .one(&app.state.db.orm)
            .await
            .expect("read")
            .is_some_and(|i| i.packages.is_some() && i.updates.is_some())
    );

    // Packages alone: the updates stay as they were.
    let mut body = agent.check_in_body("four");
    body["packages"] = json!([package("a", "3", None)]);
    let answer = agent
        .post(
            &app,
            "/v1/agent/check-in",
            &body,
            app.clock_now(),
            Tamper::None,
        )
        .await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    let (packages, updates) = stored(&app, host_id).await;
    assert_eq!(packages, vec![own("a", "3")]);
    assert_eq!(updates.len(), 1);
    app.stop().await;
}
