//! `api plan set <org> <plan>`: an operator sets an organization's plan by hand (decisions §17),
//! for a deployment that takes no payments or to correct one. Audited as `billing.plan_set`.

use anyhow::Context;
use domain::billing::Plan;
use entities::scope::AllOrgs;
use platform::{clock::Clock, config::Config, db::Database};

/// Sets organization `slug`'s plan to `plan` (one of the known plans) and says so on stdout.
pub async fn set_plan(config: Config, slug: &str, plan: &str) -> anyhow::Result<()> {
    let plan = Plan::from(plan);
    if !Plan::KNOWN.contains(&plan) {
        anyhow::bail!("unknown plan {plan:?}: expected free, team, business or enterprise");
    }
    let db = Database::connect(&config, 1).await?;
    // Migrate only a database that needs it: applying nothing still takes SQLite's write lock
    // (the job queue's setup), which a running api's workers contend for.
    if !db.ready().await {
        db.migrate().await?;
    }
    let mut result = set(&db, slug, &plan, platform::clock::SystemClock.now()).await;
    // The running api replicas answer from the next request on with the new plan.
    if result.is_ok()
        && let platform::db::Pool::Postgres(pool) = &db.pool
    {
        result = db
            .identity
            .settle(pool)
            .await
            .context("waiting for the api replicas to hear of the change");
    }
    db.close().await;
    result?;
    println!("{slug}: plan set to {plan}");
    Ok(())
}

/// The change itself, in one transaction with its audit entry.
pub async fn set(
    db: &Database,
    slug: &str,
    plan: &Plan,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    let txn = db.begin_write().await?;
    let org = AllOrgs::organization_by_slug(slug)
        .one(&txn)
        .await?
        .with_context(|| format!("no organization has the slug {slug:?}"))?;
    domain::billing::set_plan(&txn, org.id.into(), plan, now).await?;
    crate::identity::audit::Entry::new("billing.plan_set")
        .org(org.id)
        .target_organization(slug)
        .details(serde_json::json!({ "plan": plan.as_str(), "by": "operator" }))
        .write(&txn, now)
        .await?;
    txn.commit().await?;
    Ok(())
}
