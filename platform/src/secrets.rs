//! Credentials the service hands out (session cookies, sign-in links, API and enrollment
//! tokens): 256 random bits, shown once, stored only as a SHA-256 hash.
//!
//! A plain hash is enough here because the secrets are uniformly random 256-bit values: a
//! leaked table of hashes cannot be turned back into working tokens, and lookup stays an index
//! hit on the hash column (a salted, slow hash would force a scan or a second identifier).

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A freshly minted secret: its value (shown once) and the hash to store.
pub struct Minted {
    pub value: String,
    pub hash: Vec<u8>,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Minted(..)")
    }
}

/// 256 random bits as unpadded base64url, after `prefix` (e.g. `sat_`), and their hash.
pub fn mint(prefix: &str) -> Minted {
    let bytes: [u8; 32] = rand::random();
    let value = format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = hash(&value);
    Minted { value, hash }
}

/// The stored form of a presented secret.
pub fn hash(value: &str) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(b"fleet-secret-v1\0");
    hasher.update(value.as_bytes());
    hasher.finalize().to_vec()
}

/// Compares two secrets in time independent of where they differ.
pub fn equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// [`equal`] for bytes (hashes).
pub fn equal_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// Whether `value` has the shape of a minted secret with `prefix` (cheap rejection before a
/// database lookup).
pub fn well_formed(prefix: &str, value: &str) -> bool {
    value.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_secrets_are_distinct_and_hash_to_what_is_stored() {
        let a = mint("sat_");
        let b = mint("sat_");
        assert_ne!(a.value, b.value);
        assert!(well_formed("sat_", &a.value));
        assert_eq!(hash(&a.value), a.hash);
        assert_ne!(a.hash, b.hash);
        assert!(!format!("{a:?}").contains(&a.value));
    }

    #[test]
    fn shapes_and_comparison() {
        assert!(!well_formed("sat_", "sat_short"));
        assert!(!well_formed("sat_", &mint("enr_").value));
        assert!(equal("abc", "abc"));
        assert!(!equal("abc", "abd"));
        assert!(!equal("abc", "abcd"));
    }
}
