//! The web console (decisions §22): the operations its pages need (a host's packages and
//! updates, host counts, policy previews, mention completion, preflight on the detail) and
//! how the api serves the embedded console beside the API.

use chrono::Utc;
use domain::roles::Role;
use entities::known_exploited;
use reqwest::Method;
use sea_orm::{ActiveModelTrait, Set};
use serde_json::{Value, json};
use tests::{
    As, TestApp,
    agent::{Tamper, TestAgent},
};

use crate::proposals::{Fleet, text, update};

/// An organization `acme` with one host enrolled and checked in with an inventory of
/// `packages` and `updates`; the owner's session and the host's id.
async fn host_with_inventory(
    app: &TestApp,
    packages: Value,
    updates: Value,
) -> (tests::Session, String) {
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
    let token = text(&created.json()["token"]);
    let mut agent = TestAgent::new("web-1");
    let enrolled = agent.enroll(app, &token).await;
    assert_eq!(enrolled.status.as_u16(), 201, "{}", enrolled.body);
    let mut body = agent.check_in_body("inventory-1");
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
    (owner, agent.host_id.clone().unwrap_or_default())
}

/// Every page of `path` (which has no query yet) at `limit` a page, and how many pages.
async fn all_pages(app: &TestApp, who: As<'_>, path: &str, limit: u32) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let url = match &cursor {
            None => format!("{path}?limit={limit}"),
            Some(c) => format!("{path}?limit={limit}&cursor={c}"),
        };
        let answer = app.call(who, Method::GET, &url, None).await;
        assert_eq!(answer.status.as_u16(), 200, "{url}: {}", answer.body);
        let page = answer.json();
        pages += 1;
        items.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (items, pages),
        }
    }
}

fn package(name: &str, arch: &str, version: &str) -> Value {
    json!({"name": name, "arch": arch, "version": version, "source_name": format!("{name}-src")})
}

#[tokio::test]
async fn a_hosts_packages_page_by_name_and_architecture_and_search_by_name() {
    let app = TestApp::new().await;
    let (owner, host) = host_with_inventory(
        &app,
        json!([
            package("zlib1g", "amd64", "1.3"),
            package("curl", "amd64", "8.5.0"),
            package("libssl3", "i386", "3.0.13"),
            package("libssl3", "amd64", "3.0.13"),
            package("bash", "amd64", "5.2"),
        ]),
        json!([]),
    )
    .await;
    let path = format!("/v1/orgs/acme/hosts/{host}/packages");
    let (items, pages) = all_pages(&app, As::Session(&owner), &path, 2).await;
    let seen: Vec<(String, String)> = items
        .iter()
        .map(|p| (text(&p["name"]), text(&p["arch"])))
        .collect();
    let expected: Vec<(String, String)> = [
        ("bash", "amd64"),
        ("curl", "amd64"),
        ("libssl3", "amd64"),
        ("libssl3", "i386"),
        ("zlib1g", "amd64"),
    ]
    .iter()
    .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()))
    .collect();
    assert_eq!(seen, expected, "each package once, in order, across pages");
    assert_eq!(pages, 3);
    assert_eq!(items[1]["version"], "8.5.0");
    assert_eq!(items[1]["source_name"], "curl-src");

    let found = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("{path}?q=ssl"),
            None,
        )
        .await
        .json();
    let names: Vec<String> = found["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| text(&p["arch"]))
        .collect();
    assert_eq!(names, ["amd64", "i386"]);
    assert!(found["next_cursor"].is_null());

    app.call(
        As::Session(&owner),
        Method::GET,
        &format!("{path}?cursor=bm8tc2VwYXJhdG9y"),
        None,
    )
    .await
    .assert_problem(400, "invalid-request");
    app.stop().await;
}

#[tokio::test]
async fn a_hosts_updates_carry_their_advisories_and_known_exploited_flags() {
    let app = TestApp::new().await;
    known_exploited::ActiveModel {
        cve: Set("CVE-2014-0160".into()),
        added_at: Set(app.clock_now()),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("catalogue row");
    let heartbleed = json!([{"external_id": "USN-2165-1", "source": "usn", "severity": "medium",
        "title": "OpenSSL vulnerabilities", "cves": ["CVE-2014-0160"]}]);
    let minor = json!([{"external_id": "USN-9000-1", "source": "usn", "severity": "low",
        "cves": ["CVE-2026-0001"]}]);
    let (owner, host) = host_with_inventory(
        &app,
        json!([]),
        json!([
            update("openssl", "1.0.1f-1", "1.0.1f-2", heartbleed),
            update("curl", "8.5.0-1", "8.5.0-2", minor),
            update("vim", "9.1-1", "9.1-2", json!([])),
        ]),
    )
    .await;
    let path = format!("/v1/orgs/acme/hosts/{host}/updates");
    let all = app
        .call(As::Session(&owner), Method::GET, &path, None)
        .await
        .json();
    let items = all["items"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = items.iter().map(|u| text(&u["name"])).collect();
    assert_eq!(names, ["curl", "openssl", "vim"]);
    let openssl = &items[1];
    assert_eq!(openssl["from_version"], "1.0.1f-1");
    assert_eq!(openssl["to_version"], "1.0.1f-2");
    assert_eq!(openssl["security"], true);
    assert_eq!(openssl["advisories"][0]["id"], "usn:USN-2165-1");
    assert_eq!(openssl["advisories"][0]["known_exploited"], true);
    assert_eq!(items[0]["advisories"][0]["known_exploited"], false);
    assert_eq!(items[2]["advisories"], json!([]));

    let security = app
        .call(
            As::Session(&owner),
            Method::GET,
            &format!("{path}?security=true"),
            None,
        )
        .await
        .json();
    let names: Vec<String> = security["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| text(&u["name"]))
        .collect();
    assert_eq!(names, ["curl", "openssl"]);

    // Viewers read it; another organization's member does not learn the host exists.
    let viewer = app.member("acme", Role::Viewer, "viewer@acme.test").await;
    let read = app
        .call(As::Session(&viewer), Method::GET, &path, None)
        .await;
    assert_eq!(read.status.as_u16(), 200, "{}", read.body);
    let stranger = app.sign_up("owner@other.test", "other").await;
    for list in ["updates", "packages"] {
        app.call(
            As::Session(&stranger),
            Method::GET,
            &format!("/v1/orgs/other/hosts/{host}/{list}"),
            None,
        )
        .await
        .assert_problem(404, "not-found");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_host_count_follows_the_list_filters_coverage_and_group_source_included() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let web1 = app.host("acme", "web-1", &[("env", "prod")]).await;
    let web2 = app.host("acme", "web-2", &[("env", "prod")]).await;
    app.host("acme", "db-1", &[("env", "staging")]).await;
    let count = |query: &'static str| {
        let owner = &owner;
        let app = &app;
        async move {
            let answer = app
                .call(
                    As::Session(owner),
                    Method::GET,
                    &format!("/v1/orgs/acme/hosts/count{query}"),
                    None,
                )
                .await;
            assert_eq!(answer.status.as_u16(), 200, "{query}: {}", answer.body);
            answer.json()["count"].as_u64().unwrap_or(u64::MAX)
        }
    };
    assert_eq!(count("").await, 3);
    assert_eq!(count("?selector=env%3Dprod").await, 2);
    assert_eq!(count("?selector=env%3Dprod&q=web-2").await, 1);
    assert_eq!(count("?advisory_coverage=unknown_release").await, 3);
    assert_eq!(count("?advisory_coverage=covered").await, 0);
    let listed = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/hosts?advisory_coverage=covered",
            None,
        )
        .await
        .json();
    assert_eq!(listed["items"], json!([]));

    // A group with a selector and one static member: each source apart, and both together.
    let group = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/groups",
            Some(json!({"name": "prod", "selector": "env=prod"})),
        )
        .await;
    assert_eq!(group.status.as_u16(), 201, "{}", group.body);
    let group = text(&group.json()["id"]);
    app.run_pending_jobs().await;
    let set = app
        .call(
            As::Session(&owner),
            Method::PUT,
            &format!("/v1/orgs/acme/groups/{group}/hosts"),
            Some(json!({"hosts": [web1]})),
        )
        .await;
    assert_eq!(set.status.as_u16(), 200, "{}", set.body);
    let of = |source: &str| format!("/v1/orgs/acme/hosts?group={group}&group_source={source}");
    let ids = |page: Value| -> Vec<String> {
        let mut ids: Vec<String> = page["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| text(&h["id"]))
            .collect();
        ids.sort();
        ids
    };
    let statics = app
        .call(As::Session(&owner), Method::GET, &of("static"), None)
        .await;
    assert_eq!(ids(statics.json()), vec![web1.clone()]);
    let labelled = app
        .call(As::Session(&owner), Method::GET, &of("label"), None)
        .await;
    let mut both = vec![web1.clone(), web2.clone()];
    both.sort();
    assert_eq!(ids(labelled.json()), both);
    app.call(
        As::Session(&owner),
        Method::GET,
        "/v1/orgs/acme/hosts/count?group_source=static",
        None,
    )
    .await
    .assert_problem(400, "invalid-request");
    app.call(
        As::Session(&owner),
        Method::GET,
        "/v1/orgs/acme/hosts/count?selector=env%3D%3D",
        None,
    )
    .await
    .assert_problem(400, "invalid-request");
    app.stop().await;
}

#[tokio::test]
async fn a_policy_preview_counts_live_hosts_in_scope_and_lists_five_openings() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    app.host("acme", "web-1", &[("env", "prod")]).await;
    app.host("acme", "web-2", &[("env", "prod")]).await;
    app.host("acme", "db-1", &[("env", "staging")]).await;
    let preview = |body: Value| {
        let owner = &owner;
        let app = &app;
        async move {
            app.call(
                As::Session(owner),
                Method::POST,
                "/v1/orgs/acme/policies/preview",
                Some(body),
            )
            .await
        }
    };
    let daily = json!({"rrule": "FREQ=DAILY;BYHOUR=2;BYMINUTE=0", "duration_minutes": 60,
        "time_zone": "Europe/Berlin"});
    let answer = preview(json!({"scope": {"selector": "env=prod"}, "window": daily})).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["hosts"], 2);
    let openings: Vec<chrono::DateTime<Utc>> = body["openings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str())
        .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .collect();
    assert_eq!(openings.len(), 5);
    let now = app.clock_now();
    assert!(openings[0] >= now, "{openings:?} after {now}");
    for pair in openings.windows(2) {
        assert_eq!(pair[1] - pair[0], chrono::Duration::days(1), "{openings:?}");
    }
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().expect("zone");
    assert!(
        openings
            .iter()
            .all(|o| o.with_timezone(&berlin).format("%H:%M").to_string() == "02:00"),
        "02:00 in Berlin: {openings:?}"
    );

    let everything = preview(json!({"scope": {}})).await.json();
    assert_eq!(everything["hosts"], 3);
    assert_eq!(everything["openings"], json!([]));

    // The same checks as a policy: a window that never fires, an unknown group.
    preview(
        json!({"scope": {}, "window": {"rrule": "FREQ=DAILY;UNTIL=20000101T000000Z",
        "duration_minutes": 60, "time_zone": "UTC"}}),
    )
    .await
    .assert_problem(400, "invalid-request");
    preview(json!({"scope": {"groups": ["grp_0000000000000000000000000a"]}}))
        .await
        .assert_problem(400, "invalid-request");

    // A saved policy shows its own next openings.
    let created = app
        .call(
            As::Session(&owner),
            Method::POST,
            "/v1/orgs/acme/policies",
            Some(
                json!({"name": "nightly", "scope": {"groups": []}, "required_approvals": 1,
                "apply": "asap_in_window", "reboot": "never", "auto_merge": false,
                "updates": "all", "window": daily}),
            ),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let saved = created.json();
    assert_eq!(
        saved["window"]["openings"].as_array().map(Vec::len),
        Some(5)
    );
    assert_eq!(
        saved["window"]["openings"][0], saved["window"]["next_opening"],
        "the first opening is the next one (the window is shut at 02:00 ± 1 h only)"
    );
    app.stop().await;
}

#[tokio::test]
async fn mention_completion_searches_members_for_those_who_may_comment() {
    let app = TestApp::new().await;
    let owner = app.sign_up("owner@acme.test", "acme").await;
    let operator = app.member("acme", Role::Operator, "ada@acme.test").await;
    app.member("acme", Role::Viewer, "grace@acme.test").await;
    let viewer = app.member("acme", Role::Viewer, "linus@acme.test").await;
    app.sign_up("ada@other.test", "other").await;

    let search = |q: &str| format!("/v1/orgs/acme/mentionable?q={q}");
    let found = app
        .call(As::Session(&operator), Method::GET, &search("ADA"), None)
        .await;
    assert_eq!(found.status.as_u16(), 200, "{}", found.body);
    let emails: Vec<String> = found.json()["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| text(&p["email"]))
        .collect();
    assert_eq!(
        emails,
        ["ada@acme.test"],
        "case-insensitive, this organization only"
    );
    let by_name = app
        .call(
            As::Session(&owner),
            Method::GET,
            &search("viewer%20mem"),
            None,
        )
        .await
        .json();
    assert_eq!(
        by_name["items"].as_array().map(Vec::len),
        Some(2),
        "{by_name}"
    );
    let wildcard = app
        .call(As::Session(&owner), Method::GET, &search("%25"), None)
        .await
        .json();
    assert_eq!(
        wildcard["items"],
        json!([]),
        "% is a character, not a wildcard"
    );
    let everyone = app
        .call(
            As::Session(&owner),
            Method::GET,
            "/v1/orgs/acme/mentionable",
            None,
        )
        .await
        .json();
    assert_eq!(everyone["items"].as_array().map(Vec::len), Some(4));

    app.call(As::Session(&viewer), Method::GET, &search("ada"), None)
        .await
        .assert_problem(403, "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn the_proposal_detail_says_what_preflight_would_refuse() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let (_, id) = fleet.one_proposal(1).await;
    assert_eq!(fleet.detail(&id).await["preflight"], json!([]));

    let curl = json!([update("curl", "1", "2", json!([]))]);
    let agent = fleet.host("db-1", curl.clone(), json!({})).await;
    let mut facts = agent.facts();
    facts["agent_permissions"] = json!(["read_inventory"]);
    fleet.report(&agent, curl, json!({ "facts": facts })).await;
    let list = fleet.until(|l| l.len() == 1 && l[0]["hosts"] == 2).await;
    let detail = fleet.detail(&text(&list[0]["id"])).await;
    assert_eq!(
        detail["preflight"],
        json!(["db-1's agent does not permit apply_updates"])
    );
    app.stop().await;
}

#[tokio::test]
async fn the_console_is_served_beside_the_api_under_a_strict_policy() {
    let app = TestApp::new().await;
    let index = app.get("/").await;
    assert_eq!(index.status.as_u16(), 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = index.header("content-security-policy").unwrap_or_default();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(index.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(index.header("cache-control"), Some("no-cache"));
    assert!(index.header("x-request-id").is_some());
    // No inline script: every <script> names a file.
    let scripts: Vec<&str> = index.body.split("<script").skip(1).collect();
    assert!(!scripts.is_empty(), "{}", index.body);
    for tag in &scripts {
        let open = tag.split('>').next().unwrap_or_default();
        assert!(open.contains("src=\"/assets/"), "inline script: {open}");
    }

    // The emailed links and the app's own routes load the same page.
    for path in [
        "/sign-in/verify?token=abc",
        "/sign-up/verify?token=abc",
        "/invitations/accept?token=abc",
        "/orgs/acme/proposals/prp_0000000000000000000000000a",
    ] {
        let page = app.get(path).await;
        assert_eq!(page.status.as_u16(), 200, "{path}");
        assert_eq!(page.body, index.body, "{path}");
    }

    // The hashed script: long cache, its content type, gzip when asked for.
    let script = scripts[0]
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_default()
        .to_owned();
    let asset = app.get(&script).await;
    assert_eq!(asset.status.as_u16(), 200, "{script}");
    assert_eq!(
        asset.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(
        asset.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let compressed = app
        .request(
            Method::GET,
            &script,
            None,
            &[("accept-encoding", "gzip, br")],
        )
        .await;
    assert_eq!(compressed.header("content-encoding"), Some("gzip"));
    let etag = asset.header("etag").unwrap_or_default().to_owned();
    let again = app
        .request(Method::GET, &script, None, &[("if-none-match", &etag)])
        .await;
    assert_eq!(again.status.as_u16(), 304);

    // The API keeps its answers: unknown API paths and missing assets are problem 404s.
    for path in [
        "/v1/nothing-here",
        "/assets/missing-0000.js",
        "/scim/v2/Nope",
    ] {
        let answer = app.get(path).await;
        assert_eq!(answer.status.as_u16(), 404, "{path}");
        assert!(
            answer.header("content-security-policy").is_none(),
            "{path} is not the console's"
        );
    }
    app.get("/v1/nothing-here")
        .await
        .assert_problem(404, "not-found");
    assert_eq!(app.get("/healthz").await.status.as_u16(), 200);
    assert!(app.get("/docs").await.body.contains("swagger"));
    app.post_json("/", json!({}))
        .await
        .assert_problem(404, "not-found");
    app.stop().await;
}
