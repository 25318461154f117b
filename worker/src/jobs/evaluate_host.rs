//! `host.evaluate`: after a host changed, keep its label-selected group membership and its
//! update counts current, and mark its policies for evaluation. Idempotent (membership is
//! computed from scratch and only the difference applied), so a repeated or concurrent run
//! changes nothing.
//!
//! Fails closed: a host whose stored labels cannot be read is in no label group (not even
//! one whose selector is negative, `env!=staging`), and a group whose stored selector does
//! not parse picks no host; the first is logged here, the second by `group.evaluate`.

use domain::fleet::jobs::EvaluateHost;
use entities::scope::{AllOrgs, OrgScope, Untenanted};
use std::collections::BTreeSet;

use apalis::prelude::{BoxDynError, Data};
use domain::fleet::selector::Selector;
use entities::{group_hosts, groups, host_updates, hosts, json::Labels};
use platform::ids::HostId;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect, sea_query::Expr};
use uuid::Uuid;

use super::evaluate_group::LABEL;
use crate::Deps;

/// The host's labels; `None` when they cannot be read (logged).
fn labels_of(host: &hosts::Model) -> Option<Labels> {
    host.labels
        .read()
        .inspect_err(|err| {
            tracing::error!(
                host_id = %HostId::from(host.id),
                error = %err,
                "a host's stored labels cannot be read: it is in no label group"
            );
        })
        .ok()
}

pub async fn run(job: EvaluateHost, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let Some(host) = AllOrgs::row::<hosts::Entity>(job.host_id).one(db).await? else {
        return Ok(()); // Gone: nothing to evaluate.
    };
    let labels = labels_of(&host);
    // Most evaluations change nothing stored (a newer version of an update keeps the counts,
    // unchanged labels keep the groups). That is found out on the pool, and only a change
    // takes a write transaction, where it is worked out again: on SQLite the process's writes
    // take turns on one connection, and a check-in waits behind every turn queued before it.
    let outcome = evaluate(db, &host, labels.as_ref()).await?;
    if !outcome.changes(&host) {
        domain::policy::mark_dirty(&deps.db, host.org_id, deps.clock.now()).await?;
        return Ok(());
    }
    let txn = deps.db.begin_write().await?;
    let outcome = evaluate(&txn, &host, labels.as_ref()).await?;
    apply(&txn, host.id, &outcome.current, &outcome.wanted).await?;
    OrgScope::of(host.org_id)
        .update_rows::<hosts::Entity>()
        .col_expr(hosts::Column::UpdatesTotal, Expr::value(outcome.total))
        .col_expr(
            hosts::Column::UpdatesSecurity,
            Expr::value(outcome.security),
        )
        .col_expr(
            hosts::Column::UpdatesRequiringReboot,
            Expr::value(outcome.requiring_reboot),
        )
        .col_expr(
            hosts::Column::AdvisoryCoverage,
            Expr::value(outcome.coverage),
        )
        .filter(hosts::Column::Id.eq(host.id))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    // Its policies' proposals follow (coalesced per policy).
    domain::policy::mark_dirty(&deps.db, host.org_id, deps.clock.now()).await?;
    Ok(())
}

/// What a host's evaluation stores: its label groups and its update counts.
struct Outcome {
    /// The label groups it is in now.
    current: BTreeSet<Uuid>,
    /// The label groups whose selector it matches.
    wanted: BTreeSet<Uuid>,
    /// Update counts; `None` until the host has reported an inventory.
    total: Option<i32>,
    security: Option<i32>,
    requiring_reboot: Option<i32>,
    coverage: &'static str,
}

impl Outcome {
    /// Whether storing this would change the host's row or its groups.
    fn changes(&self, host: &hosts::Model) -> bool {
        self.current != self.wanted
            || host.updates_total != self.total
            || host.updates_security != self.security
            || host.updates_requiring_reboot != self.requiring_reboot
            || host.advisory_coverage != self.coverage
    }
}

async fn evaluate<C: sea_orm::ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    labels: Option<&Labels>,
) -> Result<Outcome, sea_orm::DbErr> {
    let live = host.decommissioned_at.is_none();
    let org_groups = OrgScope::of(host.org_id)
        .rows::<groups::Entity>()
        .filter(groups::Column::Selector.is_not_null())
        .all(db)
        .await?;
    let current: BTreeSet<Uuid> = group_hosts::Entity::rows()
        .filter(group_hosts::Column::HostId.eq(host.id))
        .filter(group_hosts::Column::Source.eq(LABEL))
        .all(db)
        .await?
        .into_iter()
        .map(|m| m.group_id)
        .collect();
    let wanted: BTreeSet<Uuid> = org_groups
        .iter()
        .filter(|g| {
            let Some(labels) = labels.filter(|_| live) else {
                return false;
            };
            g.selector
                .as_deref()
                .and_then(|s| Selector::parse(s).ok())
                .is_some_and(|s| s.matches(labels))
        })
        .map(|g| g.id)
        .collect();

    // Update counts and advisory coverage from the reported updates.
    let updates: Vec<(bool, bool)> = host_updates::Entity::rows()
        .select_only()
        .column(host_updates::Column::Security)
        .column(host_updates::Column::RequiresReboot)
        .filter(host_updates::Column::HostId.eq(host.id))
        .into_tuple()
        .all(db)
        .await?;
    let count = |f: fn(&(bool, bool)) -> bool| {
        i32::try_from(updates.iter().filter(|u| f(u)).count()).unwrap_or(i32::MAX)
    };
    let evaluated = host.last_inventory_at.is_some();
    Ok(Outcome {
        current,
        wanted,
        total: evaluated.then(|| i32::try_from(updates.len()).unwrap_or(i32::MAX)),
        security: evaluated.then(|| count(|u| u.0)),
        requiring_reboot: evaluated.then(|| count(|u| u.1)),
        coverage: advisory_coverage(host.distro.as_deref(), host.distro_version.as_deref()),
    })
}

/// Distributions with a security advisory feed the service reads.
const FEEDS: &[&str] = &[
    "ubuntu",
    "debian",
    "rhel",
    "rocky",
    "almalinux",
    "centos",
    "fedora",
    "ol",
    "amzn",
    "sles",
    "opensuse-leap",
    "alpine",
];

/// `covered` when the release is known and its distribution has an advisory feed, `no_feed`
/// when the release is known but has none (every update unrated, which is not safe), and
/// `unknown_release` until the agent reports its distribution and version.
pub fn advisory_coverage(distro: Option<&str>, version: Option<&str>) -> &'static str {
    match (distro, version) {
        (Some(distro), Some(version)) if !distro.is_empty() && !version.is_empty() => {
            if FEEDS.contains(&distro) {
                "covered"
            } else {
                "no_feed"
            }
        }
        _ => "unknown_release",
    }
}

async fn apply(
    txn: &sea_orm::DatabaseTransaction,
    host_id: Uuid,
    current: &BTreeSet<Uuid>,
    wanted: &BTreeSet<Uuid>,
) -> Result<(), sea_orm::DbErr> {
    let gone: Vec<Uuid> = current.difference(wanted).copied().collect();
    if !gone.is_empty() {
        group_hosts::Entity::delete_rows()
            .filter(group_hosts::Column::HostId.eq(host_id))
            .filter(group_hosts::Column::Source.eq(LABEL))
            .filter(group_hosts::Column::GroupId.is_in(gone))
            .exec(txn)
            .await?;
    }
    let added: Vec<group_hosts::ActiveModel> = wanted
        .difference(current)
        .map(|group_id| group_hosts::ActiveModel {
            group_id: sea_orm::Set(*group_id),
            source: sea_orm::Set(LABEL.to_owned()),
            host_id: sea_orm::Set(host_id),
        })
        .collect();
    if !added.is_empty() {
        group_hosts::Entity::insert_many(added)
            .on_conflict_do_nothing()
            .exec(txn)
            .await?;
    }
    Ok(())
}
