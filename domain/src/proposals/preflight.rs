//! Preflight: why a proposal cannot go ahead on some of its hosts (decisions §7). A host
//! fails when it holds a package its change touches, has been offline beyond three check-in
//! intervals, is decommissioned, or its agent does not permit `apply_updates`. An agent too
//! old to report its permissions is not refused. What cannot be read (its permissions, the
//! packages it holds, its change list) fails the host, named.

use entities::scope::{AllOrgs, Untenanted};
use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use entities::{hosts, json::JsonText, proposal_changes, proposal_hosts, proposals};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::host_jobs::hosts_of;

/// Missed check-in intervals after which a host is too long offline to update.
const MISSED_INTERVALS: i64 = 3;
/// Hosts whose change lists are read per query.
const CHUNK: usize = 500;

/// What preflight reads of a target host.
#[derive(Clone, Debug)]
pub struct Target {
    pub id: Uuid,
    pub hostname: String,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub check_in_interval_s: i32,
    pub decommissioned_at: Option<DateTime<Utc>>,
    /// `None` for an agent too old to say.
    pub agent_permissions: Option<JsonText<Vec<String>>>,
    /// Package names.
    pub held_packages: JsonText<Vec<String>>,
}

/// The host's own problem, if it has one, or the packages it holds (which fail it only when
/// a change of the proposal touches one).
pub fn check(host: &Target, now: DateTime<Utc>) -> Result<Vec<String>, String> {
    let hostname = &host.hostname;
    if host.decommissioned_at.is_some() {
        return Err(format!("{hostname} is decommissioned"));
    }
    let silent_for = host.last_seen_at.map(|seen| now - seen);
    let limit = Duration::seconds(MISSED_INTERVALS * i64::from(host.check_in_interval_s));
    if silent_for.is_some_and(|d| d > limit) {
        return Err(format!(
            "{hostname} has been offline for over three check-ins"
        ));
    }
    if let Some(permissions) = &host.agent_permissions {
        let list = permissions
            .read()
            .map_err(|_| format!("{hostname}'s agent permissions cannot be read"))?;
        if !list.iter().any(|p| p == "apply_updates") {
            return Err(format!("{hostname}'s agent does not permit apply_updates"));
        }
    }
    host.held_packages
        .read()
        .map_err(|_| format!("{hostname}'s held packages cannot be read"))
}

/// Every problem of the proposal's hosts, by hostname; empty when it may go ahead.
pub async fn preflight<C: ConnectionTrait>(
    txn: &C,
    p: &proposals::Model,
    now: DateTime<Utc>,
) -> Result<Vec<String>, DbErr> {
    type Row = (
        Uuid,
        String,
        Option<DateTime<Utc>>,
        i32,
        Option<DateTime<Utc>>,
        Option<JsonText<Vec<String>>>,
        JsonText<Vec<String>>,
    );
    let rows: Vec<Row> = AllOrgs::rows::<hosts::Entity>()
        .select_only()
        .columns([
            hosts::Column::Id,
            hosts::Column::Hostname,
            hosts::Column::LastSeenAt,
            hosts::Column::CheckInIntervalS,
            hosts::Column::DecommissionedAt,
            hosts::Column::AgentPermissions,
            hosts::Column::HeldPackages,
        ])
        .filter(hosts::Column::Id.in_subquery(hosts_of(p.id)))
        .order_by_asc(hosts::Column::Hostname)
        .into_tuple()
        .all(txn)
        .await?;
    let mut problems = Vec::new();
    let mut holding: Vec<(Uuid, String, Vec<String>)> = Vec::new();
    for (id, hostname, last_seen_at, interval, decommissioned_at, permissions, held) in rows {
        let target = Target {
            id,
            hostname,
            last_seen_at,
            check_in_interval_s: interval,
            decommissioned_at,
            agent_permissions: permissions,
            held_packages: held,
        };
        match check(&target, now) {
            Err(problem) => problems.push(problem),
            Ok(held) if !held.is_empty() => holding.push((target.id, target.hostname, held)),
            Ok(_) => {}
        }
    }
    if holding.is_empty() {
        return Ok(problems);
    }
    let packages_at: HashMap<i32, String> = proposal_changes::Entity::rows()
        .select_only()
        .column(proposal_changes::Column::Position)
        .column(proposal_changes::Column::Package)
        .filter(proposal_changes::Column::ProposalId.eq(p.id))
        .into_tuple::<(i32, String)>()
        .all(txn)
        .await?
        .into_iter()
        .collect();
    for chunk in holding.chunks(CHUNK) {
        let changes: HashMap<Uuid, JsonText<Vec<i32>>> = proposal_hosts::Entity::rows()
            .select_only()
            .column(proposal_hosts::Column::HostId)
            .column(proposal_hosts::Column::Changes)
            .filter(proposal_hosts::Column::ProposalId.eq(p.id))
            .filter(proposal_hosts::Column::HostId.is_in(chunk.iter().map(|h| h.0)))
            .into_tuple::<(Uuid, JsonText<Vec<i32>>)>()
            .all(txn)
            .await?
            .into_iter()
            .collect();
        for (id, hostname, held) in chunk {
            let list = match changes.get(id).map(JsonText::read).transpose() {
                Ok(list) => list.unwrap_or_default(),
                Err(_) => {
                    problems.push(format!("{hostname}'s change list cannot be read"));
                    continue;
                }
            };
            let touched = list
                .iter()
                .filter_map(|pos| packages_at.get(pos))
                .find(|package| held.contains(package));
            if let Some(package) = touched {
                problems.push(format!("{hostname} holds {package}"));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, 9, 0, 0)
            .single()
            .unwrap_or_default()
    }

    fn host() -> Target {
        Target {
            id: Uuid::nil(),
            hostname: "web-1".into(),
            last_seen_at: Some(now() - Duration::seconds(60)),
            check_in_interval_s: 60,
            decommissioned_at: None,
            agent_permissions: Some(JsonText::from_stored(
                r#"["read_inventory","apply_updates"]"#,
            )),
            held_packages: JsonText::from_stored("[]"),
        }
    }

    #[test]
    fn a_live_permitted_host_passes_and_reports_what_it_holds() {
        assert_eq!(check(&host(), now()), Ok(vec![]));
        let holding = Target {
            held_packages: JsonText::from_stored(r#"["openssl"]"#),
            ..host()
        };
        assert_eq!(check(&holding, now()), Ok(vec!["openssl".to_owned()]));
        let old_agent = Target {
            agent_permissions: None,
            ..host()
        };
        assert_eq!(check(&old_agent, now()), Ok(vec![]));
    }

    #[test]
    fn each_reason_fails_the_host() {
        let gone = Target {
            decommissioned_at: Some(now()),
            ..host()
        };
        assert_eq!(check(&gone, now()), Err("web-1 is decommissioned".into()));
        let silent = Target {
            last_seen_at: Some(now() - Duration::seconds(181)),
            ..host()
        };
        assert!(check(&silent, now()).is_err_and(|e| e.contains("offline")));
        let just_in_time = Target {
            last_seen_at: Some(now() - Duration::seconds(180)),
            ..host()
        };
        assert!(check(&just_in_time, now()).is_ok());
        let read_only = Target {
            agent_permissions: Some(JsonText::from_stored(r#"["read_inventory"]"#)),
            ..host()
        };
        assert!(check(&read_only, now()).is_err_and(|e| e.contains("apply_updates")));
        let unreadable = Target {
            held_packages: JsonText::from_stored("{oops"),
            ..host()
        };
        assert_eq!(
            check(&unreadable, now()),
            Err("web-1's held packages cannot be read".into())
        );
        let unreadable = Target {
            agent_permissions: Some(JsonText::from_stored("apply_updates")),
            ..host()
        };
        assert_eq!(
            check(&unreadable, now()),
            Err("web-1's agent permissions cannot be read".into()),
            "not \"does not permit\": what is wrong is said"
        );
    }
}
