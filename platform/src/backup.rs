//! `api backup` and `api restore` (decisions §23) for the embedded (SQLite) database.
//!
//! A backup is a consistent copy taken while the service runs, with SQLite's online backup API:
//! every page copied in one step, inside one read transaction, so the copy is the database as
//! of one moment (WAL: the service's writers go on meanwhile and are not in the copy if they
//! commit after that moment). It is written beside the target and renamed into place once
//! checked, so a failed backup never leaves a half-written file under the target's name.
//!
//! A restore refuses to overwrite a database in use: every process that opens a SQLite database
//! holds a shared lock on its lock file ([`InUse`], `<database>.lock`), and a restore needs
//! that lock exclusively; while it holds it, a service that starts on the database stops at
//! once with a message saying so.
//!
//! On Postgres neither applies: `pg_dump` and `pg_restore` are the tools, and both commands say
//! so and exit non-zero.

use std::{
    fs::{File, OpenOptions},
    path::{Path, PathBuf},
    str::FromStr,
};

use anyhow::{Context, bail};
use rusqlite::{Connection, OpenFlags, backup::Backup};

use crate::config::{Config, DatabaseKind};

/// What `api backup` says on Postgres.
pub const POSTGRES_BACKUP: &str = "api backup copies the embedded SQLite database; this deployment runs on Postgres: back it up with pg_dump, e.g. pg_dump --format=custom --file=fleet.dump \"$DATABASE_URL\" (see the README, \"Backups\")";
/// What `api restore` says on Postgres.
pub const POSTGRES_RESTORE: &str = "api restore restores the embedded SQLite database; this deployment runs on Postgres: stop every api, worker and scheduler, then restore with pg_restore, e.g. pg_restore --clean --if-exists --dbname=\"$DATABASE_URL\" fleet.dump (see the README, \"Backups\")";

/// The SQLite file `DATABASE_URL` names.
pub fn sqlite_path(url: &str) -> anyhow::Result<PathBuf> {
    let options =
        sqlx::sqlite::SqliteConnectOptions::from_str(url).context("reading DATABASE_URL")?;
    Ok(options.get_filename().to_path_buf())
}

/// The lock file of the database at `path`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// A process's claim on a SQLite database: a shared lock on its lock file, held for as long as
/// the process has the database open. Any number of processes share it; a restore needs it
/// alone.
#[derive(Debug)]
pub struct InUse {
    _file: File,
}

impl InUse {
    /// Claims the database at `path`, or says that a restore holds it.
    pub fn claim(path: &Path) -> anyhow::Result<InUse> {
        let lock = lock_path(path);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock)
            .with_context(|| format!("opening the lock file {}", lock.display()))?;
        match file.try_lock_shared() {
            Ok(()) => Ok(InUse { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => bail!(
                "{} is being restored (api restore holds {}); start the service once the restore is done",
                path.display(),
                lock.display()
            ),
            Err(std::fs::TryLockError::Error(err)) => {
                Err(err).with_context(|| format!("locking {}", lock.display()))
            }
        }
    }
}

/// Copies every page of `from` into `to` in one step (one read transaction on `from`).
fn copy(from: &Connection, to: &mut Connection) -> anyhow::Result<()> {
    let backup = Backup::new(from, to).context("starting SQLite's online backup")?;
    loop {
        match backup.step(-1).context("copying the database")? {
            rusqlite::backup::StepResult::Done => return Ok(()),
            // Another connection held a lock the copy needed: try again shortly.
            _ => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

/// Whether the database at `path` is whole and is this service's (it has the migrations table).
fn check(path: &Path) -> anyhow::Result<()> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", path.display()))?;
    let verdict: String = conn
        .query_row("PRAGMA quick_check", [], |row| row.get(0))
        .with_context(|| format!("checking {}", path.display()))?;
    if verdict != "ok" {
        bail!("{} is damaged: {verdict}", path.display());
    }
    let migrations: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'seaql_migrations'",
            [],
            |row| row.get(0),
        )
        .with_context(|| format!("reading {}", path.display()))?;
    if migrations == 0 {
        bail!("{} is not a database of this service", path.display());
    }
    Ok(())
}

/// A file beside `path` to write before renaming it into place.
fn beside(path: &Path, what: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{what}-{}", std::process::id()));
    PathBuf::from(name)
}

/// `api backup <file>`: a consistent copy of the embedded database into `file`, taken while the
/// service runs. On Postgres: an error saying to use `pg_dump`.
pub fn backup(config: &Config, file: &Path) -> anyhow::Result<()> {
    if config.database_kind == DatabaseKind::Postgres {
        bail!(POSTGRES_BACKUP);
    }
    let source = sqlite_path(config.database_url.expose())?;
    if !source.exists() {
        bail!("there is no database at {} to back up", source.display());
    }
    // Read and write (the service's WAL must be readable as it is), never created.
    let from = Connection::open_with_flags(&source, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .with_context(|| format!("opening {}", source.display()))?;
    from.busy_timeout(std::time::Duration::from_secs(10))?;
    let partial = beside(file, "partial");
    let copied = (|| {
        let mut to = Connection::open(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
        copy(&from, &mut to)?;
        // One file, readable without its WAL.
        to.pragma_update(None, "journal_mode", "DELETE")?;
        drop(to);
        check(&partial)?;
        std::fs::rename(&partial, file)
            .with_context(|| format!("moving the copy to {}", file.display()))
    })();
    if copied.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    copied
}

/// `api restore <file>`: replaces the embedded database with the backup `file`, refusing while
/// any process has the database open. On Postgres: an error saying to use `pg_restore`.
pub fn restore(config: &Config, file: &Path) -> anyhow::Result<()> {
    if config.database_kind == DatabaseKind::Postgres {
        bail!(POSTGRES_RESTORE);
    }
    let target = sqlite_path(config.database_url.expose())?;
    check(file).with_context(|| format!("{} cannot be restored", file.display()))?;
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let lock = lock_path(&target);
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .with_context(|| format!("opening the lock file {}", lock.display()))?;
    match lock_file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "{} is in use (a running api, worker or scheduler holds {}): stop them before restoring",
            target.display(),
            lock.display()
        ),
        Err(std::fs::TryLockError::Error(err)) => {
            return Err(err).with_context(|| format!("locking {}", lock.display()));
        }
    }
    let from = Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", file.display()))?;
    let incoming = beside(&target, "restoring");
    let restored = (|| {
        let mut to = Connection::open(&incoming)
            .with_context(|| format!("creating {}", incoming.display()))?;
        copy(&from, &mut to)?;
        to.pragma_update(None, "journal_mode", "DELETE")?;
        drop(to);
        check(&incoming)?;
        // Nothing has the database open (the lock says so): its WAL and shared memory belong to
        // the database being replaced.
        for suffix in ["-wal", "-shm"] {
            let mut name = target.as_os_str().to_owned();
            name.push(suffix);
            match std::fs::remove_file(PathBuf::from(name)) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(err).context("removing the old database's WAL"),
            }
        }
        std::fs::rename(&incoming, &target)
            .with_context(|| format!("moving the backup to {}", target.display()))
    })();
    if restored.is_err() {
        let _ = std::fs::remove_file(&incoming);
    }
    drop(lock_file);
    restored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_is_refused_while_a_process_holds_the_database_and_a_start_while_a_restore_does() {
        let dir = tempfile_dir();
        let db = dir.join("service.db");
        let held = InUse::claim(&db).expect("the first process claims it");
        let again = InUse::claim(&db).expect("so may a second");
        let lock = OpenOptions::new()
            .write(true)
            .open(lock_path(&db))
            .expect("lock file");
        assert!(
            matches!(lock.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
            "a restore cannot take the database from running processes"
        );
        drop((held, again));
        lock.try_lock().expect("free once they stopped");
        let err = InUse::claim(&db).expect_err("a start during a restore");
        assert!(err.to_string().contains("is being restored"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fleet-backup-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }
}
