//! The emails the service sends to people (sign-in and sign-up links, invitations, mentions,
//! digests, billing): plain text and HTML, with links built from `SERVICE_BASE_URL`.
//! Every value shown in HTML goes through [`escape`].

use crate::notifications::jobs::SendEmail;
use platform::ids::ProposalId;
use url::Url;

use super::wire::escape;

/// `{base}{path}?token=…`
pub fn link(base: &Url, path: &str, token: &str) -> String {
    let mut url = base.clone();
    url.set_path(&format!("{}{path}", base.path().trim_end_matches('/')));
    url.query_pairs_mut().clear().append_pair("token", token);
    url.to_string()
}

fn with_link(
    to: &str,
    subject: &str,
    lead: &str,
    action: &str,
    link: String,
    note: &str,
) -> SendEmail {
    let text = format!("{lead}\n\n{action}:\n{link}\n\n{note}\n");
    let html = format!(
        "<!doctype html><html><body style=\"font-family:sans-serif\"><p>{}</p>\
         <p><a href=\"{}\">{}</a></p><p style=\"color:#666\">{}</p></body></html>",
        escape(lead),
        escape(&link),
        escape(action),
        escape(note)
    );
    let mut email = SendEmail::new(to, subject, text, html);
    email.link = Some(link);
    email
}

const EXPIRY_NOTE: &str =
    "The link works once and expires in 15 minutes. If you did not ask for it, ignore this email.";

pub fn sign_in(base: &Url, to: &str, token: &str) -> SendEmail {
    with_link(
        to,
        "Your sign-in link",
        "Somebody, hopefully you, asked to sign in with this address.",
        "Sign in",
        link(base, "/sign-in/verify", token),
        EXPIRY_NOTE,
    )
}

pub fn sign_up(base: &Url, to: &str, organization: &str, token: &str) -> SendEmail {
    with_link(
        to,
        "Confirm your sign-up",
        &format!("Confirm this address to create the organization {organization}."),
        "Confirm and sign in",
        link(base, "/sign-up/verify", token),
        EXPIRY_NOTE,
    )
}

pub fn invitation(
    base: &Url,
    to: &str,
    organization: &str,
    role: &str,
    inviter: &str,
    token: &str,
) -> SendEmail {
    with_link(
        to,
        &format!("You are invited to {organization}"),
        &format!("{inviter} invited you to join {organization} as {role}."),
        "Accept the invitation",
        link(base, "/invitations/accept", token),
        "The invitation expires in 7 days. If you did not expect it, ignore this email.",
    )
}

/// The proposal a mention was made on.
#[derive(Clone, Copy, Debug)]
pub struct MentionedOn<'a> {
    pub org_name: &'a str,
    pub org_slug: &'a str,
    pub proposal_id: uuid::Uuid,
    pub proposal_number: i64,
    pub proposal_title: &'a str,
}

/// How much of the comment a mention email quotes, in characters.
const MENTION_EXCERPT: usize = 500;

/// `{SERVICE_BASE_URL}/orgs/{slug}/proposals/{prp_id}`
pub fn proposal_link(base: &Url, slug: &str, proposal_id: uuid::Uuid) -> String {
    let mut url = base.clone();
    url.set_path(&format!(
        "{}/orgs/{slug}/proposals/{}",
        base.path().trim_end_matches('/'),
        ProposalId::from(proposal_id)
    ));
    url.set_query(None);
    url.to_string()
}

/// Tells a member that `author` mentioned them in a comment.
pub fn mention(base: &Url, to: &str, author: &str, on: MentionedOn<'_>, body: &str) -> SendEmail {
    let subject = format!(
        "{author} mentioned you on proposal #{}: {}",
        on.proposal_number, on.proposal_title
    );
    let lead = format!(
        "{author} mentioned you in a comment on proposal #{} \u{201c}{}\u{201d} in {}.",
        on.proposal_number, on.proposal_title, on.org_name
    );
    let mut excerpt: String = body.chars().take(MENTION_EXCERPT).collect();
    if body.chars().count() > MENTION_EXCERPT {
        excerpt.push('\u{2026}');
    }
    let quoted: String = excerpt.lines().map(|line| format!("> {line}\n")).collect();
    let link = proposal_link(base, on.org_slug, on.proposal_id);
    let note = "You get this email because somebody mentioned you. You can turn mention emails \
                off in your digest setting for the organization.";
    let text = format!("{lead}\n\n{quoted}\nOpen the proposal:\n{link}\n\n{note}\n");
    let html = format!(
        "<!doctype html><html><body style=\"font-family:sans-serif\"><p>{}</p>\
         <blockquote style=\"white-space:pre-wrap\">{}</blockquote>\
         <p><a href=\"{}\">Open the proposal</a></p><p style=\"color:#666\">{}</p></body></html>",
        escape(&lead),
        escape(&excerpt),
        escape(&link),
        escape(note)
    );
    let mut email = SendEmail::new(to, subject, text, html);
    email.link = Some(link);
    email
}

/// `{SERVICE_BASE_URL}/orgs/{slug}/billing`
pub fn billing_link(base: &Url, slug: &str) -> String {
    let mut url = base.clone();
    url.set_path(&format!(
        "{}/orgs/{slug}/billing",
        base.path().trim_end_matches('/')
    ));
    url.set_query(None);
    url.to_string()
}

/// `{SERVICE_BASE_URL}/orgs/{slug}/hosts/{hst_id}`
pub fn host_link(base: &Url, slug: &str, host_id: uuid::Uuid) -> String {
    let mut url = base.clone();
    url.set_path(&format!(
        "{}/orgs/{slug}/hosts/{}",
        base.path().trim_end_matches('/'),
        platform::ids::HostId::from(host_id)
    ));
    url.set_query(None);
    url.to_string()
}

/// Tells an owner that the payment processor could not collect a payment.
pub fn payment_failed(base: &Url, to: &str, org_name: &str, org_slug: &str) -> SendEmail {
    let subject = format!("Payment failed for {org_name}");
    let lead = format!(
        "The payment processor could not collect the latest payment for {org_name}. The \
         subscription is past due; update the payment method to keep the plan's features."
    );
    let link = billing_link(base, org_slug);
    let note = "You get this email because you are an owner of the organization.";
    let text = format!("{lead}\n\nBilling:\n{link}\n\n{note}\n");
    let html = format!(
        "<!doctype html><html><body style=\"font-family:sans-serif\"><p>{}</p>\
         <p><a href=\"{}\">Billing</a></p><p style=\"color:#666\">{}</p></body></html>",
        escape(&lead),
        escape(&link),
        escape(note)
    );
    let mut email = SendEmail::new(to, subject, text, html);
    email.link = Some(link);
    email
}

/// One line of a digest: what, and where to see it; a proposal's warnings (decisions §21)
/// beneath it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestItem {
    pub text: String,
    pub link: String,
    pub warnings: Vec<String>,
}

/// What a digest says: each section's first items and its total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DigestContent {
    pub awaiting: Vec<DigestItem>,
    pub awaiting_total: u64,
    pub opened: Vec<DigestItem>,
    pub opened_total: u64,
    pub failed: Vec<DigestItem>,
    pub failed_total: u64,
    pub offline: Vec<DigestItem>,
    pub offline_total: u64,
}

impl DigestContent {
    /// Nothing awaits the member, nothing new, nothing failed, no host went offline.
    pub fn is_empty(&self) -> bool {
        self.awaiting_total == 0
            && self.opened_total == 0
            && self.failed_total == 0
            && self.offline_total == 0
    }
}

/// A member's digest email.
#[allow(clippy::too_many_arguments)]
pub fn digest(
    base: &Url,
    to: &str,
    org_name: &str,
    org_slug: &str,
    frequency: crate::notifications::digest::Frequency,
    zone: chrono_tz::Tz,
    now: chrono::DateTime<chrono::Utc>,
    content: &DigestContent,
) -> SendEmail {
    let day = now.with_timezone(&zone).format("%A %-d %B %Y");
    let subject = format!(
        "{} digest for {org_name}: {} awaiting your approval",
        if frequency == crate::notifications::digest::Frequency::Weekly {
            "Weekly"
        } else {
            "Daily"
        },
        content.awaiting_total
    );
    let sections = [
        (
            "Awaiting your approval",
            &content.awaiting,
            content.awaiting_total,
        ),
        (
            "Opened since your last digest",
            &content.opened,
            content.opened_total,
        ),
        (
            "Failed since your last digest",
            &content.failed,
            content.failed_total,
        ),
        (
            "Hosts gone offline",
            &content.offline,
            content.offline_total,
        ),
    ];
    let mut text = format!("{org_name}, {day}\n");
    let mut html = format!(
        "<!doctype html><html><body style=\"font-family:sans-serif\"><h2>{}</h2><p>{}</p>",
        escape(org_name),
        escape(&day.to_string())
    );
    for (title, items, total) in sections {
        if total == 0 {
            continue;
        }
        text.push_str(&format!("\n{title} ({total}):\n"));
        html.push_str(&format!("<h3>{} ({total})</h3><ul>", escape(title)));
        for item in items {
            text.push_str(&format!("- {}\n  {}\n", item.text, item.link));
            html.push_str(&format!(
                "<li><a href=\"{}\">{}</a>",
                escape(&item.link),
                escape(&item.text)
            ));
            if !item.warnings.is_empty() {
                html.push_str("<ul>");
                for warning in &item.warnings {
                    text.push_str(&format!("  Warning: {warning}\n"));
                    html.push_str(&format!("<li>Warning: {}</li>", escape(warning)));
                }
                html.push_str("</ul>");
            }
            html.push_str("</li>");
        }
        let more = total.saturating_sub(items.len() as u64);
        if more > 0 {
            text.push_str(&format!("  … and {more} more\n"));
            html.push_str(&format!("<li>… and {more} more</li>"));
        }
        html.push_str("</ul>");
    }
    let mut settings = base.clone();
    settings.set_path(&format!(
        "{}/orgs/{org_slug}/digest",
        base.path().trim_end_matches('/')
    ));
    let note = "You get this digest because of your digest setting in this organization.";
    text.push_str(&format!("\n{note}\nChange it: {settings}\n"));
    html.push_str(&format!(
        "<p style=\"color:#666\">{} <a href=\"{}\">Change it</a>.</p></body></html>",
        escape(note),
        escape(settings.as_str())
    ));
    SendEmail::new(to, subject, text, html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_carry_the_token_and_html_is_escaped() {
        let base = Url::parse("https://fleet.example.com/app/").expect("url");
        assert_eq!(
            link(&base, "/sign-in/verify", "a-b_c"),
            "https://fleet.example.com/app/sign-in/verify?token=a-b_c"
        );
        let email = sign_up(&base, "a@b.co", "<script>", "t");
        assert!(email.html.contains("&lt;script&gt;"));
        assert!(!email.html.contains("<script>"));
        assert!(email.text.contains("/sign-up/verify?token=t"));
    }

    #[test]
    fn the_mention_link_names_the_proposal() {
        let base = Url::parse("https://fleet.example.com/app/").expect("url");
        let id = uuid::Uuid::nil();
        assert_eq!(
            proposal_link(&base, "acme", id),
            format!(
                "https://fleet.example.com/app/orgs/acme/proposals/{}",
                ProposalId::from(id)
            )
        );
    }
}
