//! How often one address may be emailed a sign-in or sign-up link (decisions §18): at most one
//! a minute and five an hour for each kind. The operations that send them answer 202 whether
//! or not a link went out, so the limit tells nobody anything; a sign-in link right after a
//! sign-up is another kind and is not held back.
//!
//! Each link sent is a row of `email_sends` keyed by kind and a hash of the address (the
//! address itself is not kept there); the windows are counted exactly, under a lock on the
//! key, so two requests at once cannot both take the last place.

use chrono::{DateTime, Duration, Utc};
use entities::email_sends;
use entities::scope::Untenanted;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr,
    PaginatorTrait, QueryFilter, Set,
};

/// The kinds of emailed link the limit counts apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    SignUp,
    SignIn,
}

impl LinkKind {
    fn as_str(self) -> &'static str {
        match self {
            LinkKind::SignUp => "sign_up",
            LinkKind::SignIn => "sign_in",
        }
    }
}

/// At most this many links of one kind to one address in [`HOUR`]…
pub const PER_HOUR: u64 = 5;
/// …and one in [`MINUTE`].
pub const PER_MINUTE: u64 = 1;
const HOUR: Duration = Duration::hours(1);
const MINUTE: Duration = Duration::minutes(1);

/// The key of an address and kind: the address is hashed, never stored.
fn key(kind: LinkKind, email: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(email.trim().to_lowercase().as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}:{hex}", kind.as_str())
}

/// Takes a place for one link of `kind` to `email` at `now`, in `txn`: `true` when it may be
/// sent (the place is recorded), `false` when the address had one this minute or five this
/// hour. The caller commits, then sends.
pub async fn take(
    txn: &DatabaseTransaction,
    kind: LinkKind,
    email: &str,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let key = key(kind, email);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        // Requests for one address take turns (SQLite's writers already do).
        platform::db::lock_for_transaction(txn, &key).await?;
    }
    let sent = |since: DateTime<Utc>| {
        email_sends::Entity::rows()
            .filter(email_sends::Column::Key.eq(key.as_str()))
            .filter(email_sends::Column::SentAt.gt(since))
            .count(txn)
    };
    if sent(now - MINUTE).await? >= PER_MINUTE || sent(now - HOUR).await? >= PER_HOUR {
        return Ok(false);
    }
    email_sends::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        key: Set(key),
        sent_at: Set(now),
    }
    .insert(txn)
    .await?;
    Ok(true)
}

/// Forgets sends older than the longest window (the housekeeping's).
pub async fn forget_before<C: ConnectionTrait>(db: &C, now: DateTime<Utc>) -> Result<u64, DbErr> {
    Ok(email_sends::Entity::delete_rows()
        .filter(email_sends::Column::SentAt.lt(now - HOUR))
        .exec(db)
        .await?
        .rows_affected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_the_address_per_kind_whatever_its_case() {
        let a = key(LinkKind::SignIn, "Ada@Example.com");
        assert_eq!(a, key(LinkKind::SignIn, " ada@example.com"));
        assert_ne!(a, key(LinkKind::SignUp, "ada@example.com"));
        assert!(!a.contains("ada"), "the address is not kept: {a}");
    }
}
