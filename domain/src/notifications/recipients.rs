//! Who an email channel may send to (decisions §18): the organization's members and addresses
//! at its verified domains. Anybody else is refused when the channel is saved, and dropped at
//! delivery (a member who left, a domain released), so that a channel is never a relay from the
//! service's own domain to strangers.

use entities::scope::OrgScope;
use entities::{accounts, memberships, sso_domains};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, JoinType, QueryFilter, QuerySelect, RelationTrait,
};
use uuid::Uuid;

/// The addresses of `addresses` (lowercase, as a channel stores them) the organization may not
/// send to, in the order given.
pub async fn refused<C: ConnectionTrait>(
    db: &C,
    org_id: Uuid,
    addresses: &[String],
) -> Result<Vec<String>, DbErr> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    let verified: Vec<String> = OrgScope::of(org_id)
        .rows::<sso_domains::Entity>()
        .filter(sso_domains::Column::VerifiedAt.is_not_null())
        .all(db)
        .await?
        .into_iter()
        .map(|claim| claim.domain)
        .collect();
    let outside: Vec<&String> = addresses
        .iter()
        .filter(|address| {
            crate::sso::email_domain(address).is_none_or(|domain| !verified.contains(&domain))
        })
        .collect();
    if outside.is_empty() {
        return Ok(Vec::new());
    }
    let members: Vec<String> = OrgScope::of(org_id)
        .rows::<memberships::Entity>()
        .select_only()
        .column(accounts::Column::Email)
        .join(JoinType::InnerJoin, memberships::Relation::Account.def())
        .filter(accounts::Column::Email.is_in(outside.iter().map(|a| a.as_str())))
        .into_tuple()
        .all(db)
        .await?;
    Ok(outside
        .into_iter()
        .filter(|address| !members.iter().any(|m| m.eq_ignore_ascii_case(address)))
        .cloned()
        .collect())
}
