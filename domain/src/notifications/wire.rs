//! What each kind of channel receives (decisions §8 and §14): the same event, summarized once
//! ([`summarize`]), then shaped per kind: Slack `{text, blocks}`, a Teams message carrying an
//! Adaptive Card, ntfy plain text with `Title`/`Tags`/`Priority`/`Click` headers, PagerDuty
//! Events API v2, an email, or a Standard Webhooks request `{type, timestamp, data}`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{EventKind, config::ChannelConfig, signing};

/// An event as a delivery sends it.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub kind: EventKind,
    /// The public id of what it is about (PagerDuty's `dedup_key`).
    pub subject: Option<&'a str>,
    /// The event's `data`, with its `url` filled in.
    pub data: &'a Value,
    pub occurred_at: DateTime<Utc>,
}

/// The words every kind of channel shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub title: String,
    pub text: String,
    pub url: Option<String>,
    /// ntfy tags (emoji short codes).
    pub tags: &'static str,
    /// ntfy priority, 1 (min) to 5 (max).
    pub priority: u8,
    /// What an approver should not miss (decisions §21: a removal, a unit restarting on more
    /// than half the hosts), one sentence each; shown apart from `text` by every kind.
    pub warnings: Vec<String>,
}

fn text_at<'a>(data: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(data, |v, key| v.get(key))
        .and_then(Value::as_str)
}

/// Summarizes an event for people.
pub fn summarize(event: &Event<'_>) -> Summary {
    let data = event.data;
    let org = text_at(data, &["organization", "name"]).unwrap_or("your organization");
    let number = data
        .pointer("/proposal/number")
        .and_then(Value::as_i64)
        .map(|n| format!("#{n}"))
        .unwrap_or_default();
    let proposal_title = text_at(data, &["proposal", "title"]).unwrap_or("");
    let host = text_at(data, &["host", "display_name"])
        .or_else(|| text_at(data, &["host", "hostname"]))
        .unwrap_or("a host");
    let hosts = data.pointer("/proposal/hosts").and_then(Value::as_i64);
    let proposal_detail = || {
        let mut parts = Vec::new();
        if let Some(hosts) = hosts {
            parts.push(format!("{hosts} host{}", if hosts == 1 { "" } else { "s" }));
        }
        if let Some(severity) = text_at(data, &["proposal", "max_severity"]) {
            parts.push(format!("severity {severity}"));
        }
        if data.pointer("/proposal/known_exploited") == Some(&Value::Bool(true)) {
            parts.push("fixes a known exploited vulnerability".into());
        }
        parts.join(", ")
    };
    let warnings: Vec<String> = data
        .pointer("/proposal/warnings")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let (title, text, tags, priority) = match event.kind {
        EventKind::ProposalOpened => (
            format!("Proposal {number} opened: {proposal_title}"),
            format!(
                "A new proposal in {org} awaits approval ({}).{}",
                proposal_detail(),
                impact_sentence(data)
            ),
            if warnings.is_empty() {
                "package"
            } else {
                "package,warning"
            },
            if warnings.is_empty() { 3 } else { 4 },
        ),
        EventKind::ProposalApproved => (
            format!("Proposal {number} approved: {proposal_title}"),
            format!(
                "The change goes ahead now in {org} ({}).",
                proposal_detail()
            ),
            "white_check_mark",
            3,
        ),
        EventKind::ProposalScheduled => {
            let when = text_at(data, &["proposal", "scheduled_for"]).unwrap_or("the next window");
            (
                format!("Proposal {number} scheduled: {proposal_title}"),
                format!(
                    "Approved in {org}; it goes ahead when the maintenance window opens at {when}."
                ),
                "calendar",
                3,
            )
        }
        EventKind::ProposalApplied => {
            let partly = text_at(data, &["proposal", "status"]) == Some("partially_applied");
            (
                format!(
                    "Proposal {number} {}: {proposal_title}",
                    if partly {
                        "partially applied"
                    } else {
                        "applied"
                    }
                ),
                if partly {
                    format!("Some of its hosts in {org} could not apply the change.")
                } else {
                    format!("Every host in {org} applied the change.")
                },
                if partly {
                    "warning"
                } else {
                    "heavy_check_mark"
                },
                if partly { 4 } else { 3 },
            )
        }
        EventKind::ProposalFailed => (
            format!("Proposal {number} failed: {proposal_title}"),
            format!("No host in {org} could apply the change."),
            "x",
            4,
        ),
        EventKind::ProposalHalted => {
            let reason = text_at(data, &["rollout", "reason"]).unwrap_or("halted by hand");
            let wave = text_at(data, &["rollout", "wave_name"])
                .map(|w| format!(" in wave {w}"))
                .unwrap_or_default();
            (
                format!("Proposal {number} halted: {proposal_title}"),
                format!(
                    "Its rollout in {org} stopped handing out jobs{wave}: {reason}. Jobs already \
                     handed out finish; resume it once it is safe."
                ),
                "octagonal_sign",
                5,
            )
        }
        EventKind::HostEnrolled => (
            format!("Host {host} enrolled"),
            format!("{host} joined {org}."),
            "computer",
            3,
        ),
        EventKind::HostOffline => (
            format!("Host {host} went offline"),
            format!("{host} in {org} stopped checking in."),
            "warning",
            4,
        ),
        EventKind::AdvisoryKnownExploited => {
            let cve = text_at(data, &["cve"]).unwrap_or("A vulnerability");
            (
                format!("{cve} is known to be exploited"),
                format!(
                    "Proposal {number} in {org} fixes {cve}, which is on a known-exploited catalogue: {proposal_title}"
                ),
                "rotating_light",
                5,
            )
        }
        EventKind::Test => {
            let channel = text_at(data, &["channel", "name"]).unwrap_or("this channel");
            (
                "Test notification".to_owned(),
                format!("The channel {channel} of {org} works."),
                "bell",
                3,
            )
        }
    };
    Summary {
        title,
        text,
        url: text_at(data, &["url"]).map(str::to_owned),
        tags,
        priority,
        warnings,
    }
}

/// What the proposal's impact says of reboots and unknown hosts, as a sentence after the
/// summary's (empty when the event carries no impact).
fn impact_sentence(data: &Value) -> String {
    let count = |key: &str| {
        data.pointer(&format!("/proposal/impact/{key}"))
            .and_then(Value::as_i64)
    };
    let (Some(hosts), Some(rebooting), Some(unknown)) = (
        count("hosts"),
        count("hosts_rebooting"),
        count("hosts_unknown"),
    ) else {
        return String::new();
    };
    let of = |n: i64| {
        if n == hosts {
            format!("all {n}")
        } else {
            format!("{n} of {hosts}")
        }
    };
    let mut parts = Vec::new();
    if rebooting > 0 {
        parts.push(format!(
            " It reboots {} host{}.",
            of(rebooting),
            if hosts == 1 { "" } else { "s" }
        ));
    }
    if unknown > 0 {
        parts.push(format!(
            " For {} host{} the agent did not say what it would do.",
            of(unknown),
            if hosts == 1 { "" } else { "s" }
        ));
    }
    parts.concat()
}

/// The warnings as plain text lines, after a blank line; empty without warnings.
fn warning_lines(summary: &Summary) -> String {
    if summary.warnings.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n\nWarnings:\n");
    for warning in &summary.warnings {
        out.push_str(&format!("- {warning}\n"));
    }
    out
}

/// A request to send, or an email.
#[derive(Clone, PartialEq, Eq)]
pub enum Outgoing {
    Http {
        url: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    Email {
        to: Vec<String>,
        subject: String,
        text: String,
        html: String,
    },
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs and headers may be credentials (a chat webhook, an ntfy token).
        match self {
            Outgoing::Http { body, .. } => write!(f, "Outgoing::Http({} bytes)", body.len()),
            Outgoing::Email { to, subject, .. } => {
                write!(f, "Outgoing::Email({} recipients, {subject:?})", to.len())
            }
        }
    }
}

/// What a delivery of `event` to a channel configured as `config` sends, at `now`, as
/// delivery `delivery_id` (the `webhook-id`). `pagerduty_url` is the Events API v2 address.
pub fn outgoing(
    config: &ChannelConfig,
    event: &Event<'_>,
    delivery_id: &str,
    now: DateTime<Utc>,
    pagerduty_url: &str,
) -> Result<Outgoing, signing::BadSecret> {
    let summary = summarize(event);
    let json_request = |url: &str, body: Value| Outgoing::Http {
        url: url.to_owned(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    };
    Ok(match config {
        ChannelConfig::Slack { webhook_url } => json_request(webhook_url, slack(&summary)),
        ChannelConfig::Teams { webhook_url } => json_request(webhook_url, teams(&summary)),
        ChannelConfig::Pagerduty { routing_key } => {
            json_request(pagerduty_url, pagerduty(routing_key, event, &summary))
        }
        ChannelConfig::Ntfy { topic_url, token } => {
            let mut headers = vec![
                ("content-type".into(), "text/plain; charset=utf-8".into()),
                ("title".into(), header_text(&summary.title)),
                ("tags".into(), summary.tags.into()),
                ("priority".into(), summary.priority.to_string()),
            ];
            if let Some(url) = &summary.url {
                headers.push(("click".into(), url.clone()));
            }
            if let Some(token) = token {
                headers.push(("authorization".into(), format!("Bearer {token}")));
            }
            let body = format!("{}{}", summary.text, warning_lines(&summary));
            Outgoing::Http {
                url: topic_url.clone(),
                headers,
                body: body.trim_end().as_bytes().to_vec(),
            }
        }
        ChannelConfig::Webhook { url, secret } => {
            let body = webhook_body(event).into_bytes();
            let timestamp = now.timestamp();
            let signature = signing::sign(secret, delivery_id, timestamp, &body)?;
            Outgoing::Http {
                url: url.clone(),
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("webhook-id".into(), delivery_id.to_owned()),
                    ("webhook-timestamp".into(), timestamp.to_string()),
                    ("webhook-signature".into(), signature),
                ],
                body,
            }
        }
        ChannelConfig::Email { to } => {
            let (text, html) = email_bodies(&summary);
            Outgoing::Email {
                to: to.clone(),
                subject: summary.title,
                text,
                html,
            }
        }
    })
}

/// A header value: one line, printable, at most 250 characters.
fn header_text(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(250)
        .collect()
}

/// Standard Webhooks body: `{type, timestamp, data}`.
pub fn webhook_body(event: &Event<'_>) -> String {
    json!({
        "type": event.kind.as_str(),
        "timestamp": event.occurred_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "data": event.data,
    })
    .to_string()
}

/// Slack incoming webhook: `{text, blocks}`.
pub fn slack(summary: &Summary) -> Value {
    let mut section = format!(
        "*{}*\n{}",
        slack_escape(&summary.title),
        slack_escape(&summary.text)
    );
    if let Some(url) = &summary.url {
        section.push_str(&format!(
            "\n<{}|Open in the fleet service>",
            slack_escape(url)
        ));
    }
    let mut blocks = vec![json!({"type": "section", "text": {"type": "mrkdwn", "text": section}})];
    if !summary.warnings.is_empty() {
        let lines: Vec<String> = summary
            .warnings
            .iter()
            .map(|w| format!("• {}", slack_escape(w)))
            .collect();
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!(":warning: *Warnings*\n{}", lines.join("\n"))}}));
    }
    json!({
        "text": format!("{}: {}{}", summary.title, summary.text, warning_lines(summary)).trim_end(),
        "blocks": blocks,
    })
}

/// Slack's three control characters in text.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Teams incoming webhook: a message whose attachment is an Adaptive Card.
pub fn teams(summary: &Summary) -> Value {
    let mut card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": summary.title, "weight": "Bolder", "size": "Medium", "wrap": true},
            {"type": "TextBlock", "text": summary.text, "wrap": true},
        ],
    });
    if !summary.warnings.is_empty()
        && let Some(body) = card["body"].as_array_mut()
    {
        body.push(json!({"type": "TextBlock", "text": "Warnings", "weight": "Bolder", "color": "Attention", "wrap": true}));
        for warning in &summary.warnings {
            body.push(json!({"type": "TextBlock", "text": format!("- {warning}"), "color": "Attention", "wrap": true}));
        }
    }
    if let Some(url) = &summary.url {
        card["actions"] = json!([{"type": "Action.OpenUrl", "title": "Open", "url": url}]);
    }
    json!({
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": card},
        ],
    })
}

/// PagerDuty Events API v2: `trigger` for a failed proposal, a halted rollout and a
/// known-exploited advisory (severity error, error, critical), `resolve` when a proposal
/// applies (the alert its failure, halt or opening raised, by the same `dedup_key`), `trigger`
/// with severity info for anything else.
pub fn pagerduty(routing_key: &str, event: &Event<'_>, summary: &Summary) -> Value {
    let dedup_key = event.subject.unwrap_or(event.kind.as_str());
    if event.kind == EventKind::ProposalApplied {
        return json!({
            "routing_key": routing_key,
            "event_action": "resolve",
            "dedup_key": dedup_key,
        });
    }
    let severity = match event.kind {
        EventKind::ProposalFailed | EventKind::ProposalHalted => "error",
        EventKind::AdvisoryKnownExploited => "critical",
        _ => "info",
    };
    let mut body = json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": {
            "summary": format!("{}: {}{}", summary.title, summary.text, pagerduty_warnings(summary)).chars().take(1024).collect::<String>(),
            "source": "fleet-update-service",
            "severity": severity,
            "timestamp": event.occurred_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            "component": event.kind.as_str(),
            "custom_details": event.data,
        },
    });
    if let Some(url) = &summary.url {
        body["links"] = json!([{"href": url, "text": "Open in the fleet service"}]);
    }
    body
}

/// The warnings in a PagerDuty summary (one line, at most 1,024 characters in all).
fn pagerduty_warnings(summary: &Summary) -> String {
    if summary.warnings.is_empty() {
        return String::new();
    }
    format!(" Warnings: {}", summary.warnings.join(" "))
}

/// An email's plain text and HTML.
pub fn email_bodies(summary: &Summary) -> (String, String) {
    let mut text = format!("{}\n\n{}\n", summary.title, summary.text);
    let mut warnings = String::new();
    if !summary.warnings.is_empty() {
        text.push_str("\nWarnings:\n");
        warnings.push_str("<p><strong>Warnings</strong></p><ul>");
        for warning in &summary.warnings {
            text.push_str(&format!("- {warning}\n"));
            warnings.push_str(&format!("<li>{}</li>", escape(warning)));
        }
        warnings.push_str("</ul>");
    }
    let mut link = String::new();
    if let Some(url) = &summary.url {
        text.push_str(&format!("\nOpen it:\n{url}\n"));
        link = format!("<p><a href=\"{}\">Open it</a></p>", escape(url));
    }
    text.push_str("\nYou get this email because an email notification channel of your organization lists this address.\n");
    let html = format!(
        "<!doctype html><html><body style=\"font-family:sans-serif\"><h3>{}</h3><p>{}</p>{warnings}{link}\
         <p style=\"color:#666\">You get this email because an email notification channel of your organization lists this address.</p></body></html>",
        escape(&summary.title),
        escape(&summary.text),
    );
    (text, html)
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Value {
        json!({
            "organization": {"slug": "acme", "name": "Acme"},
            "proposal": {"id": "prp_x", "number": 7, "title": "curl 1 → 2", "kind": "package_update",
                         "status": "approved", "hosts": 3, "max_severity": "high", "known_exploited": false},
            "url": "https://fleet.example/orgs/acme/proposals/prp_x",
        })
    }

    fn event(kind: EventKind, data: &Value) -> Event<'_> {
        Event {
            kind,
            subject: Some("prp_x"),
            data,
            occurred_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_summary_names_the_proposal_and_the_link() {
        let data = data();
        let summary = summarize(&event(EventKind::ProposalApproved, &data));
        assert_eq!(summary.title, "Proposal #7 approved: curl 1 → 2");
        assert!(
            summary.text.contains("3 hosts, severity high"),
            "{}",
            summary.text
        );
        assert_eq!(
            summary.url.as_deref(),
            Some("https://fleet.example/orgs/acme/proposals/prp_x")
        );
    }

    #[test]
    fn a_halted_rollout_says_why_and_pages_as_a_trigger() {
        let mut data = data();
        data["rollout"] = json!({"reason": "1 failed result reached halt_after_failures (1)",
                                 "wave": 1, "wave_name": "half", "by_hand": false});
        let summary = summarize(&event(EventKind::ProposalHalted, &data));
        assert_eq!(summary.title, "Proposal #7 halted: curl 1 → 2");
        assert!(
            summary
                .text
                .contains("in wave half: 1 failed result reached halt_after_failures (1)"),
            "{}",
            summary.text
        );
        let paged = pagerduty("KEY", &event(EventKind::ProposalHalted, &data), &summary);
        assert_eq!(
            (
                paged["event_action"].clone(),
                paged["payload"]["severity"].clone(),
                paged["dedup_key"].clone()
            ),
            (json!("trigger"), json!("error"), json!("prp_x"))
        );
        assert_eq!(paged["payload"]["component"], "proposal.halted");
    }

    #[test]
    fn slack_and_teams_shapes() {
        let data = data();
        let summary = summarize(&event(EventKind::ProposalFailed, &data));
        let slack = slack(&summary);
        assert!(
            slack["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("Proposal #7 failed"))
        );
        assert_eq!(slack["blocks"][0]["type"], "section");
        let teams = teams(&summary);
        assert_eq!(teams["type"], "message");
        let attachment = &teams["attachments"][0];
        assert_eq!(
            attachment["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        assert_eq!(attachment["content"]["type"], "AdaptiveCard");
        assert_eq!(attachment["content"]["actions"][0]["url"], data["url"]);
    }

    #[test]
    fn pagerduty_triggers_failures_resolves_applies_and_informs_otherwise() {
        let data = data();
        let summary = |k| summarize(&event(k, &data));
        let failed = pagerduty(
            "KEY",
            &event(EventKind::ProposalFailed, &data),
            &summary(EventKind::ProposalFailed),
        );
        assert_eq!(
            (
                failed["event_action"].clone(),
                failed["payload"]["severity"].clone(),
                failed["dedup_key"].clone()
            ),
            (json!("trigger"), json!("error"), json!("prp_x"))
        );
        let applied = pagerduty(
            "KEY",
            &event(EventKind::ProposalApplied, &data),
            &summary(EventKind::ProposalApplied),
        );
        assert_eq!(
            applied,
            json!({"routing_key": "KEY", "event_action": "resolve", "dedup_key": "prp_x"})
        );
        let kev = pagerduty(
            "KEY",
            &event(EventKind::AdvisoryKnownExploited, &data),
            &summary(EventKind::AdvisoryKnownExploited),
        );
        assert_eq!(kev["payload"]["severity"], "critical");
        let opened = pagerduty(
            "KEY",
            &event(EventKind::ProposalOpened, &data),
            &summary(EventKind::ProposalOpened),
        );
        assert_eq!(
            (
                opened["event_action"].clone(),
                opened["payload"]["severity"].clone()
            ),
            (json!("trigger"), json!("info"))
        );
    }

    #[test]
    fn a_webhook_request_is_signed_over_its_exact_body() {
        let data = data();
        let secret = signing::generate_secret();
        let config = ChannelConfig::Webhook {
            url: "https://hooks.acme.test/in".into(),
            secret: secret.clone(),
        };
        let now = DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::seconds(1_700_000_000);
        let Ok(Outgoing::Http { headers, body, .. }) = outgoing(
            &config,
            &event(EventKind::ProposalApproved, &data),
            "dlv_abc",
            now,
            "",
        ) else {
            panic!("a webhook is an HTTP request");
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("webhook-id").as_deref(), Some("dlv_abc"));
        assert_eq!(header("webhook-timestamp").as_deref(), Some("1700000000"));
        assert_eq!(
            header("webhook-signature"),
            signing::sign(&secret, "dlv_abc", 1_700_000_000, &body).ok()
        );
        let sent: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(sent["type"], "proposal.approved");
        assert_eq!(sent["timestamp"], "1970-01-01T00:00:00.000Z");
        assert_eq!(sent["data"], data);
    }

    #[test]
    fn ntfy_is_plain_text_with_its_headers_and_the_token() {
        let data = data();
        let config = ChannelConfig::Ntfy {
            topic_url: "https://ntfy.sh/t".into(),
            token: Some("tk".into()),
        };
        let Ok(Outgoing::Http { headers, body, .. }) = outgoing(
            &config,
            &event(EventKind::HostOffline, &data),
            "dlv_abc",
            DateTime::<Utc>::UNIX_EPOCH,
            "",
        ) else {
            panic!("ntfy is an HTTP request");
        };
        let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        for name in ["title", "tags", "priority", "click", "authorization"] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        assert!(headers.contains(&("authorization".into(), "Bearer tk".into())));
        assert!(String::from_utf8_lossy(&body).contains("stopped checking in"));
    }

    fn opened() -> Value {
        json!({
            "organization": {"slug": "acme", "name": "Acme"},
            "proposal": {"id": "prp_x", "number": 7, "title": "Updates: openssl", "kind": "package_update",
                         "status": "open", "hosts": 4, "max_severity": null, "known_exploited": false,
                         "impact": {"hosts": 4, "hosts_rebooting": 1, "hosts_unknown": 1,
                                    "restarts": [{"unit": "ssh.service", "hosts": 3}],
                                    "installs": [], "removes": [{"name": "libssl3", "hosts": 2}]},
                         "warnings": ["Removes the package libssl3 on 2 of 4 hosts.",
                                      "Restarts ssh.service on 3 of 4 hosts, more than half of them at once."]},
            "url": "https://fleet.example/orgs/acme/proposals/prp_x",
        })
    }

    const REMOVAL: &str = "Removes the package libssl3 on 2 of 4 hosts.";
    const RESTART: &str = "Restarts ssh.service on 3 of 4 hosts, more than half of them at once.";

    /// Every kind of channel: the request or email it gets for `data`.
    fn every_kind(data: &Value) -> Vec<(&'static str, String)> {
        let secret = signing::generate_secret();
        let configs = [
            (
                "slack",
                ChannelConfig::Slack {
                    webhook_url: "https://hooks.slack.test/x".into(),
                },
            ),
            (
                "teams",
                ChannelConfig::Teams {
                    webhook_url: "https://teams.test/x".into(),
                },
            ),
            (
                "ntfy",
                ChannelConfig::Ntfy {
                    topic_url: "https://ntfy.test/t".into(),
                    token: None,
                },
            ),
            (
                "pagerduty",
                ChannelConfig::Pagerduty {
                    routing_key: "KEY".into(),
                },
            ),
            (
                "webhook",
                ChannelConfig::Webhook {
                    url: "https://hooks.acme.test/in".into(),
                    secret,
                },
            ),
            (
                "email",
                ChannelConfig::Email {
                    to: vec!["ops@acme.test".into()],
                },
            ),
        ];
        configs
            .into_iter()
            .map(|(kind, config)| {
                let sent = outgoing(
                    &config,
                    &event(EventKind::ProposalOpened, data),
                    "dlv_abc",
                    DateTime::<Utc>::UNIX_EPOCH,
                    "https://events.pagerduty.test/v2/enqueue",
                );
                let shown = match sent {
                    Ok(Outgoing::Http { body, .. }) => String::from_utf8_lossy(&body).into_owned(),
                    Ok(Outgoing::Email { text, html, .. }) => format!("{text}\n{html}"),
                    Err(err) => panic!("{kind}: {err:?}"),
                };
                (kind, shown)
            })
            .collect()
    }

    #[test]
    fn proposal_opened_shows_its_warnings_on_every_kind_of_channel() {
        let data = opened();
        for (kind, shown) in every_kind(&data) {
            assert!(shown.contains(REMOVAL), "{kind}: {shown}");
            assert!(
                shown.contains("ssh.service on 3 of 4 hosts"),
                "{kind}: {shown}"
            );
        }
        let summary = summarize(&event(EventKind::ProposalOpened, &data));
        assert_eq!(summary.warnings, vec![REMOVAL, RESTART]);
        assert_eq!((summary.tags, summary.priority), ("package,warning", 4));
        assert!(
            summary.text.ends_with(
                "It reboots 1 of 4 hosts. For 1 of 4 hosts the agent did not say what it would do."
            ),
            "{}",
            summary.text
        );
        let slack = slack(&summary);
        assert_eq!(slack["blocks"].as_array().map(Vec::len), Some(2));
        assert!(
            slack["blocks"][1]["text"]["text"]
                .as_str()
                .is_some_and(|t| t.contains(REMOVAL))
        );
        let teams = teams(&summary);
        let card = &teams["attachments"][0]["content"]["body"];
        assert!(
            card.as_array()
                .is_some_and(|b| b.iter().any(|t| t["color"] == "Attention"))
        );
        let (text, html) = email_bodies(&summary);
        assert!(
            text.contains("Warnings:\n- Removes the package libssl3"),
            "{text}"
        );
        assert!(
            html.contains("<li>Removes the package libssl3 on 2 of 4 hosts.</li>"),
            "{html}"
        );
    }

    #[test]
    fn without_warnings_nothing_is_added() {
        let mut data = opened();
        data["proposal"]["warnings"] = json!([]);
        data["proposal"]["impact"]["hosts_rebooting"] = json!(0);
        data["proposal"]["impact"]["hosts_unknown"] = json!(0);
        for (kind, shown) in every_kind(&data) {
            assert!(!shown.contains("Warnings"), "{kind}: {shown}");
        }
        let summary = summarize(&event(EventKind::ProposalOpened, &data));
        assert_eq!((summary.tags, summary.priority), ("package", 3));
        assert!(
            summary.text.ends_with("awaits approval (4 hosts)."),
            "{}",
            summary.text
        );
        assert_eq!(slack(&summary)["blocks"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn email_html_is_escaped() {
        let data = json!({"organization": {"name": "<b>Acme</b>"}, "host": {"hostname": "web<1>"}});
        let summary = summarize(&Event {
            kind: EventKind::HostEnrolled,
            subject: None,
            data: &data,
            occurred_at: DateTime::<Utc>::UNIX_EPOCH,
        });
        let (text, html) = email_bodies(&summary);
        assert!(text.contains("web<1>"));
        assert!(html.contains("web&lt;1&gt;") && !html.contains("<b>Acme"));
    }
}
