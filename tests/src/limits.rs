//! The rate limiter's state as a test sees it: which buckets exist.

use platform::db::Pool;

use crate::TestApp;

impl TestApp {
    /// The keys of every stored rate-limit bucket, sorted.
    pub async fn rate_limit_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = match &self.state.db.pool {
            Pool::Postgres(pool) => sqlx::query_scalar("SELECT key FROM rate_limits")
                .fetch_all(pool)
                .await
                .expect("read rate_limits"),
            Pool::Sqlite(pool) => sqlx::query_scalar("SELECT key FROM rate_limits")
                .fetch_all(pool)
                .await
                .expect("read rate_limits"),
        };
        keys.sort();
        keys
    }
}
