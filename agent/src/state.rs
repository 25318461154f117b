//! The state directory (decisions §19, default `/var/lib/fleet-agent`, 0700): the agent's key
//! (`key.pem`, 0600), its certificate, and `state.json` (what it must remember across
//! restarts: its enrolment, the results it owes the service, the job it was in the middle of,
//! what the service already has of its inventory). Every file is written whole to a temporary
//! name and renamed, so a crash leaves the old or the new file, never half of one.

use std::{
    fs::{File, OpenOptions},
    io::Write as _,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use anyhow::Context;
use chrono::{DateTime, Utc};
use protocol::{
    signature::SigningKey,
    wire::{JobChange, JobResult},
};
use serde::{Deserialize, Serialize};

/// Job ids remembered as reported, so a job handed out again is never applied twice.
const REMEMBERED_JOBS: usize = 200;

pub const KEY_FILE: &str = "key.pem";
/// A renewal's new key, kept until the service's certificate for it is stored.
pub const PENDING_KEY_FILE: &str = "key.pending.pem";
pub const CERTIFICATE_FILE: &str = "certificate.pem";
pub const CA_FILE: &str = "ca.pem";
pub const STATE_FILE: &str = "state.json";
pub const INVENTORY_FILE: &str = "inventory.json";
const LOCK_FILE: &str = "agent.lock";

/// The agent's enrolment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Enrollment {
    pub server: String,
    pub host_id: String,
    pub key_id: String,
    pub certificate_expires_at: DateTime<Utc>,
    pub enrolled_at: DateTime<Utc>,
}

/// A job begun and not yet finished: if the agent finds this at start, it was stopped while
/// the package manager ran.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RunningJob {
    pub job_id: String,
    pub started_at: DateTime<Utc>,
    pub changes: Vec<JobChange>,
}

/// A job's result the service has not acknowledged yet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct OwedResult {
    pub job_id: String,
    pub result: JobResult,
}

/// The last inventory, and what it was computed from: a host whose package database, lists
/// and boot are unchanged is not scanned again (its packages are in `inventory.json`, read only
/// when the service asks for them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Modification times and sizes of the package manager's database and lists, and the boot.
    pub inputs: String,
    pub digest: String,
    pub at: DateTime<Utc>,
    #[serde(default)]
    pub reboot_required: Option<bool>,
    #[serde(default)]
    pub held: Vec<String>,
    #[serde(default)]
    pub services_need_restart: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    #[serde(default)]
    pub enrollment: Option<Enrollment>,
    #[serde(default)]
    pub last_check_in: Option<DateTime<Utc>>,
    /// Why the last attempt to check in failed; `None` after a success.
    #[serde(default)]
    pub last_error: Option<String>,
    /// The inventory digest the service has (it said so, or accepted an inventory with it).
    #[serde(default)]
    pub service_digest: Option<String>,
    #[serde(default)]
    pub lists_refreshed_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub running_job: Option<RunningJob>,
    #[serde(default)]
    pub owed: Vec<OwedResult>,
    #[serde(default)]
    pub reported: Vec<String>,
    #[serde(default)]
    pub scan: Option<Scan>,
}

impl State {
    /// Whether `job_id` was run already (its result owed or reported).
    pub fn ran(&self, job_id: &str) -> bool {
        self.owed.iter().any(|o| o.job_id == job_id) || self.reported.iter().any(|j| j == job_id)
    }

    /// The service acknowledged `job_id`'s result.
    pub fn acknowledged(&mut self, job_id: &str) {
        self.owed.retain(|o| o.job_id != job_id);
        if !self.reported.iter().any(|j| j == job_id) {
            self.reported.push(job_id.to_owned());
        }
        let excess = self.reported.len().saturating_sub(REMEMBERED_JOBS);
        self.reported.drain(..excess);
    }
}

/// The state directory, created (0700) when missing.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

/// Held while the agent runs: one agent process at a time per state directory, so two never
/// run package-manager transactions at once.
pub struct InstanceLock {
    _file: File,
}

impl StateDir {
    pub fn open(dir: &Path) -> anyhow::Result<StateDir> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the state directory {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private (0700)", dir.display()))?;
        Ok(StateDir {
            dir: dir.to_owned(),
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Takes the instance lock, waiting (and saying so) while another agent holds it.
    pub fn lock(&self) -> anyhow::Result<InstanceLock> {
        let path = self.path(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::info!(
                    "another fleet-agent is running with {}: waiting for it",
                    self.dir.display()
                );
                file.lock()
                    .with_context(|| format!("locking {}", path.display()))?;
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(err).with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(InstanceLock { _file: file })
    }

    /// Writes `name` whole (0600): a temporary file, synced, renamed over the old one.
    pub fn write(&self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let target = self.path(name);
        let temporary = self.path(&format!(".{name}.tmp"));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("writing {}", temporary.display()))?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", temporary.display()))?;
        std::fs::rename(&temporary, &target)
            .with_context(|| format!("replacing {}", target.display()))?;
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    pub fn read(&self, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("reading {}", self.path(name).display())),
        }
    }

    pub fn remove(&self, name: &str) -> anyhow::Result<()> {
        match std::fs::remove_file(self.path(name)) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err).with_context(|| format!("removing {}", self.path(name).display())),
        }
    }

    pub fn load(&self) -> anyhow::Result<State> {
        match self.read(STATE_FILE)? {
            None => Ok(State::default()),
            Some(bytes) => serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "{} is not the agent's state",
                    self.path(STATE_FILE).display()
                )
            }),
        }
    }

    pub fn save(&self, state: &State) -> anyhow::Result<()> {
        self.write(STATE_FILE, &serde_json::to_vec_pretty(state)?)
    }

    /// The key a `name` file holds.
    pub fn key(&self, name: &str) -> anyhow::Result<Option<SigningKey>> {
        let Some(bytes) = self.read(name)? else {
            return Ok(None);
        };
        let pem = String::from_utf8(bytes).context("the key file is not PEM")?;
        SigningKey::from_pkcs8_pem(&pem)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.path(name).display()))
    }

    pub fn write_key(&self, name: &str, key: &SigningKey) -> anyhow::Result<()> {
        let pem = key
            .to_pkcs8_pem()
            .map_err(|e| anyhow::anyhow!("encoding the key: {e}"))?;
        self.write(name, pem.as_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_private_and_the_key_owner_only() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let state = StateDir::open(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        let key = SigningKey::ed25519_from_seed(&[3; 32]);
        state.write_key(KEY_FILE, &key).unwrap();
        assert_eq!(mode(&state.path(KEY_FILE)), 0o600);
        let read = state.key(KEY_FILE).unwrap().unwrap();
        assert_eq!(read.public_key(), key.public_key());
        assert!(state.key(PENDING_KEY_FILE).unwrap().is_none());
    }

    #[test]
    fn state_survives_a_round_trip_and_remembers_reported_jobs() {
        let temp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(temp.path()).unwrap();
        assert_eq!(dir.load().unwrap(), State::default());
        let mut state = State::default();
        for i in 0..(REMEMBERED_JOBS + 5) {
            state.acknowledged(&format!("job_{i}"));
        }
        assert_eq!(state.reported.len(), REMEMBERED_JOBS);
        assert!(!state.ran("job_0"));
        assert!(state.ran(&format!("job_{}", REMEMBERED_JOBS + 4)));
        dir.save(&state).unwrap();
        assert_eq!(dir.load().unwrap(), state);
        dir.write(STATE_FILE, b"{oops").unwrap();
        assert!(dir.load().is_err());
    }

    #[test]
    fn a_second_instance_waits_for_the_first() {
        let temp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(temp.path()).unwrap();
        let held = dir.lock().unwrap();
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path(LOCK_FILE))
            .unwrap();
        assert!(matches!(
            file.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(held);
        file.try_lock().unwrap();
    }
}
