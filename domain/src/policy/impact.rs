//! What a proposal's changes would do to its hosts (decisions §21), worked out when the
//! evaluation groups the hosts' updates, so that reading a proposal never reads its hosts'
//! updates again: each host's impact ([`HostImpacts`], kept once for hosts alike) and the
//! proposal's summary with its warnings ([`summarize`]).
//!
//! A host whose agent did not say what some change would do counts as unknown, never as "no
//! impact"; what it did say still counts (a host can be both rebooting and unknown).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use entities::json::{HostImpact, ImpactCount, ImpactInstall, ImpactSummary, JsonText};
use uuid::Uuid;

use super::reported::Reported;

/// Most entries each list of the summary shows (most hosts first); the per-host view has the
/// rest, and `*_total` says how many there are.
pub const MAX_LISTED: usize = 100;
/// Most entries each list of one host's impact keeps (an agent reports at most 1,000 per
/// update; a host's changes together may name more).
pub const MAX_HOST_ENTRIES: usize = 1_000;
/// Most removals the warnings name one by one; the rest are counted in one more line.
pub const MAX_REMOVAL_WARNINGS: usize = 10;
/// Most restart warnings named one by one.
pub const MAX_RESTART_WARNINGS: usize = 10;

/// A host's impact, kept once for every host alike, with its stored text.
#[derive(Debug, PartialEq, Eq)]
pub struct Kept {
    pub impact: HostImpact,
    pub text: JsonText<HostImpact>,
}

/// One host's impact being put together from what its agent said of each change.
#[derive(Default)]
pub struct Builder<'a> {
    unknown: bool,
    reboot: bool,
    restarts: BTreeSet<&'a str>,
    installs: BTreeMap<&'a str, &'a str>,
    removes: BTreeSet<&'a str>,
}

impl<'a> Builder<'a> {
    /// Adds what applying `update` would do.
    pub fn add(&mut self, update: &'a Reported) {
        self.reboot |= update.requires_reboot;
        let Some(impact) = update.impact() else {
            self.unknown = true;
            return;
        };
        self.reboot |= impact.reboot;
        self.restarts
            .extend(impact.restarts.iter().map(String::as_str));
        for install in &impact.installs {
            self.installs
                .entry(install.name.as_str())
                .or_insert(install.version.as_str());
        }
        self.removes
            .extend(impact.removes.iter().map(String::as_str));
    }

    fn finish(self) -> HostImpact {
        HostImpact {
            known: !self.unknown,
            reboot: self.reboot,
            restarts: self
                .restarts
                .into_iter()
                .take(MAX_HOST_ENTRIES)
                .map(str::to_owned)
                .collect(),
            installs: self
                .installs
                .into_iter()
                .take(MAX_HOST_ENTRIES)
                .map(|(name, version)| ImpactInstall {
                    name: name.to_owned(),
                    version: version.to_owned(),
                })
                .collect(),
            removes: self
                .removes
                .into_iter()
                .take(MAX_HOST_ENTRIES)
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// The impacts of a proposal's hosts, each distinct impact kept once.
#[derive(Clone, Debug, Default)]
pub struct HostImpacts {
    by_host: HashMap<Uuid, Arc<Kept>>,
    distinct: HashMap<HostImpact, Arc<Kept>>,
}

impl PartialEq for HostImpacts {
    fn eq(&self, other: &HostImpacts) -> bool {
        self.by_host == other.by_host
    }
}

impl HostImpacts {
    /// Keeps `builder`'s impact as `host`'s.
    pub fn keep(&mut self, host: Uuid, builder: Builder<'_>) {
        let impact = builder.finish();
        let kept = match self.distinct.get(&impact) {
            Some(kept) => kept.clone(),
            None => match JsonText::new(&impact) {
                Ok(text) => {
                    let kept = Arc::new(Kept {
                        text,
                        impact: impact.clone(),
                    });
                    self.distinct.insert(impact, kept.clone());
                    kept
                }
                Err(err) => {
                    // Not for strings and booleans; should it happen the host reads as unknown.
                    tracing::error!(error = %err, "a host's impact cannot be written: unknown");
                    self.by_host.remove(&host);
                    return;
                }
            },
        };
        self.by_host.insert(host, kept);
    }

    /// Forgets `host` (it left the proposal).
    pub fn forget(&mut self, host: &Uuid) {
        self.by_host.remove(host);
    }

    pub fn get(&self, host: &Uuid) -> Option<&Arc<Kept>> {
        self.by_host.get(host)
    }

    /// Each distinct impact and how many hosts have it.
    fn counted(&self) -> Vec<(&HostImpact, i64)> {
        let mut counts: HashMap<*const Kept, (&HostImpact, i64)> = HashMap::new();
        for kept in self.by_host.values() {
            counts
                .entry(Arc::as_ptr(kept))
                .or_insert((&kept.impact, 0))
                .1 += 1;
        }
        counts.into_values().collect()
    }
}

/// Entries most hosts first, then by name.
fn ranked(counts: HashMap<&str, i64>) -> Vec<ImpactCount> {
    let mut list: Vec<ImpactCount> = counts
        .into_iter()
        .map(|(name, hosts)| ImpactCount {
            name: name.to_owned(),
            hosts,
        })
        .collect();
    list.sort_by(|a, b| b.hosts.cmp(&a.hosts).then_with(|| a.name.cmp(&b.name)));
    list
}

fn total(list: &[ImpactCount]) -> i64 {
    i64::try_from(list.len()).unwrap_or(i64::MAX)
}

fn listed(mut list: Vec<ImpactCount>) -> Vec<ImpactCount> {
    list.truncate(MAX_LISTED);
    list
}

fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The summary of a proposal of `hosts` hosts whose impacts are `impacts`; a host without one
/// is unknown. Warnings (decisions §21): every package a change would remove, and every unit
/// that would restart on more than half the proposal's hosts.
pub fn summarize(hosts: i64, impacts: &HostImpacts) -> ImpactSummary {
    let counted = impacts.counted();
    let mut rebooting = 0;
    let mut known = 0;
    let mut with_impact = 0;
    let mut restarts: HashMap<&str, i64> = HashMap::new();
    let mut installs: HashMap<&str, i64> = HashMap::new();
    let mut removes: HashMap<&str, i64> = HashMap::new();
    for (impact, n) in counted {
        with_impact += n;
        if impact.known {
            known += n;
        }
        if impact.reboot {
            rebooting += n;
        }
        for unit in &impact.restarts {
            *restarts.entry(unit).or_default() += n;
        }
        for install in &impact.installs {
            *installs.entry(&install.name).or_default() += n;
        }
        for name in &impact.removes {
            *removes.entry(name).or_default() += n;
        }
    }
    let hosts = hosts.max(with_impact);
    let (restarts, installs, removes) = (ranked(restarts), ranked(installs), ranked(removes));
    let warnings = warnings(hosts, &restarts, &removes);
    ImpactSummary {
        hosts,
        hosts_rebooting: rebooting,
        hosts_unknown: hosts - known,
        restarts_total: total(&restarts),
        installs_total: total(&installs),
        removes_total: total(&removes),
        restarts: listed(restarts),
        installs: listed(installs),
        removes: listed(removes),
        warnings,
    }
}

/// A proposal whose hosts' impacts were never worked out (a release upgrade, or one opened
/// before impacts were kept): every host unknown.
pub fn unknown(hosts: i64) -> ImpactSummary {
    ImpactSummary {
        hosts,
        hosts_unknown: hosts,
        ..ImpactSummary::default()
    }
}

fn warnings(hosts: i64, restarts: &[ImpactCount], removes: &[ImpactCount]) -> Vec<String> {
    let of = |n: i64| format!("{n} of {}", plural(hosts, "host", "hosts"));
    let mut warnings: Vec<String> = removes
        .iter()
        .take(MAX_REMOVAL_WARNINGS)
        .map(|r| format!("Removes the package {} on {}.", r.name, of(r.hosts)))
        .collect();
    if removes.len() > MAX_REMOVAL_WARNINGS {
        let more = removes.len() - MAX_REMOVAL_WARNINGS;
        warnings.push(format!(
            "Removes {more} more {} (see the impact of each host).",
            if more == 1 { "package" } else { "packages" }
        ));
    }
    // More than half: twice the count above the hosts, without rounding.
    let widespread: Vec<&ImpactCount> = restarts
        .iter()
        .filter(|r| r.hosts.saturating_mul(2) > hosts)
        .collect();
    warnings.extend(widespread.iter().take(MAX_RESTART_WARNINGS).map(|r| {
        format!(
            "Restarts {} on {}, more than half of them at once.",
            r.name,
            of(r.hosts)
        )
    }));
    if widespread.len() > MAX_RESTART_WARNINGS {
        let more = widespread.len() - MAX_RESTART_WARNINGS;
        warnings.push(format!(
            "Restarts {more} more {} on more than half of the hosts (see the impact summary).",
            if more == 1 { "unit" } else { "units" }
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use entities::json::{Impact, JsonText};

    use super::*;
    use crate::policy::change_key::ChangeKey;

    fn reported(impact: Option<Impact>, requires_reboot: bool) -> Reported {
        Reported::new(
            ChangeKey::example(),
            None,
            false,
            JsonText::from_stored("[]"),
        )
        .with_impact(
            requires_reboot,
            impact.map(|i| JsonText::new(&i).expect("writable")),
        )
    }

    fn restarting(units: &[&str]) -> Impact {
        Impact {
            restarts: units.iter().map(|u| (*u).to_owned()).collect(),
            ..Impact::default()
        }
    }

    fn host(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn impacts(hosts: &[(u128, Vec<&Reported>)]) -> HostImpacts {
        let mut impacts = HostImpacts::default();
        for (h, updates) in hosts {
            let mut builder = Builder::default();
            for u in updates {
                builder.add(u);
            }
            impacts.keep(host(*h), builder);
        }
        impacts
    }

    #[test]
    fn a_host_s_impact_is_every_change_s_together_and_unknown_when_one_is_not_said() {
        let nginx = reported(Some(restarting(&["nginx.service", "ssh.service"])), false);
        let kernel = reported(
            Some(Impact {
                reboot: true,
                ..Impact::default()
            }),
            false,
        );
        let silent = reported(None, true);
        let found = impacts(&[(1, vec![&nginx, &kernel]), (2, vec![&nginx, &silent])]);
        let one = &found.get(&host(1)).expect("kept").impact;
        assert!(one.known && one.reboot);
        assert_eq!(one.restarts, vec!["nginx.service", "ssh.service"]);
        let two = &found.get(&host(2)).expect("kept").impact;
        assert!(
            !two.known,
            "a change without an impact is unknown, not none"
        );
        assert!(two.reboot, "requires_reboot counts even without an impact");
        assert_eq!(two.restarts, vec!["nginx.service", "ssh.service"]);
    }

    #[test]
    fn hosts_alike_share_one_impact() {
        let nginx = reported(Some(restarting(&["nginx.service"])), false);
        let found = impacts(&[(1, vec![&nginx]), (2, vec![&nginx])]);
        assert!(Arc::ptr_eq(
            found.get(&host(1)).expect("kept"),
            found.get(&host(2)).expect("kept")
        ));
    }

    #[test]
    fn the_summary_counts_hosts_most_first_and_hosts_without_an_impact_are_unknown() {
        let web = reported(Some(restarting(&["nginx.service", "ssh.service"])), false);
        let db = reported(
            Some(Impact {
                restarts: vec!["ssh.service".into()],
                installs: vec![ImpactInstall {
                    name: "libssl3t64".into(),
                    version: "3.0.13".into(),
                }],
                removes: vec!["libssl3".into()],
                reboot: false,
            }),
            false,
        );
        let kernel = reported(
            Some(Impact {
                reboot: true,
                ..Impact::default()
            }),
            false,
        );
        let silent = reported(None, false);
        let found = impacts(&[
            (1, vec![&web]),
            (2, vec![&web, &kernel]),
            (3, vec![&db]),
            (4, vec![&silent]),
        ]);
        // Host 5 is in the proposal without an impact at all.
        let summary = summarize(5, &found);
        assert_eq!(
            (
                summary.hosts,
                summary.hosts_rebooting,
                summary.hosts_unknown
            ),
            (5, 1, 2)
        );
        let names = |list: &[ImpactCount]| -> Vec<(String, i64)> {
            list.iter().map(|c| (c.name.clone(), c.hosts)).collect()
        };
        assert_eq!(
            names(&summary.restarts),
            vec![("ssh.service".into(), 3), ("nginx.service".into(), 2)]
        );
        assert_eq!(names(&summary.installs), vec![("libssl3t64".into(), 1)]);
        assert_eq!(names(&summary.removes), vec![("libssl3".into(), 1)]);
        assert_eq!(
            summary.warnings,
            vec![
                "Removes the package libssl3 on 1 of 5 hosts.",
                "Restarts ssh.service on 3 of 5 hosts, more than half of them at once.",
            ]
        );
    }

    #[test]
    fn exactly_half_is_not_more_than_half() {
        let web = reported(Some(restarting(&["nginx.service"])), false);
        let quiet = reported(Some(Impact::default()), false);
        let summary = summarize(
            4,
            &impacts(&[
                (1, vec![&web]),
                (2, vec![&web]),
                (3, vec![&quiet]),
                (4, vec![&quiet]),
            ]),
        );
        assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
        assert_eq!(summary.hosts_unknown, 0);
        let summary = summarize(
            3,
            &impacts(&[(1, vec![&web]), (2, vec![&web]), (3, vec![&quiet])]),
        );
        assert_eq!(summary.warnings.len(), 1);
    }

    #[test]
    fn long_lists_are_cut_with_their_totals_and_warnings_say_how_many_more() {
        let names: Vec<String> = (0..150).map(|i| format!("pkg{i:03}")).collect();
        let many = reported(
            Some(Impact {
                removes: names.clone(),
                restarts: names.iter().map(|n| format!("{n}.service")).collect(),
                ..Impact::default()
            }),
            false,
        );
        let summary = summarize(1, &impacts(&[(1, vec![&many])]));
        assert_eq!(summary.removes.len(), MAX_LISTED);
        assert_eq!(summary.removes_total, 150);
        assert_eq!(
            summary.warnings.len(),
            MAX_REMOVAL_WARNINGS + 1 + MAX_RESTART_WARNINGS + 1
        );
        assert!(
            summary
                .warnings
                .contains(&"Removes 140 more packages (see the impact of each host).".to_owned()),
            "{:?}",
            summary.warnings
        );
    }

    #[test]
    fn a_proposal_without_impacts_is_all_unknown() {
        let summary = unknown(7);
        assert_eq!((summary.hosts, summary.hosts_unknown), (7, 7));
        assert!(summary.warnings.is_empty());
    }
}
