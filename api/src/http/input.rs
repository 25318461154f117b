//! Parse, don't validate: request input becomes these types at the edge, and inner code never
//! checks it again. Every refusal is a 400 `invalid-request` naming the field.

use chrono::{DateTime, Utc};

use crate::{http::error::ApiError, http::rights::Role};

/// An email address: trimmed, lowercased, at most 254 characters, `local@domain.tld`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    pub fn parse(field: &str, raw: &str) -> Result<Email, ApiError> {
        let value = raw.trim().to_lowercase();
        let bad = || {
            ApiError::invalid(format!(
                "{field} must be an email address such as ops@example.com"
            ))
        };
        if value.is_empty() || value.chars().count() > 254 {
            return Err(ApiError::invalid(format!(
                "{field} must be an email address of at most 254 characters"
            )));
        }
        let (local, domain) = value.rsplit_once('@').ok_or_else(bad)?;
        let domain_ok = domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && domain
                .chars()
                .all(|c| c.is_alphanumeric() || c == '.' || c == '-');
        let local_ok = !local.is_empty()
            && local.len() <= 64
            && !local
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || "<>()[],;:\\\"@".contains(c));
        if !domain_ok || !local_ok {
            return Err(bad());
        }
        Ok(Email(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// An organization slug: 3–40 lowercase letters, digits and hyphens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slug(String);

impl Slug {
    pub fn parse(field: &str, raw: &str) -> Result<Slug, ApiError> {
        let ok = (3..=40).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(Slug(raw.to_owned()))
        } else {
            Err(ApiError::invalid(format!(
                "{field} must be 3 to 40 lowercase letters, digits or hyphens"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A human name or title: trimmed, 1–255 characters, no control characters.
pub fn name(field: &str, raw: &str) -> Result<String, ApiError> {
    let value = raw.trim();
    if value.is_empty() {
        return Err(ApiError::invalid(format!("{field} must not be empty")));
    }
    if value.chars().count() > 255 {
        return Err(ApiError::invalid(format!(
            "{field} must be at most 255 characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(value.to_owned())
}

/// Whether `c` changes how the text around it is shown rather than being shown itself: a
/// control character (C0, DEL, C1: terminal escapes, carriage returns) or a Unicode
/// bidirectional embedding, override or isolate (text that reads differently than it is).
pub fn is_unshowable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Refuses text people are shown that carries [`is_unshowable`] characters; `multiline` text
/// (notes) may hold line feeds and tabs.
pub fn showable(field: &str, value: &str, multiline: bool) -> Result<(), ApiError> {
    if value
        .chars()
        .any(|c| is_unshowable(c) && !(multiline && matches!(c, '\n' | '\t')))
    {
        let allowed = if multiline {
            " other than line feeds and tabs"
        } else {
            ""
        };
        return Err(ApiError::invalid(format!(
            "{field} must not contain control characters{allowed}"
        )));
    }
    Ok(())
}

/// An IANA time zone name such as `Europe/London`.
pub fn time_zone(field: &str, raw: &str) -> Result<String, ApiError> {
    raw.parse::<chrono_tz::Tz>()
        .map(|tz| tz.name().to_owned())
        .map_err(|_| {
            ApiError::invalid(format!(
                "{field} must be an IANA time zone such as Europe/London"
            ))
        })
}

/// A role a member may be given by invitation, API token or role change.
pub fn role(field: &str, raw: &str) -> Result<Role, ApiError> {
    raw.parse().map_err(|()| {
        ApiError::invalid(format!(
            "{field} must be one of owner, admin, operator, viewer"
        ))
    })
}

/// An optional expiry that must not be in the past.
pub fn future(
    field: &str,
    at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    match at {
        Some(at) if at <= now => Err(ApiError::invalid(format!("{field} must be in the future"))),
        other => Ok(other),
    }
}

/// Most labels a host or enrollment token may carry (decisions §5).
pub use domain::fleet::MAX_LABELS;

/// A label set: at most 64 labels; keys 1–63 characters of letters, digits, `-`, `_`, `.` and
/// `/` (so that selectors such as `env=prod,tier in (web,db)` can name them); values at most
/// 255 characters without control characters.
pub fn labels<V: AsRef<str>>(
    field: &str,
    raw: &std::collections::BTreeMap<String, V>,
) -> Result<std::collections::BTreeMap<String, String>, ApiError> {
    if raw.len() > MAX_LABELS {
        return Err(ApiError::invalid(format!(
            "{field} may hold at most {MAX_LABELS} labels, not {}",
            raw.len()
        )));
    }
    for (key, value) in raw {
        let value = value.as_ref();
        if key.is_empty() {
            return Err(ApiError::invalid(format!(
                "{field}: a label key must not be empty"
            )));
        }
        let key_ok = key.chars().count() <= 63
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if !key_ok {
            return Err(ApiError::invalid(format!(
                "{field}: label key {key:?} must be 1-63 letters, digits, '-', '_', '.' or '/'"
            )));
        }
        if value.chars().count() > 255 || value.chars().any(char::is_control) {
            return Err(ApiError::invalid(format!(
                "{field}: the value of {key:?} must be at most 255 characters without control characters"
            )));
        }
    }
    Ok(raw
        .iter()
        .map(|(k, v)| (k.clone(), v.as_ref().to_owned()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert_eq!(
            Email::parse("email", "  Ops@Example.COM ")
                .map(Email::into_string)
                .ok(),
            Some("ops@example.com".to_owned())
        );
        for bad in [
            "",
            "no-at",
            "a@b",
            "a b@c.d",
            "@x.org",
            "a@.org",
            &format!("{}@x.org", "a".repeat(250)),
        ] {
            assert!(Email::parse("email", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slugs() {
        assert!(Slug::parse("slug", "acme-1").is_ok());
        for bad in ["ab", "Acme", "acme_1", &"a".repeat(41), "ac me"] {
            assert!(Slug::parse("slug", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unshowable_characters_are_refused_except_line_breaks_in_multiline_text() {
        assert!(showable("f", "Datenbank – primär 🚀", false).is_ok());
        assert!(showable("f", "one\n\ttwo", true).is_ok());
        for bad in [
            "a\u{1b}[2J",
            "a\rb",
            "a\u{0}",
            "a\u{7f}",
            "a\u{9b}",
            "a\u{202e}b",
            "a\u{2067}",
        ] {
            assert!(showable("f", bad, true).is_err(), "{bad:?}");
            assert!(showable("f", bad, false).is_err(), "{bad:?}");
        }
        assert!(showable("f", "a\nb", false).is_err());
        assert!(showable("f", "a\tb", false).is_err());
    }

    #[test]
    fn names_and_zones() {
        assert_eq!(name("name", "  Ada ").ok().as_deref(), Some("Ada"));
        assert!(name("name", " ").is_err());
        assert!(name("name", &"x".repeat(256)).is_err());
        assert!(time_zone("time_zone", "Europe/London").is_ok());
        assert!(time_zone("time_zone", "Mars/Olympus").is_err());
    }
}
