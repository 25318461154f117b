//! Jobs that ended failed, with their last error: what an operator inspects
//! (`worker --failed`).

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use platform::db::Database;

#[derive(Clone, Debug)]
pub struct FailedJob {
    pub id: String,
    pub queue: String,
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
}

/// Jobs that will not run again: aborted (`Killed`) or out of attempts, newest first.
// The job queue's tables are apalis's, not entities: read by hand-written SQL.
#[allow(clippy::disallowed_methods)]
pub async fn list(db: &Database, limit: u32) -> anyhow::Result<Vec<FailedJob>> {
    let backend = db.orm.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT id, job_type, status, attempts::bigint AS attempts, last_result::text AS last_result \
             FROM apalis.jobs WHERE status = 'Killed' OR (status = 'Failed' AND attempts >= max_attempts) \
             ORDER BY done_at DESC NULLS LAST LIMIT $1"
        }
        _ => {
            "SELECT id, job_type, status, attempts, last_result FROM Jobs \
             WHERE status = 'Killed' OR (status = 'Failed' AND attempts >= max_attempts) \
             ORDER BY done_at DESC LIMIT ?"
        }
    };
    let rows = db
        .orm
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            sql,
            [i64::from(limit).into()],
        ))
        .await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in rows {
        let last_result: Option<String> = row.try_get("", "last_result")?;
        jobs.push(FailedJob {
            id: row.try_get("", "id")?,
            queue: row.try_get("", "job_type")?,
            status: row.try_get("", "status")?,
            attempts: row.try_get("", "attempts")?,
            last_error: last_result.map(|text| error_of(&text)),
        });
    }
    Ok(jobs)
}

/// `{"Err": "…"}` → the message; anything else verbatim.
fn error_of(last_result: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(last_result) {
        Ok(serde_json::Value::Object(map)) => match map.get("Err") {
            Some(serde_json::Value::String(message)) => message.clone(),
            _ => last_result.to_owned(),
        },
        _ => last_result.to_owned(),
    }
}
