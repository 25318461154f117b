//! Writes events into the notification outbox, inside the caller's transaction: the event
//! commits with the change it tells of, or not at all. A worker dispatches it afterwards
//! (`notify.dispatch`), so the change never waits for a channel.

use chrono::{DateTime, Utc};
use entities::json::JsonText;
use entities::scope::{OrgScope, Untenanted};
use entities::{hosts, notification_events, organizations, proposal_impacts, proposals};
use platform::ids::{HostId, ProposalId};
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbErr, Set};
use serde_json::{Value, json};
use uuid::Uuid;

use super::EventKind;

/// Records an event of `kind` about `subject` in organization `org_id`; `only` sends it to
/// that channel alone (a test). `data` is what receivers get, with the organization added.
pub async fn emit<C: ConnectionTrait>(
    txn: &C,
    org_id: Uuid,
    kind: EventKind,
    subject: Option<String>,
    only: Option<Uuid>,
    mut data: Value,
    now: DateTime<Utc>,
) -> Result<Uuid, DbErr> {
    if let Some(org) = OrgScope::of(org_id)
        .rows::<organizations::Entity>()
        .one(txn)
        .await?
        && let Value::Object(fields) = &mut data
    {
        fields.insert(
            "organization".into(),
            json!({"slug": org.slug, "name": org.name}),
        );
    }
    let id = platform::ids::new_uuid();
    notification_events::ActiveModel {
        id: Set(id),
        org_id: Set(org_id),
        kind: Set(kind.as_str().to_owned()),
        subject: Set(subject),
        channel_id: Set(only),
        data: Set(JsonText::new(&data)?),
        created_at: Set(now),
        dispatched_at: Set(None),
    }
    .insert(txn)
    .await?;
    Ok(id)
}

/// The event a proposal's audited move announces, if any (`proposal.rejected` and the like
/// are not notified).
pub fn proposal_event(action: &str) -> Option<EventKind> {
    match action {
        "proposal.opened" => Some(EventKind::ProposalOpened),
        "proposal.approved" => Some(EventKind::ProposalApproved),
        "proposal.scheduled" => Some(EventKind::ProposalScheduled),
        "proposal.applied" => Some(EventKind::ProposalApplied),
        "proposal.failed" => Some(EventKind::ProposalFailed),
        "proposal.halted" => Some(EventKind::ProposalHalted),
        _ => None,
    }
}

/// A proposal as notifications show it; `status` is the one it has just taken.
pub fn proposal_data(
    proposal: &proposals::Model,
    status: &str,
    scheduled_for: Option<DateTime<Utc>>,
) -> Value {
    let mut shown = json!({
        "id": ProposalId::from(proposal.id).to_string(),
        "number": proposal.number,
        "title": proposal.title,
        "kind": proposal.kind,
        "status": status,
        "hosts": proposal.hosts,
        "packages": proposal.packages,
        "max_severity": proposal.max_severity,
        "known_exploited": proposal.known_exploited,
    });
    if let Some(at) = scheduled_for {
        shown["scheduled_for"] = json!(at);
    }
    json!({ "proposal": shown })
}

/// What approving `proposal` would do to its hosts and its warnings (decisions §21), as
/// `proposal.opened` tells them: `{impact: {hosts, hosts_rebooting, hosts_unknown, restarts:
/// [{unit, hosts}], installs: [{name, hosts}], removes: [{name, hosts}], …}, warnings}`, the
/// shapes of the proposal detail. Without a stored summary (a release upgrade) every host is
/// unknown.
pub async fn impact_data<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
) -> Result<(Value, Value), DbErr> {
    let stored = proposal_impacts::Entity::row(proposal.id)
        .one(txn)
        .await?
        .and_then(|row| row.summary.read().ok());
    let mut summary = stored.unwrap_or_else(|| crate::policy::impact::unknown(proposal.hosts));
    let warnings = std::mem::take(&mut summary.warnings);
    let counts = |list: &[entities::json::ImpactCount], name: &str| -> Value {
        list.iter()
            .map(|c| json!({ name: c.name, "hosts": c.hosts }))
            .collect()
    };
    let impact = json!({
        "hosts": summary.hosts,
        "hosts_rebooting": summary.hosts_rebooting,
        "hosts_unknown": summary.hosts_unknown,
        "restarts": counts(&summary.restarts, "unit"),
        "installs": counts(&summary.installs, "name"),
        "removes": counts(&summary.removes, "name"),
        "restarts_total": summary.restarts_total,
        "installs_total": summary.installs_total,
        "removes_total": summary.removes_total,
    });
    Ok((impact, json!(warnings)))
}

/// Records `kind` about `proposal`, which has just taken `status`. `proposal.opened` carries
/// the proposal's impact and warnings (decisions §21), so an approver is told what approving
/// would do where they are told that it awaits them; `extra` fields (a halted rollout's
/// `rollout: {reason, wave, wave_name, by_hand}`) join the data.
pub async fn proposal<C: ConnectionTrait>(
    txn: &C,
    proposal: &proposals::Model,
    kind: EventKind,
    status: &str,
    scheduled_for: Option<DateTime<Utc>>,
    extra: Option<(&str, Value)>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut data = proposal_data(proposal, status, scheduled_for);
    if kind == EventKind::ProposalOpened {
        let (impact, warnings) = impact_data(txn, proposal).await?;
        data["proposal"]["impact"] = impact;
        data["proposal"]["warnings"] = warnings;
    }
    if let Some((key, value)) = extra {
        data[key] = value;
    }
    emit(
        txn,
        proposal.org_id,
        kind,
        Some(ProposalId::from(proposal.id).to_string()),
        None,
        data,
        now,
    )
    .await
    .map(|_| ())
}

/// Records `kind` (`host.enrolled`, `host.offline`) about `host`.
pub async fn host<C: ConnectionTrait>(
    txn: &C,
    host: &hosts::Model,
    kind: EventKind,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let id = HostId::from(host.id).to_string();
    let data = json!({
        "host": {
            "id": id,
            "hostname": host.hostname,
            "display_name": host.display_name,
            "last_seen_at": host.last_seen_at,
        }
    });
    emit(txn, host.org_id, kind, Some(id), None, data, now)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_catalogued_moves_are_notified() {
        assert_eq!(
            proposal_event("proposal.approved"),
            Some(EventKind::ProposalApproved)
        );
        assert_eq!(
            proposal_event("proposal.failed"),
            Some(EventKind::ProposalFailed)
        );
        assert_eq!(
            proposal_event("proposal.halted"),
            Some(EventKind::ProposalHalted)
        );
        assert_eq!(proposal_event("proposal.rejected"), None);
        assert_eq!(proposal_event("proposal.resumed"), None);
        assert_eq!(proposal_event("proposal.superseded"), None);
    }
}
