//! The emails the api sends (through the job queue): plain text and HTML, with links built from
//! `SERVICE_BASE_URL`.

use platform::jobs::SendEmail;
use url::Url;

fn escape(text: &str) -> String {
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
}
