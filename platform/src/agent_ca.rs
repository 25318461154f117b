//! The deployment's agent CA (decisions §6): it turns an agent's PKCS#10 request into a
//! certificate that binds the agent's public key to its host id, and recognizes the
//! certificates it issued.
//!
//! The CA is ECDSA P-256 and lives ten years; it is stored as its certificate and its key, the
//! key sealed with `SECRETS_KEY` when one is configured (see [`AgentCa::to_stored`]). Agents
//! hold Ed25519 or ECDSA P-256 keys, the two algorithms the request signatures accept.
//!
//! Everything an agent sends is hostile until checked: the request's size, PEM framing, DER,
//! key algorithm and self-signature are checked in that order, and only its public key is used.
//! The subject, the extensions and the names it asks for are ignored: the certificate carries
//! the host id the service chose, as the subject CN and as the URI `urn:fleet:host:<host_id>`.

use std::fmt;

use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
    string::Ia5String,
};
use time::OffsetDateTime;
use x509_parser::{
    certificate::X509Certificate,
    certification_request::X509CertificationRequest,
    extensions::GeneralName,
    oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_SIG_ED25519},
    prelude::FromDer,
    x509::SubjectPublicKeyInfo,
};

use crate::crypto::{self, CryptoError};

/// The associated data the CA key is sealed with: a sealed value from another column does not
/// open as the CA key.
pub const CA_KEY_PURPOSE: &[u8] = b"agent-ca-key";

/// Largest request or certificate accepted, in bytes of PEM text. A P-256 or Ed25519 request
/// is under 1 KiB.
pub const MAX_PEM_LEN: usize = 16 * 1024;

/// Longest validity [`AgentCa::issue`] grants (the agent certificates live 90 days).
pub const MAX_VALIDITY_DAYS: i64 = 397;

/// The URI every agent certificate names its host by.
pub const HOST_URI_PREFIX: &str = "urn:fleet:host:";

const PLAIN_PREFIX: &str = "plain:";
const CA_VALIDITY_DAYS: i64 = 3650;
/// Tolerated clock skew between the service and an agent that checks its certificate.
const BACKDATE_MINUTES: i64 = 5;
const MAX_HOST_ID_LEN: usize = 64;

/// Why a request, a certificate or a stored CA was refused.
///
/// The `Csr*`, `UnsupportedKey` and `InvalidHostId` variants come from what a caller sent (a
/// 400-class answer); the `Certificate*`/`NotIssuedByThisCa`/`NotAnAgentCertificate` variants
/// from a presented certificate (401); the stored-CA variants are configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("certificate request is larger than {MAX_PEM_LEN} bytes")]
    CsrTooLarge,
    #[error("certificate request is not a PEM PKCS#10 request")]
    CsrMalformed,
    #[error("certificate request is not signed by its own key")]
    CsrSignatureInvalid,
    #[error("certificate request key must be Ed25519 or ECDSA P-256")]
    UnsupportedKey,
    #[error("host id must be 1 to {MAX_HOST_ID_LEN} letters, digits, '_', '-' or '.'")]
    InvalidHostId,
    #[error("certificate validity must be positive and at most {MAX_VALIDITY_DAYS} days")]
    InvalidValidity,
    #[error("the agent CA has expired")]
    CaExpired,
    #[error("certificate is not a single PEM X.509 certificate")]
    CertificateMalformed,
    #[error("certificate was not issued by this deployment's agent CA")]
    NotIssuedByThisCa,
    #[error("certificate is not an agent certificate")]
    NotAnAgentCertificate,
    #[error("the agent CA key is sealed but SECRETS_KEY is not set")]
    SecretsKeyMissing,
    #[error("the agent CA key cannot be unsealed with SECRETS_KEY: {0}")]
    SealedKeyUnreadable(CryptoError),
    #[error("stored agent CA is malformed: {0}")]
    StoredMalformed(&'static str),
    #[error("stored agent CA key does not match its certificate")]
    KeyDoesNotMatchCertificate,
    #[error("certificate could not be made: {0}")]
    Internal(String),
}

fn internal(e: rcgen::Error) -> CaError {
    CaError::Internal(e.to_string())
}

/// The agent CA as stored in the database. `key` is `v1:…` (sealed with [`CA_KEY_PURPOSE`])
/// or `plain:` followed by the PKCS#8 PEM when no `SECRETS_KEY` is configured.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCa {
    pub cert_pem: String,
    pub key: String,
}

impl StoredCa {
    /// Whether the key is sealed; a plain key can be sealed by storing `to_stored(Some(key))`
    /// once `SECRETS_KEY` is set.
    pub fn is_sealed(&self) -> bool {
        crypto::is_sealed(&self.key)
    }
}

impl fmt::Debug for StoredCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredCa")
            .field("cert_pem", &self.cert_pem)
            .field("key", &if self.is_sealed() { "sealed" } else { "plain" })
            .finish()
    }
}

/// A certificate issued to an agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub certificate_pem: String,
    /// The certificate's serial in lowercase hex: the agent's `key_id`.
    pub serial_hex: String,
    /// The agent's public key as a DER SubjectPublicKeyInfo, as it appears in the certificate.
    pub public_key_spki_der: Vec<u8>,
    pub not_after: DateTime<Utc>,
}

/// The deployment's agent CA: its certificate and signing key.
pub struct AgentCa {
    cert_pem: String,
    cert_der: Vec<u8>,
    common_name: String,
    not_after: DateTime<Utc>,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for AgentCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentCa")
            .field("common_name", &self.common_name)
            .field("not_after", &self.not_after)
            .field("key", &"[elided]")
            .finish()
    }
}

/// An agent's public key taken from its request.
struct RequestKey {
    raw: Vec<u8>,
    alg: &'static SignatureAlgorithm,
}

impl PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.raw
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

impl AgentCa {
    /// A new CA, ECDSA P-256, valid ten years from `now`.
    pub fn generate(now: DateTime<Utc>) -> Result<AgentCa, CaError> {
        let suffix = hex(&rand::random::<[u8; 8]>());
        Self::generate_named(now, &format!("Fleet agent CA {suffix}"))
    }

    fn generate_named(now: DateTime<Utc>, common_name: &str) -> Result<AgentCa, CaError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(internal)?;
        let mut params = CertificateParams::default();
        params.not_before = to_time(now - Duration::hours(1))?;
        params.not_after = to_time(now + Duration::days(CA_VALIDITY_DAYS))?;
        params.serial_number = Some(SerialNumber::from_slice(&random_serial()));
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(internal)?;
        Self::from_parts(cert.pem(), cert.der().to_vec(), key)
    }

    /// Checks that `cert_der` is a self-signed CA certificate for `key`.
    fn from_parts(cert_pem: String, cert_der: Vec<u8>, key: KeyPair) -> Result<AgentCa, CaError> {
        let cert = parse_certificate_der(&cert_der)
            .ok_or(CaError::StoredMalformed("certificate is not X.509"))?;
        if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(CaError::KeyDoesNotMatchCertificate);
        }
        if !cert.is_ca() || cert.verify_signature(None).is_err() {
            return Err(CaError::StoredMalformed(
                "certificate is not a self-signed CA certificate",
            ));
        }
        let common_name = common_name(&cert).unwrap_or_default();
        let not_after = from_time(cert.validity().not_after.timestamp()).ok_or(
            CaError::StoredMalformed("certificate validity out of range"),
        )?;
        let issuer = Issuer::from_ca_cert_der(&cert_der.as_slice().into(), key)
            .map_err(|_| CaError::StoredMalformed("certificate is not usable as an issuer"))?;
        Ok(AgentCa {
            cert_pem,
            cert_der,
            common_name,
            not_after,
            issuer,
        })
    }

    /// The CA certificate, PEM (the enrolment answer's `ca_certificate`).
    pub fn certificate_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    pub fn not_after(&self) -> DateTime<Utc> {
        self.not_after
    }

    /// The stored form; the key sealed under `secrets_key` when one is given.
    pub fn to_stored(&self, secrets_key: Option<&[u8; 32]>) -> StoredCa {
        let key_pem = self.issuer.key().serialize_pem();
        let key = match secrets_key {
            Some(secrets_key) => crypto::seal(secrets_key, key_pem.as_bytes(), CA_KEY_PURPOSE),
            None => format!("{PLAIN_PREFIX}{key_pem}"),
        };
        StoredCa {
            cert_pem: self.cert_pem.clone(),
            key,
        }
    }

    /// Loads a stored CA. A plain key is accepted with or without `secrets_key` (it was stored
    /// before one was configured; [`StoredCa::is_sealed`] tells the caller to re-seal it); a
    /// sealed key needs the key it was sealed with.
    pub fn from_stored(
        stored: &StoredCa,
        secrets_key: Option<&[u8; 32]>,
    ) -> Result<AgentCa, CaError> {
        let key_pem = if crypto::is_sealed(&stored.key) {
            let secrets_key = secrets_key.ok_or(CaError::SecretsKeyMissing)?;
            let bytes = crypto::open(secrets_key, &stored.key, CA_KEY_PURPOSE)
                .map_err(CaError::SealedKeyUnreadable)?;
            String::from_utf8(bytes).map_err(|_| CaError::StoredMalformed("key is not text"))?
        } else if let Some(pem) = stored.key.strip_prefix(PLAIN_PREFIX) {
            pem.to_owned()
        } else {
            return Err(CaError::StoredMalformed(
                "key is neither sealed (v1:) nor plain:",
            ));
        };
        let key = KeyPair::from_pem(&key_pem)
            .map_err(|_| CaError::StoredMalformed("key is not a PKCS#8 PEM private key"))?;
        let cert_der = pem_body(&stored.cert_pem, &["CERTIFICATE"])
            .ok_or(CaError::StoredMalformed("certificate is not PEM"))?;
        Self::from_parts(stored.cert_pem.clone(), cert_der, key)
    }

    /// Issues a client certificate for the key in `csr_pem`, naming `host_id`, valid from `now`
    /// (backdated a few minutes for clock skew) for `validity`, cut at the CA's own expiry.
    pub fn issue(
        &self,
        csr_pem: &str,
        host_id: &str,
        now: DateTime<Utc>,
        validity: Duration,
    ) -> Result<Issued, CaError> {
        if !valid_host_id(host_id) {
            return Err(CaError::InvalidHostId);
        }
        if validity <= Duration::zero() || validity > Duration::days(MAX_VALIDITY_DAYS) {
            return Err(CaError::InvalidValidity);
        }
        if now >= self.not_after {
            return Err(CaError::CaExpired);
        }
        let not_after = now
            .checked_add_signed(validity)
            .ok_or(CaError::InvalidValidity)?
            .min(self.not_after);

        let key = request_key(csr_pem)?;

        let mut params = CertificateParams::default();
        params.not_before = to_time(now - Duration::minutes(BACKDATE_MINUTES))?;
        params.not_after = to_time(not_after)?;
        params.serial_number = Some(SerialNumber::from_slice(&random_serial()));
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host_id);
        params.distinguished_name = name;
        let uri = Ia5String::try_from(format!("{HOST_URI_PREFIX}{host_id}"))
            .map_err(|_| CaError::InvalidHostId)?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).map_err(internal)?;

        // Read back what was written, so the caller stores exactly what the agent holds.
        let parsed = parse_certificate_der(cert.der())
            .ok_or_else(|| CaError::Internal("issued certificate does not parse".into()))?;
        let not_after = from_time(parsed.validity().not_after.timestamp())
            .ok_or_else(|| CaError::Internal("issued certificate validity".into()))?;
        Ok(Issued {
            certificate_pem: cert.pem(),
            serial_hex: serial_hex(&parsed),
            public_key_spki_der: parsed.public_key().raw.to_vec(),
            not_after,
        })
    }

    /// The public key of a well-formed, self-signed request as the DER SubjectPublicKeyInfo a
    /// certificate issued for it carries ([`Issued::public_key_spki_der`]), so a request can be
    /// matched with a certificate already issued for the same key.
    pub fn csr_public_key(csr_pem: &str) -> Result<Vec<u8>, CaError> {
        // Written as the certificate writes it.
        Ok(request_key(csr_pem)?.subject_public_key_info())
    }

    /// Checks that `certificate_pem` is an agent certificate signed by this CA and answers its
    /// serial (the `key_id`) and host id. Validity dates are not checked here: the caller
    /// compares the stored `not_after` with its clock.
    pub fn verify_issued(&self, certificate_pem: &str) -> Result<(String, String), CaError> {
        if certificate_pem.len() > MAX_PEM_LEN {
            return Err(CaError::CertificateMalformed);
        }
        let der =
            pem_body(certificate_pem, &["CERTIFICATE"]).ok_or(CaError::CertificateMalformed)?;
        let cert = parse_certificate_der(&der).ok_or(CaError::CertificateMalformed)?;
        let ca = parse_certificate_der(&self.cert_der)
            .ok_or_else(|| CaError::Internal("CA certificate does not parse".into()))?;
        if cert.issuer().as_raw() != ca.subject().as_raw()
            || cert.verify_signature(Some(ca.public_key())).is_err()
        {
            return Err(CaError::NotIssuedByThisCa);
        }
        if cert.is_ca() {
            return Err(CaError::NotAnAgentCertificate);
        }
        let san = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .ok_or(CaError::NotAnAgentCertificate)?;
        let mut hosts = san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::URI(uri) => uri.strip_prefix(HOST_URI_PREFIX),
                _ => None,
            });
        let host_id = match (hosts.next(), hosts.next()) {
            (Some(host_id), None) if valid_host_id(host_id) => host_id.to_owned(),
            _ => return Err(CaError::NotAnAgentCertificate),
        };
        Ok((serial_hex(&cert), host_id))
    }
}

/// The public key of a request, after checking its size, framing, algorithm and signature.
fn request_key(csr_pem: &str) -> Result<RequestKey, CaError> {
    if csr_pem.len() > MAX_PEM_LEN {
        return Err(CaError::CsrTooLarge);
    }
    let der = pem_body(csr_pem, &["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"])
        .ok_or(CaError::CsrMalformed)?;
    let csr = match X509CertificationRequest::from_der(&der) {
        Ok(([], csr)) => csr,
        _ => return Err(CaError::CsrMalformed),
    };
    let spki = &csr.certification_request_info.subject_pki;
    let alg = accepted_algorithm(spki).ok_or(CaError::UnsupportedKey)?;
    csr.verify_signature()
        .map_err(|_| CaError::CsrSignatureInvalid)?;
    Ok(RequestKey {
        raw: spki.subject_public_key.data.to_vec(),
        alg,
    })
}

/// Ed25519 (no parameters, 32 bytes) or P-256 (named curve, uncompressed point).
fn accepted_algorithm(spki: &SubjectPublicKeyInfo<'_>) -> Option<&'static SignatureAlgorithm> {
    let algorithm = &spki.algorithm;
    let key = spki.subject_public_key.data.as_ref();
    if algorithm.algorithm == OID_SIG_ED25519 {
        (algorithm.parameters.is_none() && key.len() == 32).then_some(&rcgen::PKCS_ED25519)
    } else if algorithm.algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = algorithm.parameters.as_ref()?.as_oid().ok()?;
        (curve == OID_EC_P256 && key.len() == 65 && key[0] == 0x04)
            .then_some(&rcgen::PKCS_ECDSA_P256_SHA256)
    } else {
        None
    }
}

/// The DER inside exactly one PEM block with one of `labels`, nothing but whitespace around it.
fn pem_body(text: &str, labels: &[&str]) -> Option<Vec<u8>> {
    let text = text.trim();
    let inner = labels.iter().find_map(|label| {
        text.strip_prefix(&format!("-----BEGIN {label}-----"))?
            .strip_suffix(&format!("-----END {label}-----"))
    })?;
    let base64: String = inner.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(base64)
        .ok()?;
    (!der.is_empty()).then_some(der)
}

fn parse_certificate_der(der: &[u8]) -> Option<X509Certificate<'_>> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Some(cert),
        _ => None,
    }
}

fn common_name(cert: &X509Certificate<'_>) -> Option<String> {
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The serial as lowercase hex without leading zero bytes (DER adds one to keep it positive).
fn serial_hex(cert: &X509Certificate<'_>) -> String {
    let raw = cert.raw_serial();
    let start = raw.iter().position(|&b| b != 0).unwrap_or(raw.len());
    hex(&raw[start..])
}

/// 126 random bits in 16 bytes, top bit clear (positive) and the next one set, so that every
/// serial encodes to 16 bytes and 32 hex digits.
fn random_serial() -> [u8; 16] {
    let mut serial: [u8; 16] = rand::random();
    serial[0] = (serial[0] & 0x3f) | 0x40;
    serial
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn valid_host_id(host_id: &str) -> bool {
    !host_id.is_empty()
        && host_id.len() <= MAX_HOST_ID_LEN
        && host_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn to_time(at: DateTime<Utc>) -> Result<OffsetDateTime, CaError> {
    OffsetDateTime::from_unix_timestamp(at.timestamp()).map_err(|_| CaError::InvalidValidity)
}

fn from_time(unix_seconds: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(unix_seconds, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::CertificateSigningRequest;
    use x509_parser::extensions::ParsedExtension;

    const SECRETS_KEY: [u8; 32] = [9; 32];

    /// `openssl req -new -newkey rsa:2048 -subj /CN=rsa-agent`
    const RSA_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIICWTCCAUECAQAwFDESMBAGA1UEAwwJcnNhLWFnZW50MIIBIjANBgkqhkiG9w0B
AQEFAAOCAQ8AMIIBCgKCAQEA8KedPxSWo/u7jPbsXjnl9sCIrLJJdNyx48Bfg5ma
iFwLKmgVT9Q/ZXhDK4WBYHSYYc3eK0DgFU7wYn3PMcVWZLw/8T6m8jXtdgRdlSOp
KAuCYQvSUdflprkeydyq9Pv0XC9Nq6ReRTxGYBGaxjnIB0WPKtcXxqLD/DOwUyC6
WCj2PB4hiCckgRKebRQ1dxbZQ1eB+giAqRef+W+ToZnO7osA+7eKUz/CwrdXDPmI
nY1zz9oFXgcosBxYd0pGkRy+u8LzPv9vhUWwXT5tzzxbB5gPnXY8JMVkWMPpJgq3
zc5p0/JjZIgx4yyE2UMMwGj311yOO0l6JtpQSNw7FE7CZQIDAQABoAAwDQYJKoZI
hvcNAQELBQADggEBAKFDFEvk/QHetvfUCeEKe0cF9Kl5F7wIxberLt2zGvNY1vP1
/dObrXF27oUqqXxdENj1XuxFUbIotdj3FYb19CqqIg3tOv/i0LQ7vUZG94WPOojU
aWuTtxRRMUJTnqBi2RBdT+93CI+ou8CAwYLpsjXim2nTgu1Pxh9oP4hcGl+IqsxT
KI0791esRVeXluvsMHvxAvVhOY4oYk9rGMiLc9AXDdyiBKaW5Rt4HLC/o4DlwQYD
ywSo2oyuoR2XeGh3qvjI5XU+YH385EnqBoO0x3JoOEZOLiaDbUH9KDbLCLPKFLTD
9kn1srt2JUrYzy18RREVIc8bk0srkabTkJfbdzg=
-----END CERTIFICATE REQUEST-----
";

    /// `openssl req -new -newkey ed25519 -subj /CN=ed-agent` asking for
    /// `subjectAltName=DNS:evil.example,URI:urn:fleet:host:hst_other` and `CA:TRUE`.
    const OPENSSL_ED25519_GREEDY_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHoMIGbAgEAMBMxETAPBgNVBAMMCGVkLWFnZW50MCowBQYDK2VwAyEAT33BS8K2
234k1U3IPqr0csSN8T9V2kvj76k7VozBXnygVTBTBgkqhkiG9w0BCQ4xRjBEMDEG
A1UdEQQqMCiCDGV2aWwuZXhhbXBsZYYYdXJuOmZsZWV0Omhvc3Q6aHN0X290aGVy
MA8GA1UdEwEB/wQFMAMBAf8wBQYDK2VwA0EAFsFIj9Gn+r5Up+jCcH1wAtUgA+5O
MBhPu2E/9HwU81PuNuIhWVNl8gTKOoVul3CuK44wirvZhcXj20hTzWvcCg==
-----END CERTIFICATE REQUEST-----
";

    /// `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj /CN=ec-agent`
    const OPENSSL_P256_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHNMHUCAQAwEzERMA8GA1UEAwwIZWMtYWdlbnQwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARYVD7yvYMDDKkvrnSVS2n9ukCo99V72+/w2f/aSM/09j4H0K9V5MRW
jD+Nxmwl1/oPr5iey8QqCvBB+AWHBcNroAAwCgYIKoZIzj0EAwIDSAAwRQIgNLlA
blTEffCO5uVwYp3SccICgM+2mjpXjDSkCA1pPbsCIQC2hWnSOK6wxB6FpffBEdBU
Tb2qKOKySJOyDvyv/hRVWQ==
-----END CERTIFICATE REQUEST-----
";

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-02T10:00:00Z")
            .expect("valid date")
            .with_timezone(&Utc)
    }

    fn ca() -> AgentCa {
        AgentCa::generate(now()).expect("CA")
    }

    fn agent_key(alg: &'static SignatureAlgorithm) -> KeyPair {
        KeyPair::generate_for(alg).expect("agent key")
    }

    fn csr_for(key: &KeyPair) -> CertificateSigningRequest {
        CertificateParams::new(Vec::<String>::new())
            .expect("params")
            .serialize_request(key)
            .expect("csr")
    }

    fn pem(label: &str, der: &[u8]) -> String {
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        )
    }

    fn parse_pem_certificate(certificate_pem: &str) -> Vec<u8> {
        pem_body(certificate_pem, &["CERTIFICATE"]).expect("PEM certificate")
    }

    #[test]
    fn a_request_names_the_key_its_certificate_carries() {
        let ca = ca();
        for csr in [
            csr_for(&agent_key(&rcgen::PKCS_ED25519))
                .pem()
                .expect("pem"),
            csr_for(&agent_key(&rcgen::PKCS_ECDSA_P256_SHA256))
                .pem()
                .expect("pem"),
            OPENSSL_P256_CSR.to_owned(),
        ] {
            let issued = ca
                .issue(
                    &csr,
                    "hst_01jq0000000000000000000000",
                    now(),
                    Duration::days(90),
                )
                .expect("issued");
            assert_eq!(
                AgentCa::csr_public_key(&csr).expect("key"),
                issued.public_key_spki_der
            );
        }
        assert!(matches!(
            AgentCa::csr_public_key(RSA_CSR),
            Err(CaError::UnsupportedKey)
        ));
    }

    #[test]
    fn the_ca_and_its_debug_form_hide_the_key() {
        fn shared<T: Send + Sync>() {}
        shared::<AgentCa>();
        let ca = ca();
        assert!(ca.common_name().starts_with("Fleet agent CA "));
        assert_eq!(ca.not_after(), now() + Duration::days(3650));
        let key_pem = ca.issuer.key().serialize_pem();
        let debug = format!("{ca:?} {:?}", ca.to_stored(None));
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
        assert!(!debug.contains(&key_pem[40..80]), "{debug}");
        let der = parse_pem_certificate(ca.certificate_pem());
        let cert = parse_certificate_der(&der).expect("certificate");
        assert!(cert.is_ca());
        assert_eq!(
            cert.public_key().algorithm.algorithm,
            OID_KEY_TYPE_EC_PUBLIC_KEY
        );
    }

    #[test]
    fn a_sealed_ca_loads_back_only_with_its_secrets_key() {
        let ca = ca();
        let stored = ca.to_stored(Some(&SECRETS_KEY));
        assert!(stored.is_sealed());
        assert!(stored.key.starts_with("v1:"));
        assert!(!stored.key.contains("PRIVATE KEY"));

        let loaded = AgentCa::from_stored(&stored, Some(&SECRETS_KEY)).expect("loads");
        assert_eq!(loaded.certificate_pem(), ca.certificate_pem());
        assert_eq!(loaded.common_name(), ca.common_name());
        assert_eq!(
            loaded.issuer.key().serialize_der(),
            ca.issuer.key().serialize_der()
        );

        assert!(matches!(
            AgentCa::from_stored(&stored, None),
            Err(CaError::SecretsKeyMissing)
        ));
        assert!(matches!(
            AgentCa::from_stored(&stored, Some(&[1; 32])),
            Err(CaError::SealedKeyUnreadable(CryptoError::Unauthentic))
        ));
        // The same key sealed for another purpose does not open as the CA key.
        let key_pem = ca.issuer.key().serialize_pem();
        let other_purpose = StoredCa {
            key: crypto::seal(&SECRETS_KEY, key_pem.as_bytes(), b"channel-config"),
            ..stored.clone()
        };
        assert!(matches!(
            AgentCa::from_stored(&other_purpose, Some(&SECRETS_KEY)),
            Err(CaError::SealedKeyUnreadable(_))
        ));
    }

    #[test]
    fn a_plain_ca_loads_back_with_or_without_a_secrets_key() {
        let ca = ca();
        let stored = ca.to_stored(None);
        assert!(!stored.is_sealed());
        assert!(stored.key.starts_with("plain:-----BEGIN PRIVATE KEY-----"));
        let loaded = AgentCa::from_stored(&stored, None).expect("loads");
        assert_eq!(loaded.certificate_pem(), ca.certificate_pem());
        let resealed = AgentCa::from_stored(&stored, Some(&SECRETS_KEY))
            .expect("loads")
            .to_stored(Some(&SECRETS_KEY));
        assert!(resealed.is_sealed());
        AgentCa::from_stored(&resealed, Some(&SECRETS_KEY)).expect("loads");
    }

    #[test]
    fn a_stored_ca_with_garbage_or_a_foreign_key_is_refused() {
        let ca = ca();
        let stored = ca.to_stored(None);
        let other_ca = AgentCa::generate(now()).expect("CA").to_stored(None);
        let mixed = StoredCa {
            key: other_ca.key,
            ..stored.clone()
        };
        assert!(matches!(
            AgentCa::from_stored(&mixed, None),
            Err(CaError::KeyDoesNotMatchCertificate)
        ));
        for bad in [
            StoredCa {
                key: "-----BEGIN PRIVATE KEY-----".into(),
                ..stored.clone()
            },
            StoredCa {
                key: "plain:nonsense".into(),
                ..stored.clone()
            },
            StoredCa {
                cert_pem: "nonsense".into(),
                ..stored.clone()
            },
            StoredCa {
                cert_pem: pem("CERTIFICATE", b"\x30\x03\x02\x01\x01"),
                ..stored.clone()
            },
        ] {
            assert!(
                matches!(
                    AgentCa::from_stored(&bad, None),
                    Err(CaError::StoredMalformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    fn check_issued(ca: &AgentCa, key: &KeyPair, issued: &Issued, host_id: &str) {
        let der = parse_pem_certificate(&issued.certificate_pem);
        let cert = parse_certificate_der(&der).expect("certificate");
        let ca_der = parse_pem_certificate(ca.certificate_pem());
        let ca_cert = parse_certificate_der(&ca_der).expect("CA certificate");
        cert.verify_signature(Some(ca_cert.public_key()))
            .expect("signed by the CA");

        assert_eq!(issued.serial_hex.len(), 32);
        assert_eq!(issued.serial_hex, hex(cert.raw_serial()));
        assert!(
            issued
                .serial_hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(issued.public_key_spki_der, cert.public_key().raw);
        assert_eq!(issued.public_key_spki_der, key.subject_public_key_info());
        assert_eq!(issued.not_after, now() + Duration::days(90));
        assert_eq!(
            cert.validity().not_before.timestamp(),
            (now() - Duration::minutes(5)).timestamp()
        );
        assert_eq!(common_name(&cert).as_deref(), Some(host_id));
        assert!(!cert.is_ca());

        let mut saw_san = false;
        let mut saw_eku = false;
        for ext in cert.extensions() {
            match ext.parsed_extension() {
                ParsedExtension::SubjectAlternativeName(san) => {
                    saw_san = true;
                    assert_eq!(
                        san.general_names,
                        vec![GeneralName::URI(&format!("urn:fleet:host:{host_id}"))]
                    );
                }
                ParsedExtension::ExtendedKeyUsage(eku) => {
                    saw_eku = true;
                    assert!(eku.client_auth && !eku.server_auth && !eku.any);
                }
                ParsedExtension::BasicConstraints(bc) => assert!(!bc.ca),
                _ => {}
            }
        }
        assert!(saw_san && saw_eku);

        assert_eq!(
            ca.verify_issued(&issued.certificate_pem).expect("verifies"),
            (issued.serial_hex.clone(), host_id.to_owned())
        );
    }

    #[test]
    fn an_ed25519_request_gets_a_client_certificate_for_the_host() {
        let ca = ca();
        let key = agent_key(&rcgen::PKCS_ED25519);
        let csr = csr_for(&key).pem().expect("pem");
        let host = "hst_06f0tq6a5kqkd0000000000000";
        let issued = ca
            .issue(&csr, host, now(), Duration::days(90))
            .expect("issued");
        check_issued(&ca, &key, &issued, host);
    }

    #[test]
    fn a_p256_request_gets_a_client_certificate_for_the_host() {
        let ca = ca();
        let key = agent_key(&rcgen::PKCS_ECDSA_P256_SHA256);
        let csr = csr_for(&key).pem().expect("pem");
        let issued = ca
            .issue(&csr, "hst_p256", now(), Duration::days(90))
            .expect("issued");
        check_issued(&ca, &key, &issued, "hst_p256");
        let again = ca
            .issue(&csr, "hst_p256", now(), Duration::days(90))
            .expect("issued");
        assert_ne!(again.serial_hex, issued.serial_hex);
    }

    #[test]
    fn openssl_requests_are_accepted_and_what_they_ask_for_is_ignored() {
        let ca = ca();
        let issued = ca
            .issue(OPENSSL_P256_CSR, "hst_ec", now(), Duration::days(90))
            .expect("P-256");
        assert_eq!(
            ca.verify_issued(&issued.certificate_pem)
                .expect("verifies")
                .1,
            "hst_ec"
        );

        let issued = ca
            .issue(
                OPENSSL_ED25519_GREEDY_CSR,
                "hst_mine",
                now(),
                Duration::days(90),
            )
            .expect("Ed25519");
        let der = parse_pem_certificate(&issued.certificate_pem);
        let cert = parse_certificate_der(&der).expect("certificate");
        assert!(!cert.is_ca());
        assert_eq!(common_name(&cert).as_deref(), Some("hst_mine"));
        assert_eq!(
            ca.verify_issued(&issued.certificate_pem)
                .expect("verifies")
                .1,
            "hst_mine"
        );
    }

    #[test]
    fn requests_with_other_keys_are_refused() {
        let ca = ca();
        assert!(matches!(
            ca.issue(RSA_CSR, "hst_a", now(), Duration::days(90)),
            Err(CaError::UnsupportedKey)
        ));
        let p384 = csr_for(&agent_key(&rcgen::PKCS_ECDSA_P384_SHA384))
            .pem()
            .expect("pem");
        assert!(matches!(
            ca.issue(&p384, "hst_a", now(), Duration::days(90)),
            Err(CaError::UnsupportedKey)
        ));
    }

    #[test]
    fn a_request_whose_signature_does_not_verify_is_refused() {
        let ca = ca();
        for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P256_SHA256] {
            let csr = csr_for(&agent_key(alg));
            let der = csr.der().to_vec();

            // A flipped bit in the signature.
            let mut bad_signature = der.clone();
            let last = bad_signature.len() - 1;
            bad_signature[last] ^= 0x01;
            // A key swapped for another of the same kind: the signature no longer matches.
            let other = agent_key(alg);
            let mut swapped_key = der.clone();
            let own = csr_key_bytes(&der);
            let pos = swapped_key
                .windows(own.len())
                .position(|w| w == own.as_slice())
                .expect("key in request");
            swapped_key[pos..pos + own.len()].copy_from_slice(other.public_key_raw());

            for der in [bad_signature, swapped_key] {
                let text = pem("CERTIFICATE REQUEST", &der);
                assert!(
                    matches!(
                        ca.issue(&text, "hst_a", now(), Duration::days(90)),
                        Err(CaError::CsrSignatureInvalid)
                    ),
                    "{alg:?}"
                );
            }
        }
    }

    fn csr_key_bytes(der: &[u8]) -> Vec<u8> {
        let (_, csr) = X509CertificationRequest::from_der(der).expect("csr");
        csr.certification_request_info
            .subject_pki
            .subject_public_key
            .data
            .to_vec()
    }

    #[test]
    fn garbage_requests_are_typed_errors() {
        let ca = ca();
        let valid = csr_for(&agent_key(&rcgen::PKCS_ED25519))
            .pem()
            .expect("pem");
        let issue = |text: &str| ca.issue(text, "hst_a", now(), Duration::days(90));
        for text in [
            "",
            "hello",
            "-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----",
            "-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----",
            "-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----",
            &valid.replace("CERTIFICATE REQUEST", "CERTIFICATE"),
            &format!("{valid}{valid}"),
            &valid[..valid.len() / 2],
            ca.certificate_pem(),
        ] {
            assert!(
                matches!(issue(text), Err(CaError::CsrMalformed)),
                "{text:?}"
            );
        }
        let huge = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----",
            "A".repeat(MAX_PEM_LEN)
        );
        assert!(matches!(issue(&huge), Err(CaError::CsrTooLarge)));
    }

    #[test]
    fn no_corruption_of_a_request_makes_it_panic() {
        let ca = ca();
        let der = csr_for(&agent_key(&rcgen::PKCS_ECDSA_P256_SHA256))
            .der()
            .to_vec();
        for i in 0..der.len() {
            for mask in [0x01, 0x80, 0xff] {
                let mut altered = der.clone();
                altered[i] ^= mask;
                let text = pem("CERTIFICATE REQUEST", &altered);
                // Whatever the answer, it is an answer; a changed byte never yields a
                // certificate for a key other than one whose signature verified.
                if let Ok(issued) = ca.issue(&text, "hst_a", now(), Duration::days(90)) {
                    assert_eq!(
                        issued.public_key_spki_der[issued.public_key_spki_der.len() - 65..],
                        csr_key_bytes(&altered)[..]
                    );
                }
            }
            let truncated = pem("CERTIFICATE REQUEST", &der[..i]);
            assert!(
                ca.issue(&truncated, "hst_a", now(), Duration::days(90))
                    .is_err()
            );
        }
    }

    #[test]
    fn bad_host_ids_and_validities_are_refused() {
        let ca = ca();
        let csr = csr_for(&agent_key(&rcgen::PKCS_ED25519))
            .pem()
            .expect("pem");
        for host in ["", "a b", "hst/../x", "é", &"h".repeat(65), "a,CN=x"] {
            assert!(
                matches!(
                    ca.issue(&csr, host, now(), Duration::days(90)),
                    Err(CaError::InvalidHostId)
                ),
                "{host:?}"
            );
        }
        for validity in [Duration::zero(), Duration::days(-1), Duration::days(398)] {
            assert!(matches!(
                ca.issue(&csr, "hst_a", now(), validity),
                Err(CaError::InvalidValidity)
            ));
        }
        assert!(matches!(
            ca.issue(
                &csr,
                "hst_a",
                now() + Duration::days(3651),
                Duration::days(90)
            ),
            Err(CaError::CaExpired)
        ));
        // Near the end of the CA's life a certificate stops with the CA.
        let late = now() + Duration::days(3600);
        let issued = ca
            .issue(&csr, "hst_a", late, Duration::days(90))
            .expect("issued");
        assert_eq!(issued.not_after, ca.not_after());
    }

    #[test]
    fn a_certificate_from_another_ca_is_not_ours() {
        let ours = ca();
        let theirs = ca();
        let csr = csr_for(&agent_key(&rcgen::PKCS_ED25519))
            .pem()
            .expect("pem");
        let foreign = theirs
            .issue(&csr, "hst_a", now(), Duration::days(90))
            .expect("issued");
        assert!(matches!(
            ours.verify_issued(&foreign.certificate_pem),
            Err(CaError::NotIssuedByThisCa)
        ));

        // Same name, different key: the signature gives it away.
        let impostor = AgentCa::generate_named(now(), ours.common_name()).expect("CA");
        let forged = impostor
            .issue(&csr, "hst_a", now(), Duration::days(90))
            .expect("issued");
        assert!(matches!(
            ours.verify_issued(&forged.certificate_pem),
            Err(CaError::NotIssuedByThisCa)
        ));

        assert!(matches!(
            ours.verify_issued(ours.certificate_pem()),
            Err(CaError::NotAnAgentCertificate)
        ));
        for garbage in ["", "nonsense", &csr] {
            assert!(matches!(
                ours.verify_issued(garbage),
                Err(CaError::CertificateMalformed)
            ));
        }
    }
}
