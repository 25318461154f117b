//! A host's event history: what happened to it, written beside the change that caused it.

use crate::HostEventKind;
use chrono::{DateTime, Utc};
use entities::{host_events, hosts, json::JsonText};
use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};
use serde_json::Value;

/// Records a host event.
pub async fn record_event<C: ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    kind: HostEventKind,
    details: Option<Value>,
    at: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    host_events::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(host.org_id),
        host_id: Set(host.id),
        kind: Set(kind.into()),
        details: Set(details.as_ref().map(JsonText::new).transpose()?),
        created_at: Set(at),
    }
    .insert(db)
    .await
    .map(|_| ())
}
