//! Single sign-on and provisioning rules (decisions §15) as pure functions: which role a
//! provider's groups give, the shape of a domain claim and its TXT record, and which domain an
//! address is at. The api's SSO operations and the SCIM provisioning both map groups to roles
//! through [`role_for`].

pub use entities::json::{RoleMapping, SsoRole};

/// The role somebody in `groups` gets: the highest role among the mappings whose group is one
/// of `groups` (matched exactly, case included), else `default_role`, else none (they are
/// refused). Never owner: [`SsoRole`] has no owner, and a mapping to owner is refused when the
/// connection is saved (interface.md, `PUT /sso`: invalid request).
pub fn role_for<G: AsRef<str>>(
    mappings: &[RoleMapping],
    default_role: Option<SsoRole>,
    groups: &[G],
) -> Option<SsoRole> {
    mappings
        .iter()
        .filter(|mapping| groups.iter().any(|g| g.as_ref() == mapping.group))
        .map(|mapping| mapping.role)
        .max()
        .or(default_role)
}

/// The prefix of a claim's TXT record name: `_service-challenge.<domain>`.
pub const TXT_NAME_PREFIX: &str = "_service-challenge.";

/// The prefix of a claim's TXT record value.
pub const TXT_VALUE_PREFIX: &str = "service-domain-verification=";

/// Name of the TXT record that verifies `domain`.
pub fn txt_name(domain: &str) -> String {
    format!("{TXT_NAME_PREFIX}{domain}")
}

/// A fresh TXT value: the prefix and 32 random lowercase base32 characters (160 bits).
pub fn new_txt_value() -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let bytes: [u8; 32] = rand::random();
    let random: String = bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 31)]))
        .collect();
    format!("{TXT_VALUE_PREFIX}{random}")
}

/// A domain as claimed: lowercase, no trailing dot, two or more labels of letters, digits and
/// inner hyphens (at most 63 each, 253 in all), not all-numeric at the end (no IP addresses).
/// None for anything else.
pub fn normalize_domain(input: &str) -> Option<String> {
    let domain = input.trim().trim_end_matches('.').to_ascii_lowercase();
    if domain.is_empty() || domain.len() > 253 {
        return None;
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 {
        return None;
    }
    let label_ok = |label: &&str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !labels.iter().all(label_ok) {
        return None;
    }
    let tld = labels.last()?;
    if tld.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(domain)
}

/// The domain of an email address (the part after the last `@`), normalized; none when the
/// address has no valid domain.
pub fn email_domain(email: &str) -> Option<String> {
    let (local, domain) = email.trim().rsplit_once('@')?;
    if local.is_empty() {
        return None;
    }
    normalize_domain(domain)
}

/// Whether a TXT record's value verifies a claim: equal to `expected` once the strings a
/// record is split into are joined (RFC 7208 §3.3 style), surrounding whitespace ignored.
pub fn txt_matches(record_strings: &[Vec<u8>], expected: &str) -> bool {
    let joined: Vec<u8> = record_strings.concat();
    String::from_utf8_lossy(&joined).trim() == expected
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(group: &str, role: SsoRole) -> RoleMapping {
        RoleMapping {
            group: group.into(),
            role,
        }
    }

    #[test]
    fn the_highest_matching_mapping_wins() {
        let mappings = [
            mapping("staff", SsoRole::Viewer),
            mapping("ops", SsoRole::Operator),
            mapping("it-admins", SsoRole::Admin),
        ];
        assert_eq!(
            role_for(&mappings, None, &["staff", "ops"]),
            Some(SsoRole::Operator)
        );
        assert_eq!(
            role_for(&mappings, Some(SsoRole::Viewer), &["it-admins", "staff"]),
            Some(SsoRole::Admin)
        );
        // A default lower than a match does not lower it; a default higher than a match does
        // not raise it either: a match decides.
        assert_eq!(
            role_for(&mappings, Some(SsoRole::Admin), &["staff"]),
            Some(SsoRole::Viewer)
        );
    }

    #[test]
    fn no_match_falls_back_to_the_default_role_or_refuses() {
        let mappings = [mapping("ops", SsoRole::Operator)];
        let none: [&str; 0] = [];
        assert_eq!(
            role_for(&mappings, Some(SsoRole::Viewer), &["sales"]),
            Some(SsoRole::Viewer)
        );
        assert_eq!(role_for(&mappings, None, &["sales"]), None);
        assert_eq!(role_for(&mappings, None, &none), None);
        assert_eq!(
            role_for(&[], Some(SsoRole::Operator), &none),
            Some(SsoRole::Operator)
        );
    }

    #[test]
    fn groups_match_exactly() {
        let mappings = [mapping("Ops", SsoRole::Admin)];
        assert_eq!(role_for(&mappings, None, &["ops"]), None);
        assert_eq!(role_for(&mappings, None, &["Ops "]), None);
        assert_eq!(role_for(&mappings, None, &["Ops"]), Some(SsoRole::Admin));
        let owned = vec!["Ops".to_string()];
        assert_eq!(role_for(&mappings, None, &owned), Some(SsoRole::Admin));
    }

    #[test]
    fn txt_names_and_values_have_the_documented_shape() {
        assert_eq!(txt_name("example.com"), "_service-challenge.example.com");
        let value = new_txt_value();
        let random = value.strip_prefix(TXT_VALUE_PREFIX).expect("prefix");
        assert_eq!(random.len(), 32);
        assert!(
            random
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
        );
        assert_ne!(value, new_txt_value());
        assert!(txt_matches(&[value.as_bytes().to_vec()], &value));
        let (a, b) = value.split_at(10);
        assert!(txt_matches(&[a.into(), b.into()], &value));
        assert!(!txt_matches(
            &[b"service-domain-verification=x".to_vec()],
            &value
        ));
    }

    #[test]
    fn domains_normalize_or_are_refused() {
        assert_eq!(normalize_domain("Example.COM."), Some("example.com".into()));
        assert_eq!(
            normalize_domain("a-b.example.co.uk"),
            Some("a-b.example.co.uk".into())
        );
        for bad in [
            "",
            "com",
            "-a.com",
            "a-.com",
            "a..com",
            "10.0.0.1",
            "exa mple.com",
            "ex_ample.com",
            "é.com",
        ] {
            assert_eq!(normalize_domain(bad), None, "{bad}");
        }
        assert_eq!(email_domain("Ann@Example.com"), Some("example.com".into()));
        assert_eq!(email_domain("ann@localhost"), None);
        assert_eq!(email_domain("@example.com"), None);
        assert_eq!(email_domain("example.com"), None);
    }
}
