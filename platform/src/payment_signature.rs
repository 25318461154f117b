//! The payment processor's webhook signature (decisions §9), the scheme of Stripe-Signature:
//! `Payment-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`.
//!
//! The secret is used as its UTF-8 bytes, whole (prefix included). Several `v1` entries may
//! appear while the processor rotates its secret: one matching is enough. Entries of other
//! schemes are ignored, so a header with nothing but an unknown scheme is unsigned. The
//! timestamp must be within [`TOLERANCE_S`] of now, either way, so a captured request cannot
//! be replayed later. Comparison is constant-time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How far the signature's timestamp may be from now, in seconds.
pub const TOLERANCE_S: i64 = 300;

/// Why a request is not signed by the processor. Its `Display` is safe to show the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the Payment-Signature header is missing")]
    Missing,
    #[error("the Payment-Signature header is not t=<unix seconds>,v1=<hex>")]
    Malformed,
    #[error("the Payment-Signature timestamp is more than 300 s from now")]
    Stale,
    #[error("no v1 signature in Payment-Signature matches the body")]
    Mismatch,
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// The header value signing `body` at `timestamp` with `secret` (what the processor sends;
/// tests sign with it).
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let tag = mac(secret, &t, body).finalize().into_bytes();
    format!("t={t},v1={}", hex(&tag))
}

/// Verifies `header` over the exact `body` at `now` (Unix seconds); the signed timestamp on
/// success.
pub fn verify(
    secret: &str,
    header: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<i64, SignatureError> {
    let header = header
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or(SignatureError::Missing)?;
    let mut timestamp: Option<&str> = None;
    let mut candidates: Vec<Vec<u8>> = Vec::new();
    for item in header.split(',') {
        let (key, value) = item
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match key.trim() {
            "t" if timestamp.replace(value.trim()).is_some() => {
                return Err(SignatureError::Malformed);
            }
            "t" => {}
            "v1" => {
                // A v1 that is not 32 bytes of hex can match nothing; skip it like an
                // unknown scheme rather than refuse a rotation's odd entry.
                if let Some(tag) = unhex(value.trim()).filter(|tag| tag.len() == 32) {
                    candidates.push(tag);
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    let signed_at: i64 = timestamp.parse().map_err(|_| SignatureError::Malformed)?;
    if candidates.is_empty() {
        return Err(SignatureError::Mismatch);
    }
    if now.abs_diff(signed_at) > TOLERANCE_S.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    let expected = mac(secret, timestamp, body);
    // Every candidate is checked (constant-time each), whichever matches.
    let matched = candidates.iter().fold(false, |found, tag| {
        expected.clone().verify_slice(tag).is_ok() | found
    });
    if matched {
        Ok(signed_at)
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shared/spec/vectors/payment-signature.json`, verified by the processor's own library.
    const VECTOR_SECRET: &str = "whsec_test_payments_0123456789abcdef";
    const VECTOR_BODY: &str = r#"{"id":"evt_1QxExample","object":"event","type":"customer.subscription.updated","created":1767225600,"data":{"object":{"id":"sub_1QxExample","object":"subscription","customer":"cus_QxExample","status":"active","start_date":1767225600,"current_period_end":1769904000,"items":{"object":"list","data":[{"id":"si_1","price":{"id":"price_1","lookup_key":"business"}}]}}}}"#;
    const VECTOR_HEADER: &str =
        "t=1767225700,v1=fc9bd3b12a43a0ca2d2c7698a716abb198ec02d7e8d027f0b7fcde67bdfff848";
    const VECTOR_VERIFY_AT: i64 = 1767225710;

    #[test]
    fn the_shared_vector_verifies_and_signing_reproduces_it() {
        assert_eq!(
            verify(
                VECTOR_SECRET,
                Some(VECTOR_HEADER),
                VECTOR_BODY.as_bytes(),
                VECTOR_VERIFY_AT
            ),
            Ok(1767225700)
        );
        assert_eq!(
            sign(VECTOR_SECRET, 1767225700, VECTOR_BODY.as_bytes()),
            VECTOR_HEADER
        );
    }

    #[test]
    fn the_vector_file_says_the_same() {
        // A copy of ../shared/spec/vectors/payment-signature.json, so the crate builds alone.
        let vector: serde_json::Value =
            serde_json::from_str(include_str!("../testdata/payment-signature.json"))
                .expect("vector JSON");
        let field = |name: &str| vector[name].as_str().expect(name).to_owned();
        assert_eq!(field("secret"), VECTOR_SECRET);
        assert_eq!(field("body"), VECTOR_BODY);
        assert_eq!(field("Payment-Signature"), VECTOR_HEADER);
        assert_eq!(vector["verify_at_unix"], VECTOR_VERIFY_AT);
        assert!(
            verify(
                &field("secret"),
                Some(&field("Payment-Signature")),
                field("body").as_bytes(),
                VECTOR_VERIFY_AT
            )
            .is_ok()
        );
    }

    #[test]
    fn other_bytes_stale_times_missing_and_unknown_schemes_are_refused() {
        let body = VECTOR_BODY.as_bytes();
        let at = VECTOR_VERIFY_AT;
        let spaced = format!("{VECTOR_BODY} ");
        assert_eq!(
            verify(VECTOR_SECRET, Some(VECTOR_HEADER), spaced.as_bytes(), at),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("whsec_other", Some(VECTOR_HEADER), body, at),
            Err(SignatureError::Mismatch)
        );
        // 300 s either way is accepted, 301 is not.
        assert!(verify(VECTOR_SECRET, Some(VECTOR_HEADER), body, 1767225700 + 300).is_ok());
        assert!(verify(VECTOR_SECRET, Some(VECTOR_HEADER), body, 1767225700 - 300).is_ok());
        assert_eq!(
            verify(VECTOR_SECRET, Some(VECTOR_HEADER), body, 1767225700 + 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(VECTOR_SECRET, Some(VECTOR_HEADER), body, 1767225700 - 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(VECTOR_SECRET, None, body, at),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(VECTOR_SECRET, Some(""), body, at),
            Err(SignatureError::Missing)
        );
        let v0_only = VECTOR_HEADER.replace("v1=", "v0=");
        assert_eq!(
            verify(VECTOR_SECRET, Some(&v0_only), body, at),
            Err(SignatureError::Mismatch)
        );
        for malformed in ["garbage", "t=soon,v1=00", "v1=fc9b", "t=1,t=2,v1=00"] {
            assert_eq!(
                verify(VECTOR_SECRET, Some(malformed), body, at),
                Err(SignatureError::Malformed),
                "{malformed}"
            );
        }
    }

    #[test]
    fn one_matching_v1_among_several_is_enough() {
        let body = VECTOR_BODY.as_bytes();
        let rotated = format!(
            "t=1767225700,v1={},v1={},v0=abc",
            "00".repeat(32),
            VECTOR_HEADER.split("v1=").nth(1).expect("v1")
        );
        assert!(verify(VECTOR_SECRET, Some(&rotated), body, VECTOR_VERIFY_AT).is_ok());
        let none = format!("t=1767225700,v1={},v1=zz", "00".repeat(32));
        assert_eq!(
            verify(VECTOR_SECRET, Some(&none), body, VECTOR_VERIFY_AT),
            Err(SignatureError::Mismatch)
        );
    }
}
