//! What evaluation does with a policy's undecided proposals, decided without a database.
//!
//! A policy has at most one undecided (open or snoozed) package proposal and one per release
//! upgrade it offers. Against what its hosts need now:
//!
//! - nothing needed: the proposal closes (`closed`, nothing outstanding);
//! - nothing new (every needed package and target version is already in it): hosts join and
//!   leave it, its changes and counts follow, it stays undecided;
//! - new updates with `auto_merge`: the proposal absorbs them;
//! - new updates without: a new proposal opens with everything needed, which covers the old
//!   one's packages, so the old one is `superseded` by it.
//!
//! Following and merging keep each existing change at its position and append new ones, so
//! what a host was told stays addressable; evaluating the same needs twice changes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use entities::json::{HostImpact, JsonText};
use uuid::Uuid;

use super::{
    change_key::ChangeKey,
    grouping::{Desired, Release},
};

/// What happens to the policy's package proposal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackagePlan {
    /// Nothing needed and no proposal: nothing to do.
    Nothing,
    /// Nothing needed: the proposal closes.
    Close,
    /// Something needed and no proposal: one opens.
    Open,
    /// New updates, no `auto_merge`: a new proposal opens and supersedes the current one.
    Supersede,
    /// New updates with `auto_merge`: the current proposal absorbs them.
    Merge,
    /// Nothing new: the current proposal follows (hosts join and leave, counts change).
    Follow,
}

/// The current undecided package proposal, as far as the plan needs it.
pub struct Current<'a> {
    pub auto_merge: bool,
    pub changes: &'a [ChangeKey],
}

pub fn plan_packages(current: Option<Current<'_>>, desired: &Desired) -> PackagePlan {
    let Some(current) = current else {
        return if desired.hosts.is_empty() {
            PackagePlan::Nothing
        } else {
            PackagePlan::Open
        };
    };
    if desired.hosts.is_empty() {
        return PackagePlan::Close;
    }
    let targets: HashSet<(&str, &str, &str)> =
        current.changes.iter().map(ChangeKey::target).collect();
    let new_updates = desired.keys.iter().any(|k| !targets.contains(&k.target()));
    match (new_updates, current.auto_merge) {
        (false, _) => PackagePlan::Follow,
        (true, true) => PackagePlan::Merge,
        (true, false) => PackagePlan::Supersede,
    }
}

/// How a proposal's stored changes become the desired ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeDiff {
    /// The stored position of each desired change (by index into `Desired::keys`).
    pub positions: Vec<i32>,
    /// Desired changes already stored: (position, desired index); their counts may differ.
    pub kept: Vec<(i32, usize)>,
    /// Desired changes to add: (new position, desired index).
    pub added: Vec<(i32, usize)>,
    /// Stored positions no host needs any more.
    pub removed: Vec<i32>,
}

/// Keeps each stored change at its position, appends new ones after the highest, and removes
/// the rest.
pub fn diff_changes(stored: &[(i32, ChangeKey)], desired: &Desired) -> ChangeDiff {
    let mut next = stored.iter().map(|(p, _)| p + 1).max().unwrap_or(0);
    let mut by_key: HashMap<&ChangeKey, i32> = stored.iter().map(|(p, k)| (k, *p)).collect();
    let mut diff = ChangeDiff::default();
    for (i, key) in desired.keys.iter().enumerate() {
        match by_key.remove(key) {
            Some(position) => {
                diff.positions.push(position);
                diff.kept.push((position, i));
            }
            None => {
                diff.positions.push(next);
                diff.added.push((next, i));
                next += 1;
            }
        }
    }
    diff.removed = by_key.into_values().collect();
    diff.removed.sort_unstable();
    diff
}

/// A host's change list as a proposal stores it: its positions, ascending.
pub fn encode(positions: impl Iterator<Item = i32>) -> Vec<i32> {
    let mut list: Vec<i32> = positions.collect();
    list.sort_unstable();
    list
}

/// A host as a proposal stores it: its change list and its impact.
pub type StoredHost = (JsonText<Vec<i32>>, Option<JsonText<HostImpact>>);

/// A host's row to write: the host, its change list and its impact.
pub type HostRow = (Uuid, Vec<i32>, Option<JsonText<HostImpact>>);

/// How a proposal's stored hosts become the desired ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostDiff {
    /// Hosts that join, with their change lists and impacts.
    pub added: Vec<HostRow>,
    /// Hosts whose change list or impact differs (or whose list cannot be read: it is
    /// written again).
    pub changed: Vec<HostRow>,
    /// Hosts that leave.
    pub removed: Vec<Uuid>,
}

/// `stored` maps each host to its stored change list and impact; `positions` is
/// [`ChangeDiff::positions`]. A stored list that cannot be read differs from every list; an
/// impact is compared as stored text (it is written the same way every time).
pub fn diff_hosts(
    mut stored: HashMap<Uuid, StoredHost>,
    desired: &Desired,
    positions: &[i32],
) -> HostDiff {
    let mut diff = HostDiff::default();
    for (host, list) in &desired.hosts {
        let changes = encode(
            list.iter()
                .filter_map(|i| positions.get(*i as usize).copied()),
        );
        let impact = desired.impacts.get(host).map(|kept| kept.text.clone());
        match stored.remove(host) {
            Some((old, old_impact))
                if old.read().is_ok_and(|old| old == changes) && old_impact == impact => {}
            Some(_) => diff.changed.push((*host, changes, impact)),
            None => diff.added.push((*host, changes, impact)),
        }
    }
    diff.removed = stored.into_keys().collect();
    diff.removed.sort_unstable();
    diff
}

/// What happens to the policy's release-upgrade proposals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleasePlan {
    /// Proposals (by index into the current list) that follow their upgrade's hosts.
    pub follow: Vec<(usize, String)>,
    /// Proposals (by index) whose upgrade nobody needs, or that repeat another's: closed.
    pub close: Vec<usize>,
    /// Upgrades needed that no proposal offers yet: one opens for each.
    pub open: Vec<String>,
}

/// `current` lists the release key of each undecided release proposal, oldest first.
pub fn plan_releases(
    current: &[Option<String>],
    desired: &BTreeMap<String, Release>,
) -> ReleasePlan {
    let mut plan = ReleasePlan::default();
    let mut seen = BTreeSet::new();
    for (i, key) in current.iter().enumerate() {
        let key = key.clone().unwrap_or_default();
        if desired.contains_key(&key) && seen.insert(key.clone()) {
            plan.follow.push((i, key));
        } else {
            plan.close.push(i);
        }
    }
    plan.open = desired
        .keys()
        .filter(|k| !seen.contains(*k))
        .cloned()
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::grouping::{Coverage, Grouping, InFlight, Update};

    fn key(package: &str, from: &str, to: &str) -> ChangeKey {
        ChangeKey {
            package: package.into(),
            ecosystem: "deb".into(),
            from_version: from.into(),
            to_version: to.into(),
        }
    }

    /// What hosts need: (host, package, from, to).
    fn desired(reports: &[(u128, &str, &str, &str)]) -> Desired {
        let in_flight = InFlight::default();
        let mut grouping = Grouping::new(Coverage::all(), &in_flight);
        grouping
            .add_rows(reports.iter().map(|(host, package, from, to)| Update {
                host_id: Uuid::from_u128(*host),
                package: (*package).into(),
                ecosystem: "deb".into(),
                from_version: (*from).into(),
                to_version: (*to).into(),
                source_name: None,
                security: false,
                advisories: JsonText::from_stored("[]"),
                requires_reboot: false,
                impact: None,
            }))
            .expect("readable");
        grouping.finish()
    }

    fn upgrade() -> entities::json::ReleaseUpgrade {
        entities::json::ReleaseUpgrade {
            distro: "ubuntu".into(),
            from: Default::default(),
            to: Default::default(),
        }
    }

    fn current(auto_merge: bool, changes: &[ChangeKey]) -> Option<Current<'_>> {
        Some(Current {
            auto_merge,
            changes,
        })
    }

    #[test]
    fn nothing_needed_closes_the_proposal_or_does_nothing() {
        let none = desired(&[]);
        assert_eq!(plan_packages(None, &none), PackagePlan::Nothing);
        let stored = [key("curl", "1", "2")];
        assert_eq!(
            plan_packages(current(false, &stored), &none),
            PackagePlan::Close
        );
    }

    #[test]
    fn a_need_without_a_proposal_opens_one() {
        let need = desired(&[(1, "curl", "1", "2")]);
        assert_eq!(plan_packages(None, &need), PackagePlan::Open);
    }

    #[test]
    fn a_new_package_supersedes_without_auto_merge_and_merges_with_it() {
        let stored = [key("curl", "1", "2")];
        let need = desired(&[(1, "curl", "1", "2"), (1, "openssl", "3.0.1", "3.0.4")]);
        assert_eq!(
            plan_packages(current(false, &stored), &need),
            PackagePlan::Supersede
        );
        assert_eq!(
            plan_packages(current(true, &stored), &need),
            PackagePlan::Merge
        );
    }

    #[test]
    fn a_newer_target_version_of_a_proposed_package_is_a_new_update() {
        let stored = [key("curl", "1", "2")];
        let need = desired(&[(1, "curl", "1", "3")]);
        assert_eq!(
            plan_packages(current(false, &stored), &need),
            PackagePlan::Supersede
        );
    }

    #[test]
    fn another_starting_version_or_fewer_hosts_is_nothing_new() {
        let stored = [key("curl", "1", "2"), key("openssl", "3.0.1", "3.0.4")];
        // A host on another starting version of the same update, and openssl no longer
        // needed: the proposal follows.
        let need = desired(&[(1, "curl", "1", "2"), (2, "curl", "1.5", "2")]);
        assert_eq!(
            plan_packages(current(false, &stored), &need),
            PackagePlan::Follow
        );
    }

    #[test]
    fn following_keeps_positions_appends_new_changes_and_removes_gone_ones() {
        let stored = vec![
            (0, key("curl", "1", "2")),
            (1, key("openssl", "3.0.1", "3.0.4")),
            (4, key("zlib", "1.2", "1.3")),
        ];
        let need = desired(&[
            (1, "zlib", "1.2", "1.3"),
            (1, "curl", "1.5", "2"),
            (2, "curl", "1", "2"),
        ]);
        let diff = diff_changes(&stored, &need);
        assert_eq!(
            diff.positions,
            vec![4, 5, 0],
            "zlib kept, curl 1.5 appended"
        );
        assert_eq!(diff.kept, vec![(4, 0), (0, 2)]);
        assert_eq!(diff.added, vec![(5, 1)]);
        assert_eq!(diff.removed, vec![1], "openssl is gone");
    }

    #[test]
    fn hosts_join_leave_and_change_lists_by_stored_position() {
        let need = desired(&[
            (1, "curl", "1", "2"),
            (2, "curl", "1", "2"),
            (2, "zlib", "1.2", "1.3"),
        ]);
        let positions = vec![7, 3];
        let impact = |h: u128| {
            need.impacts
                .get(&Uuid::from_u128(h))
                .map(|k| k.text.clone())
        };
        let stored_as = |rows: &[(u128, &str)]| -> HashMap<Uuid, StoredHost> {
            rows.iter()
                .map(|(h, list)| {
                    (
                        Uuid::from_u128(*h),
                        (JsonText::from_stored(*list), impact(*h)),
                    )
                })
                .collect()
        };
        let stored = stored_as(&[(1, "[7]"), (2, "[7]"), (9, "[3]")]);
        let diff = diff_hosts(stored, &need, &positions);
        assert_eq!(diff.added, vec![]);
        assert_eq!(
            diff.changed,
            vec![(Uuid::from_u128(2), vec![3, 7], impact(2))]
        );
        assert_eq!(diff.removed, vec![Uuid::from_u128(9)]);

        let again = stored_as(&[(1, "[7]"), (2, "[3, 7]")]);
        assert_eq!(
            diff_hosts(again, &need, &positions),
            HostDiff::default(),
            "the same needs twice change nothing"
        );

        let corrupt = stored_as(&[(1, "[7"), (2, "[3,7]")]);
        assert_eq!(
            diff_hosts(corrupt, &need, &positions).changed,
            vec![(Uuid::from_u128(1), vec![7], impact(1))],
            "a list that cannot be read is written again"
        );

        let mut unknown = stored_as(&[(1, "[7]"), (2, "[3,7]")]);
        if let Some(host) = unknown.get_mut(&Uuid::from_u128(1)) {
            host.1 = None;
        }
        assert_eq!(
            diff_hosts(unknown, &need, &positions).changed,
            vec![(Uuid::from_u128(1), vec![7], impact(1))],
            "an impact that moved is written again"
        );
    }

    #[test]
    fn release_proposals_follow_their_upgrade_close_when_unneeded_or_repeated_and_new_ones_open() {
        let hosts: BTreeSet<Uuid> = [Uuid::from_u128(1)].into();
        let desired: BTreeMap<String, Release> = [
            (
                "ubuntu/22.04/24.04/noble".to_owned(),
                (upgrade(), hosts.clone()),
            ),
            ("ubuntu/24.04/25.04/plucky".to_owned(), (upgrade(), hosts)),
        ]
        .into();
        let current = [
            Some("ubuntu/22.04/24.04/noble".to_owned()),
            Some("debian/12/13/trixie".to_owned()),
            Some("ubuntu/22.04/24.04/noble".to_owned()),
        ];
        let plan = plan_releases(&current, &desired);
        assert_eq!(
            plan.follow,
            vec![(0, "ubuntu/22.04/24.04/noble".to_owned())]
        );
        assert_eq!(plan.close, vec![1, 2]);
        assert_eq!(plan.open, vec!["ubuntu/24.04/25.04/plucky".to_owned()]);
    }
}
