//! The certified agent keys this process has seen, so that a signed request does not read
//! `host_keys` and parse the key on every call.
//!
//! Only what never changes once a key is certified is kept: its id, host, organization,
//! public key, validity and creation time. Whether the key is still usable (not revoked, its
//! host not decommissioned or gone) is *not* cached: the statement that records the request's
//! nonce inserts only while both hold (`signed::remember_nonce`), so a revocation by this or
//! any other api process is refused from the very next request on, with no bound to document.
//! Forgetting keys on this process's own revocations (decommissioning, re-enrolment, a renewed
//! key's first use) only keeps the map small and the refusal's logged reason exact.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use chrono::{DateTime, Utc};
use entities::host_keys;
use protocol::signature::{PublicKey, SignatureError};
use uuid::Uuid;

/// Keys remembered at most; beyond, a tenth of them is forgotten (about 200 bytes each).
const MAX_KEYS: usize = 50_000;

/// What a signed request needs of its key.
#[derive(Debug)]
pub struct CertifiedKey {
    /// The certificate's serial in lowercase hex: the signatures' `keyid`.
    pub key_id: String,
    pub host_id: Uuid,
    pub org_id: Uuid,
    pub public: PublicKey,
    pub not_after: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl CertifiedKey {
    pub fn from_row(row: &host_keys::Model) -> Result<CertifiedKey, SignatureError> {
        Ok(CertifiedKey {
            key_id: row.key_id.clone(),
            host_id: row.host_id,
            org_id: row.org_id,
            public: PublicKey::from_spki_der(&row.public_key)?,
            not_after: row.not_after,
            created_at: row.created_at,
        })
    }
}

/// Certified keys by id, shared by every request of the process.
#[derive(Default)]
pub struct KeyCache {
    keys: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl KeyCache {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<CertifiedKey>>> {
        // The map is consistent after any panic (every change is one call), so a poisoned
        // lock is still usable.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key_id: &str) -> Option<Arc<CertifiedKey>> {
        self.map().get(key_id).cloned()
    }

    pub fn insert(&self, key: Arc<CertifiedKey>) {
        let mut keys = self.map();
        if keys.len() >= MAX_KEYS {
            let mut dropped = 0;
            keys.retain(|_, _| {
                dropped += 1;
                dropped > MAX_KEYS / 10
            });
        }
        keys.insert(key.key_id.clone(), key);
    }

    /// Forgets one key (refused, or revoked by this process).
    pub fn forget(&self, key_id: &str) {
        self.map().remove(key_id);
    }

    /// Forgets every key of a host (its keys were revoked by this process).
    pub fn forget_host(&self, host_id: Uuid) {
        self.map().retain(|_, key| key.host_id != host_id);
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
