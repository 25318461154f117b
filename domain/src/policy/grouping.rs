//! Grouping of the updates a policy's hosts report into the changes of one proposal.
//!
//! Changes are grouped by package, ecosystem and both versions, so a fleet on two starting
//! versions of a package gives two changes; the same change on two architectures of a host
//! counts once. What the policy does not cover (not a security update when it asks for
//! those, below its minimum severity) and what a proposal already going ahead carries for
//! the host are left out. Release upgrades are grouped by distribution and both releases.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use entities::json::{
    Advisory, Impact, JsonText, OfferedUpgrade, Release as ReleaseSide, ReleaseUpgrade, Unreadable,
};
use uuid::Uuid;

use super::{
    change_key::ChangeKey,
    impact::{Builder, HostImpacts},
    reported::Reported,
};
use crate::{severity, status};

/// One change: how many hosts need it and what it fixes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Change {
    pub hosts: i64,
    pub source_name: Option<String>,
    /// The distribution of the first host reported with it (where its changelog is found).
    pub distro: Option<String>,
    /// By (source, external id).
    pub advisories: BTreeMap<(String, String), Advisory>,
}

impl Change {
    /// The advisories as a proposal stores them.
    pub fn advisory_list(&self) -> Vec<Advisory> {
        self.advisories.values().cloned().collect()
    }

    pub fn max_rank(&self) -> Option<u8> {
        self.advisories
            .values()
            .filter_map(|a| a.severity.as_deref().and_then(severity::rank))
            .max()
    }
}

/// A release upgrade a proposal offers: what it is and its hosts.
pub type Release = (ReleaseUpgrade, BTreeSet<Uuid>);

/// What a policy's hosts need now.
#[derive(Clone, Debug, Default)]
pub struct Desired {
    pub keys: Vec<ChangeKey>,
    index: HashMap<ChangeKey, u32>,
    pub changes: Vec<Change>,
    /// Host → indexes into `keys`, ascending.
    pub hosts: BTreeMap<Uuid, Vec<u32>>,
    /// What the changes would do to each host of `hosts` (decisions §21).
    pub impacts: HostImpacts,
    /// Release upgrades by `distro/from/to_version/to_codename`.
    pub releases: BTreeMap<String, Release>,
}

impl Desired {
    fn intern(&mut self, key: ChangeKey) -> u32 {
        if let Some(i) = self.index.get(&key) {
            return *i;
        }
        let i = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
        self.index.insert(key.clone(), i);
        self.keys.push(key);
        self.changes.push(Change::default());
        i
    }

    /// The change at index `i` (as listed in `hosts`).
    pub fn change(&self, i: usize) -> Option<(&ChangeKey, &Change)> {
        Some((self.keys.get(i)?, self.changes.get(i)?))
    }
}

/// What of the reported updates a policy covers.
#[derive(Clone, Copy, Debug)]
pub struct Coverage {
    /// Only security updates (`updates: security`).
    pub security_only: bool,
    /// Only updates fixing an advisory at least this severe (`min_severity`).
    pub min_rank: Option<u8>,
    /// Release upgrades too: only a policy that covers every update, at any severity.
    pub releases: bool,
}

impl Coverage {
    pub fn of(policy: &entities::policies::Model) -> Coverage {
        Coverage {
            security_only: status::Coverage::from(policy.updates.as_str())
                == status::Coverage::Security,
            min_rank: policy.min_severity.as_deref().and_then(severity::rank),
            releases: status::Coverage::from(policy.updates.as_str()) == status::Coverage::All
                && policy.min_severity.is_none(),
        }
    }

    /// Every update and release upgrade.
    pub fn all() -> Coverage {
        Coverage {
            security_only: false,
            min_rank: None,
            releases: true,
        }
    }
}

/// What proposals of the policy already going ahead carry: (host, package, ecosystem, target
/// version) and (host, release key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    pub changes: HashSet<(Uuid, String, String, String)>,
    pub releases: HashSet<(Uuid, String)>,
}

/// An available update as a host reports it (a `host_updates` row).
#[derive(Clone, Debug, sea_orm::FromQueryResult)]
pub struct Update {
    pub host_id: Uuid,
    #[sea_orm(from_alias = "name")]
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
    pub source_name: Option<String>,
    pub security: bool,
    pub advisories: JsonText<Vec<Advisory>>,
    pub requires_reboot: bool,
    pub impact: Option<JsonText<Impact>>,
}

impl Update {
    /// The host, and the update as any host reports it.
    pub fn split(self) -> (Uuid, Reported) {
        let key = ChangeKey {
            package: self.package,
            ecosystem: self.ecosystem,
            from_version: self.from_version,
            to_version: self.to_version,
        };
        (
            self.host_id,
            Reported::new(key, self.source_name, self.security, self.advisories)
                .with_impact(self.requires_reboot, self.impact),
        )
    }
}

/// A host's release, and the upgrade its agent says is offered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRelease {
    pub distro: Option<String>,
    pub distro_version: Option<String>,
    pub distro_codename: Option<String>,
    pub release_upgrade: Option<JsonText<OfferedUpgrade>>,
}

/// Builds the [`Desired`] changes of a policy, one host's reported updates at a time.
pub struct Grouping<'a> {
    coverage: Coverage,
    in_flight: &'a InFlight,
    desired: Desired,
    /// What each reported update became, by its address: the change it counts for, or `None`
    /// when the policy does not cover it (its advisories were merged into the change when
    /// first seen). The update is held here, so its address is not reused while grouping.
    seen: HashMap<usize, (Arc<Reported>, Option<u32>)>,
    /// The last host counted for each change: a change a host reports twice (two
    /// architectures) counts once.
    last_host: Vec<Option<Uuid>>,
    /// Each host's distribution, where known.
    distros: HashMap<Uuid, String>,
}

impl<'a> Grouping<'a> {
    pub fn new(coverage: Coverage, in_flight: &'a InFlight) -> Grouping<'a> {
        Grouping {
            coverage,
            in_flight,
            desired: Desired::default(),
            seen: HashMap::new(),
            last_host: Vec::new(),
            distros: HashMap::new(),
        }
    }

    /// Notes `host`'s distribution, so the changes it reports say where their changelogs are.
    pub fn host_distro(&mut self, host: Uuid, distro: Option<&str>) {
        if let Some(distro) = distro {
            self.distros.insert(host, distro.to_owned());
        }
    }

    /// The change `update` counts for, or `None` when the policy does not cover it (not a
    /// security update when it asks for those, below its minimum severity). Advisories that
    /// cannot be read are an error: an update is never proposed as if it fixed nothing.
    fn change_of(&mut self, update: &Arc<Reported>) -> Result<Option<u32>, Unreadable> {
        let address = Arc::as_ptr(update) as usize;
        if let Some((_, found)) = self.seen.get(&address) {
            return Ok(*found);
        }
        let covered = !(self.coverage.security_only && !update.security && update.unrated())
            && match self.coverage.min_rank {
                Some(min) => update.max_rank()?.is_some_and(|rank| rank >= min),
                None => true,
            };
        let found = if covered {
            let i = self.desired.intern(update.key.clone());
            if self.last_host.len() < self.desired.keys.len() {
                self.last_host.resize(self.desired.keys.len(), None);
            }
            let change = &mut self.desired.changes[i as usize];
            if change.source_name.is_none() {
                change.source_name = update.source_name.clone();
            }
            for advisory in update.advisories()? {
                change
                    .advisories
                    .entry((advisory.source.clone(), advisory.external_id.clone()))
                    .or_insert_with(|| advisory.clone());
            }
            Some(i)
        } else {
            None
        };
        self.seen.insert(address, (update.clone(), found));
        Ok(found)
    }

    /// Adds the updates `host` reports, but those the policy does not cover and those a
    /// proposal going ahead carries for the host. Each host is added once.
    pub fn add_host(&mut self, host: Uuid, updates: &[Arc<Reported>]) -> Result<(), Unreadable> {
        let mut impact = Builder::default();
        let mut counted = false;
        for update in updates {
            if !self.in_flight.changes.is_empty()
                && self.in_flight.changes.contains(&(
                    host,
                    update.key.package.clone(),
                    update.key.ecosystem.clone(),
                    update.key.to_version.clone(),
                ))
            {
                continue;
            }
            let Some(i) = self.change_of(update)? else {
                continue;
            };
            // Every architecture's update is applied, so each says what it would do.
            impact.add(update);
            let last = &mut self.last_host[i as usize];
            if *last == Some(host) {
                continue; // The same change for two architectures of one host.
            }
            *last = Some(host);
            counted = true;
            self.desired.hosts.entry(host).or_default().push(i);
            let change = &mut self.desired.changes[i as usize];
            change.hosts += 1;
            if change.distro.is_none() {
                change.distro = self.distros.get(&host).cloned();
            }
        }
        if counted {
            self.desired.impacts.keep(host, impact);
        }
        Ok(())
    }

    /// Adds reported rows, host by host (each host once, in the order first seen).
    pub fn add_rows(&mut self, rows: impl IntoIterator<Item = Update>) -> Result<(), Unreadable> {
        let mut order = Vec::new();
        let mut by_host: HashMap<Uuid, Vec<Arc<Reported>>> = HashMap::new();
        for row in rows {
            let (host, update) = row.split();
            by_host
                .entry(host)
                .or_insert_with(|| {
                    order.push(host);
                    Vec::new()
                })
                .push(Arc::new(update));
        }
        for host in order {
            if let Some(updates) = by_host.remove(&host) {
                self.add_host(host, &updates)?;
            }
        }
        Ok(())
    }

    /// Adds the release upgrade `host` is offered, if the policy offers release upgrades and
    /// no proposal going ahead carries it for the host. An offer that cannot be read is an
    /// error.
    pub fn add_release(&mut self, host: Uuid, release: &HostRelease) -> Result<(), Unreadable> {
        if !self.coverage.releases {
            return Ok(());
        }
        let (Some(distro), Some(version), Some(upgrade)) = (
            &release.distro,
            &release.distro_version,
            &release.release_upgrade,
        ) else {
            return Ok(());
        };
        let to = upgrade.read()?.to;
        let to_version = to.version.as_deref().unwrap_or_default();
        let to_codename = to.codename.as_deref().unwrap_or_default();
        if to_version.is_empty() && to_codename.is_empty() {
            return Ok(());
        }
        let key = format!("{distro}/{version}/{to_version}/{to_codename}");
        if self.in_flight.releases.contains(&(host, key.clone())) {
            return Ok(());
        }
        self.desired
            .releases
            .entry(key)
            .or_insert_with(|| {
                let what = ReleaseUpgrade {
                    distro: distro.clone(),
                    from: ReleaseSide {
                        codename: release.distro_codename.clone(),
                        version: Some(version.clone()),
                    },
                    to,
                };
                (what, BTreeSet::new())
            })
            .1
            .insert(host);
        Ok(())
    }

    pub fn finish(mut self) -> Desired {
        for list in self.desired.hosts.values_mut() {
            list.sort_unstable();
        }
        self.desired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn update(package: &str, from: &str, to: &str, advisories: &str) -> Update {
        Update {
            host_id: Uuid::nil(),
            package: package.into(),
            ecosystem: "deb".into(),
            from_version: from.into(),
            to_version: to.into(),
            source_name: Some(package.into()),
            security: advisories != "[]",
            advisories: JsonText::from_stored(advisories),
            requires_reboot: false,
            impact: None,
        }
    }

    fn usn(id: &str, severity: &str) -> String {
        format!(
            r#"[{{"external_id":"{id}","source":"usn","severity":"{severity}","cves":["CVE-2026-{id}"]}}]"#
        )
    }

    fn group(coverage: Coverage, in_flight: &InFlight, reports: Vec<(u128, Update)>) -> Desired {
        let mut grouping = Grouping::new(coverage, in_flight);
        grouping
            .add_rows(reports.into_iter().map(|(h, u)| Update {
                host_id: host(h),
                ..u
            }))
            .expect("readable");
        grouping.finish()
    }

    #[test]
    fn hosts_on_two_starting_versions_give_two_changes_with_exact_counts() {
        let desired = group(
            Coverage::all(),
            &InFlight::default(),
            vec![
                (1, update("openssl", "3.0.1", "3.0.4", &usn("1", "high"))),
                (1, update("curl", "8.5", "8.6", "[]")),
                (2, update("openssl", "3.0.1", "3.0.4", &usn("1", "high"))),
                (3, update("openssl", "3.0.2", "3.0.4", &usn("1", "high"))),
            ],
        );
        let counts: Vec<(&str, &str, i64)> = desired
            .keys
            .iter()
            .zip(&desired.changes)
            .map(|(k, c)| (k.package.as_str(), k.from_version.as_str(), c.hosts))
            .collect();
        assert_eq!(
            counts,
            vec![
                ("openssl", "3.0.1", 2),
                ("curl", "8.5", 1),
                ("openssl", "3.0.2", 1)
            ]
        );
        assert_eq!(desired.hosts.get(&host(1)), Some(&vec![0, 1]));
        assert_eq!(desired.hosts.get(&host(3)), Some(&vec![2]));
        assert_eq!(desired.changes[0].max_rank(), Some(2));
    }

    #[test]
    fn one_change_on_two_architectures_of_a_host_counts_once() {
        let desired = group(
            Coverage::all(),
            &InFlight::default(),
            vec![
                (1, update("libc6", "2.39", "2.40", "[]")),
                (1, update("libc6", "2.39", "2.40", "[]")),
            ],
        );
        assert_eq!(desired.changes.len(), 1);
        assert_eq!(desired.changes[0].hosts, 1);
        assert_eq!(desired.hosts.get(&host(1)), Some(&vec![0]));
    }

    #[test]
    fn advisories_of_one_change_merge_by_source_and_id() {
        let both = r#"[{"external_id":"1","source":"usn","severity":"high"},{"external_id":"9","source":"debian","severity":"low"}]"#;
        let desired = group(
            Coverage::all(),
            &InFlight::default(),
            vec![
                (1, update("openssl", "3.0.1", "3.0.4", &usn("1", "high"))),
                (2, update("openssl", "3.0.1", "3.0.4", both)),
            ],
        );
        let ids: Vec<&(String, String)> = desired.changes[0].advisories.keys().collect();
        assert_eq!(
            ids,
            vec![
                &("debian".to_owned(), "9".to_owned()),
                &("usn".to_owned(), "1".to_owned())
            ]
        );
    }

    #[test]
    fn a_security_policy_leaves_out_plain_updates_and_min_severity_leaves_out_lower_ones() {
        let reports = || {
            vec![
                (1, update("curl", "8.5", "8.6", "[]")),
                (1, update("openssl", "3.0.1", "3.0.4", &usn("1", "medium"))),
                (1, update("sudo", "1.9.1", "1.9.2", &usn("2", "critical"))),
            ]
        };
        let packages =
            |d: &Desired| -> Vec<String> { d.keys.iter().map(|k| k.package.clone()).collect() };
        let security = Coverage {
            security_only: true,
            min_rank: None,
            releases: false,
        };
        let desired = group(security, &InFlight::default(), reports());
        assert_eq!(packages(&desired), vec!["openssl", "sudo"]);
        let high = Coverage {
            security_only: false,
            min_rank: severity::rank("high"),
            releases: false,
        };
        let desired = group(high, &InFlight::default(), reports());
        assert_eq!(packages(&desired), vec!["sudo"]);
    }

    #[test]
    fn what_a_proposal_going_ahead_carries_for_a_host_is_left_out_for_that_host_only() {
        let mut in_flight = InFlight::default();
        in_flight
            .changes
            .insert((host(1), "curl".into(), "deb".into(), "8.6".into()));
        let desired = group(
            Coverage::all(),
            &in_flight,
            vec![
                (1, update("curl", "8.5", "8.6", "[]")),
                (2, update("curl", "8.5", "8.6", "[]")),
            ],
        );
        assert_eq!(desired.changes.len(), 1);
        assert_eq!(desired.changes[0].hosts, 1);
        assert!(!desired.hosts.contains_key(&host(1)));
    }

    #[test]
    fn advisories_or_a_release_offer_that_cannot_be_read_are_an_error_not_nothing_fixed() {
        let in_flight = InFlight::default();
        let mut grouping = Grouping::new(Coverage::all(), &in_flight);
        let broken = Update {
            advisories: JsonText::from_stored(r#"[{"external_id":"1""#),
            ..update("openssl", "3.0.1", "3.0.4", "[]")
        };
        assert!(grouping.add_rows([broken.clone()]).is_err());
        let high = Coverage {
            security_only: false,
            min_rank: severity::rank("high"),
            releases: false,
        };
        assert!(Grouping::new(high, &in_flight).add_rows([broken]).is_err());
        let offer = HostRelease {
            distro: Some("ubuntu".into()),
            distro_version: Some("24.04".into()),
            distro_codename: Some("noble".into()),
            release_upgrade: Some(JsonText::from_stored(r#"{"to":"plucky"}"#)),
        };
        assert!(grouping.add_release(host(1), &offer).is_err());
    }

    #[test]
    fn release_upgrades_group_by_distribution_and_both_releases() {
        let noble = |to: &str| HostRelease {
            distro: Some("ubuntu".into()),
            distro_version: Some("24.04".into()),
            distro_codename: Some("noble".into()),
            release_upgrade: Some(JsonText::from_stored(format!(
                r#"{{"to":{{"codename":"{to}","version":"x"}}}}"#
            ))),
        };
        let in_flight = InFlight::default();
        let mut grouping = Grouping::new(Coverage::all(), &in_flight);
        for (h, release) in [
            (1, noble("plucky")),
            (2, noble("plucky")),
            (3, noble("questing")),
            (4, HostRelease::default()),
        ] {
            grouping.add_release(host(h), &release).expect("readable");
        }
        let desired = grouping.finish();
        let keys: Vec<(&String, usize)> = desired
            .releases
            .iter()
            .map(|(k, (_, hosts))| (k, hosts.len()))
            .collect();
        assert_eq!(
            keys,
            vec![
                (&"ubuntu/24.04/x/plucky".to_owned(), 2),
                (&"ubuntu/24.04/x/questing".to_owned(), 1)
            ]
        );

        let security = Coverage {
            security_only: true,
            min_rank: None,
            releases: false,
        };
        let mut grouping = Grouping::new(security, &in_flight);
        grouping
            .add_release(host(1), &noble("plucky"))
            .expect("readable");
        assert!(
            grouping.finish().releases.is_empty(),
            "only an all-updates policy"
        );
    }
}
