//! Request limits with GCRA (the generic cell rate algorithm), its state in the database so that
//! a limit holds across every api replica: one upsert per request, decided by the database in
//! one statement, so concurrent requests cannot both take the last token.
//!
//! State per key is one number, the theoretical arrival time (TAT) in milliseconds. A request
//! at `now` is allowed when `max(TAT, now) + T - now <= burst * T`, with `T = 1 / rate`.
//! A row whose TAT has passed describes a full bucket, exactly as no row does: the worker's
//! hourly housekeeping deletes rows idle for over an hour, so the table holds only the
//! callers of the last hour.

use chrono::{DateTime, Utc};
use platform::db::{Database, Pool};

#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub burst: u32,
    pub per_second: f64,
}

impl Limit {
    /// One caller's share of an organization's limit: half its burst (rounded up) and half
    /// its rate, so that one caller alone can never spend it all.
    pub fn share(self) -> Limit {
        Limit {
            burst: self.burst.div_ceil(2).max(1),
            per_second: self.per_second / 2.0,
        }
    }

    fn interval_ms(self) -> i64 {
        ((1000.0 / self.per_second).round() as i64).max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until the burst is whole again.
    pub reset_s: u64,
    /// Seconds to wait before retrying (denied requests only).
    pub retry_after_s: u64,
}

fn ceil_seconds(ms: i64) -> u64 {
    (ms.max(0) as u64).div_ceil(1000)
}

/// Takes one request from the bucket `key`.
// Hand-written SQL (one atomic upsert each way), allowed here only: the limiter's own table
// holds no tenant rows (`api/clippy.toml`).
#[allow(clippy::disallowed_methods)]
pub async fn take(
    db: &Database,
    key: &str,
    limit: Limit,
    now: DateTime<Utc>,
) -> anyhow::Result<Decision> {
    let now_ms = now.timestamp_millis();
    let interval = limit.interval_ms();
    let tolerance = interval.saturating_mul(i64::from(limit.burst));
    let updated: Option<i64> = match &db.pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar(
                "INSERT INTO rate_limits (key, tat_ms) VALUES ($1, $2 + $3) \
                 ON CONFLICT (key) DO UPDATE SET tat_ms = GREATEST(rate_limits.tat_ms, $2) + $3 \
                 WHERE GREATEST(rate_limits.tat_ms, $2) + $3 - $2 <= $4 \
                 RETURNING tat_ms",
            )
            .bind(key)
            .bind(now_ms)
            .bind(interval)
            .bind(tolerance)
            .fetch_optional(pool)
            .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar(
                "INSERT INTO rate_limits (key, tat_ms) VALUES (?1, ?2 + ?3) \
                 ON CONFLICT (key) DO UPDATE SET tat_ms = MAX(rate_limits.tat_ms, ?2) + ?3 \
                 WHERE MAX(rate_limits.tat_ms, ?2) + ?3 - ?2 <= ?4 \
                 RETURNING tat_ms",
            )
            .bind(key)
            .bind(now_ms)
            .bind(interval)
            .bind(tolerance)
            .fetch_optional(pool)
            .await?
        }
    };
    if let Some(tat) = updated {
        let used = tat - now_ms;
        let remaining = ((tolerance - used) / interval).clamp(0, i64::from(limit.burst));
        return Ok(Decision {
            allowed: true,
            limit: limit.burst,
            remaining: remaining as u32,
            reset_s: ceil_seconds(used),
            retry_after_s: 0,
        });
    }
    // Denied: read the state to say when to come back.
    let tat: i64 = match &db.pool {
        Pool::Postgres(pool) => {
            sqlx::query_scalar("SELECT tat_ms FROM rate_limits WHERE key = $1")
                .bind(key)
                .fetch_optional(pool)
                .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_scalar("SELECT tat_ms FROM rate_limits WHERE key = ?1")
                .bind(key)
                .fetch_optional(pool)
                .await?
        }
    }
    .unwrap_or(now_ms);
    let wait = tat.max(now_ms) + interval - now_ms - tolerance;
    Ok(Decision {
        allowed: false,
        limit: limit.burst,
        remaining: 0,
        reset_s: ceil_seconds(tat - now_ms),
        retry_after_s: ceil_seconds(wait).max(1),
    })
}
