//! Triggers that tell the api when what authentication reads has changed
//! (`platform::identity_changes`), on every table it reads, when a row changes in a way
//! authentication can see. The columns that only record use (a session's `last_seen_at`, an API
//! token's `last_used_at`) and an organization's proposal counter are left out, so that everyday
//! traffic does not empty the caches.
//!
//! - Postgres: `NOTIFY identity_changed` (one per table and transaction, sent after it commits,
//!   to every api replica listening); `api_replicas` and the sequence `identity_sync` let a
//!   replica that made a change wait until every other has heard of it.
//! - SQLite: the count in the one row of `identity_epoch` goes up inside the transaction that
//!   makes the change.

use sea_orm_migration::{prelude::*, sea_orm::DatabaseBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Each table, with the columns whose change counts (an empty list: every column), and the
/// columns whose change alone does not.
const WATCHED: &[(&str, &[&str], &[&str])] = &[
    (
        "sessions",
        &["token_hash", "account_id", "csrf_token", "expires_at"],
        &["last_seen_at"],
    ),
    (
        "api_tokens",
        &[
            "org_id",
            "name",
            "role",
            "token_hash",
            "created_by",
            "expires_at",
            "revoked_at",
        ],
        &["last_used_at"],
    ),
    ("memberships", &[], &[]),
    ("accounts", &[], &[]),
    (
        "organizations",
        &["slug", "name", "plan", "sso_enforced"],
        &["proposal_seq"],
    ),
    ("subscriptions", &[], &[]),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DatabaseBackend::Postgres => {
                // The api replicas that keep answers, and the last sync each has heard
                // (`platform::identity_changes`: a change is answered once every live replica
                // has heard of it).
                db.execute_unprepared(
                    "CREATE TABLE api_replicas (id uuid PRIMARY KEY, seen bigint NOT NULL, \
                     alive_at timestamptz NOT NULL)",
                )
                .await?;
                db.execute_unprepared("CREATE SEQUENCE identity_sync")
                    .await?;
                db.execute_unprepared(
                    "CREATE FUNCTION identity_changed() RETURNS trigger LANGUAGE plpgsql AS $$ \
                     BEGIN PERFORM pg_notify('identity_changed', TG_TABLE_NAME); RETURN NULL; END $$",
                )
                .await?;
                for (table, _, ignored) in WATCHED {
                    // Every column but the ignored ones, whatever columns come later.
                    let strip: String = ignored.iter().map(|c| format!(" - '{c}'")).collect();
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER {table}_identity_written AFTER INSERT OR DELETE ON {table} \
                         FOR EACH ROW EXECUTE FUNCTION identity_changed()"
                    ))
                    .await?;
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER {table}_identity_updated AFTER UPDATE ON {table} \
                         FOR EACH ROW \
                         WHEN ((to_jsonb(OLD){strip}) IS DISTINCT FROM (to_jsonb(NEW){strip})) \
                         EXECUTE FUNCTION identity_changed()"
                    ))
                    .await?;
                }
            }
            _ => {
                db.execute_unprepared(
                    "CREATE TABLE identity_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), \
                     n INTEGER NOT NULL)",
                )
                .await?;
                db.execute_unprepared("INSERT INTO identity_epoch (id, n) VALUES (1, 1)")
                    .await?;
                let bump = "UPDATE identity_epoch SET n = n + 1 WHERE id = 1;";
                for (table, counted, _) in WATCHED {
                    for event in ["INSERT", "DELETE"] {
                        db.execute_unprepared(&format!(
                            "CREATE TRIGGER {table}_identity_{} AFTER {event} ON {table} \
                             BEGIN {bump} END",
                            event.to_lowercase()
                        ))
                        .await?;
                    }
                    let when = if counted.is_empty() {
                        String::new()
                    } else {
                        let changed: Vec<String> = counted
                            .iter()
                            .map(|c| format!("OLD.{c} IS NOT NEW.{c}"))
                            .collect();
                        format!("WHEN {}", changed.join(" OR "))
                    };
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER {table}_identity_update AFTER UPDATE ON {table} \
                         FOR EACH ROW {when} BEGIN {bump} END"
                    ))
                    .await?;
                }
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DatabaseBackend::Postgres => {
                for (table, _, _) in WATCHED {
                    db.execute_unprepared(&format!(
                        "DROP TRIGGER IF EXISTS {table}_identity_written ON {table}; \
                         DROP TRIGGER IF EXISTS {table}_identity_updated ON {table}"
                    ))
                    .await?;
                }
                db.execute_unprepared("DROP FUNCTION IF EXISTS identity_changed()")
                    .await?;
                db.execute_unprepared("DROP SEQUENCE IF EXISTS identity_sync")
                    .await?;
                db.execute_unprepared("DROP TABLE IF EXISTS api_replicas")
                    .await?;
            }
            _ => {
                for (table, _, _) in WATCHED {
                    for suffix in ["insert", "delete", "update"] {
                        db.execute_unprepared(&format!(
                            "DROP TRIGGER IF EXISTS {table}_identity_{suffix}"
                        ))
                        .await?;
                    }
                }
                db.execute_unprepared("DROP TABLE IF EXISTS identity_epoch")
                    .await?;
            }
        }
        Ok(())
    }
}
