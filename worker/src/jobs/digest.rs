//! `digest.send`: one member's digest for one period. It lists what awaits the member's
//! approval, what opened and what failed since their last digest, and hosts that went offline
//! since, each with a link (and an undecided proposal's warnings, decisions §21); with nothing
//! to say nothing is sent. The email is queued under the
//! key `digest-mail:{org}:{account}:{period}` and the period is recorded as sent, so a second
//! run (a retry, a second scheduler, a restart) never sends a second digest for it.

use domain::notifications::jobs::SendDigest;
use entities::scope::{OrgScope, Untenanted};
use std::collections::HashMap;

use apalis::prelude::{BoxDynError, Data};
use chrono::{DateTime, Utc};
use domain::{
    ProposalStatus,
    notifications::digest::{Frequency, zone},
    notifications::emails::{self, DigestContent, DigestItem},
    roles::Role,
};
use entities::{
    accounts, digest_settings, host_events, hosts, memberships, organizations, proposal_decisions,
    proposal_impacts, proposals,
};
use platform::jobs::Queue;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::Expr,
};
use uuid::Uuid;

use crate::Deps;

/// Items listed per section; the count says how many there are in all.
const LISTED: u64 = 20;

pub async fn run(job: SendDigest, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let now = deps.clock.now();
    let Some(setting) = OrgScope::of(job.org_id)
        .row_by_key::<digest_settings::Entity>((job.org_id, job.account_id))
        .one(db)
        .await?
    else {
        return Ok(());
    };
    let Some(frequency) = Frequency::parse(&setting.frequency) else {
        return Ok(());
    };
    if frequency == Frequency::Off || setting.last_sent_key.as_deref() == Some(job.key.as_str()) {
        return Ok(());
    }
    let (Some(member), Some(account), Some(org)) = (
        OrgScope::of(job.org_id)
            .row_by_key::<memberships::Entity>((job.org_id, job.account_id))
            .one(db)
            .await?,
        accounts::Entity::row(job.account_id).one(db).await?,
        OrgScope::of(job.org_id)
            .rows::<organizations::Entity>()
            .one(db)
            .await?,
    ) else {
        return Ok(());
    };
    let since = setting
        .last_sent_at
        .unwrap_or_else(|| now - frequency.period());
    let content = content(db, &deps, &org, &member, since).await?;
    if !content.is_empty() {
        let email = emails::digest(
            &deps.config.base_url,
            &account.email,
            &org.name,
            &org.slug,
            frequency,
            zone(&account.time_zone),
            now,
            &content,
        );
        Queue::new(&deps.db)
            .push_unique(
                &format!("digest-mail:{}:{}:{}", job.org_id, job.account_id, job.key),
                email,
            )
            .await?;
    }
    OrgScope::of(job.org_id)
        .update_rows::<digest_settings::Entity>()
        .col_expr(
            digest_settings::Column::LastSentKey,
            Expr::value(Some(job.key.clone())),
        )
        .col_expr(digest_settings::Column::LastSentAt, Expr::value(Some(now)))
        .filter(digest_settings::Column::AccountId.eq(job.account_id))
        .filter(
            Condition::any()
                .add(digest_settings::Column::LastSentKey.is_null())
                .add(digest_settings::Column::LastSentKey.ne(job.key.clone())),
        )
        .exec(db)
        .await?;
    tracing::info!(key = %job.key, sent = !content.is_empty(), "digest done");
    Ok(())
}

fn item(
    org_slug: &str,
    base: &url::Url,
    p: &proposals::Model,
    warnings: &HashMap<Uuid, Vec<String>>,
) -> DigestItem {
    DigestItem {
        text: format!("#{} {} ({})", p.number, p.title, p.status),
        link: emails::proposal_link(base, org_slug, p.id),
        warnings: warnings.get(&p.id).cloned().unwrap_or_default(),
    }
}

/// The warnings of each of `listed` that is still undecided (decisions §21: what approving
/// would do is news only before it is decided); a summary that cannot be read has none.
async fn warnings_of<C: ConnectionTrait>(
    db: &C,
    listed: &[&proposals::Model],
) -> Result<HashMap<Uuid, Vec<String>>, BoxDynError> {
    let undecided: Vec<Uuid> = listed
        .iter()
        .filter(|p| ProposalStatus::UNDECIDED.contains(&ProposalStatus::of(p)))
        .map(|p| p.id)
        .collect();
    if undecided.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(proposal_impacts::Entity::rows()
        .filter(proposal_impacts::Column::ProposalId.is_in(undecided))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|row| {
            let warnings = row.summary.read().ok()?.warnings;
            (!warnings.is_empty()).then_some((row.proposal_id, warnings))
        })
        .collect())
}

async fn content<C: ConnectionTrait>(
    db: &C,
    deps: &Deps,
    org: &organizations::Model,
    member: &memberships::Model,
    since: DateTime<Utc>,
) -> Result<DigestContent, BoxDynError> {
    let base = &deps.config.base_url;
    let in_org = OrgScope::of(org.id).rows::<proposals::Entity>();
    // A viewer cannot approve: nothing awaits them.
    let (awaiting, awaiting_total) = if member.role.parse() == Ok(Role::Viewer) {
        (Vec::new(), 0)
    } else {
        let approved_by_member =
            proposal_decisions::Entity::column_of(proposal_decisions::Column::ProposalId)
                .and_where(proposal_decisions::Column::ApprovalOf.eq(member.account_id))
                .to_owned();
        let query = in_org
            .clone()
            .filter(proposals::Column::Status.eq(ProposalStatus::Open))
            .filter(proposals::Column::Id.not_in_subquery(approved_by_member));
        (
            query
                .clone()
                .order_by_asc(proposals::Column::Id)
                .limit(LISTED)
                .all(db)
                .await?,
            query.count(db).await?,
        )
    };
    let opened_query = in_org
        .clone()
        .filter(proposals::Column::CreatedAt.gt(since));
    let opened = opened_query
        .clone()
        .order_by_asc(proposals::Column::Id)
        .limit(LISTED)
        .all(db)
        .await?;
    let opened_total = opened_query.count(db).await?;
    let failed_query = in_org
        .filter(proposals::Column::Status.is_in([
            ProposalStatus::Failed.to_string(),
            ProposalStatus::PartiallyApplied.to_string(),
        ]))
        .filter(proposals::Column::ClosedAt.gt(since));
    let failed = failed_query
        .clone()
        .order_by_asc(proposals::Column::Id)
        .limit(LISTED)
        .all(db)
        .await?;
    let failed_total = failed_query.count(db).await?;
    let went_offline: Vec<Uuid> = OrgScope::of(org.id)
        .rows::<host_events::Entity>()
        .select_only()
        .column(host_events::Column::HostId)
        .distinct()
        .filter(host_events::Column::Kind.eq(domain::HostEventKind::WentOffline))
        .filter(host_events::Column::CreatedAt.gt(since))
        .into_tuple()
        .all(db)
        .await?;
    let offline_query = OrgScope::of(org.id)
        .rows::<hosts::Entity>()
        .filter(hosts::Column::Id.is_in(went_offline))
        .filter(hosts::Column::Status.eq(domain::HostStatus::Offline));
    let offline = offline_query
        .clone()
        .order_by_asc(hosts::Column::Hostname)
        .limit(LISTED)
        .all(db)
        .await?;
    let offline_total = offline_query.count(db).await?;
    let listed: Vec<&proposals::Model> = awaiting.iter().chain(&opened).collect();
    let warnings = warnings_of(db, &listed).await?;
    let none = HashMap::new();
    Ok(DigestContent {
        awaiting: awaiting
            .iter()
            .map(|p| item(&org.slug, base, p, &warnings))
            .collect(),
        awaiting_total,
        opened: opened
            .iter()
            .map(|p| item(&org.slug, base, p, &warnings))
            .collect(),
        opened_total,
        failed: failed
            .iter()
            .map(|p| item(&org.slug, base, p, &none))
            .collect(),
        failed_total,
        offline: offline
            .iter()
            .map(|h| DigestItem {
                text: h.display_name.clone().unwrap_or_else(|| h.hostname.clone()),
                link: emails::host_link(base, &org.slug, h.id),
                warnings: Vec::new(),
            })
            .collect(),
        offline_total,
    })
}
