//! What dnf prints: `check-update` (the available updates as it resolves them), `updateinfo`
//! (advisories, their severity and CVEs), `versionlock list` (held packages) and the
//! transaction table of `--assumeno` (what an upgrade would install and remove).
//!
//! dnf wraps a row whose name is too long for its column: the name alone on one line, the rest
//! on the next. Every table reader here joins such rows.

use std::collections::BTreeMap;

use super::rpm::split_nvr;

/// An update `check-update` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    pub name: String,
    pub arch: String,
    /// `[epoch:]version-release`.
    pub evr: String,
    pub repo: String,
}

/// Rows of whitespace-separated cells, a row wrapped after its first cell joined again.
fn rows(lines: &[&str], cells: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            pending = None;
            continue;
        }
        if words.len() == 1 && pending.is_none() {
            pending = Some(words[0].to_owned());
            continue;
        }
        let mut row: Vec<String> = pending.take().into_iter().collect();
        row.extend(words.iter().map(|w| (*w).to_owned()));
        if row.len() >= cells {
            out.push(row);
        }
    }
    out
}

/// `name.arch` → (`name`, `arch`).
fn split_arch(name_arch: &str) -> Option<(&str, &str)> {
    let (name, arch) = name_arch.rsplit_once('.')?;
    (!name.is_empty() && !arch.is_empty()).then_some((name, arch))
}

/// The updates of `dnf -q check-update` (exit status 100 when there are some).
pub fn parse_check_update(text: &str) -> Vec<Available> {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Obsoleting Packages"))
        .filter(|l| !l.starts_with("Last metadata expiration") && !l.starts_with("Security:"))
        .collect();
    rows(&lines, 3)
        .into_iter()
        .filter_map(|row| {
            let (name, arch) = split_arch(&row[0])?;
            Some(Available {
                name: name.to_owned(),
                arch: arch.to_owned(),
                evr: row[1].clone(),
                repo: row[2].clone(),
            })
        })
        .collect()
}

/// An advisory of `updateinfo`, with the packages it updates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Notice {
    pub id: String,
    /// `security`, `bugfix`, `enhancement`, …
    pub kind: String,
    /// low, medium, high or critical (RHEL's Low, Moderate, Important, Critical).
    pub severity: Option<String>,
    pub title: Option<String>,
    pub cves: Vec<String>,
    /// Package names it updates.
    pub packages: Vec<String>,
}

/// The service's severity words for RHEL's.
pub fn severity(word: &str) -> Option<String> {
    match word.to_ascii_lowercase().as_str() {
        "" | "none" | "unknown" => None,
        "critical" => Some("critical".to_owned()),
        "important" | "high" => Some("high".to_owned()),
        "moderate" | "medium" => Some("medium".to_owned()),
        "low" => Some("low".to_owned()),
        other => Some(other.to_owned()),
    }
}

/// Reads `dnf -q updateinfo list --updates` (`ID TYPE NEVRA` lines, TYPE such as
/// `Important/Sec.` or `bugfix`) and `dnf -q updateinfo info --updates` (a block per advisory:
/// its title, `Update ID`, `Severity`, `CVEs`), joined by advisory id.
pub fn parse_updateinfo(list: &str, info: &str) -> Vec<Notice> {
    let mut notices: BTreeMap<String, Notice> = BTreeMap::new();
    for line in list.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [id, kind, nevra] = words[..] else {
            continue;
        };
        let Some(name) = split_arch(nevra)
            .and_then(|(nvr, _)| split_nvr(nvr))
            .map(|(name, _, _)| name)
        else {
            continue;
        };
        let (level, kind) = match kind.split_once('/') {
            Some((level, kind)) => (level, kind),
            None => ("", kind),
        };
        let notice = notices.entry(id.to_owned()).or_insert_with(|| Notice {
            id: id.to_owned(),
            ..Notice::default()
        });
        notice.kind = match kind {
            "Sec." | "security" => "security".to_owned(),
            other => other.to_lowercase(),
        };
        if notice.severity.is_none() {
            notice.severity = severity(level);
        }
        if !notice.packages.iter().any(|p| p == name) {
            notice.packages.push(name.to_owned());
        }
    }
    let lines: Vec<&str> = info.lines().collect();
    let rule = |line: &str| line.len() >= 10 && line.trim().chars().all(|c| c == '=');
    let mut title: Option<String> = None;
    let mut current: Option<String> = None;
    let mut last_key = String::new();
    for (i, line) in lines.iter().enumerate() {
        if rule(line) {
            if lines.get(i + 2).is_some_and(|l| rule(l)) {
                title = lines.get(i + 1).map(|t| t.trim().to_owned());
                current = None;
            }
            continue;
        }
        let Some((key, value)) = line.split_once(": ") else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        let key = if key.is_empty() {
            last_key.clone()
        } else {
            key.to_owned()
        };
        last_key.clone_from(&key);
        match key.as_str() {
            "Update ID" => {
                current = Some(value.to_owned());
                if let Some(notice) = notices.get_mut(value) {
                    notice.title = title.take().filter(|t| !t.is_empty());
                }
            }
            "CVEs" => {
                if let Some(notice) = current.as_ref().and_then(|id| notices.get_mut(id)) {
                    notice
                        .cves
                        .extend(value.split_whitespace().map(str::to_owned));
                }
            }
            "Severity" => {
                if let Some(notice) = current.as_ref().and_then(|id| notices.get_mut(id)) {
                    notice.severity = severity(value).or(notice.severity.take());
                }
            }
            _ => {}
        }
    }
    notices.into_values().collect()
}

/// The package names of `dnf -q versionlock list`: `name-[epoch:]version-release.*` patterns
/// (an exclude is prefixed `!`).
pub fn parse_versionlock(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("Last metadata"))
        .filter_map(|l| {
            let pattern = l.trim_start_matches('!');
            let without_arch = pattern.rsplit_once('.').map_or(pattern, |(nvr, _)| nvr);
            split_nvr(without_arch).map(|(name, _, _)| name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What a dnf transaction table says it would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    /// (name, version) of packages upgraded.
    pub upgrades: Vec<(String, String)>,
    /// (name, version) of packages newly installed (dependencies included).
    pub installs: Vec<(String, String)>,
    pub removes: Vec<String>,
}

/// Reads the table dnf prints before asking (`dnf --assumeno upgrade …`): sections
/// `Upgrading:`, `Installing…:` and `Removing…:` of `name arch version repository size` rows.
pub fn parse_transaction(text: &str) -> Transaction {
    #[derive(Clone, Copy, PartialEq)]
    enum Section {
        None,
        Upgrade,
        Install,
        Remove,
    }
    let mut out = Transaction::default();
    let mut section = Section::None;
    let mut block: Vec<&str> = Vec::new();
    let flush = |section: Section, block: &mut Vec<&str>, out: &mut Transaction| {
        for row in rows(block, 3) {
            let (name, version) = (row[0].clone(), row[2].clone());
            match section {
                Section::Upgrade => out.upgrades.push((name, version)),
                Section::Install => out.installs.push((name, version)),
                Section::Remove => out.removes.push(name),
                Section::None => {}
            }
        }
        block.clear();
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("Transaction Summary") {
            flush(section, &mut block, &mut out);
            break;
        }
        if !line.starts_with(' ') && trimmed.ends_with(':') {
            flush(section, &mut block, &mut out);
            section = if trimmed.starts_with("Upgrading") {
                Section::Upgrade
            } else if trimmed.starts_with("Installing") {
                Section::Install
            } else if trimmed.starts_with("Removing") {
                Section::Remove
            } else {
                Section::None
            };
            continue;
        }
        if section != Section::None && line.starts_with(' ') {
            block.push(line);
        }
    }
    flush(section, &mut block, &mut out);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn check_update_of_a_rocky_host() {
        // The tests' rpm root, then rows as Rocky 9 prints them (a wrapped long name, and the
        // obsoletes section that follows the updates).
        let text = "
fleet-epoch.noarch                         1:2.1-1                         fleet
fleet-hello.noarch                          1.1-1                          fleet
kernel-core.x86_64                 5.14.0-427.42.1.el9_4                  baseos
python3-some-very-long-package-name-for-wrapping.noarch
                                   1.2.3-4.el9                            appstream
Obsoleting Packages
grub2-tools.x86_64                 1:2.06-82.el9_4                        baseos
    grub2-tools.x86_64             1:2.06-77.el9                          @anaconda
";
        let updates = parse_check_update(text);
        assert_eq!(updates.len(), 4, "{updates:?}");
        assert_eq!(updates[0].name, "fleet-epoch");
        assert_eq!(updates[0].evr, "1:2.1-1");
        assert_eq!(updates[2].arch, "x86_64");
        assert_eq!(
            updates[3].name,
            "python3-some-very-long-package-name-for-wrapping"
        );
        assert_eq!(updates[3].repo, "appstream");
        assert!(parse_check_update("").is_empty());
    }

    #[test]
    fn updateinfo_list_and_info_joined() {
        let list = "RLSA-2026:1001 Important/Sec. fleet-hello-1.1-1.noarch
RLSA-2024:3339 Moderate/Sec.  glibc-2.34-100.el9_4.2.x86_64
RLSA-2024:3339 Moderate/Sec.  glibc-common-2.34-100.el9_4.2.x86_64
RLBA-2024:2953 bugfix         tzdata-2024a-2.el9.noarch
";
        let info = "===============================================================================
  Important: fleet-hello security update
===============================================================================
  Update ID: RLSA-2026:1001
       Type: security
    Updated: 2026-11-01 00:00:00
       CVEs: CVE-2026-1001
Description: Fixes a flaw.
   Severity: Important

===============================================================================
  Moderate: glibc security update
===============================================================================
  Update ID: RLSA-2024:3339
       Type: security
    Updated: 2024-05-29 16:09:47
       Bugs: 2273404 - CVE-2024-2961 glibc: Out of bounds write in iconv
       CVEs: CVE-2024-2961
           : CVE-2024-33599
           : CVE-2024-33600
Description: The glibc packages provide the standard C libraries.
   Severity: Moderate
";
        let notices = parse_updateinfo(list, info);
        assert_eq!(notices.len(), 3);
        let glibc = notices.iter().find(|n| n.id == "RLSA-2024:3339").unwrap();
        assert_eq!(glibc.kind, "security");
        assert_eq!(glibc.severity.as_deref(), Some("medium"));
        assert_eq!(glibc.packages, ["glibc", "glibc-common"]);
        assert_eq!(
            glibc.title.as_deref(),
            Some("Moderate: glibc security update")
        );
        assert_eq!(
            glibc.cves,
            ["CVE-2024-2961", "CVE-2024-33599", "CVE-2024-33600"]
        );
        let hello = notices.iter().find(|n| n.id == "RLSA-2026:1001").unwrap();
        assert_eq!(hello.severity.as_deref(), Some("high"));
        assert_eq!(hello.cves, ["CVE-2026-1001"]);
        let bugfix = notices.iter().find(|n| n.id == "RLBA-2024:2953").unwrap();
        assert_eq!(bugfix.kind, "bugfix");
        assert_eq!(bugfix.severity, None);
        assert!(bugfix.cves.is_empty());
    }

    #[test]
    fn versionlock_patterns_name_packages() {
        let text = "# Added lock on Fri Nov 27 21:33:54 2026\nfleet-epoch-1:2.0-1.*\nkernel-core-0:5.14.0-427.13.1.el9_4.x86_64\n!exclude-me-1.0-1.*\n";
        assert_eq!(
            parse_versionlock(text),
            ["exclude-me", "fleet-epoch", "kernel-core"]
        );
    }

    #[test]
    fn an_assumeno_transaction_table() {
        let text = "Last metadata expiration check: 0:00:15 ago on Fri Nov 27 21:33:40 2026.
Dependencies resolved.
================================================================================
 Package                 Architecture     Version         Repository       Size
================================================================================
Upgrading:
 fleet-pulls             noarch           1.1-1           fleet           6.0 k
Installing dependencies:
 fleet-dep-new           noarch           1.0-1           fleet           6.0 k
 a-package-whose-name-is-too-long-for-the-column
                         x86_64           2:3.4-5.el9     appstream        12 k
Removing dependent packages:
 old-plugin              noarch           0.9-1           @System          4 k

Transaction Summary
================================================================================
Install  2 Packages
Upgrade  1 Package
Operation aborted.
";
        let t = parse_transaction(text);
        assert_eq!(t.upgrades, [("fleet-pulls".to_owned(), "1.1-1".to_owned())]);
        assert_eq!(
            t.installs,
            [
                ("fleet-dep-new".to_owned(), "1.0-1".to_owned()),
                (
                    "a-package-whose-name-is-too-long-for-the-column".to_owned(),
                    "2:3.4-5.el9".to_owned()
                )
            ]
        );
        assert_eq!(t.removes, ["old-plugin"]);
        assert_eq!(parse_transaction("Error: nothing"), Transaction::default());
    }
}
