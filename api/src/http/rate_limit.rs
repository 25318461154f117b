//! Request limits with GCRA (the generic cell rate algorithm), kept in one of two places:
//!
//! - the database ([`take`]): a limit holds across every api replica; one upsert per request,
//!   decided by the database in one statement, so concurrent requests cannot both take the last
//!   token. The per-address limits of the operations without a session always live here.
//! - this replica's memory ([`Buckets::take`], `RATE_LIMIT_STORE=memory`, the default for
//!   organizations' limits): the same arithmetic under a lock per bucket, no round trip. Each
//!   replica counts only what it answers, so behind a balancer spreading one organization's
//!   (or one agent's) requests over N replicas it can get up to N times its burst and rate.
//!   Agents' signed calls per host are kept where organizations' limits are ([`take_configured`]).
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

/// The buckets this replica keeps in memory, by key; a bucket idle for an hour is forgotten
/// (it is full by then, exactly as a missing one).
pub struct Buckets {
    tats: moka::sync::Cache<String, std::sync::Arc<std::sync::Mutex<i64>>>,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            tats: moka::sync::Cache::builder()
                .time_to_idle(std::time::Duration::from_secs(3600))
                .build(),
        }
    }
}

impl Buckets {
    /// Takes one request from the bucket `key`, as [`take`] does in the database.
    pub fn take(&self, key: &str, limit: Limit, now: DateTime<Utc>) -> Decision {
        let now_ms = now.timestamp_millis();
        let interval = limit.interval_ms();
        let tolerance = interval.saturating_mul(i64::from(limit.burst));
        let cell = self
            .tats
            .get_with_by_ref(key, || std::sync::Arc::new(std::sync::Mutex::new(now_ms)));
        let mut tat = cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let next = (*tat).max(now_ms).saturating_add(interval);
        if next - now_ms <= tolerance {
            *tat = next;
            return allowed(limit, next - now_ms, tolerance, interval);
        }
        denied(limit, *tat, now_ms, tolerance, interval)
    }
}

/// Takes one request from the bucket `key` where the deployment keeps such buckets
/// (`RATE_LIMIT_STORE`: this replica's memory, or the database): organizations' limits and their
/// callers' shares, and agents' signed calls per host.
pub async fn take_configured(
    state: &crate::AppState,
    key: &str,
    limit: Limit,
    now: DateTime<Utc>,
) -> anyhow::Result<Decision> {
    match state.config.rate_limit_store {
        platform::config::RateLimitStore::Memory => Ok(state.buckets.take(key, limit, now)),
        platform::config::RateLimitStore::Database => take(&state.db, key, limit, now).await,
    }
}

fn allowed(limit: Limit, used: i64, tolerance: i64, interval: i64) -> Decision {
    let remaining = ((tolerance - used) / interval).clamp(0, i64::from(limit.burst));
    Decision {
        allowed: true,
        limit: limit.burst,
        remaining: remaining as u32,
        reset_s: ceil_seconds(used),
        retry_after_s: 0,
    }
}

fn denied(limit: Limit, tat: i64, now_ms: i64, tolerance: i64, interval: i64) -> Decision {
    let wait = tat.max(now_ms) + interval - now_ms - tolerance;
    Decision {
        allowed: false,
        limit: limit.burst,
        remaining: 0,
        reset_s: ceil_seconds(tat - now_ms),
        retry_after_s: ceil_seconds(wait).max(1),
    }
}

fn ceil_seconds(ms: i64) -> u64 {
    (ms.max(0) as u64).div_ceil(1000)
}

/// Takes one request from the bucket `key`.
// Hand-written SQL (one atomic upsert each way), allowed here only: the limiter's own table
// holds no tenant rows (`clippy.toml`).
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
        return Ok(allowed(limit, tat - now_ms, tolerance, interval));
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
    Ok(denied(limit, tat, now_ms, tolerance, interval))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn memory_buckets_allow_the_burst_then_refuse_until_the_rate_refills() {
        let buckets = Buckets::default();
        let limit = Limit {
            burst: 3,
            per_second: 1.0,
        };
        let start = Utc
            .with_ymd_and_hms(2026, 11, 26, 9, 0, 0)
            .single()
            .expect("a valid instant");
        let remaining: Vec<u32> = (0..3)
            .map(|_| buckets.take("org:a", limit, start))
            .inspect(|decision| assert!(decision.allowed))
            .map(|decision| decision.remaining)
            .collect();
        assert_eq!(remaining, [2, 1, 0]);
        let refused = buckets.take("org:a", limit, start);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_s, 1);
        assert!(
            buckets.take("org:b", limit, start).allowed,
            "buckets are apart"
        );
        let later = start + chrono::Duration::seconds(1);
        assert!(buckets.take("org:a", limit, later).allowed);
        assert!(!buckets.take("org:a", limit, later).allowed);
    }
}
