//! `/etc/os-release` (falling back to `/usr/lib/os-release`): the distribution facts and which
//! package manager the host has.

use std::collections::HashMap;

/// The fields the agent uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OsRelease {
    /// `ID`, lowercase (`ubuntu`, `debian`, `rocky`).
    pub id: String,
    /// `ID_LIKE`, lowercase words.
    pub id_like: Vec<String>,
    pub version_id: Option<String>,
    /// `VERSION_CODENAME`, else `UBUNTU_CODENAME`, else the words in parentheses of `VERSION`
    /// (`9.4 (Blue Onyx)` → `blue onyx`).
    pub codename: Option<String>,
}

/// The family of package managers (decisions §6 `os_family`, §19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// dpkg and apt.
    Debian,
    /// rpm and dnf.
    Rhel,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Debian => "debian",
            Family::Rhel => "rhel",
        }
    }

    /// The ecosystem of its packages (decisions §6 `updates[].ecosystem`).
    pub fn ecosystem(self) -> &'static str {
        match self {
            Family::Debian => "deb",
            Family::Rhel => "rpm",
        }
    }
}

/// Reads os-release text: `KEY=value` lines, values optionally in double or single quotes with
/// backslash escapes; comments and malformed lines are skipped.
pub fn parse(text: &str) -> OsRelease {
    let mut fields: HashMap<&str, String> = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        fields.insert(key.trim(), unquote(value.trim()));
    }
    let get = |key: &str| fields.get(key).filter(|v| !v.is_empty()).cloned();
    let codename = get("VERSION_CODENAME")
        .or_else(|| get("UBUNTU_CODENAME"))
        .or_else(|| {
            let version = get("VERSION")?;
            let inner = version
                .split_once('(')?
                .1
                .split_once(')')?
                .0
                .trim()
                .to_owned();
            (!inner.is_empty()).then_some(inner)
        })
        .map(|c| c.to_lowercase());
    OsRelease {
        id: get("ID")
            .unwrap_or_else(|| "linux".to_owned())
            .to_lowercase(),
        id_like: get("ID_LIKE")
            .map(|v| v.split_whitespace().map(str::to_lowercase).collect())
            .unwrap_or_default(),
        version_id: get("VERSION_ID"),
        codename,
    }
}

fn unquote(value: &str) -> String {
    let quote = match value.chars().next() {
        Some(q @ ('"' | '\'')) if value.len() >= 2 && value.ends_with(q) => q,
        _ => return value.to_owned(),
    };
    let inner = &value[1..value.len() - 1];
    if quote == '\'' {
        return inner.to_owned();
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl OsRelease {
    /// The package-manager family: by `ID`, then `ID_LIKE`.
    pub fn family(&self) -> Option<Family> {
        let debian = ["debian", "ubuntu", "raspbian", "linuxmint", "pop", "kali"];
        let rhel = [
            "rhel",
            "centos",
            "fedora",
            "rocky",
            "almalinux",
            "ol",
            "amzn",
            "cloudlinux",
            "eurolinux",
        ];
        std::iter::once(&self.id)
            .chain(self.id_like.iter())
            .find_map(|id| {
                if debian.contains(&id.as_str()) {
                    Some(Family::Debian)
                } else if rhel.contains(&id.as_str()) {
                    Some(Family::Rhel)
                } else {
                    None
                }
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ubuntu_24_04() {
        let os = parse(include_str!("../../testdata/ubuntu-24.04.os-release"));
        assert_eq!(os.id, "ubuntu");
        assert_eq!(os.id_like, ["debian"]);
        assert_eq!(os.version_id.as_deref(), Some("24.04"));
        assert_eq!(os.codename.as_deref(), Some("noble"));
        assert_eq!(os.family(), Some(Family::Debian));
    }

    #[test]
    fn debian_12() {
        let os = parse(include_str!("../../testdata/debian-12.os-release"));
        assert_eq!(os.id, "debian");
        assert!(os.id_like.is_empty());
        assert_eq!(os.version_id.as_deref(), Some("12"));
        assert_eq!(os.codename.as_deref(), Some("bookworm"));
        assert_eq!(os.family(), Some(Family::Debian));
    }

    #[test]
    fn rocky_9() {
        let os = parse(include_str!("../../testdata/rocky-9.os-release"));
        assert_eq!(os.id, "rocky");
        assert_eq!(os.id_like, ["rhel", "centos", "fedora"]);
        assert_eq!(os.version_id.as_deref(), Some("9.4"));
        assert_eq!(os.codename.as_deref(), Some("blue onyx"));
        assert_eq!(os.family(), Some(Family::Rhel));
        assert_eq!(Family::Rhel.ecosystem(), "rpm");
    }

    #[test]
    fn odd_lines_are_skipped_and_escapes_read() {
        let os = parse("# comment\nnonsense\nID='arch'\nVERSION_ID=\"a\\\"b\"\nID_LIKE=\n");
        assert_eq!(os.id, "arch");
        assert_eq!(os.version_id.as_deref(), Some("a\"b"));
        assert_eq!(os.family(), None);
        assert_eq!(parse("").id, "linux");
    }
}
