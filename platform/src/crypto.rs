//! Sealing of stored credentials (channel configurations, SSO client secrets, the agent CA key)
//! with AES-256-GCM under `SECRETS_KEY` (decisions §11).
//!
//! A sealed value is text, `v1:` followed by the standard base64 of a fresh random 96-bit nonce,
//! the ciphertext and the 128-bit tag, so that it fits a text column and a later format can sit
//! beside it. The associated data names the value's purpose (`b"agent-ca-key"`,
//! `b"channel-config"`…): a value copied into another column does not open there.
//!
//! Random nonces are safe for far more seals than this service makes under one key (the limit
//! is about 2^32 messages).

use aes_gcm::{
    Aes256Gcm, KeyInit,
    aead::{Aead, Payload},
};
use base64::Engine;

/// The prefix of the current sealed format.
pub const SEALED_PREFIX: &str = "v1:";

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// Why a sealed value could not be opened. Neither variant says which byte was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// Not a sealed value of a known version (wrong prefix, not base64, too short).
    #[error("not a sealed value of a known format")]
    Malformed,
    /// The key, the associated data or the bytes do not match what was sealed.
    #[error("sealed value does not open with this key and purpose")]
    Unauthentic,
}

/// Encrypts `plaintext` under `key`, bound to `associated_data`, with a fresh random nonce.
///
/// # Panics
/// Only for a plaintext over AES-GCM's limit of 64 GiB.
pub fn seal(key: &[u8; 32], plaintext: &[u8], associated_data: &[u8]) -> String {
    let cipher = Aes256Gcm::new(key.into());
    let nonce_bytes: [u8; NONCE_LEN] = rand::random();
    let ciphertext = cipher
        .encrypt(
            &nonce_bytes.into(),
            Payload {
                msg: plaintext,
                aad: associated_data,
            },
        )
        .expect("AES-GCM encrypts any plaintext under 64 GiB");
    let mut bytes = Vec::with_capacity(NONCE_LEN + ciphertext.len());
    bytes.extend_from_slice(&nonce_bytes);
    bytes.extend_from_slice(&ciphertext);
    format!(
        "{SEALED_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// Decrypts a value made by [`seal`] with the same key and associated data.
pub fn open(key: &[u8; 32], sealed: &str, associated_data: &[u8]) -> Result<Vec<u8>, CryptoError> {
    let encoded = sealed
        .strip_prefix(SEALED_PREFIX)
        .ok_or(CryptoError::Malformed)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| CryptoError::Malformed)?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(CryptoError::Malformed);
    }
    let (nonce_bytes, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce_bytes.try_into().map_err(|_| CryptoError::Malformed)?;
    Aes256Gcm::new(key.into())
        .decrypt(
            &nonce.into(),
            Payload {
                msg: ciphertext,
                aad: associated_data,
            },
        )
        .map_err(|_| CryptoError::Unauthentic)
}

/// Whether `value` has the shape of a sealed value (as opposed to a legacy plain one).
pub fn is_sealed(value: &str) -> bool {
    value.starts_with(SEALED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];
    const PURPOSE: &[u8] = b"channel-config";

    #[test]
    fn a_sealed_value_opens_with_the_same_key_and_purpose() {
        let sealed = seal(&KEY, b"hook secret", PURPOSE);
        assert!(sealed.starts_with("v1:"));
        assert!(is_sealed(&sealed));
        assert!(!sealed.contains("hook secret"));
        assert_eq!(open(&KEY, &sealed, PURPOSE), Ok(b"hook secret".to_vec()));
        let empty = seal(&KEY, b"", PURPOSE);
        assert_eq!(open(&KEY, &empty, PURPOSE), Ok(Vec::new()));
    }

    #[test]
    fn another_key_does_not_open_it() {
        let sealed = seal(&KEY, b"hook secret", PURPOSE);
        assert_eq!(
            open(&[8; 32], &sealed, PURPOSE),
            Err(CryptoError::Unauthentic)
        );
    }

    #[test]
    fn another_purpose_does_not_open_it() {
        let sealed = seal(&KEY, b"hook secret", PURPOSE);
        assert_eq!(
            open(&KEY, &sealed, b"agent-ca-key"),
            Err(CryptoError::Unauthentic)
        );
    }

    #[test]
    fn any_altered_byte_is_refused() {
        let sealed = seal(&KEY, b"hook secret", PURPOSE);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&sealed[3..])
            .expect("base64");
        for i in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[i] ^= 0x01;
            let text = format!(
                "v1:{}",
                base64::engine::general_purpose::STANDARD.encode(&altered)
            );
            assert_eq!(
                open(&KEY, &text, PURPOSE),
                Err(CryptoError::Unauthentic),
                "byte {i}"
            );
        }
        let truncated = format!(
            "v1:{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes[..bytes.len() - 1])
        );
        assert_eq!(
            open(&KEY, &truncated, PURPOSE),
            Err(CryptoError::Unauthentic)
        );
    }

    #[test]
    fn garbage_is_malformed_and_never_panics() {
        for garbage in [
            "",
            "v1:",
            "v1:!!!!",
            "v1:AAAA",
            "v2:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "plain:secret",
            "v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "v1:\u{1F600}",
        ] {
            assert_eq!(
                open(&KEY, garbage, PURPOSE),
                Err(CryptoError::Malformed),
                "{garbage:?}"
            );
        }
        // Long enough to hold a nonce and a tag, but not what was sealed.
        let zeros = format!(
            "v1:{}",
            base64::engine::general_purpose::STANDARD.encode([0u8; 40])
        );
        assert_eq!(open(&KEY, &zeros, PURPOSE), Err(CryptoError::Unauthentic));
    }

    #[test]
    fn each_seal_uses_a_fresh_nonce() {
        let a = seal(&KEY, b"same", PURPOSE);
        let b = seal(&KEY, b"same", PURPOSE);
        assert_ne!(a, b);
        let nonce = |s: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(&s[3..])
                .expect("base64")[..NONCE_LEN]
                .to_vec()
        };
        assert_ne!(nonce(&a), nonce(&b));
    }
}
