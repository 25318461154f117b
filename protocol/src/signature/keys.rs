//! The keys signatures are made and checked with: Ed25519 or ECDSA P-256 (RFC 9421 §3.3.6,
//! §3.3.4).

use std::fmt;

use ed25519_dalek::pkcs8::DecodePublicKey as _;
use p256::ecdsa::signature::Verifier as _;

use super::{Algorithm, SignatureError};

/// A public key a signature can be verified with.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(KeyInner);

#[derive(Clone, PartialEq, Eq)]
enum KeyInner {
    Ed25519(ed25519_dalek::VerifyingKey),
    P256(p256::ecdsa::VerifyingKey),
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.algorithm())
    }
}

impl PublicKey {
    /// An Ed25519 key from its 32 raw bytes (RFC 8032).
    pub fn from_ed25519_bytes(raw: &[u8]) -> Result<Self, SignatureError> {
        let raw: &[u8; 32] = raw
            .try_into()
            .map_err(|_| SignatureError::InvalidKey("an Ed25519 key is 32 bytes"))?;
        ed25519_dalek::VerifyingKey::from_bytes(raw)
            .map(|k| PublicKey(KeyInner::Ed25519(k)))
            .map_err(|_| SignatureError::InvalidKey("not an Ed25519 point"))
    }

    /// A P-256 key from its SEC1 encoding (65 bytes uncompressed or 33 compressed).
    pub fn from_p256_sec1(sec1: &[u8]) -> Result<Self, SignatureError> {
        p256::ecdsa::VerifyingKey::from_sec1_bytes(sec1)
            .map(|k| PublicKey(KeyInner::P256(k)))
            .map_err(|_| SignatureError::InvalidKey("not a P-256 point"))
    }

    /// A key from a DER `SubjectPublicKeyInfo`, as found in an X.509 certificate, a CSR or a
    /// `-----BEGIN PUBLIC KEY-----` PEM: Ed25519 (OID 1.3.101.112) or EC with the P-256 curve
    /// (id-ecPublicKey, prime256v1). Anything else is [`SignatureError::InvalidKey`].
    pub fn from_spki_der(der: &[u8]) -> Result<Self, SignatureError> {
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            return Ok(PublicKey(KeyInner::Ed25519(k)));
        }
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_der(der) {
            return Ok(PublicKey(KeyInner::P256(k)));
        }
        Err(SignatureError::InvalidKey(
            "not an Ed25519 or P-256 SubjectPublicKeyInfo",
        ))
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self.0 {
            KeyInner::Ed25519(_) => Algorithm::Ed25519,
            KeyInner::P256(_) => Algorithm::EcdsaP256Sha256,
        }
    }
}

/// Refuses an `alg` parameter that does not name the key's algorithm (none is fine).
pub fn check_alg(alg: Option<Algorithm>, key: &PublicKey) -> Result<(), SignatureError> {
    match alg {
        Some(alg) if alg != key.algorithm() => Err(SignatureError::AlgorithmMismatch {
            alg: alg.as_str().to_owned(),
            key: key.algorithm().as_str(),
        }),
        _ => Ok(()),
    }
}

/// Verifies `signature` over the signature base with `key`: Ed25519 (strict RFC 8032
/// verification) or ECDSA P-256 with SHA-256, the signature as raw 64-byte `r || s`.
pub fn verify(base: &str, signature: &[u8], key: &PublicKey) -> Result<(), SignatureError> {
    match &key.0 {
        KeyInner::Ed25519(k) => {
            let bytes: &[u8; 64] = signature
                .try_into()
                .map_err(|_| SignatureError::InvalidSignature)?;
            let sig = ed25519_dalek::Signature::from_bytes(bytes);
            k.verify_strict(base.as_bytes(), &sig)
                .map_err(|_| SignatureError::InvalidSignature)
        }
        KeyInner::P256(k) => {
            if signature.len() != 64 {
                return Err(SignatureError::InvalidSignature);
            }
            let sig = p256::ecdsa::Signature::from_slice(signature)
                .map_err(|_| SignatureError::InvalidSignature)?;
            k.verify(base.as_bytes(), &sig)
                .map_err(|_| SignatureError::InvalidSignature)
        }
    }
}

/// A private key to sign with: Ed25519 or ECDSA P-256. Its `Debug` names the algorithm only.
pub struct SigningKey(SigningInner);

enum SigningInner {
    Ed25519(ed25519_dalek::SigningKey),
    P256(p256::ecdsa::SigningKey),
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.algorithm())
    }
}

impl SigningKey {
    /// The Ed25519 key of a 32-byte seed (RFC 8032).
    pub fn ed25519_from_seed(seed: &[u8; 32]) -> Self {
        SigningKey(SigningInner::Ed25519(
            ed25519_dalek::SigningKey::from_bytes(seed),
        ))
    }

    /// A key from a PKCS#8 `-----BEGIN PRIVATE KEY-----` PEM: Ed25519 or P-256.
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, SignatureError> {
        if let Ok(key) =
            <ed25519_dalek::SigningKey as ed25519_dalek::pkcs8::DecodePrivateKey>::from_pkcs8_pem(
                pem,
            )
        {
            return Ok(SigningKey(SigningInner::Ed25519(key)));
        }
        <p256::ecdsa::SigningKey as p256::pkcs8::DecodePrivateKey>::from_pkcs8_pem(pem)
            .map(|key| SigningKey(SigningInner::P256(key)))
            .map_err(|_| SignatureError::InvalidKey("not an Ed25519 or P-256 PKCS#8 private key"))
    }

    /// The key as PKCS#8 DER (what a CSR library takes).
    pub fn to_pkcs8_der(&self) -> Result<Vec<u8>, SignatureError> {
        let unencodable = |_| SignatureError::InvalidKey("the key cannot be encoded as PKCS#8");
        match &self.0 {
            SigningInner::Ed25519(key) => ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_der(key)
                .map(|doc| doc.as_bytes().to_vec())
                .map_err(unencodable),
            SigningInner::P256(key) => p256::pkcs8::EncodePrivateKey::to_pkcs8_der(key)
                .map(|doc| doc.as_bytes().to_vec())
                .map_err(unencodable),
        }
    }

    /// The key as a PKCS#8 PEM, to keep on disk (readable by its owner only).
    pub fn to_pkcs8_pem(&self) -> Result<String, SignatureError> {
        let unencodable = |_| SignatureError::InvalidKey("the key cannot be encoded as PKCS#8");
        match &self.0 {
            SigningInner::Ed25519(key) => ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_pem(
                key,
                ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF,
            )
            .map(|pem| pem.to_string())
            .map_err(unencodable),
            SigningInner::P256(key) => {
                p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(key, p256::pkcs8::LineEnding::LF)
                    .map(|pem| pem.to_string())
                    .map_err(unencodable)
            }
        }
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self.0 {
            SigningInner::Ed25519(_) => Algorithm::Ed25519,
            SigningInner::P256(_) => Algorithm::EcdsaP256Sha256,
        }
    }

    /// The public half, as the verifier takes it.
    pub fn public_key(&self) -> PublicKey {
        match &self.0 {
            SigningInner::Ed25519(key) => PublicKey(KeyInner::Ed25519(key.verifying_key())),
            SigningInner::P256(key) => PublicKey(KeyInner::P256(*key.verifying_key())),
        }
    }

    /// The signature of `message`: 64 bytes, Ed25519's or P-256's raw `r || s` over SHA-256.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.0 {
            SigningInner::Ed25519(key) => ed25519_dalek::Signer::sign(key, message)
                .to_bytes()
                .to_vec(),
            SigningInner::P256(key) => {
                let signature: p256::ecdsa::Signature =
                    p256::ecdsa::signature::Signer::sign(key, message);
                signature.to_bytes().to_vec()
            }
        }
    }
}
