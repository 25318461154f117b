//! People's accounts: one per email address, made the first time the address signs up, accepts
//! an invitation, is provisioned by SCIM or signs in through its organization's provider.

use chrono::{DateTime, Utc};
use entities::{accounts, scope::Untenanted};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, QueryFilter, Set};

/// The account of `email` (as stored: lowercased), made with `name` and the UTC time zone when
/// there is none yet; and whether it was made now.
pub async fn for_address<C: ConnectionTrait>(
    db: &C,
    email: &str,
    name: Option<String>,
    now: DateTime<Utc>,
) -> Result<(accounts::Model, bool), DbErr> {
    let existing = accounts::Entity::rows()
        .filter(accounts::Column::Email.eq(email))
        .one(db)
        .await?;
    if let Some(account) = existing {
        return Ok((account, false));
    }
    let account = accounts::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        email: Set(email.to_owned()),
        name: Set(name),
        time_zone: Set("UTC".into()),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    Ok((account, true))
}
