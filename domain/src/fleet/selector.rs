//! Label selectors: `key=value`, `key!=value`, `key in (a,b)`, `key` (exists), AND-ed with
//! commas — `env=prod,tier in (web,db),canary`. Used by groups, policies and host filters, by
//! the api (to validate) and by the worker (to evaluate).

use std::{collections::BTreeMap, fmt};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    Exists(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Selector(pub Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

fn key_ok(key: &str) -> bool {
    !key.is_empty()
        && key.chars().count() <= 63
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn value_ok(value: &str) -> bool {
    value.chars().count() <= 255
        && !value
            .chars()
            .any(|c| c.is_control() || matches!(c, ',' | '(' | ')' | '=' | '!'))
}

/// Splits on commas outside parentheses.
fn terms(text: &str) -> Result<Vec<&str>, SelectorError> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError("unbalanced ')' in selector".into()));
                }
            }
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError("unbalanced '(' in selector".into()));
    }
    out.push(&text[start..]);
    Ok(out)
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if text.len() > 4096 {
            return Err(SelectorError(
                "a selector is at most 4096 characters".into(),
            ));
        }
        let mut requirements = Vec::new();
        for term in terms(text)? {
            let term = term.trim();
            if term.is_empty() {
                return Err(SelectorError("empty term in selector".into()));
            }
            let requirement = if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) = term.split_once('=') {
                Requirement::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, rest)) = term.split_once(" in ") {
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| SelectorError(format!("expected `{} in (a,b)`", key.trim())))?;
                let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
                if values.iter().any(String::is_empty) {
                    return Err(SelectorError(format!("empty value in `{term}`")));
                }
                Requirement::In(key.trim().to_owned(), values)
            } else {
                Requirement::Exists(term.to_owned())
            };
            let (key, values): (&str, Vec<&str>) = match &requirement {
                Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => (k, vec![v.as_str()]),
                Requirement::In(k, vs) => (k, vs.iter().map(String::as_str).collect()),
                Requirement::Exists(k) => (k, vec![]),
            };
            if !key_ok(key) {
                return Err(SelectorError(format!(
                    "label key {key:?} must be 1-63 letters, digits, '-', '_', '.' or '/'"
                )));
            }
            if let Some(bad) = values.iter().find(|v| !value_ok(v)) {
                return Err(SelectorError(format!(
                    "label value {bad:?} is not allowed in a selector"
                )));
            }
            requirements.push(requirement);
        }
        Ok(Selector(requirements))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn each_form_matches_as_documented() {
        let host = labels(&[("env", "prod"), ("tier", "web"), ("canary", "")]);
        for (text, expected) in [
            ("env=prod", true),
            ("env=dev", false),
            ("env!=dev", true),
            ("missing!=x", true),
            ("tier in (web,db)", true),
            ("tier in (db)", false),
            ("canary", true),
            ("absent", false),
            ("env=prod, tier in (web, db), canary", true),
            ("env=prod,tier=db", false),
        ] {
            let selector = Selector::parse(text).expect(text);
            assert_eq!(selector.matches(&host), expected, "{text}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused() {
        for text in [
            "",
            "env=prod,",
            "tier in (web",
            "tier in web",
            "bad key=1",
            "a=(x)",
            "k in (a,,b)",
        ] {
            assert!(Selector::parse(text).is_err(), "{text:?}");
        }
    }
}
