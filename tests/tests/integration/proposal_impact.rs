//! Impact before approval (issue 32, decisions §21): hosts reporting different impacts give the
//! proposal detail's summary (hosts rebooting, unknown, units restarting, packages installed and
//! removed, most hosts first), each target's own impact and the per-host page; a host whose
//! agent does not say is unknown, never "no impact"; a removal and a unit restarting on more
//! than half the hosts are warnings, in the detail, in `proposal.opened` on every kind of
//! channel, and in the digest.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, TestApp, receiver::Receiver};

const WAIT: Duration = Duration::from_secs(20);

use crate::proposals::{Fleet, text, update};

/// `update` with the impact its agent reported.
fn with_impact(mut update: Value, impact: Value) -> Value {
    update["impact"] = impact;
    update
}

fn restarts(units: &[&str]) -> Value {
    json!({"reboot": false, "restarts": units, "installs": [], "removes": []})
}

/// openssl 3.0.13-0ubuntu3.1 → 3.0.13-0ubuntu3.4 on each host, with what each host's agent said
/// it would do, and a kernel update on web-1 that reboots it.
async fn fleet_with_impacts(fleet: &Fleet<'_>) {
    let openssl = || {
        update(
            "openssl",
            "3.0.13-0ubuntu3.1",
            "3.0.13-0ubuntu3.4",
            json!([]),
        )
    };
    let web = json!({"reboot": false, "restarts": ["nginx.service", "ssh.service"],
                     "installs": [{"name": "libssl3t64", "version": "3.0.13-0ubuntu3.4"}],
                     "removes": ["libssl3"]});
    let kernel = with_impact(
        update(
            "linux-image-generic",
            "6.8.0.40.40",
            "6.8.0.41.41",
            json!([]),
        ),
        json!({"reboot": true, "restarts": [], "installs": [
            {"name": "linux-image-6.8.0-41-generic", "version": "6.8.0-41.41"}], "removes": []}),
    );
    fleet
        .host(
            "web-1",
            json!([with_impact(openssl(), web.clone()), kernel]),
            json!({}),
        )
        .await;
    fleet
        .host("web-2", json!([with_impact(openssl(), web)]), json!({}))
        .await;
    fleet
        .host(
            "db-1",
            json!([with_impact(
                openssl(),
                restarts(&["postgresql@16-main.service", "ssh.service"])
            )]),
            json!({}),
        )
        .await;
    // An agent that does not work impacts out: unknown.
    fleet.host("old-1", json!([openssl()]), json!({})).await;
}

fn policy() -> Value {
    json!({"name": "everything", "scope": {"groups": []}, "required_approvals": 1,
           "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all"})
}

/// A summary list as (name, hosts).
fn counted(list: &Value, name: &str) -> Vec<(String, i64)> {
    list.as_array()
        .map(|l| {
            l.iter()
                .map(|c| (text(&c[name]), c["hosts"].as_i64().unwrap_or(-1)))
                .collect()
        })
        .unwrap_or_default()
}

fn owned(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    list.iter().map(|(n, h)| ((*n).to_owned(), *h)).collect()
}

/// Every host's impact from the per-host view, a page of `limit` at a time: hostname → impact.
async fn per_host(
    app: &TestApp,
    fleet: &Fleet<'_>,
    id: &str,
    limit: usize,
) -> (Vec<(String, Value)>, usize) {
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut cursor = String::new();
    loop {
        let page = app
            .call(
                As::Session(&fleet.owner),
                Method::GET,
                &format!("/v1/orgs/acme/proposals/{id}/impact?limit={limit}&cursor={cursor}"),
                None,
            )
            .await;
        assert_eq!(page.status.as_u16(), 200, "{}", page.body);
        let page = page.json();
        pages += 1;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        assert!(items.len() <= limit);
        for item in items {
            seen.push((text(&item["hostname"]), item["impact"].clone()));
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    (seen, pages)
}

#[tokio::test]
async fn hosts_reporting_different_impacts_give_the_summary_each_host_s_impact_and_the_unknown_hosts()
 {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    fleet_with_impacts(&fleet).await;
    fleet.policy(policy()).await;
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);
    let detail = fleet.detail(&id).await;
    let impact = &detail["impact"];
    assert_eq!(
        (
            impact["hosts"].as_i64(),
            impact["hosts_rebooting"].as_i64(),
            impact["hosts_unknown"].as_i64()
        ),
        (Some(4), Some(1), Some(1)),
        "{impact:#}"
    );
    assert_eq!(
        counted(&impact["restarts"], "unit"),
        owned(&[
            ("ssh.service", 3),
            ("nginx.service", 2),
            ("postgresql@16-main.service", 1)
        ]),
        "most hosts first, then by name"
    );
    assert_eq!(
        counted(&impact["installs"], "name"),
        owned(&[("libssl3t64", 2), ("linux-image-6.8.0-41-generic", 1)])
    );
    assert_eq!(
        counted(&impact["removes"], "name"),
        owned(&[("libssl3", 2)])
    );
    assert_eq!(impact["restarts_total"], 3);
    assert_eq!(
        detail["warnings"],
        json!([
            "Removes the package libssl3 on 2 of 4 hosts.",
            "Restarts ssh.service on 3 of 4 hosts, more than half of them at once."
        ]),
        "nginx on exactly half is not called out"
    );

    // Each target carries its own impact.
    let targets = detail["targets"].as_array().cloned().unwrap_or_default();
    assert_eq!(targets.len(), 4);
    let target = |name: &str| {
        targets
            .iter()
            .find(|t| t["hostname"] == name)
            .map(|t| t["impact"].clone())
            .unwrap_or_default()
    };
    assert_eq!(
        target("web-1"),
        json!({"known": true, "reboot": true, "restarts": ["nginx.service", "ssh.service"],
               "installs": [{"name": "libssl3t64", "version": "3.0.13-0ubuntu3.4"},
                            {"name": "linux-image-6.8.0-41-generic", "version": "6.8.0-41.41"}],
               "removes": ["libssl3"]})
    );
    assert_eq!(
        target("old-1"),
        json!({"known": false, "reboot": false, "restarts": [], "installs": [], "removes": []}),
        "an agent that did not say is unknown, not without impact"
    );

    // The per-host view, two hosts a page, agrees with the targets.
    let (hosts, pages) = per_host(&app, &fleet, &id, 2).await;
    assert_eq!(pages, 2);
    let names: Vec<&str> = hosts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["db-1", "old-1", "web-1", "web-2"]);
    for (name, impact) in &hosts {
        assert_eq!(impact, &target(name), "{name}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_summary_follows_what_hosts_report_and_an_agent_that_stops_saying_is_unknown_again() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let openssl = || update("openssl", "1", "2", json!([]));
    let quiet = fleet
        .host(
            "web-1",
            json!([with_impact(openssl(), restarts(&[]))]),
            json!({}),
        )
        .await;
    fleet.policy(policy()).await;
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["impact"]["hosts_unknown"], 0);
    assert_eq!(detail["impact"]["hosts_rebooting"], 0);
    assert_eq!(detail["warnings"], json!([]));
    assert_eq!(detail["targets"][0]["impact"]["known"], true);

    // The agent now says the update removes a package: the same proposal, warned.
    fleet
        .report(
            &quiet,
            json!([with_impact(
                openssl(),
                json!({"reboot": false, "restarts": [], "installs": [], "removes": ["legacy-tls"]})
            )]),
            json!({}),
        )
        .await;
    let list = fleet.until(|l| l.len() == 1).await;
    assert_eq!(text(&list[0]["id"]), id, "the proposal follows its hosts");
    let detail = fleet.detail(&id).await;
    assert_eq!(
        counted(&detail["impact"]["removes"], "name"),
        owned(&[("legacy-tls", 1)])
    );
    assert_eq!(
        detail["warnings"],
        json!(["Removes the package legacy-tls on 1 of 1 host.",])
    );

    // It stops saying: unknown, not the impact it said before.
    fleet.report(&quiet, json!([openssl()]), json!({})).await;
    fleet.until(|l| l.len() == 1).await;
    let detail = fleet.detail(&id).await;
    assert_eq!(detail["impact"]["hosts_unknown"], 1);
    assert_eq!(detail["impact"]["removes"], json!([]));
    assert_eq!(detail["warnings"], json!([]));
    assert_eq!(detail["targets"][0]["impact"]["known"], false);
    app.stop().await;
}

#[tokio::test]
async fn a_removal_and_a_unit_restarting_on_most_hosts_are_warned_in_the_detail_and_proposal_opened_on_every_kind_of_channel()
 {
    let receiver = Receiver::start().await;
    let app = TestApp::builder()
        .pagerduty_events_url(&receiver.url("/pagerduty"))
        .start()
        .await;
    let fleet = Fleet::new(&app).await;
    for (kind, config) in [
        ("webhook", json!({"url": receiver.url("/webhook")})),
        ("slack", json!({"webhook_url": receiver.url("/slack")})),
        ("teams", json!({"webhook_url": receiver.url("/teams")})),
        ("ntfy", json!({"topic_url": receiver.url("/ntfy")})),
        ("pagerduty", json!({"routing_key": "R0123456789abcdef"})),
        ("email", json!({"to": ["owner@acme.test"]})),
    ] {
        let made = app
            .call(
                As::Session(&fleet.owner),
                Method::POST,
                "/v1/orgs/acme/notification-channels",
                Some(
                    json!({"kind": kind, "name": kind, "events": ["proposal.opened"],
                            "config": config}),
                ),
            )
            .await;
        assert_eq!(made.status.as_u16(), 201, "{kind}: {}", made.body);
    }
    fleet_with_impacts(&fleet).await;
    fleet.policy(policy()).await;
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);
    let detail = fleet.detail(&id).await;
    let warnings = detail["warnings"].clone();
    assert_eq!(warnings.as_array().map(Vec::len), Some(2), "{warnings}");
    app.run_pending_jobs().await;
    let got = receiver.wait_for(5, WAIT).await;
    let at = |path: &str| {
        got.iter()
            .find(|r| r.path == path)
            .unwrap_or_else(|| panic!("nothing at {path}"))
    };

    // The webhook: the detail's warnings and impact summary, as data.
    let webhook = at("/webhook").json();
    assert_eq!(webhook["type"], "proposal.opened");
    let proposal = &webhook["data"]["proposal"];
    assert_eq!(proposal["id"], json!(id));
    assert_eq!(proposal["warnings"], warnings);
    assert_eq!(proposal["impact"]["hosts_rebooting"], 1);
    assert_eq!(proposal["impact"]["hosts_unknown"], 1);
    assert_eq!(
        counted(&proposal["impact"]["removes"], "name"),
        owned(&[("libssl3", 2)])
    );
    assert_eq!(
        counted(&proposal["impact"]["restarts"], "unit"),
        counted(&detail["impact"]["restarts"], "unit")
    );

    // Chat, push, paging and email: the warnings in their words.
    let removal = "Removes the package libssl3 on 2 of 4 hosts.";
    let restart = "Restarts ssh.service on 3 of 4 hosts, more than half of them at once.";
    let slack = at("/slack").json();
    assert!(
        slack["blocks"][1]["text"]["text"]
            .as_str()
            .is_some_and(|t| t.contains(removal) && t.contains(restart)),
        "{slack}"
    );
    let teams = at("/teams").json();
    let card = teams["attachments"][0]["content"]["body"].to_string();
    assert!(card.contains(removal) && card.contains(restart), "{card}");
    let ntfy = at("/ntfy");
    assert!(ntfy.text().contains(removal), "{}", ntfy.text());
    assert_eq!(ntfy.header("priority"), Some("4"));
    let pagerduty = at("/pagerduty").json();
    assert!(
        pagerduty["payload"]["summary"]
            .as_str()
            .is_some_and(|t| t.contains(removal)),
        "{pagerduty}"
    );
    assert_eq!(
        pagerduty["payload"]["custom_details"]["proposal"]["warnings"],
        warnings
    );
    let email = app
        .smtp
        .messages()
        .await
        .into_iter()
        .find(|m| m.header("Subject").is_some_and(|s| s.contains("opened")))
        .expect("the opened email");
    assert!(
        email.text().contains(&format!("- {removal}")),
        "{}",
        email.text()
    );
    app.stop().await;
}

#[tokio::test]
async fn the_digest_lists_an_undecided_proposal_with_its_warnings() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    let set = app
        .call(
            As::Session(&fleet.owner),
            Method::PUT,
            "/v1/orgs/acme/digest",
            Some(json!({"frequency": "daily"})),
        )
        .await;
    assert_eq!(set.status.as_u16(), 200, "{}", set.body);
    fleet_with_impacts(&fleet).await;
    fleet.policy(policy()).await;
    fleet.until(|l| l.len() == 1).await;
    let morning = app.clock_now().date_naive().succ_opt().expect("a next day");
    let now = morning.and_hms_opt(8, 0, 0).expect("08:00").and_utc();
    app.clock.set(now);
    let scheduler =
        scheduler::Scheduler::new(app.state.db.clone(), std::sync::Arc::new(app.clock.clone()));
    scheduler.tick(now).await.expect("tick");
    app.run_pending_jobs().await;
    let digest = app
        .smtp
        .messages()
        .await
        .into_iter()
        .find(|m| m.header("Subject").is_some_and(|s| s.contains("digest")))
        .expect("the digest");
    let text = digest.text();
    assert!(text.contains("Awaiting your approval (1)"), "{text}");
    assert!(
        text.contains("Warning: Removes the package libssl3 on 2 of 4 hosts."),
        "{text}"
    );
    assert!(
        text.contains(
            "Warning: Restarts ssh.service on 3 of 4 hosts, more than half of them at once."
        ),
        "{text}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_per_host_view_refuses_a_bad_cursor_and_another_organization_s_proposal() {
    let app = TestApp::new().await;
    let fleet = Fleet::new(&app).await;
    fleet
        .host(
            "web-1",
            json!([update("curl", "1", "2", json!([]))]),
            json!({}),
        )
        .await;
    fleet.policy(policy()).await;
    let id = text(&fleet.until(|l| l.len() == 1).await[0]["id"]);
    let bad = app
        .call(
            As::Session(&fleet.owner),
            Method::GET,
            &format!("/v1/orgs/acme/proposals/{id}/impact?cursor=nope"),
            None,
        )
        .await;
    bad.assert_problem(400, "invalid-request");
    let too_many = app
        .call(
            As::Session(&fleet.owner),
            Method::GET,
            &format!("/v1/orgs/acme/proposals/{id}/impact?limit=501"),
            None,
        )
        .await;
    too_many.assert_problem(400, "invalid-request");
    let other = Fleet::new_named(&app, "globex").await;
    let foreign = app
        .call(
            As::Session(&other.owner),
            Method::GET,
            &format!("/v1/orgs/globex/proposals/{id}/impact"),
            None,
        )
        .await;
    foreign.assert_problem(404, "not-found");
    app.stop().await;
}
