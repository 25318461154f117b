//! Standard Webhooks signing (decisions §8): `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "<id>.<timestamp>.<body>">`, keyed by the base64-decoded part of the channel's `whsec_`
//! secret (32 random bytes), so receivers verify with the specification's libraries.

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and the base64 of 32 random bytes.
pub fn generate_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// Why a secret cannot sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a whsec_ secret")]
pub struct BadSecret;

/// The key a `whsec_` secret stands for.
fn key(secret: &str) -> Result<Vec<u8>, BadSecret> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).ok_or(BadSecret)?;
    STANDARD.decode(encoded).map_err(|_| BadSecret)
}

/// The `webhook-signature` header value for message `id` sent at `timestamp` (Unix seconds)
/// with `body`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, BadSecret> {
    let key = key(secret)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| BadSecret)?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `../shared/spec/vectors/standard-webhooks.json` (a copy, so the crate builds on its own),
    /// reproduced exactly.
    #[test]
    fn the_signer_reproduces_the_standard_webhooks_vector() {
        let vector: serde_json::Value =
            serde_json::from_str(include_str!("../../testdata/standard-webhooks.json"))
                .expect("the vector is JSON");
        let text = |k: &str| vector[k].as_str().expect(k).to_owned();
        let timestamp: i64 = text("webhook-timestamp").parse().expect("timestamp");
        let signature = sign(
            &text("secret"),
            &text("webhook-id"),
            timestamp,
            text("body").as_bytes(),
        )
        .expect("signs");
        assert_eq!(signature, text("webhook-signature"));
    }

    #[test]
    fn generated_secrets_are_32_random_bytes_and_differ() {
        let a = generate_secret();
        let b = generate_secret();
        assert_ne!(a, b);
        assert_eq!(key(&a).expect("decodes").len(), 32);
        assert!(sign(&a, "dlv_x", 1, b"{}").is_ok());
        assert_ne!(sign(&a, "dlv_x", 1, b"{}"), sign(&b, "dlv_x", 1, b"{}"));
    }

    #[test]
    fn a_secret_without_its_prefix_or_not_base64_cannot_sign() {
        assert_eq!(sign("MfKQ9r8GKYqrTwjU", "id", 1, b""), Err(BadSecret));
        assert_eq!(sign("whsec_!!!", "id", 1, b""), Err(BadSecret));
    }
}
