//! The process proves that its workers are alive, whatever they are doing.
//!
//! apalis beats a worker's heartbeat from its job stream only, and only while the stream holds
//! no fetched jobs: a worker running long jobs with more fetched behind them (a fetch takes up
//! to 50, a worker runs 32 at once by default), or finishing its jobs after a stop signal,
//! beats no more. After [`MISSED_HEARTBEATS`](platform::jobs::MISSED_HEARTBEATS) missed beats
//! another replica's heartbeat hands its jobs, the running ones included, to its own worker,
//! and they run twice. So the process beats for its workers itself, one statement every
//! [`HEARTBEAT`](platform::jobs::HEARTBEAT), until all of them have stopped. A killed process
//! beats no more, and its jobs go to another replica as before; so do the jobs of a worker that
//! stopped with an error, since the worker started in its place has a name of its own.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use platform::db::Pool;
use tokio_util::sync::CancellationToken;

/// The names of this process's workers, one per queue.
#[derive(Clone, Debug, Default)]
pub struct Alive {
    names: Arc<Mutex<BTreeMap<&'static str, String>>>,
}

impl Alive {
    /// The worker `name` now works `queue`, in place of any before it; returns the name.
    pub fn working(&self, queue: &'static str, name: String) -> String {
        if let Ok(mut names) = self.names.lock() {
            names.insert(queue, name.clone());
        }
        name
    }

    fn names(&self) -> Vec<String> {
        self.names
            .lock()
            .map(|names| names.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Beats for the workers every `every` until `stop` is cancelled. A beat that cannot be
    /// written is logged and tried again at the next.
    pub async fn beat(self, pool: Pool, every: Duration, stop: CancellationToken) {
        let (alive, pool) = (&self, &pool);
        platform::every::every(every, &stop, move || async move {
            let names = alive.names();
            if !names.is_empty()
                && let Err(err) = beat_once(pool, &names).await
            {
                tracing::warn!(error = %err, "the workers' heartbeat could not be written");
            }
            true
        })
        .await;
    }
}

/// Marks the workers `names` seen now.
// The job queue's tables are apalis's, not entities: written by hand-written SQL.
#[allow(clippy::disallowed_methods)]
async fn beat_once(pool: &Pool, names: &[String]) -> Result<(), sqlx::Error> {
    match pool {
        Pool::Postgres(pool) => {
            sqlx::query("UPDATE apalis.workers SET last_seen = NOW() WHERE id = ANY($1)")
                .bind(names)
                .execute(pool)
                .await?;
        }
        Pool::Sqlite(pool) => {
            let names = serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned());
            sqlx::query(
                "UPDATE Workers SET last_seen = strftime('%s', 'now') \
                 WHERE id IN (SELECT value FROM json_each(?1))",
            )
            .bind(names)
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}
