//! What hosts report, remembered per process, so that an evaluation reads `host_updates` only
//! for the hosts whose updates changed since this process last read them.
//!
//! Each host's updates are kept with the `hosts.updates_seq` they were read at. The check-in
//! that writes a host's updates moves that count in the same transaction, so while the count
//! read now equals the one kept, the kept updates are what the rows hold. The count is read
//! before the rows (and, within an evaluation, before any row of the host is read), so rows
//! newer than their count can be kept, which only costs a read the next time; rows older than
//! their count cannot. A process that has never read a host reads it; nothing is shared
//! between processes, so several workers stay exact each on its own.
//!
//! Updates many hosts report alike are kept once ([`Reported`], interned), with their
//! advisories parsed once. The memory is bounded: past [`MAX_REFERENCES`] host-update
//! references everything is forgotten and read again as needed.

use std::{
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
    sync::{Arc, Mutex, PoisonError},
};

use entities::json::{Advisory, Impact, JsonText, Unreadable};
use uuid::Uuid;

use super::change_key::ChangeKey;
use crate::severity;

/// Host-update references kept before everything is forgotten (4 bytes … 8 bytes each, about
/// 64 MB at most: 16,000 hosts with 500 updates each).
pub const MAX_REFERENCES: usize = 8_000_000;

/// One available update as hosts report it, the host aside: what makes it a change, and what
/// the policy filters and the proposal read of it.
#[derive(Debug)]
pub struct Reported {
    pub key: ChangeKey,
    pub source_name: Option<String>,
    pub security: bool,
    /// The advisories as stored (`[]`: none).
    text: String,
    /// The advisories read from `text`, once.
    advisories: Result<Vec<Advisory>, Unreadable>,
    /// The agent flagged it as needing a reboot (§6 `requires_reboot`).
    pub requires_reboot: bool,
    /// What applying it would do, as its agent said (decisions §21), as stored; `None`: it did
    /// not say.
    impact_text: Option<String>,
    /// The impact read from `impact_text`, once; `None` when the agent did not say or what it
    /// said cannot be read (unknown either way, never "no impact").
    impact: Option<Impact>,
}

impl Reported {
    pub fn new(
        key: ChangeKey,
        source_name: Option<String>,
        security: bool,
        advisories: JsonText<Vec<Advisory>>,
    ) -> Reported {
        let text = advisories.as_str().to_owned();
        let advisories = if text.trim() == "[]" {
            Ok(Vec::new())
        } else {
            advisories.read()
        };
        Reported {
            key,
            source_name,
            security,
            text,
            advisories,
            requires_reboot: false,
            impact_text: None,
            impact: None,
        }
    }

    /// The same update with the reboot flag and the impact its agent reported.
    pub fn with_impact(
        mut self,
        requires_reboot: bool,
        impact: Option<JsonText<Impact>>,
    ) -> Reported {
        self.requires_reboot = requires_reboot;
        self.impact = impact.as_ref().and_then(|stored| {
            stored
                .read()
                .inspect_err(|err| {
                    tracing::warn!(error = %err, "a stored impact cannot be read: counted as unknown");
                })
                .ok()
        });
        self.impact_text = impact.map(|stored| stored.as_str().to_owned());
        self
    }

    /// What applying it would do, if its agent said (and it can be read).
    pub fn impact(&self) -> Option<&Impact> {
        self.impact.as_ref()
    }

    /// No advisory names it.
    pub fn unrated(&self) -> bool {
        matches!(&self.advisories, Ok(list) if list.is_empty())
    }

    /// Its advisories; an error when the stored text cannot be read.
    pub fn advisories(&self) -> Result<&[Advisory], Unreadable> {
        self.advisories.as_deref().map_err(Clone::clone)
    }

    /// The highest severity rank of its advisories, if any is rated.
    pub fn max_rank(&self) -> Result<Option<u8>, Unreadable> {
        Ok(self
            .advisories()?
            .iter()
            .filter_map(|a| a.severity.as_deref().and_then(severity::rank))
            .max())
    }
}

impl PartialEq for Reported {
    fn eq(&self, other: &Reported) -> bool {
        self.key == other.key
            && self.source_name == other.source_name
            && self.security == other.security
            && self.text == other.text
            && self.requires_reboot == other.requires_reboot
            && self.impact_text == other.impact_text
    }
}

impl Eq for Reported {}

impl Hash for Reported {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
        self.source_name.hash(state);
        self.security.hash(state);
        self.text.hash(state);
        self.requires_reboot.hash(state);
        self.impact_text.hash(state);
    }
}

/// One host's updates as read at `seq`.
#[derive(Clone)]
struct Kept {
    seq: i64,
    updates: Arc<[Arc<Reported>]>,
}

#[derive(Default)]
struct State {
    interned: HashSet<Arc<Reported>>,
    hosts: HashMap<Uuid, Kept>,
    references: usize,
}

/// The per-process memory of policy evaluations (cheap to clone: one memory): what hosts
/// report, and which policies this process is evaluating now.
#[derive(Clone, Default)]
pub struct Reports {
    state: Arc<Mutex<State>>,
    running: Arc<Mutex<HashSet<Uuid>>>,
}

/// A policy this process is evaluating, until dropped.
pub struct Claim {
    running: Arc<Mutex<HashSet<Uuid>>>,
    policy: Uuid,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.policy);
    }
}

impl std::fmt::Debug for Reports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Reports")
            .field("hosts", &state.hosts.len())
            .field("updates", &state.interned.len())
            .field("references", &state.references)
            .finish()
    }
}

/// What an evaluation needs of its hosts' updates: those kept at the right count, and the
/// hosts to read.
pub struct Lookup {
    pub found: Vec<(Uuid, Arc<[Arc<Reported>]>)>,
    /// Hosts not kept, or kept at another count: (host, count now).
    pub missing: Vec<(Uuid, i64)>,
}

impl Reports {
    pub fn new() -> Reports {
        Reports::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing here panics with the lock held; should it, the memory is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept updates of `hosts` (host, count now) whose count has not moved, and the rest.
    pub fn lookup(&self, hosts: impl IntoIterator<Item = (Uuid, i64)>) -> Lookup {
        let state = self.state();
        let mut lookup = Lookup {
            found: Vec::new(),
            missing: Vec::new(),
        };
        for (host, seq) in hosts {
            match state.hosts.get(&host) {
                Some(kept) if kept.seq == seq => {
                    lookup.found.push((host, kept.updates.clone()));
                }
                _ => lookup.missing.push((host, seq)),
            }
        }
        lookup
    }

    /// Keeps `updates` as `host`'s at count `seq` (read after the count was), and returns them
    /// as kept.
    pub fn keep(&self, host: Uuid, seq: i64, updates: Vec<Reported>) -> Arc<[Arc<Reported>]> {
        let mut state = self.state();
        if state.references + updates.len() > MAX_REFERENCES {
            *state = State::default();
        }
        let updates: Arc<[Arc<Reported>]> = updates
            .into_iter()
            .map(|update| match state.interned.get(&update) {
                Some(kept) => kept.clone(),
                None => {
                    let kept = Arc::new(update);
                    state.interned.insert(kept.clone());
                    kept
                }
            })
            .collect();
        state.references += updates.len();
        if let Some(old) = state.hosts.insert(
            host,
            Kept {
                seq,
                updates: updates.clone(),
            },
        ) {
            state.references -= old.updates.len();
        }
        updates
    }

    /// Claims `policy` for an evaluation in this process; `None` while another holds it.
    /// Runs of one policy in one process never overlap, so a burst of host changes cannot
    /// start many runs that each read every changed host (on SQLite nothing else stops them
    /// before the write lock; on Postgres the advisory lock is taken on a connection).
    pub fn claim(&self, policy: Uuid) -> Option<Claim> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.insert(policy).then(|| Claim {
            running: self.running.clone(),
            policy,
        })
    }

    /// Hosts kept (for tests and benchmarks).
    pub fn hosts(&self) -> usize {
        self.state().hosts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(package: &str, to: &str) -> Reported {
        Reported::new(
            ChangeKey {
                package: package.into(),
                ecosystem: "deb".into(),
                from_version: "1".into(),
                to_version: to.into(),
            },
            None,
            false,
            JsonText::from_stored("[]"),
        )
    }

    #[test]
    fn a_host_is_read_again_once_its_count_moves_and_alike_updates_are_kept_once() {
        let reports = Reports::new();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let lookup = reports.lookup([(a, 1), (b, 1)]);
        assert!(lookup.found.is_empty());
        assert_eq!(lookup.missing, vec![(a, 1), (b, 1)]);

        let kept_a = reports.keep(a, 1, vec![update("curl", "2")]);
        let kept_b = reports.keep(b, 1, vec![update("curl", "2")]);
        assert!(Arc::ptr_eq(&kept_a[0], &kept_b[0]), "interned");

        let lookup = reports.lookup([(a, 1), (b, 2)]);
        assert_eq!(lookup.found.len(), 1);
        assert_eq!(lookup.found[0].0, a);
        assert_eq!(lookup.missing, vec![(b, 2)]);

        reports.keep(b, 2, vec![update("curl", "3")]);
        let lookup = reports.lookup([(b, 2)]);
        assert_eq!(lookup.found[0].1[0].key.to_version, "3");
    }

    #[test]
    fn a_policy_is_claimed_by_one_evaluation_at_a_time() {
        let reports = Reports::new();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let first = reports.claim(a).expect("free");
        assert!(
            reports.clone().claim(a).is_none(),
            "held, through any clone"
        );
        let other = reports.claim(b).expect("another policy is free");
        drop(first);
        assert!(reports.claim(a).is_some(), "free again once dropped");
        drop(other);
    }

    #[test]
    fn unreadable_advisories_are_an_error_when_used_not_when_kept() {
        let broken = Reported::new(
            ChangeKey::example(),
            None,
            true,
            JsonText::from_stored(r#"[{"external_id":"1""#),
        );
        assert!(!broken.unrated());
        assert!(broken.advisories().is_err());
        assert!(broken.max_rank().is_err());
        assert!(update("curl", "2").unrated());
    }
}
