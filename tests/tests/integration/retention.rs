//! Retention (decisions §23): the hourly housekeeping deletes what is older than its retention,
//! in batches, and keeps what is still needed however old. The clock is moved, not waited for.

use chrono::{DateTime, Duration, Utc};
use entities::{
    audit_events, host_events, host_jobs, json::JsonText, notification_attempts,
    notification_channels, notification_deliveries, notification_events, organizations, usage_days,
};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use tests::TestApp;
use uuid::Uuid;

struct Fleet {
    org: Uuid,
    host: Uuid,
    channel: Uuid,
}

async fn fleet(app: &TestApp) -> Fleet {
    app.organization("acme").await;
    let host = app.host("acme", "web-1", &[]).await;
    let db = &app.state.db.orm;
    let org = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq("acme"))
        .one(db)
        .await
        .expect("query")
        .expect("acme")
        .id;
    let host = platform::ids::HostId::parse(&host).expect("host id").uuid();
    let channel = Uuid::now_v7();
    notification_channels::ActiveModel {
        id: Set(channel),
        org_id: Set(org),
        kind: Set("webhook".into()),
        name: Set("ops".into()),
        display: Set("https://hooks.example/ops".into()),
        config: Set("{}".into()),
        events: Set(None),
        created_at: Set(app.clock_now()),
        updated_at: Set(app.clock_now()),
    }
    .insert(db)
    .await
    .expect("channel");
    Fleet { org, host, channel }
}

async fn event(
    app: &TestApp,
    fleet: &Fleet,
    kind: &str,
    subject: Option<&str>,
    at: DateTime<Utc>,
    dispatched: bool,
) -> Uuid {
    let id = Uuid::now_v7();
    notification_events::ActiveModel {
        id: Set(id),
        org_id: Set(fleet.org),
        kind: Set(kind.into()),
        subject: Set(subject.map(str::to_owned)),
        channel_id: Set(None),
        data: Set(entities::json::JsonText::from_stored("{}")),
        created_at: Set(at),
        dispatched_at: Set(dispatched.then_some(at)),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("event");
    id
}

async fn delivery(
    app: &TestApp,
    fleet: &Fleet,
    event: Uuid,
    status: &str,
    at: DateTime<Utc>,
) -> Uuid {
    let id = Uuid::now_v7();
    notification_deliveries::ActiveModel {
        id: Set(id),
        org_id: Set(fleet.org),
        channel_id: Set(fleet.channel),
        event_id: Set(event),
        event_kind: Set("proposal.opened".into()),
        status: Set(status.into()),
        attempts: Set(1),
        next_attempt_at: Set((status == "pending").then_some(at)),
        queued_attempt: Set(None),
        reason: Set(None),
        created_at: Set(at),
        updated_at: Set(at),
        finished_at: Set((status != "pending").then_some(at)),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("delivery");
    notification_attempts::ActiveModel {
        id: Set(Uuid::now_v7()),
        delivery_id: Set(id),
        number: Set(1),
        at: Set(at),
        status_code: Set(Some(500)),
        error: Set(None),
        duration_ms: Set(12),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("attempt");
    id
}

async fn host_job(
    app: &TestApp,
    fleet: &Fleet,
    status: &str,
    finished: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> Uuid {
    let id = Uuid::now_v7();
    host_jobs::ActiveModel {
        id: Set(id),
        org_id: Set(fleet.org),
        host_id: Set(fleet.host),
        proposal_id: Set(None),
        kind: Set("package_update".into()),
        payload: Set(JsonText::from_stored("{}")),
        status: Set(status.into()),
        log: Set(None),
        rebooted: Set(None),
        created_at: Set(at),
        dispatched_at: Set(None),
        finished_at: Set(finished),
        wave: Set(None),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("host job");
    id
}

async fn host_events_at(app: &TestApp, fleet: &Fleet, at: DateTime<Utc>, count: usize) {
    let rows: Vec<host_events::ActiveModel> = (0..count)
        .map(|_| host_events::ActiveModel {
            id: Set(Uuid::now_v7()),
            org_id: Set(fleet.org),
            host_id: Set(fleet.host),
            kind: Set("checked_in".into()),
            details: Set(None),
            created_at: Set(at),
        })
        .collect();
    for chunk in rows.chunks(200) {
        host_events::Entity::insert_many(chunk.to_vec())
            .exec(&app.state.db.orm)
            .await
            .expect("host events");
    }
}

async fn audit_at(app: &TestApp, fleet: &Fleet, at: DateTime<Utc>) -> Uuid {
    let id = Uuid::now_v7();
    audit_events::ActiveModel {
        id: Set(id),
        org_id: Set(Some(fleet.org)),
        actor_account_id: Set(None),
        actor_api_token_id: Set(None),
        action: Set("host.updated".into()),
        target_kind: Set(None),
        target_id: Set(None),
        ip: Set(None),
        details: Set(None),
        created_at: Set(at),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("audit event");
    id
}

async fn housekeeping(app: &TestApp) {
    let deps = worker::Deps::new(
        app.state.config.clone(),
        app.state.db.clone(),
        app.state.clock.clone(),
    )
    .expect("deps");
    worker::jobs::housekeeping::run(
        platform::jobs::Housekeeping {
            hour: app.clock_now().to_rfc3339(),
        },
        apalis::prelude::Data::new(deps),
    )
    .await
    .expect("housekeeping");
}

async fn exists<E: EntityTrait>(app: &TestApp, id: Uuid) -> bool
where
    E::PrimaryKey: sea_orm::PrimaryKeyTrait<ValueType = Uuid>,
{
    E::find_by_id(id)
        .one(&app.state.db.orm)
        .await
        .expect("query")
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn housekeeping_prunes_what_is_past_its_retention_and_keeps_what_is_still_needed() {
    let app = TestApp::builder().without_worker().start().await;
    let fleet = fleet(&app).await;
    let start = app.clock_now();
    let old = start - Duration::days(500);
    let recent = start - Duration::days(10);

    // Notifications (90 days).
    let old_event = event(&app, &fleet, "proposal.opened", Some("prp_1"), old, true).await;
    let old_delivered_event =
        event(&app, &fleet, "proposal.opened", Some("prp_2"), old, true).await;
    let old_delivered = delivery(&app, &fleet, old_delivered_event, "delivered", old).await;
    let retrying_event = event(&app, &fleet, "proposal.opened", Some("prp_3"), old, true).await;
    let retrying = delivery(&app, &fleet, retrying_event, "pending", old).await;
    let undispatched = event(&app, &fleet, "proposal.opened", Some("prp_4"), old, false).await;
    let announced = event(
        &app,
        &fleet,
        "advisory.known_exploited",
        Some("CVE-2024-3094"),
        old,
        true,
    )
    .await;
    let announced_delivery = delivery(&app, &fleet, announced, "delivered", old).await;
    let recent_event = event(&app, &fleet, "proposal.opened", Some("prp_5"), recent, true).await;
    // Host events (180 days): more than one batch of old ones.
    host_events_at(&app, &fleet, old, 1_200).await;
    host_events_at(&app, &fleet, recent, 3).await;
    // Audit events (400 days).
    let old_audit = audit_at(&app, &fleet, old).await;
    let younger_audit = audit_at(&app, &fleet, start - Duration::days(300)).await;
    // Host jobs (180 days after they finished).
    let old_finished = host_job(&app, &fleet, "succeeded", Some(old), old).await;
    let old_unfinished = host_job(&app, &fleet, "dispatched", None, old).await;
    let recently_finished = host_job(&app, &fleet, "failed", Some(recent), old).await;
    // Billing: a day not reported yet, however old, is not pruned.
    usage_days::ActiveModel {
        org_id: Set(fleet.org),
        day: Set(old.date_naive()),
        active_hosts: Set(1),
        reported: Set(false),
    }
    .insert(&app.state.db.orm)
    .await
    .expect("usage day");

    housekeeping(&app).await;

    assert!(!exists::<notification_events::Entity>(&app, old_event).await);
    assert!(!exists::<notification_deliveries::Entity>(&app, old_delivered).await);
    assert!(
        !exists::<notification_events::Entity>(&app, old_delivered_event).await,
        "an old event goes once its deliveries are gone"
    );
    assert!(
        exists::<notification_deliveries::Entity>(&app, retrying).await,
        "a delivery still retrying is kept"
    );
    assert!(
        exists::<notification_events::Entity>(&app, retrying_event).await,
        "and so is its event"
    );
    assert_eq!(
        notification_attempts::Entity::find()
            .filter(notification_attempts::Column::DeliveryId.eq(retrying))
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        1,
        "and its attempts"
    );
    assert!(exists::<notification_events::Entity>(&app, undispatched).await);
    assert!(
        exists::<notification_events::Entity>(&app, announced).await,
        "the record that a known-exploited CVE was announced is never pruned"
    );
    assert!(!exists::<notification_deliveries::Entity>(&app, announced_delivery).await);
    assert!(exists::<notification_events::Entity>(&app, recent_event).await);
    assert_eq!(
        host_events::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        3,
        "every old host event went, in batches, and the recent ones stayed"
    );
    assert!(!exists::<audit_events::Entity>(&app, old_audit).await);
    assert!(exists::<audit_events::Entity>(&app, younger_audit).await);
    assert!(!exists::<host_jobs::Entity>(&app, old_finished).await);
    assert!(
        exists::<host_jobs::Entity>(&app, old_unfinished).await,
        "a job its agent has not reported on is kept"
    );
    assert!(exists::<host_jobs::Entity>(&app, recently_finished).await);
    assert_eq!(
        usage_days::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        1
    );

    // A year on, the retry of the delivery ended: now it and its event go too, and the audit
    // event of 300 days is past 400.
    notification_deliveries::Entity::update_many()
        .col_expr(
            notification_deliveries::Column::Status,
            sea_orm::sea_query::Expr::value("failed"),
        )
        .filter(notification_deliveries::Column::Id.eq(retrying))
        .exec(&app.state.db.orm)
        .await
        .expect("retry over");
    app.clock.advance(Duration::days(101));
    housekeeping(&app).await;
    assert!(!exists::<notification_deliveries::Entity>(&app, retrying).await);
    assert!(!exists::<notification_events::Entity>(&app, retrying_event).await);
    assert!(!exists::<audit_events::Entity>(&app, younger_audit).await);
    assert!(exists::<notification_events::Entity>(&app, announced).await);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_is_the_deployments_own() {
    use platform::config::RawConfig;
    let raw = RawConfig {
        retention_host_events_days: Some("7".into()),
        ..RawConfig::default()
    };
    let retention = raw.validate().expect("valid").retention;
    let app = TestApp::builder().without_worker().start().await;
    let fleet = fleet(&app).await;
    let start = app.clock_now();
    host_events_at(&app, &fleet, start - Duration::days(8), 2).await;
    host_events_at(&app, &fleet, start - Duration::days(6), 1).await;
    let pruned = domain::retention::prune(&app.state.db, retention, start)
        .await
        .expect("prune");
    assert_eq!(pruned.host_events, 2);
    assert_eq!(
        host_events::Entity::find()
            .count(&app.state.db.orm)
            .await
            .expect("count"),
        1
    );
    app.stop().await;
}
