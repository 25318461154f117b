//! Notifications: the organization's channels (create, list, change, delete, test), each
//! channel's delivery log, and every member's own digest setting. Delivery itself is the
//! worker's (`notify.dispatch`, `notify.deliver`, `digest.send`); these operations only write
//! rows and queue work.

pub mod channels;
pub mod deliveries;
pub mod digest;

use entities::notification_events;
use sea_orm::{ColumnTrait, QueryFilter};

use crate::AppState;
use entities::scope::OrgScope;

/// After a change that may have written a notification event in `scope`'s organization:
/// queues a dispatch when one waits (one indexed query). Never fails the change; the
/// scheduler dispatches waiting events anyway.
pub async fn kick(state: &AppState, scope: OrgScope) {
    let waiting = scope
        .rows::<notification_events::Entity>()
        .filter(notification_events::Column::DispatchedAt.is_null())
        .one(&state.db.orm)
        .await;
    match waiting {
        Ok(Some(_)) => domain::notifications::jobs::dispatch_soon(&state.queue).await,
        Ok(None) => {}
        Err(err) => tracing::warn!(error = %err, "could not look for waiting notifications"),
    }
}
