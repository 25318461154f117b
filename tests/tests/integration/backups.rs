//! `api backup` and `api restore` (decisions §23), as an operator runs them: the real program
//! beside a running service. On SQLite a consistent copy while writes go on, and a restore that
//! refuses a database in use; on Postgres both say to use `pg_dump` / `pg_restore`.

use platform::db::Database;
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use tests::{
    TestDatabase,
    metrics::free_address,
    processes::{Program, run_to_end, wait_ready},
};
use uuid::Uuid;

const API: &str = env!("CARGO_BIN_EXE_fleet-api");

/// Writes one audit row (what the service's writes are like) and returns its id once
/// committed: an acknowledged write.
async fn write_one(db: &Database) -> Uuid {
    let id = Uuid::now_v7();
    let txn = db.begin_write().await.expect("a write");
    entities::audit_events::ActiveModel {
        id: Set(id),
        org_id: Set(None),
        actor_account_id: Set(None),
        actor_api_token_id: Set(None),
        action: Set("test.write".into()),
        target_kind: Set(None),
        target_id: Set(None),
        ip: Set(None),
        details: Set(None),
        created_at: Set(chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("time")),
    }
    .insert(&txn)
    .await
    .expect("insert");
    txn.commit().await.expect("commit");
    id
}

/// The audit ids a database file holds.
async fn ids_in(url: &str) -> std::collections::HashSet<Uuid> {
    let db = Database::connect_url(url, 1).await.expect("open the copy");
    let ids = entities::audit_events::Entity::find()
        .all(&db.orm)
        .await
        .expect("read the copy")
        .into_iter()
        .map(|row| row.id)
        .collect();
    db.close().await;
    ids
}

fn sqlite_url(path: &std::path::Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_writes_go_on_opens_and_holds_every_acknowledged_write() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().expect("dir");
    let copy = dir.path().join("backup.db");
    let copy_arg = copy.display().to_string();
    if database.is_postgres() {
        let (status, said) = run_to_end(
            API,
            &["backup", &copy_arg],
            &[("DATABASE_URL", database.url())],
        )
        .await;
        assert!(!status.success(), "{said}");
        assert!(said.contains("pg_dump"), "{said}");
        assert!(!copy.exists());
        return;
    }
    let bind = free_address();
    let mut api = Program::start(
        API,
        &[],
        &[
            ("DATABASE_URL", database.url()),
            ("SERVICE_BIND", &bind),
            ("EMBEDDED_WORKERS", "true"),
        ],
    );
    wait_ready(&format!("http://{bind}")).await;
    let db = Database::connect_url(database.url(), 2)
        .await
        .expect("connect");
    let mut acknowledged = Vec::new();
    for _ in 0..200 {
        acknowledged.push(write_one(&db).await);
    }
    // Writes go on while the backup runs.
    let writing = tokio::spawn({
        let db = db.clone();
        async move {
            let mut during = Vec::new();
            for _ in 0..400 {
                during.push(write_one(&db).await);
            }
            during
        }
    });
    let (status, said) = run_to_end(
        API,
        &["backup", &copy_arg],
        &[("DATABASE_URL", database.url())],
    )
    .await;
    assert!(status.success(), "api backup failed: {said}");
    let during = writing.await.expect("writer");

    let held = ids_in(&sqlite_url(&copy)).await;
    for id in &acknowledged {
        assert!(
            held.contains(id),
            "an acknowledged write is missing from the copy"
        );
    }
    // The copy is the database as of one moment: whatever of the concurrent writes it holds
    // is a prefix of them.
    let prefix = during.iter().take_while(|id| held.contains(id)).count();
    assert!(
        during[prefix..].iter().all(|id| !held.contains(id)),
        "the copy holds a later write without an earlier one"
    );
    api.terminate().await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_is_refused_while_the_service_runs_and_restored_into_place_the_data_is_there() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().expect("dir");
    let copy = dir.path().join("backup.db");
    let copy_arg = copy.display().to_string();
    if database.is_postgres() {
        let (status, said) = run_to_end(
            API,
            &["restore", &copy_arg],
            &[("DATABASE_URL", database.url())],
        )
        .await;
        assert!(!status.success(), "{said}");
        assert!(said.contains("pg_restore"), "{said}");
        return;
    }
    let bind = free_address();
    let base = format!("http://{bind}");
    let env = [
        ("DATABASE_URL", database.url()),
        ("SERVICE_BIND", bind.as_str()),
        ("EMBEDDED_WORKERS", "true"),
    ];
    let mut api = Program::start(API, &[], &env);
    wait_ready(&base).await;
    let db = Database::connect_url(database.url(), 2)
        .await
        .expect("connect");
    let kept = write_one(&db).await;
    let (status, said) = run_to_end(
        API,
        &["backup", &copy_arg],
        &[("DATABASE_URL", database.url())],
    )
    .await;
    assert!(status.success(), "api backup failed: {said}");
    let after_backup = write_one(&db).await;

    let (status, said) = run_to_end(
        API,
        &["restore", &copy_arg],
        &[("DATABASE_URL", database.url())],
    )
    .await;
    assert!(
        !status.success(),
        "a restore over a running service: {said}"
    );
    assert!(said.contains("in use"), "{said}");
    assert!(
        ids_in(database.url()).await.contains(&after_backup),
        "the refused restore changed nothing"
    );

    api.terminate().await;
    db.close().await;
    // The test's own connection claims the database too, as long as it lives.
    drop(db);
    let (status, said) = run_to_end(
        API,
        &["restore", &copy_arg],
        &[("DATABASE_URL", database.url())],
    )
    .await;
    assert!(status.success(), "api restore failed: {said}");

    let mut api = Program::start(API, &[], &env);
    wait_ready(&base).await;
    let held = ids_in(database.url()).await;
    assert!(held.contains(&kept), "the backed-up data is there");
    assert!(
        !held.contains(&after_backup),
        "the database is the backup's"
    );
    api.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_no_backup_is_refused_and_the_database_stays() {
    let database = TestDatabase::create().await;
    if database.is_postgres() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, b"not a database at all").expect("write");
    let db = Database::connect_url(database.url(), 1)
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    let kept = write_one(&db).await;
    db.close().await;
    drop(db);
    let junk_arg = junk.display().to_string();
    let (status, said) = run_to_end(
        API,
        &["restore", &junk_arg],
        &[("DATABASE_URL", database.url())],
    )
    .await;
    assert!(!status.success(), "{said}");
    assert!(said.contains("cannot be restored"), "{said}");
    let missing = dir.path().join("missing.db").display().to_string();
    let (status, said) = run_to_end(
        API,
        &["restore", &missing],
        &[("DATABASE_URL", database.url())],
    )
    .await;
    assert!(!status.success(), "{said}");
    assert!(ids_in(database.url()).await.contains(&kept));
}
