//! The summary columns of a proposal (kind, title, counts, severity, known-exploited), from
//! what it carries, and the summary of its hosts' impacts.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use entities::json::{ImpactSummary, Release, ReleaseUpgrade};

use super::grouping::{Change, Desired};
use crate::{severity, status::ProposalKind};

/// The summary columns of a proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub kind: ProposalKind,
    pub title: String,
    pub hosts: i64,
    pub packages: i64,
    pub max_severity: Option<String>,
    pub known_exploited: bool,
    /// What the changes would do to the hosts (decisions §21); `None` for a release upgrade,
    /// whose impact no agent works out (all its hosts are unknown).
    pub impact: Option<Box<ImpactSummary>>,
}

/// A package proposal's summary; `kev` holds the CVEs on the known-exploited catalogue.
pub fn summarize(desired: &Desired, kev: &HashSet<String>) -> Summary {
    let packages: BTreeSet<&str> = desired.keys.iter().map(|k| k.package.as_str()).collect();
    let max_rank = desired.changes.iter().filter_map(Change::max_rank).max();
    let security = desired.changes.iter().all(|c| !c.advisories.is_empty());
    let known_exploited = desired.changes.iter().any(|c| {
        c.advisories
            .values()
            .any(|a| a.cves.iter().any(|cve| kev.contains(cve)))
    });
    // Name the most severe packages first, then alphabetically.
    let mut ranked: BTreeMap<&str, Option<u8>> = BTreeMap::new();
    for (key, change) in desired.keys.iter().zip(&desired.changes) {
        let rank = ranked.entry(key.package.as_str()).or_default();
        *rank = (*rank).max(change.max_rank());
    }
    let mut names: Vec<(&str, Option<u8>)> = ranked.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let names: Vec<&str> = names.into_iter().map(|(n, _)| n).collect();
    let listed = match names.as_slice() {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [a, b] => format!("{a} and {b}"),
        [a, b, rest @ ..] => format!("{a}, {b} and {} more packages", rest.len()),
    };
    let (kind, title) = if security {
        (
            ProposalKind::SecurityUpdate,
            format!("Security updates: {listed}"),
        )
    } else {
        (ProposalKind::PackageUpdate, format!("Updates: {listed}"))
    };
    let hosts = i64::try_from(desired.hosts.len()).unwrap_or(i64::MAX);
    Summary {
        kind,
        title,
        impact: Some(Box::new(super::impact::summarize(hosts, &desired.impacts))),
        hosts,
        packages: i64::try_from(packages.len()).unwrap_or(i64::MAX),
        max_severity: max_rank.map(|r| severity::name(r).to_owned()),
        known_exploited,
    }
}

/// A release upgrade proposal's summary.
pub fn release_summary(what: &ReleaseUpgrade, hosts: usize) -> Summary {
    Summary {
        kind: ProposalKind::DistUpgrade,
        title: release_title(what),
        hosts: i64::try_from(hosts).unwrap_or(i64::MAX),
        packages: 0,
        max_severity: None,
        known_exploited: false,
        impact: None,
    }
}

fn release_title(what: &ReleaseUpgrade) -> String {
    let side = |r: &Release| {
        let version = r.version.as_deref().unwrap_or_default();
        let codename = r.codename.as_deref().unwrap_or_default();
        match (version.is_empty(), codename.is_empty()) {
            (false, false) => format!("{version} ({codename})"),
            (false, true) => version.to_owned(),
            _ => codename.to_owned(),
        }
    };
    format!(
        "Upgrade {} {} to {}",
        what.distro,
        side(&what.from),
        side(&what.to)
    )
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use entities::json::JsonText;

    use crate::policy::grouping::{Coverage, Grouping, InFlight, Update};

    fn desired(updates: &[(&str, &str)]) -> Desired {
        let in_flight = InFlight::default();
        let mut grouping = Grouping::new(Coverage::all(), &in_flight);
        grouping
            .add_rows(updates.iter().map(|(package, advisories)| Update {
                host_id: Uuid::from_u128(1),
                package: (*package).into(),
                ecosystem: "deb".into(),
                from_version: "1".into(),
                to_version: "2".into(),
                source_name: None,
                security: *advisories != "[]",
                advisories: JsonText::from_stored(*advisories),
                requires_reboot: false,
                impact: None,
            }))
            .expect("readable");
        grouping.finish()
    }

    const HIGH: &str =
        r#"[{"external_id":"USN-1","source":"usn","severity":"high","cves":["CVE-1"]}]"#;

    #[test]
    fn the_title_names_the_most_severe_packages_first() {
        let summary = summarize(
            &desired(&[
                ("curl", "[]"),
                ("zlib", "[]"),
                ("openssl", HIGH),
                ("bash", "[]"),
            ]),
            &HashSet::new(),
        );
        assert_eq!(summary.kind, ProposalKind::PackageUpdate);
        assert_eq!(summary.title, "Updates: openssl, bash and 2 more packages");
        assert_eq!(summary.max_severity.as_deref(), Some("high"));
        assert!(!summary.known_exploited);
    }

    #[test]
    fn every_change_fixing_an_advisory_makes_a_security_update_and_kev_is_flagged() {
        let kev: HashSet<String> = ["CVE-1".to_owned()].into();
        let summary = summarize(&desired(&[("openssl", HIGH)]), &kev);
        assert_eq!(summary.kind, ProposalKind::SecurityUpdate);
        assert_eq!(summary.title, "Security updates: openssl");
        assert!(summary.known_exploited);
    }

    #[test]
    fn a_release_upgrade_is_titled_by_both_releases() {
        let what = ReleaseUpgrade {
            distro: "ubuntu".into(),
            from: Release {
                codename: Some("jammy".into()),
                version: Some("22.04".into()),
            },
            to: Release {
                codename: Some("noble".into()),
                version: None,
            },
        };
        assert_eq!(
            release_summary(&what, 3).title,
            "Upgrade ubuntu 22.04 (jammy) to noble"
        );
    }
}
