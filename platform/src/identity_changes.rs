//! Who may do what changes rarely and is read on every request, so the api keeps it in memory;
//! this module says when what it keeps can no longer be trusted.
//!
//! One number, the *generation*, moves on every change to the tables authentication reads
//! ([`TABLES`]: sessions, API tokens, memberships, accounts, organizations, subscriptions),
//! whoever makes it. A request notes the generation once, before it reads anything
//! ([`IdentityChanges::mark`]); an answer read after a mark is kept under that mark's generation
//! and served only to a request whose own mark has the same generation. Nothing has changed
//! between the two marks then, so the answer is what the database would say now; a read that
//! raced a change is kept under a generation that has passed, and is never served.
//!
//! Where the generation comes from:
//! - **Postgres**: triggers on those tables (migration `m20261126_000100_identity_changes`)
//!   `NOTIFY identity_changed` when a row changes in a way authentication can see (touching a
//!   session's `last_seen_at` does not count). Postgres delivers a notification after its
//!   transaction commits, to every listening process, so every api replica hears of every change,
//!   whoever made it (another replica, a worker, `psql`), and counts it in memory: a mark costs no
//!   round trip. While the listening connection is down there is no mark (the caches are not
//!   used), and when it comes back the generation moves, since what was sent meanwhile is lost.
//!
//!   A notification arrives a moment after its commit, so a replica could still answer from
//!   memory in that moment. For a change made through the API that moment is closed before the
//!   change is answered ([`IdentityChanges::settle`]): each listening replica is a row of
//!   `api_replicas`; the replica that made the change notifies a number from the sequence
//!   `identity_sync` after its commit, every replica records in its row that it has heard it
//!   (Postgres delivers notifications in commit order, so it has heard the change too), and
//!   the change is answered when every replica has, or can no longer answer from memory.
//!
//!   A replica answers from memory only while it can *confirm* it has heard everything up to a
//!   moment ago (decisions §18): every [`PING`] it notifies a ping of its own and, when the
//!   ping comes back on its listener, it has heard every change committed before the ping was
//!   sent. It then may answer from memory until [`LEASE`] after it sent that ping, and it
//!   records that lease (in the database's time, measured no earlier) in its row. A replica
//!   whose listener is held back (a stalled process, a slow connection) hears no ping, its
//!   lease runs out, and it reads identity from the database until it catches up. A change
//!   waits only for replicas whose lease still runs, so at most [`LEASE`] for one that went
//!   silent, and never answers while a replica could still serve what it changed.
//! - **SQLite**: the same triggers keep the generation in the database, in the one row of
//!   `identity_epoch`, inside the transaction that makes the change; a mark reads it (one
//!   in-process read instead of the several that authentication makes), synchronously on a
//!   connection of its own (a few microseconds from SQLite's page cache). That also sees
//!   changes made by other processes on the same file (`api plan set`, a worker of its own).

// Change-tracking plumbing: the counter's own table and triggers, read and bumped by hand-written
// SQL; no tenant rows are read here.
#![allow(clippy::disallowed_methods)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use uuid::Uuid;

/// The tables whose changes move the generation.
pub const TABLES: &[&str] = &[
    "sessions",
    "api_tokens",
    "memberships",
    "accounts",
    "organizations",
    "subscriptions",
];

/// The Postgres notification channel the triggers notify.
pub const CHANNEL: &str = "identity_changed";
/// How often a listening replica pings itself through the channel.
pub const PING: Duration = Duration::from_millis(400);
/// How long after sending a ping that came back a replica may answer identity from memory.
pub const LEASE: Duration = Duration::from_secs(2);
/// The longest a change waits for the other replicas (their leases run out by then): a
/// margin for the database's own clock reads, after which it answers and says so.
pub const SETTLE_AT_MOST: Duration = Duration::from_secs(3);

/// The generation a request began in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(u64);

impl Mark {
    pub fn generation(self) -> u64 {
        self.0
    }
}

/// See the module documentation. Cloning shares the same state.
#[derive(Clone, Debug)]
pub struct IdentityChanges(Arc<Inner>);

#[derive(Debug)]
enum Inner {
    /// Postgres: counted from the triggers' notifications.
    Notified {
        generation: AtomicU64,
        /// Whether the listening connection is up.
        listening: AtomicBool,
        /// Until when (nanoseconds after `started`) this replica may answer from memory: the
        /// lease of the last ping that came back.
        confirmed_until: AtomicU64,
        started: tokio::time::Instant,
        /// This replica's row in `api_replicas`.
        replica: Uuid,
        /// Whether notifications are held back (fault tests: a stalled listener).
        held: tokio::sync::watch::Sender<bool>,
    },
    /// SQLite: read from `identity_epoch`.
    Stored {
        pool: sqlx::SqlitePool,
        /// A connection of this process's own to the same file, read synchronously: a read of
        /// one row from SQLite's page cache costs microseconds, where a pooled read through
        /// sqlx's connection thread costs tens of them. `None` for an in-memory database.
        direct: Option<std::sync::Mutex<rusqlite::Connection>>,
    },
}

/// How long the direct read waits on a lock (SQLite's readers rarely wait at all in WAL mode)
/// before the pooled read is used instead.
const DIRECT_BUSY: Duration = Duration::from_millis(100);

const EPOCH: &str = "SELECT n FROM identity_epoch WHERE id = 1";

/// A connection of its own to the file `pool` opens, if it is a file.
fn direct_connection(pool: &sqlx::SqlitePool) -> Option<rusqlite::Connection> {
    let options = pool.connect_options();
    let file = options.get_filename();
    let name = file.to_string_lossy();
    if name.is_empty() || name.starts_with(':') || name.contains("memory") {
        return None;
    }
    let opened = rusqlite::Connection::open_with_flags(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|connection| {
        connection.busy_timeout(DIRECT_BUSY)?;
        Ok(connection)
    });
    match opened {
        Ok(connection) => Some(connection),
        Err(err) => {
            tracing::warn!(error = %err, "opening a direct connection for the identity epoch");
            None
        }
    }
}

/// The epoch read on the direct connection; `None` if it could not be (the pooled read
/// answers then).
fn read_direct(direct: &std::sync::Mutex<rusqlite::Connection>) -> Option<i64> {
    let connection = direct.lock().ok()?;
    let read = connection
        .prepare_cached(EPOCH)
        .and_then(|mut statement| statement.query_row([], |row| row.get::<_, i64>(0)));
    match read {
        Ok(n) => Some(n),
        Err(rusqlite::Error::QueryReturnedNoRows) => None,
        Err(err) => {
            tracing::debug!(error = %err, "reading the identity epoch directly");
            None
        }
    }
}

impl IdentityChanges {
    /// Postgres: no mark until [`IdentityChanges::watch_postgres`]'s listener is connected.
    pub fn notified() -> IdentityChanges {
        IdentityChanges(Arc::new(Inner::Notified {
            generation: AtomicU64::new(1),
            listening: AtomicBool::new(false),
            confirmed_until: AtomicU64::new(0),
            started: tokio::time::Instant::now(),
            replica: Uuid::new_v4(),
            held: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// SQLite: the generation `identity_epoch` holds.
    pub fn stored(pool: sqlx::SqlitePool) -> IdentityChanges {
        let direct = direct_connection(&pool).map(std::sync::Mutex::new);
        IdentityChanges(Arc::new(Inner::Stored { pool, direct }))
    }

    /// The generation now, noted before a request reads anything; `None` when it cannot be
    /// known (nothing may be served or kept then).
    pub async fn mark(&self) -> Option<Mark> {
        match self.0.as_ref() {
            Inner::Notified {
                generation,
                listening,
                confirmed_until,
                started,
                ..
            } => {
                let now = nanos_since(*started, tokio::time::Instant::now());
                (listening.load(Ordering::SeqCst) && now < confirmed_until.load(Ordering::SeqCst))
                    .then(|| Mark(generation.load(Ordering::SeqCst)))
            }
            Inner::Stored { pool, direct } => {
                if let Some(n) = direct.as_ref().and_then(read_direct) {
                    return Some(Mark(n as u64));
                }
                let read: Result<Option<i64>, _> =
                    sqlx::query_scalar(EPOCH).fetch_optional(pool).await;
                match read {
                    Ok(Some(n)) => Some(Mark(n as u64)),
                    Ok(None) => None,
                    Err(err) => {
                        tracing::warn!(error = %err, "reading the identity epoch");
                        None
                    }
                }
            }
        }
    }

    /// Counts a change (a notification heard, or the listener lost).
    fn changed(&self) {
        if let Inner::Notified { generation, .. } = self.0.as_ref() {
            generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn set_listening(&self, up: bool) {
        if let Inner::Notified {
            listening,
            confirmed_until,
            ..
        } = self.0.as_ref()
        {
            listening.store(up, Ordering::SeqCst);
            if !up {
                confirmed_until.store(0, Ordering::SeqCst);
            }
        }
    }

    /// A ping sent at `sent` came back: everything committed before then has been heard.
    fn confirmed(&self, sent: tokio::time::Instant) {
        if let Inner::Notified {
            confirmed_until,
            started,
            ..
        } = self.0.as_ref()
        {
            confirmed_until.fetch_max(nanos_since(*started, sent + LEASE), Ordering::SeqCst);
        }
    }

    /// Holds back (or releases) the handling of notifications, as a stalled listener would:
    /// they wait on the connection, unread. For fault tests; nothing else calls it.
    pub fn hold_notifications(&self, hold: bool) {
        if let Inner::Notified { held, .. } = self.0.as_ref() {
            held.send_replace(hold);
        }
    }

    fn held(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        match self.0.as_ref() {
            Inner::Notified { held, .. } => Some(held.subscribe()),
            Inner::Stored { .. } => None,
        }
    }

    fn replica(&self) -> Option<Uuid> {
        match self.0.as_ref() {
            Inner::Notified { replica, .. } => Some(*replica),
            Inner::Stored { .. } => None,
        }
    }

    /// Waits until every api replica has heard of the changes this process has committed so
    /// far, or can no longer answer identity from memory (its lease ran out), on Postgres;
    /// nothing to wait for on SQLite. Called before a change is answered.
    pub async fn settle(&self, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        if self.replica().is_none() {
            return Ok(());
        }
        let sync: i64 = sqlx::query_scalar("SELECT nextval('identity_sync')")
            .fetch_one(pool)
            .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(format!("sync:{sync}"))
            .execute(pool)
            .await?;
        let deadline = tokio::time::Instant::now() + SETTLE_AT_MOST;
        let mut pause = Duration::from_millis(1);
        loop {
            let behind: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM api_replicas WHERE seen < $1 AND lease_until > now()",
            )
            .bind(sync)
            .fetch_one(pool)
            .await?;
            if behind == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    replicas = behind,
                    "api replicas neither heard of a change nor let their leases run out in \
                     time; answering anyway"
                );
                return Ok(());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Listens for the triggers' notifications on a connection of its own, for as long as the
    /// pool is open; reconnects (and starts over) when the connection is lost.
    pub fn watch_postgres(&self, pool: sqlx::PgPool) -> tokio::task::JoinHandle<()> {
        let changes = self.clone();
        tokio::spawn(async move {
            loop {
                let outcome = changes.listen(&pool).await;
                changes.set_listening(false);
                changes.changed();
                changes.leave(&pool).await;
                match outcome {
                    Ok(()) => return,
                    Err(err) => {
                        tracing::warn!(
                            error = %err,
                            "identity change listener lost; authentication reads the database until it is back"
                        );
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        })
    }

    /// Takes this replica out of `api_replicas` (nobody waits for it any more); best effort.
    pub async fn leave(&self, pool: &sqlx::PgPool) {
        if let Some(replica) = self.replica() {
            let _ = sqlx::query("DELETE FROM api_replicas WHERE id = $1")
                .bind(replica)
                .execute(pool)
                .await;
        }
    }

    /// One connection's life: `Ok` when the pool is closed (the process is stopping).
    async fn listen(&self, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        let Some(replica) = self.replica() else {
            return Ok(());
        };
        let Some(mut held) = self.held() else {
            return Ok(());
        };
        if pool.is_closed() {
            return Ok(());
        }
        let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        // Whatever changed while nobody listened is unknown: start over. Every sync issued so
        // far was issued after its change had committed, so this replica has nothing of them
        // to hear any more. Its lease starts when its first ping comes back.
        self.changed();
        sqlx::query(
            "INSERT INTO api_replicas (id, seen, alive_at, lease_until) \
             SELECT $1, last_value, now(), now() FROM identity_sync \
             ON CONFLICT (id) DO UPDATE SET seen = EXCLUDED.seen, alive_at = now(), \
             lease_until = now()",
        )
        .bind(replica)
        .execute(pool)
        .await?;
        self.set_listening(true);
        let own_ping = format!("ping:{replica}:");
        // Pings in flight: their number, when they were sent (here, and in the database's time).
        let mut pings: std::collections::VecDeque<(u64, tokio::time::Instant, f64)> =
            std::collections::VecDeque::new();
        let mut next_ping: u64 = 0;
        let mut ping = tokio::time::interval(PING);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let hold = *held.borrow_and_update();
            tokio::select! {
                _ = held.changed() => {}
                _ = ping.tick() => {
                    let sent = tokio::time::Instant::now();
                    let at: f64 = sqlx::query_scalar(
                        "SELECT extract(epoch FROM clock_timestamp())::float8 \
                         FROM (SELECT pg_notify($1, $2)) AS sent",
                    )
                    .bind(CHANNEL)
                    .bind(format!("{own_ping}{next_ping}"))
                    .fetch_one(pool)
                    .await?;
                    pings.push_back((next_ping, sent, at));
                    next_ping += 1;
                    // A ping lost with a connection that came back: forget the oldest.
                    while pings.len() > 64 {
                        pings.pop_front();
                    }
                }
                // Cancel-safe: a notification is taken whole or not at all. Held back (fault
                // tests), notifications wait on the connection, unread.
                received = listener.try_recv(), if !hold => match received {
                    Ok(Some(notification)) => {
                        let payload = notification.payload();
                        if let Some(sync) = payload.strip_prefix("sync:") {
                            let sync: i64 = sync.parse().map_err(|_| {
                                sqlx::Error::Protocol(format!("a sync that is not a number: {sync}"))
                            })?;
                            sqlx::query(
                                "UPDATE api_replicas SET seen = GREATEST(seen, $2), alive_at = now() \
                                 WHERE id = $1",
                            )
                            .bind(replica)
                            .bind(sync)
                            .execute(pool)
                            .await?;
                        } else if let Some(number) = payload.strip_prefix(own_ping.as_str()) {
                            let Ok(number) = number.parse::<u64>() else { continue };
                            while pings.front().is_some_and(|(n, _, _)| *n < number) {
                                pings.pop_front();
                            }
                            if let Some((_, sent, at)) =
                                pings.pop_front().filter(|(n, _, _)| *n == number)
                            {
                                sqlx::query(
                                    "UPDATE api_replicas SET alive_at = now(), \
                                     lease_until = to_timestamp($2) + make_interval(secs => $3) \
                                     WHERE id = $1",
                                )
                                .bind(replica)
                                .bind(at)
                                .bind(LEASE.as_secs_f64())
                                .execute(pool)
                                .await?;
                                self.confirmed(sent);
                            }
                        } else if !payload.starts_with("ping:") {
                            self.changed();
                        }
                    }
                    // `try_recv` answers `None` when the connection was lost; `recv` would
                    // reconnect silently and lose what was sent meanwhile.
                    Ok(None) => {
                        return Err(sqlx::Error::Protocol(
                            "the listening connection was lost".into(),
                        ));
                    }
                    Err(sqlx::Error::PoolClosed) => return Ok(()),
                    Err(err) => return Err(err),
                },
            }
        }
    }
}

/// Nanoseconds from `start` to `at` (0 before it).
fn nanos_since(start: tokio::time::Instant, at: tokio::time::Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_moves_the_generation_and_nothing_is_marked_until_listening() {
        let changes = IdentityChanges::notified();
        assert_eq!(changes.mark().await, None);
        changes.set_listening(true);
        assert_eq!(changes.mark().await, None, "not before a ping came back");
        changes.confirmed(tokio::time::Instant::now());
        let before = changes.mark().await.expect("a mark while listening");
        changes.changed();
        let after = changes.mark().await.expect("a mark while listening");
        assert_ne!(before, after);
        changes.set_listening(false);
        assert_eq!(changes.mark().await, None);
    }

    #[tokio::test]
    async fn a_replica_whose_pings_stop_coming_back_stops_answering_from_memory() {
        let changes = IdentityChanges::notified();
        changes.set_listening(true);
        // The last ping that came back was sent just over a lease ago.
        let long_ago = tokio::time::Instant::now()
            .checked_sub(LEASE + Duration::from_millis(1))
            .expect("the monotonic clock runs that long");
        changes.confirmed(long_ago);
        assert_eq!(changes.mark().await, None, "the lease ran out");
        // One sent just now gives a lease again.
        changes.confirmed(tokio::time::Instant::now());
        assert!(changes.mark().await.is_some(), "within the lease");
    }
}
