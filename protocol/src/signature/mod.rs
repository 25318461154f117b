//! RFC 9421 HTTP Message Signatures as the agent protocol uses them
//! (decisions.md §6).
//!
//! Every agent call after enrolment carries
//!
//! ```text
//! Signature-Input: sig1=("@method" "@authority" "@path" ["@query"] ["content-digest"]);created=…;keyid="…";nonce="…"[;alg="…"]
//! Signature: sig1=:<base64 of the 64-byte signature>:
//! Content-Digest: sha-256=:<base64 of the SHA-256 of the body>:   (RFC 9530, when there is a body)
//! ```
//!
//! This module is transport-agnostic and does no I/O. An agent signs with [`sign`] (which adds
//! the `Content-Digest` of the body). The service, verifying:
//!
//! 1. builds a [`RequestHead`] and calls [`parse_head`], which checks the Structured Field
//!    syntax and the coverage this protocol requires, reads the Content-Digest the request
//!    announces, and rebuilds the signature base (RFC 9421 §2.5), all before a byte of the
//!    body is read;
//! 2. calls [`SignatureParams::check_fresh`] with the current time (cheap, before any database
//!    work);
//! 3. looks the key up by [`SignatureParams::key_id`] (and checks that it was issued to that
//!    host, unexpired, host not decommissioned);
//! 4. calls [`ParsedSignature::verify`] with that key (checks `alg` against the key type and
//!    the signature itself);
//! 5. only then records the nonce, refusing a `(key_id, nonce)` pair seen before. A nonce
//!    needs keeping until `created + MAX_AGE_S` ([`SignatureParams::replay_window_end`]):
//!    after that the signature is stale anyway;
//! 6. reads the body through [`ParsedSignature::body_check`], which refuses the first byte of
//!    a body the signature does not cover and, at the end, a body whose SHA-256 is not the
//!    announced Content-Digest. So an unauthenticated caller costs no body reading at all,
//!    and the body is never held twice.
//!
//! [`parse`] does steps 1 and 6 at once for a body already in memory.
//!
//! Only the first signature in `Signature-Input` is considered (the agent sends one, `sig1`).//!
//! The signature base (RFC 9421 §2.5) is built in one place, [`signature_base`], for both.

mod base;
mod keys;
mod sign;
mod verify;

pub use base::signature_base;
pub use keys::{PublicKey, SigningKey, check_alg, verify};
pub use sign::{Outgoing, SignatureHeaders, Signer, sign};
pub use verify::*;

/// The `Content-Digest` value (RFC 9530, sha-256) of a body.
pub fn content_digest(body: &[u8]) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(body))
    )
}
